"""What evaluation passes to the report's speaker bootstrap: test speakers from utt2spk; the option checked."""

import pytest
from test_evaluation import load_tiny_hparams, tiny_overrides

from segreconcat_aug.data.kaldi import read_kaldi_map
from segreconcat_aug.errors import OptionError
from segreconcat_aug.evaluation.trials import load_system_trials


def test_trial_lists_carry_the_test_speakers_of_utt2spk(vpac_root):
    _, trials = load_system_trials(vpac_root, "T8-5", subsets=["dev_f", "test_m"])
    for name, part, gender in (("dev_f", "dev", "f"), ("test_m", "test", "m")):
        utt2spk = read_kaldi_map(
            vpac_root / "T8-5" / "data" / f"libri_{part}_trials_{gender}_T8-5" / "utt2spk"
        )
        listed = trials[name]
        assert listed.test_speakers == [utt2spk[utt] for utt in listed.test_utterances]
        # A target trial's test speaker is its enrollment speaker.
        assert all(
            s == e for s, e, t in zip(listed.test_speakers, listed.enroll_speakers, listed.targets) if t
        )


@pytest.mark.parametrize("value", [-1, 2.5, "many", True])
def test_bad_resamples_option_is_refused_before_anything_is_written(vpac_root, tmp_path, value):
    with pytest.raises(OptionError, match=rf"option eval_bootstrap_resamples: {value!r}: input should be"):
        load_tiny_hparams(tiny_overrides(vpac_root, tmp_path / "run", eval_bootstrap_resamples=value))
    assert not (tmp_path / "run").exists()

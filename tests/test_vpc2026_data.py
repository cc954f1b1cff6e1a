"""VPC 2026 data as its toolkit leaves it and scores it (issue 28): wav-only anonymized folders completed
from their originals, trial lists from the original folders, audio at other rates resampled, repeated
trial pairs collapsed, ids without audio skipped, one utterance embedded at a time; and the documented
flow on a copy of the bundled demo (make_mixed_trials.py, then evaluate.py --protocol=vpc2026-track1).

The reference score (:func:`toolkit_scores`) is the 2026 toolkit's procedure as we read it
(``evaluate_asv.py``, ``asv.py: eer_compute``, ``speaker_extraction.py``, ``utils.py: normalize_wave`` at
e6810a4), written here step by step with pyloudnorm, ``torchaudio.transforms.Resample`` and SpeechBrain's
EER; none of the toolkit's code.
"""

import importlib.util
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
import pyloudnorm
import pytest
import soundfile
import torch
import torchaudio
from test_evaluation import TINY, export_random_model, load_tiny_hparams, tiny_overrides
from vpc2026_fixture import UNKNOWN_UTTERANCE, build_track1_layout, strip_to_audio

from segreconcat_aug.data.kaldi import read_kaldi_map
from segreconcat_aug.errors import UserError
from segreconcat_aug.evaluation.embeddings import EmbeddingExtractor
from segreconcat_aug.evaluation.system import evaluate_system
from segreconcat_aug.evaluation.system_report import read_results
from segreconcat_aug.evaluation.trials import load_system_trials

REPO = Path(__file__).resolve().parents[1]
HPARAMS = str(REPO / "hparams" / "ecapa_segreconcat.yaml")
MODEL_ARGS = [f"--{key}={value}".replace(" ", "") for key, value in TINY.items()]
FAST = {"eval_bootstrap_resamples": 0, "eval_privacy": False, "eval_det_plot": False}


def _recipe(name):
    spec = importlib.util.spec_from_file_location(f"{name}_recipe", REPO / "recipes" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _snapshot(root: Path) -> dict:
    return {p.relative_to(root).as_posix(): p.stat().st_mtime_ns for p in sorted(root.rglob("*"))}


@pytest.fixture(scope="module")
def layouts(tmp_path_factory):
    """The same B4 data twice: complete folders, and as B4's pipeline leaves them (wav/*.wav only); the
    anonymized audio at 22.05 kHz, trial lists only in the original folders; one random tiny model."""
    torch.set_num_threads(1)
    base = tmp_path_factory.mktemp("vpc2026-b4")
    complete = build_track1_layout(base / "complete", systems=("B4",), rate=22050)
    wav_only = base / "wav-only"
    shutil.copytree(complete, wav_only)
    stripped = strip_to_audio(wav_only, "B4")
    assert stripped and all(not [p for p in folder.iterdir() if p.is_file()] for folder in stripped)
    hparams = load_tiny_hparams(
        tiny_overrides(complete, base / "model", system="B4", protocol="vpc2026-track1", **FAST)
    )
    export_random_model(hparams)
    return complete, wav_only, hparams


def _evaluate(hparams, root, eval_folder, **options):
    return evaluate_system({**hparams, "data_folder": str(root), "eval_folder": str(eval_folder), **options})


def toolkit_embedding(path, modules):
    """The 2026 toolkit's utterance embedding for an ``ecapa`` model: read, normalize_wave (-30 LUFS with block
    min(0.4, max(0.1, d - 1e-6)), then divided by the peak), resampled to 16 kHz, zeros trimmed, encoded."""
    wave, rate = soundfile.read(str(path), dtype="float32")
    duration = len(wave) / rate
    meter = pyloudnorm.Meter(rate, block_size=min(0.4, max(0.1, duration - 1e-6)))
    loud = pyloudnorm.normalize.loudness(wave, meter.integrated_loudness(wave), -30.0)
    wave = torch.Tensor(np.divide(loud, np.amax(np.abs(loud))))
    if rate != 16000:
        wave = torchaudio.transforms.Resample(orig_freq=rate, new_freq=16000)(wave)
    wave = torch.tensor(np.trim_zeros(wave.numpy())).unsqueeze(0)
    with torch.no_grad():
        lengths = torch.ones(1)
        feats = modules["mean_var_norm"](modules["compute_features"](wave), lengths)
        return modules["embedding_model"](feats, lengths).reshape(-1).numpy()


def toolkit_scores(root: Path, system: str, part: str, modules) -> dict:
    """``eer_compute`` of the pooled list: trials from ``data/<set>/trials`` (a dict keyed by the pair:
    a repeated pair counts once), enrollment = the mean of the utt2spk utterances' embeddings, a trial
    without an embedding skipped. Audio: ``<folder>/wav/<utt>.wav`` (what the toolkit's completed wav.scp
    names). Returns ``{(speaker, utterance): (target, score)}``."""
    data = root / "data"
    enroll = data / f"libri_{part}_enrolls_{system}"
    test = data / f"libri_{part}_trials_mixed_{system}"
    speakers = {}
    for utt, speaker in read_kaldi_map(data / f"libri_{part}_enrolls" / "utt2spk").items():
        speakers.setdefault(speaker, []).append(toolkit_embedding(enroll / "wav" / f"{utt}.wav", modules))
    models = {speaker: np.mean(vectors, axis=0) for speaker, vectors in speakers.items()}
    trials = {}
    for line in (data / f"libri_{part}_trials_mixed" / "trials").read_text().splitlines():
        speaker, utt, label = line.split()
        if speaker in models and (test / "wav" / f"{utt}.wav").is_file():
            trials[(speaker, utt)] = label == "target"
    scores = {}
    for (speaker, utt), target in trials.items():
        a, b = models[speaker], toolkit_embedding(test / "wav" / f"{utt}.wav", modules)
        scores[(speaker, utt)] = (target, float(a @ b / np.linalg.norm(a) / np.linalg.norm(b)))
    return scores


def test_wav_only_22khz_folders_with_trials_in_the_originals_score_as_the_toolkit_scores(layouts, tmp_path):
    from speechbrain.utils.metric_stats import EER

    complete, wav_only, hparams = layouts
    before = _snapshot(wav_only)
    # As a user would: evaluate.py on the folders as B4's pipeline left them.
    argv = [HPARAMS, "--protocol=vpc2026-track1", f"--data_folder={wav_only}", "--system=B4"]
    argv += [
        f"--output_folder={hparams['output_folder']}",
        f"--eval_folder={tmp_path / 'wav-only'}",
        *MODEL_ARGS,
    ]
    argv += [f"--{key}={value}" for key, value in FAST.items()]
    stripped = _recipe("evaluate").main(argv)
    assert _snapshot(wav_only) == before  # nothing written into the data folder
    full = _evaluate(hparams, complete, tmp_path / "complete")
    for name in ("dev_mixed", "test_mixed"):
        # The wav-only layout gives exactly the complete layout's scores and EER.
        np.testing.assert_array_equal(stripped.subsets[name].scores, full.subsets[name].scores)
        assert stripped.metrics[name]["eer"] == full.metrics[name]["eer"]
        # ... which are the toolkit's: its trial list, its waves (resampled after normalizing), its EER.
        reference = toolkit_scores(wav_only, "B4", name.split("_")[0], hparams)
        subset = stripped.subsets[name]
        assert list(zip(subset.enroll, subset.test)) == list(reference)
        np.testing.assert_allclose(subset.scores, [score for _, score in reference.values()], atol=2e-6)
        positives = torch.tensor([score for target, score in reference.values() if target])
        negatives = torch.tensor([score for target, score in reference.values() if not target])
        assert stripped.metrics[name]["eer"] == pytest.approx(100 * EER(positives, negatives)[0], abs=1e-4)
    assert stripped.metrics["dev_mixed"]["skipped_trials"] == 1  # UNKNOWN_UTTERANCE, as the toolkit skips it
    saved = read_results(tmp_path / "wav-only")
    options = saved["options"]
    assert options["trials_from"] == "original" and options["resample"] is True
    assert options["trial_lists"]["dev_mixed"] == str(wav_only / "data" / "libri_dev_trials_mixed" / "trials")
    warnings = "\n".join(saved["warnings"])
    assert "resampled to 16000 Hz after the wave normalization" in warnings and "at 22050 Hz" in warnings
    assert "libri_dev_trials_mixed_B4: wav.scp from" in warnings  # what was completed, and from where
    assert "libri_dev_enrolls_B4: utt2spk from" in warnings and str(UNKNOWN_UTTERANCE) not in options


def test_other_rates_stay_refused_under_vpac2024_conventions(layouts, tmp_path):
    complete, _, hparams = layouts
    with pytest.raises(UserError, match=r"22050 Hz, expected 16000 Hz"):
        _evaluate(hparams, complete, tmp_path / "e", eval_resample=False, eval_subsets=["dev_mixed"])


def test_the_anonymized_folders_own_list_is_the_named_option(layouts, tmp_path):
    complete, _, hparams = layouts
    data = tmp_path / "data-root"
    shutil.copytree(complete, data)
    own = data / "data" / "libri_dev_trials_mixed_B4" / "trials"
    lines = (data / "data" / "libri_dev_trials_mixed" / "trials").read_text().splitlines()
    kept = [line for line in lines if UNKNOWN_UTTERANCE not in line][:-3]  # another list: three lines fewer
    own.write_text("\n".join(kept) + "\n")
    subsets = {"eval_subsets": ["dev_mixed"]}
    default = _evaluate(hparams, data, tmp_path / "default", **subsets)
    assert default.options["trial_lists"]["dev_mixed"] == str(
        data / "data" / "libri_dev_trials_mixed" / "trials"
    )
    assert (
        len(default.subsets["dev_mixed"].targets) == len(lines) - 1
    )  # the original's, UNKNOWN_UTTERANCE skipped
    assert any(f"{own} differs from" in warning for warning in default.warnings)
    anonymized = _evaluate(hparams, data, tmp_path / "own", eval_trials_from="anonymized", **subsets)
    assert anonymized.options["trial_lists"]["dev_mixed"] == str(own)
    assert len(anonymized.subsets["dev_mixed"].targets) == len(kept)


def test_repeated_trial_pairs_count_once_and_are_counted_in_the_report(layouts, tmp_path):
    """Issue 28: five repeated target lines were scored twice (35 targets instead of 30), without a word."""
    complete, _, hparams = layouts
    data = tmp_path / "data-root"
    shutil.copytree(complete, data)
    original = data / "data" / "libri_dev_trials_mixed" / "trials"
    lines = original.read_text().splitlines()
    targets = [line for line in lines if line.endswith(" target")]
    repeated = [
        *targets,
        next(line for line in lines if line.endswith(" nontarget")),
    ]  # 4 targets, 1 non-target
    original.write_text("\n".join([*lines, *repeated]) + "\n")
    subsets = {"eval_subsets": ["dev_mixed"]}
    results = _evaluate(hparams, data, tmp_path / "collapsed", **subsets)
    metrics = results.metrics["dev_mixed"]
    assert (metrics["target_trials"], metrics["duplicate_trials"]) == (len(targets), 5)
    assert (
        metrics["target_trials"] + metrics["nontarget_trials"] == len(lines) - 1
    )  # UNKNOWN_UTTERANCE skipped
    report = (tmp_path / "collapsed" / "results.md").read_text()
    assert "5 line(s) of" in report and "scored once each, as the VPC code does" in report
    kept = _evaluate(hparams, data, tmp_path / "kept", eval_duplicate_trials="keep", **subsets)
    assert kept.metrics["dev_mixed"]["target_trials"] == 2 * len(targets)
    # The same pair labelled both ways is a broken list: refused, naming both lines.
    first = targets[0].rsplit(" ", 1)[0]
    original.write_text("\n".join([*lines, f"{first} nontarget"]) + "\n")
    with pytest.raises(
        UserError, match=rf"trials:{len(lines) + 1}: {first} is a nontarget trial here and a target"
    ):
        load_system_trials(data, "B4", protocol="vpc2026-track1", skip_missing=True)


def test_ids_without_audio_or_speaker_are_skipped_and_counted_under_2026_and_refused_under_2024(
    layouts, tmp_path
):
    """Issue 28: Track 2's cn/ja folders list utterances in utt2spk that wav.scp lacks; the toolkit skips them."""
    complete, _, _ = layouts
    data = tmp_path / "data-root"
    shutil.copytree(complete, data)
    folder = data / "data" / "libri_dev_trials_mixed_B4"
    utt2spk = folder / "utt2spk"
    utt2spk.write_text(utt2spk.read_text() + "cn0001.wav 1272\n")  # in utt2spk only
    wav_scp = folder / "wav.scp"
    extra = next(iter(read_kaldi_map(wav_scp).values()))
    wav_scp.write_text(wav_scp.read_text() + f"stray-utt {extra}\n")  # in wav.scp only
    _, trials = load_system_trials(data, "B4", protocol="vpc2026-track1", skip_missing=True)
    notes = "\n".join(trials["dev_mixed"].notes)
    assert "1 utterance(s) of utt2spk have no wav.scp entry" in notes and "cn0001.wav" in notes
    assert "1 utterance(s) of wav.scp have no speaker in utt2spk" in notes and "stray-utt" in notes
    with pytest.raises(UserError, match=r"utt2spk: 1 utterance\(s\) of wav.scp have no speaker"):
        load_system_trials(data, "B4", protocol="vpc2026-track1", skip_missing=False)
    # A trial naming an utterance with '.wav' that wav.scp lists without it: found, as the 2026 lookup finds it.
    original = data / "data" / "libri_dev_trials_mixed" / "trials"
    lines = original.read_text().splitlines()
    speaker, utt, label = lines[0].split()
    original.write_text("\n".join([f"{speaker} {utt}.wav {label}", *lines[1:]]) + "\n")
    _, trials = load_system_trials(data, "B4", protocol="vpc2026-track1", skip_missing=True)
    assert trials["dev_mixed"].test_utterances[0] == utt and trials["dev_mixed"].skipped == 1


def test_one_utterance_at_a_time_is_the_default_and_padded_batches_a_named_option(layouts):
    complete, _, hparams = layouts
    wav = read_kaldi_map(complete / "data" / "libri_dev_enrolls_B4" / "wav.scp")
    sources = [str(complete / path) for path in wav.values()][:6]
    modules = [hparams[key] for key in ("compute_features", "mean_var_norm", "embedding_model")]
    options = {"normalize_wave": "vpc2026", "resample": True}
    exact = EmbeddingExtractor(*modules, **options)
    alone = np.stack([exact.embed_batch([source])[0] for source in sources])
    # The default embeds each alone; a padded batch changes every embedding but its longest.
    padded = EmbeddingExtractor(*modules, padded=True, batch_size=6, **options).embed_batch(sources)
    assert not exact.padded and not np.allclose(padded, alone, atol=1e-6)
    with tempfile.TemporaryDirectory() as cache:
        found = exact.embed(dict(enumerate(sources)), cache)
    np.testing.assert_array_equal(np.stack([found[k] for k in range(len(sources))]), alone)


def test_make_mixed_trials_then_vpc2026_track1_on_a_copy_of_the_demo(tmp_path):
    """Issue 28: on the bundled demo, the documented flow stopped at "60 of 100 ... missing" (wav.scp lines
    copied unchanged, the demo's paths relative to their folder)."""
    source = REPO / "demo" / "data"
    root = tmp_path / "demo-data"
    shutil.copytree(source / "MCADAMS", root / "MCADAMS", ignore=shutil.ignore_patterns("train-clean-360*"))
    sys.path.insert(0, str(REPO / "recipes"))
    import make_mixed_trials

    made = make_mixed_trials.main(
        [str(REPO / "hparams" / "mixed_trials.yaml"), f"--data_folder={root}", "--system=MCADAMS"]
    )
    assert [p.name for p in made] == ["libri_dev_trials_mixed_MCADAMS", "libri_test_trials_mixed_MCADAMS"]
    hparams = load_tiny_hparams(
        tiny_overrides(root, tmp_path / "out", system="MCADAMS", protocol="vpc2026-track1", **FAST)
    )
    export_random_model(hparams)
    argv = [HPARAMS, "--protocol=vpc2026-track1", f"--data_folder={root}", "--system=MCADAMS"]
    argv += [f"--output_folder={tmp_path / 'out'}", f"--eval_folder={tmp_path / 'out' / 'eval-vpc2026'}"]
    results = _recipe("evaluate").main([*argv, *MODEL_ARGS, *(f"--{k}={v}" for k, v in FAST.items())])
    assert results.options["layout"] == "vpac2024" and set(results.table_row()) == {
        "dev_mixed",
        "test_mixed",
        "avg",
    }
    for part in ("dev", "test"):
        pooled = results.metrics[f"{part}_mixed"]
        assert pooled["skipped_trials"] == 0 and pooled["target_trials"] > 0


def test_align_and_orders_read_a_wav_only_training_folder_from_its_original(layouts):
    """recipes/align.py and compute_orders.py read their folder through read_inputs."""
    from segreconcat_aug.data.vpac import read_inputs

    _, wav_only, _ = layouts
    before = _snapshot(wav_only)
    folder = wav_only / "data" / "train-clean-360_B4"
    items = read_inputs(folder, root=wav_only)
    original = wav_only / "data" / "train-clean-360"
    assert [item.id for item in items] == list(read_kaldi_map(original / "wav.scp"))
    assert all(Path(item.source) == folder / "wav" / f"{item.id}.wav" for item in items)
    texts = read_kaldi_map(original / "text")
    assert [item.text for item in items] == [texts.get(item.id) for item in items] and texts
    assert _snapshot(wav_only) == before

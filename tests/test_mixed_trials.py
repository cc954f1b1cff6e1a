"""The VPC 2026 pooled-list builder (segreconcat_aug.data.mixed_trials, recipes/make_mixed_trials.py): the 2026 rule.

The reference digests below are of the VPC 2026 toolkit's own script (``scripts/mixed_trials_librispeech.py``
at commit cc3c8a04ac2b4b2ec7c6ab364dcba1c9128dcc0f), run outside this repository on the lists that
:func:`write_libri_lists` writes (``python mixed_trials_librispeech.py --partition dev`` in the data root).
"""

import hashlib
import random
import sys
from collections import Counter
from pathlib import Path

import pytest

from segreconcat_aug.data.kaldi import read_trials
from segreconcat_aug.data.mixed_trials import MEMBER_FILES, mixed_trials, write_mixed_trials
from segreconcat_aug.errors import UserError

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "recipes"))
import make_mixed_trials  # noqa: E402

FEMALE = ("1272", "174", "2035", "251", "652")
MALE = ("1462", "2078", "3536", "84")
# The reference script's output on write_libri_lists' lists (see the module docstring).
REFERENCE_SHA256 = {
    "trials": "a3fd4b17aadee33f5c8e9164c645b1cca8cc2f33aad378337d39395acbd11227",
    "spk2gender": "49d9c47c149a5ab5f3ec1721dc1403ea0a1972b65c245c77414669791bf3b65f",
    "spk2utt": "fa715edc49db5015b9c141f5261d60869652ba5a3b95c2652c2a26fea47c9582",
    "wav.scp": "1f8a16fa046b36af25e54cf5dd1843e99a1418d5291649cedbcc6b5bc80179e9",
    "text": "66daa7d7f05567281b076afe9cb6c11d954416a404a2af56f8f9f986043b271c",
    "utt2dur": "f06a4f9b1911e37bb0c02fc36f0fc570192d692c9dd4b55bc118437cc02fcb2b",
    "utt2spk": "91afd0f96e88b70fd1acef0dac4df212283df3cd4044b28f9e8d3524681e76da",
}


def write_libri_lists(root: Path, part: str = "dev", suffix: str = "", layout: str = "vpc2026") -> Path:
    """LibriSpeech-style enrollment and f / m trial folders, lists only (no audio), under ``root``.

    Non-target trials are left out in a pattern, so the mean number of non-targets per test utterance
    is not a whole number (3.33 for the female list, 2.5 for the male one: ``round`` matters).
    """
    data = root / "data" if layout == "vpc2026" else root / suffix.lstrip("_") / "data"

    def folder(name):
        path = data / f"libri_{part}_{name}{suffix}"
        path.mkdir(parents=True, exist_ok=True)
        return path

    enroll = folder("enrolls")
    utts = [f"{spk}-100-{k:04d}" for spk in FEMALE + MALE for k in range(2)]
    (enroll / "enrolls").write_text("".join(f"{u}\n" for u in utts))
    (enroll / "utt2spk").write_text("".join(f"{u} {u.split('-')[0]}\n" for u in utts))
    # Upper case for the men: the rule reads either case.
    (enroll / "spk2gender").write_text("".join(f"{s} {'f' if s in FEMALE else 'M'}\n" for s in FEMALE + MALE))
    for gender, speakers, per_speaker, keep in (("f", FEMALE, 3, 3), ("m", MALE, 2, 2)):
        trials = folder(f"trials_{gender}")
        tests = [f"{spk}-200-{k:04d}" for spk in speakers for k in range(per_speaker)]
        lines, dropped = [], 0
        for i, spk in enumerate(speakers):
            for j, utt in enumerate(tests):
                target = utt.startswith(f"{spk}-")
                if not target and (i + j) % keep == 0:
                    dropped += 1
                    continue
                lines.append(f"{spk} {utt} {'target' if target else 'nontarget'}\n")
        (trials / "trials").write_text("".join(lines))
        (trials / "wav.scp").write_text(
            "".join(f"{u} corpora/LibriSpeech/{u}.flac\n" for u in reversed(tests))
        )
        (trials / "utt2spk").write_text("".join(f"{u} {u.split('-')[0]}\n" for u in tests))
        (trials / "spk2utt").write_text(
            "".join(f"{s} {' '.join(u for u in tests if u.startswith(s + '-'))}\n" for s in speakers)
        )
        (trials / "spk2gender").write_text("".join(f"{s} {gender}\n" for s in speakers))
        (trials / "utt2dur").write_text("".join(f"{u} {3 + k % 5}.25\n" for k, u in enumerate(tests)))
        if gender == "f":  # the male folder has no text: its lines are simply absent from the merge
            (trials / "text").write_text("".join(f"{u} SOME WORDS\n" for u in tests))
    return data


def test_the_rule_keeps_every_list_and_adds_k_cross_gender_nontargets_in_the_2026_order(tmp_path):
    data = write_libri_lists(tmp_path)
    folders = [data / f"libri_dev_{name}" for name in ("enrolls", "trials_f", "trials_m")]
    result = mixed_trials(*folders, seed=67)
    female = read_trials(folders[1] / "trials")
    male = read_trials(folders[2] / "trials")
    # k = round(mean non-targets per test utterance): 50 / 15 = 3.33 -> 3; 20 / 8 = 2.5 -> 2 (half to even)
    assert result.k == {"f": 3, "m": 2}
    f_utts = sorted({t.test_utterance for t in female})
    m_utts = sorted({t.test_utterance for t in male})
    cross = result.trials[: result.cross]
    assert result.cross == 3 * len(f_utts) + 2 * len(m_utts)
    # Order: male-enroll x female-trial (utterances sorted), female-enroll x male-trial, the m list, the f list.
    expected_utts = [u for u in f_utts for _ in range(3)] + [u for u in m_utts for _ in range(2)]
    assert [line.split()[1] for line in cross] == expected_utts
    assert all(line.endswith(" nontarget") for line in cross)
    first = [line.split()[0] for line in cross[: 3 * len(f_utts)]]
    assert set(first) <= set(MALE) and set(line.split()[0] for line in cross[3 * len(f_utts) :]) <= set(
        FEMALE
    )
    # Without replacement within an utterance; the draws are random.Random(67).sample over sorted speakers.
    rng = random.Random(67)
    draws = [rng.sample(sorted(MALE), 3) for _ in f_utts] + [rng.sample(sorted(FEMALE), 2) for _ in m_utts]
    assert [line.split()[0] for line in cross] == [spk for draw in draws for spk in draw]
    same = [
        f"{t.enroll_speaker} {t.test_utterance} {'target' if t.target else 'nontarget'}"
        for t in male + female
    ]
    assert result.trials[result.cross :] == same
    # Member files: the f and m folders' lines merged and sorted by their first column.
    wav = result.members["wav.scp"]
    assert [line.split()[0] for line in wav] == sorted(f_utts + m_utts)
    assert len(result.members["text"]) == len(f_utts)
    # The same seed gives the same list; another seed, other draws.
    assert mixed_trials(*folders, seed=67).trials == result.trials
    assert mixed_trials(*folders, seed=68).trials[: result.cross] != cross


def test_output_matches_the_2026_toolkit_script_byte_for_byte(tmp_path):
    data = write_libri_lists(tmp_path)
    out = make_mixed_trials.main(
        [str(REPO / "hparams" / "mixed_trials.yaml"), f"--data_folder={tmp_path}", "--parts=[dev]"]
    )
    assert out == [data / "libri_dev_trials_mixed"]
    digests = {
        name: hashlib.sha256((out[0] / name).read_bytes()).hexdigest() for name in ("trials", *MEMBER_FILES)
    }
    assert digests == REFERENCE_SHA256
    lines = (out[0] / "trials").read_text().splitlines()
    assert len(lines) == len(set(lines))  # the fixed rule repeats no pair (the June version did)


def test_recipe_reads_a_vpac_system_and_refuses_to_replace_a_list(tmp_path):
    write_libri_lists(tmp_path, part="dev", suffix="_B3", layout="vpac2024")
    write_libri_lists(tmp_path, part="test", suffix="_B3", layout="vpac2024")
    argv = [str(REPO / "hparams" / "mixed_trials.yaml"), f"--data_folder={tmp_path}", "--system=B3"]
    written = make_mixed_trials.main(argv)
    assert [p.relative_to(tmp_path).as_posix() for p in written] == [
        "B3/data/libri_dev_trials_mixed_B3",
        "B3/data/libri_test_trials_mixed_B3",
    ]
    trials = read_trials(written[0] / "trials")
    assert Counter(t.target for t in trials)[True] == 5 * 3 + 4 * 2
    before = (written[0] / "trials").read_bytes()
    with pytest.raises(UserError, match="libri_dev_trials_mixed_B3 exists: not replaced"):
        make_mixed_trials.main(argv)
    assert (written[0] / "trials").read_bytes() == before
    with pytest.raises(UserError, match="exists: not replaced"):
        write_mixed_trials(
            mixed_trials(
                *(written[0].parent / f"libri_dev_{n}_B3" for n in ("enrolls", "trials_f", "trials_m"))
            ),
            written[0],
        )

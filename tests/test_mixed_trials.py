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
from segreconcat_aug.data.mixed_trials import MEMBER_FILES, mixed_trials, write_all_mixed_trials
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

YAML = str(REPO / "hparams" / "mixed_trials.yaml")
# A second fixture, where each utterance gets fewer cross-gender speakers than the other gender has (3 of 6
# men, 4 of 7 women), so the seed decides the draw. The reference script (cc3c8a0, as in the module
# docstring) was run outside this repository on write_libri_lists(root, speakers=SEED_SPEAKERS,
# plan=SEED_PLAN): ``--partition dev`` (its default seed, 67), and ``--partition dev --seed 42``.
SEED_SPEAKERS = {
    "f": ("1188", "121", "1221", "1284", "1580", "2300", "237"),
    "m": ("1089", "1320", "1995", "260", "2830", "2961"),
}
SEED_PLAN = {"f": (2, 2), "m": (2, 3)}
SEED_REFERENCE_SHA256 = {
    "trials": "f3d43622554be5d66d49815f364c41e3a936443db1ba43cc7b2115986342d361",
    "spk2gender": "d28691d667e7e5683bfc875cdb0acd0bf005e201ad87570b0b687ef4b73cc774",
    "spk2utt": "d0030b62f9894df6f850956dc9537be2908d3cda64e197d8cd01a9258f69c15e",
    "wav.scp": "a147608b16adbc4c76b1ee445aec89a76fd6bc29001221347adb2e207418e181",
    "text": "591a3a9f3d472436fec158ae9889d4931ff8ec25c5136115d41aff49cedd1fe8",
    "utt2dur": "b5ad3014337cd6f37c7ffde26e2a9b20b992eab38c8673d495c3ef9da24992bd",
    "utt2spk": "07a7bd6bdd4ff837a8a21cb9690cf74c4189498d7da6a9b7abcb7fb146694802",
}
SEED_42_TRIALS_SHA256 = "4aa6af13313c85de8c5244a98752c7fa04e64299b0892c040be10c66dc29258a"


def write_libri_lists(
    root: Path,
    part: str = "dev",
    suffix: str = "",
    layout: str = "vpc2026",
    speakers: dict = None,
    plan: dict = None,
) -> Path:
    """LibriSpeech-style enrollment and f / m trial folders, lists only (no audio), under ``root``.

    Non-target trials are left out in a pattern, so the mean number of non-targets per test utterance
    is not a whole number (3.33 for the female list, 2.5 for the male one: ``round`` matters).
    ``speakers`` (gender -> speakers) and ``plan`` (gender -> test utterances per speaker, the pattern's
    period) default to :data:`FEMALE`, :data:`MALE` and 3 / 3, 2 / 2.
    """
    speakers = speakers or {"f": FEMALE, "m": MALE}
    plan = plan or {"f": (3, 3), "m": (2, 2)}
    data = root / "data" if layout == "vpc2026" else root / suffix.lstrip("_") / "data"

    def folder(name):
        path = data / f"libri_{part}_{name}{suffix}"
        path.mkdir(parents=True, exist_ok=True)
        return path

    enroll = folder("enrolls")
    everyone = speakers["f"] + speakers["m"]
    utts = [f"{spk}-100-{k:04d}" for spk in everyone for k in range(2)]
    (enroll / "enrolls").write_text("".join(f"{u}\n" for u in utts))
    (enroll / "utt2spk").write_text("".join(f"{u} {u.split('-')[0]}\n" for u in utts))
    # Upper case for the men: the rule reads either case.
    (enroll / "spk2gender").write_text(
        "".join(f"{s} {'f' if s in speakers['f'] else 'M'}\n" for s in everyone)
    )
    for gender in "fm":
        (per_speaker, keep), group = plan[gender], speakers[gender]
        trials = folder(f"trials_{gender}")
        tests = [f"{spk}-200-{k:04d}" for spk in group for k in range(per_speaker)]
        lines, dropped = [], 0
        for i, spk in enumerate(group):
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
            "".join(f"{s} {' '.join(u for u in tests if u.startswith(s + '-'))}\n" for s in group)
        )
        (trials / "spk2gender").write_text("".join(f"{s} {gender}\n" for s in group))
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


def _digests(folder: Path) -> dict[str, str]:
    return {
        name: hashlib.sha256((folder / name).read_bytes()).hexdigest() for name in ("trials", *MEMBER_FILES)
    }


def _snapshot(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_the_default_seed_draws_what_the_toolkit_script_draws_and_another_seed_draws_otherwise(tmp_path):
    data = write_libri_lists(tmp_path, speakers=SEED_SPEAKERS, plan=SEED_PLAN)
    folders = [data / f"libri_dev_{name}" for name in ("enrolls", "trials_f", "trials_m")]
    drawn = mixed_trials(*folders)  # the library's default seed
    # Fewer cross-gender speakers per utterance than the other gender has: the seed decides which.
    assert drawn.k == {"f": 3, "m": 4}
    assert drawn.k["f"] < len(SEED_SPEAKERS["m"]) and drawn.k["m"] < len(SEED_SPEAKERS["f"])
    write_all_mixed_trials([(drawn, tmp_path / "default")])
    assert _digests(tmp_path / "default") == SEED_REFERENCE_SHA256
    other = mixed_trials(*folders, seed=42)
    assert (
        hashlib.sha256("".join(f"{t}\n" for t in other.trials).encode()).hexdigest() == SEED_42_TRIALS_SHA256
    )
    assert other.trials[: other.cross] != drawn.trials[: drawn.cross]
    assert (
        other.trials[other.cross :] == drawn.trials[drawn.cross :]
    )  # the f and m lists themselves: the same
    # The recipe's default (hparams/mixed_trials.yaml) draws the same.
    out = make_mixed_trials.main([YAML, f"--data_folder={tmp_path}", "--parts=[dev]"])
    assert _digests(out[0]) == SEED_REFERENCE_SHA256


def test_a_rerun_keeps_an_identical_list_and_refuses_another_one(tmp_path):
    write_libri_lists(tmp_path, part="dev", suffix="_B3", layout="vpac2024")
    write_libri_lists(tmp_path, part="test", suffix="_B3", layout="vpac2024")
    argv = [YAML, f"--data_folder={tmp_path}", "--system=B3"]
    written = make_mixed_trials.main(argv)
    assert [p.relative_to(tmp_path).as_posix() for p in written] == [
        "B3/data/libri_dev_trials_mixed_B3",
        "B3/data/libri_test_trials_mixed_B3",
    ]
    trials = read_trials(written[0] / "trials")
    assert Counter(t.target for t in trials)[True] == 5 * 3 + 4 * 2
    before = _snapshot(tmp_path)
    times = [(p / "trials").stat().st_mtime_ns for p in written]
    assert make_mixed_trials.main(argv) == written  # the same lists: left as they are
    assert _snapshot(tmp_path) == before and [(p / "trials").stat().st_mtime_ns for p in written] == times
    with pytest.raises(UserError, match="libri_dev_trials_mixed_B3 exists: not replaced"):
        make_mixed_trials.main([*argv, "--seed=42"])
    assert _snapshot(tmp_path) == before
    make_mixed_trials.main([*argv, "--seed=42", "--overwrite=True"])
    assert (written[0] / "trials").read_bytes() != before["B3/data/libri_dev_trials_mixed_B3/trials"]
    assert not [p.name for p in written[0].parent.iterdir() if p.name.startswith(".")]


def test_overwrite_never_removes_what_the_builder_did_not_write(tmp_path):
    """Issue 32: --overwrite=True replaced a folder holding audio (wav/): its files were lost."""
    write_libri_lists(tmp_path, part="dev")
    target = tmp_path / "data" / "libri_dev_trials_mixed"
    (target / "wav").mkdir(parents=True)
    (target / "wav" / "1272-200-0000.wav").write_bytes(b"RIFF audio the user made")
    (target / "trials").write_text("1272 1272-200-0000 target\n")
    before = _snapshot(tmp_path)
    with pytest.raises(
        UserError, match=r"libri_dev_trials_mixed holds \['wav'\], which make_mixed_trials did not"
    ):
        make_mixed_trials.main([YAML, f"--data_folder={tmp_path}", "--parts=[dev]", "--overwrite=True"])
    assert _snapshot(tmp_path) == before


def test_a_killed_run_blocks_no_rerun_and_leaves_no_staging_folder(tmp_path):
    """Issue 32: after a kill between the parts, the rerun refused the finished part and a hidden staging
    folder stayed in the data folder, even after an --overwrite run."""
    for part in ("dev", "test"):
        write_libri_lists(tmp_path, part=part, suffix="_B3", layout="vpac2024")
    argv = [YAML, f"--data_folder={tmp_path}", "--system=B3"]
    data = tmp_path / "B3" / "data"
    make_mixed_trials.main([*argv, "--parts=[dev]"])  # the dev part finished before the kill
    finished = _snapshot(data / "libri_dev_trials_mixed_B3")
    for stale in (".libri_test_trials_mixed_B3.k2j9x_0q", ".libri_test_trials_mixed_B3.partial-ab12cd34"):
        (data / stale).mkdir()  # the test part's staging folder as a killed run leaves it (both namings)
        (data / stale / "trials").write_text("1272 1272-200-0000 tar")
    mine = data / ".libri_test_trials_mixed_B3.notes"  # a hidden folder of the user's: not ours, kept
    mine.mkdir()
    (mine / "todo.txt").write_text("mine")
    written = make_mixed_trials.main(argv)
    assert _snapshot(written[0]) == finished
    assert (written[1] / "trials").is_file()
    assert sorted(p.name for p in data.iterdir() if p.name.startswith(".")) == [mine.name]


def test_a_folder_that_cannot_be_written_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys):
    """Issue 32: a read-only data folder gave an OSError traceback from mkdtemp (simulated: root writes anywhere)."""
    from segreconcat_aug import cli
    from segreconcat_aug.data import mixed_trials as module

    write_libri_lists(tmp_path, part="dev")
    write_libri_lists(tmp_path, part="test")
    data = tmp_path / "data"
    mkdtemp = module.tempfile.mkdtemp

    def read_only(*args, dir=None, **kwargs):
        if Path(dir) == data:
            raise PermissionError(13, "Permission denied", str(dir))
        return mkdtemp(*args, dir=dir, **kwargs)

    monkeypatch.setattr(module.tempfile, "mkdtemp", read_only)
    before = _snapshot(tmp_path)
    with pytest.raises(SystemExit) as stop:
        cli.run_main(make_mixed_trials.main, [YAML, f"--data_folder={tmp_path}"])
    assert stop.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[-1] == (
        f"make_mixed_trials.py: error: {data}: cannot write there (Permission denied); give "
        "--output_folder=<a folder you can write> (the lists are read from where they are)"
    )
    assert _snapshot(tmp_path) == before
    # With --output_folder the lists go there, their relative paths made to resolve from there.
    out = tmp_path / "writable"
    made = make_mixed_trials.main([YAML, f"--data_folder={tmp_path}", f"--output_folder={out}"])
    assert [p.parent for p in made] == [out, out]


def test_an_enrollment_gender_that_contradicts_a_list_is_refused_naming_the_speaker(tmp_path):
    """Issue 28: spk2gender marking every speaker f gave half the cross-gender lines, without a word."""
    data = write_libri_lists(tmp_path, part="dev")
    genders = data / "libri_dev_enrolls" / "spk2gender"
    genders.write_text("".join(f"{s} f\n" for s in FEMALE + MALE))
    with pytest.raises(
        UserError, match=r"spk2gender: speaker '1462' is 'f' there, but the male list enrolls it "
    ):
        make_mixed_trials.main([YAML, f"--data_folder={tmp_path}", "--parts=[dev]"])
    assert not (data / "libri_dev_trials_mixed").exists()


def test_paths_relative_to_their_own_folder_resolve_from_the_pooled_folder(tmp_path):
    """Issue 28: wav.scp lines were copied unchanged, so wav/<utt>.ogg of the f folder resolved nowhere."""
    from segreconcat_aug.data.kaldi import read_wav_scp

    data = write_libri_lists(tmp_path, part="dev")
    sources = {}
    for gender in "fm":
        folder = data / f"libri_dev_trials_{gender}"
        utts = [line.split()[0] for line in (folder / "wav.scp").read_text().splitlines()]
        (folder / "wav").mkdir()
        for utt in utts:
            (folder / "wav" / f"{utt}.ogg").write_bytes(b"audio")
            sources[utt] = (folder / "wav" / f"{utt}.ogg").resolve()
        # one root-relative line (the challenges' corpora/...) and one absolute line: copied as they are
        lines = [f"{utt} wav/{utt}.ogg" for utt in utts[2:]]
        (tmp_path / "corpora").mkdir(exist_ok=True)
        (tmp_path / "corpora" / f"{utts[0]}.flac").write_bytes(b"audio")
        lines += [f"{utts[0]} corpora/{utts[0]}.flac", f"{utts[1]} {sources[utts[1]]}"]
        sources[utts[0]] = (tmp_path / "corpora" / f"{utts[0]}.flac").resolve()
        (folder / "wav.scp").write_text("\n".join(lines) + "\n")
        kept = lines[-2:]
    out = make_mixed_trials.main([YAML, f"--data_folder={tmp_path}", "--parts=[dev]"])[0]
    text = (out / "wav.scp").read_text()
    assert all(line in text.splitlines() for line in kept)
    assert "../libri_dev_trials_m/wav/" in text
    resolved = read_wav_scp(out / "wav.scp", root=tmp_path)
    assert {utt: Path(path).resolve() for utt, path in resolved.items()} == sources

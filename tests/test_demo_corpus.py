"""The bundled demo corpus (demo/): complete, readable, aligned, and its trial lists consistent."""

import json
from pathlib import Path

import numpy as np
import pytest
import soundfile

from segreconcat_aug.align.cache import load_alignments
from segreconcat_aug.data.kaldi import load_kaldi_folder, read_kaldi_map
from segreconcat_aug.data.protocols import PARTS, get_protocol
from segreconcat_aug.data.vpac import VPAC_SETS, system_folders
from segreconcat_aug.evaluation.trials import load_system_trials
from segreconcat_aug.method.orders import load_orders

DEMO = Path(__file__).resolve().parents[1] / "demo"
DATA = DEMO / "data"
SYSTEM = "MCADAMS"
VPAC = get_protocol("vpac2024")
TRAIN_SET = VPAC.train_set()
ENROLL_SETS = {part: VPAC.enroll_set(part) for part in PARTS}
TRIAL_SETS = {tuple(subset.split("_")): VPAC.trial_set(subset) for subset in VPAC.subsets}


@pytest.fixture(scope="module")
def folders():
    return {name: load_kaldi_folder(path, root=DATA) for name, path in system_folders(DATA, SYSTEM).items()}


def test_every_file_present_and_readable(folders):
    for name, folder in folders.items():
        assert folder.utt2dur is not None and set(folder.utt2dur) == set(folder.wav), name
        assert set(folder.utt2spk) == set(folder.wav), name
        assert folder.spk2gender is not None and set(folder.spk2gender) == set(folder.utt2spk.values()), name
        for utt, path in folder.wav.items():
            # The wav.scp paths are relative to each folder, so the corpus works wherever the clone is.
            assert not Path(read_kaldi_map(folder.path / "wav.scp")[utt]).is_absolute()
            audio, rate = soundfile.read(path, dtype="float32")
            assert rate == 16000 and audio.ndim == 1, path
            assert len(audio) / rate == pytest.approx(folder.utt2dur[utt], abs=1e-3), path
            # Peak 0.9 before Vorbis encoding; at ~32 kbit/s decoding overshoots it (up to ~1.14 here).
            assert np.all(np.isfinite(audio)) and 0.5 < np.abs(audio).max() <= 1.25, path
        alphas = {utt: float(a) for utt, a in read_kaldi_map(folder.path / "utt2alpha").items()}
        assert set(alphas) == set(folder.wav) and all(0.5 <= a <= 0.9 for a in alphas.values()), name


def test_training_set_shape(folders):
    train = folders[TRAIN_SET]
    speakers = set(train.utt2spk.values())
    assert (
        len(speakers) == 251 and len(train.wav) == 338
    )  # 19, 26, 27 are among the 251 train-clean-100 speakers
    # Speakers 19, 26, 27 have their 30 transcribed utterances, with LibriSpeech's transcripts.
    for speaker in ("19", "26", "27"):
        utts = [u for u, s in train.utt2spk.items() if s == speaker]
        assert len(utts) == 30 and all(train.text.get(u) for u in utts)


@pytest.mark.parametrize(
    "name, aligners",
    [
        # The demo's: Whisper word timestamps (tiny.en through faster-whisper), as the paper segments.
        (f"{SYSTEM}.jsonl", {"faster-whisper:tiny.en"}),
        # The named alternative (--alignment_cache=demo/data/alignments/MCADAMS.pocketsphinx.jsonl).
        (f"{SYSTEM}.pocketsphinx.jsonl", {"pocketsphinx:en-us", "pocketsphinx:en-us-recognition"}),
    ],
)
def test_every_training_utterance_aligned(folders, name, aligners):
    train = folders[TRAIN_SET]
    index = load_alignments(DATA / "alignments" / name)
    assert index.missing(train.utterances) == []
    assert set(index.ids) == set(train.utterances)
    for utt in train.utterances:
        starts, ends = index.spans(utt)
        assert len(starts) >= 1, utt
        assert index.duration(utt) == pytest.approx(train.utt2dur[utt], abs=1e-3)
        assert np.all(ends <= index.duration(utt) + 1e-6) and np.all(np.diff(starts) >= 0), utt
    assert set(index.aligners) <= aligners


@pytest.mark.parametrize("strategy", ["acoustic", "semantic"])
def test_the_ar_and_sr_orders_are_those_of_the_whisper_alignments(folders, strategy):
    # The training YAML's defaults read them (orders_cache: <data>/orders/<system>-<strategy>.jsonl): every
    # order's key matches the shipped alignments and segmentation, SR's from the same tiny.en, with peaks.
    train = folders[TRAIN_SET]
    alignments = load_alignments(DATA / "alignments" / f"{SYSTEM}.jsonl")
    path = DATA / "orders" / f"{SYSTEM}-{strategy}.jsonl"
    semantic = strategy == "semantic"
    orders = load_orders(
        path,
        strategy=strategy,
        alignments=alignments,
        segment_policy="authors",
        required_options={"context": "segment"} if semantic else None,
        require_peaks=semantic,
    )
    assert set(orders) == set(train.utterances)
    if semantic:
        options = json.loads(path.read_text(encoding="utf-8").splitlines()[0])["options"]
        assert (options["whisper_backend"], options["whisper_model"]) == ("faster-whisper", "tiny.en")
        assert set(orders.peaks) == set(orders) and all(0 < p <= 1.25 for p in orders.peaks.values())
    # Similarity orders: not the spoken order for most utterances.
    moved = sum(order.tolist() != sorted(order.tolist()) for order in orders.values())
    assert moved > 0.8 * len(orders)


def test_trial_lists_consistent_with_enrollment(folders):
    train_speakers = set(folders[TRAIN_SET].utt2spk.values())
    enrollments, trial_lists = load_system_trials(DATA, SYSTEM)
    assert set(trial_lists) == {"dev_f", "dev_m", "test_f", "test_m"}
    utterances_by_part = {}
    for (part, gender), name in TRIAL_SETS.items():
        folder = folders[name]
        enroll = folders[ENROLL_SETS[part]]
        enrolled = set(enroll.utt2spk.values())
        assert set(enroll.enrolls) == set(enroll.wav)
        for trial in folder.trials:
            assert trial.enroll_speaker in enrolled, (name, trial)
            assert trial.test_utterance in folder.wav, (name, trial)
            assert enroll.spk2gender[trial.enroll_speaker] == gender, (name, trial)
            assert trial.target == (folder.utt2spk[trial.test_utterance] == trial.enroll_speaker)
        # The full same-gender cross product, with targets and non-targets.
        same_gender = {s for s in enrolled if enroll.spk2gender[s] == gender}
        assert len(folder.trials) == len(same_gender) * len(folder.wav)
        assert any(t.target for t in folder.trials) and not all(t.target for t in folder.trials)
        assert not set(folder.wav) & set(enroll.wav)  # a part's trial utterances never enroll in it
        assert not set(folder.utt2spk.values()) & train_speakers  # evaluation speakers are unseen
        utterances_by_part.setdefault(part, set()).update(folder.wav)
        subset = trial_lists[f"{part}_{gender}"]
        assert subset.targets.sum() == sum(t.target for t in folder.trials)
        # VPC's linkability needs 20 target trials (two histogram bins): 5 speakers x 4 trial utterances.
        assert subset.targets.sum() >= 20 and len(folder.wav) == 4 * len(same_gender)
    assert not utterances_by_part["dev"] & utterances_by_part["test"]  # dev and test share no trial utterance


def test_attribution_and_size():
    readme = (DEMO / "README.md").read_text(encoding="utf-8")
    assert "LibriSpeech" in readme and "CC BY 4.0" in readme
    assert "Creative Commons Attribution 4.0" in (DEMO / "LICENSE.LibriSpeech.txt").read_text(
        encoding="utf-8"
    )
    size = sum(path.stat().st_size for path in DEMO.rglob("*") if path.is_file())
    assert size < 26 * 2**20, f"demo/ is {size / 2**20:.1f} MiB; keep the repository small"
    assert sorted(p.name for p in (DATA / SYSTEM / "data").iterdir()) == sorted(
        f"{name}_{SYSTEM}" for name in VPAC_SETS
    )

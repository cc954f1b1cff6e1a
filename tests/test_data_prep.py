"""Preparing one VPAC system's training data: checks, dev split, manifests, skip on rerun."""

import csv
import json
import shutil

import numpy as np
import pytest
import soundfile

from segreconcat_aug.data.kaldi import KaldiFormatError, read_kaldi_map, read_wav_scp
from segreconcat_aug.data.vpac import VPACLayoutError
from segreconcat_aug.training.data_prep import (
    PROBLEMS_FILE,
    AudioCheckError,
    PrepOptions,
    dev_chunks,
    prepare_vpac_training,
)
from segreconcat_aug.training.pipeline import chunk_audio_pipeline
from segreconcat_aug.training.splits import DEV_RATIO, split_dev

SR = 16000
TRAIN = "T8-5/data/train-clean-360_T8-5"


def _rows(path):
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def _copy_system(vpac_root, tmp_path, system="T8-5"):
    """A private copy of one system (the session layout must stay untouched)."""
    root = tmp_path / "vpac"
    shutil.copytree(vpac_root / system, root / system)
    return root


def _true_frames(root):
    wavs = read_wav_scp(root / TRAIN / "wav.scp", root=root)
    return {utt: soundfile.info(path).frames for utt, path in wavs.items()}


@pytest.mark.parametrize("mode, factor", [("concat", 2), ("none", 1)])
def test_manifests_rows_and_fixed_dev_chunks(vpac_root, tmp_path, mode, factor):
    out = tmp_path / "out"
    result = prepare_vpac_training(
        vpac_root,
        "T8-5",
        out,
        PrepOptions(mode=mode, sentence_len=2.0, dev_ratio=0.1, seed=3, min_chunk_amplitude=None),
    )
    assert result["skipped"] is False
    frames = _true_frames(vpac_root)
    utt2spk = read_kaldi_map(vpac_root / TRAIN / "utt2spk")
    train, dev = _rows(result["train"]), _rows(result["dev"])
    assert list(train[0]) == ["ID", "utt_id", "wav", "duration", "spk_id"]
    assert list(dev[0]) == ["ID", "utt_id", "wav", "start", "stop", "duration", "spk_id"]

    dev_utts = {row["utt_id"] for row in dev}
    train_utts = {row["utt_id"] for row in train}
    assert dev_utts and not dev_utts & train_utts
    # Every held-out utterance belongs to a training speaker.
    assert {utt2spk[u] for u in dev_utts} <= {row["spk_id"] for row in train}

    # int(factor * duration / sentence_len) rows per training utterance, ids <utt>@0..n-1.
    expected_short = 0
    for utt in set(frames) - dev_utts:
        rows = [row for row in train if row["utt_id"] == utt]
        n = int(factor * frames[utt] / SR / 2.0)
        expected_short += n == 0
        assert sorted(row["ID"] for row in rows) == sorted(f"{utt}@{k}" for k in range(n))
        assert all(row["spk_id"] == utt2spk[utt] for row in rows)
    assert result["summary"]["short_utterances_dropped"] == expected_short
    if mode == "none":
        assert expected_short > 0  # the fixture has utterances under 2 s: they give no row

    # Dev: consecutive fixed 2 s chunks inside the file, read back exactly.
    for utt in dev_utts:
        chunks = sorted((int(r["start"]), int(r["stop"])) for r in dev if r["utt_id"] == utt)
        assert chunks == [(k * 2 * SR, (k + 1) * 2 * SR) for k in range(frames[utt] // (2 * SR))]
    row = dev[-1]
    signal = chunk_audio_pipeline(row["wav"], row["start"], row["stop"])
    audio, _ = soundfile.read(row["wav"], dtype="float32")
    np.testing.assert_array_equal(signal.numpy(), audio[int(row["start"]) : int(row["stop"])])


def test_dev_split_is_seeded_and_keeps_a_training_utterance_per_speaker():
    utt2spk = {f"{spk}-{k}": spk for spk, n in (("a", 40), ("b", 3), ("c", 1)) for k in range(n)}
    durations = dict.fromkeys(utt2spk, 5.0)
    durations["b-0"] = durations["b-1"] = 1.0  # too short for one dev chunk
    first = split_dev(utt2spk, durations, dev_ratio=0.05, min_duration=3.0, seed=11)
    assert first == split_dev(utt2spk, durations, dev_ratio=0.05, min_duration=3.0, seed=11)
    assert sum(u.startswith("a-") for u in first) == 2  # round(0.05 * 40)
    assert {u for u in first if not u.startswith("a-")} == {"b-2"}  # the only long-enough one
    splits = {
        frozenset(split_dev(utt2spk, durations, dev_ratio=0.05, min_duration=3.0, seed=s)) for s in range(5)
    }
    assert len(splits) > 1  # the seed matters
    with pytest.raises(ValueError, match="dev_ratio"):
        split_dev(utt2spk, durations, dev_ratio=1.0, min_duration=3.0, seed=1)


def test_rerun_with_same_inputs_skips_and_changed_inputs_redo(vpac_root, tmp_path):
    root = _copy_system(vpac_root, tmp_path)
    out = tmp_path / "out"
    first = prepare_vpac_training(root, "T8-5", out, PrepOptions(sentence_len=2.0, dev_ratio=0.1))
    stamp = first["train"].stat().st_mtime_ns
    again = prepare_vpac_training(root, "T8-5", out, PrepOptions(sentence_len=2.0, dev_ratio=0.1))
    assert again["skipped"] is True and again["summary"] == first["summary"]
    assert first["train"].stat().st_mtime_ns == stamp
    # Another parameter, then another list file content: prepared again.
    assert (
        prepare_vpac_training(root, "T8-5", out, PrepOptions(sentence_len=2.0, dev_ratio=0.2))["skipped"]
        is False
    )
    utt2spk = root / TRAIN / "utt2spk"
    lines = utt2spk.read_text().splitlines()
    utt = lines[0].split()[0]
    utt2spk.write_text("\n".join([f"{utt} 999", *lines[1:]]) + "\n")
    redone = prepare_vpac_training(root, "T8-5", out, PrepOptions(sentence_len=2.0, dev_ratio=0.2))
    assert redone["skipped"] is False
    rows = [row for name in ("train", "dev") for row in _rows(redone[name]) if row["utt_id"] == utt]
    assert rows and {row["spk_id"] for row in rows} == {"999"}


def test_missing_and_unreadable_audio_are_listed_in_one_error(vpac_root, tmp_path):
    root = _copy_system(vpac_root, tmp_path)
    wavs = read_wav_scp(root / TRAIN / "wav.scp", root=root)
    missing, broken, resampled = sorted(wavs)[:3]
    (root / TRAIN / "wav" / f"{missing}.wav").unlink()
    (root / TRAIN / "wav" / f"{broken}.wav").write_bytes(b"not audio at all")
    soundfile.write(wavs[resampled], np.zeros(8000, dtype=np.float32), 8000)
    with pytest.raises(AudioCheckError) as info:
        prepare_vpac_training(root, "T8-5", tmp_path / "out")
    message = str(info.value)
    assert f"3 of {len(wavs)} audio files" in message
    assert f"{missing} " in message and "missing" in message
    assert f"{broken} " in message and "unreadable" in message
    assert f"{resampled} " in message and "8000 Hz" in message
    # Training under vpac2024 does not resample (the VPC 2026 protocols do): the message says what to do.
    assert "training under vpac2024 reads audio at 16000 Hz only" in message
    assert "resample those files to 16000 Hz" in message
    listed = (tmp_path / "out" / PROBLEMS_FILE).read_text().splitlines()
    assert sorted(line.split()[0] for line in listed) == sorted([missing, broken, resampled])
    assert not (tmp_path / "out" / "train.csv").exists()


def test_empty_utt2spk_and_unknown_system_give_clear_errors(vpac_root, tmp_path):
    root = _copy_system(vpac_root, tmp_path)
    (root / TRAIN / "utt2spk").write_text("")
    with pytest.raises(KaldiFormatError, match="utt2spk: empty"):
        prepare_vpac_training(root, "T8-5", tmp_path / "out")
    with pytest.raises(VPACLayoutError, match=r"system 'B9' not found.*T8-5"):
        prepare_vpac_training(root, "B9", tmp_path / "out")


def test_a_wav_scp_pipe_in_training_data_names_no_option_training_lacks(vpac_root, tmp_path):
    root = _copy_system(vpac_root, tmp_path)
    wav_scp = root / TRAIN / "wav.scp"
    first, *rest = wav_scp.read_text().splitlines()
    utt = first.split()[0]
    wav_scp.write_text("\n".join([f"{utt} flac -c -d {utt}.flac |", *rest]) + "\n")
    with pytest.raises(KaldiFormatError) as refused:
        prepare_vpac_training(root, "T8-5", tmp_path / "out")
    assert f"{wav_scp}: entry {utt!r} is a shell pipe" in str(refused.value)
    assert "allow_pipes" not in str(refused.value) and "decode the audio to files" in str(refused.value)
    assert not (tmp_path / "out").exists()


def test_durations_computed_without_utt2dur_and_paths_relative_to_root(vpac_root, tmp_path, monkeypatch):
    root = _copy_system(vpac_root, tmp_path)
    with_dur = prepare_vpac_training(
        root, "T8-5", tmp_path / "a", PrepOptions(sentence_len=2.0, dev_ratio=0.1)
    )
    (root / TRAIN / "utt2dur").unlink()
    monkeypatch.chdir(tmp_path)  # wav.scp paths are relative to the data root, not the cwd
    without = prepare_vpac_training(
        root, "T8-5", tmp_path / "b", PrepOptions(sentence_len=2.0, dev_ratio=0.1)
    )
    assert _rows(without["train"]) == _rows(with_dur["train"])
    assert _rows(without["dev"]) == _rows(with_dur["dev"])
    frames = _true_frames(root)
    for row in _rows(without["train"]):
        assert abs(float(row["duration"]) - frames[row["utt_id"]] / SR) < 1e-3


def test_folder_override_finds_a_renamed_training_folder(vpac_root, tmp_path):
    root = _copy_system(vpac_root, tmp_path)
    (root / TRAIN).rename(root / "T8-5" / "data" / "libri360_anon_T8-5")
    with pytest.raises(VPACLayoutError, match="folder_overrides"):
        prepare_vpac_training(root, "T8-5", tmp_path / "out")
    # wav.scp still names the old folder: point the override's lists at files that exist.
    folder = root / "T8-5" / "data" / "libri360_anon_T8-5"
    scp = folder / "wav.scp"
    scp.write_text(scp.read_text().replace("train-clean-360_T8-5", "libri360_anon_T8-5"))
    result = prepare_vpac_training(
        root,
        "T8-5",
        tmp_path / "out",
        PrepOptions(folder_overrides={"T8-5": {"train-clean-360": "libri360_anon_T8-5"}}),
    )
    summary = json.loads((tmp_path / "out" / "prep_summary.json").read_text())
    assert summary["folder"] == str(folder) and result["summary"]["utterances"] == 24


def test_default_dev_share_is_vpc_ten_percent():
    utt2spk = {f"s{k:02d}": "s" for k in range(40)}
    durations = dict.fromkeys(utt2spk, 5.0)
    assert DEV_RATIO == 0.10
    assert len(split_dev(utt2spk, durations, min_duration=3.0, seed=1)) == 4  # 10 % of 40
    assert len(split_dev(utt2spk, durations, dev_ratio=0.02, min_duration=3.0, seed=1)) == 1  # the old 2 %


@pytest.mark.parametrize("mode, factor", [("none", 1), ("concat", 2)])
def test_default_amplitude_filter_drops_a_silent_chunk(vpac_root, tmp_path, mode, factor):
    root = _copy_system(vpac_root, tmp_path)
    kept = prepare_vpac_training(
        root, "T8-5", tmp_path / "all", PrepOptions(mode=mode, min_chunk_amplitude=None)
    )
    dev_utts = {row["utt_id"] for row in _rows(kept["dev"])}
    frames = _true_frames(root)
    wavs = read_wav_scp(root / TRAIN / "wav.scp", root=root)
    # A training utterance with two full 3 s chunks: its second chunk made near silent (mean |x| < 5e-4).
    utt = next(u for u in sorted(frames) if u not in dev_utts and frames[u] >= 2 * 3 * SR)
    audio, rate = soundfile.read(wavs[utt], dtype="float32")
    audio[3 * SR : 6 * SR] *= 1e-4
    soundfile.write(wavs[utt], audio, rate, subtype="FLOAT")
    before = [row for row in _rows(kept["train"]) if row["utt_id"] == utt]

    filtered = prepare_vpac_training(
        root, "T8-5", tmp_path / "vpc", PrepOptions(mode=mode)
    )  # the default: VPC's filter
    after = [row for row in _rows(filtered["train"]) if row["utt_id"] == utt]
    assert len(after) == len(before) - factor == int(factor * (frames[utt] / SR - 3.0) / 3.0)
    assert filtered["summary"]["silent_train_chunks_dropped"] == 1
    assert {row["utt_id"] for row in _rows(filtered["dev"])} == dev_utts  # the split does not depend on it
    others = lambda rows: sorted(row["ID"] for row in rows if row["utt_id"] != utt)  # noqa: E731
    assert others(_rows(filtered["train"])) == others(_rows(kept["train"]))


def test_amplitude_filter_drops_silent_dev_chunks(vpac_root, tmp_path):
    root = _copy_system(vpac_root, tmp_path)
    first = prepare_vpac_training(
        root, "T8-5", tmp_path / "a", PrepOptions(sentence_len=1.0, min_chunk_amplitude=None)
    )
    dev = _rows(first["dev"])
    row = dev[0]
    wavs = read_wav_scp(root / TRAIN / "wav.scp", root=root)
    audio, rate = soundfile.read(wavs[row["utt_id"]], dtype="float32")
    audio[int(row["start"]) : int(row["stop"])] = 0.0
    soundfile.write(wavs[row["utt_id"]], audio, rate, subtype="FLOAT")
    second = prepare_vpac_training(root, "T8-5", tmp_path / "b", PrepOptions(sentence_len=1.0))
    assert sorted(r["ID"] for r in _rows(second["dev"])) == sorted(r["ID"] for r in dev[1:])
    assert second["summary"]["silent_dev_chunks_dropped"] == 1


def test_the_full_check_measures_the_chunk_amplitudes_in_its_one_decoding_pass(
    vpac_root, tmp_path, monkeypatch
):
    import segreconcat_aug.data.audio_check as audio_check
    import segreconcat_aug.training.data_prep as data_prep

    root = _copy_system(vpac_root, tmp_path)
    wavs = read_wav_scp(root / TRAIN / "wav.scp", root=root)
    frames = _true_frames(root)
    utt = next(u for u in sorted(frames) if frames[u] >= 6 * SR)
    audio, rate = soundfile.read(wavs[utt], dtype="float32")
    audio[2 * SR : 6 * SR] *= 1e-4  # near silent across a chunk boundary: the second 3 s chunk silent
    soundfile.write(wavs[utt], audio, rate, subtype="FLOAT")
    # Blocks that do not divide the chunk: chunk sums carried across block boundaries.
    monkeypatch.setattr(audio_check, "_BLOCK", 10007)
    measured = audio_check.measure_file(str(wavs[utt]), chunk=3 * SR)["chunk_means"][str(3 * SR)]
    # VPC 2024's measure: the mean |x| of each fixed chunk, the tail shorter than a chunk left out
    direct = [np.abs(audio[a:b]).mean(dtype=np.float64) for a, b in dev_chunks(len(audio), 3 * SR)]
    np.testing.assert_allclose(measured, direct, rtol=1e-9)

    header = prepare_vpac_training(
        root, "T8-5", tmp_path / "header", PrepOptions(mode="concat", check_audio="header")
    )

    def second_pass(*args, **kwargs):
        raise AssertionError("the full check already measured the chunks: no second decoding pass")

    monkeypatch.setattr(data_prep, "silent_chunk_flags", second_pass)
    full = prepare_vpac_training(
        root, "T8-5", tmp_path / "full", PrepOptions(mode="concat")
    )  # check_audio: full
    assert full["summary"]["silent_train_chunks_dropped"] + full["summary"]["silent_dev_chunks_dropped"] >= 1
    for name in ("train", "dev"):
        assert full[name].read_text() == header[name].read_text()
    # A rerun of the check reads the chunk amplitudes from its cache.
    again = prepare_vpac_training(root, "T8-5", tmp_path / "full", PrepOptions(mode="concat"))
    assert again["skipped"]


def test_pooled_systems_share_one_dev_split_by_source_utterance(vpac_root, tmp_path):
    from segreconcat_aug.training.data_prep import PooledSystemsError, pooled_systems, prepare_pooled_training

    root = vpac_root
    systems = pooled_systems("T8-5", ["B3"])
    assert systems == ["T8-5", "B3"]
    out = tmp_path / "out"
    result = prepare_pooled_training(
        root,
        systems,
        out,
        PrepOptions(mode="none", sentence_len=2.0, dev_ratio=0.3, seed=3, min_chunk_amplitude=None),
    )
    train, dev = _rows(result["train"]), _rows(result["dev"])
    assert {row["system"] for row in train} == {"T8-5", "B3"} == {row["system"] for row in dev}
    assert len({row["ID"] for row in train}) == len(train)  # row ids unique across systems
    assert all(row["ID"].startswith(row["system"] + "/") for row in train + dev)
    # One label per source speaker: the same speakers under both systems.
    speakers = {name: {row["spk_id"] for row in train if row["system"] == name} for name in systems}
    assert speakers["T8-5"] == speakers["B3"]
    # No source utterance in training for one system and in dev for the other.
    assert not {row["utt_id"] for row in train} & {row["utt_id"] for row in dev}
    # The same held-out utterances under both systems (the attacked system's draw).
    held = {name: {row["utt_id"] for row in dev if row["system"] == name} for name in systems}
    assert held["T8-5"] == held["B3"] and held["B3"]
    with pytest.raises(PooledSystemsError, match=r"^train_systems: system 'B9'"):
        prepare_pooled_training(
            root, ["T8-5", "B9"], tmp_path / "bad", PrepOptions(mode="none", sentence_len=2.0)
        )
    assert not (tmp_path / "bad").exists()

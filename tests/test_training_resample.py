"""VPC 2026 training audio at 22.05 kHz (real LibriSpeech fixture audio, resampled): training resamples it
to 16 kHz as the evaluation does (docs/data.md's protocol table), and 16 kHz audio reads bit-identically."""

import csv
from pathlib import Path

import numpy as np
import pytest
import soundfile
import torch
from test_train import TINY
from vpac_fixture import fixture_utterances
from vpc2026_fixture import build_track1_layout

from segreconcat_aug.data.audio import (
    AudioFile,
    DecodedCache,
    read_audio,
    read_audio_and_rate,
    resample_wave,
)
from segreconcat_aug.data.kaldi import read_kaldi_map
from segreconcat_aug.training.data_prep import AudioCheckError, PrepOptions, prepare_vpac_training
from segreconcat_aug.training.pipeline import TrainAudioPipeline, chunk_audio_pipeline

REPO = Path(__file__).resolve().parents[1]


def _rows(path):
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


@pytest.fixture(scope="module")
def track1_22k(tmp_path_factory):
    return build_track1_layout(tmp_path_factory.mktemp("vpc2026-22k"), systems=("B4",), rate=22050)


def test_training_prepares_and_reads_22k_audio_resampled_as_the_evaluation_does(track1_22k, tmp_path):
    root = track1_22k
    wav = {utt: root / path for utt, path in read_kaldi_map(root / "data/train-clean-360_B4/wav.scp").items()}
    assert {soundfile.info(path).samplerate for path in wav.values()} == {22050}
    options = PrepOptions(protocol="vpc2026-track1", sentence_len=2.0, dev_ratio=0.2)
    prepared = prepare_vpac_training(root, "B4", tmp_path / "out", options)
    resampled = {utt: resample_wave(*read_audio_and_rate(path)) for utt, path in wav.items()}
    # Durations are the resampled audio's, in 16 kHz samples: what the crops and dev chunks are cut from.
    for row in _rows(prepared["train"]):
        assert float(row["duration"]) == pytest.approx(len(resampled[row["utt_id"]]) / 16000, abs=1e-4)
    dev = _rows(prepared["dev"])
    assert dev and all(int(row["stop"]) - int(row["start"]) == 32000 for row in dev)
    for row in dev:
        chunk = chunk_audio_pipeline(row["wav"], row["start"], row["stop"]).numpy()
        np.testing.assert_array_equal(chunk, resampled[row["utt_id"]][int(row["start"]) : int(row["stop"])])
    # Training crops: 2 s at 16 kHz, slices of the resampled file.
    pipeline = TrainAudioPipeline(sentence_len=2.0, sample_rate=16000, seed=3)
    row = next(row for row in _rows(prepared["train"]) if float(row["duration"]) > 2.5)
    crop = pipeline(row["ID"], row["utt_id"], row["wav"]).numpy()
    whole = resampled[row["utt_id"]]
    assert len(crop) == 32000
    assert any(np.array_equal(crop, whole[k : k + 32000]) for k in range(len(whole) - 31999))
    np.testing.assert_array_equal(
        read_audio(row["wav"], resample=True), whole
    )  # ecapa_ssl's file_window reader
    # Under vpac2024 (no resampling in its evaluation either) the same files stay refused, saying what to do.
    with pytest.raises(AudioCheckError, match="training under vpac2024 reads audio at 16000 Hz only"):
        prepare_vpac_training(
            root, "B4", tmp_path / "refused", PrepOptions(sentence_len=2.0, protocol="vpac2024")
        )


def test_16k_audio_reads_bit_identically_with_resampling_on():
    path = next(iter(fixture_utterances().values()))
    audio = read_audio(path)
    assert np.array_equal(read_audio(path, resample=True), audio)
    with AudioFile(path, resample=True) as source:
        assert source.exact_seek and source.frames == len(audio)
        np.testing.assert_array_equal(source.read(1234, 40000), audio[1234:40000])


def test_a_resampled_file_is_decoded_and_resampled_once_through_the_decoded_cache(track1_22k, monkeypatch):
    from segreconcat_aug.data import audio as audio_module

    path = track1_22k / next(iter(read_kaldi_map(track1_22k / "data/train-clean-360_B4/wav.scp").values()))
    assert soundfile.info(path).samplerate == 22050
    expected = resample_wave(*read_audio_and_rate(path))
    calls = []
    original = audio_module.resample_wave
    monkeypatch.setattr(audio_module, "resample_wave", lambda *a: calls.append(a[1:]) or original(*a))
    cache = DecodedCache(max_bytes=64 * 2**20)
    for start in (0, 1000):  # two crops of one file in an epoch
        with AudioFile(path, resample=True, cache=cache) as source:
            assert source.frames == len(expected) and not source.exact_seek
            np.testing.assert_array_equal(source.read(start, start + 8000), expected[start : start + 8000])
    assert calls == [(22050, 16000)]


def test_train_py_trains_on_22k_vpc2026_audio(track1_22k, tmp_path):
    from test_train import train_recipe as train

    torch.set_num_threads(1)
    out = tmp_path / "out"
    argv = [str(REPO / "hparams/ecapa_segreconcat.yaml"), f"--data_folder={track1_22k}", "--system=B4"]
    train.main([*argv, "--protocol=vpc2026-track1", f"--output_folder={out}", *TINY, "--number_of_epochs=1"])
    assert (out / "export" / "embedding_model.ckpt").is_file()

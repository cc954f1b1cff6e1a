"""The SegReConcat training pipeline inside a real SpeechBrain DataLoader with workers."""

import numpy as np
import pytest
import soundfile
import speechbrain as sb
import torch

from segreconcat_aug.align.cache import load_alignments
from segreconcat_aug.data.audio import AudioFile, read_audio, write_audio
from segreconcat_aug.data.kaldi import read_wav_scp
from segreconcat_aug.method.augment import COUNT_KEYS, SegReConcat
from segreconcat_aug.method.render import render
from segreconcat_aug.method.strategies import STRATEGIES, register_strategy
from segreconcat_aug.seeding import KeyedRandom
from segreconcat_aug.training import pipeline as pipeline_module
from segreconcat_aug.training.pipeline import (
    _CROP_STREAM,
    _MERGE_GAP,
    TrainAudioPipeline,
    chunk_audio_pipeline,
    crop_start,
    random_crop,
)


@pytest.fixture(scope="module")
def train_rows(vpac_root):
    wavs = read_wav_scp(vpac_root / "B3" / "data" / "train-clean-360_B3" / "wav.scp", root=vpac_root)
    return {f"{utt}@0": {"utt_id": utt, "wav": wav} for utt, wav in wavs.items()}


def _collect(rows, pipeline, num_workers):
    dataset = sb.dataio.dataset.DynamicItemDataset(rows)
    dataset.add_dynamic_item(pipeline.dynamic_item())
    dataset.set_output_keys(["id", "sig"])
    loader = sb.dataio.dataloader.make_dataloader(dataset, batch_size=4, num_workers=num_workers)
    out = {}
    for batch in loader:
        lengths = (batch.sig.lengths * batch.sig.data.shape[1]).round().long()
        for row_id, signal, length in zip(batch.id, batch.sig.data, lengths):
            out[row_id] = signal[:length].numpy()
    return out


@pytest.mark.parametrize("rr_redraw", ["once", "epoch"])
def test_workers_deliver_augmented_crops_seeded_per_utterance_or_epoch(vpac_root, train_rows, rr_redraw):
    alignments = load_alignments(vpac_root / "alignments" / "B3.jsonl")
    augmenter = SegReConcat(alignments, mode="concat", segment_policy="cover", rr_redraw=rr_redraw, seed=1)
    pipeline = TrainAudioPipeline(augmenter, sentence_len=3.0, seed=1)
    # A 100 s crop keeps the whole augmented signal: its length shows the concatenation.
    pipeline.crop_samples = 100 * 16000
    pipeline.set_epoch(1)
    epoch1 = _collect(train_rows, pipeline, num_workers=2)
    assert set(epoch1) == set(train_rows)
    for row_id, row in train_rows.items():
        original = read_audio(row["wav"])
        np.testing.assert_array_equal(epoch1[row_id][: len(original)], original)
        assert len(epoch1[row_id]) == 2 * len(original)  # cover policy: the data volume doubles
    # Counts made inside the worker processes reach the main process.
    assert pipeline.counts()["augmented"] == len(train_rows)
    pipeline.set_epoch(2)
    assert sum(pipeline.counts().values()) == 0  # each epoch counts its own rows
    epoch2 = _collect(train_rows, pipeline, num_workers=2)
    changed = sum(not np.array_equal(epoch1[r], epoch2[r]) for r in train_rows)
    if rr_redraw == "epoch":
        assert changed >= len(train_rows) - 2  # a new permutation each epoch
    else:
        assert changed == 0  # one permutation per utterance for the whole training
    pipeline.set_epoch(1)
    again = _collect(train_rows, pipeline, num_workers=0)
    assert all(np.array_equal(epoch1[r], again[r]) for r in train_rows)  # reproducible


def test_crops_have_the_sentence_length_and_are_seeded(train_rows):
    pipeline = TrainAudioPipeline(None, sentence_len=1.0, seed=4)
    pipeline.set_epoch(3)
    row_id, row = next(iter(train_rows.items()))
    crop = pipeline(row_id, row["utt_id"], row["wav"])
    assert isinstance(crop, torch.Tensor) and crop.shape == (16000,)
    assert torch.equal(crop, pipeline(row_id, row["utt_id"], row["wav"]))
    pipeline.set_epoch(4)
    assert not torch.equal(crop, pipeline(row_id, row["utt_id"], row["wav"]))


def test_short_audio_is_not_padded():
    audio = np.arange(100, dtype=np.float32)
    assert random_crop(audio, 200, np.random.default_rng(0)).shape == (100,)


def test_chunk_pipeline_reads_exactly_the_chunk(train_rows):
    row = next(iter(train_rows.values()))
    chunk = chunk_audio_pipeline.func(row["wav"], 1600, 4800)
    np.testing.assert_array_equal(chunk.numpy(), read_audio(row["wav"])[1600:4800])


def test_the_pipeline_counts_what_segreconcat_did_with_each_row_per_epoch(vpac_root, train_rows):
    alignments = load_alignments(vpac_root / "alignments" / "B3.jsonl")
    pipeline = TrainAudioPipeline(SegReConcat(alignments, missing_alignment="passthrough", seed=1), seed=1)
    pipeline.set_epoch(1)
    row_id, row = next(iter(train_rows.items()))
    pipeline(row_id, row["utt_id"], row["wav"])
    pipeline("x@0", "no-such-utterance", row["wav"])  # no alignment: passed through
    assert pipeline.counts() == {**dict.fromkeys(COUNT_KEYS, 0), "augmented": 1, "missing_alignment": 1}
    assert pipeline.report() == "augmented=1 missing_alignment=1"
    pipeline.reset_counts()
    assert pipeline.report() == "augmented=0"
    pipeline(row_id, row["utt_id"], row["wav"])
    pipeline.set_epoch(2)
    assert sum(pipeline.counts().values()) == 0


def _crop_from_the_whole_file(augmenter, seed, epoch, row_id, utt_id, wav, crop=48000):
    """The pipeline's crop composed from a full read: what the span reads must reproduce."""
    audio = read_audio(wav)
    rng = KeyedRandom(seed)(epoch, row_id, stream=_CROP_STREAM)
    plan = augmenter.plan(audio, utt_id, epoch)[0] if augmenter is not None else None
    if plan is None:
        return random_crop(audio, crop, rng)
    start = crop_start(plan.length, crop, rng)
    return render(audio, plan, start, start + crop)


def _semantic_augmenter(alignments, train_rows, **options):
    """SR with cached orders (each utterance's segments, rotated) for the pipeline tests."""
    probe = SegReConcat(alignments, segment_policy="words_to_end")
    orders = {}
    for row in train_rows.values():
        count = len(probe.segments(row["utt_id"], len(read_audio(row["wav"]))))
        orders[row["utt_id"]] = np.roll(np.arange(count), 1)
    return SegReConcat(alignments, mode="concat", strategy="semantic", orders=orders, **options)


@pytest.mark.parametrize(
    "options",
    [
        {},  # the defaults: RR on the authors' word spans, hard splices
        {"crossfade": 0.005, "segment_policy": "cover", "rr_redraw": "epoch"},
        {"strategy": "semantic"},  # SR: zero-padded, peak-normalized, planned from the whole file
    ],
)
def test_reading_only_the_crops_span_gives_the_crop_of_the_whole_file(vpac_root, train_rows, options):
    # Every fixture over several epochs: crops inside the original, across the join, and
    # inside the rearranged half (where the span read covers scattered words).
    alignments = load_alignments(vpac_root / "alignments" / "B3.jsonl")
    if options.get("strategy") == "semantic":
        augmented = _semantic_augmenter(alignments, train_rows)
        assert not augmented.plans_from_length
    else:
        augmented = SegReConcat(alignments, mode="concat", seed=5, **options)
        assert augmented.plans_from_length
    for augmenter in (None, augmented):
        pipeline = TrainAudioPipeline(augmenter, seed=5)
        where = set()
        for epoch in range(6):
            pipeline.set_epoch(epoch)
            for row_id, row in train_rows.items():
                crop = pipeline(row_id, row["utt_id"], row["wav"]).numpy()
                expected = _crop_from_the_whole_file(augmenter, 5, epoch, row_id, row["utt_id"], row["wav"])
                np.testing.assert_array_equal(crop, expected)
                if augmenter is not None:
                    length = len(read_audio(row["wav"]))
                    total = augmenter.plan(read_audio(row["wav"]), row["utt_id"], epoch)[0].length
                    start = crop_start(total, 48000, KeyedRandom(5)(epoch, row_id, stream=_CROP_STREAM))
                    where.add(
                        "original" if start + 48000 <= length else "join" if start < length else "rearranged"
                    )
        assert augmenter is None or where == {"original", "join", "rearranged"}


def test_sr_with_the_cached_peaks_reads_only_each_crops_samples(vpac_root, train_rows, tmp_path, monkeypatch):
    # PCM WAV, as the challenge ships: exact seeks, so a reader decodes only the samples it asks for.
    alignments = load_alignments(vpac_root / "alignments" / "B3.jsonl")
    rows, audios = {}, {}
    for row_id, row in train_rows.items():
        wav = tmp_path / f"{row['utt_id']}.wav"
        write_audio(wav, read_audio(row["wav"]))
        rows[row_id] = {**row, "wav": str(wav)}
        audios[row_id] = read_audio(wav)
    whole = _semantic_augmenter(alignments, rows)  # the peak measured on the samples
    peaks = {
        row["utt_id"]: whole.segments(row["utt_id"], len(audios[r])).peak(audios[r])
        for r, row in rows.items()
    }
    cached = _semantic_augmenter(alignments, rows, peaks=peaks)  # the peak of the order cache
    assert cached.plans_from_length and not whole.plans_from_length
    spans, full = [], []
    read_from = AudioFile._read_from
    monkeypatch.setattr(
        AudioFile, "_read_from", lambda self, a, b: spans.append(b - a) or read_from(self, a, b)
    )
    monkeypatch.setattr(pipeline_module, "read_audio", lambda *a, **k: full.append(a) or read_audio(*a, **k))
    crops, read = {}, {}
    for augmenter in (whole, cached):
        pipeline = TrainAudioPipeline(augmenter, seed=5)
        for epoch in range(4):
            pipeline.set_epoch(epoch)
            for row_id, row in rows.items():
                spans.clear(), full.clear()
                crop = pipeline(row_id, row["utt_id"], row["wav"]).numpy()
                read[augmenter, epoch, row_id] = sum(spans) + sum(len(audios[row_id]) for _ in full)
                if augmenter is whole:
                    assert len(full) == 1  # the whole file, for the peak
                    crops[epoch, row_id] = crop
                else:
                    np.testing.assert_array_equal(crop, crops[epoch, row_id])  # the same crop
                    assert not full and len(spans) >= 1
                    # The crop's samples, from one read per word span it holds (gaps under
                    # _MERGE_GAP read through rather than seeked over).
                    plan, _ = cached.plan(None, row["utt_id"], epoch, num_samples=len(audios[row_id]))
                    start = crop_start(plan.length, 48000, KeyedRandom(5)(epoch, row_id, stream=_CROP_STREAM))
                    pieces = plan.input_ranges(start, start + 48000)
                    assert (pieces[:, 1] - pieces[:, 0]).sum() <= 48000
                    assert sum(spans) <= 48000 + (len(pieces) - 1) * _MERGE_GAP
    total = sum(len(audio) for audio in audios.values()) * 4
    assert sum(v for (a, _, _), v in read.items() if a is whole) == total
    # The fixtures are short (2-15 s for 3 s crops): 70 % of the samples here, and less the longer the files.
    assert sum(v for (a, _, _), v in read.items() if a is cached) < 0.75 * total


def test_a_strategy_that_uses_the_audio_plans_from_the_whole_file(vpac_root, train_rows):
    @register_strategy("loudest_first_for_test")
    def loudest_first(segments, audio, rng, **_):
        return np.argsort([-np.abs(audio[a:b]).sum() for a, b in segments.spans], kind="stable")

    try:
        alignments = load_alignments(vpac_root / "alignments" / "B3.jsonl")
        augmenter = SegReConcat(alignments, strategy="loudest_first_for_test", seed=2)
        assert not augmenter.plans_from_length
        with pytest.raises(ValueError, match="uses the audio"):
            augmenter.plan(None, "19-198-0001", 0, num_samples=1000)
        pipeline = TrainAudioPipeline(augmenter, seed=2)
        for row_id, row in train_rows.items():
            crop = pipeline(row_id, row["utt_id"], row["wav"]).numpy()
            expected = _crop_from_the_whole_file(augmenter, 2, 0, row_id, row["utt_id"], row["wav"])
            np.testing.assert_array_equal(crop, expected)
    finally:
        del STRATEGIES["loudest_first_for_test"]


def test_lossy_files_give_the_same_crops_as_a_whole_read(vpac_root, train_rows, tmp_path, monkeypatch):
    # Vorbis cannot seek exactly in libsndfile; the pipeline's crops must still be the
    # crops of the whole decoded file.
    alignments = load_alignments(vpac_root / "alignments" / "B3.jsonl")
    augmenter = SegReConcat(alignments, mode="concat", seed=3)
    pipeline = TrainAudioPipeline(augmenter, seed=3)
    # decoded_cache_mb: each lossy file decoded once for all its crops, the same samples.
    cached = TrainAudioPipeline(augmenter, seed=3, decoded_cache_mb=64)
    decodes = []
    read_from = AudioFile._read_from
    monkeypatch.setattr(
        AudioFile, "_read_from", lambda self, a, b: decodes.append(self.source) or read_from(self, a, b)
    )
    for row_id, row in train_rows.items():
        ogg = tmp_path / f"{row['utt_id']}.ogg"
        soundfile.write(ogg, read_audio(row["wav"]), 16000, format="OGG", subtype="VORBIS")
        for epoch in range(4):
            pipeline.set_epoch(epoch)
            cached.set_epoch(epoch)
            crop = pipeline(row_id, row["utt_id"], str(ogg)).numpy()
            expected = _crop_from_the_whole_file(augmenter, 3, epoch, row_id, row["utt_id"], str(ogg))
            np.testing.assert_array_equal(crop, expected)
            decodes.clear()
            np.testing.assert_array_equal(cached(row_id, row["utt_id"], str(ogg)).numpy(), expected)
            assert decodes == ([str(ogg)] if epoch == 0 else [])

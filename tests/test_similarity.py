"""AR/SR strategies (segreconcat_aug.method.similarity): greedy chain, start rules, real audio, bad input."""

import librosa
import numpy as np
import pytest
from vpac_fixture import FIXTURES, fixture_audio

from segreconcat_aug.data.kaldi import read_kaldi_map
from segreconcat_aug.method.segments import Segments, word_segments
from segreconcat_aug.method.similarity import (
    SimilarityInputError,
    acoustic_order,
    cosine_similarity,
    greedy_chain,
    mfcc_features,
    pool_segments,
    similarity_order,
    start_highest_average,
)
from segreconcat_aug.method.strategies import get_strategy

nan = np.nan


# --------------------------------------------------------------------------- greedy chain


def test_greedy_follows_the_most_similar_neighbour_not_the_best_total():
    # From 0 the greedy step takes 1 (0.9); the chain is 0-1-2-3 even though 0-3 is also strong.
    sim = np.array(
        [
            [1.0, 0.9, 0.1, 0.8],
            [0.9, 1.0, 0.7, 0.2],
            [0.1, 0.7, 1.0, 0.6],
            [0.8, 0.2, 0.6, 1.0],
        ]
    )
    assert greedy_chain(sim, 0).tolist() == [0, 1, 2, 3]
    assert greedy_chain(sim, 3).tolist() == [3, 0, 1, 2]
    assert greedy_chain(sim, 2).tolist() == [2, 1, 0, 3]


def test_greedy_reads_the_current_row_only():
    # Asymmetric: from 0 the best is 2 (row 0), from 2 the best unused is 1 (row 2).
    sim = np.array([[0, 0.1, 0.5], [0.9, 0, 0.2], [0.0, 0.3, 0]])
    assert greedy_chain(sim, 0).tolist() == [0, 2, 1]


def test_ties_go_to_the_lowest_index():
    assert greedy_chain(np.ones((4, 4)), 2).tolist() == [2, 0, 1, 3]


def test_unreachable_segments_are_appended_in_original_order():
    sim = np.array(
        [
            [1.0, nan, 0.5, nan, nan],
            [nan, 1.0, nan, 0.4, nan],
            [0.5, nan, 1.0, nan, nan],
            [nan, 0.4, nan, 1.0, nan],
            [nan, nan, nan, nan, nan],
        ]
    )
    # 0 reaches 2 only; from 2 nothing unused is reachable: 1, 3, 4 follow in order.
    assert greedy_chain(sim, 0).tolist() == [0, 2, 1, 3, 4]
    assert greedy_chain(sim, 4).tolist() == [4, 0, 1, 2, 3]
    # -inf also means "no edge".
    assert greedy_chain(np.array([[0, -np.inf], [-np.inf, 0]]), 1).tolist() == [1, 0]


def test_start_rules():
    sim = np.array(
        [
            [1.0, 0.1, 0.2, 0.3],
            [0.1, 1.0, 0.8, 0.7],
            [0.2, 0.8, 1.0, 0.1],
            [0.3, 0.7, 0.1, 1.0],
        ]
    )
    # Averages over the others: 0.2, 0.533, 0.367, 0.367 -> segment 1.
    assert start_highest_average(sim) == 1
    assert similarity_order(sim, "highest_average").tolist() == [1, 2, 0, 3]
    assert similarity_order(sim, "first").tolist() == [0, 3, 1, 2]
    assert similarity_order(sim, 3).tolist() == [3, 1, 2, 0]
    # The diagonal is left out: a huge self-similarity does not make a start.
    skewed = sim.copy()
    skewed[0, 0] = 100.0
    assert start_highest_average(skewed) == 1
    # Non-finite entries are left out of the average, not counted as zero (that would pick 0).
    holes = np.array([[1.0, 0.5, 0.4], [0.5, 1.0, nan], [0.4, nan, 1.0]])
    assert start_highest_average(holes) == 1
    with pytest.raises(ValueError, match="unknown start rule"):
        similarity_order(sim, "middle")
    with pytest.raises(ValueError, match="outside"):
        greedy_chain(sim, 4)


def test_cosine_similarity_and_pooling():
    frames = np.array([[1.0, 0.0], [3.0, 0.0], [0.0, 2.0], [0.0, 4.0]])  # 4 frames = 80 ms at 50 frames/s
    segments = Segments(np.array([[0, 640], [640, 1280]]), False)  # 40 ms each at 16 kHz -> 2 frames each
    pooled = pool_segments(frames, segments, 16000)
    assert pooled.tolist() == [[2.0, 0.0, 3.0, 0.0], [0.0, 3.0, 0.0, 4.0]]
    # A segment inside one frame still gets that frame; frames past the end are clipped.
    tiny = pool_segments(frames, Segments(np.array([[700, 710], [1200, 5000]]), False), 16000)
    assert tiny.tolist() == [[0.0, 2.0, 0.0, 2.0], [0.0, 4.0, 0.0, 4.0]]
    sim = cosine_similarity(pooled)
    assert sim[0, 1] == pytest.approx(0.0) and sim[0, 0] == pytest.approx(1.0)


# --------------------------------------------------------------------------- AR on real audio


def fixture_segments(utt, lead=0.0, max_words=None, policy="cover"):
    """Real audio with uniform word times (optionally shifted by a lead-in)."""
    audio = fixture_audio(utt)
    words = read_kaldi_map(FIXTURES / "text")[utt].split()[:max_words]
    duration = len(audio) / 16000
    span = (duration - lead) / len(words) if max_words is None else 0.3
    starts = lead + span * np.arange(len(words))
    return audio, word_segments(starts, starts + span, len(audio), 16000, policy)


MFCC = dict(n_mfcc=13, n_fft=400, hop_length=160, n_mels=40)  # the earlier 25 ms / 10 ms framing
EARLIER_FRAMING = dict(n_fft=400, hop_length=160, n_mels=40, scale=1.0, pad_short=True)


def _authors_mfcc(audio, start, end):
    # split_and_rearrange_timestamp_MFCC.py: librosa.feature.mfcc(n_mfcc=13) with librosa's
    # defaults on pydub's int16 samples (here: no 100-frame padding, as the paper says).
    return librosa.feature.mfcc(y=audio[start:end] * np.float32(32768), sr=16000, n_mfcc=13)


def _earlier_mfcc(audio, start, end):
    return librosa.feature.mfcc(
        y=np.pad(audio[start:end], (0, max(0, 400 - (end - start)))), sr=16000, **MFCC
    )


def reference_acoustic_order(audio, segments, mfcc=_authors_mfcc, pin_silence=True):
    """The paper's AR, written directly on librosa (per-pair DTW) for comparison.

    ``pin_silence``: the authors' tsp_reorder, which keeps the initial silence first
    and starts the greedy chain at the first word.
    """
    pinned = [0] if pin_silence and segments.leading_silence else []
    keys = list(range(len(pinned), len(segments)))
    features = {k: mfcc(audio, *segments.spans[k]) for k in keys}

    def sim(i, j):
        return 1 / (1 + librosa.sequence.dtw(features[i], features[j], metric="euclidean")[0][-1, -1])

    order = [keys[0]]
    while len(order) < len(keys):
        rest = [k for k in keys if k not in order]
        order.append(max(rest, key=lambda k: sim(order[-1], k)))
    return pinned + order


def test_acoustic_order_matches_the_authors_reference_on_real_speech():
    audio, segments = fixture_segments("27-123349-0009", lead=0.2, max_words=9, policy="onsets")
    assert segments.leading_silence and len(segments) == 10
    order = acoustic_order(segments, audio, None, sample_rate=16000, utt_id="27-123349-0009")
    assert order.tolist() == reference_acoustic_order(audio, segments)
    assert order[:2].tolist() == [0, 1]  # the silence pinned first, the chain from the first word
    assert sorted(order.tolist()) == list(range(len(segments)))
    assert order.tolist() != list(range(len(segments)))  # real speech is not already in similarity order


def test_the_earlier_framing_and_the_silence_starting_the_chain_are_options():
    audio, segments = fixture_segments("27-123349-0009", lead=0.2, max_words=9)
    order = acoustic_order(
        segments, audio, None, sample_rate=16000, leading_silence="chain", **EARLIER_FRAMING
    )
    assert order.tolist() == reference_acoustic_order(audio, segments, _earlier_mfcc, pin_silence=False)
    assert order[0] == 0 and order[1] != 1  # the chain goes on from the silence's nearest word
    with pytest.raises(ValueError, match="unknown leading_silence 'first'"):
        acoustic_order(segments, audio, None, sample_rate=16000, leading_silence="first")


def test_acoustic_is_registered_precomputed_and_deterministic():
    strategy = get_strategy("acoustic")
    assert strategy.precomputed and strategy.paper_name == "AR"
    assert get_strategy("semantic").paper_name == "SR" and get_strategy("semantic").precomputed
    audio, segments = fixture_segments("26-495-0019")
    first = strategy.fn(segments, audio, np.random.default_rng(0), sample_rate=16000)
    second = strategy.fn(segments, audio, np.random.default_rng(1), sample_rate=16000)
    assert first.tolist() == second.tolist()
    assert sorted(first.tolist()) == list(range(len(segments)))


def test_fixed_frames_variant_pads_and_truncates_to_100():
    audio, segments = fixture_segments("19-198-0000", policy="words")
    audio = np.tile(audio, 3)  # a segment over 100 frames (3.2 s at librosa's hop of 512)
    long_segments = Segments(np.array([[0, len(audio)]] + segments.spans.tolist()), False)
    features = mfcc_features(audio, long_segments, 16000, fixed_frames=100)
    assert {f.shape for f in features} == {(13, 100)}
    natural = mfcc_features(audio, long_segments, 16000)
    assert natural[0].shape[1] > 100 and all(f.shape[1] < 100 for f in natural[1:])
    # Truncation keeps the first 100 frames; padding appends zeros.
    assert np.array_equal(features[0], natural[0][:, :100])
    width = natural[1].shape[1]
    assert np.array_equal(features[1][:, :width], natural[1]) and not features[1][:, width:].any()
    order = acoustic_order(long_segments, audio, None, sample_rate=16000, fixed_frames=100)
    assert sorted(order.tolist()) == list(range(len(long_segments)))


# --------------------------------------------------------------------------- bad input


def test_segments_shorter_than_one_frame_get_centred_frames_or_padding():
    audio, _ = fixture_segments("26-495-0019")
    segments = Segments(np.array([[0, 100], [100, 8000], [8000, 8001], [8001, 16000]]), False)
    features = mfcc_features(audio, segments, 16000)
    assert features[0].shape == features[2].shape == (13, 1)  # librosa centres: one frame
    assert np.all(np.isfinite(features[2]))
    padded = mfcc_features(audio, segments, 16000, **EARLIER_FRAMING)
    assert padded[0].shape == padded[2].shape == (13, 3)  # padded to 400 samples at hop 160, centred
    order = acoustic_order(segments, audio, None, sample_rate=16000)
    assert sorted(order.tolist()) == [0, 1, 2, 3]


def test_silent_audio_keeps_the_original_order():
    segments = Segments(np.array([[0, 4000], [4000, 9000], [9000, 16000]]), False)
    order = acoustic_order(segments, np.zeros(16000, dtype=np.float32), None, sample_rate=16000)
    assert order.tolist() == [0, 1, 2]


@pytest.mark.parametrize("value", [np.nan, np.inf])
def test_non_finite_audio_names_the_utterance(value):
    audio, segments = fixture_segments("26-495-0019")
    audio = audio.copy()
    audio[500] = value
    with pytest.raises(SimilarityInputError, match="26-495-0019.*NaN or infinite"):
        acoustic_order(segments, audio, None, sample_rate=16000, utt_id="26-495-0019")


def test_segments_past_the_audio_name_the_utterance():
    segments = Segments(np.array([[0, 100], [100, 2000]]), False)
    with pytest.raises(SimilarityInputError, match="'u9'.*1000 samples"):
        acoustic_order(segments, np.ones(1000, dtype=np.float32), None, sample_rate=16000, utt_id="u9")


def test_one_segment_needs_no_similarity():
    order = acoustic_order(Segments(np.array([[0, 50]]), False), np.zeros(50), None, sample_rate=16000)
    assert order.tolist() == [0]


# --------------------------------------------------------------------------- SR with a tiny random Whisper


def reference_semantic_order(frames, segments):
    """The paper's SR written out directly: per-word frames by time, concat(mean, max), cosine, greedy."""
    import math

    pooled = []
    for a, b in segments.spans:
        lo, hi = math.floor(a / 16000 / 0.02), math.ceil(b / 16000 / 0.02)
        window = frames[lo:hi]
        pooled.append(np.concatenate([window.mean(axis=0), window.max(axis=0)]))
    pooled = np.array(pooled, dtype=np.float64)
    unit = pooled / np.linalg.norm(pooled, axis=1, keepdims=True)
    sim = unit @ unit.T
    count = len(sim)
    averages = [(sim[k].sum() - sim[k, k]) / (count - 1) for k in range(count)]
    order = [int(np.argmax(averages))]
    while len(order) < count:
        rest = [k for k in range(count) if k not in order]
        order.append(max(rest, key=lambda k: sim[order[-1], k]))
    return order


def test_semantic_order_on_a_long_utterance_with_a_tiny_whisper():
    from segreconcat_aug.align.whisper_encoder import encoder_features
    from segreconcat_aug.testing import tiny_whisper

    bundle = tiny_whisper()
    # Over 30 s of real speech: the encoder runs on two windows, frames are concatenated.
    utts = ["19-198-0001", "19-198-0002", "27-123349-0009", "26-495-0019", "26-495-0020"]
    audio = np.concatenate([fixture_audio(utt) for utt in utts])
    assert len(audio) > 480000
    words = 0.4 * np.arange(int(len(audio) / 16000 / 0.4))
    segments = word_segments(words + 0.05, words + 0.35, len(audio), 16000, "cover")
    frames = encoder_features(bundle, [audio])[0]
    assert frames.shape == (-(-len(audio) // 320), 64)
    # Frames past 30 s come from encoding the second window on its own.
    second = encoder_features(bundle, [audio[480000:]])[0]
    assert np.allclose(frames[1500:], second, atol=1e-5)
    order = get_strategy("semantic").fn(
        segments, audio, None, sample_rate=16000, frames=frames, utt_id="long", context="utterance"
    )
    assert order.tolist() == reference_semantic_order(frames, segments)
    assert order[0] != 0  # SR starts at the most central segment, not the first
    assert sorted(order.tolist()) == list(range(len(segments)))


def test_semantic_needs_frames_or_whisper_and_checks_them():
    segments = Segments(np.array([[0, 320], [320, 640]]), False)
    semantic = get_strategy("semantic").fn
    with pytest.raises(ValueError, match="needs 'vectors', 'frames' or a Whisper bundle"):
        semantic(segments, np.zeros(640), None, sample_rate=16000)
    with pytest.raises(SimilarityInputError, match="'u7'.*NaN or infinite"):
        semantic(
            segments,
            np.zeros(640),
            None,
            sample_rate=16000,
            frames=np.full((2, 4), np.nan),
            utt_id="u7",
            context="utterance",
        )
    with pytest.raises(ValueError, match="sr_context: unknown 'sentence'"):
        semantic(segments, np.zeros(640), None, sample_rate=16000, vectors=np.eye(2), context="sentence")
    with pytest.raises(ValueError, match="'frames'.*utterance context, not 'segment'"):
        semantic(segments, np.zeros(640), None, sample_rate=16000, frames=np.eye(2))
    # A segment whose pooled features are all zero has no cosine: it is appended at the end.
    frames = np.array([[0.0, 0.0], [1.0, 0.0], [1.0, 1.0]])
    three = Segments(np.array([[0, 320], [320, 640], [640, 960]]), False)
    order = semantic(three, np.zeros(960), None, sample_rate=16000, frames=frames, context="utterance")
    assert order.tolist() == [1, 2, 0]


def test_mfcc_features_equal_the_authors_librosa_mfcc_per_segment():
    audio, segments = fixture_segments("19-198-0002")
    for (start, end), ours in zip(segments.spans, mfcc_features(audio, segments, 16000)):
        assert ours.shape[1] == 1 + (end - start) // 512  # librosa's hop, no padding to 100 frames
        # Equal up to float32 summation order (our mel projection runs on one BLAS thread).
        np.testing.assert_allclose(ours, _authors_mfcc(audio, start, end), rtol=1e-5, atol=1e-4)
    earlier = mfcc_features(audio, segments, 16000, **EARLIER_FRAMING)
    for (start, end), ours in zip(segments.spans, earlier):
        reference = librosa.feature.mfcc(y=audio[start:end], sr=16000, **MFCC)
        np.testing.assert_allclose(ours, reference, rtol=1e-5, atol=1e-4)


def _encode_alone(bundle, piece, padded=False):
    """The paper's SR feature of one segment, by hand: the segment alone through Whisper's encoder."""
    import math

    import torch

    features = bundle.feature_extractor(piece, sampling_rate=16000, return_tensors="pt").input_features
    with torch.no_grad():
        hidden = bundle.model.get_encoder()(features).last_hidden_state[0].double().numpy()
    frames = hidden if padded else hidden[: math.ceil(len(piece) / 320)]
    return np.concatenate([frames.mean(axis=0), frames.max(axis=0)])


@pytest.mark.parametrize("context, padded", [("segment", False), ("segment_padded", True)])
def test_sr_segment_features_equal_encoding_each_segment_alone(context, padded):
    from segreconcat_aug.method.similarity import semantic_order, sr_vectors
    from segreconcat_aug.testing import tiny_whisper

    bundle = tiny_whisper()
    # Few words: every segment is a whole 30 s encoder window, slow on a CPU.
    audio, segments = fixture_segments("19-198-0001", max_words=5)
    other_audio, other_segments = fixture_segments("27-123349-0009", max_words=4)
    # Two utterances' segments in batches of 3 windows: batching mixes segments of both.
    vectors = sr_vectors(
        bundle, [(audio, segments), (other_audio, other_segments)], context=context, batch_size=3
    )
    assert [v.shape for v in vectors] == [(len(segments), 128), (len(other_segments), 128)]
    alone = np.array([_encode_alone(bundle, audio[a:b], padded) for a, b in segments.spans])
    np.testing.assert_allclose(vectors[0], alone, rtol=1e-4, atol=1e-5)
    # The order is the paper's greedy chain over those features.
    sim = cosine_similarity(alone)
    expected = greedy_chain(sim, start_highest_average(sim)).tolist()
    order = semantic_order(segments, audio, None, sample_rate=16000, whisper=bundle, context=context)
    assert order.tolist() == expected


def test_sr_default_is_segment_context_not_utterance_frames():
    from segreconcat_aug.method.similarity import semantic_order, sr_vectors
    from segreconcat_aug.testing import tiny_whisper

    bundle = tiny_whisper()
    audio, segments = fixture_segments("19-198-0001", max_words=5)
    alone = sr_vectors(bundle, [(audio, segments)])[0]  # the default context
    sliced = sr_vectors(bundle, [(audio, segments)], context="utterance")[0]
    assert not np.allclose(alone, sliced, atol=1e-3)  # each segment's features lose the utterance's context
    default = semantic_order(segments, audio, None, sample_rate=16000, whisper=bundle)
    assert (
        default.tolist() == semantic_order(segments, audio, None, sample_rate=16000, vectors=alone).tolist()
    )


@pytest.mark.parametrize("context", ["segment", "utterance"])  # segment_padded: the same encoding as segment
def test_sr_ctranslate2_encoder_equals_the_transformers_encoder_on_the_same_model(tmp_path, context):
    # The tiny random Whisper and its CTranslate2 conversion: the same weights under both backends.
    from tiny_models import tiny_faster_whisper

    from segreconcat_aug.align.whisper_encoder import load_ctranslate2_encoder
    from segreconcat_aug.method.similarity import semantic_order, sr_vectors
    from segreconcat_aug.testing import tiny_whisper

    bundle = tiny_whisper()
    folder = tiny_faster_whisper(tmp_path)
    items = [fixture_segments("19-198-0001", max_words=4), fixture_segments("27-123349-0009", max_words=3)]
    reference = sr_vectors(bundle, items, context=context, batch_size=3)
    # float32: the same arithmetic up to summation order (measured 6e-7 apart, under MKL and without it).
    # int8: CTranslate2 quantizes the weights and picks its int8 GEMM by CPU (Intel MKL on Intel, another
    # backend elsewhere), so elementwise differences vary by machine (3e-3 on an Intel Xeon, 2.3e-2 on an
    # AMD EPYC). What SR uses is each vector's direction: bound the relative error and the cosine, which
    # 8-bit weights keep near 1 on any CPU (measured on an Intel Xeon: relative error under 0.1 %, 1 - cos < 3e-7).
    for compute_type in ("float32", "int8"):
        encoder = load_ctranslate2_encoder(folder, device="cpu", compute_type=compute_type)
        assert (encoder.backend, encoder.dtype) == ("faster-whisper", compute_type)
        vectors = sr_vectors(encoder, items, context=context, batch_size=3)
        for got, expected in zip(vectors, reference):
            assert got.shape == expected.shape
            if compute_type == "float32":
                np.testing.assert_allclose(got, expected, atol=1e-5)
            relative = np.linalg.norm(got - expected, axis=1) / np.linalg.norm(expected, axis=1)
            assert relative.max() <= (1e-5 if compute_type == "float32" else 0.05)
            agreement = (
                (got * expected).sum(1) / np.linalg.norm(got, axis=1) / np.linalg.norm(expected, axis=1)
            )
            assert agreement.min() >= (1 - 1e-9 if compute_type == "float32" else 0.999)
        if compute_type == "float32":  # the same greedy chains
            for (audio, segments), got, expected in zip(items, vectors, reference):
                kwargs = dict(sample_rate=16000, context="segment")
                assert (
                    semantic_order(segments, audio, None, vectors=got, **kwargs).tolist()
                    == semantic_order(segments, audio, None, vectors=expected, **kwargs).tolist()
                )

"""Similarity-based rearrangements: AR (acoustic, MFCC + DTW) and SR (semantic, Whisper encoder).

Both chain greedily (:func:`greedy_chain`); their options and results on bad input are in
docs/rearrangement.md.

>>> import numpy as np
>>> sim = np.array([[1.0, 0.2, 0.9], [0.2, 1.0, 0.5], [0.9, 0.5, 1.0]])
>>> greedy_chain(sim, start=0).tolist()
[0, 2, 1]
>>> similarity_order(sim, start="highest_average").tolist()
[2, 0, 1]
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence

import numpy as np

from ..errors import UserError
from .segments import Segments
from .strategies import register_strategy

logger = logging.getLogger(__name__)


class SimilarityInputError(UserError, ValueError):
    """Audio or features a similarity order cannot be computed from; names the utterance."""


def start_first(similarity: np.ndarray) -> int:
    """AR's start: the first segment (the first word once a leading silence is pinned)."""
    return 0


def start_highest_average(similarity: np.ndarray) -> int:
    """SR's start: the segment with the highest average similarity to the *other* segments.

    >>> start_highest_average(np.array([[1.0, 0.1, 0.2], [0.1, 1.0, 0.9], [0.2, 0.9, 1.0]]))
    2
    """
    count = len(similarity)
    if count == 1:
        return 0
    values = np.array(similarity, dtype=np.float64)
    np.fill_diagonal(values, np.nan)
    finite = np.isfinite(values)
    sums = np.where(finite, values, 0.0).sum(axis=1)
    counts = finite.sum(axis=1)
    means = np.where(counts > 0, sums / np.maximum(counts, 1), -np.inf)
    return int(np.argmax(means))


START_RULES = {"first": start_first, "highest_average": start_highest_average}


def greedy_chain(similarity: np.ndarray, start: int) -> np.ndarray:
    """Greedy traversal of a similarity matrix (the paper's AR/SR ordering).

    >>> nan = np.nan
    >>> sim = np.array([[1, 0.5, nan, 0.2], [0.5, 1, nan, 0.9], [nan] * 4, [0.2, 0.9, nan, 1]])
    >>> greedy_chain(sim, 0).tolist()
    [0, 1, 3, 2]
    """
    values = np.asarray(similarity, dtype=np.float64)
    count = len(values)
    if values.shape != (count, count):
        raise ValueError(f"similarity must be a square matrix, got shape {values.shape}")
    if count == 0:
        return np.zeros(0, dtype=np.int64)
    if not 0 <= start < count:
        raise ValueError(f"start {start} is outside 0..{count - 1}")
    used = np.zeros(count, dtype=bool)
    order = [int(start)]
    used[start] = True
    current = int(start)
    while len(order) < count:
        row = values[current]
        candidates = np.flatnonzero(~used & np.isfinite(row))
        if len(candidates) == 0:
            break  # the rest is unreachable from here
        current = int(candidates[np.argmax(row[candidates])])  # argmax: first (lowest) index on ties
        order.append(current)
        used[current] = True
    order.extend(np.flatnonzero(~used).tolist())
    return np.asarray(order, dtype=np.int64)


def similarity_order(similarity: np.ndarray, start: str | int = "first") -> np.ndarray:
    """Greedy order with a named start rule (:data:`START_RULES`) or an explicit index."""
    if isinstance(start, str):
        try:
            rule = START_RULES[start]
        except KeyError:
            raise ValueError(f"unknown start rule {start!r}; choose from {sorted(START_RULES)}") from None
        start = rule(similarity) if len(similarity) else 0
    return greedy_chain(similarity, int(start))


def _utterance_name(utt_id: str | None) -> str:
    return repr(utt_id) if utt_id else "(unnamed)"


def _check_audio(audio: np.ndarray, segments: Segments, utt_id: str | None) -> np.ndarray:
    name = _utterance_name(utt_id)
    if audio is None:
        raise SimilarityInputError(f"utterance {name}: no audio given")
    audio = np.asarray(audio)
    if audio.ndim != 1:
        raise SimilarityInputError(f"utterance {name}: expected 1-D mono audio, got shape {audio.shape}")
    if not np.all(np.isfinite(audio)):
        raise SimilarityInputError(f"utterance {name}: audio contains NaN or infinite samples")
    if len(segments) and int(segments.spans[:, 1].max()) > len(audio):
        raise SimilarityInputError(
            f"utterance {name}: segments end at sample {int(segments.spans[:, 1].max())} "
            f"but the audio has {len(audio)} samples"
        )
    return audio


LEADING_SILENCE_RULES = ("pin", "chain")


@functools.lru_cache(maxsize=8)
def _mel_basis(sample_rate: int, n_fft: int, n_mels: int) -> np.ndarray:
    import librosa

    return librosa.filters.mel(sr=sample_rate, n_fft=n_fft, n_mels=n_mels)


def mfcc_features(
    audio: np.ndarray,
    segments: Segments,
    sample_rate: int,
    *,
    n_mfcc: int = 13,
    n_fft: int = 2048,
    hop_length: int = 512,
    n_mels: int = 128,
    scale: float = 32768.0,
    fixed_frames: int | None = None,
    pad_short: bool = False,
) -> list[np.ndarray]:
    """One ``(n_mfcc, T_k)`` MFCC matrix per segment: ``librosa.feature.mfcc`` of ``scale * segment``.

    >>> from segreconcat_aug.method.segments import Segments
    >>> segs = Segments(np.array([[0, 1600], [1600, 1700]]), False)
    >>> [m.shape for m in mfcc_features(np.ones(1700, dtype=np.float32), segs, 16000)]
    [(13, 4), (13, 1)]
    >>> old = dict(n_fft=400, hop_length=160, n_mels=40, scale=1.0, pad_short=True)
    >>> [m.shape for m in mfcc_features(np.ones(1700, dtype=np.float32), segs, 16000, **old)]
    [(13, 11), (13, 3)]
    """
    from threadpoolctl import threadpool_limits

    # One BLAS thread: the mel projections are small (128 x 1025 by a few frames), and a
    # multithreaded BLAS only spins on them (ten times slower on a busy machine).
    with threadpool_limits(limits=1, user_api="blas"):
        return _mfcc_features(
            audio, segments, sample_rate, n_mfcc, n_fft, hop_length, n_mels, scale, fixed_frames, pad_short
        )


def _mfcc_features(
    audio, segments, sample_rate, n_mfcc, n_fft, hop_length, n_mels, scale, fixed_frames, pad_short
):
    import librosa

    mel_basis = _mel_basis(int(sample_rate), int(n_fft), int(n_mels))
    features = []
    for start, end in segments.spans:
        piece = np.asarray(audio[start:end], dtype=np.float32)
        if scale != 1.0:  # the authors' MFCCs are of int16-range samples
            piece = piece * np.float32(scale)
        if pad_short and len(piece) < n_fft:
            piece = np.pad(piece, (0, n_fft - len(piece)))
        # librosa.feature.mfcc(y=piece, ...) step by step (same values), with the mel
        # filterbank built once instead of once per segment.
        power = np.abs(librosa.stft(piece, n_fft=n_fft, hop_length=hop_length)) ** 2
        mel = np.einsum("...ft,mf->...mt", power, mel_basis, optimize=True)
        mfcc = librosa.feature.mfcc(S=librosa.power_to_db(mel), n_mfcc=n_mfcc)
        if fixed_frames is not None:
            mfcc = librosa.util.fix_length(mfcc, size=int(fixed_frames), axis=-1)
        features.append(mfcc.astype(np.float64))
    return features


def acoustic_similarity(features: Sequence[np.ndarray]) -> np.ndarray:
    """``s_ij = 1 / (1 + DTW(M_i, M_j))`` for all pairs.

    >>> acoustic_similarity([np.zeros((1, 2)), np.ones((1, 2))]).tolist()
    [[1.0, 0.3333333333333333], [0.3333333333333333, 1.0]]
    """
    from .dtw import pairwise_dtw  # numba compiles on first use: keep importing the registry light

    return 1.0 / (1.0 + pairwise_dtw(features))


@register_strategy("acoustic", precomputed=True, paper_name="AR")
def acoustic_order(
    segments: Segments,
    audio: np.ndarray,
    rng=None,
    *,
    sample_rate: int,
    utt_id: str | None = None,
    n_mfcc: int = 13,
    n_fft: int = 2048,
    hop_length: int = 512,
    n_mels: int = 128,
    scale: float = 32768.0,
    fixed_frames: int | None = None,
    pad_short: bool = False,
    start: str | int = "first",
    leading_silence: str = "pin",
    **_,
) -> np.ndarray:
    """AR: MFCC + DTW similarity, greedy chain from the first word.

    >>> from segreconcat_aug.method.segments import Segments
    >>> rng = np.random.default_rng(0)
    >>> audio = np.concatenate([np.zeros(800), rng.normal(size=4000), 0.1 * rng.normal(size=4000)])
    >>> segs = Segments(np.array([[0, 800], [800, 4800], [4800, 8800]]), True)
    >>> acoustic_order(segs, audio.astype(np.float32), None, sample_rate=16000).tolist()[0]
    0
    """
    audio = _check_audio(audio, segments, utt_id)
    if leading_silence not in LEADING_SILENCE_RULES:
        raise ValueError(f"unknown leading_silence {leading_silence!r}; choose from {LEADING_SILENCE_RULES}")
    pinned = 1 if segments.leading_silence and leading_silence == "pin" else 0
    if len(segments) - pinned < 2:
        return np.arange(len(segments), dtype=np.int64)
    words = Segments(segments.spans[pinned:], segments.leading_silence and not pinned)
    features = mfcc_features(
        audio,
        words,
        sample_rate,
        n_mfcc=n_mfcc,
        n_fft=n_fft,
        hop_length=hop_length,
        n_mels=n_mels,
        scale=scale,
        fixed_frames=fixed_frames,
        pad_short=pad_short,
    )
    order = similarity_order(acoustic_similarity(features), start) + pinned
    return np.concatenate([np.arange(pinned, dtype=np.int64), order])


def pool_segments(
    frames: np.ndarray, segments: Segments, sample_rate: int, frame_rate: int = 50
) -> np.ndarray:
    """``concat(mean, max)`` of each segment's encoder frames: ``(N, 2 * dim)``.

    >>> from segreconcat_aug.method.segments import Segments
    >>> frames = np.arange(10, dtype=np.float32).reshape(10, 1)  # 10 frames = 0.2 s at 50 frames/s
    >>> pool_segments(frames, Segments(np.array([[0, 960], [960, 3200]]), False), 16000).tolist()
    [[1.0, 2.0], [6.0, 9.0]]
    """
    frames = np.asarray(frames)
    total = len(frames)
    if total == 0:
        raise ValueError("no encoder frames to pool")
    pooled = np.empty((len(segments), 2 * frames.shape[1]), dtype=np.float64)
    for k, (start, end) in enumerate(segments.spans):
        lo = min(int(start) * frame_rate // sample_rate, total - 1)
        hi = min(-(-int(end) * frame_rate // sample_rate), total)
        hi = max(hi, lo + 1)
        window = frames[lo:hi].astype(np.float64)
        pooled[k, : frames.shape[1]] = window.mean(axis=0)
        pooled[k, frames.shape[1] :] = window.max(axis=0)
    return pooled


#: Where SR's segment features come from (see the module doc); the first is the default.
SR_CONTEXTS = ("segment", "segment_padded", "utterance")


def check_sr_context(context: str) -> str:
    """Return ``context`` if it is one of :data:`SR_CONTEXTS`, else raise naming the choices."""
    if context not in SR_CONTEXTS:
        raise ValueError(f"sr_context: unknown {context!r}; choose from {list(SR_CONTEXTS)}")
    return context


def sr_vectors(whisper, items, *, context: str = "segment", batch_size: int = 8) -> list[np.ndarray]:
    """SR's pooled ``concat(mean, max)`` vectors, ``(N_k, 2 * d_model)`` per ``(audio, segments)`` item."""
    from ..align.whisper_encoder import SAMPLE_RATE, encoder_features, encoder_pooled

    check_sr_context(context)
    if context == "utterance":
        frames = encoder_features(whisper, [audio for audio, _ in items], batch_size=batch_size)
        return [pool_segments(f, segments, SAMPLE_RATE) for f, (_, segments) in zip(frames, items)]
    pieces = [audio[start:end] for audio, segments in items for start, end in segments.spans]
    pooled = encoder_pooled(whisper, pieces, batch_size=batch_size, padded=context == "segment_padded")
    bounds = np.cumsum([0] + [len(segments) for _, segments in items])
    return [pooled[a:b] for a, b in zip(bounds[:-1], bounds[1:])]


def cosine_similarity(vectors: np.ndarray) -> np.ndarray:
    """Pairwise cosine similarity of rows; a zero row gives NaN (unreachable).

    >>> cosine_similarity(np.array([[1.0, 0.0], [1.0, 1.0], [0.0, 0.0]])).round(3).tolist()
    [[1.0, 0.707, nan], [0.707, 1.0, nan], [nan, nan, nan]]
    """
    vectors = np.asarray(vectors, dtype=np.float64)
    norms = np.linalg.norm(vectors, axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        unit = vectors / np.where(norms > 0, norms, np.nan)[:, None]
    return unit @ unit.T


@register_strategy("semantic", precomputed=True, paper_name="SR")
def semantic_order(
    segments: Segments,
    audio: np.ndarray,
    rng=None,
    *,
    sample_rate: int,
    utt_id: str | None = None,
    whisper=None,
    frames: np.ndarray | None = None,
    vectors: np.ndarray | None = None,
    context: str = "segment",
    start: str | int = "highest_average",
    **_,
) -> np.ndarray:
    """SR: Whisper-encoder similarity, greedy chain from the most central segment.

    >>> from segreconcat_aug.method.segments import Segments
    >>> frames = np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.2, 0.8], [1.0, 0.1]])
    >>> segs = Segments(np.array([[k * 320, (k + 1) * 320] for k in range(5)]), False)
    >>> semantic_order(segs, np.zeros(1600), None, sample_rate=16000, frames=frames, context="utterance").tolist()
    [1, 4, 0, 3, 2]
    >>> semantic_order(segs, np.zeros(1600), None, sample_rate=16000, vectors=frames).tolist()
    [1, 4, 0, 3, 2]
    """
    from ..align.whisper_encoder import FRAME_SECONDS, SAMPLE_RATE

    check_sr_context(context)
    audio = _check_audio(audio, segments, utt_id)
    name = _utterance_name(utt_id)
    if len(segments) < 2:
        return np.arange(len(segments), dtype=np.int64)
    if frames is not None and context != "utterance":
        raise ValueError(
            f"'frames' (one encoding of the utterance) are SR's utterance context, not {context!r}"
        )
    if vectors is None and frames is None:
        if whisper is None:
            raise ValueError(
                "the semantic strategy needs 'vectors', 'frames' or a Whisper bundle ('whisper')"
            )
        if sample_rate != SAMPLE_RATE:
            raise SimilarityInputError(
                f"utterance {name}: Whisper needs {SAMPLE_RATE} Hz audio, got {sample_rate}"
            )
        vectors = sr_vectors(whisper, [(audio, segments)], context=context)[0]
    if vectors is None:
        frames = np.asarray(frames)
        if frames.ndim != 2 or len(frames) == 0:
            raise SimilarityInputError(
                f"utterance {name}: expected (frames, dim) encoder output, got {frames.shape}"
            )
        if not np.all(np.isfinite(frames)):
            raise SimilarityInputError(f"utterance {name}: Whisper encoder output has NaN or infinite values")
        vectors = pool_segments(frames, segments, sample_rate, int(round(1 / FRAME_SECONDS)))
    vectors = np.asarray(vectors)
    if vectors.shape[0] != len(segments) or vectors.ndim != 2:
        raise SimilarityInputError(
            f"utterance {name}: expected ({len(segments)}, dim) segment vectors, got {vectors.shape}"
        )
    if not np.all(np.isfinite(vectors)):
        raise SimilarityInputError(f"utterance {name}: Whisper encoder output has NaN or infinite values")
    return similarity_order(cosine_similarity(vectors), start)

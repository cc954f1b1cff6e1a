"""SegReConcat, top to bottom: alignment -> segments -> order -> concatenation.

For one anonymized utterance ``u`` with cached word times:

1. *Segmentation* (:mod:`segreconcat_aug.segments`): word times become sample
   spans ``w_1 .. w_N``.
2. *Rearrangement* (:mod:`segreconcat_aug.strategies`): a strategy gives an
   order ``g``; RR draws a fresh permutation from ``(seed, epoch, utterance id)``
   so every epoch sees a new one, AR/SR read their fixed order from the order cache.
3. *Concatenation*: the output is ``u`` itself, untouched, followed by the
   segments in the new order, joined with short equal-power crossfades.

Modes (YAML ``mode``): ``concat`` (SegReConcat), ``rearranged`` (the rearranged
sequence alone, the paper's Table 1 rows "RR", "AR", "SR") and ``none``.

Output length, exactly (``c`` = crossfade in samples, ``l_k`` segment lengths
in the new order): each join between two rearranged segments overlaps
``o_k = min(c, l_k // 2, l_{k+1} // 2)`` samples, so the rearranged sequence is
``sum(l) - sum(o)`` long; ``concat`` adds ``len(u)`` (the first rearranged
segment fades in over ``min(c, l_1 // 2)`` samples instead of overlapping, so
the original half stays bit-exact).

Example
-------
>>> import numpy as np
>>> from segreconcat_aug.alignment import AlignmentIndex
>>> index = AlignmentIndex(["u1"], [1.0], [0, 3], [0.0, 0.3, 0.6], [0.3, 0.6, 1.0], ["test"])
>>> aug = SegReConcat(index, mode="concat", crossfade=0.0, sample_rate=10)
>>> audio = np.arange(10, dtype=np.float32)
>>> out = aug(audio, "u1", epoch=1)
>>> out[:10].tolist() == audio.tolist(), sorted(out[10:].tolist()) == audio.tolist()
(True, True)
"""

from __future__ import annotations

import logging
import zlib

import numpy as np
import torch

from .alignment import AlignmentIndex
from .segments import SEGMENT_POLICIES, Segments, word_segments
from .strategies import get_strategy

logger = logging.getLogger(__name__)

MODES = ("concat", "rearranged", "none")
MISSING_POLICIES = ("error", "passthrough")
COUNT_KEYS = (
    "augmented",  # output built from a rearrangement
    "missing_alignment",  # no alignment (passthrough policy): original returned
    "few_segments",  # 0 or 1 segments in "rearranged" mode: original returned
    "no_segments",  # 0 segments in "concat" mode: original returned
    "missing_order",  # precomputed strategy without an order (passthrough policy)
)
_MAX_WORKER_SLOTS = 64  # row 0: main process; row k + 1: DataLoader worker k


class MissingAlignmentError(KeyError):
    """Training utterances have no alignment and the policy is ``error``."""

    def __str__(self):  # KeyError would print the message with quotes
        return str(self.args[0])


def seeded_rng(seed: int, epoch: int, key: str, stream: int = 0) -> np.random.Generator:
    """A generator fixed by ``(seed, epoch, key, stream)``, equal in every process.

    ``zlib.crc32`` is used, not ``hash``: Python salts string hashes per process.

    >>> int(seeded_rng(1, 2, "u").integers(1000)) == int(seeded_rng(1, 2, "u").integers(1000))
    True
    """
    return np.random.default_rng([seed, epoch, zlib.crc32(key.encode("utf-8")), stream])


def _fades(length: int) -> tuple[np.ndarray, np.ndarray]:
    """Equal-power fade-in and fade-out curves (sin/cos), ``length`` samples."""
    phase = (np.arange(length, dtype=np.float32) + 0.5) / length * (np.pi / 2)
    return np.sin(phase), np.cos(phase)


def join_with_crossfade(pieces: list[np.ndarray], crossfade: int, fade_in_first: bool = False) -> np.ndarray:
    """Join pieces, overlapping neighbours by ``min(crossfade, len_a // 2, len_b // 2)``.

    >>> ones = np.ones(8, dtype=np.float32)
    >>> join_with_crossfade([ones, ones, ones], 2).shape
    (20,)
    >>> join_with_crossfade([ones, ones], 0).tolist() == [1.0] * 16
    True
    """
    lengths = [len(piece) for piece in pieces]
    overlaps = [min(crossfade, lengths[k] // 2, lengths[k + 1] // 2) for k in range(len(pieces) - 1)]
    out = np.empty(sum(lengths) - sum(overlaps), dtype=np.float32)
    position = 0
    for k, piece in enumerate(pieces):
        overlap = overlaps[k - 1] if k > 0 else 0
        start = position - overlap
        if overlap:
            fade_in, fade_out = _fades(overlap)
            out[start:position] = out[start:position] * fade_out + piece[:overlap] * fade_in
        out[position : start + len(piece)] = piece[overlap:]
        if k == 0 and fade_in_first:
            head = min(crossfade, len(piece) // 2)
            if head:
                out[:head] *= _fades(head)[0]
        position = start + len(piece)
    return out


def rearrange(audio: np.ndarray, segments: Segments, order: np.ndarray, crossfade: int, fade_in_first=False):
    """The segments of ``audio`` in ``order``, joined with crossfades."""
    pieces = [audio[start:end] for start, end in segments.spans[order]]
    return join_with_crossfade(pieces, crossfade, fade_in_first)


class SegReConcat:
    """The SegReConcat augmenter, callable inside DataLoader workers.

    Parameters
    ----------
    alignments : AlignmentIndex
        The word-alignment cache (:func:`segreconcat_aug.alignment.load_alignments`).
    mode : {"concat", "rearranged", "none"}
    strategy : str
        A name in :data:`segreconcat_aug.strategies.STRATEGIES` (``random`` = RR).
    segment_policy : {"cover", "words"}
        See :mod:`segreconcat_aug.segments`.
    crossfade : float
        Seconds of crossfade at each join; 0 disables.
    seed : int
        With the epoch and utterance id, fixes every random permutation.
    sample_rate : int
    missing_alignment : {"error", "passthrough"}
        ``error``: :meth:`check_coverage` raises before training starts.
        ``passthrough``: the utterance is returned unaugmented and counted.
    orders : mapping, optional
        Utterance id -> order, for strategies registered ``precomputed``
        (the order cache of ``recipes/compute_orders.py``).
    min_leading_silence : float
        See :func:`segreconcat_aug.segments.word_segments`.
    """

    def __init__(
        self,
        alignments: AlignmentIndex,
        mode: str = "concat",
        strategy: str = "random",
        segment_policy: str = "cover",
        crossfade: float = 0.005,
        seed: int = 1986,
        sample_rate: int = 16000,
        missing_alignment: str = "error",
        orders=None,
        min_leading_silence: float = 0.05,
    ):
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}; choose from {MODES}")
        if segment_policy not in SEGMENT_POLICIES:
            raise ValueError(f"unknown segment policy {segment_policy!r}; choose from {SEGMENT_POLICIES}")
        if missing_alignment not in MISSING_POLICIES:
            raise ValueError(f"unknown missing_alignment policy {missing_alignment!r}; choose from {MISSING_POLICIES}")
        if crossfade < 0:
            raise ValueError(f"crossfade must be >= 0 seconds, got {crossfade}")
        self.strategy = get_strategy(strategy)
        if self.strategy.precomputed and orders is None and mode != "none":
            raise ValueError(
                f"strategy {strategy!r} reads precomputed orders: pass the order cache "
                "(recipes/compute_orders.py writes it)"
            )
        self.alignments = alignments
        self.mode = mode
        self.segment_policy = segment_policy
        self.crossfade_samples = int(round(crossfade * sample_rate))
        self.seed = int(seed)
        self.sample_rate = sample_rate
        self.missing_alignment = missing_alignment
        self.orders = orders
        self.min_leading_silence = min_leading_silence
        # Shared memory: workers' counts reach the main process; one row per
        # worker so concurrent increments never race.
        self._counts = torch.zeros(_MAX_WORKER_SLOTS, len(COUNT_KEYS), dtype=torch.int64).share_memory_()

    def check_coverage(self, utt_ids) -> list[str]:
        """Find utterances without an alignment (or order); raise under ``error``.

        Returns the missing ids (for the ``passthrough`` policy to report).
        """
        if self.mode == "none":
            return []
        utt_ids = list(utt_ids)
        missing = self.alignments.missing(utt_ids)
        what = "alignment"
        if not missing and self.strategy.precomputed:
            missing = [utt for utt in utt_ids if utt not in self.orders]
            what = f"{self.strategy.name} order"
        if missing and self.missing_alignment == "error":
            raise MissingAlignmentError(
                f"{len(missing)} of {len(utt_ids)} training utterances have no {what}; "
                f"first: {missing[:5]}. Run recipes/align.py (and compute_orders.py for AR/SR) "
                "or set missing_alignment: passthrough"
            )
        if missing:
            logger.warning("%d utterances have no %s; they pass through unaugmented", len(missing), what)
        return missing

    def segments(self, utt_id: str, num_samples: int) -> Segments:
        """The segments of one utterance under this augmenter's policy."""
        starts, ends = self.alignments.spans(utt_id)
        return word_segments(
            starts, ends, num_samples, self.sample_rate, self.segment_policy, self.min_leading_silence
        )

    def order(self, utt_id: str, segments: Segments, audio: np.ndarray, epoch: int) -> np.ndarray | None:
        """The rearrangement order, or None when a precomputed one is missing."""
        if self.strategy.precomputed:
            if utt_id not in self.orders:
                return None
            order = np.asarray(self.orders[utt_id], dtype=np.int64)
        else:
            rng = seeded_rng(self.seed, epoch, utt_id)
            order = np.asarray(self.strategy.fn(segments, audio, rng, sample_rate=self.sample_rate))
        if len(order) != len(segments) or not np.array_equal(np.sort(order), np.arange(len(segments))):
            raise ValueError(
                f"utterance {utt_id!r}: {self.strategy.name} order {order.tolist()} is not a permutation "
                f"of its {len(segments)} segments (stale order cache? rerun compute_orders.py)"
            )
        return order

    def __call__(self, audio, utt_id: str, epoch: int) -> np.ndarray:
        """Augment one waveform (1-D numpy or torch); returns float32 numpy."""
        audio = audio.numpy() if isinstance(audio, torch.Tensor) else np.asarray(audio)
        audio = audio.astype(np.float32, copy=False)
        if self.mode == "none":
            return audio
        if utt_id not in self.alignments:
            if self.missing_alignment == "error":
                raise MissingAlignmentError(f"utterance {utt_id!r} has no alignment")
            self._count("missing_alignment")
            return audio
        segments = self.segments(utt_id, len(audio))
        if len(segments) == 0 or (self.mode == "rearranged" and len(segments) < 2):
            self._count("no_segments" if self.mode == "concat" else "few_segments")
            return audio
        order = self.order(utt_id, segments, audio, epoch)
        if order is None:
            if self.missing_alignment == "error":
                raise MissingAlignmentError(f"utterance {utt_id!r} has no {self.strategy.name} order")
            self._count("missing_order")
            return audio
        self._count("augmented")
        if self.mode == "rearranged":
            return rearrange(audio, segments, order, self.crossfade_samples)
        tail = rearrange(audio, segments, order, self.crossfade_samples, fade_in_first=True)
        return np.concatenate([audio, tail])

    def _count(self, key: str) -> None:
        info = torch.utils.data.get_worker_info()
        slot = 0 if info is None else 1 + info.id % (_MAX_WORKER_SLOTS - 1)
        self._counts[slot, COUNT_KEYS.index(key)] += 1

    def counts(self) -> dict[str, int]:
        """Counts summed over the main process and all workers since the last reset."""
        totals = self._counts.sum(dim=0).tolist()
        return dict(zip(COUNT_KEYS, totals))

    def reset_counts(self) -> None:
        self._counts.zero_()

    def report(self) -> str:
        """One line for the epoch log, e.g. ``augmented=9800 missing_alignment=12``."""
        return " ".join(f"{key}={value}" for key, value in self.counts().items() if value or key == "augmented")

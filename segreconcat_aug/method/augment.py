"""SegReConcat, top to bottom: alignment -> segments -> order -> concatenation.

For one anonymized utterance ``u`` with cached word times:

1. *Segmentation* (:mod:`segreconcat_aug.method.segments`): word times become sample
   spans ``w_1 .. w_N``, cut per strategy as the authors' scripts cut them
   (``segment_policy: authors``; ``cover`` and the others are options).
2. *Rearrangement* (:mod:`segreconcat_aug.method.strategies`): a strategy gives an
   order ``g``. RR draws one permutation per utterance for the whole training,
   from ``(seed, utterance id)`` (:mod:`segreconcat_aug.seeding`), as the paper's fixed rearranged copy
   (``rr_redraw: once``; ``epoch`` draws a new one every epoch); AR/SR read
   their fixed order from the order cache.
3. *Concatenation*: the output is ``u`` itself, untouched, followed by the
   segments in the new order, spliced hard as the authors do (``crossfade: 0``;
   a positive crossfade joins them with short equal-power crossfades). For SR
   the rearranged audio is zero-padded to ``len(u)`` and peak-normalized, as the
   authors' SR script writes it (``sr_pad_normalize``).

Modes (YAML ``mode``): ``concat`` (SegReConcat), ``rearranged`` (the rearranged
sequence alone, the paper's Table 1 rows "RR", "AR", "SR") and ``none``.

Output length, exactly (``c`` = crossfade in samples, ``l_k`` segment lengths
in the new order): each join between two rearranged segments overlaps
``o_k = min(c, l_k // 2, l_{k+1} // 2)`` samples, so the rearranged sequence is
``sum(l) - sum(o)`` long (at least ``len(u)`` for SR with padding); ``concat``
adds ``len(u)`` (the first rearranged segment fades in over ``min(c, l_1 // 2)``
samples instead of overlapping, so the original half stays bit-exact).

The augmenter first *plans* the output (:class:`Plan`: which input span goes
where, with which fades and gain) and then *renders* it (:func:`render`). The
training pipeline renders only its random 3 s crop of the plan, from a read of
just the input samples that crop is made of (:meth:`Plan.input_ranges`), so the
cost per sample does not grow with the length of the augmented utterance.

Example
-------
>>> import numpy as np
>>> from segreconcat_aug.align.cache import AlignmentIndex
>>> index = AlignmentIndex(["u1"], [1.0], [0, 3], [0.0, 0.3, 0.6], [0.3, 0.6, 1.0], ["test"])
>>> aug = SegReConcat(index, mode="concat", sample_rate=10)
>>> audio = np.arange(10, dtype=np.float32)
>>> out = aug(audio, "u1", epoch=1)
>>> out[:10].tolist() == audio.tolist(), sorted(out[10:].tolist()) == audio.tolist()
(True, True)
"""

from __future__ import annotations

import functools
import logging
from typing import NamedTuple

import numba
import numpy as np
import torch

from ..align.cache import AlignmentIndex
from ..errors import UserError
from ..seeding import KeyedRandom
from .segments import Segments, span_rule, word_segments
from .strategies import get_strategy, is_order_of

logger = logging.getLogger(__name__)

MODES = ("concat", "rearranged", "none")
MISSING_POLICIES = ("error", "passthrough")
RR_REDRAWS = ("once", "epoch")
_ONCE = 0  # the epoch number a ``once`` draw is keyed by: the same in every epoch
COUNT_KEYS = (
    "augmented",  # output built from a rearrangement
    "missing_alignment",  # no alignment (passthrough policy): original returned
    "few_segments",  # 0 or 1 segments in "rearranged" mode: original returned
    "no_segments",  # 0 segments in "concat" mode: original returned
    "missing_order",  # precomputed strategy without an order (passthrough policy)
)
_MAX_WORKER_SLOTS = 64  # row 0: main process; row k + 1: DataLoader worker k


class MissingAlignmentError(UserError, KeyError):
    """Training utterances have no alignment and the policy is ``error``."""

    def __str__(self):  # KeyError would print the message with quotes
        return str(self.args[0])


class Plan(NamedTuple):
    """Where each piece of the input lands in the output.

    The output is the sum of the pieces, each placed at its ``offset``, scaled
    by its ``gain``, with equal-power fades over its first ``fade_in`` and last
    ``fade_out`` samples; neighbours joined by a crossfade overlap by exactly
    that many samples; zeros follow the last piece up to ``pad_to`` samples.
    Planning first lets the training pipeline render only its 3 s crop.
    """

    source: np.ndarray  # (P, 2) int64: [start, end) in the input audio
    offset: np.ndarray  # (P,) int64: output position of each piece
    fade_in: np.ndarray  # (P,) int64
    fade_out: np.ndarray  # (P,) int64
    crossfade: int = 0  # the crossfade asked for, in samples (fades are at most this long)
    gain: np.ndarray | None = None  # (P,) float64 factors; None: all 1 (samples copied bit-exactly)
    pad_to: int = 0  # output length at least this: zeros after the last piece

    @property
    def content_length(self) -> int:
        """Samples up to the end of the last piece (before any zero padding)."""
        if len(self.offset) == 0:
            return 0
        return int(self.offset[-1] + self.source[-1, 1] - self.source[-1, 0])

    @property
    def length(self) -> int:
        """Output length in samples."""
        return max(self.content_length, int(self.pad_to))

    def padded_and_scaled(self, pad_to: int, gain: float, first: int = 0) -> Plan:
        """This plan with pieces ``first:`` scaled by ``gain`` and zeros up to ``pad_to`` samples.

        >>> plan = chain_plan(np.array([[3, 6], [0, 2]]), 0).padded_and_scaled(7, 0.5)
        >>> render(np.arange(6, dtype=np.float32), plan).tolist()
        [1.5, 2.0, 2.5, 0.0, 0.5, 0.0, 0.0]
        """
        gains = np.ones(len(self.offset), dtype=np.float64) if self.gain is None else self.gain.copy()
        gains[first:] *= gain
        return self._replace(gain=gains, pad_to=int(pad_to))

    def input_ranges(self, start: int, stop: int, merge_gap: int = 0) -> np.ndarray:
        """The input samples that output samples ``[start, stop)`` are made of.

        Sorted, disjoint ``[a, b)`` ranges, shape ``(k, 2)``; ranges at most
        ``merge_gap`` samples apart are joined (for a reader, one seek costs
        about as much as reading a few thousand samples). Reading just these
        ranges is enough to render the window (``render(..., audio_start=a_0)``).

        >>> plan = chain_plan(np.array([[6, 9], [0, 3]]), 0, after_original=10)
        >>> plan.input_ranges(0, 4).tolist(), plan.input_ranges(11, 14).tolist()
        ([[0, 4]], [[0, 1], [7, 9]])
        >>> plan.input_ranges(11, 14, merge_gap=6).tolist(), plan.input_ranges(20, 30).shape
        ([[0, 9]], (0, 2))
        """
        return _input_ranges_kernel(self.source, self.offset, int(start), int(stop), int(merge_gap))


def chain_plan(
    spans: np.ndarray, crossfade: int, fade_in_first: bool = False, after_original: int = 0
) -> Plan:
    """Place ``spans`` one after another, crossfading neighbours.

    Neighbours overlap by ``min(crossfade, len_a // 2, len_b // 2)`` samples, so
    no piece is faded at both ends over the same samples. With
    ``after_original=n`` the chain follows the untouched input ``[0, n)``
    (the SegReConcat concatenation), without overlapping it.

    >>> plan = chain_plan(np.array([[0, 8], [8, 16], [16, 24]]), 2)
    >>> plan.offset.tolist(), plan.length
    ([0, 6, 12], 20)
    >>> chain_plan(np.array([[4, 8], [0, 4]]), 0, after_original=8).offset.tolist()
    [0, 8, 12]
    """
    spans = np.ascontiguousarray(spans, dtype=np.int64).reshape(-1, 2)
    return Plan(
        *_chain_kernel(spans, int(crossfade), bool(fade_in_first), int(after_original)), int(crossfade)
    )


@numba.njit(cache=True, nogil=True)
def _chain_kernel(spans, crossfade, fade_in_first, after_original):  # pragma: no cover - compiled
    first = 1 if after_original > 0 else 0  # row 0: the untouched original, when there is one
    rows = len(spans) + first
    source = np.zeros((rows, 2), dtype=np.int64)
    offset = np.zeros(rows, dtype=np.int64)
    fade_in = np.zeros(rows, dtype=np.int64)
    fade_out = np.zeros(rows, dtype=np.int64)
    if first:
        source[0, 1] = after_original
    position = after_original
    for i in range(len(spans)):
        row = i + first
        length = spans[i, 1] - spans[i, 0]
        if i > 0:
            previous = spans[i - 1, 1] - spans[i - 1, 0]
            overlap = min(crossfade, previous // 2, length // 2)
            fade_in[row], fade_out[row - 1] = overlap, overlap
        elif fade_in_first:
            fade_in[row] = min(crossfade, length // 2)
        source[row, 0], source[row, 1] = spans[i, 0], spans[i, 1]
        offset[row] = position - (fade_in[row] if i > 0 else 0)
        position = offset[row] + length
    return source, offset, fade_in, fade_out


@numba.njit(cache=True, nogil=True)
def _input_ranges_kernel(source, offset, start, stop, merge_gap):  # pragma: no cover - compiled
    touched = np.empty((len(offset), 2), dtype=np.int64)
    count = 0
    for p in range(len(offset)):
        where, first = offset[p], source[p, 0]
        a, b = max(start, where), min(stop, where + source[p, 1] - first)
        if a < b:
            touched[count, 0], touched[count, 1] = first + a - where, first + b - where
            count += 1
    ranges = np.empty((count, 2), dtype=np.int64)
    if count == 0:
        return ranges
    order = np.argsort(touched[:count, 0])
    kept = 0
    lo, hi = touched[order[0], 0], touched[order[0], 1]
    for k in order[1:]:
        if touched[k, 0] - hi <= merge_gap:  # overlapping, adjacent or close: one range
            hi = max(hi, touched[k, 1])
        else:
            ranges[kept, 0], ranges[kept, 1] = lo, hi
            kept += 1
            lo, hi = touched[k, 0], touched[k, 1]
    ranges[kept, 0], ranges[kept, 1] = lo, hi
    return ranges[: kept + 1]


def render(
    audio: np.ndarray, plan: Plan, start: int = 0, stop: int | None = None, *, audio_start: int = 0
) -> np.ndarray:
    """Output samples ``[start, stop)`` of ``plan`` applied to ``audio``.

    Samples outside any fade are copied bit-exactly, so the original half of a
    concatenation equals the input. ``audio`` may hold only part of the input,
    from sample ``audio_start`` on, provided it holds ``plan.input_ranges(start, stop)``
    (the training pipeline reads just those; other samples are never looked at).

    >>> audio = np.arange(6, dtype=np.float32)
    >>> render(audio, chain_plan(np.array([[3, 6], [0, 3]]), 0)).tolist()
    [3.0, 4.0, 5.0, 0.0, 1.0, 2.0]
    >>> render(audio, chain_plan(np.array([[3, 6], [0, 3]]), 0), 2, 4).tolist()
    [5.0, 0.0]
    """
    stop = plan.length if stop is None else min(stop, plan.length)
    out = np.empty(max(stop - start, 0), dtype=np.float32)
    audio = np.ascontiguousarray(audio, dtype=np.float32)
    gain = np.ones(len(plan.offset)) if plan.gain is None else np.asarray(plan.gain, dtype=np.float64)
    _render_kernel(
        audio,
        plan.source - audio_start if audio_start else plan.source,
        plan.offset,
        plan.fade_in,
        plan.fade_out,
        gain,
        _fade_curve(plan.crossfade),
        start,
        stop,
        out,
    )
    padding = max(plan.content_length, start)
    if padding < stop:  # the zero padding after the last piece
        out[padding - start :] = 0.0
    return out


# Compiled: this runs for every training sample in the DataLoader workers, where a
# Python loop over pieces would cost more than reading the file.
@numba.njit(cache=True, nogil=True)
def _render_kernel(
    audio, source, offset, fade_in, fade_out, gain, curve, start, stop, out
):  # pragma: no cover - compiled
    quarter_turn = np.pi / 2
    previous_end = 0
    for p in range(len(offset)):
        first, length, where = source[p, 0], source[p, 1] - source[p, 0], offset[p]
        # chain_plan's invariant: a piece overlaps its predecessor by exactly its
        # fade-in (a crossfade) or not at all (the fade-in after the original).
        overlapped = previous_end > where
        previous_end = where + length
        lo, hi = max(start, where), min(stop, where + length)
        if lo >= hi:
            continue
        head, tail = where + fade_in[p], where + length - fade_out[p]
        scale = gain[p]
        for t in range(lo, min(hi, head)):
            i = t - where
            # The full-length fade is tabulated; shorter ones (tiny segments) are computed.
            full = fade_in[p] == len(curve)
            fade = curve[i] if full else np.sin((i + 0.5) / fade_in[p] * quarter_turn)
            sample = np.float32(audio[first + t - where] * fade * scale)
            out[t - start] = out[t - start] + sample if overlapped else sample
        middle_lo, middle_hi = max(lo, head), min(hi, tail)
        if middle_lo < middle_hi and scale == 1.0:  # a plain copy: bit-exact and vectorized
            out[middle_lo - start : middle_hi - start] = audio[
                first + middle_lo - where : first + middle_hi - where
            ]
        elif middle_lo < middle_hi:
            for t in range(middle_lo, middle_hi):
                out[t - start] = np.float32(audio[first + t - where] * scale)
        for t in range(max(lo, tail), hi):
            i = t - tail
            # cos(x) = sin(pi/2 - x): the fade-out is the fade-in curve backwards.
            full = fade_out[p] == len(curve)
            fade = curve[len(curve) - 1 - i] if full else np.cos((i + 0.5) / fade_out[p] * quarter_turn)
            out[t - start] = np.float32(audio[first + t - where] * fade * scale)


def _peak_gain(peak: float) -> float:
    """``1 / peak`` (what the authors' SR script divides the rearranged audio by); 1 for silence."""
    return 1.0 / peak if peak > 0 else 1.0


@functools.lru_cache(maxsize=16)
def _fade_curve(length: int) -> np.ndarray:
    """The equal-power fade-in ``sin((i + 0.5) / length * pi / 2)``, float64, read-only."""
    curve = np.sin((np.arange(length) + 0.5) / max(length, 1) * (np.pi / 2))
    curve.flags.writeable = False
    return curve


class SegReConcat:
    """The SegReConcat augmenter, callable inside DataLoader workers.

    Parameters
    ----------
    alignments : AlignmentIndex
        The word-alignment cache (:func:`segreconcat_aug.align.cache.load_alignments`).
    mode : {"concat", "rearranged", "none"}
    strategy : str
        A name in :data:`segreconcat_aug.method.strategies.STRATEGIES` (``random`` = RR).
    segment_policy : str
        ``authors`` (each strategy cuts as the authors' script for it), ``cover``,
        ``words``, ``words_to_end`` or ``onsets``; see :mod:`segreconcat_aug.method.segments`.
    crossfade : float
        Seconds of crossfade at each join; 0 (the authors' hard splice) disables.
    seed : int
        With the utterance id (and the epoch, for ``rr_redraw="epoch"``), fixes every
        random permutation.
    sample_rate : int
    missing_alignment : {"error", "passthrough"}
        ``error``: :meth:`check_coverage` raises before training starts.
        ``passthrough``: the utterance is returned unaugmented and counted.
    orders : mapping, optional
        Utterance id -> order, for strategies registered ``precomputed``
        (the order cache of ``recipes/compute_orders.py``).
    min_leading_silence : float
        See :func:`segreconcat_aug.method.segments.word_segments`.
    rr_redraw : {"once", "epoch"}
        For strategies drawn at training time (RR): ``once`` draws one permutation per
        utterance for the whole training (the paper's fixed rearranged copy);
        ``epoch`` draws a new one every epoch.
    sr_pad_normalize : bool
        SR (``semantic``) only: zero-pad the rearranged audio to the original length
        and divide it by its peak, as the authors' SR script writes its output. The
        original half of a concatenation is untouched either way.
    peaks : mapping, optional
        Utterance id -> the peak of its segments (:meth:`segreconcat_aug.method.segments.Segments.peak`),
        as the SR order cache stores it (``load_orders(...).peaks``). With it, SR with
        ``sr_pad_normalize`` plans from the file's length like RR and AR (the training
        pipeline reads only each crop's samples); without it the peak is taken from the audio.
    """

    def __init__(
        self,
        alignments: AlignmentIndex,
        mode: str = "concat",
        strategy: str = "random",
        segment_policy: str = "authors",
        crossfade: float = 0.0,
        seed: int = 1986,
        sample_rate: int = 16000,
        missing_alignment: str = "error",
        orders=None,
        min_leading_silence: float = 0.0,
        rr_redraw: str = "once",
        sr_pad_normalize: bool = True,
        peaks=None,
    ):
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}; choose from {MODES}")
        if rr_redraw not in RR_REDRAWS:
            raise ValueError(f"unknown rr_redraw {rr_redraw!r}; choose from {RR_REDRAWS}")
        if min_leading_silence < 0:
            raise ValueError(f"min_leading_silence must be >= 0 seconds, got {min_leading_silence}")
        if missing_alignment not in MISSING_POLICIES:
            raise ValueError(
                f"unknown missing_alignment policy {missing_alignment!r}; choose from {MISSING_POLICIES}"
            )
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
        self.span_rule = span_rule(segment_policy, self.strategy.name)  # checks the policy
        self.rr_redraw = rr_redraw
        # The authors' SR output: zero-padded to the original length, peak-normalized.
        self.pad_normalize = bool(sr_pad_normalize) and self.strategy.name == "semantic"
        self.crossfade_samples = int(round(crossfade * sample_rate))
        self.seed = int(seed)
        self._draw = KeyedRandom(seed)
        self.sample_rate = sample_rate
        self.missing_alignment = missing_alignment
        self.orders = orders
        self.peaks = peaks if self.pad_normalize else None
        self.min_leading_silence = min_leading_silence
        # Shared memory: workers' counts reach the main process; one row per
        # worker so concurrent increments never race.
        self._counts = torch.zeros(_MAX_WORKER_SLOTS, len(COUNT_KEYS), dtype=torch.int64).share_memory_()
        self._counts_view = None

    def __getstate__(self):
        # The numpy view is rebuilt in each worker from the shared tensor.
        return {**self.__dict__, "_counts_view": None}

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
            starts, ends, num_samples, self.sample_rate, self.span_rule, self.min_leading_silence
        )

    def order(self, utt_id: str, segments: Segments, audio: np.ndarray, epoch: int) -> np.ndarray | None:
        """The rearrangement order, or None when a precomputed one is missing."""
        if self.strategy.precomputed:
            if utt_id not in self.orders:
                return None
            order = np.asarray(self.orders[utt_id], dtype=np.int64)
        else:
            rng = self._draw(epoch if self.rr_redraw == "epoch" else _ONCE, utt_id)
            order = np.asarray(self.strategy.fn(segments, audio, rng, sample_rate=self.sample_rate))
        # Checked every time: a stale order cache or a buggy plug-in strategy must not
        # silently drop or repeat audio.
        if not is_order_of(order, len(segments)):
            raise ValueError(
                f"utterance {utt_id!r}: {self.strategy.name} order {order.tolist()} is not a permutation "
                f"of its {len(segments)} segments (stale order cache? rerun compute_orders.py)"
            )
        return order

    @property
    def plans_from_length(self) -> bool:
        """True when :meth:`plan` needs only the number of samples, not the samples.

        So for RR and the cached AR and SR orders; SR with ``sr_pad_normalize`` needs the
        segments' peak, from the order cache (``peaks``) or else from the samples, and a
        plug-in strategy registered with ``uses_audio=True`` (the default) needs the audio.
        """
        if self.mode == "none":
            return True
        peak_known = not self.pad_normalize or self.peaks is not None
        return (self.strategy.precomputed or not self.strategy.uses_audio) and peak_known

    def plan(
        self, audio: np.ndarray | None, utt_id: str, epoch: int, num_samples: int | None = None
    ) -> Plan | None:
        """The output layout for one utterance, or None when it passes through unchanged.

        ``audio`` may be None when :attr:`plans_from_length`, with ``num_samples``
        given. Passthroughs are counted (see :data:`COUNT_KEYS`).
        """
        if num_samples is None:
            num_samples = len(audio)
        if audio is None and not self.plans_from_length:
            raise ValueError(f"strategy {self.strategy.name!r} uses the audio: pass it to plan()")
        if self.mode == "none":
            return None
        if utt_id not in self.alignments:
            if self.missing_alignment == "error":
                raise MissingAlignmentError(f"utterance {utt_id!r} has no alignment")
            self._count("missing_alignment")
            return None
        segments = self.segments(utt_id, num_samples)
        if len(segments) == 0 or (self.mode == "rearranged" and len(segments) < 2):
            self._count("no_segments" if self.mode == "concat" else "few_segments")
            return None
        order = self.order(utt_id, segments, audio, epoch)
        if order is None:
            if self.missing_alignment == "error":
                raise MissingAlignmentError(f"utterance {utt_id!r} has no {self.strategy.name} order")
            self._count("missing_order")
            return None
        self._count("augmented")
        rearranged = segments.spans[order]
        if self.mode == "rearranged":
            plan = chain_plan(rearranged, self.crossfade_samples)
        else:  # the original stays untouched; the rearranged half fades in after it
            plan = chain_plan(
                rearranged, self.crossfade_samples, fade_in_first=True, after_original=num_samples
            )
        if self.pad_normalize:
            # Word spans never add up to more than the file, so padding is all the length match needs.
            halves = 1 if self.mode == "rearranged" else 2
            plan = plan.padded_and_scaled(
                halves * num_samples, _peak_gain(self._peak(utt_id, segments, audio)), halves - 1
            )
        return plan

    def _peak(self, utt_id: str, segments: Segments, audio: np.ndarray | None) -> float:
        """The segments' peak: cached with the SR order, else measured on the audio."""
        if self.peaks is not None:
            try:
                return float(self.peaks[utt_id])
            except KeyError:
                raise MissingAlignmentError(
                    f"utterance {utt_id!r} has an SR order but no peak in the order cache: rebuild it "
                    "with recipes/compute_orders.py"
                ) from None
        return segments.peak(audio)

    def __call__(self, audio, utt_id: str, epoch: int) -> np.ndarray:
        """Augment one waveform (1-D numpy or torch); returns float32 numpy."""
        audio = audio.numpy() if isinstance(audio, torch.Tensor) else np.asarray(audio)
        audio = audio.astype(np.float32, copy=False)
        plan = self.plan(audio, utt_id, epoch)
        return audio if plan is None else render(audio, plan)

    def _count(self, key: str) -> None:
        if self._counts_view is None:
            # A numpy view of the shared tensor: increments cost ~1 us instead of ~200 us.
            self._counts_view = self._counts.numpy()
        info = torch.utils.data.get_worker_info()
        slot = 0 if info is None else 1 + info.id % (_MAX_WORKER_SLOTS - 1)
        self._counts_view[slot, COUNT_KEYS.index(key)] += 1

    def counts(self) -> dict[str, int]:
        """Counts summed over the main process and all workers since the last reset."""
        totals = self._counts.sum(dim=0).tolist()
        return dict(zip(COUNT_KEYS, totals))

    def reset_counts(self) -> None:
        self._counts.zero_()

    def report(self) -> str:
        """One line for the epoch log, e.g. ``augmented=9800 missing_alignment=12``."""
        return " ".join(
            f"{key}={value}" for key, value in self.counts().items() if value or key == "augmented"
        )

"""A plan of the output and its rendering: where each piece of the input lands, with which fades and gain
(:class:`Plan`, :func:`chain_plan`), and the samples of any window of it (:func:`render`).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import numba
import numpy as np


class Plan(NamedTuple):
    """Where each piece of the input lands in the output."""

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

    Samples outside any fade are copied bit-exactly, so the original half of a concatenation equals
    the input. ``audio`` may start at sample ``audio_start`` if it holds ``plan.input_ranges(start, stop)``.

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


@functools.lru_cache(maxsize=16)
def _fade_curve(length: int) -> np.ndarray:
    """The equal-power fade-in ``sin((i + 0.5) / length * pi / 2)``, float64, read-only."""
    curve = np.sin((np.arange(length) + 0.5) / max(length, 1) * (np.pi / 2))
    curve.flags.writeable = False
    return curve

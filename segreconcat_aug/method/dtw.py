"""All-pairs dynamic time warping over an utterance's segments, compiled with numba.

Exactly ``librosa.sequence.dtw(X, Y, metric="euclidean")[0][-1, -1]`` (bit-equal on x86-64: no fused
multiply-add, as scipy's ``cdist``); how the kernel is laid out is in docs/rearrangement.md.

>>> import numpy as np
>>> x = np.array([[0.0, 1.0, 2.0]])
>>> y = np.array([[0.0, 2.0]])
>>> pairwise_dtw([x, y, x]).tolist()
[[0.0, 1.0, 0.0], [1.0, 0.0, 1.0], [0.0, 1.0, 0.0]]
"""

from __future__ import annotations

from collections.abc import Sequence

import numba
import numpy as np

__all__ = ["pairwise_dtw"]


@numba.njit(cache=True, nogil=True)
def _cost_rows(packed, xa, xb, start, out_a, out_b, dims_tag):  # pragma: no cover (compiled)
    """Euclidean distances of frames ``xa`` and ``xb`` to the columns from ``start`` on."""
    dims = len(dims_tag)
    width = np.uint64(out_a.shape[0])
    first = np.uint64(start)
    for r in range(width):
        column = first + r
        value = packed[0, column]
        d = packed[0, xa] - value
        sum_a = d * d
        d = packed[0, xb] - value
        sum_b = d * d
        for k in range(1, dims):
            value = packed[k, column]
            d = packed[k, xa] - value
            sum_a += d * d
            d = packed[k, xb] - value
            sum_b += d * d
        out_a[r] = np.sqrt(sum_a)
        out_b[r] = np.sqrt(sum_b)


# The recursion, D[a, b] = cost[a, b] + min(D[a - 1, b - 1], D[a - 1, b], D[a, b - 1]),
# as min(diagonal, up, left) + cost: equal to librosa's minimum of the three sums, since
# rounding is monotone. ``row`` holds the last finished row and is overwritten in place;
# ``held`` is the finished row's value one column back (the diagonal), kept in a register.


@numba.njit(cache=True, nogil=True, inline="always")
def _advance_one(row, cost, t, held, left):  # pragma: no cover (compiled)
    t = np.uint64(t)  # unsigned: no negative-index wraparound code in the chain
    up = row[t]
    best = up if up < held else held
    best = best if best < left else left
    left = best + cost[t]
    row[t] = left
    return up, left


@numba.njit(cache=True, nogil=True, inline="always")
def _advance_two(row, cost_a, cost_b, t, held, left_a, left_b):  # pragma: no cover (compiled)
    """One column of rows a and b: row b's up is row a's new value, its diagonal row a's ``left``."""
    t = np.uint64(t)
    up = row[t]
    best = up if up < held else held
    best = best if best < left_a else left_a
    new_a = best + cost_a[t]
    best = new_a if new_a < left_a else left_a
    best = best if best < left_b else left_b
    left_b = best + cost_b[t]
    row[t] = left_b
    return up, new_a, left_b


@numba.njit(cache=True, nogil=True, inline="always")
def _chain_starts(row, cut):  # pragma: no cover (compiled)
    """Four chains, ``cut[c]`` to ``cut[c + 1]``, each starting at a border column."""
    held = (row[cut[0]], row[cut[1]], row[cut[2]], row[cut[3]])  # read before any write below
    for c in range(4):
        if cut[c] < cut[c + 1]:
            row[cut[c]] = np.inf
    first = (cut[0] + 1, cut[1] + 1, cut[2] + 1, cut[3] + 1)
    count = (
        max(cut[1] - first[0], 0),
        max(cut[2] - first[1], 0),
        max(cut[3] - first[2], 0),
        max(cut[4] - first[3], 0),
    )
    common = min(min(count[0], count[1]), min(count[2], count[3]))
    return first, count, held, common


@numba.njit(cache=True, nogil=True)
def _accumulate_one_row(row, cost, cut):  # pragma: no cover (compiled)
    (s0, s1, s2, s3), (n0, n1, n2, n3), (h0, h1, h2, h3), common = _chain_starts(row, cut)
    a0 = a1 = a2 = a3 = np.inf
    for t in range(common):
        h0, a0 = _advance_one(row, cost, s0 + t, h0, a0)
        h1, a1 = _advance_one(row, cost, s1 + t, h1, a1)
        h2, a2 = _advance_one(row, cost, s2 + t, h2, a2)
        h3, a3 = _advance_one(row, cost, s3 + t, h3, a3)
    for t in range(common, n0):
        h0, a0 = _advance_one(row, cost, s0 + t, h0, a0)
    for t in range(common, n1):
        h1, a1 = _advance_one(row, cost, s1 + t, h1, a1)
    for t in range(common, n2):
        h2, a2 = _advance_one(row, cost, s2 + t, h2, a2)
    for t in range(common, n3):
        h3, a3 = _advance_one(row, cost, s3 + t, h3, a3)


@numba.njit(cache=True, nogil=True)
def _accumulate_two_rows(row, cost_a, cost_b, cut):  # pragma: no cover (compiled)
    (s0, s1, s2, s3), (n0, n1, n2, n3), (h0, h1, h2, h3), common = _chain_starts(row, cut)
    a0 = a1 = a2 = a3 = np.inf
    b0 = b1 = b2 = b3 = np.inf
    for t in range(common):
        h0, a0, b0 = _advance_two(row, cost_a, cost_b, s0 + t, h0, a0, b0)
        h1, a1, b1 = _advance_two(row, cost_a, cost_b, s1 + t, h1, a1, b1)
        h2, a2, b2 = _advance_two(row, cost_a, cost_b, s2 + t, h2, a2, b2)
        h3, a3, b3 = _advance_two(row, cost_a, cost_b, s3 + t, h3, a3, b3)
    for t in range(common, n0):
        h0, a0, b0 = _advance_two(row, cost_a, cost_b, s0 + t, h0, a0, b0)
    for t in range(common, n1):
        h1, a1, b1 = _advance_two(row, cost_a, cost_b, s1 + t, h1, a1, b1)
    for t in range(common, n2):
        h2, a2, b2 = _advance_two(row, cost_a, cost_b, s2 + t, h2, a2, b2)
    for t in range(common, n3):
        h3, a3, b3 = _advance_two(row, cost_a, cost_b, s3 + t, h3, a3, b3)


@numba.njit(cache=True, nogil=True)
def _segment_against_later(packed, offsets, i, out, dims_tag):  # pragma: no cover (compiled)
    """DTW of segment ``i`` against every segment ``j > i``; writes ``out[j]``."""
    count = offsets.shape[0] - 1
    blocks = count - 1 - i
    if blocks <= 0:
        return
    x0 = offsets[i]
    rows = offsets[i + 1] - 1 - x0
    start = offsets[i + 1] - 1  # the border before segment i + 1
    length = packed.shape[1] - start
    border = np.empty(blocks + 1, dtype=np.int64)  # row positions of the borders
    for q in range(blocks):
        border[q] = offsets[i + 1 + q] - 1 - start
    border[blocks] = length - 1
    cut = np.empty(5, dtype=np.int64)  # four chains of about equal length, cut at borders
    cut[0] = 0
    q = 0
    for lane in range(1, 4):
        wanted = length * lane // 4
        while q < blocks and border[q] < wanted:
            q += 1
        cut[lane] = max(cut[lane - 1], min(border[q], length))
    cut[4] = length
    cost = np.empty((2, length))
    row = np.full(length, np.inf)  # row -1: infinite but at the borders, where each pair starts
    for q in range(blocks):
        row[border[q]] = 0.0
    a = 0
    while a < rows:
        b = a + 1 if a + 1 < rows else a
        _cost_rows(packed, x0 + a, x0 + b, start, cost[0], cost[1], dims_tag)
        for q in range(blocks + 1):
            cost[0, border[q]] = np.inf
            cost[1, border[q]] = np.inf
        if b > a:
            _accumulate_two_rows(row, cost[0], cost[1], cut)
        else:
            _accumulate_one_row(row, cost[0], cut)
        a += 2
    for q in range(blocks):
        out[i + 1 + q] = row[border[q + 1] - 1]


@numba.njit(parallel=True, cache=True, nogil=True)
def _all_pairs(packed, offsets, result, dims_tag):  # pragma: no cover (compiled)
    count = offsets.shape[0] - 1
    for p in numba.prange(count - 1):
        # Interleave long and short rows (i small has many partners) so that
        # static chunks give each thread about the same work.
        i = p // 2 if p % 2 == 0 else count - 2 - p // 2
        _segment_against_later(packed, offsets, i, result[i], dims_tag)


def _pack(features: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Validate ``(d, T_k)`` matrices and lay them side by side with border columns."""
    mats = [np.atleast_2d(np.asarray(f, dtype=np.float64)) for f in features]
    if any(m.ndim != 2 for m in mats) or len({m.shape[0] for m in mats}) > 1:
        shapes = [m.shape for m in mats]
        raise ValueError(f"every feature matrix must be 2-D (d, T) with the same d; got shapes {shapes}")
    dims = mats[0].shape[0]
    if dims == 0:
        raise ValueError("sequence 0 has no feature dimensions")
    lengths = np.array([m.shape[1] for m in mats], dtype=np.int64)
    if not lengths.all():
        raise ValueError(f"sequence {int(np.argmin(lengths))} has no frames; DTW needs at least one")
    border = np.zeros((dims, 1))
    packed = np.concatenate([border] + [piece for m in mats for piece in (m, border)], axis=1)
    if not np.isfinite(packed).all():
        bad = next(k for k, m in enumerate(mats) if not np.isfinite(m).all())
        raise ValueError(f"sequence {bad} has non-finite features (NaN or inf); DTW is undefined")
    offsets = np.concatenate([[1], 1 + np.cumsum(lengths + 1)]).astype(np.int64)
    return packed, offsets


def pairwise_dtw(features: Sequence[np.ndarray]) -> np.ndarray:
    """DTW distances between all sequences, as a symmetric ``(N, N)`` matrix.

    >>> a, b = np.zeros((13, 20)), np.ones((13, 30))
    >>> bool(np.isclose(pairwise_dtw([a, b])[0, 1], 30 * np.sqrt(13)))
    True
    """
    count = len(features)
    out = np.zeros((count, count))
    if count == 0:
        return out
    packed, offsets = _pack(features)
    if count > 1:
        _all_pairs(packed, offsets, out, (0,) * packed.shape[0])  # d as a type: see _cost_rows
        out += out.T  # mirror: the lower triangle and the diagonal are still 0
    return out

"""All-pairs dynamic time warping over an utterance's segments, compiled with numba.

The AR strategy needs the DTW distance between every two word segments of an
utterance (35 words -> 595 pairs). Calling ``librosa.sequence.dtw`` per pair
spends its time in Python and in building full matrices; here one compiled
call computes all pairs ``i < j`` (DTW with a symmetric Euclidean cost is
symmetric, and ``DTW(X, X) = 0``).

The quantity is exactly librosa's default: Euclidean frame cost (summed over
dimensions in order, as scipy's ``cdist``), steps ``(1, 1), (0, 1), (1, 0)``
with unit weights, no band, the value of the last cell::

    librosa.sequence.dtw(X, Y, metric="euclidean")[0][-1, -1]

(``dtaidistance``'s and ``tslearn``'s defaults compute the square root of a
sum of *squared* costs, a different quantity that changes the orders.)

How it is fast: segment ``i`` is compared with all later segments at once.
The frames are packed side by side with one border column between segments,
so one cost row (frame ``a`` of ``i`` against every later frame) is a long
contiguous loop that vectorizes; a border column gets an infinite cost, which
makes the accumulated-cost recursion restart at each segment, so one pass over
the row serves every pair. The horizontal part of the recursion (a running
minimum) is split at borders into four chains run interleaved. Rows ``i`` are
spread over numba's threads (``NUMBA_NUM_THREADS`` or :func:`numba.set_num_threads`).

Example
-------
>>> import numpy as np
>>> x = np.array([[0.0, 1.0, 2.0]])
>>> y = np.array([[0.0, 2.0]])
>>> float(dtw_distance(x, y))
1.0
>>> pairwise_dtw([x, y, x]).tolist()
[[0.0, 1.0, 0.0], [1.0, 0.0, 1.0], [0.0, 1.0, 0.0]]
"""

from __future__ import annotations

from collections.abc import Sequence

import numba
import numpy as np

__all__ = ["dtw_distance", "pairwise_dtw"]


@numba.njit(cache=True, nogil=True)
def _cost_rows(packed, xa, xb, start, out_a, out_b):  # pragma: no cover (compiled)
    """Euclidean distances of frames ``xa`` and ``xb`` to the columns from ``start`` on.

    Two rows share the loads of the other frames. Dimensions are added in
    order, left to right, as ``cdist`` does; the square root is taken in the
    pass over the last dimension. (Views, not offset indices, keep the inner
    loops free of negative-index checks, so they vectorize.)
    """
    dims = packed.shape[0]
    width = out_a.shape[0]
    k = 0
    first = True  # the first pass writes the sums instead of adding to stale values
    while k + 4 <= dims - 1:
        a0 = packed[k, xa]
        a1 = packed[k + 1, xa]
        a2 = packed[k + 2, xa]
        a3 = packed[k + 3, xa]
        b0 = packed[k, xb]
        b1 = packed[k + 1, xb]
        b2 = packed[k + 2, xb]
        b3 = packed[k + 3, xb]
        y0 = packed[k, start:]
        y1 = packed[k + 1, start:]
        y2 = packed[k + 2, start:]
        y3 = packed[k + 3, start:]
        for r in range(width):
            v0 = y0[r]
            v1 = y1[r]
            v2 = y2[r]
            v3 = y3[r]
            s = 0.0 if first else out_a[r]
            d = a0 - v0
            s += d * d
            d = a1 - v1
            s += d * d
            d = a2 - v2
            s += d * d
            d = a3 - v3
            s += d * d
            out_a[r] = s
            s = 0.0 if first else out_b[r]
            d = b0 - v0
            s += d * d
            d = b1 - v1
            s += d * d
            d = b2 - v2
            s += d * d
            d = b3 - v3
            s += d * d
            out_b[r] = s
        k += 4
        first = False
    if first:
        out_a[:] = 0.0
        out_b[:] = 0.0
    while k < dims - 1:
        a0 = packed[k, xa]
        b0 = packed[k, xb]
        y0 = packed[k, start:]
        for r in range(width):
            v0 = y0[r]
            d = a0 - v0
            out_a[r] += d * d
            d = b0 - v0
            out_b[r] += d * d
        k += 1
    a0 = packed[k, xa]
    b0 = packed[k, xb]
    y0 = packed[k, start:]
    for r in range(width):
        v0 = y0[r]
        d = a0 - v0
        out_a[r] = np.sqrt(out_a[r] + d * d)
        d = b0 - v0
        out_b[r] = np.sqrt(out_b[r] + d * d)


@numba.njit(cache=True, nogil=True, inline="always")
def _scan_step(current, cost, t, left):  # pragma: no cover (compiled)
    via = left + cost[t]
    value = current[t]
    left = value if value < via else via
    current[t] = left
    return left


@numba.njit(cache=True, nogil=True)
def _accumulate_row(previous, current, cost, cut):  # pragma: no cover (compiled)
    """``current[p] = min(previous[p - 1], previous[p], current[p - 1]) + cost[p]``.

    First the diagonal and vertical moves (independent over ``p``: vectorizes),
    then the horizontal running minimum as four chains interleaved (they start
    at border columns, where the cost is infinite, so they are independent).
    Adding the cost after the minimum equals librosa's minimum of sums:
    rounding is monotone.
    """
    up = previous[1:]
    diagonal = previous[:-1]
    target = current[1:]
    step_cost = cost[1:]
    current[0] = np.inf
    for p in range(target.shape[0]):
        u = up[p]
        d = diagonal[p]
        target[p] = (u if u < d else d) + step_cost[p]
    c0 = current[cut[0] : cut[1]]
    k0 = cost[cut[0] : cut[1]]
    c1 = current[cut[1] : cut[2]]
    k1 = cost[cut[1] : cut[2]]
    c2 = current[cut[2] : cut[3]]
    k2 = cost[cut[2] : cut[3]]
    c3 = current[cut[3] : cut[4]]
    k3 = cost[cut[3] : cut[4]]
    n0 = c0.shape[0]
    n1 = c1.shape[0]
    n2 = c2.shape[0]
    n3 = c3.shape[0]
    common = min(min(n0, n1), min(n2, n3))
    l0 = np.inf
    l1 = np.inf
    l2 = np.inf
    l3 = np.inf
    for t in range(common):
        l0 = _scan_step(c0, k0, t, l0)
        l1 = _scan_step(c1, k1, t, l1)
        l2 = _scan_step(c2, k2, t, l2)
        l3 = _scan_step(c3, k3, t, l3)
    for t in range(common, n0):
        l0 = _scan_step(c0, k0, t, l0)
    for t in range(common, n1):
        l1 = _scan_step(c1, k1, t, l1)
    for t in range(common, n2):
        l2 = _scan_step(c2, k2, t, l2)
    for t in range(common, n3):
        l3 = _scan_step(c3, k3, t, l3)


@numba.njit(cache=True, nogil=True)
def _segment_against_later(packed, offsets, i, out):  # pragma: no cover (compiled)
    """DTW of segment ``i`` against every segment ``j > i``; writes ``out[j]``.

    Layout (see :func:`_pack`): segment ``k`` is columns ``[offsets[k], offsets[k + 1] - 1)``
    and column ``offsets[k] - 1`` is the border before it; a border follows the last one too.
    """
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
    previous = np.full(length, np.inf)
    current = np.empty(length)
    for q in range(blocks):
        previous[border[q]] = 0.0  # row -1: each block may start at its cell (0, 0)
    a = 0
    while a < rows:
        b = a + 1 if a + 1 < rows else a
        _cost_rows(packed, x0 + a, x0 + b, start, cost[0], cost[1])
        for h in range(2 if b > a else 1):
            row = cost[h]
            for q in range(blocks + 1):
                row[border[q]] = np.inf
            _accumulate_row(previous, current, row, cut)
            previous, current = current, previous
        a += 2
    for q in range(blocks):
        out[i + 1 + q] = previous[border[q + 1] - 1]


@numba.njit(parallel=True, cache=True, nogil=True)
def _all_pairs(packed, offsets, result):  # pragma: no cover (compiled)
    count = offsets.shape[0] - 1
    for p in numba.prange(count - 1):
        # Interleave long and short rows (i small has many partners) so that
        # static chunks give each thread about the same work.
        i = p // 2 if p % 2 == 0 else count - 2 - p // 2
        _segment_against_later(packed, offsets, i, result[i])


def _pack(features: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Validate ``(d, T_k)`` matrices and lay them side by side with border columns.

    Returns ``(packed, offsets)``: segment ``k`` is ``packed[:, offsets[k]:offsets[k + 1] - 1]``.
    """
    mats = [np.atleast_2d(np.asarray(f, dtype=np.float64)) for f in features]
    if any(m.ndim != 2 for m in mats) or len({m.shape[0] for m in mats}) > 1:
        shapes = [m.shape for m in mats]
        raise ValueError(f"every feature matrix must be 2-D (d, T) with the same d; got shapes {shapes}")
    for k, m in enumerate(mats):
        if m.shape[1] == 0:
            raise ValueError(f"sequence {k} has no frames; DTW needs at least one")
        if m.shape[0] == 0:
            raise ValueError(f"sequence {k} has no feature dimensions")
        if not np.all(np.isfinite(m)):
            raise ValueError(f"sequence {k} has non-finite features (NaN or inf); DTW is undefined")
    dims = mats[0].shape[0]
    lengths = np.array([m.shape[1] for m in mats], dtype=np.int64)
    offsets = np.concatenate([[1], 1 + np.cumsum(lengths + 1)]).astype(np.int64)
    packed = np.zeros((dims, int(offsets[-1])))
    for k, m in enumerate(mats):
        packed[:, offsets[k] : offsets[k] + m.shape[1]] = m
    return packed, offsets


def pairwise_dtw(features: Sequence[np.ndarray]) -> np.ndarray:
    """DTW distances between all sequences, as a symmetric ``(N, N)`` matrix.

    Parameters
    ----------
    features : sequence of numpy.ndarray
        ``N`` matrices of shape ``(d, T_k)`` (librosa's layout: features by frames),
        the same ``d``, any ``T_k >= 1``.

    Returns
    -------
    numpy.ndarray
        float64 ``(N, N)``; entry ``(i, j)`` equals
        ``librosa.sequence.dtw(features[i], features[j], metric="euclidean")[0][-1, -1]``
        (computed once for ``i < j`` and mirrored); the diagonal is 0.

    Raises
    ------
    ValueError
        On mismatched dimensions, an empty sequence or non-finite values (the
        message gives the sequence's index).

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
        _all_pairs(packed, offsets, out)
        upper = np.triu_indices(count, k=1)
        out[upper[1], upper[0]] = out[upper]
    return out


def dtw_distance(x: np.ndarray, y: np.ndarray) -> float:
    """DTW distance between two ``(d, T)`` matrices (librosa's last cell, Euclidean cost)."""
    return float(pairwise_dtw([x, y])[0, 1])

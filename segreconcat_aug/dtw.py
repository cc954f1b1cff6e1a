"""All-pairs dynamic time warping over an utterance's segments, compiled with numba.

The AR strategy needs the DTW distance between every two word segments of an
utterance (35 words -> 595 pairs). Calling ``librosa.sequence.dtw`` per pair
spends most of its time in Python and in building full cost matrices; here one
compiled call computes all pairs ``i < j`` (DTW with a symmetric Euclidean cost
is symmetric, and ``DTW(X, X) = 0``), keeping only two rows of the accumulated
cost, in parallel over pairs.

The quantity is exactly librosa's default: Euclidean frame cost, steps
``(1, 1), (0, 1), (1, 0)`` with unit weights, no band, the value of the last
cell of the accumulated cost matrix::

    librosa.sequence.dtw(X, Y, metric="euclidean")[0][-1, -1]

(Note: ``dtaidistance``'s and ``tslearn``'s defaults compute the square root of
a sum of *squared* costs, a different quantity that changes the orders.)

Threads: numba's pool (``NUMBA_NUM_THREADS`` or :func:`numba.set_num_threads`).

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

__all__ = ["dtw_distance", "pack_features", "pairwise_dtw"]


@numba.njit(cache=True, nogil=True)
def _dtw_last_cell(packed, x0, x1, y0, y1):  # pragma: no cover (compiled)
    """DTW cost between columns [x0, x1) and [y0, y1) of ``packed`` (d x total)."""
    dims = packed.shape[0]
    n = x1 - x0
    m = y1 - y0
    previous = np.full(m, np.inf)
    current = np.empty(m)
    cost = np.empty(m)
    for a in range(n):
        # Cost row a: the inner loop runs over contiguous frames of Y, so it
        # vectorizes; the sum over dimensions runs in order, as scipy's cdist.
        cost[:] = 0.0
        for k in range(dims):
            xv = packed[k, x0 + a]
            for b in range(m):
                diff = xv - packed[k, y0 + b]
                cost[b] += diff * diff
        for b in range(m):
            cost[b] = np.sqrt(cost[b])
        for b in range(m):
            if a == 0 and b == 0:
                current[0] = cost[0]
                continue
            best = np.inf
            if a > 0:
                best = previous[b]
                if b > 0 and previous[b - 1] < best:
                    best = previous[b - 1]
            if b > 0 and current[b - 1] < best:
                best = current[b - 1]
            # min(D) + C equals librosa's min(D + C): rounding is monotone.
            current[b] = best + cost[b]
        previous, current = current, previous
    return previous[m - 1]


@numba.njit(parallel=True, cache=True, nogil=True)
def _pairs_dtw(packed, offsets, first, second, out):  # pragma: no cover (compiled)
    for p in numba.prange(first.shape[0]):
        i = first[p]
        j = second[p]
        out[p] = _dtw_last_cell(packed, offsets[i], offsets[i + 1], offsets[j], offsets[j + 1])


def pack_features(features: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Stack ``(d, T_k)`` matrices side by side into one ``(d, sum T_k)`` float64 array.

    Returns ``(packed, offsets)``; sequence ``k`` is ``packed[:, offsets[k]:offsets[k + 1]]``.

    >>> packed, offsets = pack_features([np.zeros((2, 3)), np.ones((2, 1))])
    >>> packed.shape, offsets.tolist()
    ((2, 4), [0, 3, 4])
    """
    if len(features) == 0:
        return np.zeros((0, 0)), np.zeros(1, dtype=np.int64)
    mats = [np.atleast_2d(np.asarray(f, dtype=np.float64)) for f in features]
    dims = {m.shape[0] for m in mats}
    if len(dims) != 1 or any(m.ndim != 2 for m in mats):
        raise ValueError(
            f"every feature matrix must be 2-D (d, T) with the same d; got shapes {[m.shape for m in mats]}"
        )
    lengths = [m.shape[1] for m in mats]
    if min(lengths) == 0:
        raise ValueError(f"sequence {lengths.index(0)} has no frames; DTW needs at least one")
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    packed = np.ascontiguousarray(np.concatenate(mats, axis=1))
    if not np.all(np.isfinite(packed)):
        bad = int(
            np.searchsorted(offsets, np.flatnonzero(~np.isfinite(packed).all(axis=0))[0], side="right") - 1
        )
        raise ValueError(f"sequence {bad} has non-finite features (NaN or inf); DTW is undefined")
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
    if count < 2:
        if count == 1:
            pack_features(features)  # still validate
        return out
    packed, offsets = pack_features(features)
    first, second = np.triu_indices(count, k=1)
    values = np.empty(len(first))
    _pairs_dtw(packed, offsets, first.astype(np.int64), second.astype(np.int64), values)
    out[first, second] = values
    out[second, first] = values
    return out


def dtw_distance(x: np.ndarray, y: np.ndarray) -> float:
    """DTW distance between two ``(d, T)`` matrices (librosa's last cell, Euclidean cost)."""
    packed, offsets = pack_features([x, y])
    return float(_dtw_last_cell(packed, offsets[0], offsets[1], offsets[1], offsets[2]))

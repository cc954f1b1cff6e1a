"""Linkability ``D<->sys`` (Gomez-Barrero et al. 2017), as VoicePrivacy 2024's
``evaluation/privacy/asv/metrics/linkability.py`` computes it, and under speaker-bootstrap weights.

Normalized histograms of the target and non-target scores over ``min(int(n_target / 10), 100)``
equal bins between the lowest and highest score, the local ``D(s) = 2 LR / (1 + LR) - 1`` where
``LR > 1`` (omega = 1), 1 where only targets fall, and the trapezoidal integral of ``D`` times the
target density over the bin centres. With fewer than 20 target trials there is one bin (or none) and
that integral is 0 whatever the scores: undefined here.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

#: Linkability needs at least two histogram bins, so 20 target trials (VPC: min(int(n / 10), 100) bins).
LINKABILITY_MIN_TARGETS = 20
_trapezoid = getattr(np, "trapezoid", None) or np.trapz  # np.trapz: numpy < 2.0 (removed in 2.4)


class Linkability(NamedTuple):
    """``D<->sys`` (None when undefined, with ``reason``), its local ``D`` per bin, bin centres and edges."""

    value: float | None
    local: np.ndarray
    bin_centers: np.ndarray
    bin_edges: np.ndarray
    reason: str | None = None


def linkability_bins(n_target: float) -> int:
    """VPC's number of bins: ``min(int(n_target / 10), 100)``.

    >>> linkability_bins(15), linkability_bins(704), linkability_bins(5000)
    (1, 70, 100)
    """
    return min(int(n_target / 10), 100)


def _linkability_undefined(n_target: float, bins: int) -> str:
    return (
        f"{n_target:g} target trials (< {LINKABILITY_MIN_TARGETS}): VPC's histogram has {bins} bin(s), "
        "so its integral is 0 whatever the scores"
    )


def _linkability_of_counts(edges, mated_counts, nonmated_counts):
    """``(D<->sys, local D)`` from histogram counts along the last axis (VPC's normalized histograms and
    trapezoidal integral; rows of a 2-D input are resamples)."""
    widths = np.diff(edges, axis=-1)
    y1 = mated_counts / widths / mated_counts.sum(axis=-1, keepdims=True)
    y2 = nonmated_counts / widths / nonmated_counts.sum(axis=-1, keepdims=True)
    lr = np.divide(y1, y2, out=np.ones_like(y1), where=y2 != 0)
    local = 2 * (lr / (1 + lr)) - 1  # omega = 1: VPC's and the reference values' prior odds
    local[lr <= 1] = 0
    local[(y2 == 0) & (y1 != 0)] = 1
    centers = (edges[..., 1:] + edges[..., :-1]) / 2
    return _trapezoid(local * y1, x=centers, axis=-1), local


def linkability(mated_scores, non_mated_scores) -> Linkability:
    """Global linkability ``D<->sys`` and its local curve, as VPC 2024's ``linkability`` computes them.

    Undefined (``value`` None, with the reason) below 20 target trials, where VPC's single bin makes
    the integral 0, and when every score is the same.

    >>> result = linkability(np.linspace(0.5, 1.0, 40), np.linspace(0.0, 0.6, 200))
    >>> round(result.value, 4), len(result.local)  # VPC 2024's code gives 0.4963 too
    (0.4963, 4)
    >>> linkability([0.9] * 15, [0.1] * 60).reason
    "15 target trials (< 20): VPC's histogram has 1 bin(s), so its integral is 0 whatever the scores"
    """
    mated = np.asarray(mated_scores, dtype=np.float64).ravel()
    non_mated = np.asarray(non_mated_scores, dtype=np.float64).ravel()
    bins = linkability_bins(len(mated))
    empty = np.array([])
    if bins < 2:
        return Linkability(None, empty, empty, empty, _linkability_undefined(len(mated), bins))
    low, high = min(mated.min(), non_mated.min()), max(mated.max(), non_mated.max())
    if low == high:
        return Linkability(None, empty, empty, empty, "every score is the same: no histogram")
    edges = np.linspace(low, high, num=bins + 1, endpoint=True)
    value, local = _linkability_of_counts(
        edges, np.histogram(mated, bins=edges)[0], np.histogram(non_mated, bins=edges)[0]
    )
    return Linkability(float(value), local, (edges[1:] + edges[:-1]) / 2, edges)


class _SortedTrials:
    """A list's target and non-target trials, each in score order, for weighted histograms (linkability)."""

    def __init__(self, scores, targets):
        scores = np.asarray(scores, dtype=np.float64)
        targets = np.asarray(targets, dtype=bool)
        order = np.argsort(scores, kind="stable")
        self.target_trials = order[targets[order]]
        self.nontarget_trials = order[~targets[order]]
        self.target_scores = scores[self.target_trials]
        self.nontarget_scores = scores[self.nontarget_trials]

    def linkability(self, w: np.ndarray) -> np.ndarray:
        """Linkability of the trials repeated by ``w`` (rows: resamples; columns: trials in list order),
        as :func:`linkability` of each resample's repeated list; NaN where undefined."""
        rows_all = np.arange(len(w))
        classes = []
        for trials, values in (
            (self.target_trials, self.target_scores),
            (self.nontarget_trials, self.nontarget_scores),
        ):
            cumulative = np.zeros((len(w), len(trials) + 1), dtype=np.int64)
            np.cumsum(w[:, trials], axis=1, out=cumulative[:, 1:])
            total = cumulative[:, -1]
            # The lowest and highest score present: where the cumulative weight first leaves 0 and reaches
            # the total (inf / -inf for a class absent from the resample).
            low = np.where(
                total > 0, values[np.minimum((cumulative[:, 1:] > 0).argmax(axis=1), len(values) - 1)], np.inf
            )
            high_index = (cumulative[:, 1:] >= total[:, None]).argmax(axis=1)
            high = np.where(total > 0, values[np.minimum(high_index, len(values) - 1)], -np.inf)
            classes.append((values, cumulative, total, low, high))
        (_, _, n_target, low_t, high_t), (_, _, n_nontarget, low_n, high_n) = classes
        low, high = np.minimum(low_t, low_n), np.maximum(high_t, high_n)
        bins = np.minimum(n_target // 10, 100)
        usable = (bins >= 2) & (n_nontarget > 0) & (low < high)
        out = np.full(len(w), np.nan)
        for count in np.unique(bins[usable]):
            rows = rows_all[usable & (bins == count)]
            edges = np.linspace(low[rows], high[rows], num=int(count) + 1, endpoint=True, axis=1)
            counts = []
            for values, cumulative, *_ in classes:
                # np.histogram's bins: [e_k, e_k+1), the last one closed.
                ends = np.concatenate(
                    [
                        np.searchsorted(values, edges[:, :-1], "left"),
                        np.searchsorted(values, edges[:, -1:], "right"),
                    ],
                    axis=1,
                )
                counts.append(np.diff(cumulative[rows[:, None], ends], axis=1).astype(np.float64))
            out[rows] = _linkability_of_counts(edges, counts[0], counts[1])[0]
        return out

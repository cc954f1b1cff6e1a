"""PAV calibration of scored trials in the references' tie order, for one list or many resamples at once.

The shape of VoicePrivacy 2024's ``metrics/helpers.py`` (``optimal_llr``) and ZEBRA's ``pavx``: trials
sorted by score (ties: non-targets first, or targets first for ZEBRA's ``rocch_pava``), isotonic
regression of the labels, LLRs as the posterior log-odds minus the prior log-odds, plus the
references' ``1e-6 * position / N`` ("monotonicity epsilon"). :mod:`.cllr` (minCllr, ROCCH-EER) and
:mod:`.zebra` read these fits.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import isotonic_regression
from scipy.special import logit

#: The references' shift of the calibrated LLRs: position * MONOTONICITY_EPSILON / N.
MONOTONICITY_EPSILON = 1e-6


class _Runs:
    """Trials in PAV order (score, then class on ties) grouped into runs of equal class.

    PAV on a run of equal labels is PAV on one point of the run's weight, so a resample only needs
    the runs' weights. ``targets_first``: ZEBRA's ``rocch_pava`` order (targets before non-targets on
    ties); otherwise VPC's and ZEBRA's ``optimal_llr`` order (non-targets first).
    """

    def __init__(self, scores, targets, targets_first: bool):
        targets = np.asarray(targets, dtype=bool)
        self.order = np.lexsort((~targets if targets_first else targets, scores))
        labels = targets[self.order]
        self.starts = np.flatnonzero(np.concatenate([[True], labels[1:] != labels[:-1]]))
        self.labels = labels[self.starts]

    def weights(self, trial_weights: np.ndarray) -> np.ndarray:
        """Run weights ``(resamples, runs)`` from trial weights ``(resamples, trials)`` in trial order."""
        return np.add.reduceat(trial_weights[:, self.order], self.starts, axis=1)


@dataclass
class _Fits:
    """PAV fits of many resamples' weighted runs, flat: run ``i`` belongs to resample ``segment[i]``.

    ``first``: position of a run's first copy in its resample's expanded, sorted trial list; ``llr``:
    the run's calibrated LLR without the epsilon; ``block_starts``: flat index of each PAV block's
    first run; ``resamples``: which rows of the weight matrix the fits belong to (those with targets
    and non-targets).
    """

    resamples: np.ndarray
    segment: np.ndarray
    offsets: np.ndarray
    labels: np.ndarray
    weights: np.ndarray
    first: np.ndarray
    llr: np.ndarray
    block_starts: np.ndarray
    n_target: np.ndarray
    n_nontarget: np.ndarray

    def epsilon(self, positions, segment):
        """The references' shift of the copies at ``positions``: ``position * 1e-6 / N``."""
        return positions * MONOTONICITY_EPSILON / (self.n_target + self.n_nontarget)[segment]

    def epsilon_sums(self) -> np.ndarray:
        """Per run, the sum of its copies' shifts (``w`` copies at ``first``, ``first + 1``, ...)."""
        w = self.weights
        return self.epsilon(w * self.first + w * (w - 1) / 2, self.segment)

    def per_resample(self, values) -> np.ndarray:
        """Sum of per-run ``values`` for each resample."""
        return np.bincount(self.segment, weights=values, minlength=len(self.resamples))


def _fit_runs(labels, run_weights, laplace: bool = False) -> tuple[_Fits, _Fits | None]:
    """PAV of each row's runs (weights > 0 kept), as the references' ``pavx`` of the repeated trials.

    ``laplace``: also the fits with ZEBRA's Laplace smoothing (``optimal_llr(laplace=True)``): one
    target and one non-target added at each end of the PAV input, left out of the prior.
    """
    kept, fitted, smoothed, blocks, rows = [], [], [], [], []
    for row, weights in enumerate(run_weights):
        keep = weights > 0
        y, w = labels[keep].astype(np.float64), weights[keep].astype(np.float64)
        n_target = float(w @ y)
        if n_target == 0 or n_target == w.sum():
            continue
        fit = isotonic_regression(y, weights=w)
        rows.append(row)
        kept.append((y, w))
        fitted.append(fit.x)
        blocks.append(fit.blocks[:-1])
        if laplace:
            fit = isotonic_regression(np.r_[1.0, 0.0, y, 1.0, 0.0], weights=np.r_[1.0, 1.0, w, 1.0, 1.0])
            smoothed.append(fit.x[2:-2])
    sizes = np.array([len(y) for y, _ in kept], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    segment = np.repeat(np.arange(len(kept)), sizes)
    if not kept:
        empty = np.zeros(0)
        fits = _Fits(
            np.array(rows, dtype=np.int64),
            segment,
            offsets,
            empty.astype(bool),
            empty,
            empty,
            empty,
            np.zeros(0, dtype=np.int64),
            empty,
            empty,
        )
        return fits, fits if laplace else None
    y = np.concatenate([y for y, _ in kept])
    w = np.concatenate([w for _, w in kept])
    labels_flat = y > 0.5
    n_target = np.bincount(segment, weights=w * y, minlength=len(kept))
    n_nontarget = np.bincount(segment, weights=w, minlength=len(kept)) - n_target
    before = np.cumsum(w) - w
    first = before - before[offsets[:-1]][segment]
    prior = np.log(n_target / n_nontarget)[segment]
    block_starts = np.concatenate([b + o for b, o in zip(blocks, offsets[:-1])])

    def fits(values):
        with np.errstate(divide="ignore"):
            llr = logit(np.concatenate(values)) - prior
        return _Fits(
            np.array(rows, dtype=np.int64),
            segment,
            offsets,
            labels_flat,
            w,
            first,
            llr,
            block_starts,
            n_target,
            n_nontarget,
        )

    return fits(fitted), fits(smoothed) if laplace else None

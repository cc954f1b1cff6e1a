"""minCllr, ROCCH-EER and ZEBRA of one trial list, itself or under many resamples' trial weights at once.

The three share their PAV fits (:mod:`.pav`): :class:`CalibrationMetrics` fits each resample's runs
once per tie order and hands them to :mod:`.cllr` and :mod:`.zebra`. The list's own values are the
resample that draws every trial once, so the point values and the intervals come from the same code.

>>> found = CalibrationMetrics([0.9, 0.8, 0.4, 0.5, 0.3, 0.2, 0.1], [1, 1, 1, 0, 0, 0, 0]).point
>>> round(found["min_cllr"], 4), round(found["rocch_eer"], 2)  # PAV pools 0.4 (target) with 0.5
(0.2874, 14.29)
"""

from __future__ import annotations

from functools import cached_property

import numpy as np

from .cllr import _min_cllr, _rocch_eer
from .pav import _fit_runs, _Runs
from .zebra import _dece, _max_abs_log10


class CalibrationMetrics:
    """minCllr, ROCCH-EER and ZEBRA of one trial list under integer trial weights (all resamples)."""

    def __init__(self, scores, targets):
        self.targets = np.asarray(targets, dtype=bool)
        self.nontarget_first = _Runs(scores, self.targets, targets_first=False)
        self.target_first = _Runs(scores, self.targets, targets_first=True)
        if np.array_equal(self.nontarget_first.order, self.target_first.order):  # no tie across classes
            self.target_first = self.nontarget_first

    def __call__(self, trial_weights: np.ndarray) -> dict[str, np.ndarray]:
        """``name -> (resamples,)``: ``min_cllr``, ``rocch_eer`` (%), ``zebra_dece_bits``,
        ``zebra_max_abs_log10_lr`` (NaN where a resample lacks targets or non-targets)."""
        resamples = trial_weights.shape[0]
        names = ("min_cllr", "rocch_eer", "zebra_dece_bits", "zebra_max_abs_log10_lr")
        out = {name: np.full(resamples, np.nan) for name in names}
        fits, smoothed = _fit_runs(
            self.nontarget_first.labels, self.nontarget_first.weights(trial_weights), True
        )
        if not len(fits.resamples):
            return out
        if self.target_first is self.nontarget_first:
            pooled = fits
        else:
            pooled = _fit_runs(self.target_first.labels, self.target_first.weights(trial_weights))[0]
        out["min_cllr"][fits.resamples] = _min_cllr(fits)
        out["rocch_eer"][fits.resamples] = 100.0 * _rocch_eer(fits)
        out["zebra_max_abs_log10_lr"][fits.resamples] = _max_abs_log10(smoothed)
        out["zebra_dece_bits"][pooled.resamples] = _dece(pooled)
        return out

    @cached_property
    def point(self) -> dict[str, float]:
        """The list's own values (every trial once), as :meth:`__call__` names them; NaN where undefined."""
        found = self(np.ones((1, len(self.targets)), dtype=np.int64))
        return {name: float(values[0]) for name, values in found.items()}

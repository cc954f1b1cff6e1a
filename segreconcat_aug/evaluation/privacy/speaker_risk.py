"""Risk per speaker (as VoxATtack's analysis notebook): the EER of each enrolled speaker (its target
trials against the non-target trials of its own model), the share of speakers below a threshold and
the worst speakers."""

from __future__ import annotations

import numpy as np

from ..bootstrap import TrialDesign
from ..metrics import eer
from .structure import _row_chunks


class SpeakerRisk:
    """The EER of each enrolled speaker with target trials: its target trials vs its model's non-targets.

    In a speaker resample the speaker's own count multiplies every trial of its model (its EER does not
    change) and a non-target trial counts ``w_s`` times, ``s`` its test speaker. So the weighted count of
    non-targets above each threshold is a product of the resample's counts with a (test speakers x
    thresholds) table: the numbers :func:`segreconcat_aug.evaluation.bootstrap.resampled_metrics` computes from the
    repeated trials (SpeechBrain's thresholds, float64 first-minimum rule), without repeating them.
    """

    def __init__(self, scores, targets, design: TrialDesign):
        self.design = design
        scores = np.asarray(scores, dtype=np.float64)
        targets = np.asarray(targets, dtype=bool)
        self.speakers, self.tables = [], []
        eers = []
        for unit in np.unique(design.enroll_units):
            trials = np.flatnonzero(design.enroll_units == unit)
            is_target = targets[trials]
            if not is_target.any() or is_target.all():
                continue
            thresholds = np.unique(scores[trials])
            frr = np.searchsorted(np.sort(scores[trials][is_target]), thresholds, "right") / is_target.sum()
            impostor_units, impostor = np.unique(design.test_units[trials][~is_target], return_inverse=True)
            negatives = scores[trials][~is_target]
            above = np.stack(
                [
                    (impostor == k).sum()
                    - np.searchsorted(np.sort(negatives[impostor == k]), thresholds, "right")
                    for k in range(len(impostor_units))
                ]
            ).astype(np.float64)
            self.speakers.append(int(unit))
            self.tables.append((impostor_units, above, np.bincount(impostor).astype(np.float64), frr))
            eers.append(100.0 * eer(scores[trials][is_target], negatives).eer)
        self.eers = np.array(eers)

    def per_speaker(self) -> dict[str, float]:
        return {self.design.speakers[u]: float(e) for u, e in zip(self.speakers, self.eers)}

    def resampled(self, unit_counts: np.ndarray) -> np.ndarray:
        """``(B, speakers)`` EERs (%) under speaker weights; NaN where a speaker has no impostor left."""
        out = np.full((unit_counts.shape[0], len(self.speakers)), np.nan)
        for k, (units, above, sizes, frr) in enumerate(self.tables):
            for rows in _row_chunks(len(unit_counts), len(frr)):
                w = unit_counts[rows][:, units].astype(np.float64)
                total = w @ sizes
                with np.errstate(invalid="ignore", divide="ignore"):
                    far = (w @ above) / total[:, None]
                best = np.argmin(np.abs(far - frr), axis=1)
                eers = 50.0 * (far[np.arange(len(w)), best] + frr[best])
                out[rows, k] = np.where(total > 0, eers, np.nan)
        return out

    def share_below(self, eers: np.ndarray, weights: np.ndarray, threshold: float) -> np.ndarray:
        """Weighted share (%) of speakers with an EER below ``threshold`` (rows: resamples)."""
        valid = np.isfinite(eers) & (weights > 0)
        total = (weights * valid).sum(axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            below = (weights * valid * (np.nan_to_num(eers, nan=np.inf) < threshold)).sum(axis=1)
            return np.where(total > 0, 100.0 * below / total, np.nan)

"""Verification metrics: EER (SpeechBrain's exact definition), normalized minDCF, low false-alarm
operating points, DET points.

:func:`eer` returns the same number as ``speechbrain.utils.metric_stats.EER`` (the challenge's
metric) but sorts once: O(n log n) time instead of O(n^2). SpeechBrain's definition, reproduced
including its float32 arithmetic:

- thresholds = the sorted unique scores and the midpoints between neighbours (in the scores' dtype);
- at threshold ``t``: FRR = mean(pos <= t), FAR = mean(neg > t), both float32;
- the chosen ``t`` minimizes ``|FAR - FRR|``, scanning thresholds in increasing order and replacing
  the current choice only on a strictly smaller value, where the candidate's difference is rounded
  to float32 and the current choice's is exact (what ``(FAR - FRR).abs().item() <
  abs(final_FAR - final_FRR)`` computes);
- EER = (FAR + FRR) / 2 at that threshold.

>>> result = eer([0.9, 0.8, 0.3], [0.1, 0.4, 0.2, 0.85])
>>> round(result.eer, 4), result.threshold
(0.2917, 0.4)
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np


class EERResult(NamedTuple):
    """EER (a fraction, not a percentage), its threshold, and FAR/FRR there."""

    eer: float
    threshold: float
    far: float
    frr: float


class DCFResult(NamedTuple):
    """Minimum detection cost (normalized unless asked otherwise) and its threshold."""

    min_dcf: float
    threshold: float


def _as_scores(scores, name: str) -> np.ndarray:
    array = np.asarray(scores)
    if array.dtype.kind not in "fiu":
        raise TypeError(f"{name} scores must be numbers, got dtype {array.dtype}")
    if array.dtype.kind in "iu":
        array = array.astype(np.float64)
    array = array.ravel()
    if array.size == 0:
        raise ValueError(f"no {name} scores: EER and minDCF need target and non-target trials")
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{name} scores contain NaN or infinite values ({int((~np.isfinite(array)).sum())})")
    return array


def _pair(positive_scores, negative_scores):
    pos = _as_scores(positive_scores, "target")
    neg = _as_scores(negative_scores, "non-target")
    dtype = np.result_type(pos.dtype, neg.dtype)
    return np.sort(pos.astype(dtype, copy=False)), np.sort(neg.astype(dtype, copy=False))


def candidate_thresholds(pos: np.ndarray, neg: np.ndarray) -> np.ndarray:
    """Sorted unique scores and midpoints, in the scores' dtype (as SpeechBrain builds them).

    >>> candidate_thresholds(np.array([1.0, 3.0]), np.array([3.0]))
    array([1., 2., 3.])
    """
    unique = np.unique(np.concatenate([pos, neg]))
    middle = (unique[:-1] + unique[1:]) / unique.dtype.type(2)
    return np.sort(np.concatenate([unique, middle]), kind="stable")


def error_counts(pos_sorted: np.ndarray, neg_sorted: np.ndarray, thresholds: np.ndarray):
    """Per threshold: number of targets ``<= t`` (misses) and non-targets ``> t`` (false alarms);
    both score arrays sorted ascending.

    >>> error_counts(np.array([1.0, 2.0]), np.array([0.0, 1.5]), np.array([1.0, 1.5]))
    (array([1, 1]), array([1, 0]))
    """
    misses = np.searchsorted(pos_sorted, thresholds, side="right")
    false_alarms = len(neg_sorted) - np.searchsorted(neg_sorted, thresholds, side="right")
    return misses, false_alarms


def eer(positive_scores, negative_scores) -> EERResult:
    """Equal error rate with exactly SpeechBrain's definition (see the module doc), as a fraction.

    Higher scores = more likely the same speaker. float32 input reproduces SpeechBrain on float32
    tensors, float64 input on float64 tensors.

    >>> eer([0.6, 0.7, 0.8, 0.5], [0.4, 0.3, 0.2, 0.1]).eer
    0.0
    """
    pos, neg = _pair(positive_scores, negative_scores)
    thresholds = candidate_thresholds(pos, neg)
    misses, false_alarms = error_counts(pos, neg, thresholds)
    # SpeechBrain divides float32 counts by the count of trials, in float32.
    frr = misses.astype(np.float32) / np.float32(len(pos))
    far = false_alarms.astype(np.float32) / np.float32(len(neg))
    # What SpeechBrain compares a candidate by: its float32 difference ...
    rounded = np.abs(far - frr).astype(np.float64)
    # ... against the exact (float64) difference of the current choice.
    exact = np.abs(far.astype(np.float64) - frr.astype(np.float64))
    # The scan reaches the first index holding the smallest rounded difference with a larger current
    # value (every earlier index has a strictly larger rounded, hence larger exact, difference), so it
    # always switches there; after it, only indices with that same rounded value can still win.
    smallest = rounded.min()
    ties = np.flatnonzero(rounded == smallest)
    best = int(ties[0])
    current = exact[best]
    for index in ties[1:]:
        if smallest < current:
            best, current = int(index), exact[index]
    far_best, frr_best = float(far[best]), float(frr[best])
    return EERResult((far_best + frr_best) / 2, float(thresholds[best]), far_best, frr_best)


def min_dcf(
    positive_scores,
    negative_scores,
    p_target: float = 0.01,
) -> DCFResult:
    """Normalized minimum detection cost over SpeechBrain's thresholds (c_miss = c_fa = 1).

    ``C(t) = P_miss(t) * p_target + P_fa(t) * (1 - p_target)`` (float64), normalized by
    ``min(p_target, 1 - p_target)`` as in NIST SRE; times that, it is SpeechBrain's ``minDCF`` (up to its
    float32 rounding). Other costs are the effective prior ``c_miss p / (c_miss p + c_fa (1 - p))``.

    >>> round(min_dcf([0.9, 0.8, 0.3], [0.1, 0.4, 0.2, 0.85], p_target=0.5).min_dcf, 4)
    0.5
    """
    if not 0.0 < p_target < 1.0:
        raise ValueError(f"p_target must be in (0, 1), got {p_target}")
    pos, neg = _pair(positive_scores, negative_scores)
    thresholds = candidate_thresholds(pos, neg)
    misses, false_alarms = error_counts(pos, neg, thresholds)
    cost = p_target * (misses / len(pos)) + (1 - p_target) * (false_alarms / len(neg))
    best = int(np.argmin(cost))
    return DCFResult(float(cost[best]) / min(p_target, 1 - p_target), float(thresholds[best]))


def det_curve(positive_scores, negative_scores, max_points: int | None = 2000):
    """``(far, frr)`` fractions at every unique score, for a DET plot, thinned to at most
    ``max_points`` evenly spaced points (the end points kept).

    >>> far, frr = det_curve([0.9, 0.8], [0.1, 0.85])
    >>> far.tolist(), frr.tolist()
    ([0.5, 0.5, 0.0, 0.0], [0.0, 0.5, 0.5, 1.0])
    """
    pos, neg = _pair(positive_scores, negative_scores)
    thresholds = np.unique(np.concatenate([pos, neg]))
    misses, false_alarms = error_counts(pos, neg, thresholds)
    far = false_alarms / len(neg)
    frr = misses / len(pos)
    if max_points is not None and len(far) > max_points:
        keep = np.unique(np.linspace(0, len(far) - 1, max_points).round().astype(int))
        far, frr = far[keep], frr[keep]
    return far, frr


#: Low false-alarm operating points (VoxGuard, arXiv 2509.18413): key -> (error rate held, its bound).
OPERATING_POINTS = {
    "tpr_at_fpr_1": ("fpr", 0.01),
    "tpr_at_fpr_0.1": ("fpr", 0.001),
    "fpr_at_fnr_1": ("fnr", 0.01),
}


def rates_at_operating_points(frr: np.ndarray, far: np.ndarray) -> dict:
    """TPR (%) at FPR <= 1 % and 0.1 %, FPR (%) at FNR <= 1 %, from error rates at increasing thresholds
    (last axis; the first accepts every trial, the last none): the best threshold meeting each bound."""
    out = {}
    for key, (held, bound) in OPERATING_POINTS.items():
        if held == "fpr":  # the lowest threshold with FPR <= bound has the highest TPR
            index = np.argmax(far <= bound, axis=-1)
            out[key] = 100.0 * (1.0 - np.take_along_axis(frr, index[..., None], -1)[..., 0])
        else:  # the highest threshold with FNR <= bound has the lowest FPR
            index = (frr <= bound).sum(axis=-1) - 1
            out[key] = 100.0 * np.take_along_axis(far, index[..., None], -1)[..., 0]
    return out


def operating_point_problems(n_target: int, n_nontarget: int) -> dict[str, str]:
    """Why an operating point is undefined on a list this small (an FPR of 1 % needs 100 non-targets).

    >>> operating_point_problems(20, 80)["tpr_at_fpr_1"]
    'undefined: fewer than 100 non-targets (80)'
    """
    problems = {}
    for key, (held, bound) in OPERATING_POINTS.items():
        need, have = int(np.ceil(1 / bound - 1e-9)), n_nontarget if held == "fpr" else n_target
        if have < need:
            problems[key] = (
                f"undefined: fewer than {need} {'non-targets' if held == 'fpr' else 'targets'} ({have})"
            )
    return problems


def operating_points(positive_scores, negative_scores) -> dict:
    """:data:`OPERATING_POINTS` (%) of a list, None where it is too small (the reason in ``undefined_because``).

    >>> found = operating_points(np.arange(100) + 995.5, np.arange(1000))  # 3 targets below 998, 3 non-targets above 996
    >>> found["tpr_at_fpr_1"], found["tpr_at_fpr_0.1"], found["fpr_at_fnr_1"]
    (100.0, 97.0, 0.3)
    """
    pos, neg = _pair(positive_scores, negative_scores)
    thresholds = np.concatenate([[-np.inf], np.unique(np.concatenate([pos, neg]))])
    misses, false_alarms = error_counts(pos, neg, thresholds)
    values = rates_at_operating_points(misses / len(pos), false_alarms / len(neg))
    problems = operating_point_problems(len(pos), len(neg))
    found = {key: None if key in problems else float(value) for key, value in values.items()}
    return {**found, **({"undefined_because": problems} if problems else {})}


def verification_metrics(positive_scores, negative_scores, p_targets=(0.01, 0.05)) -> dict:
    """EER (%), normalized minDCF at each ``p_target`` and :func:`operating_points`, with the trial counts.

    >>> sorted(verification_metrics([0.9, 0.2], [0.1, 0.3]))[:6]
    ['eer', 'eer_threshold', 'fpr_at_fnr_1', 'min_dcf_0.01', 'min_dcf_0.05', 'nontarget_trials']
    """
    result = eer(positive_scores, negative_scores)
    metrics = {
        "eer": 100.0 * result.eer,
        "eer_threshold": result.threshold,
        "target_trials": int(np.size(positive_scores)),
        "nontarget_trials": int(np.size(negative_scores)),
    }
    for p_target in p_targets:
        cost = min_dcf(positive_scores, negative_scores, p_target=p_target)
        metrics[f"min_dcf_{p_target:g}"] = cost.min_dcf
    return {**metrics, **operating_points(positive_scores, negative_scores)}

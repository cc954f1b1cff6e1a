"""Cllr, minCllr and ROCCH-EER (Brummer and du Preez 2006) as VoicePrivacy 2024's ``metrics/cllr.py``
computes them: Cllr of the raw scores taken as LLRs, minCllr of the PAV LLRs (:mod:`.pav`, no
smoothing), and the EER where the ROC convex hull of those PAV bins meets the diagonal. minCllr and
ROCCH-EER are read from PAV fits: :class:`.calibration.CalibrationMetrics` gives them.
"""

from __future__ import annotations

import numpy as np
from scipy.special import expit

from .pav import _Fits

_LN2 = np.log(2.0)


def _min_cllr(fits: _Fits) -> np.ndarray:
    """minCllr of PAV LLRs: mean of ``-log2 sigmoid(llr)`` over targets and of ``-log2 sigmoid(-llr)``.

    Each run's copies differ only by the epsilon, so their sum is taken to first order in it
    (error below 1e-12).
    """
    llr, w, shift, t = fits.llr, fits.weights, fits.epsilon_sums(), fits.labels
    sign = np.where(t, -1.0, 1.0)  # targets: -log sigmoid(llr) = log(1 + e^-llr)
    with np.errstate(invalid="ignore"):
        terms = w * np.logaddexp(0, sign * llr) + sign * expit(sign * llr) * shift
    terms = np.where(np.isinf(llr), 0.0, terms)  # +inf targets, -inf non-targets: no cost
    tar = fits.per_resample(np.where(t, terms, 0.0)) / fits.n_target
    non = fits.per_resample(np.where(t, 0.0, terms)) / fits.n_nontarget
    return (tar + non) / (2 * _LN2)


def _rocch_eer(fits: _Fits) -> np.ndarray:
    """VPC's ROCCH-EER (fraction): the highest crossing of the diagonal by the lines of the hull's
    segments, one segment per PAV block (0 for a vertical or horizontal one, as VPC)."""
    targets = np.add.reduceat(fits.weights * fits.labels, fits.block_starts)
    nontargets = np.add.reduceat(fits.weights * ~fits.labels, fits.block_starts)
    segment = fits.segment[fits.block_starts]
    first_block = np.searchsorted(segment, np.arange(len(fits.resamples)))
    after_t, after_n = np.cumsum(targets), np.cumsum(nontargets)
    start_t = (after_t - targets)[first_block][segment]
    start_n = (after_n - nontargets)[first_block][segment]
    n_target, n_nontarget = fits.n_target[segment], fits.n_nontarget[segment]
    y0, y1 = (after_t - targets - start_t) / n_target, (after_t - start_t) / n_target
    x0 = (n_nontarget - (after_n - nontargets - start_n)) / n_nontarget
    x1 = (n_nontarget - (after_n - start_n)) / n_nontarget
    det = x0 * y1 - x1 * y0
    sloped = (x0 != x1) & (y0 != y1) & (det != 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        crossing = np.where(sloped, det / (x0 - x1 + y1 - y0), 0.0)
    return np.maximum(np.maximum.reduceat(crossing, first_block), 0.0)


def _cllr_terms(scores, targets) -> np.ndarray:
    """Per trial, VPC's Cllr term of the raw score taken as an LLR (natural log; inf where it is)."""
    scores = np.asarray(scores, dtype=np.float64)
    with np.errstate(divide="ignore"):
        return np.where(targets, -np.log(expit(scores)), -np.log(expit(-scores)))


def _weighted_cllr(terms, targets, trial_weights) -> np.ndarray:
    """Cllr of the raw scores under trial weights ``(resamples, trials)`` (one matrix product); inf where
    a drawn trial's posterior is 0, as VPC's ``cllr`` returns."""
    infinite = ~np.isfinite(terms)
    finite = np.where(infinite, 0.0, terms)
    columns = np.stack(
        [np.where(targets, finite, 0.0), np.where(targets, 0.0, finite), targets, ~targets, infinite]
    )
    tar_sum, non_sum, n_target, n_nontarget, drawn_infinite = (trial_weights @ columns.T.astype(np.float64)).T
    with np.errstate(invalid="ignore", divide="ignore"):
        value = np.where(
            drawn_infinite > 0, np.inf, (tar_sum / n_target + non_sum / n_nontarget) / (2 * _LN2)
        )
    return np.where((n_target > 0) & (n_nontarget > 0), value, np.nan)


def cllr(tar, non) -> float:
    """Cllr (bits) of the raw scores taken as LLRs, as VPC 2024's ``cllr.cllr`` (inf if a posterior is 0).

    >>> round(cllr([2.0, 1.0], [-1.0, -3.0]), 4)
    0.2893
    """
    tar, non = np.asarray(tar, dtype=np.float64).ravel(), np.asarray(non, dtype=np.float64).ravel()
    targets = np.arange(len(tar) + len(non)) < len(tar)
    terms = _cllr_terms(np.concatenate([tar, non]), targets)
    return float(_weighted_cllr(terms, targets, np.ones((1, len(terms))))[0])

"""ZEBRA (Nautsch et al. 2020, GitHub ``Voice-Privacy-Challenge/zebra``): the expected disclosure
``D_ECE`` in bits from the PAV-calibrated LLRs (:mod:`.pav`; scores sorted with targets before
non-targets on ties, no Laplace smoothing) and the worst case ``max |log10 LR|`` from the
Laplace-smoothed PAV LLRs (non-targets first on ties), with its categorical tag ``0``, ``A`` ... ``F``.
Both are read from PAV fits: :class:`.calibration.CalibrationMetrics` gives them.
"""

from __future__ import annotations

import numpy as np

from .pav import _Fits

#: ZEBRA's categorical tags of max |log10 LR| (upper bounds of the intervals (lower, upper]).
ZEBRA_TAGS = (
    ("0", np.finfo(float).eps),
    ("A", 1.0),
    ("B", 2.0),
    ("C", 4.0),
    ("D", 5.0),
    ("E", 6.0),
    ("F", np.inf),
)
#: ZEBRA's integrand treats |LLR| <= this as 0 (its hard-coded limit, plo_plots.get_delta_ECE).
ZEBRA_ZERO = 1e-6
#: Runs whose PAV LLR is this close to 0 get ZEBRA's integrand copy by copy (it is hard-coded near 0).
_NEAR_ZERO = 1e-2
_LN2, _LN10 = np.log(2.0), np.log(10.0)


def _zebra_integrand(x: np.ndarray) -> np.ndarray:
    """ZEBRA's per-LLR term of the ECE integral: ``(x - (e^x - 1)) / (e^x - 1)^2``, -1/2 near 0, 0 at inf."""
    out = np.zeros(len(x))
    finite = ~np.isinf(x) & (np.abs(x) > ZEBRA_ZERO)
    lr_minus_one = np.exp(x[finite]) - 1
    out[finite] = (x[finite] - lr_minus_one) / lr_minus_one**2
    out[np.abs(x) <= ZEBRA_ZERO] = -0.5
    return out


def _zebra_terms(x: np.ndarray):
    """ZEBRA's integrand at finite ``x`` away from 0, and its derivative (for the epsilon shifts)."""
    e = np.exp(x)
    b = e - 1
    return (x - b) / b**2, -1 / b - 2 * e * (x - b) / b**3


def _dece(fits: _Fits) -> np.ndarray:
    """ZEBRA's D_ECE (bits): ``(Z(tar llrs) + Z(-non llrs)) / ln 2`` with ``Z(x) = 1/4 + mean(term) / 2``."""
    llr, w, t = fits.llr, fits.weights, fits.labels
    sign = np.where(t, 1.0, -1.0)
    finite = np.isfinite(llr)
    near = finite & (np.abs(llr) < _NEAR_ZERO)
    far = finite & ~near
    terms = np.zeros(len(llr))
    value, slope = _zebra_terms(sign[far] * llr[far])
    terms[far] = w[far] * value + sign[far] * slope * fits.epsilon_sums()[far]
    tar, non = fits.per_resample(np.where(t, terms, 0.0)), fits.per_resample(np.where(t, 0.0, terms))
    if near.any():  # ZEBRA's integrand is hard-coded near 0 (and cancels there): copy by copy
        copies = w[near].astype(np.int64)
        offsets = np.arange(copies.sum()) - np.repeat(np.cumsum(copies) - copies, copies)
        segment = np.repeat(fits.segment[near], copies)
        positions = np.repeat(fits.first[near], copies) + offsets
        x = np.repeat(sign[near], copies) * (np.repeat(llr[near], copies) + fits.epsilon(positions, segment))
        values = _zebra_integrand(x)
        is_target = np.repeat(t[near], copies)
        tar += np.bincount(segment, weights=np.where(is_target, values, 0.0), minlength=len(tar))
        non += np.bincount(segment, weights=np.where(is_target, 0.0, values), minlength=len(non))
    return (0.5 + (tar / fits.n_target + non / fits.n_nontarget) / 2) / _LN2


def _max_abs_log10(fits: _Fits) -> np.ndarray:
    """ZEBRA's worst case ``max |LLR| / ln 10`` over the (Laplace-smoothed) copies: at a run's ends."""
    first = fits.llr + fits.epsilon(fits.first, fits.segment)
    last = fits.llr + fits.epsilon(fits.first + fits.weights - 1, fits.segment)
    return np.maximum.reduceat(np.maximum(np.abs(first), np.abs(last)), fits.offsets[:-1]) / _LN10


def zebra_tag(max_abs_log10_lr: float) -> str | None:
    """ZEBRA's categorical tag: the interval (lower, upper] holding the value (0 itself: ``0``); None for NaN.

    >>> zebra_tag(0.5), zebra_tag(1.0), zebra_tag(3.2), zebra_tag(float("inf")), zebra_tag(float("nan"))
    ('A', 'A', 'C', 'F', None)
    """
    for tag, upper in ZEBRA_TAGS:
        if max_abs_log10_lr <= upper:
            return tag
    return None  # NaN (no targets or no non-targets): no value, so no tag

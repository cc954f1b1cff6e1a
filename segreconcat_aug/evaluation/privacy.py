"""Privacy metrics beyond the EER, from the scored trials of one list, each equal to the field's reference code.

An EER says how well an attacker verifies identities on average; an anonymizer is judged by how much
identity survives anywhere in its output. This module computes, from the same scored trials as the EER
(a :class:`segreconcat_aug.evaluation.system.SubsetScores` and the speaker units of its
:class:`~segreconcat_aug.evaluation.bootstrap.TrialDesign`):

- **linkability** ``D<->sys`` (Gomez-Barrero et al. 2017 as VoicePrivacy 2024 adapts it,
  ``evaluation/privacy/asv/metrics/linkability.py``): normalized histograms of the target and non-target
  scores over ``min(int(n_target / 10), 100)`` equal bins between the lowest and highest score, the local
  ``D(s) = 2 LR / (1 + LR) - 1`` where ``LR > 1`` (omega = 1), 1 where only targets fall, and the
  trapezoidal integral of ``D`` times the target density over the bin centres. With fewer than 20
  target trials there is one bin (or none) and that integral is 0 whatever the scores: undefined here.
- **ZEBRA** (Nautsch et al. 2020, GitHub ``Voice-Privacy-Challenge/zebra``): the expected disclosure
  ``D_ECE`` in bits from the PAV-calibrated LLRs (scores sorted with targets before non-targets on ties,
  no Laplace smoothing) and the worst case ``max |log10 LR|`` from the Laplace-smoothed PAV LLRs
  (non-targets first on ties), with its categorical tag ``0``, ``A`` ... ``F``.
- **Cllr, minCllr, ROCCH-EER** as VoicePrivacy 2024 ``metrics/cllr.py`` computes them: Cllr of the raw
  scores taken as LLRs, minCllr of the PAV LLRs (``helpers.optimal_llr``, no smoothing), and the EER
  where the ROC convex hull of those PAV bins meets the diagonal (reported in %).
- **closed-set identification**: rank-1 and top-k (%) of each test utterance that has a target trial,
  among the enrolled speakers it was scored against (a tie with the true speaker counts against it);
- **Linkability pi_link and Singling Out** of Vauquier et al. 2025 with their population sweeps, through
  their reference package ``voice-anonymization-legal-eval`` (``legal_eval``), on the list's score matrix
  (conversations of one utterance);
- **risk per speaker**: the EER of each enrolled speaker (its target trials against the non-target
  trials of its own model), the share of speakers below a threshold and the worst speakers.

Every PAV-based metric adds the references' ``1e-6 * position / N`` to the calibrated LLRs (their
"monotonicity epsilon"), so the values are theirs to rounding, not just to the epsilon.

Intervals: :meth:`ListPrivacy.resampled` computes every scalar metric under the speaker-bootstrap weights
of :mod:`segreconcat_aug.evaluation.bootstrap` (a target trial of speaker ``k`` counts ``w_k`` times, a non-target
trial ``w_e * w_s`` times), which is the metric of the resample's repeated trial list (checked against
that loop in the tests); the PAV metrics run on runs of equal labels in score order, the position
epsilon in closed form per run.

Example
-------
>>> tar, non = np.array([0.9, 0.8, 0.4]), np.array([0.5, 0.3, 0.2, 0.1])
>>> round(min_cllr(tar, non), 4), round(rocch_eer(tar, non), 4)  # PAV pools 0.4 (target) with 0.5
(0.2874, 0.1429)
>>> zebra(tar, non).tag
'A'
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
from scipy.optimize import isotonic_regression
from scipy.special import expit, logit

from .bootstrap import TrialDesign
from .metrics import eer

#: The references' shift of the calibrated LLRs: position * MONOTONICITY_EPSILON / N.
MONOTONICITY_EPSILON = 1e-6
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
#: Linkability needs at least two histogram bins, so 20 target trials (VPC: min(int(n / 10), 100) bins).
LINKABILITY_MIN_TARGETS = 20
#: Runs whose PAV LLR is this close to 0 get ZEBRA's integrand copy by copy (it is hard-coded near 0).
_NEAR_ZERO = 1e-2
_LN2, _LN10 = np.log(2.0), np.log(10.0)
_trapezoid = getattr(np, "trapezoid", None) or np.trapz  # np.trapz: numpy < 2.0 (removed in 2.4)


@dataclass(frozen=True)
class PrivacyOptions:
    """Settings of the metrics that have any (the YAML's ``eval_privacy_*`` keys, docs/evaluation.md)."""

    top_k: int = 5
    speaker_eer_threshold: float = 10.0  # %: "share of speakers below"
    worst_speakers: int = 5
    singling_out_folds: int = 10  # legal_eval's default cross-validation folds
    singling_out_runs: int = 5  # legal_eval's default draws per population size
    max_calibration: int = 9  # legal_eval's M: calibration conversations per speaker
    seed: int = 0  # legal_eval's seed (conversation splits, population draws)
    population_sizes: tuple | None = None  # None: population_sizes(n)


def population_sizes(maximum: int, start: int = 2) -> list[int]:
    """The population sweep: 2, 5, 10, 20, 50, ... below ``maximum``, then ``maximum``.

    >>> population_sizes(15), population_sizes(2)
    ([2, 5, 10, 15], [2])
    """
    sizes, decade = [], 1
    while decade <= maximum:
        sizes += [s * decade for s in (1, 2, 5) if start <= s * decade < maximum]
        decade *= 10
    return sorted(set(sizes)) + ([maximum] if maximum >= start else [])


# ---------------------------------------------------------------------------------------------------
# Linkability (VPC 2024)
# ---------------------------------------------------------------------------------------------------


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


def _linkability_of_counts(edges, mated_counts, nonmated_counts, omega: float):
    """``(D<->sys, local D)`` from histogram counts along the last axis (VPC's normalized histograms and
    trapezoidal integral; rows of a 2-D input are resamples)."""
    widths = np.diff(edges, axis=-1)
    y1 = mated_counts / widths / mated_counts.sum(axis=-1, keepdims=True)
    y2 = nonmated_counts / widths / nonmated_counts.sum(axis=-1, keepdims=True)
    lr = np.divide(y1, y2, out=np.ones_like(y1), where=y2 != 0)
    local = 2 * (omega * lr / (1 + omega * lr)) - 1
    local[omega * lr <= 1] = 0
    local[(y2 == 0) & (y1 != 0)] = 1
    centers = (edges[..., 1:] + edges[..., :-1]) / 2
    return _trapezoid(local * y1, x=centers, axis=-1), local


def linkability(mated_scores, non_mated_scores, omega: float = 1.0) -> Linkability:
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
        edges, np.histogram(mated, bins=edges)[0], np.histogram(non_mated, bins=edges)[0], omega
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

    def linkability(self, w: np.ndarray, omega: float = 1.0) -> np.ndarray:
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
            out[rows] = _linkability_of_counts(edges, counts[0], counts[1], omega)[0]
        return out


# ---------------------------------------------------------------------------------------------------
# PAV calibration: minCllr, ROCCH-EER, ZEBRA
# ---------------------------------------------------------------------------------------------------


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


def zebra_tag(max_abs_log10_lr: float) -> str:
    """ZEBRA's categorical tag: the interval (lower, upper] holding the value (0 itself: ``0``).

    >>> zebra_tag(0.5), zebra_tag(1.0), zebra_tag(3.2), zebra_tag(float("inf"))
    ('A', 'A', 'C', 'F')
    """
    for tag, upper in ZEBRA_TAGS:
        if max_abs_log10_lr <= upper:
            return tag
    return ZEBRA_TAGS[-1][0]


class Zebra(NamedTuple):
    """ZEBRA's population (bits) and individual (max |log10 LR|) disclosure, and its tag."""

    dece_bits: float
    max_abs_log10_lr: float
    tag: str


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


def _point(tar, non) -> dict:
    tar, non = np.asarray(tar, dtype=np.float64).ravel(), np.asarray(non, dtype=np.float64).ravel()
    values = CalibrationMetrics(np.concatenate([tar, non]), np.arange(len(tar) + len(non)) < len(tar))(
        np.ones((1, len(tar) + len(non)), dtype=np.int64)
    )
    return {name: float(value[0]) for name, value in values.items()}


def min_cllr(tar, non) -> float:
    """minCllr (bits) of VPC 2024's ``cllr.min_cllr``: Cllr of the PAV LLRs (non-targets first on ties)."""
    return _point(tar, non)["min_cllr"]


def rocch_eer(tar, non) -> float:
    """The ROCCH-EER (a fraction) of VPC 2024's ``cllr.min_cllr(compute_eer=True)``."""
    return _point(tar, non)["rocch_eer"] / 100.0


def zebra(tar, non) -> Zebra:
    """ZEBRA as ``zebra_framework`` computes it (D_ECE in bits, max |log10 LR| and its tag).

    >>> zebra([0.9, 0.8], [0.1, 0.2, 0.3]).dece_bits == zebra([0.7, 0.6], [0.1, 0.2, 0.3]).dece_bits
    True
    """
    values = _point(tar, non)
    worst = values["zebra_max_abs_log10_lr"]
    return Zebra(values["zebra_dece_bits"], worst, zebra_tag(worst))


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


# ---------------------------------------------------------------------------------------------------
# Identification, pi_link and Singling Out (score matrix of a crossed list)
# ---------------------------------------------------------------------------------------------------


@dataclass
class ListStructure:
    """The speakers and score matrix of one trial list, in the units of its bootstrap design.

    ``matrix[e, u]``: score of enrolled unit ``enrolled[e]`` against test utterance ``utterances[u]``
    (NaN where the list has no such trial); ``owner[u]``: the unit of utterance ``u``'s target trial
    (-1 without one); ``utterance_units[u]``: the unit of ``u``'s speaker.
    """

    design: TrialDesign
    enrolled: np.ndarray
    utterances: list[str]
    utterance_units: np.ndarray
    owner: np.ndarray
    matrix: np.ndarray
    notes: dict = field(default_factory=dict)

    @property
    def complete(self) -> bool:
        return bool(np.isfinite(self.matrix).all())


def list_structure(enroll, test, targets, scores, design: TrialDesign) -> ListStructure:
    """The :class:`ListStructure` of scored trials (``design``: their bootstrap design)."""
    targets = np.asarray(targets, dtype=bool)
    utterances = sorted(set(test))
    column = {u: k for k, u in enumerate(utterances)}
    enrolled = np.unique(design.enroll_units)
    row = np.full(len(design.speakers), -1)
    row[enrolled] = np.arange(len(enrolled))
    columns = np.array([column[u] for u in test], dtype=np.int64)
    matrix = np.full((len(enrolled), len(utterances)), np.nan)
    matrix[row[design.enroll_units], columns] = np.asarray(scores, dtype=np.float64)
    utterance_units = np.zeros(len(utterances), dtype=np.int64)
    utterance_units[columns] = design.test_units
    owner = np.full(len(utterances), -1)
    claims = np.bincount(columns[targets], minlength=len(utterances))
    owner[columns[targets]] = design.enroll_units[targets]
    notes = {}
    if (claims > 1).any():
        owner[claims > 1] = -1
        notes["identification"] = (
            f"{int((claims > 1).sum())} utterance(s) with several target trials left out"
        )
    return ListStructure(design, enrolled, utterances, utterance_units, owner, matrix, notes)


class Identification:
    """Closed-set identification of the utterances that have a target trial, under speaker weights."""

    def __init__(self, structure: ListStructure):
        self.structure = structure
        m = structure.matrix
        self.columns = np.flatnonzero(structure.owner >= 0)
        rows = {unit: k for k, unit in enumerate(structure.enrolled)}
        true_rows = np.array([rows[u] for u in structure.owner[self.columns]], dtype=np.int64)
        true = m[true_rows, self.columns]
        others = m[:, self.columns]
        self.utterance_units = structure.owner[self.columns]
        # Beaters per (enrolled speaker, utterance): >= for the ranks (a tie counts against), > for pi_link.
        with np.errstate(invalid="ignore"):
            self.at_least = (others >= true) & np.isfinite(others)
            self.above = (others > true) & np.isfinite(others)
        self.at_least[true_rows, np.arange(len(self.columns))] = False
        self.candidates = np.isfinite(others).sum(axis=0)

    def rates(self, unit_counts: np.ndarray, top_k: int, strict: bool = False) -> np.ndarray:
        """Share (%) of utterances whose true speaker ranks within ``top_k`` under ``unit_counts`` (B, units).

        Competitor ``j`` counts ``w_j`` times (each drawn copy is a candidate), an utterance ``w`` of its
        speaker times; the speaker's own extra copies are not competitors. ``strict``: only higher
        scores beat the true speaker (legal_eval's pi_link).
        """
        beaters = (self.above if strict else self.at_least).astype(np.float64)
        hits, total = np.zeros(len(unit_counts)), np.zeros(len(unit_counts))
        for rows in _row_chunks(len(unit_counts), beaters.shape[1]):
            w_enrolled = unit_counts[rows][:, self.structure.enrolled].astype(np.float64)
            ranks = w_enrolled @ beaters  # (resamples, utterances): weighted beaters
            w_utt = unit_counts[rows][:, self.utterance_units].astype(np.float64)
            hits[rows] = (w_utt * (ranks < top_k)).sum(axis=1)
            total[rows] = w_utt.sum(axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(total > 0, 100.0 * hits / total, np.nan)


def _row_chunks(resamples: int, width: int, elements: int = 4_000_000):
    """Slices of resamples whose ``(rows, width)`` arrays stay near ``elements`` (memory)."""
    step = max(1, elements // max(1, width))
    return [slice(start, min(start + step, resamples)) for start in range(0, resamples, step)]


def _score_matrix(structure: ListStructure):
    """legal_eval's :class:`ScoreMatrix` of the utterances with a target trial (one column each)."""
    from legal_eval.io import ScoreMatrix

    columns = np.flatnonzero(structure.owner >= 0)
    names = structure.design.speakers
    return ScoreMatrix(
        scores=structure.matrix[:, columns],
        enroll_speakers=[names[u] for u in structure.enrolled],
        test_speakers=[names[u] for u in structure.owner[columns]],
        metadata={"conversation_length": 1},
    )


def pi_link_sweep(structure: ListStructure, sizes=None) -> dict[int, float]:
    """legal_eval's Linkability pi_link (exact estimator) for each candidate-set size ``N'``."""
    from legal_eval.metrics.linkability import count_beaters
    from legal_eval.metrics.linkability import linkability as legal_linkability

    matrix = _score_matrix(structure)
    beaters = count_beaters(matrix)
    n = len(matrix.enroll_speakers)
    return {
        int(size): legal_linkability(matrix, int(size), estimator="exact", beaters=beaters)[0]
        for size in sorted(set(sizes or population_sizes(n, start=1 if n < 2 else 2)) | {n})
        if 1 <= size <= n
    }


class SinglingOut:
    """Singling Out (legal_eval) of one crossed list: its sweep, and the full population under weights.

    The dataset: every test speaker with at least two utterances in the list (one test and up to
    ``max_calibration`` calibration conversations of one utterance, split by legal_eval's
    ``build_conversations`` per fold); the predicates: the enrolled speakers among them.
    """

    def __init__(self, structure: ListStructure, options: PrivacyOptions):
        from legal_eval.embeddings import build_conversations
        from legal_eval.metrics.singling_out import ConversationScores

        self.structure, self.options = structure, options
        names = structure.design.speakers
        self.unit_of = {name: k for k, name in enumerate(names)}
        spk2utt: dict[
            str, list[str]
        ] = {}  # every test speaker, sorted; legal_eval skips those with one utterance
        for u, unit in sorted(enumerate(structure.utterance_units), key=lambda x: (names[x[1]], x[0])):
            spk2utt.setdefault(names[unit], []).append(structure.utterances[u])
        index = {u: np.array([float(k)]) for k, u in enumerate(structure.utterances)}  # carries the column
        enrolled_names = [names[u] for u in structure.enrolled]
        self.folds = []
        for fold in range(options.singling_out_folds):
            conversations = build_conversations(
                spk2utt, index, 1, max_calibration=options.max_calibration, seed=options.seed, fold=fold
            )
            speakers = list(conversations)
            test_columns = np.array([int(conversations[s].test[0]) for s in speakers], dtype=np.int64)
            calibration = [[int(c[0]) for c in conversations[s].calibration] for s in speakers]
            bounds = np.cumsum([0] + [len(c) for c in calibration])
            cal_columns = np.array([c for block in calibration for c in block], dtype=np.int64)
            scores = ConversationScores(
                enroll_speakers=enrolled_names,
                dataset_speakers=speakers,
                test_scores=structure.matrix[:, test_columns],
                calibration_scores=structure.matrix[:, cal_columns],
                calibration_slices=[(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:])],
            )
            units = np.array([self.unit_of[s] for s in speakers], dtype=np.int64)
            self.folds.append((scores, units, np.repeat(units, np.diff(bounds)), np.diff(bounds)))
        self.dataset = self.folds[0][0].dataset_speakers if self.folds else []
        self.n_dataset = len(self.dataset)
        self.predicates = [s for s in enrolled_names if s in self.dataset]

    @property
    def problem(self) -> str | None:
        if not self.structure.complete:
            return "the list is not a full cross of enrolled speakers and test utterances"
        if self.n_dataset < 2:
            return f"{self.n_dataset} test speaker(s) with two or more utterances: Singling Out needs two"
        if not self.predicates:
            return "no enrolled speaker is among the test speakers with two or more utterances"
        return None

    def sweep(self, sizes=None) -> dict[int, float]:
        """legal_eval's pi_sing for each population size ``N``: the mean isolation outcome over
        predicates, folds and runs (as its ``singling_out_sweep`` averages)."""
        from legal_eval.metrics.singling_out import singling_out

        out = {}
        for size in sorted(set(sizes or population_sizes(self.n_dataset)) | {self.n_dataset}):
            if not 2 <= size <= self.n_dataset:
                continue
            outcomes = []
            for fold, (scores, *_rest) in enumerate(self.folds):
                found = singling_out(
                    scores,
                    int(size),
                    n_runs=self.options.singling_out_runs,
                    seed=self.options.seed,
                    fold=fold,
                )
                outcomes += [float(np.mean(values)) for values in found.values()]
            out[int(size)] = float(np.mean(outcomes))
        return out

    def full_population(self, unit_counts: np.ndarray) -> np.ndarray:
        """pi_sing with the whole dataset as the population, under speaker weights ``(B, units)``.

        A drawn copy of another speaker is one more person in the population (its test conversation
        may fire, its calibration conversations set the threshold ``w`` times); a predicate never
        meets copies of its own speaker. With unit weights: legal_eval's value at ``N`` = all.
        """
        resamples = unit_counts.shape[0]
        hits = np.zeros(resamples)
        weight = np.zeros(resamples)
        enroll_rows = {name: k for k, name in enumerate(self.folds[0][0].enroll_speakers)}
        for scores, units, cal_units, cal_counts in self.folds:
            dataset = {s: k for k, s in enumerate(scores.dataset_speakers)}
            w_units = unit_counts[:, units].astype(np.int64)
            for predicate in self.predicates:
                own = dataset[predicate]
                own_unit = units[own]
                row = enroll_rows[predicate]
                order = np.argsort(-scores.calibration_scores[row], kind="stable")
                cal = scores.calibration_scores[row][order]
                w_cal = unit_counts[:, cal_units[order]].astype(np.int64)
                w_cal[:, cal_units[order] == own_unit] = 1
                cumulative = np.cumsum(w_cal, axis=1)
                needed = int(cal_counts[own])
                valid = cumulative[:, -1] >= needed + 1
                nth = cal[np.argmax(cumulative >= needed, axis=1)]
                next_ = cal[np.argmax(cumulative >= needed + 1, axis=1)]
                threshold = (next_ + nth) / 2.0
                w_test = w_units.copy()
                w_test[:, own] = 1
                firing = (w_test * (scores.test_scores[row][None, :] > threshold[:, None])).sum(axis=1)
                w_predicate = unit_counts[:, self.unit_of[predicate]].astype(np.float64) * valid
                hits += w_predicate * (firing == 1)
                weight += w_predicate
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(weight > 0, hits / weight, np.nan)


# ---------------------------------------------------------------------------------------------------
# Risk per speaker
# ---------------------------------------------------------------------------------------------------


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


# ---------------------------------------------------------------------------------------------------
# Everything for one list
# ---------------------------------------------------------------------------------------------------

#: Scalar metrics with a speaker-bootstrap interval (the names of :meth:`ListPrivacy.resampled`).
INTERVAL_METRICS = (
    "linkability",
    "zebra_dece_bits",
    "zebra_max_abs_log10_lr",
    "cllr",
    "min_cllr",
    "rocch_eer",
    "rank1",
    "top5",
    "pi_link",
    "singling_out",
    "per_speaker_eer_share_below",
)


def topk_key(top_k: int) -> str:
    """The results key of the top-k rate: ``top5`` by default."""
    return f"top{int(top_k)}"


def interval_names(options: PrivacyOptions) -> list[str]:
    """:data:`INTERVAL_METRICS` with the top-k key of ``options``."""
    return [topk_key(options.top_k) if name == "top5" else name for name in INTERVAL_METRICS]


class ListPrivacy:
    """All privacy metrics of one scored trial list: point values, and resampled ones for intervals."""

    def __init__(self, subset, design: TrialDesign, options: PrivacyOptions | None = None, scores=None):
        self.options = options or PrivacyOptions()
        self.subset, self.design = subset, design
        self.scores = np.asarray(subset.scores if scores is None else scores)
        self.targets = np.asarray(subset.targets, dtype=bool)
        self.sorted = _SortedTrials(self.scores, self.targets)
        self.calibration = CalibrationMetrics(self.scores, self.targets)
        self.cllr_terms = _cllr_terms(self.scores, self.targets)
        self.structure = list_structure(subset.enroll, subset.test, self.targets, self.scores, design)
        self.identification = Identification(self.structure)
        self.singling = SinglingOut(self.structure, self.options)
        self.speaker_risk = SpeakerRisk(self.scores, self.targets, design)

    def problems(self) -> dict[str, str]:
        """Metric -> why it is undefined on this list (for points and intervals alike)."""
        problems = {}
        n_target = int(self.targets.sum())
        if linkability_bins(n_target) < 2:
            problems["linkability"] = _linkability_undefined(n_target, linkability_bins(n_target))
        if not len(self.identification.columns):
            for name in ("rank1", topk_key(self.options.top_k), "pi_link"):
                problems[name] = "no test utterance has a target trial"
        elif self.identification.candidates.max() <= self.options.top_k:
            problems[topk_key(self.options.top_k)] = (
                f"every utterance has at most {int(self.identification.candidates.max())} candidate speakers: "
                f"top-{self.options.top_k} identification is 100 % by construction"
            )
        if not self.structure.complete:
            problems["pi_link"] = "the list is not a full cross of enrolled speakers and test utterances"
        if self.singling.problem:
            problems["singling_out"] = self.singling.problem
        if not self.speaker_risk.speakers:
            problems["per_speaker_eer_share_below"] = (
                "no enrolled speaker has both target and non-target trials"
            )
        return problems

    def point(self) -> dict:
        """Every metric's point value (None where undefined, the reason in ``undefined_because``)."""
        o, problems = self.options, self.problems()
        tar, non = self.scores[self.targets], self.scores[~self.targets]
        link = linkability(tar, non)
        ones = np.ones((1, len(self.design.speakers)), dtype=np.int64)
        calibrated = self.calibration(np.ones((1, len(self.scores)), dtype=np.int64))
        per_speaker = self.speaker_risk.per_speaker()
        worst = sorted(per_speaker.items(), key=lambda item: (item[1], item[0]))[: o.worst_speakers]
        values = {
            "linkability": link.value,
            "linkability_local": {
                "bin_centers": link.bin_centers.tolist(),
                "D": link.local.tolist(),
                "bin_edges": link.bin_edges.tolist(),
            },
            "zebra_dece_bits": float(calibrated["zebra_dece_bits"][0]),
            "zebra_max_abs_log10_lr": float(calibrated["zebra_max_abs_log10_lr"][0]),
            "zebra_tag": zebra_tag(float(calibrated["zebra_max_abs_log10_lr"][0])),
            "cllr": cllr(tar, non),
            "min_cllr": float(calibrated["min_cllr"][0]),
            "rocch_eer": float(calibrated["rocch_eer"][0]),
            "rank1": None,
            topk_key(o.top_k): None,
            "pi_link": None,
            "pi_link_sweep": {},
            "singling_out": None,
            "singling_out_sweep": {},
            "per_speaker_eer": per_speaker,
            "per_speaker_eer_threshold": float(o.speaker_eer_threshold),
            "per_speaker_eer_share_below": None,
            "per_speaker_eer_median": float(np.median(self.speaker_risk.eers)) if per_speaker else None,
            "per_speaker_eer_worst": [[speaker, value] for speaker, value in worst],
        }
        if len(self.identification.columns):
            values["rank1"] = float(self.identification.rates(ones, 1)[0])
            values[topk_key(o.top_k)] = float(self.identification.rates(ones, o.top_k)[0])
        if "pi_link" not in problems:
            values["pi_link_sweep"] = pi_link_sweep(self.structure, o.population_sizes)
            values["pi_link"] = values["pi_link_sweep"].get(len(self.structure.enrolled))
        if "singling_out" not in problems:
            values["singling_out_sweep"] = self.singling.sweep(o.population_sizes)
            values["singling_out"] = values["singling_out_sweep"].get(self.singling.n_dataset)
        if per_speaker:
            weights = np.ones((1, len(self.speaker_risk.speakers)))
            share = self.speaker_risk.share_below(
                self.speaker_risk.eers[None, :], weights, o.speaker_eer_threshold
            )
            values["per_speaker_eer_share_below"] = float(share[0])
        for name in problems:
            if name in values:
                values[name] = None
        values["undefined_because"] = {**problems, **self.structure.notes}
        return values

    def resampled(self, weights, names=None) -> dict[str, np.ndarray]:
        """Every interval metric of every resample: ``name -> (resamples,)`` (NaN where undefined).

        ``weights``: the list's :class:`~segreconcat_aug.evaluation.bootstrap.SpeakerWeights`; ``names``: only
        these metrics (default: :func:`interval_names`).
        """
        o = self.options
        names = list(interval_names(o) if names is None else names)
        unknown = sorted(set(names) - set(interval_names(o)))
        if unknown:
            raise ValueError(f"no interval for {unknown}; metrics with one: {interval_names(o)}")
        counts, resamples = weights.unit_counts, weights.resamples
        out = {name: np.full(resamples, np.nan) for name in names}
        wanted = set(names)
        calibrated = wanted & {"min_cllr", "rocch_eer", "zebra_dece_bits", "zebra_max_abs_log10_lr"}
        if wanted & {"cllr", "linkability"} or calibrated:
            step = max(1, 2_000_000 // max(1, len(self.scores)))
            for start in range(0, resamples, step):
                stop = min(start + step, resamples)
                w = weights.chunk(start, stop)
                if "cllr" in wanted:
                    out["cllr"][start:stop] = _weighted_cllr(self.cllr_terms, self.targets, w)
                if calibrated:
                    for name, values in self.calibration(w).items():
                        if name in wanted:
                            out[name][start:stop] = values
                if "linkability" in wanted:
                    out["linkability"][start:stop] = self.sorted.linkability(w)
        top = topk_key(o.top_k)
        if len(self.identification.columns):
            if "rank1" in wanted:
                out["rank1"] = self.identification.rates(counts, 1)
            if top in wanted:
                out[top] = self.identification.rates(counts, o.top_k)
            if "pi_link" in wanted and self.structure.complete:
                out["pi_link"] = self.identification.rates(counts, 1, strict=True) / 100.0
        if "singling_out" in wanted and self.singling.problem is None:
            out["singling_out"] = self.singling.full_population(counts)
        if "per_speaker_eer_share_below" in wanted and self.speaker_risk.speakers:
            eers = self.speaker_risk.resampled(counts)
            speaker_weights = counts[:, self.speaker_risk.speakers].astype(np.float64)
            out["per_speaker_eer_share_below"] = self.speaker_risk.share_below(
                eers, speaker_weights, o.speaker_eer_threshold
            )
        return out

"""Confidence intervals and paired tests for EER and minDCF: a speaker-level (subsets) bootstrap.

The trials of one speaker are correlated, so resampling trials one by one understates the
uncertainty: this module resamples *speakers* (kin: Bolle, Ratha and Pankanti's "subsets
bootstrap", CVIU 2004; Poh, Martin and Bengio, IEEE TPAMI 29(3) 2007). A target trial of speaker
``k`` counts ``w_k`` times (``w_k``: how often ``k`` was drawn), a non-target trial between ``e``
and ``s`` ``w_e * w_s`` times. The method, strata and p-values: docs/evaluation-reference.md.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np

from .metrics import OPERATING_POINTS, rates_at_operating_points

CONFIDENCE = 0.95
CHUNK_ELEMENTS = 4_000_000  # resamples x trials per chunk (memory: a few arrays of this many elements)


@dataclass
class TrialDesign:
    """How one trial list is built from speakers: the unit of each trial's two sides (indices into
    ``speakers``), and targets; ``problem`` says why no bootstrap over speakers is possible."""

    speakers: list[str]
    enroll_units: np.ndarray
    test_units: np.ndarray
    targets: np.ndarray
    problem: str | None = None


def infer_test_speakers(enroll, test, targets) -> list[str]:
    """Test speakers of a score file without them: a test utterance belongs to its target trial's speaker;
    one without a target trial is its own unit (``utt:<id>``).

    >>> infer_test_speakers(["a", "b", "a"], ["u1", "u1", "u2"], [True, False, False])
    ['a', 'a', 'utt:u2']
    """
    owner = {}
    for speaker, utterance, target in zip(enroll, test, targets):
        if target:
            owner.setdefault(utterance, speaker)
    return [owner.get(utterance, f"utt:{utterance}") for utterance in test]


def trial_design(enroll, test_speakers, targets) -> TrialDesign:
    """The :class:`TrialDesign` of a trial list, with the reason when a speaker bootstrap is impossible."""
    targets = np.asarray(targets, dtype=bool)
    speakers = sorted(set(enroll) | set(test_speakers))
    index = {speaker: k for k, speaker in enumerate(speakers)}
    enroll_units = np.array([index[s] for s in enroll], dtype=np.int64)
    test_units = np.array([index[s] for s in test_speakers], dtype=np.int64)
    problem = None
    target_speakers = sorted(set(np.asarray(enroll, dtype=object)[targets]))
    if targets.sum() < 2:
        problem = f"{int(targets.sum())} target trial(s): a bootstrap needs at least two"
    elif len(target_speakers) < 2:
        problem = (
            f"the target trials come from one speaker ({target_speakers[0]}): "
            "a bootstrap over speakers needs at least two"
        )
    return TrialDesign(speakers, enroll_units, test_units, targets, problem)


def _strata(designs) -> list[list[str]]:
    """Groups of speakers linked by sharing a trial list (the connected components of the lists)."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    speakers = sorted({speaker for design in designs for speaker in design.speakers})
    index = {speaker: k for k, speaker in enumerate(speakers)}
    links = [(index[design.speakers[0]], index[speaker]) for design in designs for speaker in design.speakers]
    rows, columns = zip(*links) if links else ((), ())
    graph = coo_matrix((np.ones(len(links)), (rows, columns)), shape=(len(speakers), len(speakers)))
    groups: dict[int, list[str]] = {}
    for speaker, label in zip(speakers, connected_components(graph, directed=False)[1]):
        groups.setdefault(int(label), []).append(speaker)
    return sorted(groups.values())


def speaker_counts(designs, resamples: int, seed: int) -> dict[str, np.ndarray]:
    """How often each speaker is drawn in each resample: ``speaker -> (resamples,)`` int32 counts.

    Each stratum of ``n`` speakers is drawn ``n`` times with replacement, seeded from ``seed`` and
    its speaker names, so the same lists get the same resamples in every run and for every attacker.
    """
    counts = {}
    for group in _strata(designs):
        key = zlib.crc32("\n".join(group).encode("utf-8"))
        rng = np.random.default_rng([int(seed), key])
        draws = rng.integers(0, len(group), size=(resamples, len(group)))
        offsets = np.arange(resamples)[:, None] * len(group)
        table = np.bincount((draws + offsets).ravel(), minlength=resamples * len(group))
        table = table.reshape(resamples, len(group)).astype(np.int32)
        for k, speaker in enumerate(group):
            counts[speaker] = table[:, k]
    return counts


class SpeakerWeights:
    """Trial weights of one list under the speaker resamples: ``chunk(start, stop)`` -> (c, trials) int32."""

    def __init__(self, design: TrialDesign, counts: dict[str, np.ndarray]):
        self.design = design
        self.unit_counts = np.stack([counts[s] for s in design.speakers], axis=1)  # (B, units)
        self.resamples = self.unit_counts.shape[0]

    def chunk(self, start: int, stop: int) -> np.ndarray:
        d = self.design
        block = self.unit_counts[start:stop]
        weights = block[:, d.enroll_units]
        nontarget = ~d.targets
        weights[:, nontarget] *= block[:, d.test_units[nontarget]]
        return weights


def _metric_names(p_targets) -> list[str]:
    return ["eer", *(f"min_dcf_{p:g}" for p in p_targets), *OPERATING_POINTS]


def _accept_all(frr, far):
    """The rates with a first threshold below every score (FRR 0, FAR 1), as the operating points need."""
    first = np.zeros(frr.shape[:-1] + (1,))
    return np.concatenate([first, frr], axis=-1), np.concatenate([first + 1, far], axis=-1)


def resampled_metrics(scores, targets, weights, p_targets=(0.01, 0.05)) -> dict[str, np.ndarray]:
    """EER (%), normalized minDCF and the operating points of every resample: ``name -> (resamples,)``;
    NaN where undefined.
    """
    scores = np.asarray(scores, dtype=np.float64)
    targets = np.asarray(targets, dtype=bool)
    order = np.argsort(scores, kind="stable")
    scores, targets = scores[order], targets[order]
    thresholds = np.unique(scores)  # the midpoints give the same counts as the score below them
    # Positions in the sorted target / non-target scores where each threshold's counts end.
    pos_t = np.searchsorted(scores[targets], thresholds, side="right")
    pos_n = np.searchsorted(scores[~targets], thresholds, side="right")
    n_t, n_n = int(targets.sum()), int((~targets).sum())
    names = _metric_names(p_targets)
    out = {name: np.full(weights.resamples, np.nan) for name in names}
    step = max(1, CHUNK_ELEMENTS // max(1, len(scores)))
    for start in range(0, weights.resamples, step):
        stop = min(start + step, weights.resamples)
        w = weights.chunk(start, stop)[:, order]
        cum_t = np.zeros((stop - start, n_t + 1), dtype=np.int64)
        np.cumsum(w[:, targets], axis=1, out=cum_t[:, 1:])
        cum_n = np.zeros((stop - start, n_n + 1), dtype=np.int64)
        np.cumsum(w[:, ~targets], axis=1, out=cum_n[:, 1:])
        total_t, total_n = cum_t[:, -1:].astype(np.float64), cum_n[:, -1:].astype(np.float64)
        valid = (total_t[:, 0] > 0) & (total_n[:, 0] > 0)
        with np.errstate(divide="ignore", invalid="ignore"):
            frr = cum_t[:, pos_t] / total_t
            far = (total_n - cum_n[:, pos_n]) / total_n  # the loop's arithmetic, so ties resolve alike
            best = np.argmin(np.abs(far - frr), axis=1)
            rows = np.arange(stop - start)
            eer = 50.0 * (far[rows, best] + frr[rows, best])
            out["eer"][start:stop] = np.where(valid, eer, np.nan)
            for p, name in zip(p_targets, names[1:]):
                cost = (p * frr + (1 - p) * far).min(axis=1) / min(p, 1 - p)
                out[name][start:stop] = np.where(valid, cost, np.nan)
            for name, values in rates_at_operating_points(*_accept_all(frr, far)).items():
                out[name][start:stop] = np.where(valid, values, np.nan)
    return out


def percentile_interval(samples, confidence: float = CONFIDENCE, problem: str | None = None) -> dict:
    """``{"low", "high", "resamples", "reason"}``: the percentile interval, or None bounds with the reason
    (never a zero-width interval).

    >>> interval = percentile_interval(np.arange(101.0))
    >>> round(interval["low"], 6), round(interval["high"], 6)
    (2.5, 97.5)
    >>> percentile_interval(np.ones(50))["reason"]
    'every valid resample (50 of 50) gives 1.00: too few speakers or trials for the bootstrap to show a spread'
    """
    samples = np.asarray(samples, dtype=np.float64)
    valid = samples[np.isfinite(samples)]
    result = {"low": None, "high": None, "resamples": int(valid.size), "reason": problem}
    if problem is None:
        if valid.size < 2:
            result["reason"] = f"{valid.size} valid resample(s) of {samples.size}"
        elif valid.min() == valid.max():
            result["reason"] = (
                f"every valid resample ({valid.size} of {samples.size}) gives {valid[0]:.2f}: "
                "too few speakers or trials for the bootstrap to show a spread"
            )
        else:
            tail = 100 * (1 - confidence) / 2
            low, high = np.percentile(valid, [tail, 100 - tail])
            result["low"], result["high"] = float(low), float(high)
    return result


def paired_difference(samples_a, samples_b, point_a: float, point_b: float, problem=None, alpha=0.05) -> dict:
    """``a - b`` with its interval and a two-sided bootstrap p-value (the same resamples for both).

    The centred resampled differences stand for the sampling error; ``p`` is North, Curtis and Sham's
    (2002) Monte Carlo p-value on them (docs/evaluation-reference.md). ``significant``: p < ``alpha``.

    >>> result = paired_difference(np.linspace(-3, -1, 99), np.zeros(99), -2.0, 0.0)
    >>> result["difference"], round(result["low"], 2), result["significant"]
    (-2.0, -2.95, True)
    """
    diff = np.asarray(samples_a, dtype=np.float64) - np.asarray(samples_b, dtype=np.float64)
    observed = float(point_a - point_b)
    valid = diff[np.isfinite(diff)]
    centred = valid - valid.mean() if valid.size else valid
    interval = percentile_interval(observed + centred if valid.size else diff, 1 - alpha, problem)
    result = {"difference": observed, **interval, "p_value": None, "significant": None}
    if interval["reason"] is None:
        extreme = int((np.abs(centred) >= abs(observed)).sum())
        p_value = (1 + extreme) / (1 + valid.size)
        result["p_value"], result["significant"] = p_value, bool(p_value < alpha)
    return result


def outside_note(point, interval: dict | None, digits: int = 2) -> str | None:
    """Where the point lies outside its own interval, the sentence that says so (else None).

    A maximum-type statistic can do this (the bootstrap of a sample maximum is inconsistent, Bickel
    and Freedman 1981; docs/evaluation-reference.md).

    >>> outside_note(1.73, {"low": 1.51, "high": 1.72})
    'the point 1.73 lies above its percentile interval [1.51, 1.72]: most resamples fall below it, as they can for a maximum-type statistic (docs/evaluation.md, a point outside its interval)'
    """
    if point is None or not interval or interval.get("low") is None:
        return None
    side = "above" if point > interval["high"] else "below" if point < interval["low"] else None
    if side is None:
        return None
    return (
        f"the point {point:.{digits}f} lies {side} its percentile interval {interval_text(interval, digits)}: "
        f"most resamples fall {'below' if side == 'above' else 'above'} it, as they can for a maximum-type "
        "statistic (docs/evaluation.md, a point outside its interval)"
    )


def interval_text(interval: dict, digits: int = 2) -> str:
    """``"[18.30, 34.00]"``, or ``"[CI undefined]"``.

    >>> interval_text({"low": 18.3, "high": 34.0}), interval_text({"low": None, "reason": "one speaker"})
    ('[18.30, 34.00]', '[CI undefined]')
    """
    if interval.get("low") is None:
        return "[CI undefined]"
    return f"[{interval['low']:.{digits}f}, {interval['high']:.{digits}f}]"


def format_interval(point, interval: dict | None, digits: int = 2) -> str:
    """``"26.46 [18.30, 34.00]"``, or ``"26.46 [CI undefined]"``; the point alone without an interval.

    >>> format_interval(26.456, {"low": 18.3, "high": 34.0})
    '26.46 [18.30, 34.00]'
    """
    if point is None:
        return "-"
    text = f"{point:.{digits}f}"
    return text if interval is None else f"{text} {interval_text(interval, digits)}"


def combine_seeds(per_seed, seed: int, key: str = "") -> np.ndarray:
    """Resampled mean over training seeds (seeds drawn with replacement per resample, then averaged),
    so the spread reflects both the trials and the training runs. One seed: its own values.

    >>> combine_seeds([np.zeros(4), np.ones(4)], 0).shape
    (4,)
    """
    stacked = np.stack([np.asarray(values, dtype=np.float64) for values in per_seed])
    if len(stacked) == 1:
        return stacked[0]
    rng = np.random.default_rng([int(seed), zlib.crc32(key.encode("utf-8"))])
    drawn = rng.integers(0, len(stacked), size=(stacked.shape[1], len(stacked)))
    return stacked[drawn, np.arange(stacked.shape[1])[:, None]].mean(axis=1)

"""The speaker bootstrap's reference: one resample at a time on the repeated trials (what the vectorized
:func:`segreconcat_aug.evaluation.bootstrap.resampled_metrics` must equal; tests and ``benchmarks/bench_eer.py``)."""

import numpy as np

from segreconcat_aug.evaluation.bootstrap import _accept_all, _metric_names
from segreconcat_aug.evaluation.metrics import candidate_thresholds, error_counts, rates_at_operating_points


def resampled_metrics_loop(scores, targets, weights, p_targets=(0.01, 0.05)) -> dict[str, np.ndarray]:
    """The same as :func:`resampled_metrics`, one resample at a time on the repeated trials (the reference)."""
    scores = np.asarray(scores, dtype=np.float64)
    targets = np.asarray(targets, dtype=bool)
    names = _metric_names(p_targets)
    out = {name: np.full(weights.resamples, np.nan) for name in names}
    for b in range(weights.resamples):
        w = weights.chunk(b, b + 1)[0]
        pos = np.sort(np.repeat(scores[targets], w[targets]))
        neg = np.sort(np.repeat(scores[~targets], w[~targets]))
        if len(pos) == 0 or len(neg) == 0:
            continue
        misses, false_alarms = error_counts(pos, neg, candidate_thresholds(pos, neg))
        frr, far = misses / len(pos), false_alarms / len(neg)
        best = int(np.argmin(np.abs(far - frr)))
        out["eer"][b] = 50.0 * (far[best] + frr[best])
        for p, name in zip(p_targets, names[1:]):
            out[name][b] = (p * frr + (1 - p) * far).min() / min(p, 1 - p)
        for name, value in rates_at_operating_points(*_accept_all(frr, far)).items():
            out[name][b] = value
    return out

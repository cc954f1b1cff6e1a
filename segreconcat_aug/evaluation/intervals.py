"""Speaker-bootstrap intervals of one system's table (:mod:`.bootstrap` applied to a protocol's
subsets and averages). Writes nothing.
"""

from __future__ import annotations

import numpy as np

from ..data.protocols import VPAC_TABLE, get_protocol
from .bootstrap import (
    SpeakerWeights,
    infer_test_speakers,
    percentile_interval,
    resampled_metrics,
    speaker_counts,
    trial_design,
)
from .metrics import OPERATING_POINTS
from .privacy import ListPrivacy

# The default (VPAC 2024) table; a protocol's own is protocols.get_protocol(name).table.
TABLE_COLUMNS = VPAC_TABLE.columns
SUBSET_COLUMNS = VPAC_TABLE.subsets
#: Bootstrap settings when the caller gives none (the YAML keys eval_bootstrap_resamples / _seed).
BOOTSTRAP_DEFAULTS = {"resamples": 1000, "seed": 1986}


def table_averages(values: dict, table=None) -> dict:
    """A table's columns from per-subset values (numbers or arrays of resamples): subsets and averages
    (the mean of its subsets present); ``table`` default: the paper's Table 2.

    >>> float(table_averages({"dev_f": 30.0, "dev_m": 20.0, "test_f": 10.0, "test_m": 20.0})["avg"])
    20.0
    >>> from segreconcat_aug.data.protocols import MIXED_TABLE
    >>> float(table_averages({"dev_mixed": 30.0, "test_mixed": 10.0}, MIXED_TABLE)["avg"])
    20.0
    """
    table = table or VPAC_TABLE
    row = {name: values[name] for name in table.subsets if name in values}
    for column, members in table.averages.items():
        present = [values[name] for name in members if name in values]
        if present:
            row[column] = np.mean(np.stack(present), axis=0)
    return {column: row[column] for column in table.columns if column in row}


def subset_design(subset):
    """The bootstrap's :class:`~segreconcat_aug.evaluation.bootstrap.TrialDesign` of scored trials, and where the
    test speakers came from (``"utt2spk"`` or ``"inferred from target trials"``)."""
    speakers = getattr(subset, "test_speakers", None)
    source = "utt2spk"
    if speakers is None or any(speaker is None for speaker in speakers):
        inferred = infer_test_speakers(subset.enroll, subset.test, subset.targets)
        speakers = inferred if speakers is None else [s or i for s, i in zip(speakers, inferred)]
        source = "inferred from target trials"
    return trial_design(subset.enroll, speakers, subset.targets), source


def bootstrap_samples(
    subsets: dict,
    score_sets: list[dict],
    resamples: int,
    seed: int,
    p_targets=(0.01, 0.05),
    table=None,
    privacy=None,
    privacy_metrics=None,
):
    """Resampled metrics of several attackers on the same trials, with the same speaker resamples.

    A pooled (mixed-gender) list links the speakers of both genders into one stratum. ``subsets``:
    name -> scored trials (``enroll``, ``test``, ``targets``, optional ``test_speakers``);
    ``score_sets``: per attacker, subset name -> scores in the trials' order; ``privacy``: also the
    privacy metrics (``privacy_metrics``: only these). Returns ``(designs, samples)``: subset ->
    ``(TrialDesign, test-speaker source)``; per attacker, column -> metric -> ``(resamples,)`` array.
    """
    designs = {name: subset_design(subset) for name, subset in subsets.items()}
    counts = speaker_counts([design for design, _ in designs.values()], resamples, seed)
    weights = {name: SpeakerWeights(design, counts) for name, (design, _) in designs.items()}
    # The operating points come with the EER: the privacy metrics' resampling computes only the others.
    wanted = None if privacy_metrics is None else [m for m in privacy_metrics if m not in OPERATING_POINTS]
    samples = []
    for scores in score_sets:
        per_subset = {
            name: resampled_metrics(scores[name], subsets[name].targets, weights[name], p_targets)
            for name in subsets
        }
        averaged = ["eer", *OPERATING_POINTS]
        if privacy is not None and wanted != []:
            for name in subsets:
                found = ListPrivacy(subsets[name], designs[name][0], privacy, scores=scores[name]).resampled(
                    weights[name], wanted
                )
                per_subset[name].update(found)
            averaged += list(found)
        for metric in averaged:
            for column, values in table_averages({n: per_subset[n][metric] for n in subsets}, table).items():
                if column not in subsets:
                    per_subset.setdefault(column, {})[metric] = values
        samples.append(per_subset)
    return designs, samples


def column_problem(designs: dict, column: str, table=None) -> str | None:
    """Why a subset or an average has no interval (the first of its subsets' problems), or None.

    >>> from segreconcat_aug.evaluation.bootstrap import trial_design
    >>> bad = trial_design(["a", "a"], ["a", "b"], [True, False])
    >>> column_problem({"dev_f": (bad, ""), "test_f": (bad, "")}, "dev_avg")
    'dev_f: 1 target trial(s): a bootstrap needs at least two'
    """
    return _first_problem({name: design.problem for name, (design, _) in designs.items()}, column, table)


def metric_problem(metrics: dict, column: str, metric: str, table=None) -> str | None:
    """Why ``metric`` has no value in a subset or average column (its ``undefined_because``), or None.

    >>> metric_problem({"dev_f": {"undefined_because": {"linkability": "15 targets"}}}, "dev_avg", "linkability")
    'dev_f: 15 targets'
    """
    reasons = {name: (values.get("undefined_because") or {}).get(metric) for name, values in metrics.items()}
    return _first_problem(reasons, column, table)


def _first_problem(problems: dict, column: str, table=None) -> str | None:
    """A subset's own problem; for an average, the first of its subsets' problems, named."""
    if column in problems:
        return problems[column]
    members = (table or VPAC_TABLE).averages.get(column, ())
    return next((f"{name}: {why}" for name, why in problems.items() if name in members and why), None)


def privacy_table(metrics: dict, metric: str, table=None) -> dict:
    """The table's columns of a privacy metric from per-subset values (``metrics``: subset -> values);
    an average is left out when one of its subsets has no value. ``table`` as :func:`table_averages`.

    >>> privacy_table({"dev_f": {"min_cllr": 0.5}, "dev_m": {"min_cllr": 0.7}, "test_f": {"min_cllr": None}}, "min_cllr")
    {'dev_f': 0.5, 'dev_m': 0.7, 'dev_avg': 0.6}
    """
    table = table or VPAC_TABLE
    defined = {name: values[metric] for name, values in metrics.items() if values.get(metric) is not None}
    missing = {name for name in metrics if name not in defined}
    row = {column: float(value) for column, value in table_averages(defined, table).items()}
    return {
        column: value
        for column, value in row.items()
        if column in defined or not missing.intersection(table.averages.get(column, ()))
    }


def system_intervals(results, resamples: int, seed: int, p_targets=(0.01, 0.05), privacy=None) -> dict:
    """Intervals of every subset metric and every table average of one system (with ``privacy``, also
    the privacy metrics): column -> metric -> interval."""
    table = get_protocol(getattr(results, "protocol", None)).table
    designs, (samples,) = bootstrap_samples(
        results.subsets,
        [{n: s.scores for n, s in results.subsets.items()}],
        resamples,
        seed,
        p_targets,
        table,
        privacy=privacy,
    )
    intervals = {}
    for column, metrics in samples.items():
        problem = column_problem(designs, column, table)
        intervals[column] = {
            metric: percentile_interval(
                values, problem=problem or metric_problem(results.metrics, column, metric, table)
            )
            for metric, values in metrics.items()
        }
    sources = sorted({source for _, source in designs.values()})
    return {"intervals": intervals, "test_speakers": ", ".join(sources)}

"""Comparing attackers across runs (the grid): seeds combined, intervals and paired differences from
the same speaker resamples. :mod:`.tables` lays these out. Writes nothing.
"""

from __future__ import annotations

import numpy as np

from ..data.protocols import VPAC_TABLE
from .bootstrap import combine_seeds, paired_difference, percentile_interval
from .intervals import TABLE_COLUMNS, bootstrap_samples, column_problem, metric_problem, privacy_table


def _same_trials(a, b) -> bool:
    return a.enroll == b.enroll and a.test == b.test and np.array_equal(a.targets, b.targets)


def seed_mean_std(tables: list[dict], columns=TABLE_COLUMNS) -> tuple[dict, dict | None]:
    """Mean across seeds of each of ``columns`` every table has, and the standard deviation (several seeds).

    >>> seed_mean_std([{"avg": 20.0}, {"avg": 30.0}])
    ({'avg': 25.0}, {'avg': 7.0710678118654755})
    """
    mean = {c: float(np.mean([t[c] for t in tables])) for c in columns if all(c in t for t in tables)}
    std = {c: float(np.std([t[c] for t in tables], ddof=1)) for c in mean} if len(tables) > 1 else None
    return mean, std


def column_speakers(designs: dict, column: str, table=None) -> int:
    """How many speakers the bootstrap resamples for ``column`` (a list, or an average over lists).

    >>> from segreconcat_aug.evaluation.bootstrap import trial_design
    >>> f = trial_design(["a", "b"], ["a", "b"], [True, False])
    >>> m = trial_design(["c", "d"], ["d", "c"], [False, True])
    >>> column_speakers({"dev_f": (f, ""), "dev_m": (m, "")}, "dev_avg")
    4
    """
    members = [column] if column in designs else (table or VPAC_TABLE).averages.get(column, ())
    return len({s for name in members if name in designs for s in designs[name][0].speakers})


def compare_runs(
    runs: dict,
    baseline: str,
    resamples: int,
    seed: int,
    key: str = "",
    table=None,
    privacy=None,
    privacy_metrics=(),
) -> dict:
    """Intervals per configuration (seeds combined) and each configuration's paired difference to the baseline.

    ``runs``: configuration -> runs (one per seed), each ``{"seed", "table", "scores": {subset:
    ScoreFile}}`` on the same trial lists, with ``privacy_metrics`` also ``"metrics"`` (subset -> point
    values); ``key`` names the comparison in the seeds' generator; ``table``: the protocol's columns.

    Returns configuration -> ``{"table": mean row, "std": std across seeds (None for one seed),
    "intervals", "seeds": [{"seed", "table", "intervals"}], "difference": column -> paired result
    (not for the baseline)}`` for the EER, and under ``"privacy"`` the same per privacy metric.
    """
    reference = next(iter(runs.get(baseline) or next(iter(runs.values()))))["scores"]
    mismatched = sorted(
        f"{config} (seed {run['seed']})"
        for config, config_runs in runs.items()
        for run in config_runs
        if set(run["scores"]) != set(reference)
        or not all(_same_trials(run["scores"][name], reference[name]) for name in reference)
    )
    flat = [(config, run) for config, config_runs in runs.items() for run in config_runs]
    usable = [(config, run) for config, run in flat if f"{config} (seed {run['seed']})" not in mismatched]
    table = table or VPAC_TABLE
    privacy_metrics = list(privacy_metrics or ())
    designs, samples = bootstrap_samples(
        reference,
        [{n: run["scores"][n].scores for n in reference} for _, run in usable],
        resamples,
        seed,
        table=table,
        privacy=privacy if privacy_metrics else None,
        privacy_metrics=privacy_metrics or None,
    )
    by_run = {id(run): sample for (_, run), sample in zip(usable, samples)}
    summary = _metric_summaries(
        runs, baseline, by_run, designs, "eer", lambda run: run["table"], resamples, seed, key, table
    )
    for metric in privacy_metrics:
        found = _metric_summaries(
            runs,
            baseline,
            by_run,
            designs,
            metric,
            lambda run, metric=metric: privacy_table(run.get("metrics") or {}, metric, table),
            resamples,
            seed,
            f"{key}/{metric}",
            table,
            lambda run, column, metric=metric: metric_problem(
                run.get("metrics") or {}, column, metric, table
            ),
        )
        for config, values in found.items():
            summary[config].setdefault("privacy", {})[metric] = values
    return summary


def _metric_summaries(
    runs, baseline, by_run, designs, metric, table_of, resamples, seed, key, table, point_problem=None
) -> dict:
    """:func:`compare_runs` for one metric: ``table_of(run)`` gives a run's point row in ``table``'s columns."""
    flat = [run for config_runs in runs.values() for run in config_runs]
    columns = [c for c in table.columns if any(c in table_of(run) for run in flat)]
    combined, summary = {}, {}
    for config, config_runs in runs.items():
        mean, std = seed_mean_std([table_of(run) for run in config_runs], columns)
        problem = None
        if any(id(run) not in by_run for run in config_runs):
            problem = "its trial lists differ from the baseline's: no paired bootstrap"

        def why(column, run=config_runs[0], problem=problem):
            return (
                problem
                or column_problem(designs, column, table)
                or (point_problem(run, column) if point_problem else None)
            )

        seeds = []
        for run in config_runs:
            sample = by_run.get(id(run), {})
            seeds.append(
                {
                    "seed": run["seed"],
                    "table": table_of(run),
                    "intervals": {
                        c: percentile_interval(
                            sample[c][metric] if metric in sample.get(c, {}) else [], problem=why(c, run)
                        )
                        for c in mean
                    },
                }
            )
        combined[config] = {
            c: combine_seeds([by_run[id(run)][c][metric] for run in config_runs], seed, f"{key}/{config}/{c}")
            if problem is None
            else np.full(resamples, np.nan)
            for c in mean
        }
        summary[config] = {
            "table": mean,
            "std": std,
            "intervals": {c: percentile_interval(combined[config][c], problem=why(c)) for c in mean},
            "seeds": seeds,
            "problem": problem,
        }
        if point_problem is not None:  # why a column has no value (e.g. linkability below 20 targets)
            undefined = {c: point_problem(config_runs[0], c) for c in table.columns if c not in mean}
            summary[config]["undefined"] = {c: reason for c, reason in undefined.items() if reason}
    for config, values in summary.items():
        if config == baseline or baseline not in summary:
            continue
        # What the interval resamples, so that a verdict can say what it covers.
        seeds = min(len(runs[config]), len(runs[baseline]))
        values["difference"] = {
            c: {
                **paired_difference(
                    combined[config][c],
                    combined[baseline][c],
                    values["table"][c],
                    summary[baseline]["table"][c],
                    problem=values["problem"]
                    or summary[baseline]["problem"]
                    or column_problem(designs, c, table),
                ),
                "speakers": column_speakers(designs, c, table),
                "seeds": seeds,
            }
            for c in values["table"]
            if c in summary[baseline]["table"]
        }
    return summary

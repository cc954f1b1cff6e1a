"""The grid's results: every run's evaluation read back, compared, and laid out as the paper's tables
(:func:`assemble`; each file it writes: docs/evaluation.md).
"""

from __future__ import annotations

import csv
import json
import logging
from pathlib import Path

import numpy as np

from ..data.convergence import FLAGS as FLAG_NAMES
from ..data.protocols import get_protocol
from ..data.result_files import atomic_writer, file_digest, json_text, write_text
from ..evaluation.bootstrap import format_interval
from ..evaluation.comparison import compare_runs, seed_mean_std
from ..evaluation.figures import plot_det_panels, plot_forest, plot_privacy, privacy_panel
from ..evaluation.intervals import privacy_table
from ..evaluation.metrics import det_curve, operating_points
from ..evaluation.privacy import saved_options
from ..evaluation.references import load_reference_results
from ..evaluation.rescore import rescore_folder
from ..evaluation.score_files import ScoreFileError, read_score_file
from ..evaluation.system import EVAL_SUBFOLDER
from ..evaluation.system_report import blank, bootstrap_note, markdown_table, read_results
from ..evaluation.tables import (
    ablation_table,
    comparison_table,
    convergence_notes,
    interval_notes,
    language_table,
)
from .learning_curve import bootstrap_settings, curve_configurations, curve_enabled, write_learning_curves
from .plan import cell_folder, grid_ablation, grid_languages, grid_runs, grid_units

logger = logging.getLogger(__name__)


def cell_scores(folder: Path, results: dict, rescore: bool = False) -> tuple[dict, bool]:
    """``(subset -> ScoreFile, changed)``: a finished cell's score files, each checked against its
    results.json (present, readable, finite, the digest it recorded); ``changed``: some differ from
    their digest, and ``rescore`` asked for the cell to be rescored rather than refused. A file that
    fails a check is a :class:`ScoreFileError` naming it and the fix."""
    again = f"delete {folder} and rerun the grid to evaluate the cell again"
    scores, changed = {}, False
    digests = results.get("score_digests") or {}  # none: written before digests were recorded
    for name, relative in results.get("scores", {}).items():
        path = folder / relative
        if not path.is_file():
            raise ScoreFileError(f"{path}: missing, but {folder / 'results.json'} lists it: {again}")
        try:
            found = read_score_file(path)
        except ScoreFileError as error:
            raise ScoreFileError(f"{error}: a score file of a finished cell; {again}") from None
        if not len(found.targets):
            raise ScoreFileError(f"{path}: empty, a score file of a finished cell; {again}")
        if name in digests and file_digest(path) != digests[name]:
            if not rescore:
                raise ScoreFileError(
                    f"{path}: changed since {folder / 'results.json'} was computed from it, so the tables would "
                    "mix its intervals with the old point values: rescore the cell from its score files "
                    f"(--rescore_changed_scores=True, or rescore_folder; docs/evaluation.md), or {again}"
                )
            changed = True
        scores[name] = found
    return scores, changed


def collect(grid) -> dict[tuple[str, str], list[dict]]:
    """``(system, configuration) -> runs``: per evaluated seed ``{"seed", "folder", "table", "results", "scores"}``,
    the score files checked by :func:`cell_scores` (changed ones rescored with ``rescore_changed_scores``)."""
    rescore = bool(grid.get("rescore_changed_scores"))
    found: dict[tuple[str, str], list[dict]] = {}
    for system, config, seed in grid_runs(grid):
        folder = cell_folder(grid, system, config, seed) / EVAL_SUBFOLDER
        if (folder / "results.json").is_file():
            results = read_results(folder)
            scores, changed = cell_scores(folder, results, rescore)
            if changed:
                logger.warning(
                    "%s: score files changed since its results.json: rescoring it from them", folder
                )
                rescore_folder(folder)
                results = read_results(folder)
            run = {
                "seed": seed,
                "folder": folder,
                "table": results["table"],
                "results": results,
                "scores": scores,
                "metrics": results.get("subsets", {}),
            }
            found.setdefault((system, config), []).append(run)
    return found


def analyse(grid, results: dict) -> dict[tuple[str, str], dict]:
    """:func:`segreconcat_aug.evaluation.comparison.compare_runs` per system: intervals, seeds, paired differences."""
    resamples, seed = bootstrap_settings(grid).values()
    baseline = grid["comparison"]["baseline"]
    table = get_protocol(grid.get("protocol")).table
    privacy_columns = list(grid.get("privacy_columns") or [])
    cells = {}
    for system in dict.fromkeys(system for system, _ in results):
        runs = {config: found for (cell_system, config), found in results.items() if cell_system == system}
        if resamples:
            # The privacy metrics' settings its evaluations recorded (privacy_options in results.json).
            saved = [run["results"].get("privacy_options") for found in runs.values() for run in found]
            options = saved_options(next(filter(None, saved), None))
            for config, summary in compare_runs(
                runs,
                baseline,
                resamples,
                seed,
                key=system,
                table=table,
                privacy=options,
                privacy_metrics=privacy_columns,
            ).items():
                cells[(system, config)] = summary
        else:  # no intervals: each seed's row and the mean ± std across seeds
            for config, config_runs in runs.items():
                cells[(system, config)] = _plain_cell(
                    [run["table"] for run in config_runs], config_runs, table.columns
                )
                for metric in privacy_columns:
                    tables = [privacy_table(run["metrics"], metric, table) for run in config_runs]
                    cells[(system, config)].setdefault("privacy", {})[metric] = _plain_cell(
                        tables, config_runs, table.columns
                    )
    return cells


def _plain_cell(tables: list[dict], runs: list[dict], columns) -> dict:
    """A cell without intervals: the mean ± std across seeds of ``tables`` (one per run) in ``columns``."""
    mean, std = seed_mean_std(tables, columns)
    return {
        "table": mean,
        "std": std,
        "intervals": {},
        "seeds": [{"seed": run["seed"], "table": table, "intervals": {}} for run, table in zip(runs, tables)],
    }


def assemble(grid) -> dict[str, Path]:
    """Write the tables, the per-system DET and forest figures and ``grid_results.csv/.json``."""
    out = Path(grid["output_folder"])
    out.mkdir(parents=True, exist_ok=True)
    results = collect(grid)
    cells = analyse(grid, results)
    for key, runs in results.items():  # a flagged cell's attackers' flags: {"seed", "name", "text"}
        flags = [
            {"seed": run["seed"], **flag}
            for run in runs
            for flag in (run["results"].get("convergence") or {}).get("flags") or []
        ]
        if flags:
            cells[key]["flags"] = flags
    configs = grid["configurations"]
    protocol = get_protocol(grid.get("protocol"))
    columns = protocol.table.columns
    references = load_reference_results() if grid.get("show_published", True) else None
    settings = bootstrap_settings(grid)
    written = {}

    comparison = grid["comparison"]
    table2_rows = [comparison["baseline"], *comparison.get("compared", [])]
    labels = {name: spec.get("label", name) for name, spec in configs.items()}
    privacy_columns = list(grid.get("privacy_columns") or [])
    table2 = comparison_table(
        cells,
        grid_units(grid),
        comparison["baseline"],
        comparison.get("compared", []),
        labels,
        references,
        protocol=protocol.name,
        privacy_columns=privacy_columns,
    )
    # The curves' points have their own file (learning_curve.md): Table 2's notes are of its own cells.
    curve_points = set(curve_configurations(grid)) if curve_enabled(grid) else set()
    table_cells = {key: cell for key, cell in cells.items() if key[1] not in curve_points}
    notes = interval_notes(table_cells)
    note = (
        (
            "\n\nOurs: EER (%) of this grid's runs with 95 % intervals [low, high]; diff avg = configuration - "
            "baseline, with the interval and two-sided p-value of the paired speaker bootstrap (the same "
            "resamples for both; with several seeds, seeds are resampled too). With one seed the interval "
            "covers the test speakers of one training run per attacker, not the training's randomness: "
            "another seed or machine can move it. " + bootstrap_note(settings)
            if settings["resamples"]
            else "\n\nOurs: EER (%) of this grid's runs; diff avg = configuration - baseline. "
            "No intervals (bootstrap_resamples: 0)."
        )
        + " With several seeds: a row per seed, then mean ± std across seeds."
        + (
            " Privacy columns (privacy_columns): each metric's average over the subsets with its interval and "
            "the paired difference to the baseline (p), from the same resamples; docs/evaluation.md says what "
            "each measures."
            if privacy_columns
            else ""
        )
        + "\n"
        + ("\n".join(notes) + "\n" if notes else "")
    )
    flag_notes = convergence_notes({k: c for k, c in table_cells.items() if k[1] in table2_rows}, labels)
    if flag_notes:
        note += "\n" + "\n".join(flag_notes) + "\n"
    if references is not None and protocol.name == "vpac2024":
        note += (
            "\nPublished columns: the paper's Table 2 (the row with the same attacker name; the paper reports one "
            "SegReConcat variant per system) and the VPAC 2024 baseline attacker "
            "(segreconcat_aug/evaluation/reference_results.csv names the sources).\n"
        )
    elif references is not None and protocol.published:
        note += (
            "\nPublished column: the VPC 2026 challenge's own attacker (ASV_eval^anon: WavLM-Large + ECAPA, "
            "fine-tuned on the anonymized training data), not this project's; its numbers are the challenge's "
            "results files (segreconcat_aug/evaluation/reference_results.csv names them).\n"
        )
    written["table2"] = out / "table2_comparison.md"
    written["table2"].write_text(
        f"# Baseline vs. SegReConcat (Table 2 layout; protocol {protocol.name})\n\n" + table2 + note,
        encoding="utf-8",
    )
    languages = grid_languages(grid)
    if languages:
        table = language_table(cells, grid["systems"], table2_rows, languages, labels)
        written["languages"] = out / "table_languages.md"
        written["languages"].write_text(
            f"# VPC 2026 Track 2: one attacker per language (protocol {protocol.name})\n\n{table}\n\n"
            "Each language's EERs (%) with its own 95 % interval; the average row is the plain mean over "
            "the scored languages that have results (no interval). cn and ja are not scored by the challenge "
            "and stay outside the average.\n",
            encoding="utf-8",
        )

    ablation = grid_ablation(grid)
    if ablation:
        table1_labels = {name: spec.get("table1", spec.get("label", name)) for name, spec in configs.items()}
        table1 = ablation_table(
            cells,
            ablation["system"],
            ablation["configurations"],
            table1_labels,
            references if protocol.name == "vpac2024" else None,
            privacy_columns=privacy_columns,
        )
        written["table1"] = out / "table1_ablation.md"
        table1_flags = convergence_notes(
            {
                key: cell
                for key, cell in table_cells.items()
                if key[0] == ablation["system"] and key[1] in ablation["configurations"]
            },
            table1_labels,
        )
        written["table1"].write_text(
            f"# Ablation on {ablation['system']} (Table 1 layout)\n\n{table1}\n"
            + ("\n" + "\n".join(table1_flags) + "\n" if table1_flags else ""),
            encoding="utf-8",
        )

    pairs = versus_pairs(grid, {key: runs for key, runs in results.items() if key[1] not in curve_points})
    if pairs:
        written["pairs"] = out / "table_pairs.md"
        written["pairs"].write_text(
            "# Paired differences of each row's own pairing (versus)\n\n"
            + pairs_table(pairs, labels)
            + "\n\ndiff = attacker - versus, average EER (%), paired speaker bootstrap on the same trials. "
            + bootstrap_note(settings)
            + "\n",
            encoding="utf-8",
        )
        for pair in pairs:
            cells[(pair["system"], pair["config"])]["versus"] = {
                "configuration": pair["versus"],
                **pair["difference"],
            }
    written.update(write_grid_results(out, cells, columns, privacy_columns))
    if curve_enabled(grid):
        written.update(write_learning_curves(grid, results, grid_units(grid), bootstrap_note(settings)))

    for system in dict.fromkeys(system for system, _ in results):
        panels, forest = {}, []
        for subset in protocol.subsets:
            curves = {}
            for (cell_system, config), runs in results.items():
                if cell_system != system or config in curve_points:  # the curves have their own figure
                    continue
                for run in runs:
                    scores = run["scores"].get(subset)
                    if scores is not None:
                        name = labels.get(config, config) + (f" seed {run['seed']}" if len(runs) > 1 else "")
                        curves[name] = det_curve(
                            scores.scores[scores.targets], scores.scores[~scores.targets]
                        )
            if curves:
                panels[subset.replace("_", " ")] = curves
        for (cell_system, config), cell in table_cells.items():
            if cell_system == system and cell["intervals"]:
                for column in [c for c in columns if c in cell["table"]]:
                    interval = cell["intervals"][column]
                    forest.append(
                        (
                            f"{labels.get(config, config)}: {column}",
                            cell["table"][column],
                            interval["low"],
                            interval["high"],
                        )
                    )
        if panels:
            written[f"det_{system}"] = plot_det_panels(
                panels, out / f"det_{system}.png", title=f"{system}: DET"
            )
        if forest:
            written[f"forest_{system}"] = plot_forest(
                forest, out / f"forest_{system}.png", title=f"{system}: EER (%) with 95 % CI"
            )
        privacy_runs = grid_privacy_panels(results, system, table2_rows, labels)
        if privacy_runs:
            written[f"privacy_{system}"] = plot_privacy(
                privacy_runs,
                out / f"privacy_{system}.png",
                title=f"{system}: risk per speaker and linkability",
            )
    return written


def grid_privacy_panels(results: dict, system: str, configs, labels: dict) -> dict:
    """What ``privacy_<system>.png`` draws for Table 2's configurations (their first seed): per-speaker
    EERs and linkability from each run's results.json, score densities from its score files."""
    runs = {}
    for config in configs:
        found = results.get((system, config)) or []
        if not found or "per_speaker_eer" not in next(iter(found[0]["metrics"].values()), {}):
            continue
        run, panels = found[0], {}
        for name, values in run["metrics"].items():
            if name in run["scores"]:
                scores = run["scores"][name]
                panels[name] = privacy_panel(
                    values, scores.scores[scores.targets], scores.scores[~scores.targets]
                )
        runs[labels.get(config, config)] = panels
    return runs


def versus_pairs(grid, results: dict) -> list[dict]:
    """Each configuration with ``versus: <configuration>`` paired with that one on every unit both ran.

    ``versus`` adds a second, row-specific pairing to the grid's baseline comparison, e.g. an attacker
    with SegReConcat against the same attacker without it (hparams/attackers.yaml). Each pair:
    ``{"system", "config", "versus", "difference"}`` for the average EER.
    """
    resamples, seed = bootstrap_settings(grid).values()
    table = get_protocol(grid.get("protocol")).table
    pairs = []
    for system, config in results:
        versus = (grid["configurations"].get(config) or {}).get("versus")
        if not versus or (system, versus) not in results or not resamples:
            continue
        both = {name: results[(system, name)] for name in (versus, config)}
        summary = compare_runs(both, versus, resamples, seed, key=f"{system}:{config}:{versus}", table=table)
        pairs.append(
            {
                "system": system,
                "config": config,
                "versus": versus,
                "difference": summary[config]["difference"]["avg"],
            }
        )
    return pairs


def pairs_table(pairs: list[dict], labels: dict) -> str:
    """The ``versus`` pairs as a Markdown table: difference of the average EER, its interval and p.

    >>> print(pairs_table([{"system": "B4", "config": "c", "versus": "n", "difference": {"difference": -1.5,
    ...     "low": -3.0, "high": -0.2, "p_value": 0.03, "significant": True}}], {"c": "C", "n": "N"}))
    | system | attacker | versus | diff avg EER [95 % CI] | p | significant |
    |---|---|---|---|---|---|
    | B4 | C | N | -1.50 [-3.00, -0.20] | 0.03 | yes |
    """
    rows = []
    for pair in pairs:
        d = pair["difference"]
        if d.get("low") is None:
            cell, p_value, significant = f"{d['difference']:+.2f} (no interval)", "-", "-"
        else:
            cell = f"{d['difference']:.2f} [{d['low']:.2f}, {d['high']:.2f}]"
            p_value, significant = f"{d['p_value']:.2g}", "yes" if d["significant"] else "no"
        names = [labels.get(pair[key], pair[key]) for key in ("config", "versus")]
        rows.append([pair["system"], *names, cell, p_value, significant])
    headers = ["system", "attacker", "versus", "diff avg EER [95 % CI]", "p", "significant"]
    return markdown_table(headers, rows)


def write_grid_results(out: Path, cells: dict, columns, privacy_columns=()) -> dict[str, Path]:
    """``grid_results.csv`` (a row per seed and per configuration mean) and ``grid_results.json``
    (everything); each of ``privacy_columns`` adds its average, interval and paired difference."""
    header = ["system", "configuration", "seed", *columns, "avg_ci_low", "avg_ci_high", "avg_std"]
    header += ["diff_avg", "diff_avg_ci_low", "diff_avg_ci_high", "diff_avg_p", "diff_avg_significant"]
    for metric in privacy_columns:
        header += [f"{metric}_avg", f"{metric}_avg_ci_low", f"{metric}_avg_ci_high"]
        header += [f"diff_{metric}_avg", f"diff_{metric}_avg_p"]
    header += ["convergence_flags"]

    def rows_of(cell):
        rows = [(run["seed"], run["table"], run["intervals"], None, {}) for run in cell["seeds"]]
        if len(rows) != 1:
            return rows + [
                ("mean", cell["table"], cell["intervals"], cell.get("std"), cell.get("difference") or {})
            ]
        return [(rows[0][0], cell["table"], cell["intervals"], None, cell.get("difference") or {})]

    with atomic_writer(out / "grid_results.csv", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        for (system, config), cell in cells.items():
            privacy_rows = [
                rows_of(
                    ((cell.get("privacy") or {}).get(m))
                    or {"seeds": cell["seeds"], "table": {}, "intervals": {}}
                )
                for m in privacy_columns
            ]
            for (seed, table, intervals, std, difference), *privacy in zip(rows_of(cell), *privacy_rows):
                avg = intervals.get("avg") or {}
                diff = difference.get("avg") or {}
                extra = []
                for _, p_table, p_intervals, _, p_difference in privacy:
                    p_avg, p_diff = p_intervals.get("avg") or {}, p_difference.get("avg") or {}
                    extra += [blank(p_table.get("avg")), blank(p_avg.get("low")), blank(p_avg.get("high"))]
                    extra += [blank(p_diff.get("difference")), blank(p_diff.get("p_value"))]
                flags = [f["name"] for f in cell.get("flags") or [] if seed == "mean" or f["seed"] == seed]
                writer.writerow(
                    [system, config, "" if seed is None else seed, *(table.get(c, "") for c in columns)]
                    + [blank(avg.get("low")), blank(avg.get("high")), blank((std or {}).get("avg"))]
                    + [blank(diff.get(k)) for k in ("difference", "low", "high", "p_value", "significant")]
                    + extra
                    + [";".join(dict.fromkeys(flags))]
                )
    payload = {f"{system}/{config}": cell for (system, config), cell in cells.items()}
    write_text(out / "grid_results.json", json_text(payload, indent=2))  # null for NaN: valid JSON
    return {"csv": out / "grid_results.csv", "json": out / "grid_results.json"}


def verdict_lines(grid) -> list[str]:
    """``run_demo.py``'s lines from ``grid_results.json``: each compared run against the baseline, each
    attacker's TPR at FPR = 1 %, each ``versus`` pair, each attacker's convergence flags, then the
    learning curves' verdicts (``learning_curve.json``)."""
    out = Path(grid["output_folder"])
    saved = json.loads((out / "grid_results.json").read_text(encoding="utf-8"))
    labels = {name: spec.get("label", name) for name, spec in grid["configurations"].items()}
    baseline = grid["comparison"]["baseline"]
    compared = grid["comparison"].get("compared", [])
    lines = [
        verdict(saved[f"{system}/{config}"]["difference"]["avg"], labels[config], labels[baseline])
        if f"{system}/{config}" in saved and f"{system}/{baseline}" in saved
        else f"{labels[config]} vs {labels[baseline]} ({system}): not evaluated"
        for system in grid["systems"]
        for config in compared
    ]
    rows = [(system, config) for system in grid["systems"] for config in [baseline, *compared]]
    # Every run's score files, read once, for the cells without an operating point of their own.
    runs = None
    for system, config in rows:
        cell = (saved.get(f"{system}/{config}") or {}).get("privacy", {}).get("tpr_at_fpr_1") or {}
        if runs is None and cell.get("table", {}).get("avg") is None:
            runs = collect(grid)
        lines.append(tpr_line(cell, runs, system, config, labels[config]))
    lines += [
        verdict(cell["versus"], labels[key.split("/", 1)[1]], labels[cell["versus"]["configuration"]])
        for key, cell in saved.items()
        if cell.get("versus")
    ]
    lines += [
        flags_verdict(saved[f"{system}/{config}"].get("flags") or [], labels[config])
        for system, config in rows
        if f"{system}/{config}" in saved
    ]
    if (out / "learning_curve.json").is_file():
        curves = json.loads((out / "learning_curve.json").read_text(encoding="utf-8"))
        lines += [
            curve["verdict"] for rows in curves.values() for axes in rows.values() for curve in axes.values()
        ]
    return lines


def tpr_line(cell: dict, runs: dict | None, system: str, config: str, label: str) -> str:
    """TPR at FPR = 1 % of a run: the lists' average with its interval (``cell``, from grid_results.json),
    or, where each list has fewer than 100 non-targets (the demo's 80), on the lists of each of its
    runs (``runs``, :func:`collect`) pooled, named as such (mean over seeds)."""
    head = f"{label} ({system}): TPR at FPR = 1 %:"
    if cell.get("table", {}).get("avg") is not None:
        return f"{head} {format_interval(cell['table']['avg'], cell['intervals'].get('avg'), 1)} % (the lists' average)"
    pooled = []
    for run in runs.get((system, config), []):
        targets = np.concatenate([found.targets for found in run["scores"].values()])
        scores = np.concatenate([found.scores for found in run["scores"].values()])
        pooled.append(operating_points(scores[targets], scores[~targets]))
    if not pooled or pooled[0]["tpr_at_fpr_1"] is None:
        return f"{head} undefined (too few non-targets, even with the lists pooled)"
    value = np.mean([found["tpr_at_fpr_1"] for found in pooled])
    return (
        f"{head} {value:.1f} % on its {len(run['scores'])} lists pooled ({int((~targets).sum())} "
        "non-targets; each list alone has fewer than 100: results.md)"
    )


def flags_verdict(flags: list[dict], label: str) -> str:
    """A run's convergence flags in a line (:mod:`segreconcat_aug.data.convergence`), or that it has none.

    >>> flags_verdict([], "SegReConcat")
    "SegReConcat's attacker: no convergence flag"
    """
    if not flags:
        return f"{label}'s attacker: no convergence flag"
    names = ", ".join(dict.fromkeys(FLAG_NAMES.get(flag["name"], flag["name"]) for flag in flags))
    return (
        f"{label}'s attacker: {names}: its EER may overstate privacy (docs/evaluation.md#convergence-flags)"
    )


def verdict(difference: dict, label: str, baseline_label: str) -> str:
    """A plain sentence for a paired difference of average EERs, and what its interval covers."""
    head = f"{label} vs {baseline_label}: {difference['difference']:+.1f} EER points"
    if difference.get("low") is None:
        return f"{head}; no interval ({difference.get('reason')})"
    interval = (
        f"95 % CI [{difference['low']:.1f}, {difference['high']:.1f}] (p = {difference['p_value']:.2g})"
    )
    if difference["significant"]:
        direction = "lower" if difference["difference"] < 0 else "higher"
        line = f"{head}, {interval}: significant at 5 % ({label}'s EER is {direction})"
    else:
        line = f"{head}, {interval}: not significant on this small corpus"
    # What the paired interval resamples, where known.
    speakers, seeds = difference.get("speakers"), difference.get("seeds")
    if not speakers or not seeds:
        return line
    if seeds == 1:
        return line + (
            f"; the interval covers the {speakers} test speakers of one training run per attacker: "
            "another seed or machine can move it"
        )
    return line + (
        f"; the interval covers the {speakers} test speakers and the {seeds} training seeds per attacker, "
        "both resampled"
    )

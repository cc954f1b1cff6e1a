#!/usr/bin/env python3
"""Train and evaluate a grid of attackers (systems x configurations) and assemble the paper's tables.

Usage::

    python recipes/run_grid.py hparams/grid.yaml --data_folder=<VPAC root>
    python recipes/run_grid.py hparams/grid.yaml --data_folder=<VPAC root> --systems=[T8-5,B4]
    python recipes/run_grid.py hparams/grid.yaml --data_folder=<VPAC root> --tables_only=True

Each cell (system, configuration) runs ``train_command`` then ``eval_command``
(templates in the grid YAML, so torchrun or a cluster wrapper can be used) with
``--output_folder=<output_folder>/<system>/<configuration>``. Finished steps are
recorded in the cell's ``grid_status.json``: a rerun skips evaluated cells and
does not retrain trained ones (resumable). Subprocess output goes to
``grid_train.log`` / ``grid_eval.log`` in the cell folder.

``protocol`` (default ``vpac2024``) is passed to both commands and decides the tables' columns;
under ``vpc2026-track2`` every system is run once per language of ``languages`` (default: the four
the challenge scores), one attacker each, in ``<system>/<language>/<configuration>``, and
``table_languages.md`` puts the languages side by side.

``seeds: [a, b, ...]`` (in the grid, or per configuration) trains each cell once
per seed, in ``<system>/<configuration>/seed<N>`` with ``--seed=N``; ``seeds: null``
is one run per cell with the training YAML's seed, in ``<system>/<configuration>``.

Then: ``table2_comparison.md`` (baseline vs. each compared configuration per
system: EERs with 95 % intervals from a speaker bootstrap, each seed's row and the
mean ± std across seeds, and the paired difference to the baseline with its interval,
p-value and significance at 5 %), ``table1_ablation.md`` (one system),
``det_<system>.png`` (a DET panel per subset, a line per configuration),
``forest_<system>.png`` (EER and interval per configuration and subset),
``privacy_<system>.png`` (EER of every speaker and linkability per Table 2 configuration),
``grid_results.csv`` and ``grid_results.json``; published numbers appear in separate,
labelled columns. ``privacy_columns: [linkability, min_cllr]`` adds those privacy metrics
(their average over the subsets, interval and paired difference) to both tables. The method:
docs/evaluation.md.
"""

from __future__ import annotations

import csv
import json
import logging
import shlex
import subprocess
import sys
from pathlib import Path

from hyperpyyaml import load_hyperpyyaml
from tqdm import tqdm

from segreconcat_aug.cli import PROGRESS_PREFIX, REPO, checkout_path, parse_recipe_arguments, run_main
from segreconcat_aug.data.protocols import get_protocol
from segreconcat_aug.evaluation.comparison import compare_runs, seed_mean_std
from segreconcat_aug.evaluation.figures import plot_det_panels, plot_forest, plot_privacy, privacy_panel
from segreconcat_aug.evaluation.intervals import BOOTSTRAP_DEFAULTS, privacy_table
from segreconcat_aug.evaluation.metrics import det_curve
from segreconcat_aug.evaluation.privacy import INTERVAL_METRICS, PrivacyOptions
from segreconcat_aug.evaluation.references import load_reference_results
from segreconcat_aug.evaluation.score_files import read_score_file
from segreconcat_aug.evaluation.system import EVAL_SUBFOLDER
from segreconcat_aug.evaluation.system_report import blank, bootstrap_note, read_results
from segreconcat_aug.evaluation.tables import ablation_table, comparison_table, interval_notes, language_table
from segreconcat_aug.options import SEED, OptionError, validate_hparams_file

logger = logging.getLogger("run_grid")
STATUS_FILE = "grid_status.json"


def load_grid(path, overrides=None) -> dict:
    """The grid YAML, with command-line overrides, checked for consistency."""
    with open(path, encoding="utf-8") as fin:
        grid = load_hyperpyyaml(fin, overrides or {})
    configs = grid.get("configurations") or {}
    named = [grid["comparison"]["baseline"], *grid["comparison"].get("compared", [])]
    named += grid.get("ablation", {}).get("configurations", []) if grid.get("ablation") else []
    unknown = sorted({name for name in named if name not in configs})
    if unknown:
        raise OptionError(f"{path}: configuration(s) {unknown} are used but not defined under configurations")
    for where, seeds in [("seeds", grid.get("seeds"))] + [
        (f"configurations.{name}.seeds", spec.get("seeds")) for name, spec in configs.items()
    ]:
        if seeds is not None and (
            not isinstance(seeds, list)
            or not seeds
            or not all(SEED.accepts(s) for s in seeds)
            or len(set(seeds)) != len(seeds)
        ):
            raise OptionError(
                f"{path}: {where} must be null or a list of distinct integers ({SEED.allowed()}), got {seeds!r}"
            )
    if any(run_seeds(grid, name) for name in configs) and "seed" in (grid.get("extra_overrides") or {}):
        raise OptionError(f"{path}: extra_overrides sets seed while seeds lists them; keep one of the two")
    protocol = get_protocol(grid.get("protocol"))
    languages = grid.get("languages")
    if languages is not None:
        if protocol.languages is None:
            raise OptionError(
                f"{path}: languages is for vpc2026-track2; protocol {protocol.name} has none (null)"
            )
        for language in languages:
            protocol.check_language(language)
    columns = grid.get("privacy_columns") or []
    allowed = [name for name in INTERVAL_METRICS if name != "top5"]
    if not isinstance(columns, list) or any(
        not isinstance(c, str) or (c not in allowed and not (c.startswith("top") and c[3:].isdigit()))
        for c in columns
    ):
        raise OptionError(
            f"{path}: privacy_columns must be a list of privacy metrics ({', '.join(allowed)}, top<k>), "
            f"got {columns!r}"
        )
    parallel = grid.get("parallel", 1)
    if parallel is not None and (not isinstance(parallel, int) or isinstance(parallel, bool) or parallel < 1):
        raise OptionError(f"{path}: parallel must be an integer >= 1 (runs at once), got {parallel!r}")
    resamples = grid.get("bootstrap_resamples", BOOTSTRAP_DEFAULTS["resamples"])
    if not isinstance(resamples, int) or resamples < 0:
        raise OptionError(
            f"{path}: bootstrap_resamples must be an integer >= 0 (0: no intervals), got {resamples!r}"
        )
    return grid


def run_seeds(grid, config: str) -> list:
    """The training seeds of a configuration: its own ``seeds``, else the grid's; ``[None]``: one default run."""
    seeds = (grid["configurations"][config] or {}).get("seeds")
    seeds = grid.get("seeds") if seeds is None else seeds
    return list(seeds) if seeds else []


def grid_languages(grid) -> list[str]:
    """The attackers' languages under vpc2026-track2 (``languages``, else the scored four); [] otherwise."""
    protocol = get_protocol(grid.get("protocol"))
    if protocol.languages is None:
        return []
    return list(grid.get("languages") or protocol.scored_languages)


def grid_units(grid) -> list[str]:
    """What a cell is run for: each system, or under vpc2026-track2 each ``<system>/<language>``."""
    languages = grid_languages(grid)
    if not languages:
        return list(grid["systems"])
    return [f"{system}/{language}" for system in grid["systems"] for language in languages]


def split_unit(unit: str) -> tuple[str, str | None]:
    """``"BM1/de"`` -> ``("BM1", "de")``; a plain system -> ``(system, None)``.

    >>> split_unit("BM1/de"), split_unit("T8-5")
    (('BM1', 'de'), ('T8-5', None))
    """
    system, _, language = unit.partition("/")
    return system, language or None


def grid_ablation(grid) -> dict | None:
    """The grid's ``ablation`` (Table 1), or None: none asked, or a VPC 2026 grid without its system."""
    ablation = grid.get("ablation")
    units = grid_units(grid)
    if ablation and get_protocol(grid.get("protocol")).name != "vpac2024" and ablation["system"] not in units:
        logger.warning(
            "ablation system %s is not among this grid's systems (%s): no Table 1", ablation["system"], units
        )
        return None
    return ablation if ablation and ablation.get("configurations") else None  # none: no Table 1


def grid_cells(grid) -> list[tuple[str, str]]:
    """The (unit, configuration) pairs to run: Table 2's for every unit (:func:`grid_units`), then Table 1's."""
    comparison = [grid["comparison"]["baseline"], *grid["comparison"].get("compared", [])]
    cells = [(unit, config) for unit in grid_units(grid) for config in comparison]
    ablation = grid_ablation(grid)
    if ablation:
        cells += [(ablation["system"], config) for config in ablation["configurations"]]
    return list(dict.fromkeys(cells))


def grid_runs(grid) -> list[tuple[str, str, int | None]]:
    """Every (system, configuration, seed) to run; seed None: the training YAML's own seed."""
    return [
        (system, config, seed)
        for system, config in grid_cells(grid)
        for seed in run_seeds(grid, config) or [None]
    ]


def cell_folder(grid, system: str, config: str, seed: int | None = None) -> Path:
    folder = Path(grid["output_folder"]) / system / config
    return folder if seed is None else folder / f"seed{seed}"


def _status(folder: Path) -> dict:
    path = folder / STATUS_FILE
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def _mark(folder: Path, step: str) -> None:
    status = _status(folder)
    status[step] = "done"
    (folder / STATUS_FILE).write_text(json.dumps(status, indent=2) + "\n", encoding="utf-8")


def format_command(template: str, fields: dict) -> list[str]:
    """Fill a command template and split it into arguments (no shell).

    A ``--key=value`` given again later (the configuration's overrides, then ``extra_overrides``,
    over the template's own) replaces the earlier one: the recipes refuse a key given twice.

    >>> format_command("{python} x.py --a={a} {extra}", {"python": "py", "a": "1 2", "extra": ""})
    ['py', 'x.py', '--a=1 2']
    >>> format_command("x.py --b=False {extra}", {"extra": "--b=True --c=1"})
    ['x.py', '--b=True', '--c=1']
    """
    quoted = {
        key: shlex.quote(str(value)) if key not in ("overrides", "extra", "language") else value
        for key, value in fields.items()
    }
    arguments = shlex.split(template.format(**quoted))
    last = {_option_key(argument): position for position, argument in enumerate(arguments)}
    return [
        argument
        for position, argument in enumerate(arguments)
        if _option_key(argument) is None or last[_option_key(argument)] == position
    ]


def _option_key(argument: str) -> str | None:
    return argument[2:].split("=", 1)[0] if argument.startswith("--") and "=" in argument else None


def overrides_string(value) -> str:
    """Command-line overrides from a string (kept) or a mapping (``{key: value}`` -> ``--key=value``).

    The mapping form is what works from the command line, where SpeechBrain's parser splits any value
    containing ``--``.

    >>> overrides_string({"device": "cuda:0", "channels": [16, 16]})
    "--device=cuda:0 '--channels=[16,16]'"
    >>> overrides_string("--mode=none")
    '--mode=none'
    """
    if not value:
        return ""
    if isinstance(value, str):
        return value
    parts = []
    for key, item in value.items():
        token = item if isinstance(item, str) else json.dumps(item, separators=(",", ":"))
        parts.append(shlex.quote(f"--{key}={token}"))
    return " ".join(parts)


def run_logged(command: list[str], log, prefix: str = "") -> int:
    """Run ``command`` with its output going to ``log``; its progress lines are also shown on the console.

    Progress lines are the ones :func:`segreconcat_aug.cli.report_progress` prints (one per
    training epoch: losses, error rate, speed, time left).
    """
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace", bufsize=1
    )
    with process.stdout:
        for line in process.stdout:
            log.write(line)
            if line.startswith(PROGRESS_PREFIX):
                log.flush()
                tqdm.write(f"{prefix}: {line[len(PROGRESS_PREFIX) :].rstrip()}", file=sys.stdout)
    return process.wait()


def run_cell(grid, system: str, config: str, seed: int | None = None) -> str:
    """Train and evaluate one cell (one seed) unless done; returns ``"skipped"``, ``"done"`` or ``"failed"``."""
    folder = cell_folder(grid, system, config, seed)
    folder.mkdir(parents=True, exist_ok=True)
    status = _status(folder)
    if status.get("eval") == "done" and (folder / EVAL_SUBFOLDER / "results.json").is_file():
        return "skipped"
    system, language = split_unit(system)
    fields = {
        "python": grid.get("python") or sys.executable,
        "hparams": checkout_path(grid["train_hparams"]),
        "recipes": REPO / "recipes",
        "data_folder": grid["data_folder"],
        "system": system,
        "protocol": get_protocol(grid.get("protocol")).name,
        "language": f"--language={language}" if language else "",
        "configuration": config,
        "output_folder": folder,
        "overrides": " ".join(
            part
            for part in (
                overrides_string(grid["configurations"][config].get("overrides")),
                f"--seed={seed}" if seed is not None else "",
            )
            if part
        ),
        "extra": overrides_string(grid.get("extra_overrides")),
    }
    for step, template in (("train", grid["train_command"]), ("eval", grid["eval_command"])):
        if step == "train" and status.get("train") == "done":
            continue
        command = format_command(template, fields)
        logger.info("%s/%s %s: %s", system, config, step, shlex.join(command))
        with open(folder / f"grid_{step}.log", "a", encoding="utf-8") as log:
            log.write(f"$ {shlex.join(command)}\n")
            log.flush()
            returncode = run_logged(command, log, prefix=f"{system}/{config} {step}")
        if returncode != 0:
            logger.error(
                "%s/%s: %s failed (exit %d), see %s",
                system,
                config,
                step,
                returncode,
                folder / f"grid_{step}.log",
            )
            return "failed"
        _mark(folder, step)
    return "done"


def collect(grid) -> dict[tuple[str, str], list[dict]]:
    """``(system, configuration) -> runs``: per evaluated seed ``{"seed", "folder", "table", "results", "scores"}``.

    ``scores`` holds each subset's score file, read once for the intervals and the DET curves.
    """
    found: dict[tuple[str, str], list[dict]] = {}
    for system, config, seed in grid_runs(grid):
        folder = cell_folder(grid, system, config, seed) / EVAL_SUBFOLDER
        if (folder / "results.json").is_file():
            results = read_results(folder)
            scores = {
                name: read_score_file(folder / path) for name, path in results.get("scores", {}).items()
            }
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
    resamples = int(grid.get("bootstrap_resamples", BOOTSTRAP_DEFAULTS["resamples"]))
    seed = int(grid.get("bootstrap_seed", BOOTSTRAP_DEFAULTS["seed"]))
    baseline = grid["comparison"]["baseline"]
    table = get_protocol(grid.get("protocol")).table
    privacy_columns = list(grid.get("privacy_columns") or [])
    cells = {}
    for system in dict.fromkeys(system for system, _ in results):
        runs = {}
        for (cell_system, config), config_runs in results.items():
            if cell_system != system:
                continue
            runs[config] = [
                {
                    "seed": run["seed"],
                    "table": run["table"],
                    "scores": run["scores"],
                    "metrics": run["metrics"],
                }
                for run in config_runs
            ]
        if resamples:
            options = privacy_settings(results, system)
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


def privacy_settings(results: dict, system: str) -> PrivacyOptions:
    """The privacy metrics' settings its evaluations recorded (``privacy_options`` in results.json)."""
    for (cell_system, _), runs in results.items():
        for run in runs:
            saved = run["results"].get("privacy_options") if cell_system == system else None
            if saved:
                known = {f for f in PrivacyOptions.__dataclass_fields__}
                return PrivacyOptions(
                    **{k: v for k, v in saved.items() if k in known and k != "population_sizes"}
                )
    return PrivacyOptions()


def assemble(grid) -> dict[str, Path]:
    """Write the tables, the per-system DET and forest figures and ``grid_results.csv/.json``."""
    out = Path(grid["output_folder"])
    out.mkdir(parents=True, exist_ok=True)
    results = collect(grid)
    cells = analyse(grid, results)
    configs = grid["configurations"]
    protocol = get_protocol(grid.get("protocol"))
    columns = protocol.table.columns
    references = load_reference_results() if grid.get("show_published", True) else None
    settings = {
        "resamples": int(grid.get("bootstrap_resamples", BOOTSTRAP_DEFAULTS["resamples"])),
        "seed": int(grid.get("bootstrap_seed", BOOTSTRAP_DEFAULTS["seed"])),
    }
    written = {}

    comparison = grid["comparison"]
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
    notes = interval_notes(cells)
    note = (
        (
            "\n\nOurs: EER (%) of this grid's runs with 95 % intervals [low, high]; diff avg = configuration - "
            "baseline, with the interval and two-sided p-value of the paired speaker bootstrap (the same "
            "resamples for both; with several seeds, seeds are resampled too). " + bootstrap_note(settings)
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
    if references is not None and protocol.name == "vpac2024":
        note += (
            "\nPublished columns: the paper's Table 2 (the row with the same attacker name; the paper reports one "
            "SegReConcat variant per system) and the VPAC 2024 baseline attacker "
            "(segreconcat_aug/reference_results.csv names the sources).\n"
        )
    elif references is not None and protocol.published:
        note += (
            "\nPublished column: the VPC 2026 challenge's own attacker (ASV_eval^anon: WavLM-Large + ECAPA, "
            "fine-tuned on the anonymized training data), not this project's; its numbers are the challenge's "
            "results files (segreconcat_aug/reference_results.csv names them).\n"
        )
    written["table2"] = out / "table2_comparison.md"
    written["table2"].write_text(
        f"# Baseline vs. SegReConcat (Table 2 layout; protocol {protocol.name})\n\n" + table2 + note,
        encoding="utf-8",
    )
    languages = grid_languages(grid)
    if languages:
        table = language_table(
            cells,
            grid["systems"],
            [comparison["baseline"], *comparison.get("compared", [])],
            languages,
            labels,
        )
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
        written["table1"].write_text(
            f"# Ablation on {ablation['system']} (Table 1 layout)\n\n{table1}\n", encoding="utf-8"
        )

    written.update(write_grid_results(out, cells, columns, privacy_columns))

    for system in dict.fromkeys(system for system, _ in results):
        panels, forest = {}, []
        for subset in protocol.subsets:
            curves = {}
            for (cell_system, config), runs in results.items():
                if cell_system != system:
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
        for (cell_system, config), cell in cells.items():
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
        privacy_runs = grid_privacy_panels(
            results, system, [comparison["baseline"], *comparison.get("compared", [])], labels
        )
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
        run = found[0]
        panels = {}
        for name, values in run["metrics"].items():
            scores = run["scores"].get(name)
            if scores is None:
                continue
            panels[name] = privacy_panel(
                values, scores.scores[scores.targets], scores.scores[~scores.targets]
            )
        runs[labels.get(config, config)] = panels
    return runs


def write_grid_results(out: Path, cells: dict, columns, privacy_columns=()) -> dict[str, Path]:
    """``grid_results.csv`` (a row per seed and per configuration mean) and ``grid_results.json`` (everything).

    ``columns``: the protocol's table columns. Each of ``privacy_columns`` adds its average, interval
    and paired difference (``<metric>_avg``, ...).
    """
    header = ["system", "configuration", "seed", *columns, "avg_ci_low", "avg_ci_high", "avg_std"]
    header += ["diff_avg", "diff_avg_ci_low", "diff_avg_ci_high", "diff_avg_p", "diff_avg_significant"]
    for metric in privacy_columns:
        header += [f"{metric}_avg", f"{metric}_avg_ci_low", f"{metric}_avg_ci_high"]
        header += [f"diff_{metric}_avg", f"diff_{metric}_avg_p"]

    def rows_of(cell):
        rows = [(run["seed"], run["table"], run["intervals"], None, {}) for run in cell["seeds"]]
        if len(rows) != 1:
            return rows + [
                ("mean", cell["table"], cell["intervals"], cell.get("std"), cell.get("difference") or {})
            ]
        return [(rows[0][0], cell["table"], cell["intervals"], None, cell.get("difference") or {})]

    with open(out / "grid_results.csv", "w", newline="", encoding="utf-8") as handle:
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
            for index, (seed, table, intervals, std, difference) in enumerate(rows_of(cell)):
                avg = intervals.get("avg") or {}
                diff = difference.get("avg") or {}
                extra = []
                for rows in privacy_rows:
                    _, p_table, p_intervals, _, p_difference = rows[index] if index < len(rows) else rows[-1]
                    p_avg, p_diff = p_intervals.get("avg") or {}, p_difference.get("avg") or {}
                    extra += [blank(p_table.get("avg")), blank(p_avg.get("low")), blank(p_avg.get("high"))]
                    extra += [blank(p_diff.get("difference")), blank(p_diff.get("p_value"))]
                writer.writerow(
                    [system, config, "" if seed is None else seed, *(table.get(c, "") for c in columns)]
                    + [blank(avg.get("low")), blank(avg.get("high")), blank((std or {}).get("avg"))]
                    + [blank(diff.get(k)) for k in ("difference", "low", "high", "p_value", "significant")]
                    + extra
                )
    payload = {f"{system}/{config}": cell for (system, config), cell in cells.items()}
    (out / "grid_results.json").write_text(json.dumps(payload, indent=2, default=float), encoding="utf-8")
    return {"csv": out / "grid_results.csv", "json": out / "grid_results.json"}


def run_all(grid) -> list[str]:
    """Train and evaluate every run of the grid, ``parallel`` at a time; the runs that failed.

    Each run is its own processes (one training, then one evaluation), so runs at once change
    nothing they compute; ``parallel: 2`` fills two cores with runs of one math thread each.
    With ``stop_on_error`` a failure starts no further run (those started finish).
    """
    from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

    runs = list(grid_runs(grid))
    parallel = max(1, int(grid.get("parallel") or 1))
    failed, pending = [], {}
    with tqdm(total=len(runs), desc="grid", unit="run") as bar, ThreadPoolExecutor(parallel) as pool:
        while runs or pending:
            while runs and len(pending) < parallel and not (failed and grid.get("stop_on_error")):
                system, config, seed = runs.pop(0)
                where = f"{system}/{config}" + (f"/seed{seed}" if seed is not None else "")
                pending[pool.submit(run_cell, grid, system, config, seed)] = where
            if not pending:
                break
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                where = pending.pop(future)
                outcome = future.result()
                logger.info("%s: %s", where, outcome)
                bar.update()
                if outcome == "failed":
                    failed.append(where)
    return failed


def main(argv=None) -> int:
    grid_file, _, overrides = parse_recipe_arguments(argv)
    validate_hparams_file(grid_file, overrides)  # every option value, before anything is written
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    grid = load_grid(grid_file, overrides)
    failed = [] if grid.get("tables_only") else run_all(grid)
    written = assemble(grid)
    for kind, path in written.items():
        logger.info("wrote %s: %s", kind, path)
    print(written["table2"].read_text(encoding="utf-8"))
    if "table1" in written:
        print(written["table1"].read_text(encoding="utf-8"))
    if failed:
        logger.error("%d cell(s) failed: %s", len(failed), ", ".join(failed))
        return 1
    return 0


if __name__ == "__main__":
    run_main(main)

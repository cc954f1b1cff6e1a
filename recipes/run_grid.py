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

Then: ``table2_comparison.md`` (baseline vs. each compared configuration per
system, with the difference), ``table1_ablation.md`` (one system),
``det_<system>.png`` (a DET panel per subset, a line per configuration) and
``grid_results.csv``; published numbers appear in separate, labelled columns.
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
from segreconcat_aug.evaluation import EVAL_SUBFOLDER, SUBSETS
from segreconcat_aug.report import (
    TABLE_COLUMNS,
    ablation_table,
    comparison_table,
    det_from_score_file,
    load_reference_results,
    plot_det_panels,
    read_results,
)

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
        raise ValueError(f"{path}: configuration(s) {unknown} are used but not defined under configurations")
    return grid


def grid_cells(grid) -> list[tuple[str, str]]:
    """The (system, configuration) pairs to run: Table 2's for every system, then Table 1's, no repeats."""
    comparison = [grid["comparison"]["baseline"], *grid["comparison"].get("compared", [])]
    cells = [(system, config) for system in grid["systems"] for config in comparison]
    ablation = grid.get("ablation")
    if ablation:
        cells += [(ablation["system"], config) for config in ablation["configurations"]]
    return list(dict.fromkeys(cells))


def cell_folder(grid, system: str, config: str) -> Path:
    return Path(grid["output_folder"]) / system / config


def _status(folder: Path) -> dict:
    path = folder / STATUS_FILE
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def _mark(folder: Path, step: str) -> None:
    status = _status(folder)
    status[step] = "done"
    (folder / STATUS_FILE).write_text(json.dumps(status, indent=2) + "\n", encoding="utf-8")


def format_command(template: str, fields: dict) -> list[str]:
    """Fill a command template and split it into arguments (no shell).

    >>> format_command("{python} x.py --a={a} {extra}", {"python": "py", "a": "1 2", "extra": ""})
    ['py', 'x.py', '--a=1 2']
    """
    quoted = {
        key: shlex.quote(str(value)) if key not in ("overrides", "extra") else value
        for key, value in fields.items()
    }
    return shlex.split(template.format(**quoted))


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


def run_cell(grid, system: str, config: str) -> str:
    """Train and evaluate one cell unless done; returns ``"skipped"``, ``"done"`` or ``"failed"``."""
    folder = cell_folder(grid, system, config)
    folder.mkdir(parents=True, exist_ok=True)
    status = _status(folder)
    if status.get("eval") == "done" and (folder / EVAL_SUBFOLDER / "results.json").is_file():
        return "skipped"
    fields = {
        "python": grid.get("python") or sys.executable,
        "hparams": checkout_path(grid["train_hparams"]),
        "recipes": REPO / "recipes",
        "data_folder": grid["data_folder"],
        "system": system,
        "configuration": config,
        "output_folder": folder,
        "overrides": overrides_string(grid["configurations"][config].get("overrides")),
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


def collect(grid) -> dict[tuple[str, str], dict]:
    """``(system, configuration) -> results.json`` of every evaluated cell."""
    found = {}
    for system, config in grid_cells(grid):
        folder = cell_folder(grid, system, config) / EVAL_SUBFOLDER
        if (folder / "results.json").is_file():
            found[(system, config)] = read_results(folder)
    return found


def assemble(grid) -> dict[str, Path]:
    """Write the tables, the per-system DET figures and ``grid_results.csv`` from the finished cells."""
    out = Path(grid["output_folder"])
    out.mkdir(parents=True, exist_ok=True)
    results = collect(grid)
    rows = {key: value["table"] for key, value in results.items()}
    configs = grid["configurations"]
    references = load_reference_results() if grid.get("show_published", True) else None
    written = {}

    comparison = grid["comparison"]
    labels = {name: spec.get("label", name) for name, spec in configs.items()}
    table2 = comparison_table(
        rows, grid["systems"], comparison["baseline"], comparison.get("compared", []), labels, references
    )
    note = (
        "\n\nOurs: EER (%) of this grid's runs; diff avg = configuration - baseline. Published columns: "
        "the paper's Table 2 (the row with the same attacker name; the paper reports one SegReConcat variant per "
        "system) and the VPAC 2024 baseline attacker "
        "(segreconcat_aug/reference_results.csv names the sources).\n"
        if references is not None
        else "\n"
    )
    written["table2"] = out / "table2_comparison.md"
    written["table2"].write_text(
        "# Baseline vs. SegReConcat (Table 2 layout)\n\n" + table2 + note, encoding="utf-8"
    )

    ablation = grid.get("ablation")
    if ablation:
        table1_labels = {name: spec.get("table1", spec.get("label", name)) for name, spec in configs.items()}
        table1 = ablation_table(
            rows, ablation["system"], ablation["configurations"], table1_labels, references
        )
        written["table1"] = out / "table1_ablation.md"
        written["table1"].write_text(
            f"# Ablation on {ablation['system']} (Table 1 layout)\n\n{table1}\n", encoding="utf-8"
        )

    with open(out / "grid_results.csv", "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["system", "configuration", *TABLE_COLUMNS])
        for (system, config), row in rows.items():
            writer.writerow([system, config, *(row.get(column, "") for column in TABLE_COLUMNS)])
    written["csv"] = out / "grid_results.csv"

    for system in dict.fromkeys(system for system, _ in results):
        panels = {}
        for subset in SUBSETS:
            curves = {}
            for (cell_system, config), result in results.items():
                score_file = result.get("scores", {}).get(subset)
                if cell_system == system and score_file:
                    path = cell_folder(grid, system, config) / EVAL_SUBFOLDER / score_file
                    curves[labels.get(config, config)] = det_from_score_file(path)
            if curves:
                panels[subset.replace("_", " ")] = curves
        if panels:
            written[f"det_{system}"] = plot_det_panels(
                panels, out / f"det_{system}.png", title=f"{system}: DET"
            )
    return written


def main(argv=None) -> int:
    grid_file, _, overrides = parse_recipe_arguments(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    grid = load_grid(grid_file, overrides)
    failed = []
    if not grid.get("tables_only"):
        cells = grid_cells(grid)
        for system, config in tqdm(cells, desc="grid", unit="cell"):
            outcome = run_cell(grid, system, config)
            logger.info("%s/%s: %s", system, config, outcome)
            if outcome == "failed":
                failed.append(f"{system}/{config}")
                if grid.get("stop_on_error"):
                    break
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

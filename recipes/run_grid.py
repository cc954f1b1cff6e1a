#!/usr/bin/env python3
"""Train and evaluate a grid of attackers (systems x configurations) and assemble the paper's tables.

Usage::

    python recipes/run_grid.py hparams/grid.yaml --data_folder=<VPAC root>
    python recipes/run_grid.py hparams/grid.yaml --data_folder=<VPAC root> --systems=[T8-5,B4]
    python recipes/run_grid.py hparams/grid.yaml --data_folder=<VPAC root> --tables_only=True
    python recipes/run_grid.py hparams/grid.yaml --data_folder=<VPAC root> --systems=[B3] --learning_curve
    python recipes/run_grid.py hparams/grid.yaml --data_folder=<VPAC root> --launcher=slurm [--dry_run]

Each cell (system, configuration) runs ``train_command`` then ``eval_command``
(templates in the grid YAML, so torchrun or a cluster wrapper can be used) with
``--output_folder=<output_folder>/<system>/<configuration>``; a rerun skips what is done
(:mod:`segreconcat_aug.grid.runner`). ``--launcher=local`` (the default) runs them on this machine,
``--launcher=slurm`` as SLURM jobs (the grid YAML's ``slurm_*`` resources; docs/scale.md);
``--dry_run`` lists what would run (or be submitted) and runs nothing. Then ``table2_comparison.md``, ``table1_ablation.md``,
``det_<system>.png``, ``forest_<system>.png``, ``privacy_<system>.png`` and
``grid_results.csv/.json`` (:mod:`segreconcat_aug.grid.results`). Seeds, protocols and languages:
:mod:`segreconcat_aug.grid`; the method: docs/evaluation.md.
``--learning_curve`` (= ``--learning_curve=True``) also trains each Table 2 configuration on nested,
seeded fractions of its training set and writes ``learning_curve.md`` (printed), ``learning_curve.json``
and ``learning_curve_<system>.png`` (:mod:`segreconcat_aug.grid.learning_curve`).
"""

from __future__ import annotations

import logging
import sys

from segreconcat_aug.cli import hold_output_folder, parse_recipe_arguments, run_main
from segreconcat_aug.grid.plan import check_grid_data, load_grid
from segreconcat_aug.grid.results import assemble
from segreconcat_aug.grid.runner import GRID_LOCK, describe_runs, run_all

logger = logging.getLogger("run_grid")


LEARNING_CURVE_FLAG = "--learning_curve"
DRY_RUN_FLAG = "--dry_run"


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    argv = [f"{LEARNING_CURVE_FLAG}=True" if a == LEARNING_CURVE_FLAG else a for a in argv]
    dry_run = DRY_RUN_FLAG in argv
    argv = [a for a in argv if a != DRY_RUN_FLAG]
    grid_file, _, overrides = parse_recipe_arguments(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    grid = load_grid(grid_file, overrides)  # every option value, before anything is written
    if not grid.get("tables_only"):
        check_grid_data(grid)  # every cell's data folders, before any cell runs
    if dry_run:  # what would run (or be submitted), before anything is written
        print("\n".join(describe_runs(grid)))
        return 0
    hold_output_folder(grid["output_folder"], "a grid run", GRID_LOCK)  # one grid runner per output folder
    failed = [] if grid.get("tables_only") else run_all(grid)
    written = assemble(grid)
    for kind, path in written.items():
        logger.info("wrote %s: %s", kind, path)
    print(written["table2"].read_text(encoding="utf-8"))
    if "table1" in written:
        print(written["table1"].read_text(encoding="utf-8"))
    if "pairs" in written:
        print(written["pairs"].read_text(encoding="utf-8"))
    if "learning_curve" in written:
        print(written["learning_curve"].read_text(encoding="utf-8"))
    if failed:
        logger.error("%d cell(s) failed: %s", len(failed), ", ".join(failed))
        return 1
    return 0


if __name__ == "__main__":
    run_main(main)

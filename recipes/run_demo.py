#!/usr/bin/env python3
"""The main job in one command: baseline vs SegReConcat on the bundled demo corpus, on a CPU, offline.

Usage (from anywhere; paths are resolved from the repository root)::

    python recipes/run_demo.py                      # about 5-6 minutes on 2 cores
    python recipes/run_demo.py --quick              # one epoch of a tiny model: checks the install (~1 min)
    python recipes/run_demo.py --table1             # the Table-1 rows: baseline, RR, AR, SR, each +- concat
    python recipes/run_demo.py --learning_curve     # both runs also on 25 % and 50 % of the training speakers
    python recipes/run_demo.py --attackers          # pretrained, fine-tuned and AS-norm attackers (docs/attackers.md)
    python recipes/run_demo.py --output_folder=/tmp/demo --seed=7   # any hparams/demo.yaml key

It runs ``recipes/run_grid.py hparams/demo.yaml`` (each run trained, then evaluated), prints the
Table-2-style comparison with a plain verdict per compared run and writes its figures into
``<output_folder>`` (default ``results/demo``). Reruns resume: finished runs are skipped. What each flag
runs and writes: docs/demo.md.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import yaml

from segreconcat_aug.cli import UnknownOptionError, check_override_keys, override_keys, run_main
from segreconcat_aug.errors import MissingInputError

REPO = Path(__file__).resolve().parents[1]
DEMO_HPARAMS = "hparams/demo.yaml"
# One epoch of a tiny model: what the test suite runs to check the whole chain in about a minute.
QUICK_OVERRIDES = {
    "channels": [32, 32, 32, 32, 96],
    "attention_channels": 16,
    "lin_neurons": 32,
    "number_of_epochs": 1,
    "warmup": 0,
    "patience": 1,
}
DEMO_HELP = """Demo options:
  --quick  one epoch of a tiny model (about a minute): checks the install; writes results/demo-quick
  --table1 the Table-1 rows (baseline, RR, AR, SR, each with and without concatenation); results/demo-table1
  --learning_curve both runs also on 25 % and 50 % of the training speakers: the EER against training
           hours, and whether more data still helps; results/demo-learning_curve
  --attackers pretrain on the original speech, then from-scratch, pretrained, fine-tuned and AS-norm
           attackers with and without SegReConcat (docs/attackers.md); results/demo-attackers
Any key of hparams/ecapa_segreconcat.yaml not listed above (--seed=7, --number_of_epochs=3, ...) is passed
to both training runs (`segreconcat-train --help` lists them)."""
FLAGS = ("table1", "learning_curve", "attackers", "quick")  # in the order of a flagged run's folder name
ORIGINAL_SYSTEM = "ORIGINAL"  # demo/data/ORIGINAL/: the training speech before anonymization


def split_arguments(argv: list[str]) -> tuple[set, list[str], dict]:
    """``(flags given, grid overrides as --key=value, training overrides as a mapping)``.

    >>> split_arguments(["--quick", "--output_folder=/tmp/x", "--seed=7"])
    ({'quick'}, ['--output_folder=/tmp/x'], {'seed': 7})
    """
    grid_keys = override_keys(REPO / DEMO_HPARAMS)  # run_grid.py's; every other key is a training override
    flags, grid, training = set(), [], {}
    for argument in argv:
        if argument[2:] in FLAGS and argument.startswith("--"):
            flags.add(argument[2:])
            continue
        if not argument.startswith("--") or "=" not in argument:
            raise UnknownOptionError(
                f"expected --quick, --table1, --learning_curve, --attackers or --key=value, got {argument!r} "
                "(--help lists the keys)"
            )
        key, value = argument[2:].split("=", 1)
        if key in grid_keys:
            grid.append(argument)
        else:
            training[key] = yaml.safe_load(value)
    return flags, grid, training


def table1_overrides(grid) -> list[str]:
    """The grid overrides of ``--table1``: every ``table1_rows`` run against the first, and Table 1 of them."""
    rows = list(grid["table1_rows"])
    comparison = {"baseline": rows[0], "compared": rows[1:]}
    ablation = {"system": grid["systems"][0], "configurations": rows}
    return [f"--comparison={json.dumps(comparison)}", f"--ablation={json.dumps(ablation)}"]


def attackers_overrides(grid, init_from) -> list[str]:
    """The grid overrides of ``--attackers``: ``attackers_rows`` against the first (also paired with the
    second: ``versus``). The YAML's ``!ref <init_from>`` takes the pretrained folder: SpeechBrain's parser
    would split a ``--key=value`` inside an override's value.

    >>> grid = {"attackers_rows": ["rr_concat", "baseline"], "attackers_labels": {"baseline": "From scratch"},
    ...         "configurations": {"rr_concat": {"overrides": "--mode=concat"}, "baseline": {}}}
    >>> attackers_overrides(grid, "/m")
    ['--init_from=/m', '--comparison={"baseline": "rr_concat", "compared": ["baseline"]}', '--configurations={"rr_concat": {"versus": "baseline"}, "baseline": {"label": "From scratch"}}']
    """
    rows = list(grid["attackers_rows"])
    changes: dict[str, dict] = {}
    if not (grid["configurations"][rows[0]] or {}).get("versus"):
        changes.setdefault(rows[0], {})["versus"] = rows[1]
    for name, label in (grid.get("attackers_labels") or {}).items():
        changes.setdefault(name, {})["label"] = label
    comparison = {"baseline": rows[0], "compared": rows[1:]}
    return [
        f"--init_from={init_from}",
        f"--comparison={json.dumps(comparison)}",
        f"--configurations={json.dumps(changes)}",
    ]


def pretrain_on_original_speech(grid, extra: dict) -> Path:
    """Train the demo's speaker model on the ORIGINAL training speech (what the VPC 2026 checkpoint is to
    the anonymized data) in ``<output_folder>/pretrained``; its export folder, for ``init_from``. A
    finished export is kept."""
    from segreconcat_aug.grid.plan import run_environment  # the grid's modules load only for a run
    from segreconcat_aug.grid.runner import unit_command
    from segreconcat_aug.models.export import EXPORT_HPARAMS

    folder = Path(grid["output_folder"]) / "pretrained"
    if (folder / "export" / EXPORT_HPARAMS).is_file():
        return folder / "export"
    folder.mkdir(parents=True, exist_ok=True)
    spec = {"overrides": "--mode=none", "extra_overrides": extra}
    command = unit_command(grid, grid["train_command"], ORIGINAL_SYSTEM, folder, spec)
    print(f"pretraining on the original speech: {' '.join(map(str, command))}", flush=True)
    with open(folder / "pretrain.log", "a", encoding="utf-8") as log:
        subprocess.run(command, check=True, stdout=log, stderr=subprocess.STDOUT, env=run_environment(grid))
    return folder / "export"


def check_corpus(data_folder: Path, orders: bool = False, original: bool = False) -> None:
    """The bundled corpus must be there; ``orders``: the AR and SR orders (``--table1``); ``original``: the
    original speech (``--attackers``)."""
    needed = [
        data_folder / "MCADAMS" / "data" / "train-clean-360_MCADAMS",
        data_folder / "alignments" / "MCADAMS.jsonl",
    ]
    if original:
        needed.append(data_folder / ORIGINAL_SYSTEM / "data" / f"train-clean-360_{ORIGINAL_SYSTEM}")
    if orders:
        needed += [
            data_folder / "orders" / f"MCADAMS-{strategy}.jsonl" for strategy in ("acoustic", "semantic")
        ]
    missing = [str(path) for path in needed if not path.exists()]
    if missing:
        raise MissingInputError(
            f"the demo corpus is missing ({', '.join(missing)}); it is committed under demo/ "
            "(rebuild it with recipes/build_demo_corpus.py from the LibriSpeech samples)"
        )


def demo_grid(overrides: list[str]) -> dict:
    """``hparams/demo.yaml`` loaded with ``--key=value`` grid overrides."""
    from segreconcat_aug.grid.plan import load_grid

    return load_grid(DEMO_HPARAMS, "\n".join(a[2:].replace("=", ": ", 1) for a in overrides))


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    flags, grid_overrides, training = split_arguments(argv)
    if flags and not any(a.startswith("--output_folder=") for a in grid_overrides):
        # Its own folder: finished runs are skipped on rerun, so a quick run must not stand in for a full one.
        name = "-".join(["results/demo", *[flag for flag in FLAGS if flag in flags]])
        grid_overrides.append(f"--output_folder={name}")
    os.chdir(REPO)  # demo.yaml's paths (demo/data, recipes/...) are relative to the repository root
    sys.path.insert(0, str(REPO / "recipes"))
    import run_grid

    if "table1" in flags:
        grid_overrides += table1_overrides(demo_grid([]))
    if "learning_curve" in flags:
        grid_overrides.append("--learning_curve=True")
    grid = demo_grid(grid_overrides)
    check_corpus(Path(grid["data_folder"]), orders="table1" in flags, original="attackers" in flags)
    extra = dict(grid.get("extra_overrides") or {})
    if "quick" in flags:
        extra.update(QUICK_OVERRIDES)
    check_override_keys(REPO / grid["train_hparams"], training)
    extra.update(training)
    start = time.perf_counter()
    if "attackers" in flags:
        export = pretrain_on_original_speech(grid, extra)
        print(f"pretrained: {time.perf_counter() - start:.0f} s; {export}", flush=True)
        grid_overrides = [a for a in grid_overrides if not a.startswith("--init_from=")]
        grid_overrides += attackers_overrides(demo_grid([*grid_overrides, f"--init_from={export}"]), export)
        grid = demo_grid(grid_overrides)
    code = run_grid.main([DEMO_HPARAMS, *grid_overrides, f"--extra_overrides={json.dumps(extra)}"])
    if (Path(grid["output_folder"]) / "grid_results.json").is_file() and grid.get("bootstrap_resamples", 1):
        from segreconcat_aug.grid.results import verdict_lines

        print("\n".join(verdict_lines(grid)))
    figures = sorted(Path(grid["output_folder"]).glob("privacy_*.png"))
    if figures:
        print(
            "privacy beyond the EER: "
            + ", ".join(str(f.resolve()) for f in figures)
            + " (speaker EERs, linkability); every metric with its interval: <run>/eval/results.md"
        )
    print(f"demo: {time.perf_counter() - start:.0f} s; outputs in {Path(grid['output_folder']).resolve()}")
    return code


if __name__ == "__main__":
    run_main(main, extra_help=DEMO_HELP)

#!/usr/bin/env python3
"""The main job in one command: baseline vs SegReConcat on the bundled demo corpus, on a CPU, offline.

Usage (from anywhere; paths are resolved from the repository root)::

    python recipes/run_demo.py                      # about 5-6 minutes on 2 cores
    python recipes/run_demo.py --quick              # one epoch of a tiny model: checks the install (~1 min)
    python recipes/run_demo.py --table1             # the Table-1 rows: baseline, RR, AR, SR, each +- concat
    python recipes/run_demo.py --learning_curve     # both runs also on 25 % and 50 % of the training speakers
    python recipes/run_demo.py --attackers          # pretrained, fine-tuned and AS-norm attackers (docs/attackers.md)
    python recipes/run_demo.py --output_folder=/tmp/demo --seed=7   # any hparams/demo.yaml key

It runs ``recipes/run_grid.py hparams/demo.yaml``: for each of the two runs,
``recipes/train.py`` then ``recipes/evaluate.py`` with ``hparams/ecapa_segreconcat.yaml``
(the paper's recipe) and the demo's overrides, on ``demo/data/`` (McAdams-anonymized
LibriSpeech, see ``demo/README.md``) with its cached word alignments. It prints the
Table-2-style comparison (EERs with 95 % intervals from a speaker bootstrap) and a plain
verdict per compared run, e.g. ``SegReConcat vs Baseline: -6.7 EER points, 95 % CI [-15.2, 1.9]
(p = 0.14): not significant on this small corpus; the interval covers the 10 test speakers of one
training run per attacker: another seed or machine can move it`` (with ``seeds``: the speakers and the
seeds), and writes ``<output_folder>/det_MCADAMS.png``,
``forest_MCADAMS.png`` and ``privacy_MCADAMS.png`` (the EER of every speaker and the linkability
score distributions) in ``<output_folder>`` (default ``results/demo``; ``results/demo-quick`` with
``--quick``). Table 2 carries linkability and minCllr; each run's ``eval/results.md`` every privacy
metric. Reruns resume: finished runs are skipped, so after changing an option use another
``--output_folder`` or delete the old one.
The runs go two at a time (``parallel`` in ``hparams/demo.yaml``), one math thread each.

``--table1`` runs the paper's Table-1 rows instead (``table1_rows`` of ``hparams/demo.yaml``: no
augmentation, RR, AR and SR, each rearranged alone and concatenated; AR and SR read the orders shipped
in ``demo/data/orders/``) into ``results/demo-table1``: ``table1_ablation.md`` (average EER with its 95 %
interval per row) and ``table2_comparison.md`` (every row against the baseline, paired, with intervals).

``--learning_curve`` trains both runs on nested, seeded fractions of the training speakers too (25 % and
50 %, ``learning_curve_*`` of ``hparams/demo.yaml``) into ``results/demo-learning_curve`` and prints the
curve (``learning_curve.md``: average EER with its interval against training hours; the figure
``learning_curve_MCADAMS.png``) and its verdict per run: whether the attacker on all the data beats the
one on half of it, paired on the same speaker resamples (docs/evaluation.md#learning-curves).

``--attackers`` compares attackers (docs/attackers.md): it first pretrains the demo's small ECAPA on
the ORIGINAL training speech (``demo/data/ORIGINAL/``: what the VPC 2026 checkpoint is trained on; no
speaker-pretrained weights can be installed offline) into ``results/demo-attackers/pretrained/``
(:func:`pretrain_on_original_speech`), then runs ``attackers_rows`` of ``hparams/demo.yaml``: from scratch
without and with SegReConcat, the pretrained model evaluated as it is, fine-tuned from it
(``--init_from``) without and with SegReConcat, and the latter scored with VoxATtack's AS-norm. Every
row is paired with the paper's attacker (SegReConcat from scratch) in ``table2_comparison.md``, and each
SegReConcat row with the same attacker without it in ``table_pairs.md``. ``--attackers --quick``: the
same with tiny one-epoch models (what the tests run).

After the comparison's verdict a line per run names its attacker's convergence flags (best epoch the
last, dev loss still falling, train/dev gap, augmentation fallback; docs/evaluation.md#convergence-flags).

``--seed=N`` (or any key of ``extra_overrides``) is passed to both runs; other ``--key=value``
overrides go to ``hparams/demo.yaml`` itself.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

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
# Keys of hparams/demo.yaml itself (run_grid.py's); every other --key=value is a training override.
GRID_KEYS = {
    "data_folder",
    "output_folder",
    "train_hparams",
    "python",
    "stop_on_error",
    "parallel",
    "tables_only",
    "rescore_changed_scores",
    "show_published",
    "systems",
    "bootstrap_resamples",
    "bootstrap_seed",
    "seeds",
    "privacy_columns",
    "learning_curve",
    "learning_curve_fractions",
    "learning_curve_subsample",
    "learning_curve_configurations",
    "init_from",
    "finetune_lr",
    "attackers_rows",
    "attackers_labels",
}
FLAGS = ("quick", "table1", "learning_curve", "attackers")
ORIGINAL_SYSTEM = "ORIGINAL"  # demo/data/ORIGINAL/: the training speech before anonymization


def split_arguments(argv: list[str]) -> tuple[set, list[str], dict]:
    """``(flags given, grid overrides as --key=value, training overrides as a mapping)``.

    >>> split_arguments(["--quick", "--output_folder=/tmp/x", "--seed=7"])
    ({'quick'}, ['--output_folder=/tmp/x'], {'seed': 7})
    """
    import yaml

    from segreconcat_aug.cli import UnknownOptionError

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
        if key in GRID_KEYS:
            grid.append(argument)
        else:
            training[key] = yaml.safe_load(value)
    return flags, grid, training


def table1_overrides(grid) -> list[str]:
    """The grid overrides of ``--table1``: every ``table1_rows`` run against the first, and Table 1 of them.

    >>> table1_overrides({"table1_rows": ["baseline", "rr"], "systems": ["MCADAMS"]})
    ['--comparison={"baseline": "baseline", "compared": ["rr"]}', '--ablation={"system": "MCADAMS", "configurations": ["baseline", "rr"]}']
    """
    rows = list(grid["table1_rows"])
    comparison = {"baseline": rows[0], "compared": rows[1:]}
    ablation = {"system": grid["systems"][0], "configurations": rows}
    return [f"--comparison={json.dumps(comparison)}", f"--ablation={json.dumps(ablation)}"]


def attackers_overrides(grid, init_from) -> list[str]:
    """The grid overrides of ``--attackers``: ``attackers_rows`` against the first, the paper's attacker.

    The first row is also paired with the second (``versus``: SegReConcat from scratch against the
    baseline from scratch), beside the ``versus`` pairs the configurations name. Only what changes is
    overridden (labels, ``versus``): the configurations' own overrides stay in the YAML, whose
    ``!ref <init_from>`` takes the pretrained folder (SpeechBrain's parser would split a ``--key=value``
    inside an override's value).

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


def pretrain_on_original_speech(grid, extra: dict, folder) -> Path:
    """Train the demo's speaker model on the ORIGINAL training speech; its export folder (for ``init_from``).

    Runs the grid's ``train_command`` (``recipes/train.py`` with the demo's training overrides
    ``extra``) on ``--system=ORIGINAL`` with no augmentation into ``folder``; a finished export is kept
    (a rerun resumes, as the grid's runs do). What the VPC 2026 checkpoint is to the anonymized
    data, this model is to the demo's: a speaker model of the same speakers' original speech.
    """
    import subprocess

    from segreconcat_aug.grid.plan import run_environment
    from segreconcat_aug.grid.runner import command_fields, format_command, overrides_string
    from segreconcat_aug.models.export import EXPORT_HPARAMS

    folder = Path(folder)
    export = folder / "export"
    if (export / EXPORT_HPARAMS).is_file():
        return export
    folder.mkdir(parents=True, exist_ok=True)
    command = format_command(
        grid["train_command"],
        command_fields(
            grid,
            ORIGINAL_SYSTEM,
            folder,
            hparams=grid["train_hparams"],
            overrides="--mode=none",
            extra=overrides_string(extra),
        ),
    )
    print(f"pretraining on the original speech: {' '.join(map(str, command))}", flush=True)
    with open(folder / "pretrain.log", "a", encoding="utf-8") as log:
        subprocess.run(command, check=True, stdout=log, stderr=subprocess.STDOUT, env=run_environment(grid))
    return export


def check_corpus(data_folder: Path, orders: bool = False, original: bool = False) -> None:
    """The bundled corpus must be there (a clone without it, e.g. a shallow sparse checkout, is told how).

    ``orders``: the AR and SR orders too (``--table1``); ``original``: the original training speech
    (``--attackers``).
    """
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
        from segreconcat_aug.errors import MissingInputError

        raise MissingInputError(
            f"the demo corpus is missing ({', '.join(missing)}); it is committed under demo/ "
            "(rebuild it with recipes/build_demo_corpus.py from the LibriSpeech samples)"
        )


def verdicts(grid) -> list[str]:
    """One line per compared configuration: its difference to the baseline, the interval and what it means.

    Read from the grid's ``grid_results.json`` (written by :func:`segreconcat_aug.grid.assemble`).
    """
    out = Path(grid["output_folder"])
    saved = json.loads((out / "grid_results.json").read_text(encoding="utf-8"))
    labels = {name: spec.get("label", name) for name, spec in grid["configurations"].items()}
    baseline = grid["comparison"]["baseline"]
    lines = []
    for system in grid["systems"]:
        for config in grid["comparison"].get("compared", []):
            cell = saved.get(f"{system}/{config}")
            if cell is None or f"{system}/{baseline}" not in saved:
                lines.append(f"{labels[config]} vs {labels[baseline]} ({system}): not evaluated")
                continue
            lines.append(verdict(cell["difference"]["avg"], labels[config], labels[baseline]))
    return lines


def pair_verdicts(grid) -> list[str]:
    """One line per ``versus`` pair (``grid_results.json``'s ``versus``): the row against its own pairing."""
    saved = json.loads((Path(grid["output_folder"]) / "grid_results.json").read_text(encoding="utf-8"))
    labels = {name: spec.get("label", name) for name, spec in grid["configurations"].items()}
    return [
        verdict(cell["versus"], labels[key.split("/", 1)[1]], labels[cell["versus"]["configuration"]])
        for key, cell in saved.items()
        if cell.get("versus")
    ]


def flag_verdicts(grid) -> list[str]:
    """One line per run of the comparison: its attacker's convergence flags (``grid_results.json``'s ``flags``)."""
    saved = json.loads((Path(grid["output_folder"]) / "grid_results.json").read_text(encoding="utf-8"))
    labels = {name: spec.get("label", name) for name, spec in grid["configurations"].items()}
    comparison = grid["comparison"]
    return [
        flags_verdict(saved[f"{system}/{config}"].get("flags") or [], labels[config])
        for system in grid["systems"]
        for config in [comparison["baseline"], *comparison.get("compared", [])]
        if f"{system}/{config}" in saved
    ]


def flags_verdict(flags: list[dict], label: str) -> str:
    """A run's convergence flags in a line (:mod:`segreconcat_aug.data.convergence`), or that it has none.

    >>> flags_verdict([{"seed": None, "name": "best_epoch_last", "text": "best epoch is the last: ..."}], "Baseline")
    "Baseline's attacker: best epoch is the last: its EER may overstate privacy (docs/evaluation.md#convergence-flags)"
    >>> flags_verdict([], "SegReConcat")
    "SegReConcat's attacker: no convergence flag"
    """
    if not flags:
        return f"{label}'s attacker: no convergence flag"
    from segreconcat_aug.data.convergence import FLAGS as FLAG_NAMES

    names = ", ".join(dict.fromkeys(FLAG_NAMES.get(flag["name"], flag["name"]) for flag in flags))
    return (
        f"{label}'s attacker: {names}: its EER may overstate privacy (docs/evaluation.md#convergence-flags)"
    )


def curve_verdicts(grid) -> list[str]:
    """The learning curve's verdict per run (``learning_curve.json``, :mod:`segreconcat_aug.grid.learning_curve`)."""
    path = Path(grid["output_folder"]) / "learning_curve.json"
    if not path.is_file():
        return []
    curves = json.loads(path.read_text(encoding="utf-8"))
    return [curve["verdict"] for rows in curves.values() for axes in rows.values() for curve in axes.values()]


def verdict(difference: dict, label: str, baseline_label: str) -> str:
    """A plain sentence for a paired difference of average EERs (:func:`segreconcat_aug.evaluation.comparison.compare_runs`),
    and what its interval covers: the test speakers, and the training seeds where there are several.

    >>> verdict({"difference": -6.67, "low": -15.2, "high": 1.9, "p_value": 0.14, "significant": False,
    ...          "speakers": 10, "seeds": 1}, "SegReConcat", "Baseline")
    'SegReConcat vs Baseline: -6.7 EER points, 95 % CI [-15.2, 1.9] (p = 0.14): not significant on this small corpus; the interval covers the 10 test speakers of one training run per attacker: another seed or machine can move it'
    >>> verdict({"difference": -6.67, "low": -15.2, "high": 1.9, "p_value": 0.14, "significant": False,
    ...          "speakers": 10, "seeds": 3}, "SegReConcat", "Baseline").split("; ")[1]
    'the interval covers the 10 test speakers and the 3 training seeds per attacker, both resampled'
    """
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
    return line + interval_scope(difference)


def interval_scope(difference: dict) -> str:
    """What a paired interval resamples (``speakers`` and ``seeds`` of the difference); empty when unknown.

    One training run per attacker leaves the training's randomness (seed, and the machine's arithmetic)
    outside the interval: another seed can move the difference beyond it.
    """
    speakers, seeds = difference.get("speakers"), difference.get("seeds")
    if not speakers or not seeds:
        return ""
    if seeds == 1:
        return (
            f"; the interval covers the {speakers} test speakers of one training run per attacker: "
            "another seed or machine can move it"
        )
    return (
        f"; the interval covers the {speakers} test speakers and the {seeds} training seeds per attacker, "
        "both resampled"
    )


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    flags, grid_overrides, training = split_arguments(argv)
    quick = "quick" in flags
    if flags and not any(a.startswith("--output_folder=") for a in grid_overrides):
        # Its own folder: finished runs are skipped on rerun, so a quick run must not stand in for a full one.
        name = "-".join(
            ["results/demo"]
            + [flag for flag in ("table1", "learning_curve", "attackers", "quick") if flag in flags]
        )
        grid_overrides.append(f"--output_folder={name}")
    os.chdir(REPO)  # demo.yaml's paths (demo/data, recipes/...) are relative to the repository root
    sys.path.insert(0, str(REPO / "recipes"))
    import run_grid

    from segreconcat_aug.cli import check_override_keys
    from segreconcat_aug.grid import load_grid

    if "table1" in flags:
        grid_overrides += table1_overrides(load_grid(DEMO_HPARAMS))
    if "learning_curve" in flags:
        grid_overrides.append("--learning_curve=True")
    grid = load_grid(DEMO_HPARAMS, "\n".join(a[2:].replace("=", ": ", 1) for a in grid_overrides))
    check_corpus(Path(grid["data_folder"]), orders="table1" in flags, original="attackers" in flags)
    extra = dict(grid.get("extra_overrides") or {})
    if quick:
        extra.update(QUICK_OVERRIDES)
    check_override_keys(REPO / grid["train_hparams"], training)
    extra.update(training)
    start = time.perf_counter()
    if "attackers" in flags:
        export = pretrain_on_original_speech(grid, extra, Path(grid["output_folder"]) / "pretrained")
        print(f"pretrained: {time.perf_counter() - start:.0f} s; {export}", flush=True)
        with_model = [a for a in grid_overrides if not a.startswith("--init_from=")] + [
            f"--init_from={export}"
        ]
        grid = load_grid(DEMO_HPARAMS, "\n".join(a[2:].replace("=", ": ", 1) for a in with_model))
        grid_overrides = [a for a in grid_overrides if not a.startswith("--init_from=")]
        grid_overrides += attackers_overrides(grid, export)
        grid = load_grid(DEMO_HPARAMS, "\n".join(a[2:].replace("=", ": ", 1) for a in grid_overrides))
    code = run_grid.main([DEMO_HPARAMS, *grid_overrides, f"--extra_overrides={json.dumps(extra)}"])
    if (Path(grid["output_folder"]) / "grid_results.json").is_file() and grid.get("bootstrap_resamples", 1):
        print("\n".join(verdicts(grid) + pair_verdicts(grid) + flag_verdicts(grid) + curve_verdicts(grid)))
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
    from segreconcat_aug.cli import run_main

    run_main(main, extra_help=DEMO_HELP)

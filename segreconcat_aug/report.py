"""Reports: score files, results tables in the paper's layout, DET figures.

Per system and run (:func:`write_system_report`), under the evaluation folder:

- ``scores/<subset>.txt``: ``<enroll-spk> <test-utt> target|nontarget <score>``;
- ``results.csv``: one row per subset (EER %, normalized minDCF, counts) and the
  averages (``dev_avg``, ``test_avg``, ``avg``, EER only);
- ``results.md``: the paper's Table 2 columns (dev f / m / avg, test f / m / avg,
  average of the four) followed by the per-subset details;
- ``results.json``: the same numbers for programs (the grid runner reads it);
- ``det.png``: a DET curve per subset.

Across runs (the grid runner): :func:`comparison_table` (Table 2 style,
baseline vs. SegReConcat per system with the difference), :func:`ablation_table`
(Table 1 style) and :func:`plot_det` with one line per run. Published numbers
(:func:`load_reference_results`, from ``reference_results.csv``) go in separate,
labelled columns, never mixed with ours.

Example
-------
>>> markdown_table(["a", "b"], [[1, 2.5]])
'| a | b |\\n|---|---|\\n| 1 | 2.50 |'
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np

from .metrics import det_curve

TABLE_COLUMNS = ("dev_f", "dev_m", "dev_avg", "test_f", "test_m", "test_avg", "avg")
TABLE_HEADERS = ("dev F", "dev M", "dev avg", "test F", "test M", "test avg", "avg")
REFERENCE_FILE = Path(__file__).with_name("reference_results.csv")


def _fmt(value, digits: int = 2) -> str:
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return "-"
    if isinstance(value, (float, np.floating)):
        return f"{value:.{digits}f}"
    return str(value)


def markdown_table(headers, rows, digits: int = 2) -> str:
    """A GitHub markdown table; floats with ``digits`` decimals, ``None`` as ``-``."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(_fmt(v, digits) for v in row) + " |" for row in rows]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------------
# One system, one run
# ---------------------------------------------------------------------------------------------------


def write_scores(path, subset) -> Path:
    """Write ``<enroll> <test> target|nontarget <score>`` lines (scores with float32 round-trip precision)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        for enroll, test, target, score in zip(subset.enroll, subset.test, subset.targets, subset.scores):
            handle.write(f"{enroll} {test} {'target' if target else 'nontarget'} {float(score):.9g}\n")
    return path


def read_scores(path):
    """Read a score file back: ``(enroll, test, targets bool array, scores float32 array)``.

    Raises ValueError naming file and line on a malformed line.
    """
    enroll, test, targets, scores = [], [], [], []
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            fields = line.split()
            if not fields:
                continue
            if len(fields) != 4 or fields[2] not in ("target", "nontarget"):
                raise ValueError(f"{path}:{number}: expected '<enroll> <test> target|nontarget <score>'")
            try:
                score = float(fields[3])
            except ValueError:
                raise ValueError(f"{path}:{number}: score {fields[3]!r} is not a number") from None
            enroll.append(fields[0])
            test.append(fields[1])
            targets.append(fields[2] == "target")
            scores.append(score)
    return enroll, test, np.array(targets, dtype=bool), np.array(scores, dtype=np.float32)


def write_system_report(results, folder, det_plot: bool = True, title: str | None = None) -> dict[str, Path]:
    """Write the score files, ``results.csv/.md/.json`` and ``det.png`` of one evaluated system.

    ``results`` is a :class:`segreconcat_aug.evaluation.SystemResults`.
    Returns the written paths by kind.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    written: dict[str, Path] = {}
    for name, subset in results.subsets.items():
        written[f"scores_{name}"] = write_scores(folder / "scores" / f"{name}.txt", subset)
    row = results.table_row()

    metric_keys = sorted({key for values in results.metrics.values() for key in values})
    with open(folder / "results.csv", "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["system", "subset", *metric_keys])
        for name, values in results.metrics.items():
            writer.writerow([results.system, name, *(values.get(key, "") for key in metric_keys)])
        for column in ("dev_avg", "test_avg", "avg"):
            if column in row:
                writer.writerow(
                    [results.system, column, *(row[column] if k == "eer" else "" for k in metric_keys)]
                )
    written["csv"] = folder / "results.csv"

    title = title or f"{results.system}: EER (%)"
    details = [
        [
            name,
            values["eer"],
            values.get("min_dcf_0.01"),
            values.get("min_dcf_0.05"),
            values["target_trials"],
            values["nontarget_trials"],
            values.get("skipped_trials", 0),
        ]
        for name, values in results.metrics.items()
    ]
    text = [
        f"# {title}",
        "",
        markdown_table(
            ["system", *[h for c, h in zip(TABLE_COLUMNS, TABLE_HEADERS) if c in row]],
            [[results.system, *row.values()]],
        ),
        "",
        markdown_table(
            ["subset", "EER (%)", "minDCF 0.01", "minDCF 0.05", "targets", "non-targets", "skipped"],
            details,
            4,
        ),
        "",
        "Options: " + ", ".join(f"{k}={v}" for k, v in results.options.items()),
        "",
    ]
    warnings = getattr(results, "warnings", None)
    if warnings:  # e.g. silent or too-short enrollment and trial files (scored all the same)
        text += ["Warnings:", "", *[f"- {warning}" for warning in warnings], ""]
    (folder / "results.md").write_text("\n".join(text), encoding="utf-8")
    written["markdown"] = folder / "results.md"

    payload = {
        "system": results.system,
        "table": row,
        "subsets": results.metrics,
        "options": results.options,
        "warnings": list(getattr(results, "warnings", None) or []),
        "scores": {name: f"scores/{name}.txt" for name in results.subsets},
    }
    (folder / "results.json").write_text(json.dumps(payload, indent=2, default=float), encoding="utf-8")
    written["json"] = folder / "results.json"

    if det_plot:
        curves = {
            name: det_curve(subset.target_scores, subset.nontarget_scores)
            for name, subset in results.subsets.items()
        }
        written["det"] = plot_det(curves, folder / "det.png", title=f"{results.system} DET")
    return written


def read_results(folder) -> dict:
    """The ``results.json`` of an evaluation folder."""
    path = Path(folder) / "results.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no results (run recipes/evaluate.py first)")
    return json.loads(path.read_text(encoding="utf-8"))


# ---------------------------------------------------------------------------------------------------
# DET figures
# ---------------------------------------------------------------------------------------------------

_DET_TICKS = (0.001, 0.01, 0.05, 0.2, 0.4, 0.6, 0.8, 0.95, 0.99)
_DET_LIMIT = 1e-3


def _draw_det(ax, curves: dict, title: str) -> None:
    from scipy.stats import norm

    for label, (far, frr) in curves.items():
        far = np.clip(np.asarray(far, float), _DET_LIMIT, 1 - _DET_LIMIT)
        frr = np.clip(np.asarray(frr, float), _DET_LIMIT, 1 - _DET_LIMIT)
        ax.plot(norm.ppf(far), norm.ppf(frr), label=label)
    ticks = norm.ppf(_DET_TICKS)
    labels = [f"{100 * t:g}" for t in _DET_TICKS]
    ax.set_xticks(ticks, labels)
    ax.set_yticks(ticks, labels)
    bound = norm.ppf([_DET_LIMIT, 1 - _DET_LIMIT])
    ax.set_xlim(*bound)
    ax.set_ylim(*bound)
    ax.plot(bound, bound, color="0.7", linewidth=0.8, linestyle=":")
    ax.set_xlabel("False acceptance rate (%)")
    ax.set_ylabel("False rejection rate (%)")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    if curves:
        ax.legend(loc="upper right", fontsize="small")


def plot_det(curves: dict, path, title: str = "DET") -> Path:
    """A DET figure (probit axes, in %), one line per entry of ``curves`` (label -> ``(far, frr)``)."""
    return plot_det_panels({title: curves}, path)


def plot_det_panels(panels: dict, path, title: str | None = None) -> Path:
    """DET figures side by side: ``panels`` maps a panel title to its curves (label -> ``(far, frr)``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    columns = 2 if len(panels) == 4 else len(panels)  # dev/test x f/m as a 2 x 2 grid
    rows = -(-len(panels) // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(5.5 * columns, 5.5 * rows), squeeze=False)
    try:
        for ax, (panel, curves) in zip(axes.ravel(), panels.items()):
            _draw_det(ax, curves, panel)
        if title:
            fig.suptitle(title)
        fig.tight_layout()
        fig.savefig(path, dpi=100)
    finally:
        plt.close(fig)
    return path


def det_from_score_file(path, max_points: int = 2000):
    """``(far, frr)`` of a score file (for figures combining runs)."""
    _, _, targets, scores = read_scores(path)
    return det_curve(scores[targets], scores[~targets], max_points=max_points)


# ---------------------------------------------------------------------------------------------------
# Published numbers
# ---------------------------------------------------------------------------------------------------


def load_reference_results(path=REFERENCE_FILE) -> list[dict]:
    """Published EERs (%): rows with ``source``, ``table``, ``system``, ``attacker``, the Table 2 columns.

    Empty cells become ``None``. Sources are named in each row.

    >>> rows = load_reference_results()
    >>> [r["avg"] for r in rows if r["table"] == "paper-table2" and r["system"] == "T8-5"]
    [37.39, 25.94]
    """
    rows = []
    lines = [line for line in Path(path).read_text(encoding="utf-8").splitlines() if not line.startswith("#")]
    for row in csv.DictReader(lines):
        for column in TABLE_COLUMNS:
            value = (row.get(column) or "").strip()
            row[column] = float(value) if value else None
        rows.append(row)
    return rows


def reference_value(references: list[dict], table: str, system: str, attacker: str, column: str = "avg"):
    """One published number, or None."""
    for row in references:
        if row["table"] == table and row["system"] == system and row["attacker"] == attacker:
            return row[column]
    return None


# ---------------------------------------------------------------------------------------------------
# Grid tables
# ---------------------------------------------------------------------------------------------------


def comparison_table(
    cells: dict,
    systems,
    baseline: str,
    compared,
    labels: dict | None = None,
    references: list[dict] | None = None,
) -> str:
    """Table 2 style: per system, the baseline row then each compared configuration with its difference.

    Parameters
    ----------
    cells : dict
        ``(system, configuration) -> table row`` (:func:`read_results`' ``table``);
        missing cells print as ``-``.
    systems : list of str
    baseline : str
        The configuration every other is compared with (``diff avg`` = config - baseline).
    compared : list of str
    labels : dict
        Configuration -> name in the table (e.g. ``SegReConcat+SpecAug``).
    references : list of dict
        Published rows; adds "published avg" columns (paper Table 2, challenge baseline).

    Example
    -------
    >>> row = dict(zip(TABLE_COLUMNS, [30.0, 20.0, 25.0, 30.0, 20.0, 25.0, 25.0]))
    >>> better = {k: v - 5 for k, v in row.items()}
    >>> print(comparison_table({("B3", "base"): row, ("B3", "src"): better}, ["B3"], "base", ["src"]))
    | system | attacker | dev F | dev M | dev avg | test F | test M | test avg | avg | diff avg |
    |---|---|---|---|---|---|---|---|---|---|
    | B3 | base | 30.00 | 20.00 | 25.00 | 30.00 | 20.00 | 25.00 | 25.00 | - |
    | B3 | src | 25.00 | 15.00 | 20.00 | 25.00 | 15.00 | 20.00 | 20.00 | -5.00 |
    """
    labels = labels or {}
    headers = ["system", "attacker", *TABLE_HEADERS, "diff avg"]
    if references is not None:
        headers += ["paper avg (published)", "challenge baseline avg (published)"]
    rows = []
    for system in systems:
        base = cells.get((system, baseline)) or {}
        for config in [baseline, *compared]:
            row = cells.get((system, config)) or {}
            values = [row.get(column) for column in TABLE_COLUMNS]
            diff = None
            if config != baseline and row.get("avg") is not None and base.get("avg") is not None:
                diff = row["avg"] - base["avg"]
            line = [system, labels.get(config, config), *values, diff]
            if references is not None:
                # The paper's row with the same attacker name (it reports one SegReConcat variant per system).
                paper = reference_value(references, "paper-table2", system, labels.get(config, config))
                challenge = reference_value(references, "vpac-baseline", system, "VPAC baseline")
                line += [paper, challenge if config == baseline else None]
            rows.append(line)
    return markdown_table(headers, rows)


def ablation_table(cells: dict, system: str, configs, labels: dict | None = None, references=None) -> str:
    """Table 1 style: average EER (%) of each configuration on one system (+ the paper's, when given).

    >>> cells = {("T8-5", "none"): {"avg": 37.0}}
    >>> print(ablation_table(cells, "T8-5", ["none", "rr"], {"none": "No Augmentation"}))
    | method | avg EER (%) |
    |---|---|
    | No Augmentation | 37.00 |
    | rr | - |
    """
    labels = labels or {}
    headers = ["method", "avg EER (%)"] + (
        ["paper avg EER (%) (published)"] if references is not None else []
    )
    rows = []
    for config in configs:
        label = labels.get(config, config)
        line = [label, (cells.get((system, config)) or {}).get("avg")]
        if references is not None:
            line.append(reference_value(references, "paper-table1", system, label))
        rows.append(line)
    return markdown_table(headers, rows)

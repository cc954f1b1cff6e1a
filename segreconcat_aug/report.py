"""Reports: score files, results tables in the paper's layout, DET figures.

Per system and run (:func:`write_system_report`), under the evaluation folder:

- ``scores/<subset>.txt``: ``<enroll-spk> <test-utt> target|nontarget <score> [<test-spk>]``
  (the test speaker when known; files without it stay readable);
- ``results.csv``: one row per subset (EER %, normalized minDCF, counts, each metric's
  95 % interval from a speaker bootstrap, :mod:`segreconcat_aug.bootstrap`) and the
  averages (``dev_avg``, ``test_avg``, ``avg``, EER only);
- ``results.md``: the paper's Table 2 columns (dev f / m / avg, test f / m / avg,
  average of the four) with a row of intervals, followed by the per-subset details;
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
from typing import NamedTuple

import numpy as np

from .bootstrap import (
    SpeakerWeights,
    combine_seeds,
    format_interval,
    infer_test_speakers,
    interval_text,
    paired_difference,
    percentile_interval,
    resampled_metrics,
    speaker_counts,
    trial_design,
)
from .metrics import det_curve
from .protocols import GENDER_ROWS, MIXED_TABLE, VPAC_TABLE, get_protocol

# The default (VPAC 2024) table; a protocol's own is protocols.get_protocol(name).table.
TABLE_COLUMNS = VPAC_TABLE.columns
SUBSET_COLUMNS = VPAC_TABLE.subsets
TABLE_HEADERS = VPAC_TABLE.headers
#: Every numeric column reference_results.csv may fill (VPAC 2024's and VPC 2026's).
REFERENCE_COLUMNS = tuple(dict.fromkeys([*VPAC_TABLE.columns, *MIXED_TABLE.columns]))
REFERENCE_FILE = Path(__file__).with_name("reference_results.csv")
#: Bootstrap settings when the caller gives none (the YAML keys eval_bootstrap_resamples / _seed).
BOOTSTRAP_DEFAULTS = {"resamples": 1000, "seed": 1986}


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
    """Write ``<enroll> <test> target|nontarget <score> [<test-spk>]`` lines (float32 round-trip precision).

    The fifth column (the test utterance's speaker, for the speaker bootstrap) is
    written when ``subset.test_speakers`` knows every one.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    speakers = getattr(subset, "test_speakers", None)
    if speakers is None or any(speaker is None for speaker in speakers):
        speakers = [None] * len(subset.targets)
    with open(path, "w", encoding="utf-8") as handle:
        for enroll, test, target, score, speaker in zip(
            subset.enroll, subset.test, subset.targets, subset.scores, speakers
        ):
            tail = f" {speaker}" if speaker is not None else ""
            handle.write(f"{enroll} {test} {'target' if target else 'nontarget'} {float(score):.9g}{tail}\n")
    return path


class ScoreFile(NamedTuple):
    """A score file's columns; ``test_speakers`` is None for files without the fifth column."""

    enroll: list
    test: list
    targets: np.ndarray
    scores: np.ndarray
    test_speakers: list | None


def read_score_file(path) -> ScoreFile:
    """Read a score file with or without the test-speaker column.

    Raises ValueError naming file and line on a malformed line (or a file mixing 4 and 5 columns).
    """
    enroll, test, targets, scores, speakers = [], [], [], [], []
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            fields = line.split()
            if not fields:
                continue
            if len(fields) not in (4, 5) or fields[2] not in ("target", "nontarget"):
                raise ValueError(
                    f"{path}:{number}: expected '<enroll> <test> target|nontarget <score> [<test-spk>]'"
                )
            if speakers and (len(fields) == 5) != (speakers[0] is not None):
                raise ValueError(
                    f"{path}:{number}: {len(fields)} columns where line 1 has a different number"
                )
            try:
                score = float(fields[3])
            except ValueError:
                raise ValueError(f"{path}:{number}: score {fields[3]!r} is not a number") from None
            enroll.append(fields[0])
            test.append(fields[1])
            targets.append(fields[2] == "target")
            scores.append(score)
            speakers.append(fields[4] if len(fields) == 5 else None)
    has_speakers = bool(speakers) and speakers[0] is not None
    return ScoreFile(
        enroll,
        test,
        np.array(targets, dtype=bool),
        np.array(scores, dtype=np.float32),
        speakers if has_speakers else None,
    )


def read_scores(path):
    """Read a score file back: ``(enroll, test, targets bool array, scores float32 array)``.

    Raises ValueError naming file and line on a malformed line.
    """
    return tuple(read_score_file(path)[:4])


# ---------------------------------------------------------------------------------------------------
# Intervals (speaker bootstrap)
# ---------------------------------------------------------------------------------------------------


def table_averages(values: dict, table=None) -> dict:
    """A table's columns from per-subset values (numbers or arrays of resamples): subsets and averages.

    ``table``: a :class:`segreconcat_aug.protocols.TableLayout` (default: the paper's Table 2, part
    averages and the average of the four); an average is the mean of its subsets present.

    >>> float(table_averages({"dev_f": 30.0, "dev_m": 20.0, "test_f": 10.0, "test_m": 20.0})["avg"])
    20.0
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
    """The bootstrap's :class:`~segreconcat_aug.bootstrap.TrialDesign` of scored trials, and where the
    test speakers came from (``"utt2spk"`` or ``"inferred from target trials"``)."""
    speakers = getattr(subset, "test_speakers", None)
    source = "utt2spk"
    if speakers is None or any(speaker is None for speaker in speakers):
        inferred = infer_test_speakers(subset.enroll, subset.test, subset.targets)
        speakers = inferred if speakers is None else [s or i for s, i in zip(speakers, inferred)]
        source = "inferred from target trials"
    return trial_design(subset.enroll, speakers, subset.targets), source


def bootstrap_samples(
    subsets: dict, score_sets: list[dict], resamples: int, seed: int, p_targets=(0.01, 0.05), table=None
):
    """Resampled metrics of several attackers on the same trials, with the same speaker resamples.

    A pooled (mixed-gender) list links the speakers of both genders, so they are resampled
    together, as one stratum (:func:`segreconcat_aug.bootstrap.speaker_counts`). ``table``: the
    protocol's columns (default: Table 2's), whose averages are resampled too.

    Parameters
    ----------
    subsets : dict
        Subset name -> scored trials (``enroll``, ``test``, ``targets``, optional ``test_speakers``).
    score_sets : list of dict
        Per attacker: subset name -> scores in the trials' order.

    Returns
    -------
    (designs, samples)
        ``designs``: subset -> ``(TrialDesign, test-speaker source)``; ``samples``: per attacker,
        subset and Table 2 column -> metric -> ``(resamples,)`` array (averages: EER only).
    """
    designs = {name: subset_design(subset) for name, subset in subsets.items()}
    counts = speaker_counts([design for design, _ in designs.values()], resamples, seed)
    weights = {name: SpeakerWeights(design, counts) for name, (design, _) in designs.items()}
    samples = []
    for scores in score_sets:
        per_subset = {
            name: resampled_metrics(scores[name], subsets[name].targets, weights[name], p_targets)
            for name in subsets
        }
        averages = table_averages({name: values["eer"] for name, values in per_subset.items()}, table)
        for column, eers in averages.items():
            per_subset.setdefault(column, {"eer": eers})
        samples.append(per_subset)
    return designs, samples


def column_problem(designs: dict, column: str, table=None) -> str | None:
    """Why a subset or an average has no interval (the first of its subsets' problems), or None.

    >>> from segreconcat_aug.bootstrap import trial_design
    >>> bad = trial_design(["a", "a"], ["a", "b"], [True, False])
    >>> column_problem({"dev_f": (bad, ""), "test_f": (bad, "")}, "dev_avg")
    'dev_f: 1 target trial(s): a bootstrap needs at least two'
    """
    if column in designs:
        return designs[column][0].problem
    members = (table or VPAC_TABLE).averages.get(column, ())
    for name, (design, _) in designs.items():
        if name in members and design.problem:
            return f"{name}: {design.problem}"
    return None


def system_intervals(results, resamples: int, seed: int, p_targets=(0.01, 0.05)) -> dict:
    """Intervals of every subset metric and every table average of one system: column -> metric -> interval."""
    table = get_protocol(getattr(results, "protocol", None)).table
    designs, (samples,) = bootstrap_samples(
        results.subsets,
        [{n: s.scores for n, s in results.subsets.items()}],
        resamples,
        seed,
        p_targets,
        table,
    )
    intervals = {}
    for column, metrics in samples.items():
        problem = column_problem(designs, column, table)
        intervals[column] = {
            metric: percentile_interval(values, problem=problem) for metric, values in metrics.items()
        }
    sources = sorted({source for _, source in designs.values()})
    return {"intervals": intervals, "test_speakers": ", ".join(sources)}


def _interval_cells(interval: dict | None) -> list:
    if not interval:
        return ["", "", ""]
    return [blank(interval["low"]), blank(interval["high"]), interval.get("reason") or ""]


def blank(value):
    """``value``, or an empty cell for None."""
    return "" if value is None else value


def write_system_report(
    results, folder, det_plot: bool = True, title: str | None = None, bootstrap: dict | None = None
) -> dict[str, Path]:
    """Write the score files, ``results.csv/.md/.json`` and ``det.png`` of one evaluated system.

    ``results`` is a :class:`segreconcat_aug.evaluation.SystemResults`; its protocol names the
    table's columns (VPAC 2024: the paper's Table 2). ``bootstrap``:
    ``{"resamples": int, "seed": int}`` for the 95 % intervals (default
    :data:`BOOTSTRAP_DEFAULTS`; ``resamples: 0`` leaves them out).
    Returns the written paths by kind.
    """
    protocol = get_protocol(getattr(results, "protocol", None))
    language = getattr(results, "language", None)
    table = protocol.table
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    written: dict[str, Path] = {}
    for name, subset in results.subsets.items():
        written[f"scores_{name}"] = write_scores(folder / "scores" / f"{name}.txt", subset)
    row = results.table_row()
    settings = {**BOOTSTRAP_DEFAULTS, **(bootstrap or {})}
    p_targets = tuple(
        float(key[len("min_dcf_") :])
        for key in next(iter(results.metrics.values()), {})
        if key.startswith("min_dcf_")
    )
    intervals, speaker_source = {}, None
    if settings["resamples"] and results.subsets:
        found = system_intervals(results, int(settings["resamples"]), int(settings["seed"]), p_targets)
        intervals, speaker_source = found["intervals"], found["test_speakers"]
    ci_metrics = ["eer", *(f"min_dcf_{p:g}" for p in p_targets)]

    metric_keys = sorted({key for values in results.metrics.values() for key in values})
    ci_header = [f"{m}_ci_{side}" for m in ci_metrics for side in ("low", "high")] + ["ci_undefined_because"]

    def ci_fields(column, metrics):
        cells, reasons = [], []
        for metric in ci_metrics:
            low, high, reason = _interval_cells(
                intervals.get(column, {}).get(metric) if metric in metrics else None
            )
            cells += [low, high]
            if reason and reason not in reasons:
                reasons.append(reason)
        return cells + ["; ".join(reasons)]

    with open(folder / "results.csv", "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["system", "subset", *metric_keys, *(ci_header if intervals else [])])
        for name, values in results.metrics.items():
            extra = ci_fields(name, ci_metrics) if intervals else []
            writer.writerow([results.system, name, *(values.get(key, "") for key in metric_keys), *extra])
        for column in table.averages:
            if column in row:
                extra = ci_fields(column, ["eer"]) if intervals else []
                writer.writerow(
                    [
                        results.system,
                        column,
                        *(row[column] if k == "eer" else "" for k in metric_keys),
                        *extra,
                    ]
                )
    written["csv"] = folder / "results.csv"

    title = title or f"{results.system}{f' ({language})' if language else ''}: EER (%)"
    details = [
        [
            name,
            format_interval(values["eer"], intervals.get(name, {}).get("eer"), 2),
            *(format_interval(values.get(m), intervals.get(name, {}).get(m), 4) for m in ci_metrics[1:]),
            values["target_trials"],
            values["nontarget_trials"],
            values.get("skipped_trials", 0),
        ]
        for name, values in results.metrics.items()
    ]
    columns = [c for c in table.columns if c in row]
    table_rows = [[results.system, *row.values()]]
    if intervals:
        table_rows.append(["95 % CI", *(interval_text(intervals[c]["eer"]) for c in columns)])
    text = [
        f"# {title}",
        "",
        markdown_table(
            ["system", *[h for c, h in zip(table.columns, table.headers) if c in row]], table_rows
        ),
        "",
        markdown_table(
            ["subset", "EER (%)", *(f"minDCF {p:g}" for p in p_targets), "targets", "non-targets", "skipped"],
            details,
            4,
        ),
        "",
    ]
    text += [
        f"Protocol: {protocol.name} ({protocol.description})"
        + (f"; language {language}" if language else ""),
        "",
    ]
    skipped = sum(
        values.get("skipped_trials", 0) for name, values in results.metrics.items() if name in table.subsets
    )
    if skipped:
        text += [
            f"Skipped trials: {skipped} in all (an enrollment speaker without utterances or a test utterance "
            "without audio; see the warnings), left out of every metric.",
            "",
        ]
    if any(name.endswith(tuple(f"_{row}" for row in GENDER_ROWS)) for name in results.metrics):
        text += [
            "Rows `<list>_same` and `<list>_cross`: the pooled list's target trials with only its same-gender, or "
            "only its cross-gender, non-target trials (the cross-gender ones are the easy part of the pooled EER).",
            "",
        ]
    if intervals:
        text += [bootstrap_note(settings, speaker_source), ""]
        undefined = {
            f"{column} {metric}": interval["reason"]
            for column, metrics in intervals.items()
            for metric, interval in metrics.items()
            if interval["reason"]
        }
        text += [f"- no interval for {key}: {reason}" for key, reason in undefined.items()]
        text += [""] if undefined else []
    text += ["Options: " + ", ".join(f"{k}={v}" for k, v in results.options.items()), ""]
    warnings = getattr(results, "warnings", None)
    if warnings:  # e.g. silent or too-short enrollment and trial files (scored all the same)
        text += ["Warnings:", "", *[f"- {warning}" for warning in warnings], ""]
    (folder / "results.md").write_text("\n".join(text), encoding="utf-8")
    written["markdown"] = folder / "results.md"

    payload = {
        "system": results.system,
        "protocol": protocol.name,
        "language": language,
        "table": row,
        "subsets": results.metrics,
        "intervals": intervals,
        "bootstrap": {**settings, "unit": "speaker", "test_speakers": speaker_source} if intervals else None,
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


def bootstrap_note(settings: dict, speaker_source: str | None = None) -> str:
    """One line saying how the intervals were computed."""
    source = f"; test speakers {speaker_source}" if speaker_source else ""
    return (
        f"95 % CI: percentile interval of {settings['resamples']} speaker-bootstrap resamples "
        f"(seed {settings['seed']}{source}); see docs/evaluation.md."
    )


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


# ---------------------------------------------------------------------------------------------------
# Published numbers
# ---------------------------------------------------------------------------------------------------


def load_reference_results(path=REFERENCE_FILE) -> list[dict]:
    """Published EERs (%): rows with ``source``, ``table``, ``system``, ``attacker`` and the table columns
    of :data:`REFERENCE_COLUMNS` (VPAC 2024's Table 2 and VPC 2026's dev / test mixed).

    Empty cells become ``None``. Sources are named in each row.

    >>> rows = load_reference_results()
    >>> [r["avg"] for r in rows if r["table"] == "paper-table2" and r["system"] == "T8-5"]
    [37.39, 25.94]
    >>> [(r["dev_mixed"], r["test_mixed"]) for r in rows if r["table"] == "vpc2026-track1" and r["system"] == "B3"]
    [(16.321, 14.243)]
    """
    rows = []
    lines = [line for line in Path(path).read_text(encoding="utf-8").splitlines() if not line.startswith("#")]
    for row in csv.DictReader(lines):
        for column in REFERENCE_COLUMNS:
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
# Comparing runs (grid): seeds, intervals, paired differences
# ---------------------------------------------------------------------------------------------------


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


def compare_runs(runs: dict, baseline: str, resamples: int, seed: int, key: str = "", table=None) -> dict:
    """Intervals per configuration (seeds combined) and each configuration's paired difference to the baseline.

    Parameters
    ----------
    runs : dict
        Configuration -> list of runs, each ``{"seed", "table", "scores": {subset: ScoreFile}}``
        (:func:`read_score_file`), all on the same trial lists.
    baseline : str
        The configuration the others are compared with (``difference`` = configuration - baseline).
    resamples, seed : int
        Speaker-bootstrap resamples and seed; the same resamples serve every run.
    key : str
        Names the comparison (e.g. the system) in the seeds' generator.
    table : TableLayout, optional
        The protocol's columns (default: Table 2's).

    Returns
    -------
    dict
        Configuration -> ``{"table": mean row, "std": row std across seeds (None for one seed),
        "intervals": column -> interval, "seeds": [{"seed", "table", "intervals"}],
        "difference": column -> paired result (absent for the baseline)}``.
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
    designs, samples = bootstrap_samples(
        reference,
        [{n: run["scores"][n].scores for n in reference} for _, run in usable],
        resamples,
        seed,
        table=table,
    )
    by_run = {id(run): sample for (_, run), sample in zip(usable, samples)}
    columns = [c for c in table.columns if any(c in run["table"] for _, run in flat)]
    combined, summary = {}, {}
    for config, config_runs in runs.items():
        mean, std = seed_mean_std([run["table"] for run in config_runs], columns)
        problem = None
        if any(id(run) not in by_run for run in config_runs):
            problem = "its trial lists differ from the baseline's: no paired bootstrap"
        seeds = []
        for run in config_runs:
            sample = by_run.get(id(run), {})
            seeds.append(
                {
                    "seed": run["seed"],
                    "table": run["table"],
                    "intervals": {
                        c: percentile_interval(
                            sample[c]["eer"] if c in sample else [],
                            problem=problem or column_problem(designs, c, table),
                        )
                        for c in mean
                    },
                }
            )
        combined[config] = {
            c: combine_seeds([by_run[id(run)][c]["eer"] for run in config_runs], seed, f"{key}/{config}/{c}")
            if problem is None
            else np.full(resamples, np.nan)
            for c in mean
        }
        summary[config] = {
            "table": mean,
            "std": std,
            "intervals": {
                c: percentile_interval(
                    combined[config][c], problem=problem or column_problem(designs, c, table)
                )
                for c in mean
            },
            "seeds": seeds,
            "problem": problem,
        }
    for config, values in summary.items():
        if config == baseline or baseline not in summary:
            continue
        values["difference"] = {
            c: paired_difference(
                combined[config][c],
                combined[baseline][c],
                values["table"][c],
                summary[baseline]["table"][c],
                problem=values["problem"]
                or summary[baseline]["problem"]
                or column_problem(designs, c, table),
            )
            for c in values["table"]
            if c in summary[baseline]["table"]
        }
    return summary


def plot_forest(rows: list, path, title: str = "EER (%) with 95 % CI") -> Path:
    """A forest plot: one line per ``(label, point, low, high)`` (low/high None: the point alone, marked)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(8, 0.8 + 0.32 * len(rows)))
    try:
        for y, (_label, point, low, high) in enumerate(reversed(rows)):
            if low is None:
                ax.plot([point], [y], marker="x", color="tab:red")
            else:
                ax.plot([low, high], [y, y], color="tab:blue", linewidth=1.5)
                ax.plot([point], [y], marker="o", color="tab:blue", markersize=4)
        ax.set_yticks(range(len(rows)), [label for label, *_ in reversed(rows)], fontsize="small")
        ax.set_xlabel("EER (%): dot = estimate, bar = 95 % CI, x = no interval")
        ax.set_title(title)
        ax.grid(True, axis="x", alpha=0.3)
        fig.tight_layout()
        fig.savefig(path, dpi=100)
    finally:
        plt.close(fig)
    return path


# ---------------------------------------------------------------------------------------------------
# Grid tables
# ---------------------------------------------------------------------------------------------------


def _summary(cell) -> dict:
    """A grid cell as :func:`compare_runs` describes it (a plain table row: no intervals, one run)."""
    if not cell:
        return {"table": {}, "intervals": {}, "seeds": [], "std": None}
    return cell if "table" in cell else {"table": cell, "intervals": {}, "seeds": [], "std": None}


def _cell_text(value, interval, std=None) -> str:
    if value is None:
        return "-"
    text = format_interval(value, interval)
    if std is not None:
        head, _, tail = text.partition(" ")
        text = f"{head} ± {std:.2f}" + (f" {tail}" if tail else "")
    return text


def _diff_cells(difference) -> list:
    if not difference:
        return ["-", "-", "-"]
    text = format_interval(difference["difference"], difference if "low" in difference else None)
    if difference.get("p_value") is None:
        return [text, "-", "-"]
    return [text, f"{difference['p_value']:.3f}", "yes" if difference["significant"] else "no"]


def comparison_table(
    cells: dict,
    systems,
    baseline: str,
    compared,
    labels: dict | None = None,
    references: list[dict] | None = None,
    protocol: str | None = None,
) -> str:
    """Table 2 style: per system, the baseline row then each compared configuration with its difference.

    Parameters
    ----------
    cells : dict
        ``(system, configuration) -> cell``: a :func:`compare_runs` entry (EERs with their
        intervals, each seed's row and the mean ± std across seeds, the paired difference to the
        baseline with its interval, p-value and significance at 5 %) or a plain table row
        (:func:`read_results`' ``table``); missing cells print as ``-``.
    systems : list of str
    baseline : str
        The configuration every other is compared with (``diff avg`` = config - baseline).
    compared : list of str
    labels : dict
        Configuration -> name in the table (e.g. ``SegReConcat+SpecAug``).
    references : list of dict
        Published rows; adds "published avg" columns: those the protocol names (VPAC 2024: the
        paper's Table 2 and the challenge baseline; VPC 2026 Track 1: the challenge's own attacker).
    protocol : str, optional
        The protocol whose table columns and published numbers are shown (default ``vpac2024``).

    Example
    -------
    >>> row = dict(zip(TABLE_COLUMNS, [30.0, 20.0, 25.0, 30.0, 20.0, 25.0, 25.0]))
    >>> better = {k: v - 5 for k, v in row.items()}
    >>> print(comparison_table({("B3", "base"): row, ("B3", "src"): better}, ["B3"], "base", ["src"]))
    | system | attacker | dev F | dev M | dev avg | test F | test M | test avg | avg | diff avg [95 % CI] | p | significant (5 %) |
    |---|---|---|---|---|---|---|---|---|---|---|---|
    | B3 | base | 30.00 | 20.00 | 25.00 | 30.00 | 20.00 | 25.00 | 25.00 | - | - | - |
    | B3 | src | 25.00 | 15.00 | 20.00 | 25.00 | 15.00 | 20.00 | 20.00 | -5.00 | - | - |
    """
    labels = labels or {}
    scheme = get_protocol(protocol)
    columns = scheme.table.columns
    headers = ["system", "attacker", *scheme.table.headers, "diff avg [95 % CI]", "p", "significant (5 %)"]
    paper_table = scheme.published.get("paper")
    challenge_row = scheme.published.get("challenge")
    if references is not None:
        if paper_table:
            headers.append("paper avg (published)")
        if challenge_row:
            headers.append(f"{challenge_row[1]} avg (published)")
    rows = []
    for system in systems:
        base = _summary(cells.get((system, baseline)))
        for config in [baseline, *compared]:
            cell = _summary(cells.get((system, config)))
            label = labels.get(config, config)
            published = []
            if references is not None:
                if paper_table:
                    # The paper's row with the same attacker name (it reports one SegReConcat variant per system).
                    published.append(reference_value(references, paper_table, system, label))
                if challenge_row:
                    challenge = reference_value(references, *challenge_row[:1], system, challenge_row[1])
                    published.append(challenge if config == baseline else None)
            if len(cell["seeds"]) > 1:
                for run in cell["seeds"]:
                    values = [_cell_text(run["table"].get(c), run["intervals"].get(c)) for c in columns]
                    rows.append(
                        [
                            system,
                            f"{label}, seed {run['seed']}",
                            *values,
                            "",
                            "",
                            "",
                            *([""] * len(published)),
                        ]
                    )
                label = f"{label}, mean ± std of {len(cell['seeds'])} seeds"
            std = cell.get("std") or {}
            values = [_cell_text(cell["table"].get(c), cell["intervals"].get(c), std.get(c)) for c in columns]
            difference = (cell.get("difference") or {}).get("avg")
            if (
                difference is None
                and config != baseline
                and "avg" in cell["table"]
                and "avg" in base["table"]
            ):
                difference = {"difference": cell["table"]["avg"] - base["table"]["avg"]}
            rows.append(
                [system, label, *values, *_diff_cells(difference if config != baseline else None), *published]
            )
    return markdown_table(headers, rows)


def interval_notes(cells: dict) -> list[str]:
    """One line per undefined interval of the grid's cells: where, and why."""
    notes = {}
    for (system, config), cell in cells.items():
        cell = _summary(cell)
        sources = [
            ("", cell["intervals"]),
            *((f"seed {run['seed']} ", run["intervals"]) for run in cell["seeds"]),
        ]
        sources += [("difference ", cell.get("difference") or {})]
        for prefix, intervals in sources:
            for column, interval in intervals.items():
                if interval.get("reason"):
                    notes[f"{system} {config} {prefix}{column}"] = interval["reason"]
    return [f"- no interval for {where}: {why}" for where, why in notes.items()]


def ablation_table(cells: dict, system: str, configs, labels: dict | None = None, references=None) -> str:
    """Table 1 style: average EER (%) of each configuration on one system, with its interval (+ the paper's).

    >>> cells = {("T8-5", "none"): {"avg": 37.0}}
    >>> print(ablation_table(cells, "T8-5", ["none", "rr"], {"none": "No Augmentation"}))
    | method | avg EER (%) [95 % CI] |
    |---|---|
    | No Augmentation | 37.00 |
    | rr | - |
    """
    labels = labels or {}
    headers = ["method", "avg EER (%) [95 % CI]"] + (
        ["paper avg EER (%) (published)"] if references is not None else []
    )
    rows = []
    for config in configs:
        label = labels.get(config, config)
        cell = _summary(cells.get((system, config)))
        seeds = f" ({len(cell['seeds'])} seeds, mean ± std)" if len(cell["seeds"]) > 1 else ""
        line = [
            label + seeds,
            _cell_text(
                cell["table"].get("avg"), cell["intervals"].get("avg"), (cell.get("std") or {}).get("avg")
            ),
        ]
        if references is not None:
            line.append(reference_value(references, "paper-table1", system, label))
        rows.append(line)
    return markdown_table(headers, rows)


def language_table(cells: dict, systems, configs, languages, labels: dict | None = None) -> str:
    """VPC 2026 Track 2: per system and configuration, one row per language (its own attacker) and the average.

    ``cells`` are keyed ``(f"{system}/{language}", configuration)`` (as the grid names Track 2 cells).
    The average row covers the languages the challenge scores (en, de, fr, es) that have results, and
    says which; cn and ja rows, when there, come after it, outside the average. Each language's
    interval is its own attacker's; the average has none.

    >>> cells = {("BM1/de", "base"): {"dev_mixed": 20.0, "test_mixed": 10.0, "avg": 15.0},
    ...          ("BM1/fr", "base"): {"dev_mixed": 30.0, "test_mixed": 20.0, "avg": 25.0}}
    >>> print(language_table(cells, ["BM1"], ["base"], ["de", "fr", "cn"]))
    | system | attacker | language | dev mixed | test mixed | avg |
    |---|---|---|---|---|---|
    | BM1 | base | de | 20.00 | 10.00 | 15.00 |
    | BM1 | base | fr | 30.00 | 20.00 | 25.00 |
    | BM1 | base | average (de, fr) | 25.00 | 15.00 | 20.00 |
    """
    from .protocols import TRACK2_LANGUAGES

    labels = labels or {}
    columns = MIXED_TABLE.columns
    headers = ["system", "attacker", "language", *MIXED_TABLE.headers]
    rows = []
    for system in systems:
        for config in configs:
            label = labels.get(config, config)
            scored, others, present = [], [], []
            for language in languages:
                cell = _summary(cells.get((f"{system}/{language}", config)))
                is_scored = TRACK2_LANGUAGES[language].scored
                if not cell["table"] and not is_scored:
                    continue  # cn / ja: read when present
                std = cell.get("std") or {}
                values = [
                    _cell_text(cell["table"].get(c), cell["intervals"].get(c), std.get(c)) for c in columns
                ]
                (scored if is_scored else others).append([system, label, language, *values])
                if is_scored and all(c in cell["table"] for c in columns):
                    present.append((language, cell["table"]))
            rows += scored
            if present:
                average = [float(np.mean([table[c] for _, table in present])) for c in columns]
                names = ", ".join(language for language, _ in present)
                rows.append([system, label, f"average ({names})", *average])
            rows += others
    return markdown_table(headers, rows)

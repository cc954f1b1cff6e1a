"""The report of one evaluated system, under its evaluation folder (:func:`write_system_report`):
score files, ``results.csv/.md/.json``, ``per_speaker_eer.csv``, ``det.png`` and ``privacy.png``
(each file: docs/evaluation.md).

>>> markdown_table(["a", "b"], [[1, 2.5]])
'| a | b |\\n|---|---|\\n| 1 | 2.50 |'
"""

from __future__ import annotations

import csv
import dataclasses
import json
from pathlib import Path

import numpy as np

from ..data.protocols import GENDER_ROWS, get_protocol
from ..data.result_files import atomic_writer, file_digest, json_text, write_text
from .bootstrap import format_interval, interval_text, outside_note
from .figures import plot_det_panels, plot_privacy, privacy_panels
from .intervals import BOOTSTRAP_DEFAULTS, metric_problem, privacy_table, system_intervals
from .metrics import OPERATING_POINTS, det_curve
from .privacy import interval_names
from .score_files import write_scores


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


def blank(value):
    """``value``, or an empty cell for None."""
    return "" if value is None else value


def write_system_report(
    results,
    folder,
    det_plot: bool = True,
    title: str | None = None,
    bootstrap: dict | None = None,
    convergence: dict | None = None,
) -> dict[str, Path]:
    """Write the score files, ``results.csv/.md/.json`` and ``det.png`` of one evaluated system.

    ``results``: a :class:`segreconcat_aug.evaluation.system.SystemResults`. ``bootstrap``:
    ``{"resamples": int, "seed": int}`` for the 95 % intervals (default :data:`BOOTSTRAP_DEFAULTS`;
    ``resamples: 0`` leaves them out). With ``results.privacy``, the privacy metrics get intervals, a
    section in ``results.md``, ``per_speaker_eer.csv`` and ``privacy.png``. ``convergence``: the
    training run's :func:`segreconcat_aug.data.convergence.model_convergence` (None: unknown).
    Returns the written paths by kind.
    """
    protocol = get_protocol(results.protocol)
    language = results.language
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
    privacy = results.privacy
    intervals, speaker_source = {}, None
    if settings["resamples"] and results.subsets:
        found = system_intervals(
            results, int(settings["resamples"]), int(settings["seed"]), p_targets, privacy=privacy
        )
        intervals, speaker_source = found["intervals"], found["test_speakers"]
    privacy_metrics = interval_names(privacy) if privacy is not None else []
    dcf_metrics = [f"min_dcf_{p:g}" for p in p_targets]
    ci_metrics = ["eer", *dcf_metrics, *OPERATING_POINTS, *privacy_metrics]
    point_rows = {m: privacy_table(results.metrics, m, table) for m in [*OPERATING_POINTS, *privacy_metrics]}
    # Each column's values: a subset's metrics; an average's EER (the table row) and the other metrics' averages.
    averages = {
        column: {
            "eer": row[column],
            **{m: found[column] for m, found in point_rows.items() if column in found},
        }
        for column in table.averages
        if column in row
    }
    points = {**results.metrics, **averages}
    _note_points_outside(intervals, points)

    metric_keys = sorted(
        {key for values in results.metrics.values() for key, value in values.items() if _is_scalar(value)}
    )
    ci_header = [f"{m}_ci_{side}" for m in ci_metrics for side in ("low", "high")] + ["ci_undefined_because"]
    undefined = privacy is not None or any(v.get("undefined_because") for v in results.metrics.values())
    undefined_header = ["undefined_because"] if undefined else []

    def ci_fields(column):  # an average has no minDCF, nor its interval
        cells, reasons = [], []
        for metric in ci_metrics:
            interval = intervals.get(column, {}).get(metric) or {}
            cells += [blank(interval.get("low")), blank(interval.get("high"))]
            reason = interval.get("reason")
            # An operating point's own reason (a list too small) is in undefined_because.
            if reason and reason not in reasons and metric not in OPERATING_POINTS:
                reasons.append(reason)
        return cells + ["; ".join(reasons)]

    with atomic_writer(folder / "results.csv", newline="") as handle:  # each file whole, or not at all
        writer = csv.writer(handle)
        writer.writerow(
            ["system", "subset", *metric_keys, *(ci_header if intervals else []), *undefined_header]
        )
        for name, values in points.items():
            extra = ci_fields(name) if intervals else []
            if undefined_header:
                reasons = values.get("undefined_because") or {}
                extra.append("; ".join(f"{key}: {reason}" for key, reason in reasons.items()))
            writer.writerow([results.system, name, *(blank(values.get(key)) for key in metric_keys), *extra])
    written["csv"] = folder / "results.csv"

    title = title or f"{results.system}{f' ({language})' if language else ''}: EER (%)"
    details = [
        [
            name,
            format_interval(values["eer"], intervals.get(name, {}).get("eer"), 2),
            *(format_interval(values.get(m), intervals.get(name, {}).get(m), 4) for m in dcf_metrics),
            values["target_trials"],
            values["nontarget_trials"],
            values.get("skipped_trials", 0),
        ]
        for name, values in results.metrics.items()
    ]
    headers = dict(zip(table.columns, table.headers))
    table_rows = [[results.system, *row.values()]]  # the row's columns: the table's, in its order
    if intervals:
        table_rows.append(["95 % CI", *(interval_text(intervals[c]["eer"]) for c in row)])
    text = [
        f"# {title}",
        "",
        markdown_table(["system", *(headers[c] for c in row)], table_rows),
        "",
        markdown_table(
            ["subset", "EER (%)", *(f"minDCF {p:g}" for p in p_targets), "targets", "non-targets", "skipped"],
            details,
            4,
        ),
        "",
        *operating_points_markdown(results.metrics, intervals, points, table),
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
    text += calibration_markdown(results.metrics)
    if privacy is not None:
        text += privacy_markdown(results.metrics, intervals, averages, privacy)
    if intervals:
        text += [bootstrap_note(settings, speaker_source), ""]
        undefined = [  # a metric without a value already says why, in the privacy section
            f"- no interval for {column} {metric}: {interval['reason']}"
            for column, metrics in intervals.items()
            for metric, interval in metrics.items()
            if interval["reason"] and not metric_problem(results.metrics, column, metric, table)
        ]
        text += [*undefined, ""] if undefined else []
        outside = [
            f"- {column} {metric}: {interval['note']}"
            for column, metrics in intervals.items()
            for metric, interval in metrics.items()
            if interval.get("note")
        ]
        text += [*outside, ""] if outside else []
    text += convergence_markdown(convergence)
    text += ["Options: " + ", ".join(f"{k}={v}" for k, v in results.options.items()), ""]
    if results.warnings:  # e.g. silent or too-short enrollment and trial files (scored all the same)
        text += ["Warnings:", "", *[f"- {warning}" for warning in results.warnings], ""]
    written["markdown"] = write_text(folder / "results.md", "\n".join(text))

    subsets_json = {
        name: {
            **values,
            **{
                f"{metric}_ci": _ci_pair(intervals.get(name, {}).get(metric))
                for metric in ci_metrics
                if intervals and metric in values
            },
        }
        for name, values in results.metrics.items()
    }
    payload = {
        "system": results.system,
        "protocol": protocol.name,
        "language": language,
        "table": row,
        "subsets": subsets_json,
        "intervals": intervals,
        "operating_points": {metric: point_rows[metric] for metric in OPERATING_POINTS},
        "bootstrap": {**settings, "unit": "speaker", "test_speakers": speaker_source} if intervals else None,
        "options": results.options,
        "warnings": list(results.warnings),
        "scores": {name: f"scores/{name}.txt" for name in results.subsets},
        # What the numbers above were computed from: a score file changed since is noticed (the grid).
        "score_digests": {name: file_digest(written[f"scores_{name}"]) for name in results.subsets},
        "convergence": convergence,
    }
    if privacy is not None:
        payload["privacy_table"] = {metric: point_rows[metric] for metric in privacy_metrics}
        payload["privacy_options"] = dataclasses.asdict(privacy)
        written["per_speaker_eer"] = write_per_speaker_eer(folder / "per_speaker_eer.csv", results)
    if det_plot:
        curves = {
            name: det_curve(subset.target_scores, subset.nontarget_scores)
            for name, subset in results.subsets.items()
        }
        written["det"] = plot_det_panels({f"{results.system} DET": curves}, folder / "det.png")
        if privacy is not None:
            written["privacy"] = plot_privacy(
                {results.system: privacy_panels(results)},
                folder / "privacy.png",
                title=f"{results.system}: risk per speaker and linkability",
            )
    # Written last: a folder with results.json is a finished evaluation (the grid reads it). JSON has no NaN
    # or infinity: json_text writes null (each undefined value's reason is in undefined_because).
    written["json"] = write_text(folder / "results.json", json_text(payload, indent=2))
    return written


def convergence_markdown(found: dict | None) -> list[str]:
    """The section of ``results.md`` on the attacker's training (``found``: the run's
    :func:`segreconcat_aug.data.convergence.convergence`; None: not a training run of this toolkit).

    >>> print("\\n".join(convergence_markdown(None)))
    ## Convergence of the attacker's training (docs/evaluation.md#convergence-flags)
    <BLANKLINE>
    Unknown: the evaluated model folder holds no convergence.json (not a training run of this toolkit).
    <BLANKLINE>
    """
    text = ["## Convergence of the attacker's training (docs/evaluation.md#convergence-flags)", ""]
    if found is None:
        return text + [
            "Unknown: the evaluated model folder holds no convergence.json (not a training run of this toolkit).",
            "",
        ]
    if "best_epoch" not in found:
        return text + [f"Unknown: {found.get('problem', 'no epochs')}.", ""]
    if found["flags"]:
        text += ["**Flags: this EER may overstate privacy** (the attacker may be under-trained):", ""]
        text += [f"- {flag['text']}" for flag in found["flags"]] + [""]
    else:
        text += ["No flag.", ""]
    limit = f" (limit {found['limit']})" if found.get("limit") else ""
    slope = found.get("dev_loss_slope")
    numbers = [
        f"epochs run: {found['last_epoch']}{limit}, {'stopped early' if found['stopped_early'] else 'not stopped early'}",
        f"best dev loss {found['best_dev_loss']:.4f} at epoch {found['best_epoch']}"
        + (" (the exported model)" if found.get("selected_by", "dev_loss") == "dev_loss" else ""),
        (
            f"dev-loss trend over the last {found['slope_window']} epochs: {100 * slope:+.1f} % per epoch"
            if slope is not None
            else "dev-loss trend: undefined (one epoch)"
        ),
    ]
    if found.get("relative_gap") is not None:
        numbers.append(
            f"training loss at the best epoch {found['train_loss_at_best']:.4f}: dev - train "
            f"{found['train_dev_gap']:+.4f} ({100 * found['relative_gap']:+.0f} %)"
        )
    covered = found.get("coverage")
    if covered:
        reasons = ", ".join(f"{key} {count}" for key, count in covered["reasons"].items()) or "none"
        numbers.append(
            f"SegReConcat coverage (epoch {covered['epoch']}): {covered['augmented']} of {covered['rows']} "
            f"training rows augmented as asked, {covered['fell_back']} fell back ({reasons})"
        )
    else:
        numbers.append("SegReConcat coverage: no augmentation asked")
    if found.get("selected_by", "dev_loss") != "dev_loss":
        numbers.append(f"the exported model: the checkpoint of the lowest {found['selected_by']} (select_by)")
    return text + [f"- {line}" for line in numbers] + [""]


def operating_points_markdown(metrics: dict, intervals: dict, points: dict, table) -> list[str]:
    """The operating points' table of ``results.md`` (``points``: each subset's and average's values),
    with each interval or why it is undefined."""

    def cell(column, metric):
        value = points[column].get(metric)
        if value is None:
            return metric_problem(metrics, column, metric, table) or "-"
        return format_interval(value, intervals.get(column, {}).get(metric))

    rows = [[column, *(cell(column, m) for m in OPERATING_POINTS)] for column in points]
    headers = ["subset", *(header for key, header, _ in OPERATING_POINT_COLUMNS)]
    return ["Low false-alarm operating points (docs/evaluation.md):", "", markdown_table(headers, rows), ""]


def calibration_markdown(metrics: dict) -> list[str]:
    """With ``eval_calibration: qmf``, the calibrated EER, Cllr and minCllr beside the raw scores'."""
    names = [name for name, values in metrics.items() if "qmf_eer" in values]
    if not names:
        return []
    keys = ("eer", "qmf_eer", "cllr", "qmf_cllr", "min_cllr", "qmf_min_cllr")
    headers = ["subset", "EER (%)", "QMF EER (%)", "Cllr", "QMF Cllr", "minCllr", "QMF minCllr"]
    rows = [[name, *(metrics[name].get(key) for key in keys)] for name in names]
    return [
        "QMF calibration (docs/evaluation.md): fitted on the dev lists, applied to the test lists; dev's own "
        "numbers cross-validated by enrollment speaker. Raw Cllr and minCllr: the privacy metrics'.",
        "",
        markdown_table(headers, rows, 3),
        "",
    ]


def _note_points_outside(intervals: dict, points: dict) -> None:
    """Add :func:`~segreconcat_aug.evaluation.bootstrap.outside_note` to each interval outside its point
    (``points``: each subset's and average's values)."""
    digits = {key: places for key, _, places in PRIVACY_COLUMNS}
    for column, found in intervals.items():
        for metric, interval in found.items():
            point = points.get(column, {}).get(metric)
            places = (
                4
                if metric.startswith("min_dcf_")
                else digits.get(metric, digits["top5"] if metric.startswith("top") else 2)
            )
            note = outside_note(point if isinstance(point, (int, float)) else None, interval, places)
            if note:
                interval["note"] = note


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


#: Columns of the operating points' table in results.md: (key, header, decimals).
OPERATING_POINT_COLUMNS = (
    ("tpr_at_fpr_1", "TPR at FPR 1 % (%)", 2),
    ("tpr_at_fpr_0.1", "TPR at FPR 0.1 % (%)", 2),
    ("fpr_at_fnr_1", "FPR at FNR 1 % (%)", 2),
)
#: Columns of the privacy table in results.md: (key, header, decimals).
PRIVACY_COLUMNS = (
    ("linkability", "linkability D<->sys", 3),
    ("zebra_dece_bits", "ZEBRA D_ECE (bits)", 3),
    ("zebra_max_abs_log10_lr", "ZEBRA max abs log10 LR (tag)", 2),
    ("cllr", "Cllr (bits)", 3),
    ("min_cllr", "minCllr (bits)", 3),
    ("rocch_eer", "ROCCH-EER (%)", 2),
    ("rank1", "rank-1 (%)", 1),
    ("top5", "top-5 (%)", 1),
    ("pi_link", "pi_link", 3),
    ("singling_out", "Singling Out", 3),
    ("per_speaker_eer_share_below", "speakers below the EER threshold (%)", 1),
)


def _is_scalar(value) -> bool:
    return value is None or isinstance(value, (bool, int, float, str, np.number))


def _ci_pair(interval: dict | None):
    """``[low, high]`` of an interval, or None where it is undefined."""
    if not interval or interval.get("low") is None:
        return None
    return [interval["low"], interval["high"]]


def privacy_markdown(metrics: dict, intervals: dict, averages: dict, options) -> list[str]:
    """The privacy section of ``results.md``: a table per subset and average (``averages``: each table
    average's values), the worst speakers, the population sweeps and why a value is missing."""
    threshold = f"{options.speaker_eer_threshold:g} % EER"
    columns = [
        (
            f"top{options.top_k}" if key == "top5" else key,
            header.replace("top-5", f"top-{options.top_k}").replace("the EER threshold", threshold),
            digits,
        )
        for key, header, digits in PRIVACY_COLUMNS
    ]
    headers = ["subset", *(header for _, header, _ in columns)]

    def cell(column, key, value, digits):
        text = format_interval(value, intervals.get(column, {}).get(key), digits)
        if key == "zebra_max_abs_log10_lr" and column in metrics and value is not None:
            head, _, tail = text.partition(" ")
            text = f"{head} ({metrics[column]['zebra_tag']})" + (f" {tail}" if tail else "")
        return text

    # An average has a row where one of these metrics has its value.
    shown = {name: values for name, values in averages.items() if any(key in values for key, _, _ in columns)}
    rows = [
        [name, *(cell(name, key, values.get(key), digits) for key, _, digits in columns)]
        for name, values in {**metrics, **shown}.items()
    ]
    text = ["## Privacy beyond the EER (docs/evaluation.md)", "", markdown_table(headers, rows), ""]
    for name, values in metrics.items():
        worst = values.get("per_speaker_eer_worst") or []
        if worst:
            listed = ", ".join(f"{speaker} {eer:.1f}" for speaker, eer in worst)
            text.append(
                f"- {name}: lowest speaker EERs (%) {listed}; median {values['per_speaker_eer_median']:.1f} "
                f"over {len(values['per_speaker_eer'])} speakers (per_speaker_eer.csv)"
            )
    text.append("")
    for key, label in (
        ("pi_link_sweep", "pi_link by candidate-set size N'"),
        ("singling_out_sweep", "Singling Out by population size N"),
    ):
        sweeps = {name: values.get(key) or {} for name, values in metrics.items()}
        sizes = sorted({int(size) for sweep in sweeps.values() for size in sweep})
        if sizes:
            table = [
                [size, *(_fmt(sweeps[name].get(size, sweeps[name].get(str(size))), 3) for name in sweeps)]
                for size in sizes
            ]
            text += [f"{label}:", "", markdown_table(["N", *sweeps], table), ""]
    grouped: dict[tuple[str, str], list[str]] = {}  # one line per subset and reason, naming its metrics
    for name, values in metrics.items():
        for key, reason in (values.get("undefined_because") or {}).items():
            grouped.setdefault((name, reason), []).append(key)
    reasons = [
        f"- no value for {name} {', '.join(keys)}: {reason}" for (name, reason), keys in grouped.items()
    ]
    return text + reasons + ([""] if reasons else [])


def write_per_speaker_eer(path, results) -> Path:
    """``per_speaker_eer.csv``: system, subset, speaker, EER (%) and whether it is below the threshold."""
    path = Path(path)
    with atomic_writer(path, newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["system", "subset", "speaker", "eer", "below_threshold"])
        for name, values in results.metrics.items():
            threshold = values.get("per_speaker_eer_threshold")
            for speaker, value in sorted((values.get("per_speaker_eer") or {}).items(), key=lambda x: x[1]):
                writer.writerow([results.system, name, speaker, value, value < threshold])
    return path

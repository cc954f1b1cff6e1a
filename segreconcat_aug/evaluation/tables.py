"""The grid's markdown tables across runs (Table 2 and Table 1 styles, VPC 2026 Track 2 per language)
and their notes. Published numbers (:mod:`.references`) go in separate, labelled columns.
"""

from __future__ import annotations

import numpy as np

from ..data.protocols import MIXED_TABLE, TRACK2_LANGUAGES, get_protocol
from .bootstrap import format_interval, outside_note
from .references import reference_value
from .system_report import OPERATING_POINT_COLUMNS, PRIVACY_COLUMNS, markdown_table


def _summary(cell) -> dict:
    """A grid cell as :func:`~segreconcat_aug.evaluation.comparison.compare_runs` describes it."""
    if not cell:
        return {"table": {}, "intervals": {}, "seeds": [], "std": None}
    return cell if "table" in cell else {"table": cell, "intervals": {}, "seeds": [], "std": None}


def _cell_text(value, interval, std=None, digits: int = 2) -> str:
    if value is None:
        return "-"
    text = format_interval(value, interval, digits)
    if std is not None:
        head, _, tail = text.partition(" ")
        text = f"{head} ± {std:.{digits}f}" + (f" {tail}" if tail else "")
    return text


def privacy_label(metric: str) -> str:
    """A privacy metric's name in tables (``min_cllr`` -> ``minCllr (bits)``).

    >>> privacy_label("min_cllr"), privacy_label("top3")
    ('minCllr (bits)', 'top-3 (%)')
    """
    if metric.startswith("top") and metric[3:].isdigit():
        return f"top-{metric[3:]} (%)"
    return next(
        (header for key, header, _ in (*PRIVACY_COLUMNS, *OPERATING_POINT_COLUMNS) if key == metric), metric
    )


def _privacy_cells(cell, metrics, seed_index=None, compared: bool = False) -> list:
    """Table cells of the privacy columns: per metric the average [CI] and, for a compared
    configuration, its paired difference to the baseline [CI] with p."""
    cells = []
    for metric in metrics:
        summary = _summary(((cell.get("privacy") or {}).get(metric)) if "privacy" in cell else None)
        digits = next((digits for key, _, digits in PRIVACY_COLUMNS if key == metric), 2)
        if seed_index is not None and summary["seeds"]:
            run = summary["seeds"][seed_index]
            cells += [_cell_text(run["table"].get("avg"), run["intervals"].get("avg"), digits=digits), ""]
            continue
        std = (summary.get("std") or {}).get("avg")
        cells.append(_cell_text(summary["table"].get("avg"), summary["intervals"].get("avg"), std, digits))
        difference = (summary.get("difference") or {}).get("avg") if compared else None
        text, p_value, _ = _diff_cells(difference, digits)
        cells.append(text if p_value == "-" else f"{text}, p = {p_value}")
    return cells


def _diff_cells(difference, digits: int = 2) -> list:
    if not difference:
        return ["-", "-", "-"]
    text = format_interval(difference["difference"], difference if "low" in difference else None, digits)
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
    privacy_columns=(),
) -> str:
    """Table 2 style: per system, the baseline row then each compared configuration with its difference.

    ``cells``: ``(system, configuration) -> cell``, a :func:`compare_runs` entry or a plain table row
    (missing cells print as ``-``); ``diff avg`` = configuration - ``baseline``; ``labels``:
    configuration -> name in the table; ``references``: published rows, shown in the columns the
    ``protocol`` names; ``privacy_columns``: privacy metrics, each with its average [CI] and paired
    difference to the baseline.
    """
    labels = labels or {}
    scheme = get_protocol(protocol)
    columns = scheme.table.columns
    headers = ["system", "attacker", *scheme.table.headers, "diff avg [95 % CI]", "p", "significant (5 %)"]
    for metric in privacy_columns:
        headers += [f"{privacy_label(metric)} avg [95 % CI]", f"diff {privacy_label(metric)} [95 % CI]"]
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
            raw = cells.get((system, config)) or {}
            cell = _summary(raw)
            label = labels.get(config, config)
            published = []
            if references is not None:
                if paper_table:
                    # The paper's row with the same attacker name (it reports one SegReConcat variant per system).
                    published.append(reference_value(references, paper_table, system, label))
                if challenge_row:
                    challenge = reference_value(references, *challenge_row[:1], system, challenge_row[1])
                    published.append(challenge if config == baseline else None)
            label += flag_mark(raw)  # after the look-ups by attacker name
            if len(cell["seeds"]) > 1:
                for index, run in enumerate(cell["seeds"]):
                    values = [_cell_text(run["table"].get(c), run["intervals"].get(c)) for c in columns]
                    rows.append(
                        [
                            system,
                            f"{label}, seed {run['seed']}",
                            *values,
                            "",
                            "",
                            "",
                            *_privacy_cells(raw, privacy_columns, seed_index=index),
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
                [
                    system,
                    label,
                    *values,
                    *_diff_cells(difference if config != baseline else None),
                    *_privacy_cells(raw, privacy_columns, compared=config != baseline),
                    *published,
                ]
            )
    return markdown_table(headers, rows)


FLAG_MARK = " †"


def flag_mark(cell) -> str:
    """:data:`FLAG_MARK` for a cell whose attacker carries a convergence flag (``cell["flags"]``), else ``""``."""
    return FLAG_MARK if isinstance(cell, dict) and cell.get("flags") else ""


def convergence_notes(cells: dict, labels: dict | None = None) -> list[str]:
    """One line per cell marked :data:`FLAG_MARK`: its attacker's convergence flags (per seed).

    >>> cells = {("B3", "base"): {"flags": [{"seed": None, "name": "best_epoch_last", "text": "best epoch is the last"}]}}
    >>> convergence_notes(cells, {"base": "Baseline"})
    ['† B3 Baseline: best epoch is the last. Its EER may overstate privacy: docs/evaluation.md#convergence-flags']
    """
    labels = labels or {}
    notes = []
    for (system, config), cell in cells.items():
        flags = (cell or {}).get("flags") if isinstance(cell, dict) else None
        if not flags:
            continue
        texts = "; ".join(
            dict.fromkeys(
                (f"seed {flag['seed']}: " if flag.get("seed") is not None else "") + flag["text"]
                for flag in flags
            )
        )
        notes.append(
            f"{FLAG_MARK.strip()} {system} {labels.get(config, config)}: {texts}. Its EER may overstate privacy: "
            "docs/evaluation.md#convergence-flags"
        )
    return notes


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
        for metric, summary in (cell.get("privacy") or {}).items():
            sources += [
                (f"{metric} ", summary["intervals"]),
                (f"{metric} difference ", summary.get("difference") or {}),
            ]
            undefined = summary.get("undefined") or {}
            if undefined:  # one line per metric: the columns without a value, and the first subset's reason
                reason = next(
                    (r for c, r in undefined.items() if not c.endswith("avg")), next(iter(undefined.values()))
                )
                notes[f"{system} {config} {metric} ({', '.join(undefined)})"] = f"no value: {reason}"
        points = {"": cell["table"], **{f"seed {run['seed']} ": run["table"] for run in cell["seeds"]}}
        points.update(
            {
                f"{metric} ": summary.get("table") or {}
                for metric, summary in (cell.get("privacy") or {}).items()
            }
        )
        for prefix, intervals in sources:
            for column, interval in intervals.items():
                if interval.get("reason"):
                    notes[f"{system} {config} {prefix}{column}"] = interval["reason"]
                outside = outside_note((points.get(prefix) or {}).get(column), interval)
                if outside:
                    notes[f"{system} {config} {prefix}{column}"] = f"outside: {outside}"
    return [
        f"- {where}: {why.removeprefix('outside: ')}"
        if why.startswith("outside: ")
        else f"- no {'value' if why.startswith('no value: ') else 'interval'} for {where}: {why.removeprefix('no value: ')}"
        for where, why in notes.items()
    ]


def ablation_table(
    cells: dict, system: str, configs, labels: dict | None = None, references=None, privacy_columns=()
) -> str:
    """Table 1 style: average EER (%) of each configuration on one system, with its interval (+ the paper's).

    ``privacy_columns``: also the average of these privacy metrics, with their intervals.

    >>> cells = {("T8-5", "none"): {"avg": 37.0}}
    >>> print(ablation_table(cells, "T8-5", ["none", "rr"], {"none": "No Augmentation"}))
    | method | avg EER (%) [95 % CI] |
    |---|---|
    | No Augmentation | 37.00 |
    | rr | - |
    """
    labels = labels or {}
    headers = ["method", "avg EER (%) [95 % CI]"]
    headers += [f"{privacy_label(metric)} avg [95 % CI]" for metric in privacy_columns]
    headers += ["paper avg EER (%) (published)"] if references is not None else []
    rows = []
    for config in configs:
        label = labels.get(config, config)
        raw = cells.get((system, config)) or {}
        cell = _summary(raw)
        seeds = f" ({len(cell['seeds'])} seeds, mean ± std)" if len(cell["seeds"]) > 1 else ""
        line = [
            label + seeds + flag_mark(raw),
            _cell_text(
                cell["table"].get("avg"), cell["intervals"].get("avg"), (cell.get("std") or {}).get("avg")
            ),
            *_privacy_cells(raw, privacy_columns)[::2],
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
    """
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

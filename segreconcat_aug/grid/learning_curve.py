"""Learning curves: the same attacker trained on nested, seeded fractions of its training set.

If the EER still falls with more data, it measures the attacker's training budget as much as the
anonymizer (docs/evaluation.md#learning-curves).
"""

from __future__ import annotations

import json
from pathlib import Path

from ..data.convergence import FLAGS
from ..data.protocols import get_protocol
from ..errors import OptionError
from ..evaluation.bootstrap import format_interval
from ..evaluation.comparison import compare_runs
from ..evaluation.figures import plot_learning_curve
from ..evaluation.intervals import BOOTSTRAP_DEFAULTS
from ..evaluation.system_report import markdown_table

CURVE_DEFAULTS = {
    "learning_curve": False,
    "learning_curve_fractions": [0.25, 0.5, 1.0],
    "learning_curve_subsample": ["utterances"],
    "learning_curve_configurations": None,
}
SUBSAMPLE_AXES = {"utterances": "utterances per speaker", "speakers": "speakers"}


def bootstrap_settings(grid) -> dict:
    """``{"resamples", "seed"}`` of the grid's bootstrap (``bootstrap_resamples``, ``bootstrap_seed``)."""
    return {key: int(grid.get(f"bootstrap_{key}", default)) for key, default in BOOTSTRAP_DEFAULTS.items()}


def curve_setting(grid, key: str):
    """A learning-curve key of the grid, or its default (:data:`CURVE_DEFAULTS`)."""
    value = grid.get(key)
    return CURVE_DEFAULTS[key] if value is None else value


def curve_enabled(grid) -> bool:
    """Whether the grid asks for learning curves (``learning_curve: True``)."""
    return curve_setting(grid, "learning_curve") is True


def curve_fractions(grid) -> list[float]:
    """The curve's fractions, ascending, with 1 (the row itself) always among them.

    >>> curve_fractions({"learning_curve_fractions": [0.5, 0.25]})
    [0.25, 0.5, 1.0]
    """
    return sorted({float(f) for f in curve_setting(grid, "learning_curve_fractions")} | {1.0})


def curve_axes(grid) -> list[str]:
    """The subsampling axes (``utterances``, ``speakers``); a single name is a list of one."""
    axes = curve_setting(grid, "learning_curve_subsample")
    return [axes] if isinstance(axes, str) else list(axes)


def curve_rows(grid) -> list[str]:
    """The configurations that get a curve: ``learning_curve_configurations``, else Table 2's."""
    rows = grid.get("learning_curve_configurations")
    if rows is None:
        comparison = grid["comparison"]
        rows = [comparison["baseline"], *comparison.get("compared", [])]
    return list(dict.fromkeys(rows))


def point_name(row: str, axis: str, fraction: float) -> str:
    """The derived configuration of ``row`` at ``fraction`` of the training set (1: the row itself).

    >>> point_name("baseline", "utterances", 0.25), point_name("rr", "speakers", 0.125), point_name("rr", "speakers", 1)
    ('baseline@utterances25', 'rr@speakers12.5', 'rr')
    """
    if float(fraction) == 1:
        return row
    return f"{row}@{axis}{round(100 * float(fraction), 6):g}"


def check_learning_curve(grid, path="grid") -> None:
    """The learning-curve keys, checked with the rest of the grid (:func:`~segreconcat_aug.grid.plan.load_grid`)."""
    enabled = curve_setting(grid, "learning_curve")
    if not isinstance(enabled, bool):
        raise OptionError(f"{path}: learning_curve must be True or False, got {enabled!r}")
    fractions = curve_setting(grid, "learning_curve_fractions")
    if (
        not isinstance(fractions, list)
        or not fractions
        or any(isinstance(f, bool) or not isinstance(f, (int, float)) or not 0 < f <= 1 for f in fractions)
    ):
        raise OptionError(
            f"{path}: learning_curve_fractions must be a list of fractions in (0, 1], got {fractions!r}"
        )
    if len(curve_fractions(grid)) < 2:
        raise OptionError(f"{path}: learning_curve_fractions needs a fraction below 1, got {fractions!r}")
    axes = curve_setting(grid, "learning_curve_subsample")
    listed = [axes] if isinstance(axes, str) else axes
    if not isinstance(listed, list) or not listed or any(axis not in SUBSAMPLE_AXES for axis in listed):
        raise OptionError(
            f"{path}: learning_curve_subsample must be one or a list of {list(SUBSAMPLE_AXES)}, got {axes!r}"
        )
    rows = grid.get("learning_curve_configurations")
    if rows is not None:
        if not isinstance(rows, list) or not rows:
            raise OptionError(
                f"{path}: learning_curve_configurations must be null or a list of configurations, got {rows!r}"
            )
        unknown = [row for row in rows if row not in (grid.get("configurations") or {})]
        if unknown:
            raise OptionError(
                f"{path}: learning_curve_configurations names {unknown}, not defined under configurations"
            )


def _with_overrides(overrides, extra: dict):
    """A configuration's ``overrides`` (a string or a mapping) with ``extra`` added (replacing its keys)."""
    if isinstance(overrides, dict):
        return {**overrides, **extra}
    added = " ".join(f"--{key}={value}" for key, value in extra.items())
    return f"{overrides} {added}".strip() if overrides else added


def curve_configurations(grid) -> dict:
    """The derived configurations of the curves (name -> spec), for ``grid["configurations"]``.

    >>> grid = {"learning_curve": True, "comparison": {"baseline": "base"},
    ...         "configurations": {"base": {"label": "Baseline", "overrides": "--mode=none"}}}
    >>> curve_configurations(grid)["base@utterances25"]
    {'label': 'Baseline (25 % utterances)', 'overrides': '--mode=none --train_fraction=0.25 --train_subsample=utterances', 'curve': {'row': 'base', 'axis': 'utterances', 'fraction': 0.25}}
    """
    configurations = grid.get("configurations") or {}
    derived = {}
    for row in curve_rows(grid):
        spec = dict(configurations[row] or {})
        for axis in curve_axes(grid):
            for fraction in curve_fractions(grid)[:-1]:
                overrides = _with_overrides(
                    spec.get("overrides"), {"train_fraction": fraction, "train_subsample": axis}
                )
                label = f"{spec.get('label', row)} ({round(100 * fraction, 6):g} % {axis})"
                point = {**spec, "label": label, "overrides": overrides}
                point.pop("table1", None)
                point["curve"] = {"row": row, "axis": axis, "fraction": fraction}
                derived[point_name(row, axis, fraction)] = point
    return derived


def half_fraction(fractions) -> float:
    """The point the 100 % attacker is compared with: 50 % when there, else the fraction nearest half.

    >>> half_fraction([0.25, 0.5, 1.0]), half_fraction([0.1, 0.3, 1.0])
    (0.5, 0.3)
    """
    below = [f for f in fractions if f < 1]
    return min(below, key=lambda f: (abs(f - 0.5), -f))


def _hours(folder: Path) -> dict:
    """What a run trained on: its ``prep_summary.json``'s ``train_hours``, ``train_speakers`` and
    ``train_utterances``, or empty."""
    path = folder / "prep_summary.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def _mean(values):
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def learning_curves(grid, results: dict, units) -> dict:
    """Every curve's points and its paired test, from the grid's evaluated runs
    (``results``: ``(unit, configuration) -> runs``).
    """
    resamples, seed = bootstrap_settings(grid).values()
    table = get_protocol(grid.get("protocol")).table
    labels = {name: (spec or {}).get("label", name) for name, spec in grid["configurations"].items()}
    fractions = curve_fractions(grid)
    half = half_fraction(fractions)
    curves: dict = {}
    for unit in units:
        for row in curve_rows(grid):
            for axis in curve_axes(grid):
                names = {fraction: point_name(row, axis, fraction) for fraction in fractions}
                runs = {name: results[(unit, name)] for name in names.values() if (unit, name) in results}
                if not runs:
                    continue
                summary = {}
                if resamples and names[half] in runs:
                    summary = compare_runs(
                        runs, names[half], resamples, seed, key=f"{unit}/{row}/{axis}", table=table
                    )
                points = []
                for fraction, name in names.items():
                    if name not in runs:
                        continue
                    trained = [_hours(Path(run["folder"]).parent) for run in runs[name]]
                    cell = summary.get(name) or {}
                    points.append(
                        {
                            "fraction": fraction,
                            "configuration": name,
                            **{
                                key: _mean([t.get(f"train_{key}") for t in trained])
                                for key in ("hours", "speakers", "utterances")
                            },
                            "seeds": [run["seed"] for run in runs[name]],
                            "table": cell.get("table") or runs[name][0]["table"],
                            "intervals": cell.get("intervals") or {},
                            "flags": list(
                                dict.fromkeys(
                                    flag["name"]
                                    for run in runs[name]
                                    for flag in (run["results"].get("convergence") or {}).get("flags") or []
                                )
                            ),
                        }
                    )
                difference = ((summary.get(row) or {}).get("difference") or {}).get("avg")
                if difference is None and row in runs and names[half] in runs:
                    full, part = runs[row][0]["table"], runs[names[half]][0]["table"]
                    if "avg" in full and "avg" in part:
                        difference = {
                            "difference": full["avg"] - part["avg"],
                            "low": None,
                            "reason": "no bootstrap (bootstrap_resamples: 0)"
                            if not resamples
                            else "no interval",
                        }
                name = f"{unit} {labels.get(row, row)} ({SUBSAMPLE_AXES[axis]})"
                curves.setdefault(unit, {}).setdefault(row, {})[axis] = {
                    "label": labels.get(row, row),
                    "points": points,
                    "half": half,
                    "difference": difference,
                    "verdict": curve_verdict(difference, name, half)
                    if difference
                    else f"{name}: not evaluated",
                }
    return curves


def curve_verdict(difference: dict, name: str, half: float = 0.5) -> str:
    """The curve's plain sentence: is the 100 % attacker better than the one on ``half`` of the data?

    >>> curve_verdict({"difference": -4.0, "low": -6.5, "high": -1.5, "p_value": 0.002, "significant": True},
    ...               "B3 Baseline (utterances per speaker)")
    'B3 Baseline (utterances per speaker): still improving: the EER at 100 % is 4.0 points lower than at 50 % [1.5, 6.5] (p = 0.002), so this attacker is probably under-trained and the EER likely overstates privacy'
    >>> curve_verdict({"difference": -1.0, "low": -3.0, "high": 1.0, "p_value": 0.4, "significant": False}, "B3 RR")
    'B3 RR: no significant gain from doubling the data: the EER at 100 % is 1.0 points lower than at 50 % [-1.0, 3.0] (p = 0.4)'
    """
    percent = f"{round(100 * half, 6):g} %"
    step = "doubling the data" if half == 0.5 else f"going from {percent} to 100 % of the data"
    change = difference["difference"]
    said = f"{abs(change):.1f} points {'lower' if change <= 0 else 'higher'} than at {percent}"
    if difference.get("low") is None:
        why = difference.get("reason") or "no interval"
        return f"{name}: the EER at 100 % is {said}; no paired test ({why})"
    # "X points lower [CI]": the interval of the decrease, -(100 % - half).
    low, high = (
        (-difference["high"], -difference["low"]) if change <= 0 else (difference["low"], difference["high"])
    )
    test = f"[{low:.1f}, {high:.1f}] (p = {difference['p_value']:.2g})"
    if difference["significant"] and change < 0:
        return (
            f"{name}: still improving: the EER at 100 % is {said} {test}, so this attacker is probably "
            "under-trained and the EER likely overstates privacy"
        )
    return f"{name}: no significant gain from {step}: the EER at 100 % is {said} {test}"


def curve_table(curves: dict) -> str:
    """``learning_curve.md``'s body: a table per curve and its verdict."""
    parts = []
    for unit, rows in curves.items():
        for axes in rows.values():
            for axis, curve in axes.items():
                table_rows = []
                for point in curve["points"]:
                    table_rows.append(
                        [
                            f"{round(100 * point['fraction'], 6):g} %",
                            _count(point["speakers"]),
                            _count(point["utterances"]),
                            "-" if point["hours"] is None else f"{point['hours']:.3f}",
                            format_interval(point["table"].get("avg"), point["intervals"].get("avg")),
                            ", ".join("default" if s is None else str(s) for s in point["seeds"]),
                            ", ".join(FLAGS.get(name, name) for name in point["flags"]) or "-",
                        ]
                    )
                headers = ["fraction", "speakers", "utterances", "hours", "avg EER (%) [95 % CI]", "seeds"]
                headers.append("convergence flags")
                parts += [
                    f"## {unit}: {curve['label']}, subsampling {SUBSAMPLE_AXES[axis]}",
                    "",
                    markdown_table(headers, table_rows),
                    "",
                    curve["verdict"],
                    "",
                ]
    return "\n".join(parts)


def _count(value) -> str:
    return "-" if value is None else f"{value:g}"


def write_learning_curves(grid, results: dict, units, settings_note: str = "") -> dict[str, Path]:
    """Write ``learning_curve.md``, ``learning_curve.json`` and ``learning_curve_<unit>.png``; the paths by kind."""
    out = Path(grid["output_folder"])
    curves = learning_curves(grid, results, units)
    written = {}
    note = (
        "Each point: the same attacker trained on a nested, seeded fraction of the training set and "
        "evaluated on the same trials; hours are the training utterances' duration before augmentation "
        "(prep_summary.json). The verdict's paired test compares the 100 % attacker with the "
        f"{round(100 * half_fraction(curve_fractions(grid)), 6):g} % one on the same speaker resamples "
        "(docs/evaluation.md#learning-curves)." + (f" {settings_note}" if settings_note else "")
    )
    written["learning_curve"] = out / "learning_curve.md"
    written["learning_curve"].write_text(
        f"# Learning curves: EER against training data\n\n{note}\n\n{curve_table(curves)}", encoding="utf-8"
    )
    written["learning_curve_json"] = out / "learning_curve.json"
    written["learning_curve_json"].write_text(json.dumps(curves, indent=2, default=float), encoding="utf-8")
    for unit, rows in curves.items():
        lines = {}
        for axes in rows.values():
            for axis, curve in axes.items():
                points = [p for p in curve["points"] if p["hours"] and p["table"].get("avg") is not None]
                lines[f"{curve['label']} ({SUBSAMPLE_AXES[axis]})"] = [
                    (
                        p["hours"],
                        p["table"]["avg"],
                        p["intervals"].get("avg", {}).get("low"),
                        p["intervals"].get("avg", {}).get("high"),
                    )
                    for p in points
                ]
        if any(lines.values()):
            key = f"learning_curve_{unit.replace('/', '-')}"
            written[key] = plot_learning_curve(
                lines, out / f"{key}.png", title=f"{unit}: average EER (%) against training hours"
            )
    return written

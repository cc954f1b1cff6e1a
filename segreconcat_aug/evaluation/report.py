"""Reports: score files, results tables in the paper's layout, DET figures.

Per system and run (:func:`write_system_report`), under the evaluation folder:

- ``scores/<subset>.txt``: ``<enroll-spk> <test-utt> target|nontarget <score> [<test-spk>]``
  (the test speaker when known; files without it stay readable);
- ``results.csv``: one row per subset (EER %, normalized minDCF, counts, each metric's
  95 % interval from a speaker bootstrap, :mod:`segreconcat_aug.evaluation.bootstrap`) and the
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
import dataclasses
import json
from pathlib import Path
from typing import NamedTuple

import numpy as np

from ..data.protocols import GENDER_ROWS, MIXED_TABLE, VPAC_TABLE, get_protocol
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
from .privacy import ListPrivacy, interval_names

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

    ``table``: a :class:`segreconcat_aug.data.protocols.TableLayout` (default: the paper's Table 2, part
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
    """The bootstrap's :class:`~segreconcat_aug.evaluation.bootstrap.TrialDesign` of scored trials, and where the
    test speakers came from (``"utt2spk"`` or ``"inferred from target trials"``)."""
    speakers = getattr(subset, "test_speakers", None)
    source = "utt2spk"
    if speakers is None or any(speaker is None for speaker in speakers):
        inferred = infer_test_speakers(subset.enroll, subset.test, subset.targets)
        speakers = inferred if speakers is None else [s or i for s, i in zip(speakers, inferred)]
        source = "inferred from target trials"
    return trial_design(subset.enroll, speakers, subset.targets), source


def bootstrap_samples(
    subsets: dict,
    score_sets: list[dict],
    resamples: int,
    seed: int,
    p_targets=(0.01, 0.05),
    table=None,
    privacy=None,
    privacy_metrics=None,
):
    """Resampled metrics of several attackers on the same trials, with the same speaker resamples.

    A pooled (mixed-gender) list links the speakers of both genders, so they are resampled
    together, as one stratum (:func:`segreconcat_aug.evaluation.bootstrap.speaker_counts`). ``table``: the
    protocol's columns (default: Table 2's), whose averages are resampled too.

    Parameters
    ----------
    subsets : dict
        Subset name -> scored trials (``enroll``, ``test``, ``targets``, optional ``test_speakers``).
    score_sets : list of dict
        Per attacker: subset name -> scores in the trials' order.
    privacy : PrivacyOptions or None
        Also the privacy metrics of :mod:`segreconcat_aug.evaluation.privacy` (``privacy_metrics``: only these).

    Returns
    -------
    (designs, samples)
        ``designs``: subset -> ``(TrialDesign, test-speaker source)``; ``samples``: per attacker,
        subset and Table 2 column -> metric -> ``(resamples,)`` array (averages: EER and the privacy
        metrics).
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
        averaged = ["eer"]
        if privacy is not None:
            for name in subsets:
                found = ListPrivacy(subsets[name], designs[name][0], privacy, scores=scores[name]).resampled(
                    weights[name], privacy_metrics
                )
                per_subset[name].update(found)
            averaged += list(found)
        for metric in averaged:
            for column, values in table_averages({n: per_subset[n][metric] for n in subsets}, table).items():
                if column not in subsets:
                    per_subset.setdefault(column, {})[metric] = values
        samples.append(per_subset)
    return designs, samples


def column_problem(designs: dict, column: str, table=None) -> str | None:
    """Why a subset or an average has no interval (the first of its subsets' problems), or None.

    >>> from segreconcat_aug.evaluation.bootstrap import trial_design
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


def metric_problem(metrics: dict, column: str, metric: str, table=None) -> str | None:
    """Why ``metric`` has no value in a subset or average column (its ``undefined_because``), or None.

    ``table``: the protocol's :class:`~segreconcat_aug.data.protocols.TableLayout` (default: Table 2's),
    which names the subsets of each average.

    >>> metric_problem({"dev_f": {"undefined_because": {"linkability": "15 targets"}}}, "dev_avg", "linkability")
    'dev_f: 15 targets'
    """
    if column in metrics:
        return (metrics[column].get("undefined_because") or {}).get(metric)
    members = (table or VPAC_TABLE).averages.get(column, ())
    for name, values in metrics.items():
        reason = (values.get("undefined_because") or {}).get(metric)
        if name in members and reason:
            return f"{name}: {reason}"
    return None


def privacy_table(metrics: dict, metric: str, table=None) -> dict:
    """The table's columns of a privacy metric from per-subset values (``metrics``: subset -> values);
    an average is left out when one of its subsets has no value. ``table`` as :func:`table_averages`.

    >>> privacy_table({"dev_f": {"min_cllr": 0.5}, "dev_m": {"min_cllr": 0.7}, "test_f": {"min_cllr": None}}, "min_cllr")
    {'dev_f': 0.5, 'dev_m': 0.7, 'dev_avg': 0.6}
    """
    table = table or VPAC_TABLE
    defined = {name: values[metric] for name, values in metrics.items() if values.get(metric) is not None}
    missing = {name for name in metrics if name not in defined}
    row = {column: float(value) for column, value in table_averages(defined, table).items()}
    return {
        column: value
        for column, value in row.items()
        if column in defined or not missing.intersection(table.averages.get(column, ()))
    }


def system_intervals(results, resamples: int, seed: int, p_targets=(0.01, 0.05), privacy=None) -> dict:
    """Intervals of every subset metric and every table average of one system: column -> metric -> interval.

    ``privacy`` (PrivacyOptions): also the privacy metrics (their undefined reasons from ``results.metrics``).
    """
    table = get_protocol(getattr(results, "protocol", None)).table
    designs, (samples,) = bootstrap_samples(
        results.subsets,
        [{n: s.scores for n, s in results.subsets.items()}],
        resamples,
        seed,
        p_targets,
        table,
        privacy=privacy,
    )
    intervals = {}
    for column, metrics in samples.items():
        problem = column_problem(designs, column, table)
        intervals[column] = {
            metric: percentile_interval(
                values, problem=problem or metric_problem(results.metrics, column, metric, table)
            )
            for metric, values in metrics.items()
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

    ``results`` is a :class:`segreconcat_aug.evaluation.system.SystemResults`; its protocol names the
    table's columns (VPAC 2024: the paper's Table 2). ``bootstrap``:
    ``{"resamples": int, "seed": int}`` for the 95 % intervals (default
    :data:`BOOTSTRAP_DEFAULTS`; ``resamples: 0`` leaves them out). When ``results.privacy`` holds
    :class:`~segreconcat_aug.evaluation.privacy.PrivacyOptions` (its metrics are in ``results.metrics``), the
    privacy metrics get their intervals too, a section in ``results.md``, ``per_speaker_eer.csv``
    and ``privacy.png`` (with ``det_plot``).
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
    privacy = getattr(results, "privacy", None)
    intervals, speaker_source = {}, None
    if settings["resamples"] and results.subsets:
        found = system_intervals(
            results, int(settings["resamples"]), int(settings["seed"]), p_targets, privacy=privacy
        )
        intervals, speaker_source = found["intervals"], found["test_speakers"]
    privacy_metrics = interval_names(privacy) if privacy is not None else []
    dcf_metrics = [f"min_dcf_{p:g}" for p in p_targets]
    ci_metrics = ["eer", *dcf_metrics, *privacy_metrics]
    privacy_rows = {metric: privacy_table(results.metrics, metric, table) for metric in privacy_metrics}

    metric_keys = sorted(
        {key for values in results.metrics.values() for key, value in values.items() if _is_scalar(value)}
    )
    ci_header = [f"{m}_ci_{side}" for m in ci_metrics for side in ("low", "high")] + ["ci_undefined_because"]
    undefined_header = ["undefined_because"] if privacy is not None else []

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
        writer.writerow(
            ["system", "subset", *metric_keys, *(ci_header if intervals else []), *undefined_header]
        )
        for name, values in results.metrics.items():
            extra = ci_fields(name, ci_metrics) if intervals else []
            if undefined_header:
                reasons = values.get("undefined_because") or {}
                extra.append("; ".join(f"{key}: {reason}" for key, reason in reasons.items()))
            writer.writerow([results.system, name, *(blank(values.get(key)) for key in metric_keys), *extra])
        for column in table.averages:
            if column in row:
                extra = ci_fields(column, ["eer", *privacy_metrics]) if intervals else []
                writer.writerow(
                    [
                        results.system,
                        column,
                        *(
                            row[column] if k == "eer" else blank(privacy_rows.get(k, {}).get(column))
                            for k in metric_keys
                        ),
                        *extra,
                        *([""] if undefined_header else []),
                    ]
                )
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
    if privacy is not None:
        text += privacy_markdown(results.metrics, intervals, privacy_rows, privacy)
    if intervals:
        text += [bootstrap_note(settings, speaker_source), ""]
        undefined = {  # a metric without a value already says why, in the privacy section
            f"{column} {metric}": interval["reason"]
            for column, metrics in intervals.items()
            for metric, interval in metrics.items()
            if interval["reason"] and not metric_problem(results.metrics, column, metric, table)
        }
        text += [f"- no interval for {key}: {reason}" for key, reason in undefined.items()]
        text += [""] if undefined else []
    text += ["Options: " + ", ".join(f"{k}={v}" for k, v in results.options.items()), ""]
    warnings = getattr(results, "warnings", None)
    if warnings:  # e.g. silent or too-short enrollment and trial files (scored all the same)
        text += ["Warnings:", "", *[f"- {warning}" for warning in warnings], ""]
    (folder / "results.md").write_text("\n".join(text), encoding="utf-8")
    written["markdown"] = folder / "results.md"

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
        "bootstrap": {**settings, "unit": "speaker", "test_speakers": speaker_source} if intervals else None,
        "options": results.options,
        "warnings": list(getattr(results, "warnings", None) or []),
        "scores": {name: f"scores/{name}.txt" for name in results.subsets},
    }
    if privacy is not None:
        payload["privacy_table"] = privacy_rows
        payload["privacy_options"] = dataclasses.asdict(privacy)
        written["per_speaker_eer"] = write_per_speaker_eer(folder / "per_speaker_eer.csv", results)
    (folder / "results.json").write_text(json.dumps(payload, indent=2, default=float), encoding="utf-8")
    written["json"] = folder / "results.json"

    if det_plot:
        curves = {
            name: det_curve(subset.target_scores, subset.nontarget_scores)
            for name, subset in results.subsets.items()
        }
        written["det"] = plot_det(curves, folder / "det.png", title=f"{results.system} DET")
        if privacy is not None:
            written["privacy"] = plot_privacy(
                {results.system: privacy_panels(results)},
                folder / "privacy.png",
                title=f"{results.system}: risk per speaker and linkability",
            )
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
# Privacy metrics of one system (segreconcat_aug.evaluation.privacy)
# ---------------------------------------------------------------------------------------------------

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


def privacy_markdown(metrics: dict, intervals: dict, privacy_rows: dict, options) -> list[str]:
    """The privacy section of ``results.md``: a table per subset and average, the worst speakers, the
    population sweeps and why a value is missing."""
    top = f"top{options.top_k}"
    columns = [
        (top if key == "top5" else key, header.replace("top-5", f"top-{options.top_k}"), digits)
        for key, header, digits in PRIVACY_COLUMNS
    ]
    headers = [
        "subset",
        *(
            header.replace("the EER threshold", f"{options.speaker_eer_threshold:g} % EER")
            for _, header, _ in columns
        ),
    ]

    def cell(column, key, value, digits):
        text = format_interval(value, intervals.get(column, {}).get(key) if intervals else None, digits)
        if key == "zebra_max_abs_log10_lr" and column in metrics and value is not None:
            head, _, tail = text.partition(" ")
            text = f"{head} ({metrics[column]['zebra_tag']})" + (f" {tail}" if tail else "")
        return text

    rows = [
        [name, *(cell(name, key, values.get(key), digits) for key, _, digits in columns)]
        for name, values in metrics.items()
    ]
    for column in ("dev_avg", "test_avg", "avg"):
        if any(column in row for row in privacy_rows.values()):
            rows.append(
                [
                    column,
                    *(
                        cell(column, key, privacy_rows.get(key, {}).get(column), digits)
                        for key, _, digits in columns
                    ),
                ]
            )
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
    reasons = [
        f"- no value for {name} {key}: {reason}"
        for name, values in metrics.items()
        for key, reason in (values.get("undefined_because") or {}).items()
    ]
    return text + reasons + ([""] if reasons else [])


def write_per_speaker_eer(path, results) -> Path:
    """``per_speaker_eer.csv``: system, subset, speaker, EER (%) and whether it is below the threshold."""
    path = Path(path)
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["system", "subset", "speaker", "eer", "below_threshold"])
        for name, values in results.metrics.items():
            threshold = values.get("per_speaker_eer_threshold")
            for speaker, value in sorted((values.get("per_speaker_eer") or {}).items(), key=lambda x: x[1]):
                writer.writerow([results.system, name, speaker, value, value < threshold])
    return path


def privacy_panel(values: dict, target_scores, nontarget_scores) -> dict:
    """What :func:`plot_privacy` draws for one subset: its privacy values (``results.json``'s subset
    entry) and its target and non-target scores."""
    return {
        "per_speaker_eer": values.get("per_speaker_eer") or {},
        "worst": values.get("per_speaker_eer_worst") or [],
        "threshold": values.get("per_speaker_eer_threshold"),
        "linkability": values.get("linkability"),
        "local": values.get("linkability_local") or {},
        "reason": (values.get("undefined_because") or {}).get("linkability"),
        "target_scores": np.asarray(target_scores, dtype=np.float64),
        "nontarget_scores": np.asarray(nontarget_scores, dtype=np.float64),
    }


def privacy_panels(results) -> dict:
    """:func:`privacy_panel` of every subset of an evaluated system."""
    return {
        name: privacy_panel(results.metrics[name], subset.target_scores, subset.nontarget_scores)
        for name, subset in results.subsets.items()
        if name in results.metrics
    }


def _density(ax, scores, **style):
    """A Gaussian kernel density (Scott's bandwidth, 3 bandwidths beyond the data, as seaborn's kdeplot)."""
    from scipy.stats import gaussian_kde

    if len(scores) < 2 or np.ptp(scores) == 0:
        return 0.0
    kde = gaussian_kde(scores)
    width = 3 * np.sqrt(kde.covariance[0, 0])
    grid = np.linspace(scores.min() - width, scores.max() + width, 200)
    density = kde(grid)
    ax.plot(grid, density, **style)
    return float(density.max())


def plot_privacy(runs: dict, path, title: str | None = None) -> Path:
    """Risk per speaker and linkability: one column per subset.

    ``runs``: run label -> subset -> panel (:func:`privacy_panels`). Top row: the EER of every enrolled
    speaker, one strip per run, the threshold dashed and the lowest EERs labelled. Below, one row per
    run: the target and non-target score densities and the local linkability ``D(s)`` on the right
    axis, titled with ``D<->sys``, as VPC 2024's ``draw_linkability_scores`` draws them.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    subsets = list(dict.fromkeys(name for panels in runs.values() for name in panels))
    labels = list(runs)
    colors = ["#e66101", "#fdb863", "#b2abd2", "#5e3c99"]  # VPC's colour-blind friendly palette
    fig, axes = plt.subplots(
        1 + len(labels),
        max(1, len(subsets)),
        figsize=(4.6 * max(1, len(subsets)), 3.4 * (1 + len(labels))),
        squeeze=False,
    )
    rng = np.random.default_rng(0)  # the strip's vertical jitter only
    try:
        for j, name in enumerate(subsets):
            ax = axes[0, j]
            for y, label in enumerate(labels):
                panel = runs[label].get(name)
                if not panel:
                    continue
                speakers = list(panel["per_speaker_eer"])
                eers = np.array([panel["per_speaker_eer"][speaker] for speaker in speakers], dtype=np.float64)
                heights = y + rng.uniform(-0.2, 0.2, len(eers))
                ax.scatter(eers, heights, s=14, color=colors[3], alpha=0.8)
                where = dict(zip(speakers, heights))
                for speaker, value in panel["worst"]:
                    ax.annotate(
                        str(speaker),
                        (value, where.get(speaker, y)),
                        xytext=(3, 3),
                        textcoords="offset points",
                        fontsize="x-small",
                    )
                if panel["threshold"] is not None:
                    ax.axvline(panel["threshold"], color="0.5", linestyle="--", linewidth=0.8)
            ax.set_yticks(range(len(labels)), labels, fontsize="small")
            ax.set_ylim(-0.6, len(labels) - 0.4)
            ax.set_xlim(-2, 62)
            ax.set_xlabel("EER per enrolled speaker (%)")
            ax.set_title(f"{name}: risk per speaker")
            ax.grid(True, axis="x", alpha=0.3)
            for i, label in enumerate(labels, start=1):
                ax = axes[i, j]
                panel = runs[label].get(name)
                if not panel:
                    ax.set_axis_off()
                    continue
                styles = (
                    ("target_scores", colors[2], "--", "Same Speaker"),
                    ("nontarget_scores", colors[0], ":", "Not Same Speaker"),
                )
                peak = max(
                    _density(ax, panel[key], color=color, linewidth=2, linestyle=style, label=text)
                    for key, color, style, text in styles
                )
                ax.set_ylim(0, max(peak, 1e-9) * 1.05)
                ax.set_xlabel("Score")
                ax.set_ylabel("Probability Density")
                local = panel["local"]
                if panel["linkability"] is not None and local.get("D"):
                    twin = ax.twinx()
                    centers, d_local = np.asarray(local["bin_centers"]), np.asarray(local["D"])
                    twin.plot(centers, d_local, color=colors[3], linewidth=2, label="D(s)")
                    below = np.flatnonzero(d_local <= 0)
                    if below.size:
                        ax.axvline(centers[below[0]], color="k", linestyle="--", linewidth=0.8)
                    twin.set_ylim(0, 1.1)
                    twin.set_ylabel("D(s)")
                    ax.set_title(f"{label} {name}: D<->sys = {panel['linkability']:.2f}", fontsize="medium")
                else:
                    why = (panel["reason"] or "").split(":")[0]
                    ax.set_title(f"{label} {name}: D<->sys undefined\n({why})", fontsize="small")
                ax.legend(loc="upper left", fontsize="x-small")
        _save_figure(fig, path, title, dpi=90)
    finally:
        plt.close(fig)
    return path


def _save_figure(fig, path, title: str | None, dpi: int) -> None:
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)


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
        _save_figure(fig, path, title, dpi=100)
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


def compare_runs(
    runs: dict,
    baseline: str,
    resamples: int,
    seed: int,
    key: str = "",
    table=None,
    privacy=None,
    privacy_metrics=(),
) -> dict:
    """Intervals per configuration (seeds combined) and each configuration's paired difference to the baseline.

    Parameters
    ----------
    runs : dict
        Configuration -> list of runs, each ``{"seed", "table", "scores": {subset: ScoreFile}}``
        (:func:`read_score_file`), all on the same trial lists; with ``privacy_metrics`` also
        ``"metrics"``: subset -> point values (``results.json``'s ``subsets``).
    baseline : str
        The configuration the others are compared with (``difference`` = configuration - baseline).
    resamples, seed : int
        Speaker-bootstrap resamples and seed; the same resamples serve every run.
    key : str
        Names the comparison (e.g. the system) in the seeds' generator.
    table : TableLayout, optional
        The protocol's columns (default: Table 2's).
    privacy, privacy_metrics : PrivacyOptions, list of str
        Privacy metrics (:data:`segreconcat_aug.evaluation.privacy.INTERVAL_METRICS`) compared the same way.

    Returns
    -------
    dict
        Configuration -> ``{"table": mean row, "std": row std across seeds (None for one seed),
        "intervals": column -> interval, "seeds": [{"seed", "table", "intervals"}],
        "difference": column -> paired result (absent for the baseline)}`` for the EER, and under
        ``"privacy"`` the same per privacy metric.
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
    privacy_metrics = list(privacy_metrics or ())
    designs, samples = bootstrap_samples(
        reference,
        [{n: run["scores"][n].scores for n in reference} for _, run in usable],
        resamples,
        seed,
        table=table,
        privacy=privacy if privacy_metrics else None,
        privacy_metrics=privacy_metrics or None,
    )
    by_run = {id(run): sample for (_, run), sample in zip(usable, samples)}
    summary = _metric_summaries(
        runs, baseline, by_run, designs, "eer", lambda run: run["table"], resamples, seed, key, table
    )
    for metric in privacy_metrics:
        found = _metric_summaries(
            runs,
            baseline,
            by_run,
            designs,
            metric,
            lambda run, metric=metric: privacy_table(run.get("metrics") or {}, metric, table),
            resamples,
            seed,
            f"{key}/{metric}",
            table,
            lambda run, column, metric=metric: metric_problem(
                run.get("metrics") or {}, column, metric, table
            ),
        )
        for config, values in found.items():
            summary[config].setdefault("privacy", {})[metric] = values
    return summary


def _metric_summaries(
    runs, baseline, by_run, designs, metric, table_of, resamples, seed, key, table, point_problem=None
) -> dict:
    """:func:`compare_runs` for one metric: ``table_of(run)`` gives a run's point row in ``table``'s columns."""
    flat = [run for config_runs in runs.values() for run in config_runs]
    columns = [c for c in table.columns if any(c in table_of(run) for run in flat)]
    combined, summary = {}, {}
    for config, config_runs in runs.items():
        mean, std = seed_mean_std([table_of(run) for run in config_runs], columns)
        problem = None
        if any(id(run) not in by_run for run in config_runs):
            problem = "its trial lists differ from the baseline's: no paired bootstrap"

        def why(column, run=config_runs[0], problem=problem):
            return (
                problem
                or column_problem(designs, column, table)
                or (point_problem(run, column) if point_problem else None)
            )

        seeds = []
        for run in config_runs:
            sample = by_run.get(id(run), {})
            seeds.append(
                {
                    "seed": run["seed"],
                    "table": table_of(run),
                    "intervals": {
                        c: percentile_interval(
                            sample[c][metric] if metric in sample.get(c, {}) else [], problem=why(c, run)
                        )
                        for c in mean
                    },
                }
            )
        combined[config] = {
            c: combine_seeds([by_run[id(run)][c][metric] for run in config_runs], seed, f"{key}/{config}/{c}")
            if problem is None
            else np.full(resamples, np.nan)
            for c in mean
        }
        summary[config] = {
            "table": mean,
            "std": std,
            "intervals": {c: percentile_interval(combined[config][c], problem=why(c)) for c in mean},
            "seeds": seeds,
            "problem": problem,
        }
        if point_problem is not None:  # why a column has no value (e.g. linkability below 20 targets)
            undefined = {c: point_problem(config_runs[0], c) for c in table.columns if c not in mean}
            summary[config]["undefined"] = {c: reason for c, reason in undefined.items() if reason}
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
    return next((header for key, header, _ in PRIVACY_COLUMNS if key == metric), metric)


def _privacy_digits(metric: str) -> int:
    return next((digits for key, _, digits in PRIVACY_COLUMNS if key == metric), 2)


def _privacy_cells(cell, metrics, seed_index=None, compared: bool = False) -> list:
    """Table cells of the privacy columns: per metric the average [CI] and, for a compared
    configuration, its paired difference to the baseline [CI] with p."""
    cells = []
    for metric in metrics:
        summary = _summary(((cell.get("privacy") or {}).get(metric)) if "privacy" in cell else None)
        digits = _privacy_digits(metric)
        if seed_index is not None and summary["seeds"]:
            run = summary["seeds"][seed_index]
            cells += [_cell_text(run["table"].get("avg"), run["intervals"].get("avg"), digits=digits), ""]
            continue
        std = (summary.get("std") or {}).get("avg")
        cells.append(_cell_text(summary["table"].get("avg"), summary["intervals"].get("avg"), std, digits))
        difference = (summary.get("difference") or {}).get("avg") if compared else None
        if not difference:
            cells.append("-")
        else:
            text = format_interval(
                difference["difference"], difference if "low" in difference else None, digits
            )
            if difference.get("p_value") is not None:
                text += f", p = {difference['p_value']:.3f}"
            cells.append(text)
    return cells


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
    privacy_columns=(),
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
    privacy_columns : list of str
        Privacy metrics (e.g. ``["linkability", "min_cllr"]``): per metric the average over the subsets
        with its interval and the paired difference to the baseline (``compare_runs(privacy_metrics=...)``).

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
        for prefix, intervals in sources:
            for column, interval in intervals.items():
                if interval.get("reason"):
                    notes[f"{system} {config} {prefix}{column}"] = interval["reason"]
    return [
        f"- no {'value' if why.startswith('no value: ') else 'interval'} for {where}: {why.removeprefix('no value: ')}"
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
            label + seeds,
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

    >>> cells = {("BM1/de", "base"): {"dev_mixed": 20.0, "test_mixed": 10.0, "avg": 15.0},
    ...          ("BM1/fr", "base"): {"dev_mixed": 30.0, "test_mixed": 20.0, "avg": 25.0}}
    >>> print(language_table(cells, ["BM1"], ["base"], ["de", "fr", "cn"]))
    | system | attacker | language | dev mixed | test mixed | avg |
    |---|---|---|---|---|---|
    | BM1 | base | de | 20.00 | 10.00 | 15.00 |
    | BM1 | base | fr | 30.00 | 20.00 | 25.00 |
    | BM1 | base | average (de, fr) | 25.00 | 15.00 | 20.00 |
    """
    from ..data.protocols import TRACK2_LANGUAGES

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

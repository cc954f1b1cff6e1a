"""The privacy metrics in the reports: results.csv/.md/.json, per_speaker_eer.csv, privacy.png, the grid's
tables with their privacy columns and paired differences, and the options that switch them."""

import csv
import json
from pathlib import Path

import numpy as np
import pytest

from segreconcat_aug.errors import OptionError
from segreconcat_aug.evaluation import privacy
from segreconcat_aug.evaluation.comparison import compare_runs
from segreconcat_aug.evaluation.intervals import subset_design
from segreconcat_aug.evaluation.metrics import verification_metrics
from segreconcat_aug.evaluation.score_files import read_score_file
from segreconcat_aug.evaluation.system import add_privacy_metrics, load_evaluation_hparams, privacy_options
from segreconcat_aug.evaluation.system_report import write_system_report
from segreconcat_aug.evaluation.tables import comparison_table, interval_notes
from segreconcat_aug.evaluation.trials import SubsetScores, SystemResults
from segreconcat_aug.grid.plan import load_grid
from segreconcat_aug.grid.results import assemble

REPO = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).parent / "fixtures" / "privacy"
# Two lists where VPC's linkability is defined (48 and 50 targets) and two of the demo's (15: undefined).
LISTS = {"dev_f": "random.txt", "dev_m": "tied.txt", "test_f": "demo_test_f.txt", "test_m": "demo_test_m.txt"}
JSON_KEYS = [
    "linkability",
    "zebra_dece_bits",
    "zebra_max_abs_log10_lr",
    "zebra_tag",
    "cllr",
    "min_cllr",
    "rocch_eer",
    "rank1",
    "top5",
    "singling_out",
    "per_speaker_eer",
]
OPTIONS = privacy.PrivacyOptions(singling_out_folds=2)


def system(shift: float = 0.0, name: str = "S") -> SystemResults:
    subsets, metrics = {}, {}
    for subset, file in LISTS.items():
        found = read_score_file(FIXTURES / file)
        scores = (found.scores + shift * found.targets).astype(np.float32)
        subsets[subset] = SubsetScores(
            subset, Path(file), found.enroll, found.test, found.targets, scores, 0, found.test_speakers
        )
        metrics[subset] = verification_metrics(scores[found.targets], scores[~found.targets])
    return add_privacy_metrics(SystemResults(name, subsets, metrics), OPTIONS)


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    folder = tmp_path_factory.mktemp("eval")
    results = system()
    return results, folder, write_system_report(results, folder, bootstrap={"resamples": 200, "seed": 5})


def test_results_json_has_every_key_with_its_interval(written):
    results, _, files = written
    saved = json.loads(files["json"].read_text())
    for subset in LISTS:
        values = saved["subsets"][subset]
        assert all(key in values for key in JSON_KEYS)
        assert set(values["per_speaker_eer"]) == set(results.subsets[subset].enroll)
        for key in JSON_KEYS:
            if key in ("zebra_tag", "per_speaker_eer"):
                assert f"{key}_ci" not in values  # categorical, a mapping: no interval
                continue
            interval = values[f"{key}_ci"]
            if values[key] is None:
                assert interval is None and values["undefined_because"][key]
            elif interval is not None:
                assert interval[0] <= values[key] <= interval[1] or key == "zebra_max_abs_log10_lr"
    dev_f = saved["subsets"]["dev_f"]
    assert dev_f["linkability"] > 0 and dev_f["linkability_ci"][0] < dev_f["linkability_ci"][1]
    assert len(dev_f["linkability_local"]["D"]) == 4  # VPC's min(int(48 / 10), 100) bins
    assert saved["subsets"]["test_f"]["linkability"] is None
    assert "< 20" in saved["intervals"]["test_f"]["linkability"]["reason"]
    # Averages: defined where every subset of the part is.
    table = saved["privacy_table"]
    assert table["linkability"]["dev_avg"] == pytest.approx(
        (dev_f["linkability"] + saved["subsets"]["dev_m"]["linkability"]) / 2
    )
    assert "test_avg" not in table["linkability"] and "avg" not in table["linkability"]
    assert table["min_cllr"]["avg"] == pytest.approx(
        np.mean([saved["subsets"][s]["min_cllr"] for s in LISTS])
    )
    assert saved["privacy_options"]["singling_out_folds"] == 2


def test_results_csv_md_and_per_speaker_file(written):
    results, folder, files = written
    with open(files["csv"]) as handle:
        rows = {row["subset"]: row for row in csv.DictReader(handle)}
    assert (
        float(rows["dev_f"]["min_cllr_ci_low"])
        <= float(rows["dev_f"]["min_cllr"])
        <= float(rows["dev_f"]["min_cllr_ci_high"])
    )
    assert rows["test_f"]["linkability"] == "" and "linkability: " in rows["test_f"]["undefined_because"]
    assert rows["avg"]["min_cllr"] and rows["avg"]["min_cllr_ci_low"]
    with open(files["per_speaker_eer"]) as handle:
        speakers = list(csv.DictReader(handle))
    assert len(speakers) == sum(len(set(s.enroll)) for s in results.subsets.values())
    text = files["markdown"].read_text()
    assert "## Privacy beyond the EER" in text and "Singling Out by population size N" in text
    assert "no value for test_f linkability: 15 target trials (< 20)" in text
    assert "lowest speaker EERs" in text
    assert files["privacy"].read_bytes()[:4] == b"\x89PNG" and files["privacy"].stat().st_size > 20_000


def test_paired_comparison_of_privacy_metrics():
    base, better = system(), system(shift=0.4)
    runs = {
        config: [{"seed": None, "table": r.table_row(), "scores": r.subsets, "metrics": r.metrics}]
        for config, r in (("base", base), ("same", base), ("better", better))
    }
    summary = compare_runs(
        runs, "base", 300, 3, key="S", privacy=OPTIONS, privacy_metrics=["min_cllr", "linkability", "rank1"]
    )
    same = summary["same"]["privacy"]["min_cllr"]["difference"]["avg"]
    assert same["difference"] == 0 and same["low"] is None and "every valid resample" in same["reason"]
    found = summary["better"]["privacy"]["min_cllr"]["difference"]["avg"]
    assert found["difference"] == pytest.approx(
        better.metrics
        and np.mean([better.metrics[s]["min_cllr"] - base.metrics[s]["min_cllr"] for s in LISTS])
    )
    assert found["high"] < 0 and found["significant"]  # targets 0.4 higher: far more discriminable
    assert summary["better"]["privacy"]["rank1"]["difference"]["avg"]["difference"] > 0
    assert "avg" not in summary["base"]["privacy"]["linkability"]["table"]
    # The EER comparison is unchanged by the privacy columns.
    plain = compare_runs(runs, "base", 300, 3, key="S")
    assert plain["better"]["difference"] == summary["better"]["difference"]
    cells = {("S", config): values for config, values in summary.items()}
    table = comparison_table(cells, ["S"], "base", ["better"], privacy_columns=["min_cllr", "linkability"])
    header, _, base_row, better_row = table.splitlines()
    assert "minCllr (bits) avg [95 % CI]" in header and "diff linkability D<->sys [95 % CI]" in header
    assert ", p = " in better_row.split("|")[-4]  # the minCllr difference
    notes = interval_notes(cells)
    assert any("no value for S base linkability (test_f, test_m, test_avg, avg)" in note for note in notes)


def test_grid_writes_privacy_columns_csv_and_figure(tmp_path):
    out = tmp_path / "grid"
    for config, shift in (("baseline", 0.0), ("rr_concat", 0.3)):
        folder = out / "S" / config / "eval"
        write_system_report(system(shift), folder, det_plot=False, bootstrap={"resamples": 0})
    overrides = {
        "data_folder": str(tmp_path),
        "output_folder": str(out),
        "systems": ["S"],
        "comparison": {"baseline": "baseline", "compared": ["rr_concat"]},
        "ablation": {"system": "S", "configurations": ["baseline", "rr_concat"]},
        "tables_only": True,
        "show_published": False,
        "bootstrap_resamples": 100,
        "privacy_columns": ["linkability", "min_cllr"],
    }
    grid = load_grid(
        REPO / "hparams" / "grid.yaml", "\n".join(f"{k}: {json.dumps(v)}" for k, v in overrides.items())
    )
    written = assemble(grid)
    table2 = written["table2"].read_text()
    assert "minCllr (bits) avg [95 % CI]" in table2 and "no value for S baseline linkability" in table2
    assert "minCllr (bits) avg [95 % CI]" in written["table1"].read_text()
    with open(written["csv"]) as handle:
        row = next(r for r in csv.DictReader(handle) if r["configuration"] == "rr_concat")
    assert (
        float(row["min_cllr_avg_ci_low"]) <= float(row["min_cllr_avg"]) <= float(row["min_cllr_avg_ci_high"])
    )
    assert float(row["diff_min_cllr_avg"]) < 0
    assert written["privacy_S"].read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(ValueError, match="privacy_columns"):
        load_grid(REPO / "hparams" / "grid.yaml", "data_folder: x\nprivacy_columns: [eer_per_speaker]")


def test_privacy_options_from_the_yaml_keys():
    evaluate_yaml = REPO / "hparams" / "evaluate.yaml"
    shipped = load_evaluation_hparams(evaluate_yaml)
    assert shipped["eval_privacy"] is True
    assert privacy_options({**shipped, "eval_privacy": False}) is None
    options = privacy_options({**shipped, "eval_privacy_top_k": 3, "eval_privacy_speaker_eer_threshold": 5.0})
    assert options.top_k == 3 and options.speaker_eer_threshold == 5.0 and options.singling_out_folds == 10
    with pytest.raises(OptionError, match="eval_privacy_top_k"):
        load_evaluation_hparams(evaluate_yaml, {"eval_privacy_top_k": 0})
    with pytest.raises(OptionError, match="eval_privacy_speaker_eer_threshold"):
        load_evaluation_hparams(evaluate_yaml, {"eval_privacy_speaker_eer_threshold": 150})


def _strict_json(path):
    """The file parsed as JSON proper: NaN and Infinity, which Python would accept, fail."""

    def refuse(token):
        raise ValueError(f"{path}: {token} is not JSON")

    return json.loads(Path(path).read_text(), parse_constant=refuse)


def _crossed(name: str, speakers: int, utterances: int, score) -> SubsetScores:
    """Every enrolled speaker against every test utterance; ``score(target) -> scores``."""
    enroll, test, spk = [], [], []
    for e in range(speakers):
        for s in range(speakers):
            for u in range(utterances):
                enroll.append(f"{name}{e}"), test.append(f"{name}{s}-{u}"), spk.append(f"{name}{s}")
    targets = np.array([e == s for e, s in zip(enroll, spk)])
    return SubsetScores(name, Path(name), enroll, test, targets, score(targets).astype(np.float32), 0, spk)


def test_lists_the_metrics_cannot_read_are_undefined_with_their_reason_in_valid_json(tmp_path):
    """Issue 32, privacy 2-4: a model that learned nothing (every score equal), 1 target and 1 non-target,
    an infinite Cllr: null with the reason in results.json (valid JSON), results.md and the grid's tables."""
    rng = np.random.default_rng(3)
    subsets = {
        "dev_f": _crossed("dev_f", 5, 4, lambda t: np.full(len(t), 0.25)),  # 20 targets, all scores equal
        "dev_m": SubsetScores(
            "dev_m",
            Path("m"),
            ["a", "a"],
            ["a-1", "b-1"],
            np.array([True, False]),
            np.array([0.7, 0.2], dtype=np.float32),
            0,
            ["a", "b"],
        ),  # fmt: skip
        "test_f": _crossed(
            "test_f", 5, 4, lambda t: rng.normal(size=len(t)) + t - 800.0 * (np.arange(len(t)) == 0)
        ),
        "test_m": _crossed("test_m", 5, 4, lambda t: rng.normal(size=len(t)) + 2 * t),
    }
    metrics = {n: verification_metrics(s.scores[s.targets], s.scores[~s.targets]) for n, s in subsets.items()}
    results = add_privacy_metrics(SystemResults("S", subsets, metrics), OPTIONS)
    out = tmp_path / "grid"
    files = write_system_report(
        results, out / "S" / "baseline" / "eval", det_plot=False, bootstrap={"resamples": 50, "seed": 1}
    )
    saved = _strict_json(files["json"])["subsets"]
    flat = saved["dev_f"]
    for key in ("min_cllr", "rocch_eer", "zebra_max_abs_log10_lr", "zebra_tag", "linkability", "pi_link"):
        assert flat[key] is None and "the scores carry no information" in flat["undefined_because"][key], key
    assert "minCllr 0.000, ROCCH-EER 0.00 % and ZEBRA tag" in flat["undefined_because"]["min_cllr"]
    assert (
        flat["zebra_dece_bits"] == 0.0 and flat["min_cllr_ci"] is None
    )  # D_ECE pools the ties: no disclosure
    two = saved["dev_m"]
    for key in ("min_cllr", "rocch_eer", "zebra_dece_bits", "zebra_max_abs_log10_lr", "zebra_tag"):
        assert two[key] is None and "1 target and 1 non-target trial" in two["undefined_because"][key], key
    infinite = saved["test_f"]
    assert infinite["cllr"] is None and "Cllr is infinite" in infinite["undefined_because"]["cllr"]
    assert infinite["min_cllr"] is not None and saved["test_m"]["cllr"] is not None
    text = files["markdown"].read_text()
    assert (
        "no value for dev_f linkability, zebra_max_abs_log10_lr, zebra_tag, min_cllr, rocch_eer, pi_link: every score"
        in text
    )
    # The grid reads it back: Table 2's privacy columns say why, grid_results.json is valid JSON too.
    grid = load_grid(REPO / "hparams" / "grid.yaml", {
        "data_folder": str(tmp_path), "output_folder": str(out), "systems": ["S"], "tables_only": True,
        "comparison": {"baseline": "baseline", "compared": []}, "ablation": None, "show_published": False,
        "bootstrap_resamples": 50, "privacy_columns": ["min_cllr", "cllr"],
    })  # fmt: skip
    written = assemble(grid)
    _strict_json(written["json"])
    assert (
        "no value for S baseline min_cllr (dev_f, dev_m, dev_avg, avg): every score is the same"
        in written["table2"].read_text()
    )


def test_no_targets_or_no_non_targets_is_undefined_and_an_undefined_worst_case_has_no_tag():
    none = _crossed("x", 3, 2, lambda t: np.linspace(0, 1, len(t)))
    none = SubsetScores(
        "x",
        Path("x"),
        none.enroll,
        none.test,
        np.zeros_like(none.targets),
        none.scores,
        0,
        none.test_speakers,
    )
    metrics = privacy.ListPrivacy(none, subset_design(none)[0], OPTIONS).point()
    scalar = [*privacy.interval_names(OPTIONS), "zebra_tag"]
    assert all(
        metrics[k] is None and "0 target and 18 non-target trial(s)" in metrics["undefined_because"][k]
        for k in scalar
    )
    no_targets = privacy.CalibrationMetrics([0.1, 0.2], [False, False]).point
    assert privacy.zebra_tag(float("nan")) is None and np.isnan(no_targets["zebra_max_abs_log10_lr"])
    assert privacy.zebra_tag(float("inf")) == "F"


def test_a_point_outside_its_own_interval_is_said_so(tmp_path):
    """Issue 32, privacy 5: a percentile interval need not hold its point (a maximum-type statistic such as
    ZEBRA's worst case, an identification rate); the report says so wherever it happens, and only there."""
    files = write_system_report(system(), tmp_path, det_plot=False, bootstrap={"resamples": 200, "seed": 1})
    saved = _strict_json(files["json"])
    notes = 0
    for column, metrics in saved["intervals"].items():
        for metric, interval in metrics.items():
            if column in saved["subsets"]:
                point = saved["subsets"][column].get(metric)
            else:
                point = (saved["table"] if metric == "eer" else saved["privacy_table"].get(metric, {})).get(
                    column
                )
            outside = (
                interval["low"] is not None
                and point is not None
                and not interval["low"] <= point <= interval["high"]
            )
            assert bool(interval.get("note")) == outside, (column, metric, point, interval)
            if outside:
                notes += 1
                assert f"- {column} {metric}: the point " in files["markdown"].read_text()
    assert notes  # these resamples hold such a case (the average rank-1 rate)

"""Report files: score files, results.csv/.md/.json, DET figures, published reference numbers."""

import csv
import json
from pathlib import Path

import matplotlib.image
import numpy as np
import pytest

from segreconcat_aug.evaluation import SUBSETS, SubsetScores, SystemResults
from segreconcat_aug.metrics import eer, verification_metrics
from segreconcat_aug.report import (
    comparison_table,
    load_reference_results,
    read_scores,
    write_system_report,
)
from segreconcat_aug.vpac import VPAC_SYSTEMS


@pytest.fixture
def results():
    rng = np.random.default_rng(11)
    subsets, metrics = {}, {}
    for k, name in enumerate(SUBSETS):
        targets = np.r_[np.ones(30, bool), np.zeros(270, bool)]
        rng.shuffle(targets)
        scores = (rng.normal(size=300) + (0.5 + k) * targets).astype(np.float32)
        enroll = [f"spk{i % 3}" for i in range(300)]
        test = [f"utt{i}" for i in range(300)]
        subsets[name] = SubsetScores(name, Path(f"{name}/trials"), enroll, test, targets, scores)
        metrics[name] = verification_metrics(scores[targets], scores[~targets])
        metrics[name]["skipped_trials"] = 0
    return SystemResults("T8-5", subsets, metrics, {"score_norm": None})


def test_system_report_files_are_well_formed(results, tmp_path):
    written = write_system_report(results, tmp_path)

    for name, subset in results.subsets.items():
        enroll, test, targets, scores = read_scores(written[f"scores_{name}"])
        assert (enroll, test) == (subset.enroll, subset.test)
        np.testing.assert_array_equal(targets, subset.targets)
        np.testing.assert_array_equal(scores, subset.scores)  # float32 survives the text round trip
        # Rescoring from the file gives the reported EER.
        assert 100 * eer(scores[targets], scores[~targets]).eer == results.metrics[name]["eer"]

    with open(written["csv"]) as handle:
        rows = {row["subset"]: row for row in csv.DictReader(handle)}
    assert list(rows) == [*SUBSETS, "dev_avg", "test_avg", "avg"]
    eers = [results.metrics[name]["eer"] for name in SUBSETS]
    assert float(rows["dev_avg"]["eer"]) == pytest.approx((eers[0] + eers[1]) / 2)
    assert float(rows["avg"]["eer"]) == pytest.approx(np.mean(eers))
    assert int(rows["test_m"]["target_trials"]) == 30 and int(rows["test_m"]["nontarget_trials"]) == 270

    markdown = written["markdown"].read_text().splitlines()
    assert markdown[2] == "| system | dev F | dev M | dev avg | test F | test M | test avg | avg |"
    assert markdown[4].startswith(f"| T8-5 | {eers[0]:.2f} | {eers[1]:.2f} | ")
    assert markdown[4].endswith(f" {np.mean(eers):.2f} |")

    saved = json.loads(written["json"].read_text())
    assert saved["table"]["test_avg"] == pytest.approx((eers[2] + eers[3]) / 2)
    assert saved["subsets"]["dev_f"]["min_dcf_0.01"] == results.metrics["dev_f"]["min_dcf_0.01"]

    image = matplotlib.image.imread(written["det"])
    assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100
    assert image[..., :3].std() > 0.05  # something is drawn


def test_report_without_det(results, tmp_path):
    written = write_system_report(results, tmp_path, det_plot=False)
    assert "det" not in written and not (tmp_path / "det.png").exists()


def test_read_scores_names_the_bad_line(tmp_path):
    path = tmp_path / "s.txt"
    path.write_text("a u1 target 0.5\na u2 maybe 0.1\n")
    with pytest.raises(ValueError, match=r"s.txt:2: expected"):
        read_scores(path)
    path.write_text("a u1 target x\n")
    with pytest.raises(ValueError, match=r"s.txt:1: score 'x' is not a number"):
        read_scores(path)


def test_published_numbers_are_complete_and_consistent():
    rows = load_reference_results()
    table2 = [row for row in rows if row["table"] == "paper-table2"]
    assert sorted({row["system"] for row in table2}) == sorted(VPAC_SYSTEMS)
    assert len(table2) == 14 and {row["attacker"] for row in table2} == {
        "Baseline",
        "SegReConcat",
        "SegReConcat+SpecAug",
    }
    for row in table2:  # averages as printed agree with the subset values (2-decimal rounding)
        assert row["dev_avg"] == pytest.approx((row["dev_f"] + row["dev_m"]) / 2, abs=0.011)
        assert row["test_avg"] == pytest.approx((row["test_f"] + row["test_m"]) / 2, abs=0.011)
        assert row["avg"] == pytest.approx((row["dev_avg"] + row["test_avg"]) / 2, abs=0.011)
        assert row["source"]
    table1 = [row for row in rows if row["table"] == "paper-table1"]
    assert len(table1) == 11
    # Table 1's baseline and best rows are Table 2's T8-5 rows.
    t85 = {row["attacker"]: row["avg"] for row in table2 if row["system"] == "T8-5"}
    t1 = {row["attacker"]: row["avg"] for row in table1}
    assert (
        t1["No Augmentation"] == t85["Baseline"]
        and t1["RR + Concatenation + SpecAug"] == t85["SegReConcat+SpecAug"]
    )


def test_comparison_table_marks_missing_cells():
    table = comparison_table(
        {}, ["B5"], "baseline", ["src"], {"baseline": "Baseline"}, load_reference_results()
    )
    lines = table.splitlines()
    assert lines[2].startswith("| B5 | Baseline | - |") and "30.90" in lines[2] and "34.35" in lines[2]
    assert lines[3].startswith("| B5 | src | - |")

"""Report files: score files, results.csv/.md/.json, DET figures, published reference numbers."""

import csv
import json
from pathlib import Path

import matplotlib.image
import numpy as np
import pytest

from segreconcat_aug.data.vpac import VPAC_SYSTEMS
from segreconcat_aug.evaluation.intervals import SUBSET_COLUMNS as SUBSETS
from segreconcat_aug.evaluation.intervals import subset_design
from segreconcat_aug.evaluation.metrics import eer, verification_metrics
from segreconcat_aug.evaluation.references import load_reference_results
from segreconcat_aug.evaluation.score_files import read_score_file, write_scores
from segreconcat_aug.evaluation.system_report import write_system_report
from segreconcat_aug.evaluation.tables import comparison_table
from segreconcat_aug.evaluation.trials import SubsetScores, SystemResults


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
        enroll, test, targets, scores, _ = read_score_file(written[f"scores_{name}"])
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
        read_score_file(path)
    path.write_text("a u1 target x\n")
    with pytest.raises(ValueError, match=r"s.txt:1: score 'x' is not a number"):
        read_score_file(path)


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


def _crossed(name, speakers=6, utterances=3, separation=1.5, seed=0, with_speakers=True):
    """Every model x every test utterance of ``speakers`` speakers (the challenge's list design)."""
    rng = np.random.default_rng(seed)
    enroll_index = np.repeat(np.arange(speakers), speakers * utterances)
    utterance_index = np.tile(np.arange(speakers * utterances), speakers)
    targets = enroll_index == utterance_index // utterances
    scores = (rng.normal(size=len(targets)) + separation * targets).astype(np.float32)
    enroll = [f"s{k}" for k in enroll_index]
    test_speakers = [f"s{u // utterances}" for u in utterance_index]
    test = [f"{s}-{u % utterances}" for s, u in zip(test_speakers, utterance_index)]
    subset = SubsetScores(
        name,
        Path("trials"),
        enroll,
        test,
        targets,
        scores,
        test_speakers=test_speakers if with_speakers else None,
    )
    return subset, verification_metrics(scores[targets], scores[~targets]) if (~targets).any() else None


def test_intervals_in_every_output(tmp_path):
    subsets, metrics = {}, {}
    for k, name in enumerate(SUBSETS):
        subsets[name], metrics[name] = _crossed(name, seed=k)
    results = SystemResults("B3", subsets, metrics)
    written = write_system_report(results, tmp_path, det_plot=False, bootstrap={"resamples": 200, "seed": 3})

    with open(written["csv"]) as handle:
        rows = {row["subset"]: row for row in csv.DictReader(handle)}
    for name in [*SUBSETS, "dev_avg", "test_avg", "avg"]:
        low, high = float(rows[name]["eer_ci_low"]), float(rows[name]["eer_ci_high"])
        assert low < high and rows[name]["ci_undefined_because"] == ""
        assert low <= float(rows[name]["eer"]) <= high, (name, low, rows[name]["eer"], high)
    assert float(rows["dev_f"]["min_dcf_0.01_ci_low"]) <= float(rows["dev_f"]["min_dcf_0.01_ci_high"])

    saved = json.loads(written["json"].read_text())
    assert saved["bootstrap"] == {"resamples": 200, "seed": 3, "unit": "speaker", "test_speakers": "utt2spk"}
    assert saved["intervals"]["avg"]["eer"]["low"] == pytest.approx(float(rows["avg"]["eer_ci_low"]))
    markdown = written["markdown"].read_text().splitlines()
    assert markdown[5].startswith("| 95 % CI | [")
    # The score file carries the test speaker; the same seed gives the same intervals again.
    assert open(written["scores_dev_f"]).readline().split()[4] == "s0"
    again = write_system_report(
        results, tmp_path / "again", det_plot=False, bootstrap={"resamples": 200, "seed": 3}
    )
    assert json.loads(again["json"].read_text())["intervals"] == saved["intervals"]


def test_one_speaker_list_reports_the_point_eer_and_why_there_is_no_interval(tmp_path):
    subsets, metrics = {}, {}
    for k, name in enumerate(SUBSETS):
        subsets[name], metrics[name] = _crossed(name, speakers=1 if name == "dev_m" else 5, seed=k)
    # One speaker: targets only, so add non-targets from unenrolled test speakers.
    dev_m = subsets["dev_m"]
    dev_m.enroll += ["s0"] * 4
    dev_m.test += ["x-1", "x-2", "y-1", "y-2"]
    dev_m.test_speakers += ["x", "x", "y", "y"]
    dev_m.targets = np.r_[dev_m.targets, np.zeros(4, bool)]
    dev_m.scores = np.r_[dev_m.scores, np.zeros(4, np.float32)]
    metrics["dev_m"] = verification_metrics(dev_m.target_scores, dev_m.nontarget_scores)
    written = write_system_report(SystemResults("B3", subsets, metrics), tmp_path, det_plot=False)
    with open(written["csv"]) as handle:
        rows = {row["subset"]: row for row in csv.DictReader(handle)}
    assert rows["dev_m"]["eer"] != "" and rows["dev_m"]["eer_ci_low"] == ""
    assert "one speaker (s0)" in rows["dev_m"]["ci_undefined_because"]
    assert rows["dev_avg"]["eer_ci_low"] == "" and rows["dev_avg"]["ci_undefined_because"].startswith(
        "dev_m: "
    )
    assert rows["test_avg"]["eer_ci_low"] != ""  # the other part is unaffected
    text = written["markdown"].read_text()
    assert "[CI undefined]" in text and "no interval for dev_m eer: " in text


def test_four_column_score_files_stay_readable_and_speakers_are_inferred(tmp_path):
    subset, _ = _crossed("dev_f", with_speakers=False)
    path = write_scores(tmp_path / "old.txt", subset)
    assert len(path.read_text().splitlines()[0].split()) == 4
    scores = read_score_file(path)
    assert scores.test_speakers is None and read_score_file(path).test == subset.test
    design, source = subset_design(scores)
    assert source == "inferred from target trials" and design.problem is None
    assert design.speakers == sorted(f"s{k}" for k in range(6))
    path.write_text(path.read_text() + "s0 s1-0 nontarget 0.5 s1\n")
    with pytest.raises(ValueError, match=r"old.txt:109: 5 columns"):
        read_score_file(path)


def test_voxattacks_published_rows_load_labelled_as_that_papers_attackers():
    rows = [row for row in load_reference_results() if row["table"].startswith("voxattack-")]
    table1 = [row for row in rows if row["table"] == "voxattack-table1"]
    assert len(table1) == 14 and sorted({row["system"] for row in table1}) == sorted(VPAC_SYSTEMS)
    assert all(row["attacker"].startswith("VoxATtack paper: ") for row in rows)  # never ours
    assert all("ahmad-aloradi/VoxATtack 9fe67f1" in row["source"] for row in rows)
    vox = {row["system"]: row["avg"] for row in table1 if row["attacker"] == "VoxATtack paper: VoxATtack"}
    ecapa = {row["system"]: row["avg"] for row in table1 if row["attacker"].endswith("ECAPA (audio only)")}
    assert vox["B4"] == 20.6 and ecapa["T8-5"] == 27.4 and all(vox[s] < ecapa[s] for s in vox)
    (pooled,) = [row for row in rows if row["table"] == "voxattack-fig3"]
    assert pooled["system"] == "T10-2" and pooled["avg"] == 20.6 and "B4" in pooled["attacker"]


def test_dasts_published_rows_are_test_only_and_labelled_as_that_papers():
    rows = [row for row in load_reference_results() if row["table"] == "dast-paper"]
    assert len(rows) == 14 and all(row["attacker"].startswith("DAST paper: DAST") for row in rows)
    assert all(
        "monkeyDarefeen/DAST 097be15" in row["source"] and "unverified" in row["source"] for row in rows
    )
    # Test-only: no dev or dev+test cell, so no table can set them beside a dev+test average.
    assert all(row["test_avg"] is not None for row in rows)
    assert all(row[column] is None for row in rows for column in ("dev_f", "dev_m", "dev_avg", "avg"))
    full = {row["system"]: row["test_avg"] for row in rows if row["attacker"] == "DAST paper: DAST"}
    assert sorted(full) == sorted(VPAC_SYSTEMS) and full["T10-2"] == 7.04 and full["B3"] == 15.67

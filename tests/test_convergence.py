"""Convergence flags (issue 31) on epoch records, their files, the report's section and the tables' marks.

Real training runs raising and not raising each flag are in tests/test_train.py; the learning curve's
grid in tests/test_learning_curve.py.
"""

import json

import pytest

from segreconcat_aug.data.convergence import (
    CONVERGENCE_FILE,
    EPOCHS_LOG,
    FALLBACK_REASONS,
    convergence,
    model_convergence,
    read_epochs,
    run_convergence,
)
from segreconcat_aug.evaluation.references import load_reference_results
from segreconcat_aug.evaluation.system_report import convergence_markdown
from segreconcat_aug.evaluation.tables import ablation_table, comparison_table, convergence_notes
from segreconcat_aug.method.augment import COUNT_KEYS
from segreconcat_aug.training.progress import record_convergence


def _epoch(epoch, dev, train=2.0, stop=False, **counts):
    return {"epoch": epoch, "train": {"loss": train, **counts}, "valid": {"loss": dev}, "should_stop": stop}


def _flag_names(found):
    return [flag["name"] for flag in found["flags"]]


def test_best_epoch_last_is_raised_only_when_the_run_ended_on_its_best_epoch_without_stopping():
    assert _flag_names(convergence([_epoch(1, 3.0)], limit=1)) == ["best_epoch_last"]
    assert "best_epoch_last" in _flag_names(convergence([_epoch(1, 3.0), _epoch(2, 2.9)]))
    # Early stopping ended it: the best epoch is behind (patience), whatever the last loss did.
    stopped = convergence([_epoch(1, 3.0), _epoch(2, 2.0), _epoch(3, 2.5), _epoch(4, 2.4, stop=True)])
    assert stopped["best_epoch"] == 2 and _flag_names(stopped) == []
    # The limit, reached on a worse epoch: no flag either.
    assert "best_epoch_last" not in _flag_names(convergence([_epoch(1, 2.0), _epoch(2, 2.1)], limit=2))
    # Equal losses: the first is the best (what the checkpointer keeps).
    assert convergence([_epoch(1, 2.0), _epoch(2, 2.0)])["best_epoch"] == 1


def test_dev_loss_slope_over_the_last_epochs_against_its_threshold():
    # The window is the last 3 epochs: a fall before it does not count.
    late_flat = convergence([_epoch(1, 9.0), _epoch(2, 5.0), _epoch(3, 2.0), _epoch(4, 2.0), _epoch(5, 1.99)])
    # Three equally spaced epochs: the log-linear fit's rate is sqrt(last / first) - 1 per epoch.
    assert late_flat["slope_window"] == 3
    assert late_flat["dev_loss_slope"] == pytest.approx((1.99 / 2.0) ** 0.5 - 1)
    assert "dev_loss_falling" not in _flag_names(late_flat)  # -0.25 % per epoch: above -1 %
    falling = convergence([_epoch(1, 2.0), _epoch(2, 1.9), _epoch(3, 1.8)])
    assert "dev_loss_falling" in _flag_names(falling)  # -5.1 % per epoch
    # However fast the loss falls, the rate stays above -100 % per epoch (a geometric rate).
    assert -1 < convergence([_epoch(1, 9.8), _epoch(2, 2.5), _epoch(3, 0.01)])["dev_loss_slope"] < -0.9
    assert "dev_loss_falling" not in _flag_names(convergence([_epoch(1, 2.0), _epoch(2, 1.9)], min_drop=0.06))
    assert convergence([_epoch(1, 2.0)])["dev_loss_slope"] is None
    assert convergence([_epoch(k, 10.0 - k) for k in range(1, 7)], window=6)["slope_window"] == 6


def test_train_dev_gap_is_measured_at_the_best_epoch():
    found = convergence([_epoch(1, 4.0, train=2.0), _epoch(2, 5.0, train=1.0, stop=True)])
    assert (found["train_dev_gap"], found["relative_gap"]) == (2.0, 1.0)  # epoch 1, not the last
    assert "train_dev_gap" in _flag_names(found)
    assert "train_dev_gap" not in _flag_names(convergence([_epoch(1, 2.9, train=2.0)]))  # 45 % < 50 %
    assert "train_dev_gap" not in _flag_names(convergence([_epoch(1, 1.0, train=2.0)]))  # dev below train


def test_augmentation_coverage_counts_the_last_whole_epoch():
    counts = {"augmented": 90, "missing_alignment": 6, "few_segments": 4}
    found = convergence([_epoch(1, 2.0, **counts), _epoch(2, 1.0, augmented=5, covers="resumed part")])
    assert found["coverage"] == {
        "epoch": 1,
        "rows": 100,
        "augmented": 90,
        "fell_back": 10,
        "share_fell_back": 0.1,
        "reasons": {"missing_alignment": 6, "few_segments": 4},
    }
    (flag,) = [f for f in found["flags"] if f["name"] == "augmentation_fallback"]
    assert "10 of 100 training rows (10.0 %)" in flag["text"] and "no alignment 6" in flag["text"]
    assert "augmentation_fallback" not in _flag_names(
        convergence([_epoch(1, 2.0, augmented=999, no_segments=1)])
    )
    assert convergence([_epoch(1, 2.0)])["coverage"] is None  # the baseline: nothing asked


def test_the_fallback_reasons_are_segreconcats_counts():
    assert set(FALLBACK_REASONS) == set(COUNT_KEYS) - {"augmented"}


def test_epochs_file_read_back_and_written_beside_the_export(tmp_path):
    run = tmp_path / "run"
    (run / "export").mkdir(parents=True)
    lines = [
        json.dumps(_epoch(1, 3.0)),
        json.dumps(_epoch(2, 2.5)),
        json.dumps(_epoch(2, 2.4)),
        '{"epoch": 3, "tr',
    ]
    (run / EPOCHS_LOG).write_text("\n".join(lines))
    assert [(e["epoch"], e["valid"]["loss"]) for e in read_epochs(run)] == [(1, 3.0), (2, 2.4)]
    found = run_convergence(run, limit=5)
    assert found["source"] == str(run / EPOCHS_LOG) and found["limit"] == 5 and found["best_epoch"] == 2
    hparams = {"output_folder": str(run), "export_folder": str(run / "export"), "number_of_epochs": 5}
    record_convergence(hparams)
    written = json.loads((run / "export" / CONVERGENCE_FILE).read_text())
    assert written == {**found, "selected_by": "dev_loss"} and (run / CONVERGENCE_FILE).is_file()
    record_convergence({**hparams, "export_folder": str(tmp_path / "absent")})
    assert not (tmp_path / "absent").exists()  # an export folder that is not there is left out
    assert run_convergence(tmp_path / "nothing") is None
    with pytest.raises(TypeError, match="unexpected keyword argument 'windows'"):
        convergence([], windows=3)
    assert convergence([])["problem"] == "no epoch with a dev loss"


def test_the_report_finds_the_convergence_of_the_models_own_run_only(tmp_path):
    run = tmp_path / "run"
    (run / "export").mkdir(parents=True)
    (run / EPOCHS_LOG).write_text(json.dumps(_epoch(1, 3.0)) + "\n")
    # A run trained before convergence.json existed: computed from its epochs.jsonl.
    assert model_convergence(run / "export", run, run / "export")["best_epoch"] == 1
    # Another model folder evaluated into this run's folder (a pretrained model): nothing is known.
    other = tmp_path / "pretrained"
    other.mkdir()
    assert model_convergence(other, run, run / "export") is None
    # The file beside a model travels with it, wherever it is evaluated from.
    (other / CONVERGENCE_FILE).write_text(json.dumps({"flags": [], "moved": True}))
    assert model_convergence(other, run, run / "export")["moved"]


def test_the_reports_section_names_the_flags_and_the_numbers():
    found = convergence(
        [_epoch(1, 9.0, augmented=8, missing_alignment=2), _epoch(2, 6.0, augmented=8, missing_alignment=2)],
        limit=2,
    )
    text = "\n".join(convergence_markdown(found))
    assert "**Flags: this EER may overstate privacy**" in text
    for flag in found["flags"]:
        assert f"- {flag['text']}" in text
    assert "epochs run: 2 (limit 2), not stopped early" in text
    assert "dev-loss trend over the last 2 epochs: -33.3 % per epoch" in text
    assert "8 of 10 training rows augmented as asked, 2 fell back (missing_alignment 2)" in text
    assert "No flag." in "\n".join(
        convergence_markdown(convergence([_epoch(1, 2.0), _epoch(2, 2.2, stop=True)]))
    )
    assert "Unknown: " in "\n".join(convergence_markdown(None))


def test_the_tables_mark_a_flagged_cell_and_say_why():
    flagged = {
        "flags": [{"seed": 7, "name": "best_epoch_last", "text": "best epoch is the last: epoch 1 of 1"}]
    }
    row = {
        "dev_f": 30.0,
        "dev_m": 20.0,
        "dev_avg": 25.0,
        "test_f": 30.0,
        "test_m": 20.0,
        "test_avg": 25.0,
        "avg": 25.0,
    }
    cells = {("B3", "base"): {"table": row, "intervals": {}, "seeds": [], "std": None}}
    cells[("B3", "src")] = {**cells[("B3", "base")], **flagged}
    labels = {"base": "Baseline", "src": "SegReConcat+SpecAug"}
    table = comparison_table(cells, ["B3"], "base", ["src"], labels, load_reference_results())
    assert "| B3 | Baseline |" in table
    # The mark does not hide the paper's row of the same attacker name (B3 SegReConcat+SpecAug: 25.91).
    (flagged_row,) = [line for line in table.splitlines() if "| B3 | SegReConcat+SpecAug † |" in line]
    assert "| 25.91 |" in flagged_row
    assert "| SegReConcat † |" in ablation_table(cells, "B3", ["base", "src"], {"src": "SegReConcat"})
    assert convergence_notes(cells, {"src": "SegReConcat"}) == [
        "† B3 SegReConcat: seed 7: best epoch is the last: epoch 1 of 1. Its EER may overstate privacy: "
        "docs/evaluation.md#convergence-flags"
    ]

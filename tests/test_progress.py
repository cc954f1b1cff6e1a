"""segreconcat_aug.training.progress: epoch statistics, the epochs.jsonl line and the console line."""

import json
import logging

import pytest
from speechbrain.utils.epoch_loop import EpochCounterWithStopper

from segreconcat_aug.method.augment import COUNT_KEYS
from segreconcat_aug.training.progress import EPOCHS_LOG, epoch_line, epochs_left, log_epoch, train_stats


@pytest.mark.parametrize("warmup,patience,improving_epochs", [(2, 3, 0), (0, 1, 4), (1, 2, 2), (0, 1, 0)])
def test_epochs_left_is_when_the_stopper_stops_without_improvement(warmup, patience, improving_epochs):
    counter = EpochCounterWithStopper(limit=50, limit_to_stop=patience, limit_warmup=warmup, direction="min")
    last_improving = max(warmup + improving_epochs, 1)
    predicted, loss = None, 10.0
    for epoch in counter:
        loss += -1.0 if epoch <= last_improving else 1.0  # from then on the dev loss only worsens
        counter.update_metric(loss)
        fewest, most = epochs_left(counter)
        assert most == (0 if counter.should_stop else 50 - epoch) and fewest <= most
        if epoch == last_improving:
            predicted = epoch + fewest
    assert counter.current == predicted < 50


def _counter_after(losses, warmup=0, patience=2, limit=10):
    counter = EpochCounterWithStopper(
        limit=limit, limit_to_stop=patience, limit_warmup=warmup, direction="min"
    )
    for loss in losses:
        next(counter)  # the next epoch starts
        counter.update_metric(loss)
    return counter


def test_the_epoch_line_gives_both_bounds_of_the_time_left_then_says_done():
    record = {
        "epoch": 2,
        "train": {"loss": 3.14159, "samples_per_s": 99.6},
        "valid": {"loss": 2.5, "error_rate": 0.4},
    }
    counter = _counter_after([3.0, 2.5])  # epoch 2 improved: 2 more epochs without improvement stop it
    assert epoch_line(record, counter, [30.0, 50.0]) == (
        "epoch 2/10: train loss 3.142, dev loss 2.500, dev error rate 0.400, 100 samples/s; "
        "time left: 80 s if the dev loss stops improving (2 epoch(s)), at most 5.3 min (8 epoch(s))"
    )
    counter = _counter_after([3.0, 2.5, 2.6, 2.7])  # patience spent: stopped, epoch 2 the best
    record = {**record, "epoch": 4}
    assert counter.should_stop and epochs_left(counter) == (0, 0)
    assert epoch_line(record, counter, [40.0] * 4).endswith("; training done (best dev loss: epoch 2)")


def _augmenter(counts):
    class Counting:  # SegReConcat's counting interface
        def counts(self):
            return dict(zip(COUNT_KEYS, counts))

        def report(self):
            return "augmented=7"

        def reset_counts(self):
            counts[:] = [0] * len(counts)

    return Counting()


def test_a_training_epoch_gives_its_stats_logs_them_and_restarts_the_counts(caplog):
    counts = [12, 0, 3, 0, 0]  # augmented, missing_alignment, few_segments, ...
    augmenter = _augmenter(counts)
    with caplog.at_level(logging.INFO):
        stats = train_stats(5, 2.25, [12, 2], 4.0, augmenter=augmenter)  # 12 samples, 2 failed reads
    assert stats == {
        "loss": 2.25, "samples": 12, "samples_per_s": 3.0, "failed_reads": 2, "augmented": 12, "few_segments": 3,
    }  # fmt: skip
    assert counts == [0] * 5  # the next epoch counts afresh
    messages = [record.getMessage() for record in caplog.records]
    assert "Epoch 5: 3.0 training samples/s (all processes)" in messages
    assert any(m.startswith("Epoch 5: 2 training rows skipped") for m in messages)
    assert (
        "Epoch 5 SegReConcat: {'augmented': 12, 'missing_alignment': 0, 'few_segments': 3, " in messages[-1]
    )
    # The baseline (no augmenter), resumed after batch 3.
    assert train_stats(6, 1.0, [4, 0], 2.0, resumed_at_batch=3) == {
        "loss": 1.0, "samples": 4, "samples_per_s": 2.0, "failed_reads": 0,
        "covers": "resumed part: batches after 3", "resumed_at_batch": 3,
    }  # fmt: skip


def test_the_epoch_record_is_one_json_line_per_epoch(tmp_path):
    counter = _counter_after([3.0, 2.5, 2.6])
    for epoch in (1, 2):
        record = log_epoch(tmp_path, epoch, 0.01, {"loss": 1.0}, {"loss": 2.0}, counter)
    lines = (tmp_path / EPOCHS_LOG).read_text().splitlines()
    assert [json.loads(line) for line in lines][1] == record == {
        "epoch": 2, "lr": 0.01, "train": {"loss": 1.0}, "valid": {"loss": 2.0}, "best_epoch": 2, "should_stop": False,
    }  # fmt: skip


def test_a_nan_loss_is_null_in_the_epoch_record(tmp_path):
    """Issue 32: every JSON the project writes is JSON (Python would write NaN, which JSON lacks)."""
    counter = _counter_after([3.0])
    log_epoch(tmp_path, 1, 0.01, {"loss": float("nan")}, {"loss": 2.0}, counter)
    line = (tmp_path / EPOCHS_LOG).read_text()
    assert json.loads(line, parse_constant=lambda token: pytest.fail(f"{token} in {line}"))["train"] == {
        "loss": None
    }

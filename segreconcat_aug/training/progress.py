"""The training's progress: each epoch's statistics, its line in ``epochs.jsonl`` and on the console.

:class:`EpochProgress` is one process's bookkeeping of the epochs (samples and failed reads
counted per batch, the batch a resumed epoch started after, how long each epoch took);
:func:`epoch_record` is an epoch's exact JSON line (:data:`EPOCHS_LOG`) and :func:`epoch_line` its
console line, with the time left under early stopping (:func:`epochs_left`).
:func:`record_convergence` ends a run: its convergence flags
(:mod:`segreconcat_aug.data.convergence`) from ``epochs.jsonl``, written beside its checkpoints
and its exported model, where the evaluation's report finds them.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import torch
from speechbrain.utils.distributed import ddp_all_reduce

from segreconcat_aug.data.convergence import EPOCHS_LOG, run_convergence, write_convergence
from segreconcat_aug.data.result_files import json_text
from segreconcat_aug.method.augment import COUNT_KEYS

logger = logging.getLogger(__name__)


def format_duration(seconds: float) -> str:
    """``seconds`` for a human.

    >>> format_duration(42), format_duration(150), format_duration(7300)
    ('42 s', '2.5 min', '2.0 h')
    """
    if seconds < 100:
        return f"{seconds:.0f} s"
    if seconds < 6000:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def epochs_left(counter) -> tuple[int, int]:
    """``(fewest, most)`` epochs still to run after the current one.

    Fewest: if the dev loss stops improving, early stopping ends the run when patience is
    spent; most: the epoch limit.

    >>> from speechbrain.utils.epoch_loop import EpochCounterWithStopper
    >>> counter = EpochCounterWithStopper(limit=100, limit_to_stop=3, limit_warmup=2, direction="min")
    >>> counter.current = 1
    >>> epochs_left(counter)  # epoch 3 is the first one watched, then 3 epochs of patience
    (5, 99)
    """
    if counter.should_stop:
        return 0, 0
    most = counter.limit - counter.current
    if counter.current <= counter.limit_warmup:
        stop_at = counter.limit_warmup + 1 + counter.limit_to_stop
    else:
        stop_at = counter.best_limit + counter.limit_to_stop
    return min(max(stop_at - counter.current, 0), most), most


def epoch_line(record: dict, counter, epoch_seconds: list[float]) -> str:
    """The console's line for a finished epoch: losses, dev error rate, speed and time left.

    >>> from speechbrain.utils.epoch_loop import EpochCounterWithStopper
    >>> counter = EpochCounterWithStopper(limit=10, limit_to_stop=2, limit_warmup=0, direction="min")
    >>> counter.current = 1
    >>> counter.update_metric(3.0)
    >>> record = {"epoch": 1, "train": {"loss": 4.25, "samples_per_s": 812.4},
    ...           "valid": {"loss": 3.0, "error_rate": 0.75}}
    >>> epoch_line(record, counter, [90.0])
    'epoch 1/10: train loss 4.250, dev loss 3.000, dev error rate 0.750, 812 samples/s; time left: 3.0 min if the dev loss stops improving (2 epoch(s)), at most 13.5 min (9 epoch(s))'
    """
    train, valid = record["train"], record["valid"]
    line = (
        f"epoch {record['epoch']}/{counter.limit}: train loss {train.get('loss', float('nan')):.3f}, "
        f"dev loss {valid['loss']:.3f}, dev error rate {valid['error_rate']:.3f}, "
        f"{train.get('samples_per_s', 0.0):.0f} samples/s"
    )
    fewest, most = epochs_left(counter)
    if fewest == most == 0:
        return f"{line}; training done (best dev loss: epoch {counter.best_limit or record['epoch']})"
    per_epoch = sum(epoch_seconds) / len(epoch_seconds)
    left = format_duration(fewest * per_epoch)
    return (
        f"{line}; time left: {left} if the dev loss stops improving ({fewest} epoch(s)), "
        f"at most {format_duration(most * per_epoch)} ({most} epoch(s))"
    )


def epoch_record(epoch: int, lr: float, train_stats: dict, valid_stats: dict, counter) -> dict:
    """An epoch's line of :data:`EPOCHS_LOG`: its statistics and the early stopper's state after it."""
    return {
        "epoch": epoch,
        "lr": lr,
        "train": train_stats,
        "valid": valid_stats,
        "best_epoch": counter.best_limit,
        "should_stop": counter.should_stop,
    }


def log_train_epoch(epoch: int, stats: dict, counts: dict | None = None, local_report: str = "") -> None:
    """Log a training epoch's speed, its rows whose audio could not be read, and SegReConcat's counts.

    ``stats``: :meth:`EpochProgress.train_stats`; ``counts``: SegReConcat's counts summed over
    processes (None for the baseline), ``local_report`` this process's (``SegReConcat.report()``).
    """
    logger.info("Epoch %s: %.1f training samples/s (all processes)", epoch, stats["samples_per_s"])
    if stats["failed_reads"]:
        logger.warning(
            "Epoch %s: %d training rows skipped because their audio could not be read (read_errors: "
            "skip; the warnings above name the files)",
            epoch,
            stats["failed_reads"],
        )
    if counts is not None:
        logger.info("Epoch %s SegReConcat: %s (this process: %s)", epoch, counts, local_report)


def append_epoch_record(output_folder, record: dict) -> None:
    """Append ``record`` (:func:`epoch_record`) to ``<output_folder>/epochs.jsonl``."""
    with open(Path(output_folder) / EPOCHS_LOG, "a", encoding="utf-8") as handle:
        handle.write(json_text(record) + "\n")  # a NaN loss is null: each line stays JSON


class EpochProgress:
    """One process's bookkeeping of the training epochs, for their statistics and the time left.

    Parameters
    ----------
    clock : callable
        Seconds now (``time.time``; a test gives its own).

    Examples
    --------
    >>> ticks = iter([0.0, 100.0, 125.0, 180.0])
    >>> progress = EpochProgress(clock=lambda: next(ticks))
    >>> progress.start_epoch(resumed_at_batch=2)
    >>> progress.count_batch(8, failed_reads=1)
    >>> progress.count_batch(8)
    >>> progress.samples, progress.failed_reads
    (16, 1)
    >>> progress.train_stats(1.5, samples=32, failed_reads=1, counts={"augmented": 32, "skipped": 0})
    {'loss': 1.5, 'samples': 32, 'samples_per_s': 1.28, 'failed_reads': 1, 'covers': 'resumed part: batches after 2', 'resumed_at_batch': 2, 'augmented': 32}
    >>> progress.end_epoch(), progress.epoch_seconds
    (80.0, [80.0])
    """

    def __init__(self, clock=time.time):
        self.clock = clock
        self.samples = 0
        self.failed_reads = 0
        self.resumed_at_batch = 0
        self.started = clock()
        self.epoch_seconds: list[float] = []  # this process's finished epochs (training + dev)

    def start_epoch(self, resumed_at_batch: int = 0) -> None:
        """A training epoch starts; one resumed from a mid-epoch checkpoint starts after
        ``resumed_at_batch`` batches, and this process sees (and counts) only the rest."""
        self.samples = 0
        self.failed_reads = 0
        self.resumed_at_batch = int(resumed_at_batch)
        self.started = self.clock()

    def count_batch(self, samples: int, failed_reads: int = 0) -> None:
        """A training batch of ``samples`` rows, plus ``failed_reads`` rows dropped because their audio failed."""
        self.samples += samples
        self.failed_reads += failed_reads

    def train_stats(
        self, loss: float, samples: float, failed_reads: float, counts: dict | None = None
    ) -> dict:
        """The epoch's ``train`` entry from the counts summed over processes.

        ``counts``: SegReConcat's counts (:data:`segreconcat_aug.method.augment.COUNT_KEYS`), None
        for the baseline; a count of zero is left out, except ``augmented``.
        """
        elapsed = max(self.clock() - self.started, 1e-9)
        stats = {
            "loss": float(loss),
            "samples": int(samples),
            "samples_per_s": samples / elapsed,
            "failed_reads": int(failed_reads),
        }
        if self.resumed_at_batch:
            # Samples, counts and rate cover the resumed part only; the loss is SpeechBrain's running
            # average, recovered with the step, so it covers the whole epoch.
            stats["covers"] = f"resumed part: batches after {self.resumed_at_batch}"
            stats["resumed_at_batch"] = self.resumed_at_batch
        if counts is not None:
            stats.update({key: value for key, value in counts.items() if value or key == "augmented"})
        return stats

    def end_training(self, epoch: int, loss: float, augmenter=None, device="cpu") -> dict:
        """The epoch's training is over: its ``train`` entry (:meth:`train_stats`), with the counts of
        every DDP process summed, logged (:func:`log_train_epoch`); the augmenter's counts restart."""
        counts = list(augmenter.counts().values()) if augmenter is not None else []  # COUNT_KEYS order
        totals = torch.tensor([self.samples, self.failed_reads, *counts], dtype=torch.float64, device=device)
        samples, failed, *counts = ddp_all_reduce(totals, torch.distributed.ReduceOp.SUM).tolist()
        summed = dict(zip(COUNT_KEYS, map(int, counts))) if augmenter is not None else None
        stats = self.train_stats(loss, samples, failed, summed)
        log_train_epoch(epoch, stats, summed, augmenter.report() if augmenter is not None else "")
        if augmenter is not None:
            augmenter.reset_counts()
        return stats

    def end_epoch(self) -> float:
        """The epoch (training and dev) is over: its seconds, remembered for the time left."""
        seconds = self.clock() - self.started
        self.epoch_seconds.append(seconds)
        return seconds

    def line(self, record: dict, counter) -> str:
        """:func:`epoch_line` of ``record``, with this run's mean epoch time."""
        return epoch_line(record, counter, self.epoch_seconds)


def record_convergence(hparams) -> dict | None:
    """The finished run's convergence (:func:`segreconcat_aug.data.convergence.run_convergence` of its
    ``epochs.jsonl``), written as ``convergence.json`` to its output and export folders and logged.

    Main process only (the recipe calls it after the export). None when the run has no epochs.
    """
    found = run_convergence(hparams["output_folder"], limit=hparams.get("number_of_epochs"))
    if found is None:
        return None
    write_convergence(found, hparams["output_folder"], hparams.get("export_folder"))
    for flag in found["flags"]:
        logger.warning("Convergence flag: %s", flag["text"])
    return found


def convergence_line(found: dict | None) -> str:
    """The console's line for a finished run's convergence flags.

    >>> convergence_line({"flags": [{"name": "x", "text": "best epoch is the last: ..."}]})
    'convergence flags: best epoch is the last: ... (the EER may overstate privacy; docs/evaluation.md)'
    >>> convergence_line({"flags": [], "best_epoch": 3, "last_epoch": 5})
    'convergence: no flag (best dev loss at epoch 3 of 5)'
    """
    if not found or "best_epoch" not in found and not found.get("flags"):
        return "convergence: no epoch with a dev loss"
    if found["flags"]:
        texts = "; ".join(flag["text"] for flag in found["flags"])
        return f"convergence flags: {texts} (the EER may overstate privacy; docs/evaluation.md)"
    return f"convergence: no flag (best dev loss at epoch {found['best_epoch']} of {found['last_epoch']})"

"""The training's progress: an epoch's statistics, its exact line in ``epochs.jsonl`` (beside the
``train_logger``'s rounded one), its console line with the time left, and the run's convergence flags."""

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
    """``(fewest, most)`` epochs still to run: fewest if the dev loss stops improving (patience), most the limit."""
    if counter.should_stop:
        return 0, 0
    most = counter.limit - counter.current
    if counter.current <= counter.limit_warmup:
        stop_at = counter.limit_warmup + 1 + counter.limit_to_stop
    else:
        stop_at = counter.best_limit + counter.limit_to_stop
    return min(max(stop_at - counter.current, 0), most), most


def epoch_line(record: dict, counter, epoch_seconds: list[float]) -> str:
    """The console's line for a finished epoch: losses, dev error rate, speed and time left."""
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
    return (
        f"{line}; time left: {format_duration(fewest * per_epoch)} if the dev loss stops improving "
        f"({fewest} epoch(s)), at most {format_duration(most * per_epoch)} ({most} epoch(s))"
    )


def epoch_record(epoch: int, lr: float, train_stats: dict, valid_stats: dict, counter) -> dict:
    """An epoch's line of ``epochs.jsonl``: its statistics and the early stopper's state after it."""
    return {
        "epoch": epoch,
        "lr": lr,
        "train": train_stats,
        "valid": valid_stats,
        "best_epoch": counter.best_limit,
        "should_stop": counter.should_stop,
    }


def append_epoch_record(output_folder, record: dict) -> None:
    """Append ``record`` (:func:`epoch_record`) to ``<output_folder>/epochs.jsonl``."""
    with open(Path(output_folder) / EPOCHS_LOG, "a", encoding="utf-8") as handle:
        handle.write(json_text(record) + "\n")  # a NaN loss is null: each line stays JSON


class EpochProgress:
    """One process's counts of a training epoch (samples, rows whose audio failed), and its epoch times."""

    def __init__(self, clock=time.time):
        self.clock = clock
        self.samples = self.failed_reads = self.resumed_at_batch = 0
        self.started = clock()
        self.epoch_seconds: list[float] = []  # this process's finished epochs (training + dev)

    def start_epoch(self, resumed_at_batch: int = 0) -> None:
        """A training epoch starts (one resumed from a mid-epoch checkpoint: after ``resumed_at_batch`` batches)."""
        self.samples = self.failed_reads = 0
        self.resumed_at_batch = int(resumed_at_batch)
        self.started = self.clock()

    def count_batch(self, samples: int, failed_reads: int = 0) -> None:
        self.samples += samples
        self.failed_reads += failed_reads

    def end_training(self, epoch: int, loss: float, augmenter=None, device="cpu") -> dict:
        """The epoch's ``train`` statistics, summed over DDP processes and logged; SegReConcat's counts restart."""
        counts = list(augmenter.counts().values()) if augmenter is not None else []  # COUNT_KEYS order
        totals = torch.tensor([self.samples, self.failed_reads, *counts], dtype=torch.float64, device=device)
        samples, failed, *counts = ddp_all_reduce(totals, torch.distributed.ReduceOp.SUM).tolist()
        elapsed = max(self.clock() - self.started, 1e-9)
        stats = {
            "loss": float(loss),
            "samples": int(samples),
            "samples_per_s": samples / elapsed,
            "failed_reads": int(failed),
        }
        if self.resumed_at_batch:
            # Samples, counts and rate cover the resumed part only; the loss is SpeechBrain's running
            # average, recovered with the step, so it covers the whole epoch.
            stats["covers"] = f"resumed part: batches after {self.resumed_at_batch}"
            stats["resumed_at_batch"] = self.resumed_at_batch
        logger.info("Epoch %s: %.1f training samples/s (all processes)", epoch, stats["samples_per_s"])
        if stats["failed_reads"]:
            logger.warning(
                "Epoch %s: %d training rows skipped because their audio could not be read (read_errors: "
                "skip; the warnings above name the files)",
                epoch,
                stats["failed_reads"],
            )
        if augmenter is not None:
            summed = dict(zip(COUNT_KEYS, map(int, counts)))
            stats.update({key: value for key, value in summed.items() if value or key == "augmented"})
            logger.info("Epoch %s SegReConcat: %s (this process: %s)", epoch, summed, augmenter.report())
            augmenter.reset_counts()
        return stats

    def end_epoch(self) -> float:
        self.epoch_seconds.append(self.clock() - self.started)
        return self.epoch_seconds[-1]

    def line(self, record: dict, counter) -> str:
        return epoch_line(record, counter, self.epoch_seconds)


def record_convergence(hparams) -> dict | None:
    """The finished run's convergence flags, logged and written to its output and export folders."""
    found = run_convergence(hparams["output_folder"], limit=hparams.get("number_of_epochs"))
    if found is not None:
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

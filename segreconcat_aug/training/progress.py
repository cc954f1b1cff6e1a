"""The training's bookkeeping beside SpeechBrain's ``train_logger`` (whose ``train_log.txt`` rounds): an
epoch's training statistics, its exact line in ``epochs.jsonl``, its console line with the time left, and
the run's convergence flags."""

from __future__ import annotations

import logging
from pathlib import Path

import torch
from speechbrain.utils.distributed import ddp_all_reduce

from segreconcat_aug.data.convergence import CONVERGENCE_FILE, EPOCHS_LOG, run_convergence
from segreconcat_aug.data.result_files import json_text, write_text

logger = logging.getLogger(__name__)


def format_duration(seconds: float) -> str:
    """``seconds`` for a human."""
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


def train_stats(epoch, loss, counts, seconds, resumed_at_batch=0, augmenter=None, device="cpu") -> dict:
    """The epoch's ``train`` statistics from this process's ``counts`` (samples, rows whose audio failed) in
    ``seconds``, summed over DDP processes and logged; SegReConcat's counts restart."""
    own = augmenter.counts() if augmenter is not None else {}
    totals = torch.tensor([*counts, *own.values()], dtype=torch.float64, device=device)
    samples, failed, *counted = ddp_all_reduce(totals, torch.distributed.ReduceOp.SUM).tolist()
    stats = {
        "loss": float(loss),
        "samples": int(samples),
        "samples_per_s": samples / max(seconds, 1e-9),
        "failed_reads": int(failed),
    }
    if resumed_at_batch:
        # Samples, counts and rate cover the resumed part only; the loss is SpeechBrain's running
        # average, recovered with the step, so it covers the whole epoch.
        stats["covers"] = f"resumed part: batches after {resumed_at_batch}"
        stats["resumed_at_batch"] = resumed_at_batch
    logger.info("Epoch %s: %.1f training samples/s (all processes)", epoch, stats["samples_per_s"])
    if stats["failed_reads"]:
        logger.warning(
            "Epoch %s: %d training rows skipped because their audio could not be read (read_errors: "
            "skip; the warnings above name the files)",
            epoch,
            stats["failed_reads"],
        )
    if augmenter is not None:
        summed = dict(zip(own, map(int, counted)))
        stats.update({key: value for key, value in summed.items() if value or key == "augmented"})
        logger.info("Epoch %s SegReConcat: %s (this process: %s)", epoch, summed, augmenter.report())
        augmenter.reset_counts()
    return stats


def log_epoch(output_folder, epoch: int, lr: float, train: dict, valid: dict, counter) -> dict:
    """Append the epoch's line to ``<output_folder>/epochs.jsonl``: its statistics and the early stopper's
    state after it (a NaN loss is null: each line stays JSON); returns it."""
    record = {
        "epoch": epoch,
        "lr": lr,
        "train": train,
        "valid": valid,
        "best_epoch": counter.best_limit,
        "should_stop": counter.should_stop,
    }
    with open(Path(output_folder) / EPOCHS_LOG, "a", encoding="utf-8") as handle:
        handle.write(json_text(record) + "\n")
    return record


def record_convergence(hparams) -> str:
    """The finished run's convergence flags, logged and written to its output and export folders (those that
    exist) as :data:`CONVERGENCE_FILE`, whole or not at all; returns the console's line for them."""
    found = run_convergence(hparams["output_folder"], limit=hparams.get("number_of_epochs"))
    if found is not None:
        found["selected_by"] = hparams.get("select_by") or "dev_loss"  # which checkpoint was exported
        text = json_text(found, indent=2) + "\n"  # strict JSON: a NaN loss is null
        for folder in hparams["output_folder"], hparams.get("export_folder"):
            if folder and Path(folder).is_dir():
                write_text(Path(folder) / CONVERGENCE_FILE, text)
        for flag in found["flags"]:
            logger.warning("Convergence flag: %s", flag["text"])
    return convergence_line(found)


def convergence_line(found: dict | None) -> str:
    """The console's line for a finished run's convergence flags."""
    if not found or "best_epoch" not in found and not found.get("flags"):
        return "convergence: no epoch with a dev loss"
    if found["flags"]:
        texts = "; ".join(flag["text"] for flag in found["flags"])
        return f"convergence flags: {texts} (the EER may overstate privacy; docs/evaluation.md)"
    return f"convergence: no flag (best dev loss at epoch {found['best_epoch']} of {found['last_epoch']})"

"""EER speed and memory: the sort-based :func:`segreconcat_aug.metrics.eer` vs SpeechBrain's ``EER``;
the speaker bootstrap's resampled EERs, vectorized vs a per-resample loop.

Both run in one process on the same synthetic float32 scores (a VPAC-like 5 %
of target trials), so the ratio is what sorting buys. Target: >= 50x faster,
the same value (to 1e-9). Peak memory is the growth of the process's resident
set during each call (Linux ``/proc/self/clear_refs`` + ``VmHWM``, which sees
torch's allocations too); elsewhere it falls back to ``tracemalloc`` (numpy only).

Bootstrap part: :func:`segreconcat_aug.bootstrap.resampled_metrics` (all resamples
at once) vs :func:`~segreconcat_aug.bootstrap.resampled_metrics_loop` (each
resample's trial set built and scored on its own), EER and minDCF of every
resample, on 100k trials of 400 speakers x 1000 resamples, the process pinned to
one core. Target: at most 5 s, the same values (to 1e-9).

Usage::

    python benchmarks/bench_eer.py                  # 100k trials, both parts
    python benchmarks/bench_eer.py --part bootstrap --resamples 1000
    python benchmarks/bench_eer.py --trials 20000 --target-share 0.05
"""

from __future__ import annotations

import argparse
import os
import time
import tracemalloc
from pathlib import Path

import numpy as np
import torch
from speechbrain.utils.metric_stats import EER as speechbrain_eer

from segreconcat_aug.bootstrap import (
    SpeakerWeights,
    resampled_metrics,
    resampled_metrics_loop,
    speaker_counts,
    trial_design,
)
from segreconcat_aug.metrics import eer

STATUS = Path("/proc/self/status")
CLEAR_REFS = Path("/proc/self/clear_refs")


def _kib(field: str) -> int:
    for line in STATUS.read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def measure(fn, *args):
    """``(result, seconds, peak extra MiB)`` of one call."""
    rss_peak = STATUS.exists() and CLEAR_REFS.exists()
    if rss_peak:
        CLEAR_REFS.write_text("5")  # resets VmHWM (the peak resident set) to the current size
        before = _kib("VmRSS")
    else:
        tracemalloc.start()
    start = time.perf_counter()
    result = fn(*args)
    seconds = time.perf_counter() - start
    if rss_peak:
        peak = (_kib("VmHWM") - before) / 1024
    else:
        peak = tracemalloc.get_traced_memory()[1] / 2**20
        tracemalloc.stop()
    return result, seconds, peak


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--trials", type=int, default=100_000)
    parser.add_argument("--target-share", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--part", choices=["eer", "bootstrap", "all"], default="all")
    parser.add_argument("--resamples", type=int, default=1000)
    parser.add_argument("--speakers", type=int, default=400)
    args = parser.parse_args(argv)
    ok = True
    if args.part in ("eer", "all"):
        ok &= bench_point_eer(args)
    if args.part in ("bootstrap", "all"):
        ok &= bench_bootstrap(args)
    return 0 if ok else 1


def bench_bootstrap(args) -> bool:
    """Resampled EER/minDCF of every resample: vectorized vs the per-resample loop, one core."""
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one core, as the target says
    rng = np.random.default_rng(args.seed)
    n_target = max(2, int(args.trials * args.target_share))
    targets = np.zeros(args.trials, dtype=bool)
    targets[:n_target] = True
    enroll_index = rng.integers(0, args.speakers, args.trials)
    other = (enroll_index + rng.integers(1, args.speakers, args.trials)) % args.speakers
    test_index = np.where(targets, enroll_index, other)
    effect = rng.normal(0, 0.05, args.speakers)  # per-speaker offsets: correlated trials
    scores = rng.normal(0.25, 0.15, args.trials) + 0.2 * targets + effect[enroll_index] + effect[test_index]
    scores = np.round(scores, 4).astype(np.float32)
    names = np.array([f"spk{k}" for k in range(args.speakers)])
    design = trial_design(list(names[enroll_index]), list(names[test_index]), targets)
    weights = SpeakerWeights(design, speaker_counts([design], args.resamples, args.seed))

    start = time.perf_counter()
    fast = resampled_metrics(scores, targets, weights)
    fast_s = time.perf_counter() - start
    start = time.perf_counter()
    slow = resampled_metrics_loop(scores, targets, weights)
    slow_s = time.perf_counter() - start
    same = all(np.allclose(fast[k], slow[k], rtol=0, atol=1e-9, equal_nan=True) for k in fast)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else "?"
    print(
        f"\nspeaker bootstrap: {args.trials} trials ({n_target} target, {args.speakers} speakers) x "
        f"{args.resamples} resamples, EER + 2 minDCF each, {cores} core"
    )
    print(f"{'':28}{'seconds':>10}")
    print(f"{'vectorized (all at once)':28}{fast_s:10.3f}")
    print(f"{'per-resample loop':28}{slow_s:10.3f}")
    print(
        f"same values (1e-9): {same}   speed-up: {slow_s / fast_s:.1f}x   "
        f"target <= 5 s: {'met' if fast_s <= 5 else 'MISSED'}"
    )
    return same and fast_s <= 5


def bench_point_eer(args) -> bool:
    rng = np.random.default_rng(args.seed)
    n_target = max(1, int(args.trials * args.target_share))
    # Cosine-like scores rounded to 1e-4 so that ties occur, as in real score files.
    pos = np.round(np.clip(rng.normal(0.45, 0.15, n_target), -1, 1), 4).astype(np.float32)
    neg = np.round(np.clip(rng.normal(0.25, 0.15, args.trials - n_target), -1, 1), 4).astype(np.float32)
    pos_t, neg_t = torch.from_numpy(pos), torch.from_numpy(neg)

    eer(pos[:10], neg[:10])  # warm-up (imports, first-call overheads) outside the timings
    speechbrain_eer(pos_t[:10], neg_t[:10])
    ours, ours_s, ours_mib = measure(eer, pos, neg)
    (ref, _), ref_s, ref_mib = measure(speechbrain_eer, pos_t, neg_t)

    print(f"trials: {args.trials} ({n_target} target), float32 scores")
    print(f"{'':28}{'EER (%)':>14}{'seconds':>10}{'peak MiB':>10}")
    print(f"{'segreconcat_aug (sort)':28}{100 * ours.eer:14.9f}{ours_s:10.3f}{ours_mib:10.1f}")
    print(f"{'speechbrain EER (loop)':28}{100 * ref:14.9f}{ref_s:10.3f}{ref_mib:10.1f}")
    same = abs(ours.eer - ref) <= 1e-9
    print(f"same value (1e-9): {same}   speed-up: {ref_s / ours_s:.0f}x (target >= 50x)")
    return same


if __name__ == "__main__":
    raise SystemExit(main())

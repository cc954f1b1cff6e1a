"""EER speed and memory: the sort-based :func:`segreconcat_aug.metrics.eer` vs SpeechBrain's ``EER``.

Both run in one process on the same synthetic float32 scores (a VPAC-like 5 %
of target trials), so the ratio is what sorting buys. Target: >= 50x faster,
the same value (to 1e-9). Peak memory is the growth of the process's resident
set during each call (Linux ``/proc/self/clear_refs`` + ``VmHWM``, which sees
torch's allocations too); elsewhere it falls back to ``tracemalloc`` (numpy only).

Usage::

    python benchmarks/bench_eer.py                  # 100k trials
    python benchmarks/bench_eer.py --trials 20000 --target-share 0.05
"""

from __future__ import annotations

import argparse
import time
import tracemalloc
from pathlib import Path

import numpy as np
import torch
from speechbrain.utils.metric_stats import EER as speechbrain_eer

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
    args = parser.parse_args(argv)

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
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())

"""EER speed and memory: the sort-based :func:`segreconcat_aug.evaluation.metrics.eer` vs SpeechBrain's ``EER``;
the speaker bootstrap's resampled EERs, vectorized vs a per-resample loop.

Both run in one process on the same synthetic float32 scores (a VPAC-like 5 %
of target trials), so the ratio is what sorting buys. Target: >= 50x faster,
the same value (to 1e-9). Peak memory is the growth of the process's resident
set during each call (Linux ``/proc/self/clear_refs`` + ``VmHWM``, which sees
torch's allocations too); elsewhere it falls back to ``tracemalloc`` (numpy only).

Bootstrap part: :func:`segreconcat_aug.evaluation.bootstrap.resampled_metrics` (all resamples
at once) vs ``tests/bootstrap_reference.py``'s ``resampled_metrics_loop`` (each
resample's trial set built and scored on its own), EER and minDCF of every
resample, on 100k trials of 400 speakers x 1000 resamples, the process pinned to
one core. Target: at most 5 s, the same values (to 1e-9).

Privacy part: every metric of :mod:`segreconcat_aug.evaluation.privacy` (point values with their population
sweeps, and all of them on 1000 speaker resamples) plus the resampled EER/minDCF, on four crossed
lists of the challenge's sizes (dev/test x f/m: 15/14/16/13 enrolled speakers, 50,360 trials), one
core, CPU seconds (``time.process_time``: the machine may be shared). Target: at most 10 s. Beside it,
the reference implementations on the same scores: VPC 2024's linkability and cllr, ZEBRA, legal_eval
(pi_link and Singling Out sweeps; installed with the package) and lir's cllr_min (where lir is installed:
it is no dependency), one evaluation each, and what 1000 resamples would take with them (x 1001,
extrapolated). VPC and ZEBRA are not on PyPI: give their checkouts and an interpreter that runs them
(``benchmarks/privacy_reference.py`` says which)::

    python benchmarks/bench_eer.py --part privacy --reference-python /path/to/venv/bin/python \
        --vpc /path/to/Voice-Privacy-Challenge-2024 --zebra /path/to/zebra

Usage::

    python benchmarks/bench_eer.py                  # 100k trials, EER and bootstrap parts
    python benchmarks/bench_eer.py --part bootstrap --resamples 1000
    python benchmarks/bench_eer.py --part privacy   # without the VPC/ZEBRA timings unless given
    python benchmarks/bench_eer.py --trials 20000 --target-share 0.05
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np
import torch
from speechbrain.utils.metric_stats import EER as speechbrain_eer

from segreconcat_aug.evaluation.bootstrap import (
    SpeakerWeights,
    resampled_metrics,
    speaker_counts,
    trial_design,
)
from segreconcat_aug.evaluation.metrics import eer

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from bootstrap_reference import resampled_metrics_loop  # noqa: E402  (the one-resample-at-a-time reference)

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
    parser.add_argument("--part", choices=["eer", "bootstrap", "privacy", "all"], default="all")
    parser.add_argument("--resamples", type=int, default=1000)
    parser.add_argument("--speakers", type=int, default=400)
    parser.add_argument("--reference-python", help="interpreter for benchmarks/privacy_reference.py")
    parser.add_argument("--vpc", help="checkout of Voice-Privacy-Challenge-2024 (privacy part)")
    parser.add_argument("--zebra", help="checkout of Voice-Privacy-Challenge/zebra (privacy part)")
    args = parser.parse_args(argv)
    ok = True
    if args.part in ("eer", "all"):
        ok &= bench_point_eer(args)
    if args.part in ("bootstrap", "all"):
        ok &= bench_bootstrap(args)
    if args.part in ("privacy", "all"):
        ok &= bench_privacy(args)
    return 0 if ok else 1


#: The challenge's lists: enrolled speakers, target trials, utterances of speakers heard only as impostors.
CHALLENGE_LISTS = {
    "dev_f": (15, 704, 314),
    "dev_m": (14, 644, 316),
    "test_f": (16, 548, 186),
    "test_m": (13, 449, 313),
}


def challenge_lists(seed: int = 0) -> dict:
    """Four crossed lists of the challenge's sizes (50,360 trials), with per-speaker score offsets."""
    from segreconcat_aug.evaluation.trials import SubsetScores

    rng = np.random.default_rng(seed)
    subsets = {}
    for name, (enrolled_count, n_target, n_other) in CHALLENGE_LISTS.items():
        enrolled = [f"{name}-e{k}" for k in range(enrolled_count)]
        others = [f"{name}-x{k}" for k in range(5)]
        owners = [enrolled[k % enrolled_count] for k in range(n_target)] + [
            others[k % 5] for k in range(n_other)
        ]
        utterances = [f"{owner}-{k}" for k, owner in enumerate(owners)]
        effect = {s: rng.normal(0, 0.05) for s in enrolled + others}
        enroll = [e for e in enrolled for _ in utterances]
        test = [u for _ in enrolled for u in utterances]
        speakers = [s for _ in enrolled for s in owners]
        targets = np.array([e == s for e, s in zip(enroll, speakers)])
        offsets = np.array([effect[e] + effect[s] for e, s in zip(enroll, speakers)])
        scores = (rng.normal(0.25, 0.15, len(targets)) + 0.2 * targets + offsets).astype(np.float32)
        subsets[name] = SubsetScores(name, Path(name), enroll, test, targets, scores, 0, speakers)
    return subsets


def _cpu(fn, *args, **kwargs):
    start = time.process_time()
    result = fn(*args, **kwargs)
    return result, time.process_time() - start


def bench_privacy(args) -> bool:
    """All privacy metrics with their intervals on the challenge's 50,360 trials, one core, vs the references."""
    from threadpoolctl import threadpool_limits

    from segreconcat_aug.evaluation.intervals import subset_design
    from segreconcat_aug.evaluation.privacy import ListPrivacy

    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    subsets = challenge_lists(args.seed)
    trials = sum(len(s.targets) for s in subsets.values())
    with threadpool_limits(1):
        designs = {name: subset_design(s)[0] for name, s in subsets.items()}
        counts = speaker_counts(list(designs.values()), args.resamples, args.seed)
        weights = {name: SpeakerWeights(d, counts) for name, d in designs.items()}
        point = resampled = eer_boot = 0.0
        for name, subset in subsets.items():
            metrics, seconds = _cpu(ListPrivacy, subset, designs[name])
            _, more = _cpu(metrics.point)
            point += seconds + more
            _, seconds = _cpu(metrics.resampled, weights[name])
            resampled += seconds
            _, seconds = _cpu(resampled_metrics, subset.scores, subset.targets, weights[name])
            eer_boot += seconds
        references = reference_times(args, subsets)
    total = point + resampled + eer_boot
    print(
        f"\nprivacy metrics: {trials} trials in {len(subsets)} crossed lists of the challenge's sizes, "
        f"{args.resamples} speaker resamples, 1 core, CPU seconds (process_time)"
    )
    print(f"{'ours':48}{'seconds':>10}")
    print(f"{'  point values (all metrics, population sweeps)':48}{point:10.2f}")
    print(f"{'  resampled EER + 2 minDCF (bootstrap.py)':48}{eer_boot:10.2f}")
    print(f"{'  resampled privacy metrics (all 11)':48}{resampled:10.2f}")
    print(f"{'  total':48}{total:10.2f}   target <= 10 s: {'met' if total <= 10 else 'MISSED'}")
    if references:
        one = sum(references.values())
        print(f"{'references, one evaluation of the 4 lists':48}{'seconds':>10}")
        for label, seconds in references.items():
            print(f"  {label:46}{seconds:10.2f}")
        repeated = one * (args.resamples + 1)
        print(
            f"  {'x ' + str(args.resamples + 1) + ' (point + resamples, extrapolated)':46}{repeated:10.0f}"
            f"   ours: {repeated / total:.0f}x less"
        )
    return total <= 10


def reference_times(args, subsets) -> dict:
    """CPU seconds of the reference implementations on the same scores (one evaluation of every list)."""
    from legal_eval.metrics.singling_out import singling_out

    from segreconcat_aug.evaluation.intervals import subset_design
    from segreconcat_aug.evaluation.privacy import ListPrivacy, pi_link_sweep

    try:  # lir is no dependency (docs/evaluation.md: measured, not used): timed where it is installed
        from lir.data.models import LLRData
        from lir.metrics import cllr_min
    except ImportError:
        cllr_min = None
        print("(lir not installed, so its cllr_min is not timed: pip install lir to add it)")
    times = {"legal_eval pi_link + Singling Out sweeps": 0.0}
    if cllr_min is not None:
        times["lir cllr_min (not used: differs on ties)"] = 0.0
    for subset in subsets.values():
        metrics = ListPrivacy(subset, subset_design(subset)[0])
        _, seconds = _cpu(pi_link_sweep, metrics.structure)
        times["legal_eval pi_link + Singling Out sweeps"] += seconds
        start = time.process_time()
        for fold, (scores, *_rest) in enumerate(metrics.singling.folds):
            for size in (2, 5, 10, metrics.singling.n_dataset):
                singling_out(scores, size, n_runs=5, seed=0, fold=fold)
        times["legal_eval pi_link + Singling Out sweeps"] += time.process_time() - start
        if cllr_min is not None:
            data = LLRData(
                features=subset.scores.astype(np.float64) / np.log(10), labels=subset.targets.astype(int)
            )
            _, seconds = _cpu(cllr_min, data)
            times["lir cllr_min (not used: differs on ties)"] += seconds
    if not (args.reference_python and args.vpc and args.zebra):
        print("(VPC 2024 and ZEBRA not timed: give --reference-python, --vpc and --zebra)")
        return times
    with tempfile.TemporaryDirectory() as folder:
        files = []
        for name, subset in subsets.items():
            files.append(str(Path(folder) / f"{name}.npz"))
            np.savez(files[-1], scores=subset.scores, targets=subset.targets)
        script = Path(__file__).with_name("privacy_reference.py")
        run = subprocess.run(
            [args.reference_python, str(script), "--vpc", args.vpc, "--zebra", args.zebra, *files],
            capture_output=True,
            text=True,
            check=True,
        )
    found = json.loads(run.stdout)["sets"].values()
    labels = {
        "linkability": "VPC 2024 linkability",
        "cllr": "VPC 2024 cllr",
        "min_cllr_rocch_eer": "VPC 2024 min_cllr + ROCCH-EER",
        "zebra": "ZEBRA (D_ECE, max |log10 LR|)",
    }
    for key, label in labels.items():
        times[label] = sum(entry["cpu_seconds"][key] for entry in found)
    return times


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

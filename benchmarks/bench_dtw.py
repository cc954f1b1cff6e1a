"""All-pairs DTW and the whole AR order: ours (numba) vs a per-pair ``librosa.sequence.dtw`` loop.

Part 1, the issue's yardstick: an utterance of 35 segments, MFCC-like matrices 13 x T with T
uniform in 15..80; all 595 pairs ``i < j``; milliseconds per utterance with 1 and 2 numba
threads, beside the librosa loop over the same pairs (librosa's DTW is single-threaded).
Target: ours >= 20x faster on one thread. The maximum relative difference of the distances
is printed too (must be <= 1e-9).

Part 2: the whole AR order (MFCC + DTW + greedy chain) per real LibriSpeech fixture
utterance (uniform word times from the transcript, ``cover`` segments), ours vs the same
computation with the librosa DTW loop, on one thread, in process CPU time (on a shared
machine, wall time of such short calls mostly measures the other processes).

One run each (no repeats): a ratio, not a statistic. Numba compilation is excluded (it is
cached on disk after the first run) and reported separately.

Usage::

    python benchmarks/bench_dtw.py [--segments 35] [--utterances 5] [--seed 0]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

# Single-thread comparison: BLAS threads (librosa's mel projection) would spin and blur CPU times.
for _name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_name, "1")

import librosa  # noqa: E402
import numba  # noqa: E402
import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from vpac_fixture import FIXTURES, fixture_audio  # noqa: E402

from segreconcat_aug.data.kaldi import read_kaldi_map  # noqa: E402
from segreconcat_aug.method.dtw import pairwise_dtw  # noqa: E402
from segreconcat_aug.method.segments import word_segments  # noqa: E402
from segreconcat_aug.method.similarity import acoustic_order, greedy_chain, mfcc_features  # noqa: E402


def librosa_pairs(features) -> np.ndarray:
    """The reference: librosa.sequence.dtw once per pair i < j."""
    count = len(features)
    out = np.zeros((count, count))
    for i in range(count):
        for j in range(i + 1, count):
            out[i, j] = out[j, i] = librosa.sequence.dtw(features[i], features[j], metric="euclidean")[0][
                -1, -1
            ]
    return out


def random_utterance(rng, segments: int) -> list[np.ndarray]:
    return [rng.normal(size=(13, int(rng.integers(15, 81)))) * 30 for _ in range(segments)]


def part_dtw(args) -> None:
    rng = np.random.default_rng(args.seed)
    utterances = [random_utterance(rng, args.segments) for _ in range(args.utterances)]
    start = time.perf_counter()
    pairwise_dtw(utterances[0][:2])
    print(f"numba load/compile: {1000 * (time.perf_counter() - start):.0f} ms (once per process)")
    librosa_pairs(utterances[0][:2])  # librosa's own numba kernel compiles on its first call: not timed
    start, cpu = time.perf_counter(), time.process_time()
    reference = librosa_pairs(utterances[0])
    librosa_ms = 1000 * (time.perf_counter() - start)
    librosa_cpu = 1000 * (time.process_time() - cpu)
    pairs = args.segments * (args.segments - 1) // 2
    print(f"\nAll-pairs DTW, {args.segments} segments ({pairs} pairs), 13 x T, T ~ U[15, 80]")
    print(
        f"{'threads':>7} {'ours ms/utt':>12} {'librosa ms/utt':>15} {'speed-up':>9} {'max rel diff':>13}  (wall)"
    )
    for threads in (1, 2):
        if threads > numba.config.NUMBA_NUM_THREADS:
            print(f"{threads:>7} (only {numba.config.NUMBA_NUM_THREADS} thread(s) available)")
            continue
        numba.set_num_threads(threads)
        pairwise_dtw(utterances[0])  # warm the thread pool
        start, cpu = time.perf_counter(), time.process_time()
        results = [pairwise_dtw(features) for features in utterances]
        ours_ms = 1000 * (time.perf_counter() - start) / len(utterances)
        ours_cpu = 1000 * (time.process_time() - cpu) / len(utterances)
        diff = np.max(np.abs(results[0] - reference) / np.maximum(np.abs(reference), 1e-300))
        print(
            f"{threads:>7} {ours_ms:>12.2f} {librosa_ms:>15.1f} {librosa_ms / ours_ms:>8.1f}x {diff:>13.1e}"
        )
        if threads == 1:
            ratio = librosa_cpu / ours_cpu
            print(
                f"{'(cpu)':>7} {ours_cpu:>12.2f} {librosa_cpu:>15.1f} {ratio:>8.1f}x {'':>13}  process CPU time"
            )
    numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)


def part_orders(args) -> None:
    texts = read_kaldi_map(FIXTURES / "text")
    print("\nWhole AR order (MFCC + DTW + greedy) per real fixture utterance (uniform word times, cover")
    print("segments); one thread; process CPU time; each utterance once untimed first (warm caches)")
    print(
        f"{'utterance':>16} {'dur s':>6} {'segs':>5} {'mfcc ms':>8} {'dtw ms':>7} {'librosa dtw':>11}"
        f" {'ours ms':>8} {'with librosa':>12} {'speed-up':>9} {'same order':>10}"
    )
    numba.set_num_threads(1)
    clock = time.process_time
    totals = [0.0, 0.0]
    for utt, text in sorted(texts.items()):
        audio = fixture_audio(utt)
        words = text.split()
        step = len(audio) / 16000 / len(words)
        starts = step * np.arange(len(words))
        segments = word_segments(starts, starts + step, len(audio), 16000, "cover")
        acoustic_order(segments, audio, None, sample_rate=16000)  # warm-up, not timed
        librosa_pairs(mfcc_features(audio, segments, 16000)[:2])
        start = clock()
        features = mfcc_features(audio, segments, 16000)
        mfcc_ms = 1000 * (clock() - start)
        start = clock()
        ours_sim = 1.0 / (1.0 + pairwise_dtw(features))
        dtw_ms = 1000 * (clock() - start)
        start = clock()
        order = greedy_chain(ours_sim, 0)
        greedy_ms = 1000 * (clock() - start)
        start = clock()
        reference_sim = 1.0 / (1.0 + librosa_pairs(features))
        librosa_ms = 1000 * (clock() - start)
        reference = greedy_chain(reference_sim, 0)
        ours = mfcc_ms + dtw_ms + greedy_ms
        slow = mfcc_ms + librosa_ms + greedy_ms
        same = (
            order.tolist()
            == reference.tolist()
            == acoustic_order(segments, audio, None, sample_rate=16000).tolist()
        )
        totals[0] += ours
        totals[1] += slow
        print(
            f"{utt:>16} {len(audio) / 16000:>6.2f} {len(segments):>5} {mfcc_ms:>8.1f} {dtw_ms:>7.2f}"
            f" {librosa_ms:>11.1f} {ours:>8.1f} {slow:>12.1f} {slow / ours:>8.1f}x {str(same):>10}"
        )
    print(
        f"{'total':>16} {'':>6} {'':>5} {'':>8} {'':>7} {'':>11} {totals[0]:>8.1f} {totals[1]:>12.1f}"
        f" {totals[1] / totals[0]:>8.1f}x"
    )
    numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--segments", type=int, default=35)
    parser.add_argument("--utterances", type=int, default=5, help="random utterances timed for ours (mean)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--skip-orders", action="store_true", help="only the DTW part")
    args = parser.parse_args(argv)
    part_dtw(args)
    if not args.skip_orders:
        part_orders(args)


if __name__ == "__main__":
    main()

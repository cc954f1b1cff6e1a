"""Throughput of one data-loading worker: read + 3 s crop, without and with SegReConcat (RR, concat).

Both variants run in the same process over the same real utterances, so the
ratio is what SegReConcat costs a DataLoader worker. Target: ratio >= 0.8.

Usage::

    python benchmarks/bench_pipeline.py                 # the LibriSpeech test fixtures
    python benchmarks/bench_pipeline.py --folder DIR --alignments CACHE   # your own data
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from segreconcat_aug.alignment import load_alignments  # noqa: E402
from segreconcat_aug.audio import read_audio  # noqa: E402
from segreconcat_aug.augment import SegReConcat  # noqa: E402
from segreconcat_aug.kaldi import read_wav_scp  # noqa: E402
from segreconcat_aug.pipeline import TrainAudioPipeline  # noqa: E402


def throughput(pipeline: TrainAudioPipeline, wavs: dict, repeats: int) -> float:
    """Samples (3 s crops) per second over ``repeats`` passes (epochs) of ``wavs``."""
    count = 0
    start = time.perf_counter()
    for epoch in range(repeats):
        pipeline.set_epoch(epoch)
        for utt, wav in wavs.items():
            pipeline(f"{utt}@0", utt, wav)
            count += 1
    return count / (time.perf_counter() - start)


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--folder", help="Kaldi-style folder (wav.scp); default: the test fixtures")
    parser.add_argument("--alignments", help="alignment cache for --folder")
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args(argv)
    if args.folder:
        wavs = read_wav_scp(Path(args.folder) / "wav.scp")
        cache = args.alignments
    else:
        from vpac_fixture import build_vpac_layout

        root = build_vpac_layout(tempfile.mkdtemp(), systems=("B3",))
        wavs = read_wav_scp(root / "B3" / "data" / "train-clean-360_B3" / "wav.scp", root=root)
        cache = root / "alignments" / "B3.jsonl"
    augmenter = SegReConcat(
        load_alignments(cache), mode="concat", strategy="random", missing_alignment="passthrough"
    )
    plain_pipeline, augmented_pipeline = TrainAudioPipeline(None), TrainAudioPipeline(augmenter)
    # Warm up: the page cache (both read from memory) and the compiled render kernel.
    throughput(plain_pipeline, wavs, 1)
    throughput(augmented_pipeline, wavs, 1)
    plain = throughput(plain_pipeline, wavs, args.repeats)
    augmented = throughput(augmented_pipeline, wavs, args.repeats)
    seconds = sum(len(read_audio(wav)) for wav in wavs.values()) / 16000
    print(
        f"utterances: {len(wavs)} (mean {seconds / len(wavs):.1f} s; VPAC train-clean-360: 12.3 s)  passes: {args.repeats}"
    )
    print(f"{'pipeline':<36}{'samples/s':>12}")
    print(f"{'read + 3 s crop':<36}{plain:>12.1f}")
    print(f"{'read + SegReConcat RR concat + crop':<36}{augmented:>12.1f}")
    ratio = augmented / plain
    print(f"ratio (target >= 0.8): {ratio:.3f}  {'OK' if ratio >= 0.8 else 'BELOW TARGET'}")


if __name__ == "__main__":
    main()

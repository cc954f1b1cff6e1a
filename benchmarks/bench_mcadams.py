"""McAdams anonymization speed: the vectorized :func:`mcadams` vs the B2 script's frame loop.

Both run in the same process on the same real utterances (the LibriSpeech test
fixtures, or your own files), so the ratio is what vectorizing buys. Target:
a 15 s utterance well under a second (real-time factor < 0.05).

Usage::

    python benchmarks/bench_mcadams.py
    python benchmarks/bench_mcadams.py FILE [FILE ...]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from mcadams_reference import mcadams_frame_loop  # noqa: E402

from segreconcat_aug.anonymizers.mcadams import mcadams  # noqa: E402
from segreconcat_aug.data.audio import read_audio  # noqa: E402

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "librispeech"


def seconds(fn, audios) -> float:
    start = time.perf_counter()
    for audio in audios:
        fn(audio, 0.8)
    return time.perf_counter() - start


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("files", nargs="*", help="audio files (16 kHz); default: the test fixtures")
    args = parser.parse_args(argv)
    files = args.files or sorted(FIXTURES.glob("*.flac"))
    audios = [read_audio(path) for path in files]
    total = sum(len(audio) for audio in audios) / 16000
    mcadams(audios[0][:16000], 0.8)  # numba warm-up of librosa.lpc, excluded from both timings
    ours = seconds(mcadams, audios)
    reference = seconds(mcadams_frame_loop, audios)
    print(f"utterances: {len(audios)}  audio: {total:.1f} s")
    print(f"{'':24}{'seconds':>10}{'real-time factor':>20}")
    print(f"{'mcadams (vectorized)':24}{ours:10.2f}{ours / total:20.4f}")
    print(f"{'B2 frame loop':24}{reference:10.2f}{reference / total:20.4f}")
    print(f"speed-up: {reference / ours:.1f}x   15 s utterance: ~{15 * ours / total:.2f} s")


if __name__ == "__main__":
    main()

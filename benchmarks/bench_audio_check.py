"""Cost of the pre-run audio check per file: ``check_audio: full`` beside ``header`` and a plain read.

Rows (per file, milliseconds of wall time, files in the page cache):

- ``soundfile.info`` (reference): the header-only check the recipes did before;
- ``check_audio: header``: :func:`segreconcat_aug.data.audio_check.check_audio_files` opening headers;
- ``soundfile.read`` (reference): decoding the whole file, nothing else;
- ``check_audio: full``: decoding to the end + NaN / length / silence measurements;
- ``rerun, cached``: the same check again (the cache: one ``stat`` per file).

The utterances are the LibriSpeech test fixtures joined into files of the challenge's
training length (VPAC train-clean-360: mean 12.3 s), in FLAC and 16-bit WAV (the
challenge ships WAV). The last lines extrapolate the full check to 104k files on the
given number of worker threads (``--workers``, default 2), assuming the disk keeps up;
a cold network file system adds its read time.

Usage::

    python benchmarks/bench_audio_check.py [--files 60] [--workers 2] [--seconds 12.3]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import soundfile

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from vpac_fixture import fixture_audio, fixture_utterances  # noqa: E402

from segreconcat_aug.data.audio_check import check_audio_files  # noqa: E402

TRAIN_FILES = 104_014  # VPAC train-clean-360 utterances


def build_files(folder: Path, count: int, seconds: float, fmt: str) -> dict[str, str]:
    audio = np.concatenate([fixture_audio(utt) for utt in fixture_utterances()])
    length = int(seconds * 16000)
    wav = {}
    for k in range(count):
        start = (k * 7919) % (len(audio) - length)
        path = folder / f"u{k:04d}.{fmt}"
        soundfile.write(path, audio[start : start + length], 16000, subtype="PCM_16")
        wav[f"u{k:04d}"] = str(path)
    return wav


def per_file(fn, wav) -> float:
    fn(wav)  # warm-up: page cache and imports
    started = time.perf_counter()
    fn(wav)
    return (time.perf_counter() - started) / len(wav) * 1000


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--files", type=int, default=60)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=12.3)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        for fmt in ("flac", "wav"):
            folder = Path(tmp) / fmt
            folder.mkdir()
            wav = build_files(folder, args.files, args.seconds, fmt)
            rows = {
                "soundfile.info (reference)": per_file(
                    lambda w: [soundfile.info(p) for p in w.values()], wav
                ),
                "check_audio: header": per_file(
                    lambda w: check_audio_files(w, mode="header", workers=1, progress=False), wav
                ),
                "soundfile.read (reference)": per_file(
                    lambda w: [soundfile.read(p) for p in w.values()], wav
                ),
                "check_audio: full, 1 thread": per_file(
                    lambda w: check_audio_files(w, mode="full", workers=1, progress=False), wav
                ),
                f"check_audio: full, {args.workers} threads": per_file(
                    lambda w, n=args.workers: check_audio_files(w, mode="full", workers=n, progress=False),
                    wav,
                ),
            }
            cache = Path(tmp) / f"{fmt}.jsonl"
            check_audio_files(wav, mode="full", workers=args.workers, cache=cache, progress=False)
            rows["rerun, cached"] = per_file(
                lambda w, n=args.workers, c=cache: check_audio_files(
                    w, mode="full", workers=n, cache=c, progress=False
                ),
                wav,
            )
            print(f"\n{fmt.upper()}, {args.files} files of {args.seconds} s (ms per file):")
            for name, value in rows.items():
                print(f"  {name:<34} {value:8.3f}")
            full = rows[f"check_audio: full, {args.workers} threads"]
            print(
                f"  full check / plain read: {full / rows['soundfile.read (reference)']:.2f}x; "
                f"{TRAIN_FILES} files on {args.workers} threads: {full * TRAIN_FILES / 60000:.1f} min "
                f"(header only: {rows['check_audio: header'] * TRAIN_FILES / 60000:.1f} min, "
                f"cached rerun: {rows['rerun, cached'] * TRAIN_FILES / 1000:.1f} s)"
            )


if __name__ == "__main__":
    main()

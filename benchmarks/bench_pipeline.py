"""Throughput of one data-loading worker: read + 3 s crop, without and with SegReConcat (RR, concat).

All variants run in the same process over the same real utterances, so the
ratio is what SegReConcat costs a DataLoader worker. Target: ratio >= 0.8
against the reference the issue names, a full-file read + 3 s random crop.

Rows:

- ``read whole file + 3 s crop``: the reference (what the training pipeline did
  before it learned to read spans).
- ``TrainAudioPipeline, no augmentation``: today's baseline pipeline, which reads
  only the 3 s it returns.
- ``TrainAudioPipeline + SegReConcat``: plans the augmented signal from the
  file's length and reads one span covering the words its crop is made of.

Two sets of utterances: the LibriSpeech test fixtures as they are (mean 3.8 s),
and the same audio joined into utterances of the challenge's training length
(VPAC train-clean-360: mean 12.3 s), since what a partial read saves grows with
the file's length.

Usage::

    python benchmarks/bench_pipeline.py                 # the LibriSpeech test fixtures
    python benchmarks/bench_pipeline.py --folder DIR --alignments CACHE   # your own data
    python benchmarks/bench_pipeline.py --folder DIR --alignments CACHE --utterances 1000

``--folder`` measures a seeded sample of ``--utterances`` utterances (default 200)
of the folder's ``wav.scp`` that have an alignment, so it takes about a minute
on any folder, challenge-size included.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from segreconcat_aug.align.cache import (  # noqa: E402
    UtteranceAlignment,
    Word,
    load_alignments,
)
from segreconcat_aug.data.audio import audio_duration, read_audio, write_audio  # noqa: E402
from segreconcat_aug.data.kaldi import read_wav_scp  # noqa: E402
from segreconcat_aug.method.augment import SegReConcat  # noqa: E402
from segreconcat_aug.training.pipeline import _CROP_STREAM, TrainAudioPipeline, random_crop  # noqa: E402

VPAC_TRAIN_MEAN_S = 12.3


class FullReadCrop(TrainAudioPipeline):
    """The reference: read the whole file, then take the 3 s crop (same draws)."""

    def __call__(self, row_id, utt_id, wav):
        audio = read_audio(wav, sample_rate=self.sample_rate)
        rng = self._draw(self.epoch, row_id, stream=_CROP_STREAM)
        return torch.from_numpy(np.ascontiguousarray(random_crop(audio, self.crop_samples, rng)))


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


def joined(wavs: dict, cache, target_s: float, folder: Path) -> tuple[dict, Path]:
    """Utterances of about ``target_s`` seconds: each fixture followed by the next ones (cyclic).

    Real audio end to end; word times are shifted with it.
    """
    alignments = load_alignments(cache)
    ids = list(wavs)
    audio = {utt: read_audio(wavs[utt]) for utt in ids}
    out_wavs, out_cache = {}, folder / "joined.jsonl"
    with open(out_cache, "w", encoding="utf-8") as writer:
        for k, first in enumerate(ids):
            pieces, words, offset, j = [], [], 0.0, k
            # Add the next utterance while that brings the length closer to the target.
            while not pieces or offset + len(audio[ids[j % len(ids)]]) / 16000 / 2 < target_s:
                utt = ids[j % len(ids)]
                starts, ends = alignments.spans(utt)
                words += [Word("w", offset + s, offset + e) for s, e in zip(starts, ends)]
                pieces.append(audio[utt])
                offset += len(audio[utt]) / 16000
                j += 1
            name = f"joined-{first}"
            out_wavs[name] = str(folder / f"{name}.wav")
            write_audio(out_wavs[name], np.concatenate(pieces))
            writer.write(UtteranceAlignment(name, offset, words, "joined").to_json() + "\n")
    return out_wavs, out_cache


def sample(wavs: dict, alignments, count: int, seed: int) -> dict:
    """A seeded sample of ``count`` aligned utterances (all of them when there are fewer), in file order."""
    aligned = [utt for utt in wavs if utt in alignments]
    if not aligned:
        raise SystemExit("no utterance of the folder's wav.scp has an alignment in --alignments")
    if len(aligned) > count:
        picked = np.random.default_rng(seed).choice(len(aligned), size=count, replace=False)
        aligned = [aligned[k] for k in sorted(picked)]
    return {utt: wavs[utt] for utt in aligned}


def measure(title: str, wavs: dict, alignments, repeats: int, rounds: int = 5) -> None:
    augmenter = SegReConcat(alignments, mode="concat", strategy="random", missing_alignment="passthrough")
    rows = {
        "read whole file + 3 s crop (reference)": FullReadCrop(None),
        "TrainAudioPipeline, no augmentation": TrainAudioPipeline(None),
        "TrainAudioPipeline + SegReConcat RR": TrainAudioPipeline(augmenter),
    }
    for pipeline in rows.values():  # warm up: the page cache and the compiled kernels
        throughput(pipeline, wavs, 1)
    # Rounds with the variants interleaved, and the median round: a shared machine's load
    # comes in bursts, which would otherwise land on one variant.
    samples = {name: [] for name in rows}
    for _ in range(rounds):
        for name, pipeline in rows.items():
            samples[name].append(throughput(pipeline, wavs, max(repeats // rounds, 1)))
    rates = {name: float(np.median(values)) for name, values in samples.items()}
    seconds = sum(audio_duration(wav) for wav in wavs.values())
    print(
        f"\n{title}: {len(wavs)} utterances, mean {seconds / len(wavs):.1f} s, "
        f"{rounds} rounds of {max(repeats // rounds, 1)} passes (median round)"
    )
    print(f"{'pipeline':<42}{'samples/s':>10}{'vs reference':>14}")
    reference = rates["read whole file + 3 s crop (reference)"]
    for name, rate in rates.items():
        print(f"{name:<42}{rate:>10.1f}{rate / reference:>13.2f}x")
    ratio = rates["TrainAudioPipeline + SegReConcat RR"] / reference
    print(f"ratio (target >= 0.8): {ratio:.3f}  {'OK' if ratio >= 0.8 else 'BELOW TARGET'}")


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--folder", help="Kaldi-style folder (wav.scp); default: the test fixtures")
    parser.add_argument("--alignments", help="alignment cache for --folder")
    parser.add_argument(
        "--data_root", help="--folder: the challenge root its relative wav.scp paths start from"
    )
    parser.add_argument("--utterances", type=int, default=200, help="--folder: how many to sample")
    parser.add_argument("--seed", type=int, default=0, help="--folder: the sample's seed")
    parser.add_argument(
        "--repeats", type=int, help="passes over the utterances (default 20; 5 with --folder)"
    )
    args = parser.parse_args(argv)
    if args.folder:
        if not args.alignments:
            parser.error("--folder needs --alignments")
        alignments = load_alignments(args.alignments)
        folder = Path(args.folder)
        # Relative wav.scp paths: against the challenge root (<root>/<SYS>/data/<set>/), else the folder.
        root = args.data_root or (folder.parents[2] if len(folder.parents) > 2 else folder)
        wavs = sample(read_wav_scp(folder / "wav.scp", root=root), alignments, args.utterances, args.seed)
        measure(f"{args.folder} (a sample)", wavs, alignments, args.repeats or 5)
        return
    args.repeats = args.repeats or 20
    from vpac_fixture import build_vpac_layout

    scratch = Path(tempfile.mkdtemp())
    root = build_vpac_layout(scratch, systems=("B3",))
    wavs = read_wav_scp(root / "B3" / "data" / "train-clean-360_B3" / "wav.scp", root=root)
    cache = root / "alignments" / "B3.jsonl"
    measure("LibriSpeech fixtures as they are", wavs, load_alignments(cache), args.repeats)
    long_wavs, long_cache = joined(wavs, cache, VPAC_TRAIN_MEAN_S, scratch)
    measure(
        f"the same audio joined to about {VPAC_TRAIN_MEAN_S} s (VPAC train length)",
        long_wavs,
        load_alignments(long_cache),
        args.repeats,
    )


if __name__ == "__main__":
    main()

"""Real-time factor of the Whisper backends side by side, same audio, same model size, CPU.

Audio: the real LibriSpeech fixture utterances (tests/fixtures/librispeech, 16 kHz).
RTF = processing seconds / audio seconds (lower is faster; 0.01 = 100x real time).

The three Whisper backends of ``recipes/align.py`` run random-weight models of the same
dimensions (``--dims``: tiny, base, small or medium; the hub cannot be assumed reachable,
and the cost per token does not depend on the weights):

- ``transformers``: :class:`segreconcat_aug.align.aligners.whisper.WhisperAligner` on
  :func:`segreconcat_aug.testing.tiny_whisper` with those dimensions, float32;
- ``faster-whisper``: the *same* model converted by CTranslate2
  (``tests/tiny_models.py``): same weights and vocabulary (its
  prompt lacks the language and task tokens, as CTranslate2 takes a vocabulary this small
  for an English-only model, so its random words differ), float32 and int8 (the CPU default);
- ``openai-whisper``: a random checkpoint of the same dimensions
  (``tests/tiny_models.py``; its vocabulary is the real 51,864
  tokens, so its output layer is larger), batch 1, one temperature, the same token budget.

Every backend decodes at most ``--max_new_tokens`` tokens per utterance (a real 12 s
utterance has ~35 words, ~45 tokens). The verdict line checks the target of issue 12:
faster-whisper at least 3x faster than the transformers backend at equal model size.
pocketsphinx (ours vs a bare ``Decoder`` loop) is printed after it.

One run each after one warm-up batch (no repeats): a ratio on this machine, not a statistic.
On a GPU: ``benchmarks/bench_gpu.py`` (Whisper-medium size, GPU-hours for the challenge data).

Usage::

    python benchmarks/bench_align.py [--dims base] [--batch_size 8] [--utterances 8]
        [--max_new_tokens 40] [--backends transformers faster-whisper openai-whisper pocketsphinx]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from tiny_models import WHISPER_SIZES, openai_sizes, transformers_sizes  # noqa: E402
from vpac_fixture import FIXTURES, fixture_utterances  # noqa: E402

from segreconcat_aug.align.aligners.pocketsphinx import PocketsphinxAligner, normalize_transcript  # noqa: E402
from segreconcat_aug.data.audio import SAMPLE_RATE, read_audio  # noqa: E402
from segreconcat_aug.data.kaldi import read_kaldi_map  # noqa: E402

TARGET_SPEEDUP = 3.0


def rtf_of(aligner, audios: list[np.ndarray], batch_size: int) -> tuple[float, float]:
    """``(RTF, words per utterance)`` after one warm-up batch."""
    batches = [audios[k : k + batch_size] for k in range(0, len(audios), batch_size)]
    aligner.align_batch(batches[0])
    start = time.perf_counter()
    results = [r for batch in batches for r in aligner.align_batch(batch)]
    seconds = time.perf_counter() - start
    words = [len(r) for r in results if isinstance(r, list)]
    return seconds / (sum(len(a) for a in audios) / SAMPLE_RATE), float(np.mean(words)) if words else 0.0


def bench_whisper_backends(args, audios: list[np.ndarray], workdir: Path) -> list[tuple]:
    from tiny_models import tiny_faster_whisper, tiny_openai_whisper

    from segreconcat_aug.testing import tiny_whisper

    rows = []
    if "transformers" in args.backends:
        from segreconcat_aug.align.aligners.whisper import WhisperAligner

        aligner = WhisperAligner(
            bundle=tiny_whisper(**transformers_sizes(args.dims)),
            batch_size=args.batch_size,
            max_new_tokens=args.max_new_tokens,
        )
        rows.append(("transformers", "float32", args.batch_size, *rtf_of(aligner, audios, args.batch_size)))
    if "faster-whisper" in args.backends:
        from segreconcat_aug.align.aligners.faster_whisper import FasterWhisperAligner

        folder = tiny_faster_whisper(workdir / "fw", **transformers_sizes(args.dims))
        for compute_type in ("float32", "int8"):
            aligner = FasterWhisperAligner(
                folder,
                device="cpu",
                compute_type=compute_type,
                batch_size=args.batch_size,
                max_new_tokens=args.max_new_tokens,
            )
            rows.append(
                ("faster-whisper", compute_type, args.batch_size, *rtf_of(aligner, audios, args.batch_size))
            )
    if "openai-whisper" in args.backends:
        from segreconcat_aug.align.aligners.openai_whisper import OpenAIWhisperAligner

        checkpoint = tiny_openai_whisper(workdir / "openai.pt", **openai_sizes(args.dims))
        options = {"temperature": 0.0, "sample_len": args.max_new_tokens, "condition_on_previous_text": False}
        aligner = OpenAIWhisperAligner(checkpoint, device="cpu", options=options)
        rows.append(("openai-whisper", "float32", 1, *rtf_of(aligner, audios, 1)))
    return rows


def bench_pocketsphinx(audios: list[np.ndarray], texts: list[str]) -> tuple[float, float]:
    """``(ours RTF, bare decoder RTF)``."""
    from pocketsphinx import Decoder

    aligner = PocketsphinxAligner()
    aligner.align(audios[0], texts[0])  # warm-up (loads the model)
    start = time.perf_counter()
    for audio, text in zip(audios, texts):
        aligner.align(audio, text)
    ours = time.perf_counter() - start
    decoder = Decoder(samprate=SAMPLE_RATE, bestpath=False, loglevel="FATAL")
    for word, phones in aligner._added.items():  # same dictionary: OOV words added by ours
        decoder.add_word(word, phones, True)
    start = time.perf_counter()
    for audio, text in zip(audios, texts):
        decoder.set_align_text(" ".join(normalize_transcript(text)))
        decoder.start_utt()
        decoder.process_raw((np.clip(audio, -1, 1) * 32767).astype("<i2").tobytes(), full_utt=True)
        decoder.end_utt()
        list(decoder.seg())
    theirs = time.perf_counter() - start
    seconds = sum(len(a) for a in audios) / SAMPLE_RATE
    return ours / seconds, theirs / seconds


def verdict(rows: list[tuple]) -> str | None:
    """The target line: best faster-whisper RTF against the transformers backend's."""
    reference = [row[3] for row in rows if row[0] == "transformers"]
    faster = [row[3] for row in rows if row[0] == "faster-whisper"]
    if not (reference and faster):
        return None
    speedup = reference[0] / min(faster)
    met = "MET" if speedup >= TARGET_SPEEDUP else "NOT MET"
    return f"faster-whisper is {speedup:.1f}x the transformers backend at equal size (target >= {TARGET_SPEEDUP:g}x): {met}"


def main(argv=None) -> list[tuple]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--backends", nargs="+", default=["transformers", "faster-whisper", "openai-whisper", "pocketsphinx"]
    )
    parser.add_argument("--dims", choices=sorted(WHISPER_SIZES), default="base")
    parser.add_argument("--batch_size", type=int, default=8)
    parser.add_argument("--max_new_tokens", type=int, default=40)
    parser.add_argument("--utterances", type=int, default=8)
    args = parser.parse_args(argv)
    sources = fixture_utterances()
    utts = sorted(sources)[: args.utterances]
    audios = [read_audio(sources[u]) for u in utts]
    seconds = sum(len(a) for a in audios) / SAMPLE_RATE
    print(
        f"{len(audios)} fixture utterances, {seconds:.1f} s of audio; Whisper dims: {args.dims} (random weights)"
    )
    with tempfile.TemporaryDirectory() as workdir:
        rows = bench_whisper_backends(args, audios, Path(workdir))
    if rows:
        reference = next((row[3] for row in rows if row[0] == "transformers"), float("nan"))
        print(
            f"\n{'backend':<16} {'compute':>8} {'batch':>5} {'RTF':>8} {'x real time':>11} {'vs transformers':>15} {'words/utt':>9}"
        )
        for backend, compute, batch, rtf, words in rows:
            print(
                f"{backend:<16} {compute:>8} {batch:>5} {rtf:>8.4f} {1 / rtf:>11.1f} {reference / rtf:>15.2f} {words:>9.1f}"
            )
        line = verdict(rows)
        if line:
            print("\n" + line)
    if "pocketsphinx" in args.backends:
        texts = read_kaldi_map(FIXTURES / "text")
        with_text = [u for u in utts if u in texts] or sorted(texts)[: args.utterances]
        ours, theirs = bench_pocketsphinx(
            [read_audio(sources[u]) for u in with_text], [texts[u] for u in with_text]
        )
        print(
            f"\npocketsphinx:en-us  ours RTF {ours:.4f}  bare Decoder loop RTF {theirs:.4f}  ours/ref {ours / theirs:.2f}"
        )
    return rows


if __name__ == "__main__":
    main()

"""Real-time factor of the aligners per backend and batch size, ours vs a plain reference.

Audio: the real LibriSpeech fixture utterances (tests/fixtures/librispeech, 16 kHz).
RTF = processing seconds / audio seconds (lower is faster; 0.01 = 100x real time).

- Whisper: ours (:class:`segreconcat_aug.aligners.whisper.WhisperAligner`, batched
  ``generate`` with the attention mask, word grouping, clamping) beside the transformers
  ``pipeline("automatic-speech-recognition", return_timestamps="word", batch_size=N)`` on
  the same model, per batch size.
- pocketsphinx: ours (:class:`segreconcat_aug.aligners.pocketsphinx.PocketsphinxAligner`:
  normalization, OOV handling, validation) beside a bare ``Decoder`` loop
  (``set_align_text`` + ``process_raw``) on the transcribed utterances.

By default Whisper is the tiny random model of :func:`segreconcat_aug.testing.tiny_whisper`
on the CPU: its numbers measure plumbing overhead only (its decoding length is arbitrary).
Real numbers need the real model on a GPU::

    python benchmarks/bench_align.py --model openai/whisper-medium --device cuda --batch_sizes 1 8 16 32

One run each, after one warm-up batch (no repeats): a ratio, not a statistic.

Usage::

    python benchmarks/bench_align.py [--backends whisper pocketsphinx] [--batch_sizes 1 4 8]
        [--model tiny-random-whisper] [--device cpu] [--max_new_tokens 24] [--utterances 12]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from vpac_fixture import FIXTURES, fixture_utterances  # noqa: E402

from segreconcat_aug.aligners.pocketsphinx import PocketsphinxAligner, normalize_transcript  # noqa: E402
from segreconcat_aug.aligners.whisper import WhisperAligner  # noqa: E402
from segreconcat_aug.audio import SAMPLE_RATE, read_audio  # noqa: E402
from segreconcat_aug.kaldi import read_kaldi_map  # noqa: E402


def _timed(function) -> float:
    start = time.perf_counter()
    function()
    return time.perf_counter() - start


def bench_whisper(args, audios: list[np.ndarray]) -> list[tuple]:
    from transformers import pipeline

    if args.model == "tiny-random-whisper":
        from segreconcat_aug.testing import tiny_whisper

        bundle = tiny_whisper(device=args.device)
    else:
        from segreconcat_aug.whisper import load_whisper

        bundle = load_whisper(args.model, device=args.device, dtype=args.dtype)
    aligner = WhisperAligner(bundle=bundle, max_new_tokens=args.max_new_tokens)
    reference = pipeline(
        "automatic-speech-recognition",
        model=bundle.model,
        tokenizer=bundle.tokenizer,
        feature_extractor=bundle.feature_extractor,
        device=bundle.device,
        dtype=bundle.dtype,
    )
    generate = {"max_new_tokens": args.max_new_tokens} if args.max_new_tokens else {}
    if bundle.multilingual:
        generate.update(language="en", task="transcribe")
    seconds = sum(len(a) for a in audios) / SAMPLE_RATE
    rows = []
    for batch_size in args.batch_sizes:
        batches = [audios[k : k + batch_size] for k in range(0, len(audios), batch_size)]
        aligner.align_batch(batches[0])  # warm-up
        start = time.perf_counter()
        for batch in batches:
            aligner.align_batch(batch)
        ours = time.perf_counter() - start
        options = {"return_timestamps": "word", "batch_size": batch_size, "generate_kwargs": generate}
        try:
            # Fresh input dicts each call: the pipeline pops their keys.
            reference([{"raw": a, "sampling_rate": SAMPLE_RATE} for a in batches[0]], **options)  # warm-up
            inputs = [{"raw": a, "sampling_rate": SAMPLE_RATE} for a in audios]
            start = time.perf_counter()
            reference(inputs, **options)
            theirs = time.perf_counter() - start
        except Exception as err:  # the reference is optional: report why it did not run
            print(f"  (pipeline reference failed at batch {batch_size}: {type(err).__name__}: {err})")
            theirs = float("nan")
        rows.append((f"whisper:{bundle.name}", batch_size, ours / seconds, theirs / seconds))
    return rows


def bench_pocketsphinx(args, audios: list[np.ndarray], texts: list[str]) -> list[tuple]:
    from pocketsphinx import Decoder

    aligner = PocketsphinxAligner()
    aligner.align(audios[0], texts[0])  # warm-up (loads the model)
    ours = _timed(lambda: [aligner.align(a, t) for a, t in zip(audios, texts)])
    decoder = Decoder(samprate=SAMPLE_RATE, bestpath=False, loglevel="FATAL")
    for word, phones in aligner._added.items():  # same dictionary: OOV words added by ours
        decoder.add_word(word, phones, True)

    def bare():
        for audio, text in zip(audios, texts):
            decoder.set_align_text(" ".join(normalize_transcript(text)))
            decoder.start_utt()
            decoder.process_raw((np.clip(audio, -1, 1) * 32767).astype("<i2").tobytes(), full_utt=True)
            decoder.end_utt()
            list(decoder.seg())

    theirs = _timed(bare)
    seconds = sum(len(a) for a in audios) / SAMPLE_RATE
    return [("pocketsphinx:en-us", 1, ours / seconds, theirs / seconds)]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", nargs="+", default=["whisper", "pocketsphinx"])
    parser.add_argument("--batch_sizes", nargs="+", type=int, default=[1, 4, 8])
    parser.add_argument("--model", default="tiny-random-whisper")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--max_new_tokens", type=int, default=24, help="0: the model's limit")
    parser.add_argument("--utterances", type=int, default=12)
    args = parser.parse_args(argv)
    args.max_new_tokens = args.max_new_tokens or None
    sources = fixture_utterances()
    texts = read_kaldi_map(FIXTURES / "text")
    rows = []
    if "whisper" in args.backends:
        utts = sorted(sources)[: args.utterances]
        rows += bench_whisper(args, [read_audio(sources[u]) for u in utts])
    if "pocketsphinx" in args.backends:
        utts = sorted(texts)[: args.utterances]
        rows += bench_pocketsphinx(args, [read_audio(sources[u]) for u in utts], [texts[u] for u in utts])
    print(f"\n{'aligner':<34} {'batch':>5} {'ours RTF':>9} {'reference RTF':>14} {'ours/ref':>9}")
    for name, batch, ours, theirs in rows:
        print(f"{name:<34} {batch:>5} {ours:>9.4f} {theirs:>14.4f} {ours / theirs:>9.2f}")
    print(
        "\nreference: transformers ASR pipeline (whisper), bare pocketsphinx Decoder loop (pocketsphinx)."
        "\nThe tiny random Whisper on CPU measures overhead only; run the real model on a GPU for RTFs."
    )


if __name__ == "__main__":
    main()

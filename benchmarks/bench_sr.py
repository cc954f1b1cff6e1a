"""SR segment features: batched encoder passes (ours) beside one segment per pass (the authors' loop),
and the two encoder backends side by side: transformers and CTranslate2 (faster-whisper's, the aligner's).

With ``sr_context: segment`` (the paper) every word segment is one 30 s Whisper encoder window, so an
utterance costs ~``words`` windows instead of one. This measures, on a whisper-medium-sized model
with random weights (the hub cannot be reached; the cost per window is the same), fp16 on a GPU:

- ours: :func:`segreconcat_aug.method.similarity.sr_vectors` over a batch of utterances, all their
  segments together, ``--encoder_batch`` windows per pass;
- reference: the same segments one per encoder pass, as the authors' script runs them;
- the utterance context (one window per utterance) for scale;
- the CTranslate2 encoder (:func:`segreconcat_aug.align.whisper_encoder.load_ctranslate2_encoder`) of the *same*
  model, converted by CTranslate2's converter (``tests/tiny_models.py``),
  batched as ours, at ``--compute_type`` (default: float16 on GPU, int8 on CPU, as the aligner), with
  how far its pooled features are from the transformers encoder's (largest absolute difference,
  smallest cosine) and the share of identical SR orders.

It prints segments/s of each, the ratios, and the GPU-hours of one system's 104k utterances
(12.3 s and ~32 words each on average).

Usage::

    python benchmarks/bench_sr.py --device cuda                # on a GPU machine, ~3 minutes
    python benchmarks/bench_sr.py --device cpu --tiny          # a smoke test of this script
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from tiny_models import tiny_faster_whisper, transformers_sizes  # noqa: E402

from segreconcat_aug.align.whisper_encoder import encoder_pooled, load_ctranslate2_encoder  # noqa: E402
from segreconcat_aug.method.segments import word_segments  # noqa: E402
from segreconcat_aug.method.similarity import semantic_order, sr_vectors  # noqa: E402
from segreconcat_aug.testing import tiny_whisper  # noqa: E402

UTTERANCES = 104_014  # train-clean-360, per system
MEAN_SECONDS = 12.3
WORDS_PER_SECOND = 2.6  # LibriSpeech read speech
MEDIUM = {**transformers_sizes("medium"), "decoder_layers": 2}  # the decoder is not run


def _timed(device: str, fn) -> float:
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    start = time.perf_counter()
    fn()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return time.perf_counter() - start


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--utterances", type=int, default=8)
    parser.add_argument("--encoder_batch", type=int, default=64)
    parser.add_argument("--tiny", action="store_true", help="a small model: a CPU smoke test")
    parser.add_argument(
        "--compute_type", default="auto", help="CTranslate2's (auto: float16 on GPU, int8 on CPU)"
    )
    parser.add_argument("--out", help="write the figures as JSON here")
    args = parser.parse_args(argv)
    dtype = torch.float16 if args.device.startswith("cuda") else torch.float32
    sizes = {} if args.tiny else MEDIUM
    bundle = tiny_whisper(0, device=args.device, dtype=dtype, **sizes)
    rng = np.random.default_rng(0)
    seconds = 3.0 if args.tiny else MEAN_SECONDS
    items = []
    for _ in range(args.utterances):
        audio = rng.normal(0, 0.05, int(seconds * 16000)).astype(np.float32)
        starts = np.arange(int(seconds * WORDS_PER_SECOND)) / WORDS_PER_SECOND
        items.append((audio, word_segments(starts, starts + 0.3, len(audio), 16000, "cover")))
    pieces = [audio[a:b] for audio, segments in items for a, b in segments.spans]
    sr_vectors(bundle, items[:1], batch_size=args.encoder_batch)  # warm-up

    ours = _timed(args.device, lambda: sr_vectors(bundle, items, batch_size=args.encoder_batch))
    reference = _timed(
        args.device, lambda: [encoder_pooled(bundle, [piece], batch_size=1) for piece in pieces]
    )
    utterance = _timed(
        args.device, lambda: sr_vectors(bundle, items, context="utterance", batch_size=args.encoder_batch)
    )
    with tempfile.TemporaryDirectory() as folder:
        encoder = load_ctranslate2_encoder(
            tiny_faster_whisper(folder, 0, **sizes), device=args.device, compute_type=args.compute_type
        )
        sr_vectors(encoder, items[:1], batch_size=args.encoder_batch)  # warm-up
        ctranslate2_seconds = _timed(
            args.device, lambda: sr_vectors(encoder, items, batch_size=args.encoder_batch)
        )
        theirs = sr_vectors(encoder, items, batch_size=args.encoder_batch)
    mine = sr_vectors(bundle, items, batch_size=args.encoder_batch)
    difference = max(float(np.abs(a - b).max()) for a, b in zip(theirs, mine))
    cosine = min(
        float(((a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)).min())
        for a, b in zip(theirs, mine)
    )
    same_orders = np.mean(
        [
            semantic_order(segments, audio, None, sample_rate=16000, vectors=a).tolist()
            == semantic_order(segments, audio, None, sample_rate=16000, vectors=b).tolist()
            for (audio, segments), a, b in zip(items, theirs, mine)
        ]
    )
    per_utterance = ours / len(items)
    figures = {
        "device": torch.cuda.get_device_name(0) if args.device.startswith("cuda") else "cpu",
        "segments": len(pieces),
        "ours_segments_per_s": len(pieces) / ours,
        "reference_segments_per_s": len(pieces) / reference,
        "speedup": reference / ours,
        "utterance_context_utterances_per_s": len(items) / utterance,
        "ctranslate2_compute_type": encoder.compute_type,
        "ctranslate2_segments_per_s": len(pieces) / ctranslate2_seconds,
        "ctranslate2_over_transformers": ours / ctranslate2_seconds,
        "ctranslate2_max_abs_difference": difference,
        "ctranslate2_min_cosine": cosine,
        "ctranslate2_same_orders": float(same_orders),
        "gpu_hours_per_system": UTTERANCES * per_utterance * (MEAN_SECONDS / seconds) / 3600,
    }
    print(
        f"SR segment features ({figures['device']}, {len(pieces)} segments of {len(items)} utterances):\n"
        f"  ours (batched, {args.encoder_batch} windows/pass): {figures['ours_segments_per_s']:8.1f} segments/s\n"
        f"  reference (one segment per pass):    {figures['reference_segments_per_s']:8.1f} segments/s\n"
        f"  ours / reference: {figures['speedup']:.2f}x\n"
        f"  utterance context: {figures['utterance_context_utterances_per_s']:.1f} utterances/s\n"
        f"  CTranslate2 encoder ({encoder.compute_type}, batched): {figures['ctranslate2_segments_per_s']:8.1f} "
        f"segments/s, {figures['ctranslate2_over_transformers']:.2f}x the transformers encoder; its features "
        f"differ by at most {difference:.2g} (min cosine {cosine:.6f}), the same SR order for "
        f"{100 * same_orders:.0f} % of the utterances\n"
        f"  one system (104k utterances), segment context: {figures['gpu_hours_per_system']:.2f} h"
    )
    if args.out:
        with open(args.out, "w", encoding="utf-8") as handle:
            json.dump(figures, handle, indent=2)
    return figures


if __name__ == "__main__":
    main()

"""What only a GPU can measure, in one short run: the figures behind docs/training.md and docs/alignment.md.

1. Training step of the paper's ECAPA-TDNN (hparams/ecapa_segreconcat.yaml: 1024 channels,
   Fbank, AAM softmax, Adam), fp32 beside bf16 autocast: samples/s and the GPU-hours of one
   epoch of one system (104k utterances, 2 x 3 s crops per 12.3 s utterance x 2 for concat).
2. Whisper word timestamps with Whisper-medium-sized models (random weights: the hub cannot
   be reached from the GPU machine either; the cost per token is the same), fp16, through
   each backend's aligner: faster-whisper (the default; the random transformers model
   converted by CTranslate2, batched), transformers (batched) and openai-whisper (the
   authors' tool, batch 1): real-time factor and the GPU-hours for the challenge's training
   data (7 systems x ~363 h). Target: faster-whisper >= 100x real time on one H200.
3. Whisper-medium encoder features (the SR strategy), utterances/s.
4. Fine-tuning steps of ``ecapa_ssl``, the VPC 2026 attacker (segreconcat_aug/models/ecapa_ssl.py):
   WavLM-Large frozen (random weights of its config) under ``torch.no_grad``, the embedding model
   of the challenge's sizes, AAM softmax over 921 speakers and AdamW; batch 32 of 3 s crops; fp32
   beside bf16 autocast; WavLM on the training rows (ours) and on the toolkit's 10 s windows (its
   file reads not included). Target: >= 1,000 training samples/s in bf16 on one H200.

Usage::

    python benchmarks/bench_gpu.py --device cuda --out gpu.json      # on a GPU machine, ~3 minutes
    python benchmarks/bench_gpu.py --device cpu --tiny               # a smoke test of this script

Figures are printed side by side (fp32 vs bf16; each Whisper backend per batch size) and saved
as JSON. Without a GPU the Whisper-medium target is reported as unmeasured.
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
from hyperpyyaml import load_hyperpyyaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))  # tiny_models
UTTERANCES = 104_014  # train-clean-360, per system
MEAN_SECONDS = 12.3
SYSTEMS = 7
HOURS_PER_SYSTEM = 363.0  # anonymized train-clean-360 audio per system
TARGET_REAL_TIME = 100.0  # faster-whisper, Whisper-medium, one H200
TARGET_SSL_SAMPLES = 1000.0  # ecapa_ssl fine-tuning, bf16, one H200


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _timed_steps(device: str, dtype, loss, optimizer, batch: int, steps: int, warmup: int) -> dict:
    """Samples/s of ``warmup`` + ``steps`` optimizer steps on ``loss()`` (autocast to ``dtype`` unless None)."""
    for step in range(steps + warmup):
        if step == warmup:
            _sync(device)
            start = time.perf_counter()
        with torch.autocast(device_type=device.split(":")[0], dtype=dtype, enabled=dtype is not None):
            value = loss()
        optimizer.zero_grad(set_to_none=True)
        value.backward()
        optimizer.step()
    _sync(device)
    rate = batch * steps / (time.perf_counter() - start)
    crops = UTTERANCES * int(MEAN_SECONDS / 3.0) * 2  # concat doubles the rows
    return {"samples_per_s": rate, "gpu_hours_per_concat_epoch": crops / rate / 3600}


def ecapa_step(device: str, batch: int, steps: int, tiny: bool) -> dict:
    """Samples/s of full training steps (features -> ECAPA -> AAM loss -> Adam), fp32 and bf16."""
    overrides = {"data_folder": "unused", "n_speakers": 921}
    if tiny:
        overrides.update(channels=[32, 32, 32, 32, 96], attention_channels=16, lin_neurons=32)
    # Loading the YAML creates its checkpointer's folder: a scratch one, not results/ where this runs.
    with tempfile.TemporaryDirectory() as scratch:
        with open(REPO / "hparams" / "ecapa_segreconcat.yaml", encoding="utf-8") as handle:
            hp = load_hyperpyyaml(handle, {**overrides, "output_folder": scratch})
    modules = torch.nn.ModuleList(
        [hp["compute_features"], hp["mean_var_norm"], hp["embedding_model"], hp["classifier"]]
    ).to(device)
    optimizer = hp["opt_class"](modules.parameters())
    wavs = torch.randn(batch, 48000, device=device) * 0.1
    lens = torch.ones(batch, device=device)
    labels = torch.randint(0, 921, (batch, 1), device=device)

    def loss():
        feats = modules[1](modules[0](wavs), lens)
        return hp["compute_cost"](modules[3](modules[2](feats, lens)), labels, lens)

    result = {}
    for precision, dtype in (("fp32", None), ("bf16", torch.bfloat16)):
        result[precision] = _timed_steps(device, dtype, loss, optimizer, batch, steps, warmup=2)
    if device.startswith("cuda"):
        result["peak_memory_gib"] = torch.cuda.max_memory_allocated() / 2**30
    return result


def ecapa_ssl_step(device: str, batch: int, steps: int, tiny: bool) -> dict:
    """Samples/s and peak memory of ``ecapa_ssl`` fine-tuning steps, fp32 and bf16, both WavLM inputs."""
    from speechbrain.lobes.models.ECAPA_TDNN import Classifier
    from speechbrain.nnet.losses import AdditiveAngularMargin, LogSoftmaxWrapper
    from tiny_models import TINY_ECAPA_SSL, tiny_wavlm

    from segreconcat_aug.models.ecapa_ssl import (
        CHALLENGE_SIZES,
        TOOLKIT_WAVLM_SECONDS,
        EcapaSSL,
        EcapaSSLEncoder,
    )
    from segreconcat_aug.models.wavlm import WAVLM_LARGE, layer_norm_waveforms

    sizes = {**CHALLENGE_SIZES, **(TINY_ECAPA_SSL if tiny else {})}
    wavlm = tiny_wavlm(0) if tiny else tiny_wavlm(0, **WAVLM_LARGE)
    encoder = EcapaSSLEncoder(EcapaSSL(**sizes), wavlm).to(device).train()
    classifier = Classifier(input_size=sizes["lin_neurons"], out_neurons=921).to(device)
    cost = LogSoftmaxWrapper(AdditiveAngularMargin(margin=0.2, scale=30))
    optimizer = torch.optim.AdamW(
        [*encoder.embedding_model.parameters(), *classifier.parameters()], lr=0.01, weight_decay=0.01
    )
    wavs = torch.randn(batch, 48000, device=device) * 0.1
    lens = torch.ones(batch, device=device)
    labels = torch.randint(0, 921, (batch, 1), device=device)
    windows = layer_norm_waveforms(torch.randn(batch, int(TOOLKIT_WAVLM_SECONDS * 16000), device=device))
    result = {"parameters_trained": sum(p.numel() for p in encoder.embedding_model.parameters())}
    variants = (
        ("fp32", None, None),
        ("bf16", torch.bfloat16, None),
        ("bf16_toolkit_window", torch.bfloat16, windows),
    )
    for name, dtype, ssl_wavs in variants:
        if device.startswith("cuda"):
            torch.cuda.reset_peak_memory_stats()

        def loss(ssl_wavs=ssl_wavs):
            return cost(classifier(encoder(wavs, lens, ssl_wavs)), labels, lens)

        result[name] = _timed_steps(device, dtype, loss, optimizer, batch, steps, warmup=1 if tiny else 2)
        if device.startswith("cuda"):
            result[name]["peak_memory_gib"] = torch.cuda.max_memory_allocated() / 2**30
    measured = device.startswith("cuda") and not tiny
    rate = result["bf16"]["samples_per_s"]
    result["target"] = {
        "model": "tiny (smoke test)" if tiny else "WavLM-Large + ecapa_ssl, the challenge's sizes",
        "bf16_samples_per_s": rate,
        "target_samples_per_s": TARGET_SSL_SAMPLES,
        "verdict": ("MET" if rate >= TARGET_SSL_SAMPLES else "NOT MET")
        if measured
        else "unmeasured (no GPU)",
    }
    return result


def _gpu_hours(rtf: float) -> float:
    """GPU-hours to align the challenge's training data (7 systems x ~363 h) at ``rtf``."""
    return SYSTEMS * HOURS_PER_SYSTEM * rtf


def _timed_rtf(aligner, audio: list, batch: int, device: str) -> float:
    aligner.align_batch(audio[:batch])  # warm-up
    _sync(device)
    start = time.perf_counter()
    aligner.align_batch(audio[:batch])
    _sync(device)
    return (time.perf_counter() - start) / (batch * MEAN_SECONDS)


def whisper_alignment(device: str, batches: list[int], tiny: bool) -> dict:
    """Real-time factor of word-timestamp decoding per backend, fp16 on GPU, and the GPU-hours."""
    from tiny_models import openai_sizes, tiny_faster_whisper, tiny_openai_whisper, transformers_sizes

    from segreconcat_aug.align.aligners.faster_whisper import FasterWhisperAligner
    from segreconcat_aug.align.aligners.openai_whisper import OpenAIWhisperAligner
    from segreconcat_aug.align.aligners.whisper import WhisperAligner
    from segreconcat_aug.align.whisper_encoder import encoder_features
    from segreconcat_aug.testing import tiny_whisper

    cuda = device.startswith("cuda")
    dtype = torch.float16 if cuda else torch.float32
    sizes = {} if tiny else transformers_sizes("medium")
    bundle = tiny_whisper(0, device=device, dtype=dtype, **sizes)
    rng = np.random.default_rng(0)
    audio = [rng.normal(0, 0.05, int(MEAN_SECONDS * 16000)).astype(np.float32) for _ in range(max(batches))]
    # ~2.5 tokens per second of speech: a real 12.3 s utterance decodes ~35 words + timestamps.
    tokens = 8 if tiny else int(3 * MEAN_SECONDS)  # the smoke test only checks the plumbing
    result = {"transformers": {}, "faster-whisper": {}}
    for batch in batches:
        aligner = WhisperAligner(bundle, batch_size=batch, max_new_tokens=tokens)
        rtf = _timed_rtf(aligner, audio, batch, device)
        result["transformers"][f"batch{batch}"] = {"rtf": rtf, "gpu_hours_7_systems": _gpu_hours(rtf)}
    start = time.perf_counter()
    encoder_features(bundle, audio, batch_size=max(batches))
    _sync(device)
    result["encoder_utterances_per_s"] = len(audio) / (time.perf_counter() - start)
    del bundle
    with tempfile.TemporaryDirectory() as workdir:
        folder = tiny_faster_whisper(Path(workdir) / "fw", **sizes)
        for batch in batches:
            aligner = FasterWhisperAligner(
                folder, device=device, compute_type="auto", batch_size=batch, max_new_tokens=tokens
            )
            rtf = _timed_rtf(aligner, audio, batch, device)
            result["faster-whisper"][f"batch{batch}"] = {"rtf": rtf, "gpu_hours_7_systems": _gpu_hours(rtf)}
            del aligner
        dims = {} if tiny else openai_sizes("medium")
        checkpoint = tiny_openai_whisper(Path(workdir) / "openai.pt", **dims)
        options = {"temperature": 0.0, "sample_len": tokens, "condition_on_previous_text": False}
        aligner = OpenAIWhisperAligner(checkpoint, device=device, options=options)
        rtf = _timed_rtf(aligner, audio, 1, device)
        result["openai-whisper"] = {"batch1": {"rtf": rtf, "gpu_hours_7_systems": _gpu_hours(rtf)}}
    best = min(row["rtf"] for row in result["faster-whisper"].values())
    measured = cuda and not tiny
    result["target"] = {
        "model": "tiny dims (smoke test)" if tiny else "Whisper-medium size",
        "faster_whisper_real_time": 1 / best,
        "target_real_time": TARGET_REAL_TIME,
        "verdict": ("MET" if 1 / best >= TARGET_REAL_TIME else "NOT MET")
        if measured
        else "unmeasured (no GPU)",
    }
    return result


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--batch", type=int, default=256, help="training batch (VPC baseline: 256)")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--whisper_batches", default="8,32")
    parser.add_argument("--ssl_batch", type=int, default=32, help="ecapa_ssl batch (VPC 2026 Track 1: 32)")
    parser.add_argument("--ssl_steps", type=int, default=10)
    parser.add_argument("--tiny", action="store_true", help="small models: a CPU smoke test")
    parser.add_argument("--out", help="write the figures as JSON here")
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    figures = {"device": torch.cuda.get_device_name(0) if args.device.startswith("cuda") else "cpu"}
    figures["ecapa"] = ecapa_step(args.device, args.batch, args.steps, args.tiny)
    for precision in ("fp32", "bf16"):
        row = figures["ecapa"][precision]
        print(
            f"ECAPA train step {precision}: {row['samples_per_s']:9.1f} samples/s  "
            f"{row['gpu_hours_per_concat_epoch']:7.2f} GPU-h per concat epoch"
        )
    speedup = figures["ecapa"]["bf16"]["samples_per_s"] / figures["ecapa"]["fp32"]["samples_per_s"]
    print(f"bf16 vs fp32: {speedup:.2f}x")
    batches = [int(b) for b in args.whisper_batches.split(",")]
    figures["whisper"] = whisper_alignment(args.device, batches, args.tiny)
    for backend in ("faster-whisper", "transformers", "openai-whisper"):
        for key, row in figures["whisper"][backend].items():
            print(
                f"Whisper word timestamps {backend:<15} {key:>8}: RTF {row['rtf']:.4f} "
                f"({1 / row['rtf']:7.1f}x real time)  {row['gpu_hours_7_systems']:8.1f} GPU-h for 7 x {HOURS_PER_SYSTEM:g} h"
            )
    target = figures["whisper"]["target"]
    print(
        f"faster-whisper, {target['model']}: {target['faster_whisper_real_time']:.1f}x real time "
        f"(target >= {TARGET_REAL_TIME:g}x on one H200): {target['verdict']}"
    )
    print(f"Whisper encoder (SR features): {figures['whisper']['encoder_utterances_per_s']:.1f} utterances/s")
    figures["ecapa_ssl"] = ecapa_ssl_step(args.device, args.ssl_batch, args.ssl_steps, args.tiny)
    for name in ("fp32", "bf16", "bf16_toolkit_window"):
        row = figures["ecapa_ssl"][name]
        memory = f"  peak {row['peak_memory_gib']:.1f} GiB" if "peak_memory_gib" in row else ""
        print(
            f"ecapa_ssl fine-tuning {name:<19}: {row['samples_per_s']:9.1f} samples/s  "
            f"{row['gpu_hours_per_concat_epoch']:7.2f} GPU-h per concat epoch{memory}"
        )
    ours, toolkit = figures["ecapa_ssl"]["bf16"], figures["ecapa_ssl"]["bf16_toolkit_window"]
    print(
        f"ecapa_ssl, WavLM on the rows vs the toolkit's 10 s windows (bf16): {ours['samples_per_s'] / toolkit['samples_per_s']:.2f}x"
    )
    target = figures["ecapa_ssl"]["target"]
    print(
        f"ecapa_ssl, {target['model']}: {target['bf16_samples_per_s']:.1f} training samples/s "
        f"(target >= {TARGET_SSL_SAMPLES:g} on one H200): {target['verdict']}"
    )
    if args.out:
        Path(args.out).write_text(json.dumps(figures, indent=2) + "\n")
    return figures


if __name__ == "__main__":
    main()

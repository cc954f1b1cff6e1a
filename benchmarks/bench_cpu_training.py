"""A CPU training step of the demo's model: glibc's default allocator vs the demo's ``environment``.

``hparams/demo.yaml`` runs each training on one math thread with ``MALLOC_MMAP_THRESHOLD_`` and
``MALLOC_TRIM_THRESHOLD_`` raised: glibc then keeps the buffers a step frees for the next step,
where by default it hands the large ones back to the kernel and faults fresh pages in again.
This measures what that buys and checks that it changes no digit.

Each row is its own process (glibc reads the variables when a process starts) that builds the
demo's model from ``hparams/ecapa_segreconcat.yaml`` with the demo's overrides, seeds it, and takes
the same training steps (features, ECAPA-TDNN, AAM softmax, Adam) on the same batches of real
LibriSpeech speech (3 s crops of the test fixtures). It prints seconds per step (the median over
``--rounds`` processes, run in turn), the kernel's share of the CPU time, page faults per step,
and a digest of the trained weights: the same digest is the same numbers.

Rows:

- ``glibc defaults, 1 thread``: the reference.
- ``demo environment, 1 thread``: what ``make demo`` runs.
- ``demo environment, 2 threads``: faster alone, but other digits (a second thread sums in
  another order), and two such runs oversubscribe two cores: why the demo keeps one.

Usage::

    python benchmarks/bench_cpu_training.py                  # 10 steps, 2 rounds (about 2 minutes)
    python benchmarks/bench_cpu_training.py --steps 20 --rounds 3
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures" / "librispeech"
CROP_S = 3.0


def demo_settings() -> tuple[dict, dict]:
    """The demo's training overrides and its ``environment`` (hparams/demo.yaml)."""
    from segreconcat_aug.grid.plan import load_grid

    grid = load_grid(REPO / "hparams" / "demo.yaml")
    return dict(grid["extra_overrides"]), {k: str(v) for k, v in (grid.get("environment") or {}).items()}


def crops(batch_size: int, batches: int):
    """``batches`` batches of 3 s crops of the LibriSpeech fixtures, with speaker labels."""
    import numpy as np
    import torch

    from segreconcat_aug.data.audio import read_audio

    signals, speakers = [], []
    for path in sorted(FIXTURES.glob("*.flac")):
        audio = read_audio(path)
        length = int(CROP_S * 16000)
        if len(audio) >= length:
            signals.append(np.asarray(audio[:length], dtype=np.float32))
            speakers.append(path.name.split("-")[0])
    labels = {speaker: index for index, speaker in enumerate(sorted(set(speakers)))}
    out = []
    for b in range(batches):
        rows = [(b * batch_size + i) % len(signals) for i in range(batch_size)]
        wavs = torch.from_numpy(np.stack([signals[r] for r in rows]))
        spk = torch.tensor([[labels[speakers[r]]] for r in rows])
        out.append((wavs, spk))
    return out, len(labels)


def worker(steps: int, warmup: int) -> dict:
    """Build the demo's model, take ``warmup`` + ``steps`` steps; time the last ``steps``."""
    import torch
    from hyperpyyaml import load_hyperpyyaml

    overrides, _ = demo_settings()
    batches, n_speakers = crops(int(overrides["batch_size"]), 4)
    keys = ("channels", "attention_channels", "lin_neurons", "lr")
    with tempfile.TemporaryDirectory() as scratch, open(REPO / "hparams" / "ecapa_segreconcat.yaml") as fin:
        hparams = load_hyperpyyaml(
            fin,
            {
                "data_folder": scratch,
                "output_folder": scratch,
                "n_speakers": n_speakers,
                **{key: overrides[key] for key in keys},
            },
        )
    torch.manual_seed(1986)
    modules = [
        hparams[name] for name in ("compute_features", "mean_var_norm", "embedding_model", "classifier")
    ]
    features, norm, embedding, classifier = modules
    parameters = [p for m in modules for p in m.parameters()]
    optimizer = hparams["opt_class"](parameters)
    cost = hparams["compute_cost"]

    def step(wavs, speakers):
        lens = torch.ones(wavs.shape[0])
        feats = norm(features(wavs), lens)
        loss = cost(classifier(embedding(feats, lens)), speakers, lens)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    def weights_digest() -> str:
        digest = hashlib.sha256()
        for parameter in parameters:
            digest.update(parameter.detach().numpy().tobytes())
        return digest.hexdigest()[:16]

    initial = weights_digest()
    for index in range(warmup):
        step(*batches[index % len(batches)])
    before, start = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    for index in range(steps):
        step(*batches[(warmup + index) % len(batches)])
    seconds, after = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_SELF)
    user, system = after.ru_utime - before.ru_utime, after.ru_stime - before.ru_stime
    return {
        "s_per_step": seconds / steps,
        "kernel_share": system / max(user + system, 1e-9),
        "faults_per_step": (after.ru_minflt - before.ru_minflt) / steps,
        "digest": weights_digest(),
        "initial_digest": initial,
        "threads": torch.get_num_threads(),
    }


def variants(environment: dict) -> dict[str, dict]:
    """Each row's environment: this process's without the demo's variables, then the row's."""
    base = {k: v for k, v in os.environ.items() if k not in environment}
    return {
        "glibc defaults, 1 thread": {**base, "OMP_NUM_THREADS": "1"},
        "demo environment, 1 thread": {**base, **environment, "OMP_NUM_THREADS": "1"},
        "demo environment, 2 threads": {**base, **environment, "OMP_NUM_THREADS": "2"},
    }


def measure(steps: int, warmup: int, rounds: int, rows: list[str] | None = None) -> dict[str, list[dict]]:
    _, environment = demo_settings()
    chosen = {name: env for name, env in variants(environment).items() if rows is None or name in rows}
    results: dict[str, list[dict]] = {name: [] for name in chosen}
    for _ in range(rounds):
        for name, env in chosen.items():
            command = [sys.executable, __file__, "--worker", f"--steps={steps}", f"--warmup={warmup}"]
            done = subprocess.run(command, env=env, capture_output=True, text=True)
            if done.returncode != 0:
                raise SystemExit(
                    f"{name}: the worker failed (exit {done.returncode}):\n{done.stderr[-2000:]}"
                )
            results[name].append(json.loads(done.stdout.strip().splitlines()[-1]))
    return results


def report(results: dict[str, list[dict]]) -> None:
    reference = "glibc defaults, 1 thread"
    ref_s = statistics.median(r["s_per_step"] for r in results[reference]) if reference in results else None
    ref_digest = results[reference][0]["digest"] if reference in results else None
    print(
        "| variant | s/step (median) | kernel share | page faults/step | speed vs reference | weights digest |"
    )
    print("|---|---|---|---|---|---|")
    for name, runs in results.items():
        seconds = statistics.median(r["s_per_step"] for r in runs)
        digests = {r["digest"] for r in runs}
        same = "" if ref_digest is None else (" (= reference)" if digests == {ref_digest} else " (differs)")
        speed = f"{ref_s / seconds:.2f}x" if ref_s else ""
        print(
            f"| {name} | {seconds:.3f} | {statistics.median(r['kernel_share'] for r in runs):.0%} "
            f"| {statistics.median(r['faults_per_step'] for r in runs):,.0f} | {speed} "
            f"| {', '.join(sorted(digests))}{same} |"
        )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=10, help="timed steps per process")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    parser.add_argument("--rounds", type=int, default=2, help="processes per row (the median is shown)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args.steps, args.warmup)))
        return 0
    report(measure(args.steps, args.warmup, args.rounds))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``ecapa_ssl`` fine-tuning steps on the CPU: WavLM fed the training rows (ours) vs the files (the toolkit's).

The VPC 2026 attacker (``segreconcat_aug.models.ecapa_ssl``) at tiny size (``tests/tiny_models.py``:
a WavLM of WavLM-Large's structure, 24 layers of width 16, and an embedding model of that width),
a speaker classifier with the toolkit's AAM softmax (margin 0.2, scale 30) and AdamW (lr 0.01, weight
decay 0.01, Track 1's values). Each step takes a batch of 3 s crops of real speech (the LibriSpeech
test fixtures, written as WAV files) through:

- ``same_window`` (ours, the default): both branches get the batch's rows, the training crop as the
  data pipeline made it (SegReConcat's audio included; its cost is the same for both rows and left out);
- ``file_window`` (the toolkit's, ``train_speaker_embeddings_ssl_ft.py``): the fbank branch gets the rows,
  WavLM re-reads each row's file in the step, normalizes it and takes its own random window of up to
  10 s (shorter files zero-padded to 10 s): 3.3 times the frames, and a file read per row.

Each way runs in its own process (so its peak memory is its own), the ways in turn for ``--rounds``
rounds; the table shows the median training samples per second, the peak resident memory, its growth
over the process's size before the first step, and ours against the toolkit's as a ratio measured in
this one run. Tiny-model CPU figures: they show what the toolkit's extra WavLM frames and file reads
cost relative to the step, not what WavLM-Large costs (``bench_gpu.py`` measures the real size).

Usage::

    python benchmarks/bench_ecapa_ssl.py                    # 6 steps x 2 rounds (about a minute)
    python benchmarks/bench_ecapa_ssl.py --batch 16 --steps 10 --rounds 3
"""

from __future__ import annotations

import argparse
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
sys.path.insert(0, str(REPO / "tests"))  # tiny_models
CROP_S = 3.0
WAYS = ("same_window", "file_window")
LABELS = {
    "same_window": "ours: WavLM on the training rows",
    "file_window": "toolkit: WavLM re-reads the file",
}


def write_corpus(folder: Path) -> list[tuple[str, str]]:
    """The fixtures as 16 kHz WAV files in ``folder`` (the challenge's format): ``[(path, speaker)]``."""
    from segreconcat_aug.data.audio import read_audio, write_audio

    corpus = []
    for path in sorted(FIXTURES.glob("*.flac")):
        target = folder / f"{path.stem}.wav"
        write_audio(target, read_audio(path))
        corpus.append((str(target), path.name.split("-")[0]))
    return corpus


def batches(corpus, batch_size: int, count: int):
    """``count`` batches of 3 s crops (the start of each file of 3 s or more): wavs, labels, paths, ids."""
    import numpy as np
    import torch

    from segreconcat_aug.data.audio import read_audio

    rows = []
    for path, speaker in corpus:
        audio = read_audio(path)
        if audio.size >= int(CROP_S * 16000):
            rows.append((audio[: int(CROP_S * 16000)], speaker, path))
    labels = {speaker: index for index, speaker in enumerate(sorted({speaker for _, speaker, _ in rows}))}
    out = []
    for b in range(count):
        chosen = [rows[(b * batch_size + i) % len(rows)] for i in range(batch_size)]
        out.append(
            (
                torch.from_numpy(np.stack([audio for audio, _, _ in chosen])),
                torch.tensor([[labels[speaker]] for _, speaker, _ in chosen]),
                [path for _, _, path in chosen],
                [Path(path).stem for _, _, path in chosen],
            )
        )
    return out, len(labels)


def _rss_mib() -> float:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def worker(way: str, corpus_file: str, batch_size: int, steps: int, warmup: int) -> dict:
    """Build the tiny attacker, take ``warmup`` + ``steps`` training steps the ``way`` asks; time the last."""
    import torch
    from speechbrain.lobes.models.ECAPA_TDNN import Classifier
    from speechbrain.nnet.losses import AdditiveAngularMargin, LogSoftmaxWrapper
    from tiny_models import TINY_ECAPA_SSL, tiny_wavlm

    from segreconcat_aug.data.audio import read_audio
    from segreconcat_aug.models.ecapa_ssl import EcapaSSL, EcapaSSLEncoder

    corpus = json.loads(Path(corpus_file).read_text())
    data, n_speakers = batches(corpus, batch_size, 4)
    torch.manual_seed(1986)
    encoder = EcapaSSLEncoder(EcapaSSL(**TINY_ECAPA_SSL), tiny_wavlm(seed=0)).train()
    classifier = Classifier(input_size=TINY_ECAPA_SSL["lin_neurons"], out_neurons=n_speakers)
    cost = LogSoftmaxWrapper(AdditiveAngularMargin(margin=0.2, scale=30))
    parameters = [*encoder.embedding_model.parameters(), *classifier.parameters()]
    optimizer = torch.optim.AdamW(parameters, lr=0.01, weight_decay=0.01)

    def step(index):
        wavs, speakers, paths, keys = data[index % len(data)]
        lens = torch.ones(wavs.shape[0])
        embeddings = encoder.embed_batch(
            wavs, lens, ssl_input=way, paths=paths, keys=keys, read=read_audio, seed=1986, epoch=index
        )
        loss = cost(classifier(embeddings), speakers, lens)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return float(loss)

    for index in range(warmup):
        step(index)
    before = _rss_mib()
    start = time.perf_counter()
    losses = [step(warmup + index) for index in range(steps)]
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {
        "samples_per_s": batch_size * steps / seconds,
        "peak_rss_mib": peak,
        "growth_mib": max(peak - before, 0.0),
        "loss": losses[-1],
        "threads": torch.get_num_threads(),
    }


def measure(batch_size: int, steps: int, warmup: int, rounds: int, threads: int) -> dict[str, list[dict]]:
    results: dict[str, list[dict]] = {way: [] for way in WAYS}
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    with tempfile.TemporaryDirectory() as scratch:
        corpus_file = Path(scratch) / "corpus.json"
        corpus_file.write_text(json.dumps(write_corpus(Path(scratch))))
        for _ in range(rounds):
            for way in WAYS:
                command = [
                    sys.executable,
                    __file__,
                    f"--worker={way}",
                    f"--corpus={corpus_file}",
                    f"--batch={batch_size}",
                    f"--steps={steps}",
                    f"--warmup={warmup}",
                ]
                done = subprocess.run(command, env=env, capture_output=True, text=True)
                if done.returncode != 0:
                    raise SystemExit(
                        f"{way}: the worker failed (exit {done.returncode}):\n{done.stderr[-2000:]}"
                    )
                results[way].append(json.loads(done.stdout.strip().splitlines()[-1]))
    return results


def report(results: dict[str, list[dict]], batch_size: int) -> dict:
    summary = {
        way: {
            key: statistics.median(run[key] for run in runs)
            for key in ("samples_per_s", "peak_rss_mib", "growth_mib")
        }
        for way, runs in results.items()
    }
    ours, toolkit = summary["same_window"], summary["file_window"]
    print(
        f"ecapa_ssl fine-tuning steps, tiny model, CPU ({results['same_window'][0]['threads']} thread(s)), "
        f"batch {batch_size} x {CROP_S:g} s, median of {len(results['same_window'])} process(es) each"
    )
    print("| WavLM input | training samples/s | peak RSS (MiB) | growth during the steps (MiB) |")
    print("|---|---|---|---|")
    for way, row in summary.items():
        print(
            f"| {LABELS[way]} | {row['samples_per_s']:.1f} | {row['peak_rss_mib']:.0f} | {row['growth_mib']:.0f} |"
        )
    speed = ours["samples_per_s"] / toolkit["samples_per_s"]
    memory = ours["peak_rss_mib"] / toolkit["peak_rss_mib"]
    print(f"ours / toolkit: {speed:.2f}x the samples per second, {memory:.2f}x the peak memory")
    return {"summary": summary, "speed_ratio": speed, "peak_memory_ratio": memory}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--steps", type=int, default=6, help="timed steps per process")
    parser.add_argument("--warmup", type=int, default=1, help="untimed steps first")
    parser.add_argument("--rounds", type=int, default=2, help="processes per way (the median is shown)")
    parser.add_argument("--threads", type=int, default=1, help="math threads per process")
    parser.add_argument("--json", help="write the figures as JSON here")
    parser.add_argument("--worker", choices=WAYS, help=argparse.SUPPRESS)
    parser.add_argument("--corpus", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args.worker, args.corpus, args.batch, args.steps, args.warmup)))
        return 0
    figures = report(measure(args.batch, args.steps, args.warmup, args.rounds, args.threads), args.batch)
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Evaluation's batching: one utterance at a time (``eval_batching: exact``, the default, as both challenges'
code embeds) beside zero-padded batches of similar duration (``eval_batching: padded``, the speed option).

For each setting, ``evaluate_system`` scores the demo's lists (``demo/data``, VPAC 2024 layout, four
subsets) from an empty embedding cache; printed per setting: the wall time, each subset's EER and the
largest change of an embedding against the exact one (1 - cosine). The other exact way, batches of
utterances of equal length (no padding), is only faster where utterances share a length: the line
``equal lengths`` counts how many do (after the wave normalization and the zero trim, as embedded).

The model: ``--model_folder`` (a training run's ``export/``, e.g. the demo's baseline:
``results/demo/MCADAMS/baseline/export``); without it, a randomly initialized ECAPA-TDNN of the demo's size
(times are meaningful, EERs are not). On a CPU one thread (``--threads``) is the demo's setting; on a GPU
(``--device=cuda:0``) padded batches pay off more.

Usage::

    python benchmarks/bench_eval_batching.py [--model_folder=<export>] [--batch_sizes 8 16] [--device cpu]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from hyperpyyaml import load_hyperpyyaml

REPO = Path(__file__).resolve().parents[1]
DEMO_MODEL = {"channels": [128, 128, 128, 128, 384], "attention_channels": 32, "lin_neurons": 96}


def load_hparams(data_folder: Path, system: str, output: Path, model_folder: str | None) -> dict:
    overrides = {
        "data_folder": str(data_folder),
        "system": system,
        "output_folder": str(output),
        **DEMO_MODEL,
    }
    overrides.update(eval_bootstrap_resamples=0, eval_privacy=False, eval_det_plot=False)
    if model_folder:
        overrides["eval_model_folder"] = str(model_folder)
    with open(REPO / "hparams" / "ecapa_segreconcat.yaml", encoding="utf-8") as handle:
        hparams = load_hyperpyyaml(handle, overrides)
    if not model_folder:  # a random model of the demo's size, written where evaluation looks for it
        torch.manual_seed(0)
        export = Path(hparams["export_folder"])
        export.mkdir(parents=True, exist_ok=True)
        torch.save(hparams["embedding_model"].state_dict(), export / "embedding_model.ckpt")
    return hparams


def run(hparams: dict, device: str, eval_folder: Path, **options):
    from segreconcat_aug.evaluation.embeddings import EmbeddingCache
    from segreconcat_aug.evaluation.system import evaluate_system

    hparams = {**hparams, "eval_folder": str(eval_folder), **options}
    start = time.perf_counter()
    results = evaluate_system(hparams, {"device": device}, write_report=False)
    seconds = time.perf_counter() - start
    embeddings = {}
    for cache in (eval_folder / "embeddings").glob("*/*"):
        embeddings.update({f"{cache.name}/{utt}": v for utt, v in EmbeddingCache(cache).load().items()})
    return results, seconds, embeddings


def equal_lengths(hparams: dict) -> tuple[int, int]:
    """How many scored utterances share their embedded length with another one, of how many."""
    from segreconcat_aug.evaluation.embeddings import EmbeddingExtractor
    from segreconcat_aug.evaluation.trials import load_system_trials

    enrollments, trials = load_system_trials(hparams["data_folder"], hparams["system"])
    sources = {path for e in enrollments.values() for path in e.wav.values()}
    sources |= {t.wav[u] for t in trials.values() for u in t.test_utterances}
    modules = [hparams[key] for key in ("compute_features", "mean_var_norm", "embedding_model")]
    extractor = EmbeddingExtractor(*modules, normalize_wave="vpc2024")
    lengths = [len(extractor.load_wave(source)) for source in sorted(sources)]
    _, counts = np.unique(lengths, return_counts=True)
    return int(counts[counts > 1].sum()), len(lengths)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model_folder", default=None)
    parser.add_argument("--data_folder", default=str(REPO / "demo" / "data"))
    parser.add_argument("--system", default="MCADAMS")
    parser.add_argument("--batch_sizes", type=int, nargs="+", default=[8, 16])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        hparams = load_hparams(Path(args.data_folder), args.system, scratch / "run", args.model_folder)
        shared, total = equal_lengths(hparams)
        rows = [("exact", {"eval_batching": "exact"})]
        rows += [(f"padded {n}", {"eval_batching": "padded", "eval_batch_size": n}) for n in args.batch_sizes]
        measured = {}
        for label, options in rows:
            measured[label] = run(hparams, args.device, scratch / label.replace(" ", "-"), **options)
    exact_results, exact_seconds, exact_embeddings = measured["exact"]
    subsets = list(exact_results.metrics)
    model = args.model_folder or "random ECAPA-TDNN of the demo's size"
    print(
        f"model: {model}; data: {args.data_folder} ({args.system}); device {args.device}, {args.threads} thread(s)"
    )
    print(f"equal lengths: {shared} of {total} utterances share their embedded length with another one")
    header = f"{'batching':<12} {'seconds':>8} {'vs exact':>9} {'max 1-cos':>10} " + " ".join(
        f"{s + ' EER':>12}" for s in subsets
    )
    print(header)
    for label, (results, seconds, embeddings) in measured.items():
        keys = sorted(set(embeddings) & set(exact_embeddings))
        change = max(
            1.0
            - float(
                embeddings[k]
                @ exact_embeddings[k]
                / np.linalg.norm(embeddings[k])
                / np.linalg.norm(exact_embeddings[k])
            )
            for k in keys
        )
        eers = " ".join(f"{results.metrics[s]['eer']:>12.2f}" for s in subsets)
        print(f"{label:<12} {seconds:>8.2f} {exact_seconds / seconds:>8.2f}x {change:>10.2e} {eers}")


if __name__ == "__main__":
    main()

"""Challenge scale on one machine: the CPU stages of one system's run at 104,014 utterances, measured.

Builds a challenge-size training set (104,014 utterances of 921 speakers, see
:mod:`scale_layout`: the demo's audio used by reference, no copies) and its
word-alignment cache in a temporary folder, then measures each stage in a fresh
process (so its memory is its own) and prints each figure beside its target:

- the alignment cache: the first load (parse, clean, write the binary index)
  and every later one (from the index), time and peak memory;
- data preparation: the audio header check and the manifests, and its skip on a rerun;
- ``recipes/train.py`` (tiny model, preparation done): start-up to the first
  training batch, and its peak resident memory;
- the training DataLoader with 1 and 2 workers: samples/s, and each worker's
  memory beyond the main process's (USS: pages only it holds; PSS: its share of
  the shared ones; from ``/proc/<pid>/smaps_rollup``); on the demo's Ogg Vorbis
  and, with ``--formats``, on 16-bit WAV (as the challenge ships) and FLAC copies
  of the same audio (decoded once into the temporary folder; the manifests point
  at them): a lossy file is decoded whole for every crop, WAV and FLAC seek to it;
- AR order computation (MFCC + DTW) on one core: utterances/s, and the hours
  that implies for 104,014 utterances;
- the evaluation's scoring (cosine, EER, minDCF; plain and AS-norm) at the
  challenge's trial counts, on random embeddings.

Timings depend on the machine and its load: run it on an idle machine for
figures to quote. Usage::

    python benchmarks/bench_scale.py                      # the full 104k set, a temporary folder
    python benchmarks/bench_scale.py --utterances 20000   # a smaller set, same stages
    python benchmarks/bench_scale.py --keep DIR           # build in DIR and keep it
    python benchmarks/bench_scale.py --formats ogg        # the loader on the demo's Ogg only (default: ogg wav flac)
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(REPO))

from scale_layout import CHALLENGE_SPEAKERS, CHALLENGE_UTTERANCES, SYSTEM, build_scale_layout  # noqa: E402

HPARAMS = REPO / "hparams" / "ecapa_segreconcat.yaml"
TINY_MODEL = {
    "channels": [16, 16, 16, 16, 48],
    "lin_neurons": 16,
    "attention_channels": 8,
    "evaluate_after_training": False,
}
# VPAC 2024 (/work notes, docs/evaluation.md): trials, target trials, enrolled speakers per subset; the
# enrollment utterances (343 dev, 438 test) split between the genders in proportion.
TRIALS = {
    "dev_f": (15_270, 704, 15, 177),
    "dev_m": (13_440, 644, 14, 166),
    "test_f": (11_744, 548, 16, 249),
    "test_m": (9_906, 449, 13, 189),
}
TARGETS = {
    "load_indexed_s": 2.0,
    "first_batch_s": 30.0,
    "worker_uss_mb": 100.0,
}


# ---------------------------------------------------------------------------------------------------------
# Measurements inside a child process


def _status_kib(field: str, pid: str = "self") -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def _rollup_mib(pid: int) -> dict:
    """USS (private pages) and PSS of a process, MiB, from /proc/<pid>/smaps_rollup."""
    values = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[2] == "kB":
            values[parts[0].rstrip(":")] = int(parts[1]) / 1024
    return {
        "uss": values.get("Private_Clean", 0) + values.get("Private_Dirty", 0),
        "pss": values.get("Pss", 0),
        "rss": values.get("Rss", 0),
    }


def _train_recipe():
    import importlib.util

    spec = importlib.util.spec_from_file_location("train_recipe", REPO / "recipes" / "train.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _train_overrides(root: Path, output: Path, **extra) -> dict:
    return {
        "data_folder": str(root),
        "system": SYSTEM,
        "output_folder": str(output),
        **TINY_MODEL,
        **extra,
    }


def stage_load(root: Path, output: Path) -> dict:
    from segreconcat_aug.align.cache import load_alignments

    before = _status_kib("VmRSS")
    start = time.perf_counter()
    index = load_alignments(root / "alignments" / f"{SYSTEM}.jsonl")
    seconds = time.perf_counter() - start
    return {
        "seconds": seconds,
        "peak_mib": (_status_kib("VmHWM") - before) / 1024,
        "held_mib": (_status_kib("VmRSS") - before) / 1024,
        "utterances": len(index),
        "words": int(index.offsets[-1]),
        "fixes": dict(index.stats),
    }


def stage_prep(root: Path, output: Path) -> dict:
    from segreconcat_aug.training.data_prep import PrepOptions, prepare_vpac_training

    start = time.perf_counter()
    result = prepare_vpac_training(root, SYSTEM, output, PrepOptions(mode="concat", check_workers=8))
    first = time.perf_counter() - start
    start = time.perf_counter()
    again = prepare_vpac_training(root, SYSTEM, output, PrepOptions(mode="concat", check_workers=8))
    return {
        "seconds": first,
        "rerun_seconds": time.perf_counter() - start,
        "rerun_skipped": again["skipped"],
        "train_rows": result["summary"]["train_rows"],
        "dev_rows": result["summary"]["dev_rows"],
        "peak_mib": _status_kib("VmHWM") / 1024,
    }


def stage_first_batch(root: Path, output: Path) -> dict:
    """Run recipes/train.py's main until its first training batch, then report and stop the process."""
    recipe = _train_recipe()
    report = output / "first_batch.json"

    def first_batch(self, batch):
        report.write_text(
            json.dumps({"at": time.time(), "peak_mib": _status_kib("VmHWM") / 1024, "batch": len(batch.id)})
        )
        os._exit(0)  # the measurement ends here: no training, no worker shutdown to wait for

    recipe.SpeakerBrain.fit_batch = first_batch
    overrides = _train_overrides(root, output, batch_size=64, num_workers=2)
    recipe.main(
        [str(HPARAMS), "--device=cpu", *[f"--{key}={json.dumps(value)}" for key, value in overrides.items()]]
    )
    raise RuntimeError("train.py returned without a training batch")


def stage_loader(
    root: Path, output: Path, batches: int = 25, batch_size: int = 32, touch_share: float = 0.25
) -> dict:
    """The recipe's training set in a DataLoader with 1 and 2 workers."""
    import speechbrain as sb
    from hyperpyyaml import load_hyperpyyaml

    from segreconcat_aug.training.augmenter import build_train_audio, warm_up_before_workers
    from segreconcat_aug.training.manifest import read_manifest

    recipe = _train_recipe()
    train_rows = read_manifest(output / "train.csv")
    speakers = train_rows.distinct("spk_id")
    with open(HPARAMS, encoding="utf-8") as handle:
        hparams = load_hyperpyyaml(handle, _train_overrides(root, output, n_speakers=len(speakers)))
    augmenter, train_audio = build_train_audio(hparams)
    train_data, _, _ = recipe.dataio_prep(hparams, train_audio, train_rows)
    train_audio.set_epoch(1)
    warm_up_before_workers(train_data)  # as recipes/train.py does before training
    gc.freeze()
    main_mib = _rollup_mib(os.getpid())
    results = {"rows": len(train_data), "main": main_mib}
    for workers in (1, 2):
        loader = sb.dataio.dataloader.make_dataloader(
            train_data, batch_size=batch_size, num_workers=workers, shuffle=True
        )
        iterator = iter(loader)
        next(iterator)  # workers started, first batch (not timed)
        start = time.perf_counter()
        for _ in range(batches):
            next(iterator)
        seconds = time.perf_counter() - start
        worker_mib = [_rollup_mib(worker.pid) for worker in iterator._workers]
        results[f"workers_{workers}"] = {
            "samples_per_s": batches * batch_size / seconds,
            "workers": worker_mib,
        }
        del iterator, loader
    # An epoch touches every row: read a share of them (labels only, no audio) in 2 workers, then look
    # at what the workers copied; the same for SpeechBrain's dict-per-row dataset, the reference.
    results["touched"] = _touch_rows(train_data, touch_share)
    reference = sb.dataio.dataset.DynamicItemDataset.from_csv(output / "train.csv")
    gc.freeze()
    results["touched_reference"] = _touch_rows(reference, touch_share)
    return results


def _touch_rows(dataset, share: float, workers: int = 2, batch_size: int = 512) -> dict:
    import speechbrain as sb

    batches = int(share * len(dataset)) // batch_size
    with dataset.output_keys_as(["id", "spk_id"]):
        loader = sb.dataio.dataloader.make_dataloader(
            dataset, batch_size=batch_size, num_workers=workers, shuffle=True
        )
        iterator = iter(loader)
        for _ in range(batches):
            next(iterator)
        worker_mib = [_rollup_mib(worker.pid) for worker in iterator._workers]
        del iterator, loader
    return {"rows": batches * batch_size, "workers": worker_mib}


def convert_training_audio(output: Path, target: Path, audio_format: str) -> Path:
    """The training manifests of ``output`` with their audio converted to ``audio_format``, in ``target``.

    Each distinct file is decoded once and written as 16-bit WAV or FLAC under ``target/audio``
    (the samples of the decoded Ogg, so every format holds the same audio); ``train.csv`` and
    ``dev.csv`` are copied with their paths replaced. Returns ``target``, an output folder
    :func:`stage_loader` reads.
    """
    import csv

    from segreconcat_aug.data.audio import read_audio, write_audio

    audio_dir = target / "audio"
    audio_dir.mkdir(parents=True, exist_ok=True)
    converted: dict[str, str] = {}
    for name in ("train.csv", "dev.csv"):
        with open(output / name, newline="", encoding="utf-8") as handle:
            rows = list(csv.DictReader(handle))
        for row in rows:
            source = row["wav"]
            if source not in converted:
                path = audio_dir / f"{Path(source).stem}.{audio_format}"
                if not path.exists():
                    write_audio(path, read_audio(source), subtype="PCM_16")
                converted[source] = str(path)
            row["wav"] = converted[source]
        with open(target / name, "w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    return target


def stage_orders(root: Path, output: Path) -> dict:
    """AR (acoustic) orders on one core: audio read, MFCC, all-pairs DTW, greedy chain."""
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    import torch

    torch.set_num_threads(1)
    from segreconcat_aug.align.cache import load_alignments
    from segreconcat_aug.data.audio import read_audio
    from segreconcat_aug.data.kaldi import read_wav_scp
    from segreconcat_aug.method.order_computer import OrderComputer

    alignments = load_alignments(root / "alignments" / f"{SYSTEM}.jsonl")
    wav = read_wav_scp(root / SYSTEM / "data" / f"train-clean-360_{SYSTEM}" / "wav.scp")
    # Distinct audio files (the layout reuses the demo's), in a fixed order.
    chosen, seen = [], set()
    for utt, path in wav.items():
        if path not in seen:
            seen.add(path)
            chosen.append(utt)
    computer = OrderComputer("acoustic", alignments)
    list(computer.compute([(chosen[0], read_audio(wav[chosen[0]]))]))  # compiles the DTW kernel
    chosen = chosen[1 : int(os.environ.get("BENCH_SCALE_ORDER_UTTERANCES", 24)) + 1]
    start = time.perf_counter()
    seconds_of_audio = 0.0
    for utt in chosen:
        audio = read_audio(wav[utt])
        seconds_of_audio += len(audio) / 16000
        for _, order in computer.compute([(utt, audio)]):
            if isinstance(order, Exception):
                raise order
    seconds = time.perf_counter() - start
    return {"utterances": len(chosen), "seconds": seconds, "mean_audio_s": seconds_of_audio / len(chosen)}


def stage_scoring(root: Path, output: Path) -> dict:
    from segreconcat_aug.evaluation.metrics import verification_metrics
    from segreconcat_aug.evaluation.scoring import speaker_models
    from segreconcat_aug.evaluation.trials import TrialList, score_trials

    rng = np.random.default_rng(0)
    dim, results = 192, {}
    for method in (None, "as-norm"):
        cohort = rng.normal(size=(CHALLENGE_SPEAKERS, dim)).astype(np.float32) if method else None
        start = time.perf_counter()
        for name, (count, targets, speakers, enroll_utts) in TRIALS.items():
            tests = count // speakers
            enroll = {
                f"s{k}": [f"e{k}-{j}" for j in range(k, enroll_utts, speakers)] for k in range(speakers)
            }
            embeddings = {
                utt: rng.normal(size=dim).astype(np.float32) for utts in enroll.values() for utt in utts
            }
            embeddings.update({f"t{j}": rng.normal(size=dim).astype(np.float32) for j in range(tests)})
            pairs = [(spk, f"t{j}") for spk in enroll for j in range(tests)]
            is_target = np.zeros(len(pairs), dtype=bool)
            is_target[rng.choice(len(pairs), size=targets, replace=False)] = True
            trials = TrialList(
                name, Path(name), [p[0] for p in pairs], [p[1] for p in pairs], is_target, wav={}
            )
            models = speaker_models(enroll, embeddings)
            scores = score_trials(trials, models, embeddings, cohort, method, 200 if method else None)
            verification_metrics(scores.target_scores, scores.nontarget_scores)
        results[method or "cosine"] = time.perf_counter() - start
    return {"trials": sum(v[0] for v in TRIALS.values()), **results}


STAGES = {
    "load": stage_load,
    "prep": stage_prep,
    "first_batch": stage_first_batch,
    "loader": stage_loader,
    "orders": stage_orders,
    "scoring": stage_scoring,
}


# ---------------------------------------------------------------------------------------------------------
# The parent: build, run each stage in its own process, print


def run_stage(name: str, root: Path, output: Path, timeout: float = 480) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    launched = time.time()
    done = subprocess.run(
        [sys.executable, __file__, "--stage", name, "--root", str(root), "--output", str(output)],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )
    if name == "first_batch":
        report = output / "first_batch.json"
        if not report.is_file():
            raise RuntimeError(f"train.py reached no training batch:\n{done.stderr[-4000:]}")
        result = json.loads(report.read_text())
        return {"seconds": result["at"] - launched, "peak_mib": result["peak_mib"], "batch": result["batch"]}
    if done.returncode != 0:
        raise RuntimeError(f"stage {name} failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _row(what: str, figure: str, target: str) -> None:
    print(f"  {what:<52}{figure:>20}   {target}")


def _verdict(value: float, limit: float) -> str:
    return f"target <= {limit:g}: {'OK' if value <= limit else 'ABOVE TARGET'}"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--utterances", type=int, default=CHALLENGE_UTTERANCES)
    parser.add_argument("--speakers", type=int, default=CHALLENGE_SPEAKERS)
    parser.add_argument("--keep", help="build in this folder and keep it (default: a temporary folder)")
    parser.add_argument("--order-utterances", type=int, default=24, help="utterances the AR stage orders")
    parser.add_argument(
        "--formats",
        nargs="+",
        default=["ogg", "wav", "flac"],
        choices=["ogg", "wav", "flac"],
        help="audio formats of the DataLoader stage (ogg: the demo's files; wav, flac: converted copies)",
    )
    parser.add_argument("--stage", choices=sorted(STAGES), help=argparse.SUPPRESS)
    parser.add_argument("--root", help=argparse.SUPPRESS)
    parser.add_argument("--output", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.stage:  # a child: one measurement, one JSON line
        print(json.dumps(STAGES[args.stage](Path(args.root), Path(args.output))))
        return

    started = time.perf_counter()
    os.environ["BENCH_SCALE_ORDER_UTTERANCES"] = str(args.order_utterances)  # read by the stage's process
    scratch = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench_scale_"))
    root, output = scratch / "data", scratch / "train"
    try:
        start = time.perf_counter()
        folder, cache = build_scale_layout(root, args.utterances, args.speakers)
        built = time.perf_counter() - start
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
        print(
            f"Challenge-scale layout: {args.utterances:,} utterances, {args.speakers} speakers, "
            f"{cache.stat().st_size / 2**20:.0f} MiB alignment cache, built in {built:.1f} s "
            f"({cores} cores, load average {load:.1f}; timings grow with the machine's load)"
        )
        first = run_stage("load", root, output)
        indexed = run_stage("load", root, output)
        print(f"\nalignment cache ({first['utterances']:,} utterances, {first['words']:,} words)")
        _row("first load: parse + clean + write index", f"{first['seconds']:.1f} s", "once per cache change")
        _row(
            "load from the index",
            f"{indexed['seconds']:.2f} s",
            _verdict(indexed["seconds"], TARGETS["load_indexed_s"]),
        )
        _row("memory: peak / held (first load)", f"{first['peak_mib']:.0f} / {first['held_mib']:.0f} MiB", "")
        _row(
            "memory: peak / held (from the index)",
            f"{indexed['peak_mib']:.0f} / {indexed['held_mib']:.0f} MiB",
            "",
        )
        _row(
            "repair counts (first load / index)",
            f"{sum(first['fixes'].values())} / {sum(indexed['fixes'].values())}",
            "must be equal: " + ("OK" if first["fixes"] == indexed["fixes"] else "DIFFERENT"),
        )

        prep = run_stage("prep", root, output)
        print(f"\ndata preparation ({prep['train_rows']:,} training rows, {prep['dev_rows']:,} dev rows)")
        _row(
            "audio check + dev split + manifests",
            f"{prep['seconds']:.1f} s",
            f"{args.utterances / prep['seconds']:,.0f} utterances/s; once per system",
        )
        _row(
            "rerun with the same inputs",
            f"{prep['rerun_seconds']:.2f} s",
            "skipped: " + str(prep["rerun_skipped"]),
        )
        _row("peak memory", f"{prep['peak_mib']:.0f} MiB", "")

        batch = run_stage("first_batch", root, output)
        print("\nrecipes/train.py (tiny model, RR concat, preparation done, 2 workers)")
        _row(
            "start-up to the first training batch",
            f"{batch['seconds']:.1f} s",
            _verdict(batch["seconds"], TARGETS["first_batch_s"]),
        )
        _row("peak resident memory (main process)", f"{batch['peak_mib']:.0f} MiB", "")

        loaders = {}
        for audio_format in args.formats:
            where = output
            if audio_format != "ogg":
                where = convert_training_audio(output, scratch / f"train-{audio_format}", audio_format)
            loaders[audio_format] = loader = run_stage("loader", root, where)
            what = "the demo's Ogg Vorbis" if audio_format == "ogg" else f"{audio_format.upper()}, 16-bit"
            print(f"\ntraining DataLoader, {what} ({loader['rows']:,} rows, batches of 32, RR concat)")
            _row("main process", f"USS {loader['main']['uss']:.0f} MiB", "")
            for workers in (1, 2):
                result = loader[f"workers_{workers}"]
                _row(f"{workers} worker(s)", f"{result['samples_per_s']:.0f} samples/s", "")
                for k, worker in enumerate(result["workers"]):
                    _row(
                        f"  worker {k}: memory beyond the main process's",
                        f"USS {worker['uss']:.0f} MiB, PSS {worker['pss']:.0f}",
                        _verdict(worker["uss"], TARGETS["worker_uss_mb"]),
                    )
        if len(loaders) > 1:
            print("\nworker cores a GPU at 600 crops/s needs (samples/s of one worker, RR concat)")
            for audio_format, loader in loaders.items():
                rate = loader["workers_1"]["samples_per_s"]
                _row(audio_format, f"{600 / rate:.1f} cores", f"{rate:.0f} samples/s per worker")

        loader = loaders[args.formats[0]]
        for key, title in (("touched", "this recipe's"), ("touched_reference", "from_csv (reference)")):
            touched = loader[key]
            _row(
                f"after {touched['rows']:,} rows read, {title} dataset",
                "USS " + ", ".join(f"{worker['uss']:.0f}" for worker in touched["workers"]) + " MiB",
                _verdict(max(worker["uss"] for worker in touched["workers"]), TARGETS["worker_uss_mb"])
                if key == "touched"
                else "each worker's copy, for comparison",
            )

        orders = run_stage("orders", root, output)
        rate = orders["utterances"] / orders["seconds"]
        print(
            f"\nAR orders (MFCC + DTW, one core, {orders['utterances']} utterances of mean "
            f"{orders['mean_audio_s']:.1f} s)"
        )
        _row("utterances/s", f"{rate:.2f}", "")
        _row(
            f"implied for {CHALLENGE_UTTERANCES:,} utterances, one core",
            f"{CHALLENGE_UTTERANCES / rate / 3600:.1f} h",
            "shards: --shard i/n divides it",
        )

        scoring = run_stage("scoring", root, output)
        print(f"\nevaluation scoring ({scoring['trials']:,} trials: dev/test x f/m, random embeddings)")
        _row("cosine + EER + minDCF, four subsets", f"{scoring['cosine']:.2f} s", "")
        _row("with AS-norm (921-speaker cohort, top 200)", f"{scoring['as-norm']:.2f} s", "")
        print(f"\ntotal {time.perf_counter() - started:.0f} s")
    finally:
        if not args.keep:
            shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()

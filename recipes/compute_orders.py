#!/usr/bin/env python3
"""Precompute AR (acoustic) or SR (semantic) rearrangement orders into the order cache.

Usage::

    python recipes/compute_orders.py hparams/orders.yaml --data_folder=<VPAC root> --system=T8-5 \
        --strategy=acoustic
    python recipes/compute_orders.py hparams/orders.yaml --data_folder=<VPAC root> --system=T8-5 \
        --strategy=semantic --shard=0/4        # one of four processes (or run under torchrun)
    python recipes/compute_orders.py hparams/orders.yaml --data_folder=<VPAC root> --system=T8-5 \
        --strategy=acoustic --launcher=slurm --shards=16   # a SLURM job array of 16, then the merge

Reads the system's training folder (or ``--input``) and its alignment cache, and writes one order per
utterance to ``orders_cache`` (docs/rearrangement.md); reruns skip what is done.
"""

import logging
import sys
from pathlib import Path

from segreconcat_aug.align.cache import load_alignments
from segreconcat_aug.cli import load_recipe_hparams, run_main
from segreconcat_aug.data.jobs import merge_jsonl, resolve_shard, run_array
from segreconcat_aug.data.jsonl_files import shard_files
from segreconcat_aug.data.vpac import read_inputs, training_folder
from segreconcat_aug.method.order_computer import OrderComputer, OrderOptionError, run_order_job
from segreconcat_aug.options import OrdersOptions

logger = logging.getLogger(__name__)


def build_computer(hparams, alignments, device=None) -> OrderComputer:
    """The :class:`OrderComputer` of the YAML (loads Whisper for ``semantic``)."""
    strategy = hparams["strategy"]
    options = dict(hparams.get(f"{strategy}_options") or {})
    whisper = None
    if strategy == "semantic":
        # sr_context (the YAML key training reads too) decides SR's features; an explicit
        # semantic_options.context must agree with it.
        context = hparams.get("sr_context", options.get("context", "segment"))
        if options.setdefault("context", context) != context:
            raise OrderOptionError(
                f"semantic_options.context={options['context']!r} contradicts sr_context={context!r}; "
                "set sr_context only"
            )
        from segreconcat_aug.align.whisper_encoder import load_encoder

        # The encoder of the model that segments: faster-whisper (CTranslate2) as recipes/align.py's
        # default backend, or transformers.
        whisper = load_encoder(
            hparams.get("whisper_backend", "transformers"),
            hparams["whisper_model"],
            device=device or hparams.get("device"),
            compute_type=hparams.get("compute_type", "auto"),
            dtype=hparams["dtype"],
        )
    return OrderComputer(
        strategy,
        alignments,
        segment_policy=hparams["segment_policy"],
        min_leading_silence=hparams["min_leading_silence"],
        options=options,
        whisper=whisper,
        encoder_batch_size=hparams["encoder_batch_size"],
    )


def main(argv=None) -> int:
    hparams_file, run_opts, overrides, hparams = load_recipe_hparams(argv, OrdersOptions)
    if hparams.get("dtw_threads"):
        import numba

        numba.set_num_threads(int(hparams["dtw_threads"]))
    shards = hparams["shards"]  # a SLURM job array's size; null under launcher: local (ArrayOptions)
    # input, else the system's training folder under its protocol (the layout present)
    source = hparams.get("input") or training_folder(
        hparams["data_folder"],
        hparams["system"],
        hparams.get("folder_overrides"),
        protocol=hparams.get("protocol"),
        language=hparams.get("language"),
    )
    items = read_inputs(source, allow_pipes=hparams["allow_pipes"], root=hparams.get("data_root"))
    alignments = load_alignments(hparams["alignment_cache"])
    if shards:  # this command's shards as one SLURM job array, then their merge into orders_cache
        output = Path(hparams["orders_cache"])
        argv = sys.argv[1:] if argv is None else argv
        ids = [item.id for item in items]
        status = run_array(__file__, argv, output, ids, shards=shards, hparams=hparams, name="orders")
        parts = shard_files(output)
        if output.suffix == ".jsonl" and parts:  # what it held before stays in it
            lines = merge_jsonl([*([output] if output.is_file() else []), *parts], output)
            logger.info("merged %d orders from %d part(s) into %s", lines, len(parts), output)
        return status
    # --device and --noprogressbar are SpeechBrain's own options, not YAML overrides.
    computer = build_computer(hparams, alignments, device=getattr(run_opts, "device", None))
    job = run_order_job(
        computer,
        items,
        hparams["orders_cache"],
        shard=resolve_shard(hparams.get("shard")),
        batch_size=hparams["batch_size"],
        progress=hparams["progress"] and not getattr(run_opts, "noprogressbar", False),
        resample=hparams["resample"],
    )
    logger.info("%s (input %s)", job.summary(), source)
    return job.exit_status(hparams["allow_failures"])


if __name__ == "__main__":
    run_main(main)

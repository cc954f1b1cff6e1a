"""SegReConcat and the training set's audio pipeline, built from the training YAML.

:func:`build_train_audio` gives the augmenter (:func:`build_augmenter`: None for ``mode: none``;
a pooled run's :class:`~segreconcat_aug.training.pooled.PooledSegReConcat`, one per system) and the :class:`~segreconcat_aug.training.pipeline.TrainAudioPipeline` that applies it;
:func:`warm_up_before_workers` loads what every DataLoader worker would otherwise load on its own.
"""

from __future__ import annotations

import logging

from segreconcat_aug.align.cache import load_alignments
from segreconcat_aug.method.augment import SegReConcat
from segreconcat_aug.method.strategies import get_strategy
from segreconcat_aug.training.pipeline import TrainAudioPipeline
from segreconcat_aug.training.pooled import PooledSegReConcat, augments_pooled, pooled_systems, system_hparams

logger = logging.getLogger(__name__)


def build_train_audio(hparams) -> tuple[SegReConcat | PooledSegReConcat | None, TrainAudioPipeline]:
    """The augmenter (None for the baseline) and the training set's audio pipeline, from the YAML.

    With ``train_systems`` (pooled training sets) the augmenter is one SegReConcat per pooled system,
    each with that system's caches (``train_system_caches``, :mod:`segreconcat_aug.training.pooled`).
    """
    if augments_pooled(hparams):
        systems = pooled_systems(hparams["system"], hparams["train_systems"])
        augmenter = PooledSegReConcat(
            {name: build_augmenter(system_hparams(hparams, name)) for name in systems}
        )
    else:
        augmenter = build_augmenter(hparams)
    train_audio = TrainAudioPipeline(
        augmenter=augmenter,
        sentence_len=hparams["sentence_len"],
        sample_rate=hparams["sample_rate"],
        seed=hparams["seed"],
        read_errors=hparams.get("read_errors", "skip"),
        decoded_cache_mb=hparams.get("decoded_cache_mb", 0),
    )
    return augmenter, train_audio


def build_augmenter(hparams) -> SegReConcat | None:
    """SegReConcat from the YAML keys, or None for ``mode: none`` (the baseline).

    Reads the alignment cache (``alignment_cache``) and, for AR/SR, the order cache
    (``orders_cache``); SR orders must have been computed with this run's ``sr_context`` and, with
    ``sr_pad_normalize``, carry the segments' peak (a refusal names :func:`rebuild_orders_command`).

    >>> build_augmenter({"mode": "none"}) is None
    True
    """
    if hparams["mode"] == "none":
        return None
    strategy = get_strategy(hparams["strategy"])
    alignments = load_alignments(hparams["alignment_cache"])
    log_alignment_repairs(alignments, hparams["alignment_cache"])
    orders = None
    semantic = strategy.name == "semantic"
    if strategy.precomputed:
        from segreconcat_aug.method.orders import load_orders

        orders = load_orders(
            hparams["orders_cache"],
            strategy=strategy.name,
            alignments=alignments,
            segment_policy=hparams["segment_policy"],
            min_leading_silence=hparams["min_leading_silence"],
            # SR orders must come from the feature context asked for (sr_context).
            required_options={"context": hparams["sr_context"]} if semantic else None,
            # SR's pad-and-normalize divides by the segments' peak, stored with each order, so
            # training reads only each crop's samples.
            require_peaks=semantic and hparams["sr_pad_normalize"],
            rebuild=rebuild_orders_command(hparams) if semantic else None,
        )
    return SegReConcat(
        alignments,
        mode=hparams["mode"],
        strategy=strategy.name,
        segment_policy=hparams["segment_policy"],
        crossfade=hparams["crossfade"],
        seed=hparams["seed"],
        sample_rate=hparams["sample_rate"],
        missing_alignment=hparams["missing_alignment"],
        orders=orders,
        min_leading_silence=hparams["min_leading_silence"],
        rr_redraw=hparams["rr_redraw"],
        sr_pad_normalize=hparams["sr_pad_normalize"],
        peaks=orders.peaks if orders is not None else None,
    )


def rebuild_orders_command(hparams) -> str:
    """The command that recomputes this training's SR order cache (named when it is refused).

    >>> print(rebuild_orders_command({"orders_cache": "o.jsonl", "data_folder": "vpac", "system": "B3",
    ...     "alignment_cache": "a.jsonl", "segment_policy": "cover", "min_leading_silence": 0.05,
    ...     "sr_context": "segment"}))  # doctest: +NORMALIZE_WHITESPACE
    move o.jsonl aside, then python recipes/compute_orders.py hparams/orders.yaml --data_folder=vpac
    --system=B3 --strategy=semantic --alignment_cache=a.jsonl --segment_policy=cover
    --min_leading_silence=0.05 --sr_context=segment --orders_cache=o.jsonl
    """
    cache = hparams["orders_cache"]
    return (
        f"move {cache} aside, then python recipes/compute_orders.py hparams/orders.yaml "
        f"--data_folder={hparams['data_folder']} --system={hparams['system']} --strategy=semantic "
        f"--alignment_cache={hparams['alignment_cache']} --segment_policy={hparams['segment_policy']} "
        f"--min_leading_silence={hparams['min_leading_silence']} --sr_context={hparams['sr_context']} "
        f"--orders_cache={cache}"
    )


def log_alignment_repairs(alignments, source) -> None:
    """Log what the alignment loader had to repair (counts by kind, first ids), if anything."""
    repairs = {key: count for key, count in sorted(alignments.stats.items()) if count}
    if repairs:
        logger.info(
            "Alignment cache %s: words repaired while loading %s, in %d utterance(s), first: %s",
            source,
            repairs,
            alignments.repaired_count,
            alignments.repaired_ids[:5],
        )
    else:
        logger.info("Alignment cache %s: %d utterances, no word needed a repair", source, len(alignments))


def warm_up_before_workers(train_data) -> None:
    """Make one training sample in this process before the DataLoader workers fork.

    The first sample loads numba's compiled SegReConcat kernels and the audio decoders; loaded
    here, every forked worker shares them instead of loading its own copy (about 70 MiB less per
    worker, measured by benchmarks/bench_scale.py). The sample is dropped; its count goes when the
    first epoch is set (:meth:`~segreconcat_aug.training.pipeline.TrainAudioPipeline.set_epoch`).
    """
    if len(train_data):
        train_data[0]

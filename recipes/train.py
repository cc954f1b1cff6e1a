#!/usr/bin/env python3
"""Train the paper's ECAPA-TDNN attacker on one anonymized challenge system, with SegReConcat.

Usage::

    python recipes/train.py hparams/ecapa_segreconcat.yaml --data_folder=<VPAC root> --system=T8-5
    python recipes/train.py hparams/ecapa_segreconcat.yaml --protocol=vpc2026-track1 --data_folder=<2026 root> --system=B3
    python recipes/train.py hparams/ecapa_segreconcat.yaml --protocol=vpc2026-track2 --data_folder=<2026 root> \
        --system=BM1 --language=de --output_folder=results/BM1-de
    torchrun --nproc_per_node=4 recipes/train.py hparams/ecapa_segreconcat.yaml --data_folder=... --system=...

Steps: prepare the system's training data (:mod:`segreconcat_aug.training.data_prep`, main process
only, skipped when already done) -> train with SegReConcat in the data pipeline (worker side)
and optional SpecAugment on the features (batch side) -> early stopping on the FIXED dev set's
loss, keeping the best-dev-loss checkpoint -> export it to ``<output_folder>/export/``, where
``recipes/evaluate.py`` finds it and SpeechBrain's ``EncoderClassifier.from_hparams`` loads it.
A rerun with the same output folder resumes from the last checkpoint, patience state included.
See docs/training.md.
"""

from __future__ import annotations

import gc
import json
import logging
import os
import shutil
import sys
import time
from pathlib import Path

import ruamel.yaml
import speechbrain as sb
import torch
from hyperpyyaml import load_hyperpyyaml, resolve_references
from speechbrain.utils.checkpoints import CKPT_PREFIX, METAFNAME, register_checkpoint_hooks
from speechbrain.utils.distributed import ddp_all_reduce, ddp_broadcast, if_main_process, run_on_main
from speechbrain.utils.epoch_loop import EpochCounterWithStopper

from segreconcat_aug.align.cache import load_alignments
from segreconcat_aug.cli import (
    create_experiment_directory,
    format_duration,
    keep_new_folders,
    overrides_mapping,
    parse_recipe_arguments,
    remember_new_folders,
    report_progress,
    run_main,
)
from segreconcat_aug.data.jsonl_files import cache_files
from segreconcat_aug.data.vpac import training_folder
from segreconcat_aug.errors import UserError
from segreconcat_aug.method.augment import COUNT_KEYS, SegReConcat
from segreconcat_aug.method.strategies import get_strategy
from segreconcat_aug.options import validate_hparams_file
from segreconcat_aug.training.data_prep import DataPrepError, prepare_vpac_training
from segreconcat_aug.training.manifest import ManifestDataset, read_manifest
from segreconcat_aug.training.pipeline import SkipFailedReads, TrainAudioPipeline, chunk_audio_pipeline

logger = logging.getLogger(__name__)

# SpeechBrain 1.1.2 registers checkpoint hooks for EpochCounter but not for its subclass
# EpochCounterWithStopper, so the checkpointer saves only the epoch number and a resumed run
# forgets its best dev loss and patience. Registering the subclass makes its own _save/_recover
# (epoch, best epoch, best score, should_stop) the ones used.
register_checkpoint_hooks(EpochCounterWithStopper)

# The inference YAML, which SpeechBrain's EncoderClassifier.from_hparams loads.
EXPORT_HPARAMS = "hyperparams.yaml"
# The training YAML as run (overrides applied, references resolved).
EXPORT_TRAIN_HPARAMS = "train_hyperparams.yaml"
EXPORT_LABELS = "label_encoder.txt"  # the training's speaker <-> classifier index
# Inference modules (EncoderClassifier's names) and the checkpoint recoverable holding each one's weights.
# Each is exported as <module>.ckpt, the file SpeechBrain's Pretrainer looks for in the model folder.
EXPORT_MODULES = {
    "compute_features": None,  # Fbank: no weights
    "mean_var_norm": "normalizer",
    "embedding_model": "embedding_model",
    "classifier": "classifier",
}
EPOCHS_LOG = "epochs.jsonl"  # one JSON line per finished epoch, exact values (train_log.txt rounds)


class SpeakerBrain(sb.core.Brain):
    """Speaker classification (AAM softmax) whose embedding model is the attacker.

    ``train_audio`` is the training set's :class:`TrainAudioPipeline`; its epoch
    is set here so every epoch draws new crops (and, with ``rr_redraw: epoch``, new RR permutations).
    ``settings`` (:func:`run_settings`) are written to the output folder once a checkpoint exists:
    from then on a rerun into the folder resumes this run, and is checked against them.
    """

    def __init__(self, *args, train_audio: TrainAudioPipeline, settings: dict | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.train_audio = train_audio
        self.settings = settings
        self.samples_seen = 0
        self.failed_reads = 0
        self.resumed_at_batch = 0
        self.stage_started = time.time()
        self.epoch_seconds: list[float] = []  # this process's finished epochs (training + dev), for time left
        self.train_stats: dict = {}

    def _wrap_distributed(self):
        if not (self.distributed_launch and self.device_type == "cpu"):
            return super()._wrap_distributed()
        # SpeechBrain 1.1.2 converts every module to SyncBatchNorm, which torch refuses on CPU;
        # on CPU (gloo) wrap without it: DDP sends rank 0's BatchNorm buffers at each forward.
        for name, module in self.modules.items():
            if any(p.requires_grad for p in module.parameters()):
                self.modules[name] = torch.nn.parallel.DistributedDataParallel(
                    module, device_ids=None, find_unused_parameters=self.find_unused_parameters
                )

    def compute_forward(self, batch, stage):
        batch = batch.to(self.device)
        wavs, lens = batch.sig
        feats = self.modules.compute_features(wavs)
        feats = self.modules.mean_var_norm(feats, lens)
        if stage == sb.Stage.TRAIN:
            self.samples_seen += wavs.shape[0]
            self.failed_reads += getattr(batch, "failed_reads", 0)  # rows whose audio read failed
            if self.hparams.specaug:
                feats, lens = self.hparams.spec_augment(feats, lens)
        embeddings = self.modules.embedding_model(feats, lens)
        return self.modules.classifier(embeddings), lens

    def compute_objectives(self, predictions, batch, stage):
        predictions, lens = predictions
        spkid, _ = batch.spk_id_encoded
        if stage == sb.Stage.TRAIN and self.hparams.specaug:
            spkid = self.hparams.spec_augment.replicate_labels(spkid)
        loss = self.hparams.compute_cost(predictions, spkid, lens)
        if stage != sb.Stage.TRAIN:
            self.error_metrics.append(batch.id, predictions, spkid, lens)
        return loss

    def on_fit_batch_end(self, batch, outputs, loss, should_step):
        # The cyclic learning rate moves once per optimizer step.
        if should_step:
            self.hparams.lr_annealing.on_batch_end(self.optimizer)

    def on_stage_start(self, stage, epoch=None):
        if stage == sb.Stage.TRAIN:
            self.train_audio.set_epoch(epoch)
            self.samples_seen = 0
            self.failed_reads = 0
            # A run resumed from a mid-epoch checkpoint starts after the batches already done:
            # this process sees (and counts) only the rest of the epoch.
            self.resumed_at_batch = int(self.step)
            self.stage_started = time.time()
        else:
            self.error_metrics = self.hparams.error_stats()

    def on_stage_end(self, stage, stage_loss, epoch=None):
        if stage == sb.Stage.TRAIN:
            self._end_train_epoch(stage_loss, epoch)
            return
        if stage != sb.Stage.VALID:
            return
        loss = float(ddp_broadcast(stage_loss))  # rank 0's: every rank takes the same stopping decision
        valid_stats = {"loss": loss, "error_rate": float(self.error_metrics.summarize("average"))}
        lr = self.optimizer.param_groups[0]["lr"]
        # update_metric first: the counter (a recoverable) is saved with its new patience state.
        self.hparams.epoch_counter.update_metric(loss)
        self.checkpointer.save_and_keep_only(meta={"loss": loss}, min_keys=["loss"])
        self.record_settings()
        self.hparams.train_logger.log_stats(
            stats_meta={"epoch": epoch, "lr": lr}, train_stats=self.train_stats, valid_stats=valid_stats
        )
        if if_main_process():
            counter = self.hparams.epoch_counter
            record = {
                "epoch": epoch,
                "lr": lr,
                "train": self.train_stats,
                "valid": valid_stats,
                "best_epoch": counter.best_limit,
                "should_stop": counter.should_stop,
            }
            with open(Path(self.hparams.output_folder) / EPOCHS_LOG, "a", encoding="utf-8") as handle:
                handle.write(json.dumps(record) + "\n")
            self.epoch_seconds.append(time.time() - self.stage_started)
            report_progress(epoch_line(record, counter, self.epoch_seconds))

    def _save_intra_epoch_ckpt(self):
        super()._save_intra_epoch_ckpt()
        self.record_settings()

    def record_settings(self) -> None:
        """Write the run's settings beside its checkpoints (once per process run, main process only)."""
        if self.settings is not None and if_main_process():
            save_run_settings(self.hparams.output_folder, self.settings)
            self.settings = None

    def _end_train_epoch(self, stage_loss, epoch):
        elapsed = max(time.time() - self.stage_started, 1e-9)
        augmenter = self.train_audio.augmenter
        counts = list(augmenter.counts().values()) if augmenter is not None else []  # COUNT_KEYS order
        totals = [self.samples_seen, self.failed_reads, *counts]
        totals = torch.tensor(totals, dtype=torch.float64, device=self.device)
        totals = ddp_all_reduce(totals, torch.distributed.ReduceOp.SUM).tolist()  # summed over processes
        self.train_stats = {
            "loss": float(stage_loss),
            "samples": int(totals[0]),
            "samples_per_s": totals[0] / elapsed,
            "failed_reads": int(totals[1]),
        }
        if self.resumed_at_batch:
            # Samples, counts and rate cover the resumed part only; the loss is SpeechBrain's running
            # average, recovered with the step, so it covers the whole epoch.
            self.train_stats["covers"] = f"resumed part: batches after {self.resumed_at_batch}"
            self.train_stats["resumed_at_batch"] = self.resumed_at_batch
        logger.info("Epoch %s: %.1f training samples/s (all processes)", epoch, totals[0] / elapsed)
        if totals[1]:
            logger.warning(
                "Epoch %s: %d training rows skipped because their audio could not be read (read_errors: "
                "skip; the warnings above name the files)",
                epoch,
                int(totals[1]),
            )
        if augmenter is not None:
            summed = dict(zip(COUNT_KEYS, (int(value) for value in totals[2:])))
            self.train_stats.update(
                {key: value for key, value in summed.items() if value or key == "augmented"}
            )
            logger.info("Epoch %s SegReConcat: %s (this process: %s)", epoch, summed, augmenter.report())
            augmenter.reset_counts()


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


def epochs_left(counter) -> tuple[int, int]:
    """``(fewest, most)`` epochs still to run after the current one.

    Fewest: if the dev loss stops improving, early stopping ends the run when patience is
    spent; most: the epoch limit.

    >>> from speechbrain.utils.epoch_loop import EpochCounterWithStopper
    >>> counter = EpochCounterWithStopper(limit=100, limit_to_stop=3, limit_warmup=2, direction="min")
    >>> counter.current = 1
    >>> epochs_left(counter)  # epoch 3 is the first one watched, then 3 epochs of patience
    (5, 99)
    """
    if counter.should_stop:
        return 0, 0
    most = counter.limit - counter.current
    if counter.current <= counter.limit_warmup:
        stop_at = counter.limit_warmup + 1 + counter.limit_to_stop
    else:
        stop_at = counter.best_limit + counter.limit_to_stop
    return min(max(stop_at - counter.current, 0), most), most


def epoch_line(record: dict, counter, epoch_seconds: list[float]) -> str:
    """The console's line for a finished epoch: losses, dev error rate, speed and time left."""
    train, valid = record["train"], record["valid"]
    line = (
        f"epoch {record['epoch']}/{counter.limit}: train loss {train.get('loss', float('nan')):.3f}, "
        f"dev loss {valid['loss']:.3f}, dev error rate {valid['error_rate']:.3f}, "
        f"{train.get('samples_per_s', 0.0):.0f} samples/s"
    )
    fewest, most = epochs_left(counter)
    if fewest == most == 0:
        return f"{line}; training done (best dev loss: epoch {counter.best_limit or record['epoch']})"
    per_epoch = sum(epoch_seconds) / len(epoch_seconds)
    left = format_duration(fewest * per_epoch)
    return (
        f"{line}; time left: {left} if the dev loss stops improving ({fewest} epoch(s)), "
        f"at most {format_duration(most * per_epoch)} ({most} epoch(s))"
    )


def build_train_audio(hparams) -> tuple[SegReConcat | None, TrainAudioPipeline]:
    """The augmenter (None for the baseline) and the training set's audio pipeline, from the YAML."""
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


def warm_up_before_workers(train_data, augmenter) -> None:
    """Make one training sample in this process before the DataLoader workers fork.

    The first sample loads numba's compiled SegReConcat kernels and the audio decoders; loaded
    here, every forked worker shares them instead of loading its own copy (about 70 MiB less per
    worker, measured by benchmarks/bench_scale.py). The sample is dropped and its counts reset.
    """
    if len(train_data):
        train_data[0]
    if augmenter is not None:
        augmenter.reset_counts()


def build_augmenter(hparams) -> SegReConcat | None:
    """SegReConcat from the YAML keys, or None for ``mode: none`` (the baseline)."""
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
    """The command that recomputes this training's SR order cache (named when it is refused)."""
    cache = hparams["orders_cache"]
    return (
        f"move {cache} aside, then python recipes/compute_orders.py hparams/orders.yaml "
        f"--data_folder={hparams['data_folder']} --system={hparams['system']} --strategy=semantic "
        f"--alignment_cache={hparams['alignment_cache']} --segment_policy={hparams['segment_policy']} "
        f"--min_leading_silence={hparams['min_leading_silence']} --sr_context={hparams['sr_context']} "
        f"--orders_cache={cache}"
    )


def dataio_prep(
    hparams,
    train_audio: TrainAudioPipeline,
    speakers: list[str] | None = None,
    train_rows: dict | None = None,
):
    """Datasets (train: read -> SegReConcat -> crop; dev: fixed chunks) and the speaker encoder.

    ``speakers``: the sorted training speakers, and ``train_rows``: the training
    manifest (:func:`segreconcat_aug.training.manifest.read_manifest`), when the caller has read them already.
    The training set is a :class:`ManifestDataset` (arrays, shared by forked workers without copies).
    """
    if train_rows is None:
        train_rows = read_manifest(hparams["train_annotation"])
    train_data = ManifestDataset(train_rows)
    valid_data = sb.dataio.dataset.DynamicItemDataset.from_csv(hparams["valid_annotation"])
    if len(valid_data) == 0:
        raise DataPrepError(
            f"{hparams['valid_annotation']}: the dev set is empty, so there is no dev loss to stop on; "
            "raise dev_ratio or lower sentence_len"
        )
    label_encoder = sb.dataio.encoder.CategoricalEncoder()

    @sb.utils.data_pipeline.takes("spk_id")
    @sb.utils.data_pipeline.provides("spk_id", "spk_id_encoded")
    def label_pipeline(spk_id):
        yield spk_id
        yield label_encoder.encode_sequence_torch([spk_id])

    sb.dataio.dataset.add_dynamic_item([train_data], train_audio.dynamic_item())
    sb.dataio.dataset.add_dynamic_item([valid_data], chunk_audio_pipeline)
    sb.dataio.dataset.add_dynamic_item([train_data, valid_data], label_pipeline)
    sb.dataio.dataset.set_output_keys([train_data, valid_data], ["id", "sig", "spk_id_encoded"])

    if speakers is None:
        speakers = train_rows.distinct("spk_id")
    os.makedirs(hparams["save_folder"], exist_ok=True)
    encoder_file = os.path.join(hparams["save_folder"], "label_encoder.txt")
    if if_main_process() and not has_checkpoints(hparams["save_folder"]):
        # No checkpoint uses it (a run that stopped before training): made afresh for this data.
        Path(encoder_file).unlink(missing_ok=True)
    label_encoder.load_or_create(path=encoder_file, from_iterables=[speakers])
    if set(label_encoder.lab2ind) != set(speakers):
        raise DataPrepError(
            f"{encoder_file} lists other speakers than {hparams['train_annotation']}: this save folder "
            "belongs to a run on other data; use another output_folder"
        )
    return train_data, valid_data, label_encoder


def _overrides_with(overrides, **values) -> dict:
    """The command-line overrides (a YAML string) as a mapping, plus ``values``."""
    return {**overrides_mapping(overrides), **values}


def _detached(node):
    """A copy of a round-trip YAML node without its comments and anchors (its tags kept)."""
    from ruamel.yaml.comments import CommentedMap, CommentedSeq

    if isinstance(node, CommentedMap):
        copy = CommentedMap((key, _detached(value)) for key, value in node.items())
    elif isinstance(node, CommentedSeq):
        copy = CommentedSeq(_detached(value) for value in node)
        copy.fa.set_flow_style()
    else:
        return node
    if node.tag.value:
        copy.yaml_set_ctag(node.tag)
    return copy


def inference_hparams(resolved_training_yaml: str) -> str:
    """The export's ``hyperparams.yaml``: the training YAML's feature, normalization, embedding and
    classifier definitions (as trained, every reference resolved) plus SpeechBrain's ``pretrainer``,
    ``label_encoder`` and ``modules``, so that ``EncoderClassifier.from_hparams(source=<export>)`` loads it.

    The Pretrainer gives no paths: every file is ``<source>/<key>.ckpt``, so the folder can be
    moved or copied (to the VPC 2024 toolkit's ``exp/`` for instance) and still loads.
    """
    import io

    from ruamel.yaml.comments import CommentedMap

    yaml = ruamel.yaml.YAML()
    yaml.indent(mapping=4, sequence=4, offset=2)
    training = yaml.load(resolved_training_yaml)
    definitions = CommentedMap((key, _detached(training[key])) for key in EXPORT_MODULES)
    text = io.StringIO()
    yaml.dump(definitions, text)
    modules = "\n".join(f"    {key}: !ref <{key}>" for key in EXPORT_MODULES)
    loadables = "\n".join(f"        {key}: !ref <{key}>" for key, saved in EXPORT_MODULES.items() if saved)
    return f"""# ECAPA-TDNN speaker encoder trained by segreconcat-aug (recipes/train.py): the best-dev-loss
# checkpoint. Load it as any SpeechBrain speaker model (the VPC 2024 evaluation toolkit does the same):
#   from speechbrain.inference.speaker import EncoderClassifier
#   encoder = EncoderClassifier.from_hparams(source="<this folder>")
#   embeddings = encoder.encode_batch(wavs, wav_lens)  # wavs: [batch, samples] at {training["sample_rate"]} Hz
# Files: <key>.ckpt for each loadable below; {EXPORT_LABELS} is the same label encoder under its usual name.

sample_rate: {training["sample_rate"]}

{text.getvalue().rstrip()}

label_encoder: !new:speechbrain.dataio.encoder.CategoricalEncoder

modules:
{modules}

pretrainer: !new:speechbrain.utils.parameter_transfer.Pretrainer
    loadables:
{loadables}
        label_encoder: !ref <label_encoder>
"""


def export_best_model(hparams, hparams_file, overrides) -> Path:
    """The best-dev-loss checkpoint -> ``<export_folder>``, loadable by SpeechBrain's ``EncoderClassifier``.

    Writes ``hyperparams.yaml`` (:func:`inference_hparams`), ``embedding_model.ckpt``,
    ``mean_var_norm.ckpt``, ``classifier.ckpt``, the label encoder (``label_encoder.txt`` and
    ``label_encoder.ckpt``, the name SpeechBrain's Pretrainer loads), ``train_hyperparams.yaml``
    (the training YAML as run) and ``export_info.json`` (epoch, dev loss, checkpoint).
    """
    checkpoint = hparams["checkpointer"].find_checkpoint(min_key="loss")
    if checkpoint is None:
        raise RuntimeError(f"{hparams['save_folder']}: no checkpoint with a dev loss to export")
    export = Path(hparams["export_folder"])
    export.mkdir(parents=True, exist_ok=True)
    state = torch.load(checkpoint.paramfiles["embedding_model"], map_location="cpu")
    hparams["embedding_model"].load_state_dict(state)  # fails loudly if the checkpoint does not fit
    for module, recoverable in EXPORT_MODULES.items():
        if recoverable is not None:  # the checkpointer's own file: the format its loader reads
            shutil.copyfile(checkpoint.paramfiles[recoverable], export / f"{module}.ckpt")
    labels = Path(hparams["save_folder"]) / EXPORT_LABELS
    shutil.copyfile(labels, export / EXPORT_LABELS)
    shutil.copyfile(labels, export / "label_encoder.ckpt")
    with open(hparams_file, encoding="utf-8") as fin:
        resolved = resolve_references(fin, overrides).getvalue()
    (export / EXPORT_TRAIN_HPARAMS).write_text(resolved, encoding="utf-8")
    (export / EXPORT_HPARAMS).write_text(inference_hparams(resolved), encoding="utf-8")
    with open(checkpoint.paramfiles["counter"], encoding="utf-8") as handle:
        epoch = ruamel.yaml.YAML(typ="safe").load(handle)["current_epoch"]
    info = {"checkpoint": str(checkpoint.path), "epoch": epoch, "dev_loss": checkpoint.meta["loss"]}
    (export / "export_info.json").write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    logger.info(
        "Exported the best-dev-loss model (epoch %s, dev loss %.4f) to %s", epoch, info["dev_loss"], export
    )
    return export


def load_hparams(hparams_file, overrides):
    with open(hparams_file, encoding="utf-8") as fin:
        return load_hyperpyyaml(fin, overrides)


# What makes a run the run it is: a rerun into the same output folder resumes its checkpoints, so it
# must not differ in any of these (experiment_name names only strategy, mode, SpecAugment and seed).
RUN_SETTINGS_FILE = "run_settings.json"
EXPERIMENT_HPARAMS = "hyperparams.yaml"  # what SpeechBrain's experiment folder keeps of the YAML as run
RUN_SETTING_KEYS = (
    "protocol",
    "language",
    "system",
    "mode",
    "strategy",
    "segment_policy",
    "crossfade",
    "min_leading_silence",
    "rr_redraw",
    "sr_pad_normalize",
    "sr_context",
    "orders_variant",
    "missing_alignment",
    "specaug",
    "seed",
    "sentence_len",
    "dev_ratio",
    "min_chunk_amplitude",
    "sample_rate",
    "channels",
    "attention_channels",
    "lin_neurons",
    "batch_size",
    "lr",
    "base_lr",
    "step_size",
    "weight_decay",
)


class RunSettingsError(UserError, ValueError):
    """The output folder holds a run made with other method settings (or settings that cannot be read)."""


def has_checkpoints(save_folder) -> bool:
    """Whether ``save_folder`` holds a SpeechBrain checkpoint: training has started there."""
    return any(Path(save_folder).glob(f"{CKPT_PREFIX}+*/{METAFNAME}"))


# Keys left out of run_settings.json at these values, so the folders of runs made before the keys
# existed (VPAC 2024, no language) resume as before.
RUN_SETTING_DEFAULTS = {"protocol": "vpac2024", "language": None}


def run_settings(hparams) -> dict:
    """The values of :data:`RUN_SETTING_KEYS` this run has, as JSON gives them back."""
    values = {
        key: hparams[key]
        for key in RUN_SETTING_KEYS
        if key in hparams and not (key in RUN_SETTING_DEFAULTS and hparams[key] == RUN_SETTING_DEFAULTS[key])
    }
    return json.loads(json.dumps(values, default=str))


def saved_run_settings(folder) -> dict | None:
    """The settings the run in ``folder`` was made with: its ``run_settings.json``, else the
    ``hyperparams.yaml`` (the YAML with its overrides) SpeechBrain saved when that run started; None if neither.
    """
    folder = Path(folder)
    path = folder / RUN_SETTINGS_FILE
    if path.is_file():
        try:
            saved = json.loads(path.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError) as err:
            saved = err
        if not isinstance(saved, dict):
            raise RunSettingsError(
                f"{path}: damaged (not a JSON object of settings), so the checkpoints in {folder} cannot be "
                "checked against this run's settings: restore the file, or delete it to check them against "
                f"{folder / EXPERIMENT_HPARAMS} instead"
            )
        return saved
    yaml_file = folder / EXPERIMENT_HPARAMS
    if yaml_file.is_file():
        try:
            values = ruamel.yaml.YAML(typ="rt").load(yaml_file.read_text(encoding="utf-8"))
        except (ruamel.yaml.YAMLError, UnicodeDecodeError):
            return None
        if isinstance(values, dict):
            return run_settings(values)
    return None


def check_run_settings(hparams) -> None:
    """Refuse to resume a run of the same folder made with other settings (named, with the fix).

    ``hparams``: the YAML's values (:func:`segreconcat_aug.options.validate_hparams_file`, read
    before anything is loaded or written) or the loaded YAML. A folder without checkpoints has no
    run to resume, so its settings never refuse a rerun.
    """
    folder = Path(hparams["output_folder"])
    save_folder = hparams.get("save_folder") or folder / "save"
    if not has_checkpoints(save_folder):
        return
    saved = saved_run_settings(folder)
    if saved is None:
        raise RunSettingsError(
            f"{save_folder} holds checkpoints, but neither {RUN_SETTINGS_FILE} nor {EXPERIMENT_HPARAMS} in "
            f"{folder} says which settings made them, and a rerun would resume them: choose another "
            f"--output_folder, or remove {save_folder} to start over"
        )
    current = run_settings(hparams)
    changed = [key for key in sorted(saved.keys() | current.keys()) if saved.get(key) != current.get(key)]
    if changed:
        differences = "; ".join(
            f"{key}: {saved.get(key)!r} there, {current.get(key)!r} now" for key in changed
        )
        raise RunSettingsError(
            f"{hparams['output_folder']} holds a run made with other settings ({differences}), and a "
            "rerun into it would resume that run's checkpoints: choose another --output_folder (or "
            "--experiment_name), or remove that folder to start over"
        )


def save_run_settings(output_folder, settings: dict) -> None:
    """Write ``settings`` (:func:`run_settings`) into the output folder (a later rerun is checked against them)."""
    folder = Path(output_folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / RUN_SETTINGS_FILE).write_text(json.dumps(settings, indent=2), encoding="utf-8")


def check_training_inputs(hparams) -> None:
    """What the run reads is there, before anything is written: the system's training folder (unless
    ``skip_prep``), and the alignment cache (and, for AR/SR, the order cache) SegReConcat reads."""
    if not hparams.get("skip_prep"):
        training_folder(
            hparams["data_folder"],
            hparams["system"],
            hparams.get("folder_overrides"),
            protocol=hparams.get("protocol"),
            language=hparams.get("language"),
        )
    if hparams["mode"] == "none":
        return
    cache_files(hparams["alignment_cache"], what="alignment cache (recipes/align.py writes it)")
    if get_strategy(hparams["strategy"]).precomputed:
        cache_files(hparams["orders_cache"], what="order cache (recipes/compute_orders.py writes it)")


def main(argv=None) -> SpeakerBrain:
    hparams_file, run_opts, overrides = parse_recipe_arguments(argv)
    values = validate_hparams_file(hparams_file, overrides)  # every option value, before anything is written
    # Before anything is written (loading the YAML makes the checkpointer's folder): never resume
    # another run's checkpoints, and every input the run reads is there.
    check_run_settings(values)
    check_training_inputs(values)
    remember_new_folders(values, "output_folder", "save_folder")  # removed if a user error stops the run
    sb.utils.distributed.ddp_init_group(run_opts)
    hparams = load_hparams(hparams_file, overrides)
    create_experiment_directory(hparams["output_folder"], hparams_file, overrides)

    if not hparams["skip_prep"]:
        run_on_main(
            prepare_vpac_training,
            kwargs={
                "data_folder": hparams["data_folder"],
                "system": hparams["system"],
                "output_folder": hparams["output_folder"],
                "folder_overrides": hparams["folder_overrides"],
                "mode": hparams["mode"],
                "sentence_len": hparams["sentence_len"],
                "dev_ratio": hparams["dev_ratio"],
                "min_chunk_amplitude": hparams["min_chunk_amplitude"],
                "seed": hparams["seed"],
                "sample_rate": hparams["sample_rate"],
                "check_workers": hparams["check_workers"],
                "check_audio": hparams.get("check_audio", "full"),
                "bad_audio": hparams.get("bad_audio", "error"),
                "min_audio_duration": hparams.get("min_audio_duration", 0.0),
                "silence_db": hparams.get("silence_db", -60.0),
                "audio_check_cache": hparams.get("audio_check_cache"),
                "protocol": hparams.get("protocol"),
                "language": hparams.get("language"),
            },
        )
    # The classifier's size is the number of training speakers: rebuild the model when the
    # YAML's n_speakers (921, train-clean-360) does not match the manifest.
    train_rows = read_manifest(hparams["train_annotation"])  # ~1 M rows: one read
    speakers = train_rows.distinct("spk_id")
    n_speakers = len(speakers)
    overrides = _overrides_with(overrides, n_speakers=n_speakers)
    if n_speakers != hparams["n_speakers"]:
        logger.info("n_speakers set to %d (training speakers in the manifest)", n_speakers)
        hparams = load_hparams(hparams_file, overrides)

    augmenter, train_audio = build_train_audio(hparams)
    train_data, valid_data, _ = dataio_prep(hparams, train_audio, speakers, train_rows)
    loader_opts = hparams["train_dataloader_opts"]
    processes = int(os.environ.get("WORLD_SIZE", 1))
    if loader_opts.get("drop_last") and len(train_data) // processes < loader_opts["batch_size"]:
        raise DataPrepError(
            f"{hparams['train_annotation']}: {len(train_data)} training rows give no full batch of "
            f"{loader_opts['batch_size']} per process ({processes} process(es)); lower batch_size"
        )
    if augmenter is not None:
        # Before any training: a missing alignment (or AR/SR order) stops here under the default policy.
        augmenter.check_coverage(train_rows.distinct("utt_id"))

    keep_new_folders()  # the inputs are checked: from here on the output folder holds work
    warm_up_before_workers(train_data, augmenter)
    # Everything built so far lives as long as training: the cyclic garbage collector need never visit
    # it, and a forked DataLoader worker then leaves those pages shared instead of copying them.
    gc.collect()
    gc.freeze()
    brain = SpeakerBrain(
        modules=hparams["modules"],
        opt_class=hparams["opt_class"],
        hparams=hparams,
        run_opts=run_opts,
        checkpointer=hparams["checkpointer"],
        train_audio=train_audio,
        settings=run_settings(hparams),
    )
    if has_checkpoints(hparams["save_folder"]):
        brain.record_settings()  # a resumed run: its settings were checked above
    try:
        brain.fit(
            brain.hparams.epoch_counter,
            train_data,
            valid_data,
            # A row whose audio fails to read (the file changed after the check) is dropped and counted.
            train_loader_kwargs={"collate_fn": SkipFailedReads(), **hparams["train_dataloader_opts"]},
            valid_loader_kwargs=hparams["valid_dataloader_opts"],
            # A bar within each epoch on an interactive console; none in logs and pipes (grid runs).
            progressbar=not brain.noprogressbar and sys.stderr.isatty(),
        )
    finally:
        gc.unfreeze()  # a caller running main() again (the tests) collects this run's objects
    run_on_main(export_best_model, args=[hparams, hparams_file, overrides])
    if hparams.get("evaluate_after_training", False):
        # The last stage: score the exported model as the challenge does (recipes/evaluate.py).
        from segreconcat_aug.evaluation.system import evaluate_system

        run_on_main(evaluate_system, args=[hparams, run_opts])
    return brain


if __name__ == "__main__":
    run_main(main)

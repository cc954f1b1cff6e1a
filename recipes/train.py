#!/usr/bin/env python3
"""Train the paper's ECAPA-TDNN attacker on one anonymized challenge system, with SegReConcat.

Usage::

    python recipes/train.py hparams/ecapa_segreconcat.yaml --data_folder=<VPAC root> --system=T8-5
    python recipes/train.py hparams/ecapa_segreconcat.yaml --protocol=vpc2026-track1 --data_folder=<2026 root> --system=B3
    python recipes/train.py hparams/ecapa_segreconcat.yaml --protocol=vpc2026-track2 --data_folder=<2026 root> \
        --system=BM1 --language=de --output_folder=results/BM1-de
    torchrun --nproc_per_node=4 recipes/train.py hparams/ecapa_segreconcat.yaml --data_folder=... --system=...

Steps (docs/training.md): check every option -> prepare the system's training data (main process,
skipped when done) -> train with SegReConcat in the data pipeline and optional SpecAugment, early
stopping on the fixed dev set's loss -> export the best-dev-loss model to ``<output_folder>/export/``
(SpeechBrain's ``EncoderClassifier`` loads it) with its convergence flags -> evaluate it (recipes/evaluate.py).
A rerun into the same output folder resumes from the last checkpoint, patience state included.
"""

from __future__ import annotations

import gc
import logging
import os
import sys
import time
from pathlib import Path

import speechbrain as sb
import torch
from speechbrain.utils.distributed import ddp_broadcast, if_main_process, run_on_main

from segreconcat_aug import training
from segreconcat_aug.cli import (
    check_options,
    hold_output_folder,
    load_hparams,
    report_progress,
    run_main,
    save_hparams_as_run,
    stop_removing_new_folders,
)
from segreconcat_aug.evaluation.system import evaluate_system, evaluation_folder
from segreconcat_aug.models.export import export_best_model
from segreconcat_aug.options import TrainingRunOptions, validate_hparams_file

logger = logging.getLogger(__name__)


class SpeakerBrain(sb.core.Brain):
    """Speaker classification (AAM softmax) whose embedding model is the attacker.

    ``train_audio`` is the training set's :class:`TrainAudioPipeline`; its epoch
    is set here so every epoch draws new crops (and, with ``rr_redraw: epoch``, new RR permutations).
    """

    def __init__(self, *args, train_audio: training.TrainAudioPipeline, **kwargs):
        super().__init__(*args, **kwargs)
        self.train_audio = train_audio
        self.counts = [0, 0]  # this process's training samples and failed reads in the epoch
        self.epoch_seconds: list[float] = []  # this process's finished epochs (training + dev)
        self.train_stats: dict = {}
        self.dev_eer: training.DevEER | None = None  # select_by: dev_eer

    def _wrap_distributed(self):
        if not (self.distributed_launch and self.device_type == "cpu"):
            return super()._wrap_distributed()
        # SpeechBrain 1.1.2 converts every module to SyncBatchNorm, which torch refuses on CPU, and no
        # run option turns that off (Brain._wrap_distributed always converts under torchrun); on CPU (gloo)
        # wrap without it: DDP sends rank 0's BatchNorm buffers at each forward.
        for name, module in self.modules.items():
            if any(p.requires_grad for p in module.parameters()):
                self.modules[name] = torch.nn.parallel.DistributedDataParallel(
                    module, device_ids=None, find_unused_parameters=self.find_unused_parameters
                )

    def compute_forward(self, batch, stage):
        batch = batch.to(self.device)
        wavs, lens = batch.sig
        if stage == sb.Stage.TRAIN:
            # failed_reads: rows dropped because their audio could not be read (SkipFailedReads)
            self.counts[0] += wavs.shape[0]
            self.counts[1] += getattr(batch, "failed_reads", 0)
        # During the first init_freeze_epochs training epochs the embedding model is frozen: no gradient
        # and eval mode (its BatchNorm statistics kept), so only the new classifier head learns. fit sets
        # the modules' mode again at each stage's start.
        frozen = stage == sb.Stage.TRAIN and self.hparams.epoch_counter.current <= getattr(
            self.hparams, "init_freeze_epochs", 0
        )
        if frozen:
            self.modules.embedding_model.eval()
        with torch.set_grad_enabled(torch.is_grad_enabled() and not frozen):
            embed_batch = getattr(self.hparams, "embed_batch", None)
            if embed_batch is not None:  # a model on waveforms (ecapa_ssl): the YAML's hook embeds the rows
                epoch = self.hparams.epoch_counter.current if stage == sb.Stage.TRAIN else 0
                embeddings = embed_batch(self.modules, wavs, lens, batch=batch, epoch=epoch)
            else:
                feats = self.modules.compute_features(wavs)
                feats = self.modules.mean_var_norm(feats, lens)
                if stage == sb.Stage.TRAIN and self.hparams.specaug:
                    feats, lens = self.hparams.spec_augment(feats, lens)
                embeddings = self.modules.embedding_model(feats, lens)
        if stage == sb.Stage.VALID and self.dev_eer is not None:  # select_by: dev_eer
            self.dev_eer.add(batch.id, embeddings)
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
            self.counts = [0, 0]
            self.started = time.time()
            # A run resumed from a mid-epoch checkpoint starts after the batches already done.
            self.resumed_at_batch = self.step
        else:
            self.error_metrics = self.hparams.error_stats()

    def on_stage_end(self, stage, stage_loss, epoch=None):
        if stage == sb.Stage.TRAIN:  # counts summed over processes, logged; SegReConcat's restart
            counted = self.train_audio if self.train_audio.augmenter is not None else None
            seconds = time.time() - self.started
            self.train_stats = training.train_stats(
                epoch, stage_loss, self.counts, seconds, self.resumed_at_batch, counted, self.device
            )
            return
        if stage != sb.Stage.VALID:
            return
        loss = float(ddp_broadcast(stage_loss))  # rank 0's: every rank takes the same stopping decision
        valid_stats = {"loss": loss, "error_rate": float(self.error_metrics.summarize("average"))}
        if self.dev_eer is not None:  # select_by: dev_eer
            valid_stats["dev_eer"] = float(ddp_broadcast(self.dev_eer.eer()))
        key = training.checkpoint_key(getattr(self.hparams, "select_by", None))
        lr = self.optimizer.param_groups[0]["lr"]
        counter = self.hparams.epoch_counter
        # update_metric first: the counter (a recoverable) is saved with its new patience state.
        counter.update_metric(valid_stats[key])
        self.checkpointer.save_and_keep_only(meta={"loss": loss, key: valid_stats[key]}, min_keys=[key])
        self.hparams.train_logger.log_stats(
            stats_meta={"epoch": epoch, "lr": lr}, train_stats=self.train_stats, valid_stats=valid_stats
        )
        if if_main_process():
            output_folder = self.hparams.output_folder
            record = training.log_epoch(output_folder, epoch, lr, self.train_stats, valid_stats, counter)
            self.epoch_seconds.append(time.time() - self.started)
            report_progress(training.epoch_line(record, counter, self.epoch_seconds))


def dataio_prep(hparams, train_audio: training.TrainAudioPipeline, train_rows):
    """Datasets (train: read -> SegReConcat -> crop; dev: fixed chunks) and the speaker encoder.

    ``train_rows``: the training manifest (:func:`~segreconcat_aug.training.manifest.read_manifest`); the
    training set is a :class:`ManifestDataset` of it (arrays, shared by forked workers without copies).
    """
    train_data = training.ManifestDataset(train_rows)
    valid_data = sb.dataio.dataset.DynamicItemDataset.from_csv(hparams["valid_annotation"])
    if len(valid_data) == 0:
        raise training.DataPrepError(
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
    sb.dataio.dataset.add_dynamic_item([valid_data], training.chunk_audio_pipeline)
    sb.dataio.dataset.add_dynamic_item([train_data, valid_data], label_pipeline)
    # wav: the row's file, for a model that reads it again (ecapa_ssl's ssl_input: file_window)
    sb.dataio.dataset.set_output_keys([train_data, valid_data], ["id", "sig", "spk_id_encoded", "wav"])

    speakers = train_rows.distinct("spk_id")
    os.makedirs(hparams["save_folder"], exist_ok=True)
    encoder_file = os.path.join(hparams["save_folder"], "label_encoder.txt")
    if if_main_process() and not training.has_checkpoints(hparams["save_folder"]):
        # No checkpoint uses it (a run that stopped before training): made afresh for this data.
        Path(encoder_file).unlink(missing_ok=True)
    label_encoder.load_or_create(path=encoder_file, from_iterables=[speakers])
    if set(label_encoder.lab2ind) != set(speakers):
        raise training.DataPrepError(
            f"{encoder_file} lists other speakers than {hparams['train_annotation']}: this save folder "
            "belongs to a run on other data; use another output_folder"
        )
    return train_data, valid_data, label_encoder


def derive_overrides(hparams_file, values, stated) -> dict:
    """What a run derives from its options, under the user's own: a preset's values and the
    ``init_from`` folder's model sizes, and a pooled SegReConcat run's other systems' caches."""
    derived = training.training_overrides(hparams_file, values, stated)

    def resolve(system):  # the YAML's values with another pooled system as ``system``
        return validate_hparams_file(
            hparams_file, {**derived, **stated, "system": system}, TrainingRunOptions
        )

    return {**derived, **training.pooled_cache_overrides(values, stated, resolve)}


def manifest_overrides(values, train_rows) -> dict:
    """The classifier's size (the manifest's speakers) and, with ``step_size_epochs``, the cyclic
    half-period in optimizer steps of this training set."""
    derived = {"n_speakers": len(train_rows.distinct("spk_id"))}
    if values.get("step_size_epochs"):
        steps = len(train_rows) // (values["batch_size"] * int(os.environ.get("WORLD_SIZE", 1)))
        derived["step_size"] = max(1, round(values["step_size_epochs"] * max(1, steps)))
    logger.info("set from the training manifest: %s", derived)
    return derived


def main(argv=None) -> SpeakerBrain:
    # Every option value, the output folder's settings and the inputs are checked before anything is written.
    hparams_file, run_opts, overrides, values = check_options(
        argv,
        TrainingRunOptions,
        new_folders=("output_folder", "save_folder"),
        check=training.check_before_training,
        derive=derive_overrides,
    )
    hold_output_folder(values["output_folder"], "a training run")  # one trainer per folder
    sb.utils.distributed.ddp_init_group(run_opts)
    sb.create_experiment_directory(values["output_folder"], overrides=overrides)
    save_hparams_as_run(values["output_folder"], hparams_file, overrides)
    if values.get("preset"):  # logged once the log file exists
        logger.info(
            "preset %s: %s (the command line's own values win)",
            values["preset"],
            training.preset_overrides(values["preset"]),
        )
    if not values["skip_prep"]:
        run_on_main(training.prepare_from_hparams, args=[values])
    train_rows = training.read_manifest(values["train_annotation"])  # ~1 M rows: one read
    overrides = {**overrides, **manifest_overrides(values, train_rows)}
    hparams = {**values, **load_hparams(hparams_file, overrides)}  # the one load: it builds the model

    augmenter, train_audio = training.build_train_audio(hparams)
    train_data, valid_data, _ = dataio_prep(hparams, train_audio, train_rows)
    loader_opts = hparams["train_dataloader_opts"]
    processes = int(os.environ.get("WORLD_SIZE", 1))
    if loader_opts.get("drop_last") and len(train_data) // processes < loader_opts["batch_size"]:
        raise training.DataPrepError(
            f"{hparams['train_annotation']}: {len(train_data)} training rows give no full batch of "
            f"{loader_opts['batch_size']} per process ({processes} process(es)); lower batch_size"
        )
    if augmenter is not None:
        # Before any training: a missing alignment (or AR/SR order) stops here under the default policy.
        augmenter.check_coverage(training.coverage_keys(train_rows, augmenter))

    stop_removing_new_folders()  # the inputs are checked: from here on the output folder holds work
    training.warm_up_before_workers(train_data)
    if hparams.get("init_from") and not training.has_checkpoints(hparams["save_folder"]):
        # A new fine-tuning: the folder's weights (a resumed one: its checkpoints, which the Brain recovers).
        training.load_init_weights(
            hparams["init_from"], hparams["modules"], training=hparams_file, trusted=hparams["trusted"]
        )
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
    )
    if hparams.get("select_by") == "dev_eer":
        brain.dev_eer = training.DevEER.from_manifest(hparams["valid_annotation"], hparams["seed"])
    try:
        brain.fit(
            brain.hparams.epoch_counter,
            train_data,
            valid_data,
            # A row whose audio fails to read (the file changed after the check) is dropped and counted.
            train_loader_kwargs={
                "collate_fn": training.SkipFailedReads(),
                **hparams["train_dataloader_opts"],
            },
            valid_loader_kwargs=hparams["valid_dataloader_opts"],
            # A bar within each epoch on an interactive console; none in logs and pipes (grid runs).
            progressbar=not brain.noprogressbar and sys.stderr.isatty(),
        )
    finally:
        gc.unfreeze()  # a caller running main() again (the tests) collects this run's objects
    run_on_main(export_best_model, args=[hparams, hparams_file, overrides])
    if if_main_process():  # the flags that say the EER may overstate privacy, beside the export
        report_progress(training.record_convergence(hparams))
    if hparams.get("evaluate_after_training", False):
        # The last stage: score the exported model as the challenge does (recipes/evaluate.py).
        hold_output_folder(evaluation_folder(hparams), "an evaluation")
        evaluate_system(hparams, run_opts)  # every rank: they share the embedding extraction
    return brain


if __name__ == "__main__":
    run_main(main)

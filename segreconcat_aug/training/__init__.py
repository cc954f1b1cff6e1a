"""Training the attacker: one system's data preparation (:mod:`.data_prep`), manifests shared by
forked workers (:mod:`.manifest`), SpeechBrain's audio pipelines (:mod:`.pipeline`) and what the
training recipe does around its Brain: SegReConcat built from the YAML (:mod:`.augmenter`), the
run's settings (:mod:`.run_settings`) and the epochs' progress (:mod:`.progress`). The export, and
the speaker-model folders a fine-tuning starts from, are the models wing's (:mod:`segreconcat_aug.models`).

May import the core, ``data``, ``align``, ``method`` and ``models``; never ``evaluation``.
"""

from speechbrain.utils.checkpoints import register_checkpoint_hooks
from speechbrain.utils.epoch_loop import EpochCounterWithStopper

# SpeechBrain 1.1.2 registers checkpoint hooks for EpochCounter but not for its subclass
# EpochCounterWithStopper, so the checkpointer saves only the epoch number and a resumed run
# forgets its best dev loss and patience. Registering the subclass makes its own _save/_recover
# (epoch, best epoch, best score, should_stop) the ones used, wherever the training wing is imported
# (the export reads the epoch from that file).
register_checkpoint_hooks(EpochCounterWithStopper)

# The training recipe's API (recipes/train.py).
from ..models.export import checkpoint_key  # noqa: E402
from .augmenter import build_train_audio, warm_up_before_workers  # noqa: E402
from .data_prep import DataPrepError, prepare_from_hparams  # noqa: E402
from .dev_eer import DevEER  # noqa: E402
from .init_from import load_init_weights, training_overrides  # noqa: E402
from .manifest import ManifestDataset, read_manifest  # noqa: E402
from .pipeline import SkipFailedReads, TrainAudioPipeline, chunk_audio_pipeline  # noqa: E402
from .pooled import coverage_keys, pooled_cache_overrides  # noqa: E402
from .presets import preset_overrides  # noqa: E402
from .progress import epoch_line, log_epoch, record_convergence, train_stats  # noqa: E402
from .run_settings import check_before_training, has_checkpoints  # noqa: E402

__all__ = [
    "DataPrepError",
    "DevEER",
    "ManifestDataset",
    "SkipFailedReads",
    "TrainAudioPipeline",
    "build_train_audio",
    "check_before_training",
    "checkpoint_key",
    "chunk_audio_pipeline",
    "coverage_keys",
    "epoch_line",
    "has_checkpoints",
    "load_init_weights",
    "log_epoch",
    "pooled_cache_overrides",
    "prepare_from_hparams",
    "preset_overrides",
    "read_manifest",
    "record_convergence",
    "train_stats",
    "training_overrides",
    "warm_up_before_workers",
]

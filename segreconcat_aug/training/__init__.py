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

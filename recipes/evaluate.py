#!/usr/bin/env python3
"""Score a trained attacker on its system's dev and test trials, as its protocol's challenge does.

Usage (the same YAML and overrides as training, so the same output folder is found)::

    python recipes/evaluate.py hparams/ecapa_segreconcat.yaml --data_folder=<VPAC root> --system=T8-5
    # the same attacker on VPC 2026-style pooled lists (recipes/make_mixed_trials.py), in its own folder:
    python recipes/evaluate.py hparams/ecapa_segreconcat.yaml --data_folder=<VPAC root> --system=T8-5 \
        --protocol=vpc2026-track1 --eval_folder=results/T8-5/<configuration>/eval-vpc2026
    # several GPUs share the embedding extraction; rank 0 scores and writes (docs/scale.md)
    torchrun --nproc_per_node=4 recipes/evaluate.py hparams/ecapa_segreconcat.yaml --data_folder=<VPAC root> --system=T8-5

The ``eval_*`` options are the keys of the evaluation YAML the training YAML names (``eval_hparams``:
hparams/evaluate.yaml), given on this command line as its own. Loads the model folder
(``eval_model_folder``, default ``<export_folder>``: the best-dev-loss model
that ``recipes/train.py`` exports; or any SpeechBrain speaker-model folder, such as a copy of
``speechbrain/spkrec-ecapa-voxceleb`` or a VPC 2024 ASV model) through its ``hyperparams.yaml`` with
SpeechBrain's ``EncoderClassifier`` (no model sizes to restate; an old export without one goes into
the YAML's own ``embedding_model``), embeds every enrollment and trial utterance whole
(cached under ``<eval_folder>/embeddings/``, so a rerun only rescores), scores
trials by cosine against averaged enrollment embeddings and writes to
``<eval_folder>`` (default ``<output_folder>/eval``): ``scores/*.txt``,
``results.csv``, ``results.md`` (the paper's Table 2 columns), ``results.json``
and ``det.png``; with ``eval_privacy`` (the default) also the privacy metrics
beyond the EER with their intervals (linkability, ZEBRA, Cllr, identification,
pi_link, Singling Out, EER per speaker) in those files, ``per_speaker_eer.csv``
and ``privacy.png``. docs/evaluation.md describes every option.
"""

from __future__ import annotations

import speechbrain as sb

from segreconcat_aug.cli import (
    hold_output_folder,
    load_recipe_hparams,
    note_new_folder,
    run_main,
    save_hparams_as_run,
)
from segreconcat_aug.evaluation.system import (
    EVAL_KEYS,
    check_evaluation_folder,
    evaluate_system,
    evaluation_folder,
    load_evaluation_model,
)
from segreconcat_aug.options import TrainingOptions
from segreconcat_aug.training import training_overrides


def main(argv=None):
    hparams_file, run_opts, overrides, hparams = load_recipe_hparams(
        argv,
        TrainingOptions,
        configure_logging=False,
        new_folders=("output_folder", "save_folder"),
        derive=training_overrides,  # the training's YAML as the run had it (preset, init_from's sizes)
    )
    eval_folder = evaluation_folder(hparams)
    note_new_folder(eval_folder)  # removed again on a user error, if this run makes it
    check_evaluation_folder(hparams)  # before anything is written there
    hold_output_folder(eval_folder, "an evaluation")  # one evaluation per folder (rank 0's under torchrun)
    sb.utils.distributed.ddp_init_group(run_opts)  # torchrun's ranks share the embedding extraction
    # A missing, damaged or mismatched model stops before eval/ is made (SpeechBrain's links go in eval/model).
    model = load_evaluation_model(hparams, run_opts, stated=overrides)
    # The evaluation's values with the training YAML's: what this folder was scored with.
    evaluation = {key: hparams[key] for key in EVAL_KEYS}
    sb.create_experiment_directory(eval_folder)
    save_hparams_as_run(eval_folder, hparams_file, {**overrides, **evaluation})
    results = evaluate_system(hparams, run_opts, model=model)
    if results is not None:  # rank 0's
        print((eval_folder / "results.md").read_text(encoding="utf-8"))
    return results


if __name__ == "__main__":
    run_main(main)

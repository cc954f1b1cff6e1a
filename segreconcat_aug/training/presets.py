"""Named training presets: the fine-tuning schedules of the literature, as overrides of the training YAML.

A preset (``--preset=<name>``) is a set of option values applied UNDER the user's own overrides (a key
given on the command line wins) and logged; each cites the file its values come from. They are options
beyond the paper, which trains from scratch with the VPC 2024 baseline's schedule (no preset).

``step_size_epochs`` sets the cyclic learning rate's half-period in epochs of optimizer steps;
``recipes/train.py`` turns it into ``step_size`` once it knows the training set's size.

>>> sorted(PRESETS)
['dast-stage3', 'voxattack-finetune', 'vpc2026-track1', 'vpc2026-track2-de', 'vpc2026-track2-en', 'vpc2026-track2-es', 'vpc2026-track2-fr']
>>> preset_overrides(None)
{}
>>> preset_overrides("voxattack-finetune")["optimizer"]
'adamw'
"""

from __future__ import annotations

import torch

from ..errors import UserError

#: VoxATtack (ahmad-aloradi/VoxATtack at 9fe67f1): configs/experiment/vpc/voxattack.yaml (lr 1e-4 :86,
#: weight decay 1e-5 :87, CyclicLR 1e-6..lr :75-77 with a half-period of 2 epochs of batches :78, "full
#: cycle every 4 epochs", stepped per batch :81; AAM margin 0.15 scale 30 :69-71; crops up to 10 s :35;
#: batch 32 :41; max 25 epochs :19) and configs/module/vpc.yaml:68 (torch.optim.AdamW); patience 10.
VOXATTACK_FINETUNE = {
    "optimizer": "adamw",
    "lr": 1.0e-4,
    "base_lr": 1.0e-6,
    "weight_decay": 1.0e-5,
    "step_size_epochs": 2,
    "aam_margin": 0.15,
    "aam_scale": 30,
    "sentence_len": 10.0,
    "batch_size": 32,
    "number_of_epochs": 25,
    "patience": 10,
}


#: VPC 2026 toolkit (Voice-Privacy-Challenge-2026 at e6810a4): hparams/train_ecapa_ssl_tdnn_small.yaml
#: (AdamW weight decay 0.01, CyclicLR base 1e-8 step 65000, AAM 0.2 / 30, 3 s crops) with
#: configs/track1/eval_post.yaml (lr 0.01, 2 epochs, batch 32) and configs/track2/eval_post_<lang>.yaml
#: (4 epochs for en, 10 for de, fr, es). The toolkit trains the fixed number of epochs: early stopping
#: is kept from ending it sooner (warmup = the epochs).
def _vpc2026(epochs: int) -> dict:
    return {
        "optimizer": "adamw",
        "lr": 0.01,
        "base_lr": 1.0e-8,
        "step_size": 65000,
        "weight_decay": 0.01,
        "aam_margin": 0.2,
        "aam_scale": 30,
        "sentence_len": 3.0,
        "batch_size": 32,
        "number_of_epochs": epochs,
        "warmup": epochs,
    }


#: DAST's Stage III (monkeyDarefeen/DAST at 097be15; the paper, arXiv 2603.12840, could not be read here, so
#: every value is the repository's, which has one schedule for all stages): training/training_config.yaml
#: (optimizer_type adam :31, lr 0.01 :33, epochs 7 :34, batch_size 64 :35), training/dast_training.py:423-428
#: (Adam, weight decay 2e-6) and training/hparams/train_ecapa_tdnn_small.yaml (CyclicLR base 1e-8 :35, step
#: 65000 :37, 3 s crops :39, AAM 0.2 / 30 :94-95). All epochs run (checkpoints kept by dev error,
#: dast_training.py:527-532). Not carried: its gradient accumulation over 8 batches (dast_training.py:712).
DAST_STAGE3 = {
    "optimizer": "adam",
    "lr": 0.01,
    "base_lr": 1.0e-8,
    "step_size": 65000,
    "weight_decay": 2.0e-6,
    "aam_margin": 0.2,
    "aam_scale": 30,
    "sentence_len": 3.0,
    "batch_size": 64,
    "number_of_epochs": 7,
    "warmup": 7,
}

PRESETS: dict[str, dict] = {
    "dast-stage3": DAST_STAGE3,
    "voxattack-finetune": VOXATTACK_FINETUNE,
    "vpc2026-track1": _vpc2026(2),
    "vpc2026-track2-en": _vpc2026(4),
    "vpc2026-track2-de": _vpc2026(10),
    "vpc2026-track2-fr": _vpc2026(10),
    "vpc2026-track2-es": _vpc2026(10),
}

#: ``optimizer`` key -> the torch class (the training YAML's ``opt_class`` calls :func:`make_optimizer`).
OPTIMIZERS = {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW}


class PresetError(UserError, ValueError):
    """An unknown preset, or one that sets keys the training YAML does not have."""


def preset_overrides(name: str | None, yaml_keys=None) -> dict:
    """The option values of preset ``name`` (``{}`` for None); ``yaml_keys``: the YAML's keys, which must hold them."""
    if name is None:
        return {}
    if name not in PRESETS:
        raise PresetError(f"preset: unknown {name!r}; known: {', '.join(sorted(PRESETS))} (or null)")
    values = dict(PRESETS[name])
    if yaml_keys is not None:
        missing = sorted(set(values) - set(yaml_keys))
        if missing:
            raise PresetError(
                f"preset: {name} sets {', '.join(missing)}, which this training YAML does not have; use "
                "hparams/ecapa_segreconcat.yaml or hparams/ecapa_ssl_segreconcat.yaml"
            )
    return values


def make_optimizer(params, *, name: str = "adam", lr: float, weight_decay: float = 0.0):
    """The training YAML's ``optimizer`` (``adam``: the paper's, the VPC 2024 baseline's; ``adamw``)."""
    return OPTIMIZERS[name](params, lr=lr, weight_decay=weight_decay)

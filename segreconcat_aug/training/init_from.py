"""Fine-tuning from a speaker-model folder (``init_from``), and the training presets, applied to a run.

:func:`training_overrides` is what a recipe derives from the user's option values before the YAML is
loaded, under the user's own overrides: the preset's values (:mod:`.presets`), then the model sizes of
the ``init_from`` folder and the values its family sets (e.g. ecapa_ssl's ``wavlm_checkpoint``), so the
training builds the folder's model. A size the user stated that contradicts the folder is refused in
one line. :func:`load_init_weights` then loads the folder's weights into the built modules, held to the
folder's own model (:func:`segreconcat_aug.models.pretrained.check_training_model`); the classifier head
stays new, sized for the training speakers. A run that has checkpoints resumes from them instead:
the folder then only gives the sizes. The folder's YAML and checkpoints are read as untrusted
(:mod:`segreconcat_aug.models.trust`) unless the run's ``trusted`` is True.
"""

from __future__ import annotations

import logging
from pathlib import Path

from ..models.pretrained import PretrainedModelError, check_training_model, read_pretrained
from ..models.registry import PretrainedModel
from .presets import PresetError, preset_overrides

logger = logging.getLogger(__name__)

#: An embedding model's constructor argument -> the training YAML key that sets it.
SIZE_KEYS = {
    "input_size": "n_mels",
    "channels": "channels",
    "kernel_sizes": "kernel_sizes",
    "dilations": "dilations",
    "attention_channels": "attention_channels",
    "lin_neurons": "lin_neurons",
    "se_channels": "se_channels",
    "res2net_scale": "res2net_scale",
}

_READ: dict[tuple, tuple[bool, PretrainedModel]] = {}  # one read per folder state and process, and its trust


def read_init_from(folder, *, trusted: bool = False) -> PretrainedModel:
    """:func:`read_pretrained` of ``folder``, read once per process while its files stay as they are (a
    read the user trusted serves the process's later reads of the same files)."""
    folder = Path(folder)
    key = (
        (str(folder.resolve()),)
        + tuple(
            (path.name, path.stat().st_size, path.stat().st_mtime_ns)
            for path in sorted(folder.glob("*"))
            if path.is_file()
        )
        if folder.is_dir()
        else (str(folder),)
    )
    if key not in _READ or (trusted and not _READ[key][0]):
        _READ.clear()
        _READ[key] = (trusted, read_pretrained(folder, trusted=trusted))
    return _READ[key][1]


def folder_values(pretrained: PretrainedModel, yaml_keys) -> dict:
    """The training-YAML values the folder decides: its embedding model's sizes and its family's values."""
    values = {}
    definition = pretrained.definitions.get("embedding_model")
    if definition is not None:
        for argument, key in SIZE_KEYS.items():
            if argument in definition.kwargs and key in yaml_keys:
                value = definition.kwargs[argument]
                values[key] = list(value) if isinstance(value, (list, tuple)) else value
    values.update({key: value for key, value in pretrained.hparams.items() if key in yaml_keys})
    return values


def training_overrides(hparams_file, values, stated) -> dict:
    """The overrides a run derives from its options (``values``: the checked values; ``stated``: the
    user's overrides): the preset's, then the ``init_from`` folder's. Raises one-line errors."""
    derived = preset_overrides(values.get("preset"), values.keys()) if "preset" in values else {}
    if "step_size" in stated and "step_size_epochs" in values:
        if "step_size_epochs" in stated and stated["step_size_epochs"] is not None:
            raise PresetError(
                "--step_size and --step_size_epochs both set the cyclic half-period: give one of them"
            )
        derived["step_size_epochs"] = None  # the command line's step_size wins over a half-period in epochs
    if "init_from" in stated and not stated["init_from"]:
        raise PretrainedModelError(
            "--init_from is empty: give a speaker-model folder, or leave --init_from out to train from scratch"
        )
    folder = values.get("init_from")
    if not folder:
        return derived
    epochs = {**values, **derived, **stated}
    if epochs.get("init_freeze_epochs", 0) >= epochs.get("number_of_epochs", 1):
        raise PretrainedModelError(
            f"--init_freeze_epochs={epochs['init_freeze_epochs']} freezes every one of the "
            f"{epochs['number_of_epochs']} epochs (number_of_epochs): the export would be {folder}'s model "
            "unchanged; give init_freeze_epochs below number_of_epochs"
        )
    pretrained = read_init_from(folder, trusted=bool(values.get("trusted", False)))
    check_training_family(pretrained, folder, hparams_file, values)
    from_folder = folder_values(pretrained, values.keys())
    for key, value in from_folder.items():
        if key in stated and _plain(stated[key]) != _plain(value):
            raise PretrainedModelError(
                f"--{key}={stated[key]} contradicts init_from: {folder}, whose model has {key} {value}; "
                f"leave --{key} out (the folder decides the model's sizes)"
            )
    logger.info(
        "init_from %s (%s family): the model's sizes from the folder: %s",
        folder,
        pretrained.family,
        from_folder,
    )
    return {**derived, **from_folder}


def check_training_family(pretrained: PretrainedModel, folder, hparams_file, values) -> None:
    """The training YAML builds the folder's kind of model: a WavLM+ECAPA (``ecapa_ssl``) YAML (it has
    ``wavlm_checkpoint``) takes an ecapa_ssl folder, an ECAPA-TDNN YAML any other."""
    ssl_yaml = "wavlm_checkpoint" in values
    if ssl_yaml and pretrained.family != "ecapa_ssl":
        raise PretrainedModelError(
            f"init_from: {folder} holds a model of the {pretrained.family} family, and {hparams_file} (WavLM+ECAPA) needs an "
            "ecapa_ssl folder (the challenge's exp/asv_ssl); train this one with hparams/ecapa_segreconcat.yaml"
        )
    if not ssl_yaml and pretrained.family == "ecapa_ssl":
        raise PretrainedModelError(
            f"init_from: {folder} holds an ecapa_ssl model (WavLM+ECAPA), which {hparams_file} does not "
            "build; train it with hparams/ecapa_ssl_segreconcat.yaml"
        )


def _plain(value):
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else value


def load_init_weights(folder, modules, *, training, trusted: bool = False) -> PretrainedModel:
    """Load the ``init_from`` folder's weights into the training's ``modules`` (a new run, no checkpoint)."""
    pretrained = read_init_from(folder, trusted=trusted)
    check_training_model(pretrained, modules, training=str(training))
    logger.info(
        "init_from %s: %s loaded (%s); the classifier head is new",
        folder,
        ", ".join(pretrained.states),
        ", ".join(str(path) for path in pretrained.files.values()),
    )
    return pretrained

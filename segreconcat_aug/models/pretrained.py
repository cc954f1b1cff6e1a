"""A speaker-model folder read for fine-tuning (``init_from``): its weights, and what it builds.

The folder's family reads it; a folder whose files do not belong together is refused here, and
:func:`check_training_model` holds the training's modules to the folder's on a probe signal.
"""

from __future__ import annotations

import dataclasses
import io
from pathlib import Path

import numpy as np
import torch

from .export import detached
from .folder import (
    EMBEDDING_MODULES,
    MODEL_CHECKPOINT,
    MODEL_HPARAMS,
    ModelFolderError,
    ecapa_sizes,
    read_checkpoint,
    read_spec,
    sizes_text,
    speaker_model_files,
)
from .registry import GENERIC, Definition, ModelFamily, PretrainedModel, family_of, register_model_family

#: Seconds of the seeded probe signal the training's modules must process as the folder's do.
PROBE_SECONDS = 1.0
PROBE_TOLERANCE = 1e-4  # relative: the same modules and weights give the same digits on one machine


class PretrainedModelError(ModelFolderError):
    """``init_from`` names a folder that cannot be fine-tuned, or one the training's model does not fit."""


def read_pretrained(folder, *, key: str = "init_from", trusted: bool = False) -> PretrainedModel:
    """The model of a speaker-model folder, read by its family; ``key`` names the option in messages."""
    folder = Path(folder)
    if not folder.exists():
        raise PretrainedModelError(
            f"{key}: {folder} does not exist (give the speaker-model folder to start from)"
        )
    if not folder.is_dir():
        parent = f" (--{key}={folder.parent})" if folder.name in (MODEL_HPARAMS, MODEL_CHECKPOINT) else ""
        raise PretrainedModelError(
            f"{key}: {folder} is a file, not a speaker-model folder: give the folder that holds "
            f"{MODEL_HPARAMS} and {MODEL_CHECKPOINT}{parent}"
        )
    yaml_path = folder / MODEL_HPARAMS
    spec = read_spec(yaml_path, folder, trusted=trusted)[0] if yaml_path.is_file() else None
    family = family_of(folder, spec)
    if family is None:
        listed = ", ".join(sorted(path.name for path in folder.iterdir())[:6]) or "nothing"
        raise PretrainedModelError(
            f"{folder}: not a speaker-model folder: no {MODEL_HPARAMS} and no model family recognizes its files "
            f"({listed}); {key} names a copy of speechbrain/spkrec-ecapa-voxceleb, an export of recipes/train.py "
            "or a VPC 2024 ASV model folder"
        )
    return dataclasses.replace(family.read(folder, spec, trusted=trusted), family=family.name)


def read_speechbrain_folder(folder: Path, spec, *, trusted: bool = False) -> PretrainedModel:
    """A SpeechBrain speaker-model folder with ``hyperparams.yaml``: checked, its embedding model's
    weights read and fitted to the model its YAML builds (the ``family`` is set by the caller)."""
    folder = Path(folder)
    yaml_path = folder / MODEL_HPARAMS
    files = speaker_model_files(spec, folder, yaml_path)
    definitions = {name: definition(spec, name, yaml_path) for name in EMBEDDING_MODULES}
    state = read_checkpoint(files["embedding_model"], trusted=trusted)
    fit_state(definitions["embedding_model"].build(), state, files["embedding_model"], yaml_path)
    rate = spec.get("sample_rate")
    if rate is None:
        rate = getattr(
            getattr(definitions["compute_features"].build(), "compute_STFT", None), "sample_rate", None
        )
    return PretrainedModel(
        folder=folder,
        family=GENERIC,
        source=yaml_path,
        states={"embedding_model": state},
        files={"embedding_model": files["embedding_model"]},
        definitions=definitions,
        sample_rate=None if rate is None else int(rate),
    )


def definition(spec, name: str, yaml_path: Path) -> Definition:
    """The module ``name`` of a resolved YAML as a :class:`Definition` (class, arguments, text)."""
    node = spec.get(name)
    tag = getattr(getattr(node, "tag", None), "value", None) or ""
    if not tag.startswith("!new:") or not isinstance(node, dict):
        raise PretrainedModelError(
            f"{yaml_path}: {name} is not a module the YAML builds with !new: and named arguments, so it "
            "cannot be rebuilt for training"
        )
    import ruamel.yaml

    yaml = ruamel.yaml.YAML()
    text = io.StringIO()
    yaml.dump({"module": detached(node)}, text)
    return Definition(tag[len("!new:") :], _plain(node), text.getvalue(), f"{yaml_path}'s {name}")


def _plain(node):
    if isinstance(node, dict):
        return {str(key): _plain(value) for key, value in node.items()}
    if isinstance(node, list):
        return [_plain(value) for value in node]
    tag = getattr(getattr(node, "tag", None), "value", None)
    return f"{tag} {node}" if tag else node


def state_problem(model: torch.nn.Module, state: dict) -> str | None:
    """Why ``state`` does not load strictly into ``model`` (None: it loads, and is loaded).

    >>> state_problem(torch.nn.Linear(2, 3), torch.nn.Linear(2, 3).state_dict()) is None
    True
    >>> state_problem(torch.nn.Linear(2, 3), torch.nn.Linear(2, 4).state_dict())[:40]
    'weight: the checkpoint has shape (4, 2),'
    """
    ours = model.state_dict()
    lost, extra = sorted(set(ours) - set(state)), sorted(set(state) - set(ours))
    if lost or extra:
        return (
            f"{len(lost)} of the model's weights are not in the checkpoint (first: {lost[:2]}), "
            f"{len(extra)} of the checkpoint's are not in the model (first: {extra[:2]})"
        )
    shapes = [key for key in ours if tuple(ours[key].shape) != tuple(state[key].shape)]
    if shapes:
        sizes = ""
        theirs_sizes, our_sizes = ecapa_sizes(state), ecapa_sizes(ours)
        if theirs_sizes != our_sizes:
            sizes = f" (the checkpoint's ECAPA-TDNN has {sizes_text(theirs_sizes)}, the model {sizes_text(our_sizes)})"
        key = shapes[0]
        return (
            f"{key}: the checkpoint has shape {tuple(state[key].shape)}, the model {tuple(ours[key].shape)}"
            f"{sizes}; {len(shapes)} weights differ in size"
        )
    model.load_state_dict(state)
    return None


def fit_state(model: torch.nn.Module, state: dict, checkpoint: Path, yaml_path: Path) -> None:
    """Load ``state`` strictly into the model ``yaml_path`` builds; one line naming both if it does not fit."""
    problem = state_problem(model, state)
    if problem:
        raise PretrainedModelError(
            f"{checkpoint}: does not fit {yaml_path}'s embedding_model: {problem}; the folder's files do not "
            "belong together"
        )


def check_training_model(pretrained: PretrainedModel, modules, *, training: str) -> None:
    """Load the folder's weights strictly into the training's ``modules``, then require the folder's
    features, normalized features and embeddings of a seeded probe signal (``training``: the YAML's name)."""
    for name, state in pretrained.states.items():
        if name not in modules:
            raise PretrainedModelError(
                f"{training}: has no module {name}, which {pretrained.source} holds weights for (the "
                f"{pretrained.family} family's modules: {', '.join(pretrained.states)})"
            )
        problem = state_problem(modules[name], state)
        if problem:
            raise PretrainedModelError(
                f"{pretrained.files.get(name, pretrained.source)}: does not fit the {name} of {training}: "
                f"{problem}; sizes that do not fit (init_from takes them from {pretrained.source}; leave out "
                "any size given on the command line)"
            )
    if not all(name in pretrained.definitions for name in EMBEDDING_MODULES):
        return  # a folder of weights only (no YAML): the training's own front end, as evaluation's fallback
    built = {name: pretrained.definitions[name].build() for name in EMBEDDING_MODULES}
    fit_state(
        built["embedding_model"], pretrained.states["embedding_model"], pretrained.source, pretrained.source
    )
    rate = pretrained.sample_rate or 16000
    wave = torch.from_numpy(
        np.random.default_rng(0).normal(0, 0.1, (2, int(PROBE_SECONDS * rate))).astype("float32")
    )
    lengths = torch.tensor([1.0, 0.75])
    theirs, ours = _probe(built, wave, lengths), _probe(modules, wave, lengths)
    for (step, a), b in zip(theirs.items(), ours.values()):
        if a.shape != b.shape or not torch.allclose(
            a, b, rtol=PROBE_TOLERANCE, atol=PROBE_TOLERANCE * a.abs().max()
        ):
            what = (
                f"shape {tuple(b.shape)} instead of {tuple(a.shape)}"
                if a.shape != b.shape
                else "other values"
            )
            raise PretrainedModelError(
                f"{training}: its {step} gives {what} than {pretrained.source}'s ({pretrained.definitions[step].cls} "
                f"{pretrained.definitions[step].kwargs}): set the training YAML's {step} as the folder's"
            )


def _probe(modules, wave, lengths) -> dict[str, torch.Tensor]:
    outputs = {}
    states = {name: modules[name].training for name in EMBEDDING_MODULES}
    try:
        with torch.no_grad():
            for name in EMBEDDING_MODULES:
                modules[name].eval()
            feats = modules["compute_features"](wave)
            outputs["compute_features"] = feats
            feats = modules["mean_var_norm"](feats, lengths)
            outputs["mean_var_norm"] = feats
            outputs["embedding_model"] = modules["embedding_model"](feats, lengths)
    finally:
        for name, training in states.items():
            modules[name].train(training)
    return outputs


register_model_family(
    ModelFamily(
        GENERIC,
        read=read_speechbrain_folder,
    )
)

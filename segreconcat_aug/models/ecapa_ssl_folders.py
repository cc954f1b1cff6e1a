"""The ``ecapa_ssl`` family: folders of the WavLM + ECAPA attacker (VPC 2026's, DAST's), read and loaded.

Its folders: the challenge's ``exp/asv_ssl/`` and DAST's (``embedding_model.ckpt`` + ``WavLM-Large.pt``),
DAST's Stage II folder (``epoch_N.ckpt`` + ``WavLM-Large.pt``) and our export (docs/attackers-ssl.md).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from pathlib import Path

from .ecapa_ssl import (
    CHALLENGE_CHECKPOINT,
    CHALLENGE_WAVLM,
    EcapaSSLOnWaves,
    WaveformPassThrough,
    from_challenge_state_dict,
    load_challenge_checkpoint,
    read_checkpoint_file,
)
from .folder import MODEL_CHECKPOINT, MODEL_HPARAMS, SpeakerModel, load_with_encoder_classifier, read_spec
from .registry import Definition, ModelFamily, PretrainedModel, register_model_family
from .state_dicts import CheckpointError

ECAPA_SSL_CLASSES = (
    "segreconcat_aug.models.ecapa_ssl.EcapaSSL",
    "segreconcat_aug.models.ecapa_ssl.EcapaSSLOnWaves",
)
SAMPLE_RATE = 16000  # WavLM-Large's and the toolkit's
#: DAST's Stage II checkpoints (monkeyDarefeen/DAST pretrained_ckpt/): ``ECAPA_TDNN_test`` state dicts, loaded
#: as ``embedding_model.ckpt`` is (training/dast_training.py:680-685: ``state_dict`` key or bare, ``module.`` dropped).
DAST_EPOCH = re.compile(r"epoch_\d+\.ckpt")


def _dast_epochs(folder: Path) -> list[Path]:
    epochs = [path for path in folder.glob("epoch_*.ckpt") if DAST_EPOCH.fullmatch(path.name)]
    return sorted(epochs, key=lambda path: int(path.stem.removeprefix("epoch_")))


def is_challenge_folder(folder: Path) -> bool:
    """The challenge's ``exp/asv_ssl/`` (also DAST's model folder): both of its files, no ``hyperparams.yaml``;
    or DAST's Stage II folder (``epoch_N.ckpt``)."""
    folder = Path(folder)
    if (folder / MODEL_HPARAMS).is_file():
        return False
    has_checkpoint = (folder / CHALLENGE_CHECKPOINT).is_file()
    return (has_checkpoint and (folder / CHALLENGE_WAVLM).is_file()) or (
        not has_checkpoint and bool(_dast_epochs(folder))
    )


def folder_checkpoint(folder: Path) -> Path:
    """The embedding weights of a challenge or DAST folder: ``embedding_model.ckpt``, else its one ``epoch_N.ckpt``
    (DAST's ``pretrained_ckpt/`` holds two: the user picks one); its ``WavLM-Large.pt`` must be there."""
    folder = Path(folder)
    checkpoint = folder / CHALLENGE_CHECKPOINT
    epochs = _dast_epochs(folder)
    if not checkpoint.is_file() and len(epochs) > 1:
        names = ", ".join(path.name for path in epochs)
        raise CheckpointError(
            f"{folder}: holds DAST's Stage II checkpoints {names}: choose one by linking it as "
            f"{CHALLENGE_CHECKPOINT} (ln -s {epochs[-1].name} {checkpoint})"
        )
    if not (folder / CHALLENGE_WAVLM).is_file():
        raise CheckpointError(
            f"{folder}: no {CHALLENGE_WAVLM} beside its checkpoint: download WavLM-Large from microsoft/unilm "
            f"(DAST's pretrained_ckpt/wavlmlarge.txt) and put it there"
        )
    return checkpoint if checkpoint.is_file() else epochs[0]


def challenge_state(path: Path, *, trusted: bool = False) -> dict:
    """The embedding weights of a challenge or DAST checkpoint under our names."""
    return from_challenge_state_dict(read_checkpoint_file(path, trusted=trusted))


def ecapa_ssl_sizes(state: Mapping, source=None) -> dict:
    """The :class:`~.ecapa_ssl.EcapaSSL` arguments a state dict (our names) was made with (dilations:
    the toolkit's, which no weight shows). ``source``: the file the state came from, for the refusal of others.

    >>> from segreconcat_aug.models.ecapa_ssl import EcapaSSL
    >>> sizes = {"channels": [16, 16, 16, 16, 48], "attention_channels": 8, "se_channels": 8, "lin_neurons": 12}
    >>> found = ecapa_ssl_sizes(EcapaSSL(**sizes).state_dict())
    >>> {key: found[key] for key in sizes} == sizes, found["res2net_scale"], found["kernel_sizes"]
    (True, 8, [5, 3, 3, 3, 1])
    """
    if "blocks.0.conv.conv.weight" not in state or "ssl_layer_sum.weights" not in state:
        plain = "; a plain ECAPA-TDNN's, it seems" if "blocks.0.conv.conv.weight" in state else ""
        raise CheckpointError(
            f"{source or 'the state dict'}: not an ecapa_ssl embedding model's weights (no "
            f"blocks.0.conv.conv.weight or weighted_sum.layer_weights{plain}); an exp/asv_ssl folder holds the "
            "challenge's WavLM + ECAPA checkpoint"
        )
    first = state["blocks.0.conv.conv.weight"]
    inner = sorted({int(key.split(".")[1]) for key in state if key.startswith("blocks.")} - {0})
    channels = [int(first.shape[0])] + [
        int(state[f"blocks.{i}.tdnn2.conv.conv.weight"].shape[0]) for i in inner
    ]
    channels.append(int(state["mfa.conv.conv.weight"].shape[0]))
    kernels = [int(first.shape[2])]
    kernels += [int(state[f"blocks.{i}.res2net_block.blocks.0.conv.conv.weight"].shape[2]) for i in inner]
    kernels.append(int(state["mfa.conv.conv.weight"].shape[2]))
    res2net = {key.split(".")[4] for key in state if key.startswith("blocks.1.res2net_block.blocks.")}
    attention = state["asp.tdnn.conv.conv.weight"]
    return {
        "input_size": int(first.shape[1]),
        "channels": channels,
        "kernel_sizes": kernels,
        "dilations": [1, 2, 3, 4, 1] if len(channels) == 5 else [1] * len(channels),
        "attention_channels": int(attention.shape[0]),
        "res2net_scale": len(res2net) + 1,
        "se_channels": int(state["blocks.1.se_block.conv1.conv.weight"].shape[0]),
        "global_context": int(attention.shape[1]) == 3 * channels[-1],
        "lin_neurons": int(state["fc.conv.weight"].shape[0]),
        "ssl_layers": int(state["ssl_layer_sum.weights"].numel()),
    }


def _export_wavlm(spec, yaml_path: Path) -> str:
    model = spec.get("embedding_model")
    path = model.get("wavlm_checkpoint") if isinstance(model, Mapping) else None
    if not path:
        raise CheckpointError(f"{yaml_path}: its embedding_model names no wavlm_checkpoint")
    if not Path(path).is_file():  # the export names its WavLM by path; the file is not copied
        raise CheckpointError(
            f"{yaml_path}: its wavlm_checkpoint {path} is not a file: put the WavLM file there, or set "
            f"wavlm_checkpoint in {yaml_path} to where it is (an absolute path)"
        )
    return str(path)


#: The arguments of :func:`ecapa_ssl_sizes` the checkpoint decides (its dilations are the toolkit's, which no
#: weight shows, and the other two follow from these): the model's definition, as an ECAPA checkpoint's.
DEFINED_SIZES = (
    "input_size",
    "channels",
    "kernel_sizes",
    "attention_channels",
    "lin_neurons",
    "se_channels",
    "res2net_scale",
)


def checkpoint_definition(state: Mapping, source=None) -> Definition:
    """The :class:`~.ecapa_ssl.EcapaSSL` a state dict (our names) fits, as :mod:`.ecapa`'s
    ``checkpoint_definition`` gives an ECAPA's (refused in one line if these are not this model's weights)."""
    sizes = ecapa_ssl_sizes(state, source)
    kwargs = {key: sizes[key] for key in DEFINED_SIZES}
    return Definition.of(ECAPA_SSL_CLASSES[0], kwargs)


def read_ecapa_ssl_folder(folder: Path, spec, *, trusted: bool = False) -> PretrainedModel:
    """What ``init_from`` takes from an ``ecapa_ssl`` folder: ``embedding_model``'s weights (our names) and
    ``wavlm_checkpoint`` (the folder's ``WavLM-Large.pt``, or the one our export names)."""
    folder = Path(folder)
    if spec is None:
        checkpoint = folder_checkpoint(folder)
        state = challenge_state(checkpoint, trusted=trusted)
        wavlm = str(folder / CHALLENGE_WAVLM)
    else:
        from .folder import read_checkpoint

        checkpoint = folder / MODEL_CHECKPOINT
        state = read_checkpoint(checkpoint, trusted=trusted)
        wavlm = _export_wavlm(spec, folder / MODEL_HPARAMS)
    return PretrainedModel(
        folder=folder,
        family="ecapa_ssl",
        source=checkpoint if spec is None else folder / MODEL_HPARAMS,
        states={"embedding_model": state},
        files={"embedding_model": checkpoint},
        definitions={
            "embedding_model": checkpoint_definition(state, checkpoint)
        },  # init_from takes its sizes
        sample_rate=SAMPLE_RATE,
        hparams={"wavlm_checkpoint": wavlm},
    )


def load_ecapa_ssl_folder(folder, hparams: dict, *, savedir, device: str = "cpu", stated=()) -> SpeakerModel:
    """Evaluation's :class:`SpeakerModel` of an ``ecapa_ssl`` folder: our export through
    ``EncoderClassifier``; the challenge's ``exp/asv_ssl/`` as :class:`EcapaSSLOnWaves` of the sizes its
    checkpoint shows, its weights loaded strictly (one line naming those that do not fit)."""
    folder = Path(folder)
    yaml_path = folder / MODEL_HPARAMS
    trusted = bool(hparams.get("trusted", False))
    if yaml_path.is_file():
        spec, overrides = read_spec(yaml_path, folder, trusted=trusted)
        wavlm = Path(_export_wavlm(spec, yaml_path))
        model = load_with_encoder_classifier(
            folder, hparams, spec, overrides, savedir=savedir, device=device, stated=stated
        )
        # The frozen WavLM decides the embeddings too: its bytes name the embedding cache with the rest.
        return dataclasses.replace(model, files=(*model.files, wavlm))
    checkpoint = folder_checkpoint(folder)
    sizes = ecapa_ssl_sizes(challenge_state(checkpoint, trusted=trusted), checkpoint)
    model = EcapaSSLOnWaves(folder / CHALLENGE_WAVLM, trusted=trusted, **sizes)
    load_challenge_checkpoint(model, checkpoint, trusted=trusted)
    shown = {key: sizes[key] for key in ("channels", "attention_channels", "lin_neurons")}
    return SpeakerModel(
        folder=folder,
        compute_features=WaveformPassThrough(),
        mean_var_norm=WaveformPassThrough(),
        embedding_model=model.to(device),
        checkpoint=checkpoint,
        loader="ecapa_ssl",
        files=(folder / CHALLENGE_WAVLM,),  # the WavLM decides the embeddings too (the cache's name)
        sizes={"sample_rate": SAMPLE_RATE, "n_mels": sizes["input_size"], **shown},
    )


register_model_family(
    ModelFamily(
        "ecapa_ssl",
        read=read_ecapa_ssl_folder,
        classes=ECAPA_SSL_CLASSES,
        recognizes=is_challenge_folder,
        load=load_ecapa_ssl_folder,
    )
)

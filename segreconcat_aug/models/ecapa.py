"""The ECAPA-TDNN family: SpeechBrain's ``ECAPA_TDNN``, the paper's attacker and ``spkrec-ecapa-voxceleb``.

A folder with ``hyperparams.yaml`` is read by the generic SpeechBrain reader; a bare
``embedding_model.ckpt`` goes into the training YAML's ECAPA-TDNN with the sizes it shows.
"""

from __future__ import annotations

import logging
from pathlib import Path

from .folder import MODEL_CHECKPOINT, MODEL_HPARAMS, ecapa_sizes, read_checkpoint
from .pretrained import PretrainedModelError, fit_state, read_speechbrain_folder
from .registry import Definition, ModelFamily, PretrainedModel, register_model_family

logger = logging.getLogger(__name__)

ECAPA_CLASS = "speechbrain.lobes.models.ECAPA_TDNN.ECAPA_TDNN"


def checkpoint_definition(state: dict) -> Definition:
    """The ECAPA-TDNN an ECAPA state dict fits: input size, channels, kernel sizes, attention, embedding size.

    >>> from speechbrain.lobes.models.ECAPA_TDNN import ECAPA_TDNN
    >>> model = ECAPA_TDNN(40, channels=[8, 8, 8, 8, 24], kernel_sizes=[5, 3, 3, 3, 1], attention_channels=4, lin_neurons=12)
    >>> found = checkpoint_definition(model.state_dict())
    >>> found.kwargs == {"input_size": 40, "channels": [8, 8, 8, 8, 24], "kernel_sizes": [5, 3, 3, 3, 1],
    ...                  "attention_channels": 4, "lin_neurons": 12}
    True
    """
    sizes = ecapa_sizes(state)
    first = state["blocks.0.conv.conv.weight"]
    kernels = [int(first.shape[2])]
    for layer in range(1, len(sizes["channels"]) - 1):
        key = f"blocks.{layer}.res2net_block.blocks.0.conv.conv.weight"
        if key in state:
            kernels.append(int(state[key].shape[2]))
    if "mfa.conv.conv.weight" in state:
        kernels.append(int(state["mfa.conv.conv.weight"].shape[2]))
    kwargs = {"input_size": int(first.shape[1]), "channels": sizes["channels"]}
    if len(kernels) == len(sizes["channels"]):
        kwargs["kernel_sizes"] = kernels
    kwargs.update({key: sizes[key] for key in ("attention_channels", "lin_neurons") if key in sizes})
    return Definition.of(ECAPA_CLASS, kwargs)


def read_ecapa_folder(folder: Path, spec, *, trusted: bool = False) -> PretrainedModel:
    """An ECAPA folder: through its ``hyperparams.yaml``, else its ``embedding_model.ckpt`` alone."""
    if spec is not None:
        return read_speechbrain_folder(folder, spec, trusted=trusted)
    checkpoint = Path(folder) / MODEL_CHECKPOINT
    state = read_checkpoint(checkpoint, trusted=trusted)
    if "blocks.0.conv.conv.weight" not in state:
        raise PretrainedModelError(
            f"{checkpoint}: not an ECAPA-TDNN checkpoint (no blocks.0.conv.conv.weight), and the folder has no "
            f"{MODEL_HPARAMS} to say what model it is"
        )
    found = checkpoint_definition(state)
    fit_state(found.build(), state, checkpoint, checkpoint)
    logger.warning(
        "%s: no %s; %s goes into the training YAML's ECAPA-TDNN with its front end (%s)",
        folder,
        MODEL_HPARAMS,
        MODEL_CHECKPOINT,
        found.kwargs,
    )
    return PretrainedModel(
        folder=Path(folder),
        family="ecapa",
        source=checkpoint,
        states={"embedding_model": state},
        files={"embedding_model": checkpoint},
        definitions={"embedding_model": found},
    )


def _bare_checkpoint(folder: Path) -> bool:
    return (folder / MODEL_CHECKPOINT).is_file() and not (folder / MODEL_HPARAMS).is_file()


register_model_family(
    ModelFamily(
        "ecapa",
        read=read_ecapa_folder,
        classes=(ECAPA_CLASS,),
        recognizes=_bare_checkpoint,
    )
)

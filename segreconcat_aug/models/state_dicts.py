"""Reading a checkpoint file and checking that its weights fit a model (never half-loaded), in one line.

>>> import torch
>>> model = {"fc.weight": torch.zeros(4, 3), "fc.bias": torch.zeros(4)}
>>> given = {"norm.weight": torch.zeros(4), "fc.weight": torch.zeros(5, 3)}
>>> describe_differences(state_dict_differences(model, given))
'missing 1 (fc.bias), unexpected 1 (norm.weight), wrong shape 1 (fc.weight: file 5x3, model 4x3)'
"""

from __future__ import annotations

import pickle
import re
import zipfile
from collections.abc import Mapping
from pathlib import Path

import torch

from ..errors import MissingInputError, UserError

#: How many names of each kind a refusal lists before "and N more".
NAMES_SHOWN = 4


class CheckpointError(UserError, ValueError):
    """A checkpoint file cannot be read as one (not a PyTorch file, or not holding weights)."""


class CheckpointMismatchError(CheckpointError):
    """A checkpoint's weights do not fit the model: the message names the parameters that differ."""


def _shape(value) -> str:
    return "x".join(str(size) for size in value.shape) or "scalar"


def state_dict_differences(model: Mapping, given: Mapping) -> dict[str, list[str]]:
    """The parameters of ``given`` (a file's) that differ from ``model``'s (both ``name -> tensor``)."""
    # In the model's order (the file's for its extra names): the first layers come first.
    missing = [name for name in model if name not in given]
    unexpected = [name for name in given if name not in model]
    wrong = [
        f"{name}: file {_shape(given[name])}, model {_shape(model[name])}"
        for name in model
        if name in given and tuple(model[name].shape) != tuple(given[name].shape)
    ]
    return {"missing": missing, "unexpected": unexpected, "wrong shape": wrong}


def describe_differences(differences: Mapping[str, list[str]], shown: int = NAMES_SHOWN) -> str:
    """``missing 2 (a, b), wrong shape 1 (c: file 3, model 4)``: each kind with its first names."""
    parts = []
    for kind, names in differences.items():
        if names:
            listed = ", ".join(names[:shown]) + (
                f" and {len(names) - shown} more" if len(names) > shown else ""
            )
            parts.append(f"{kind} {len(names)} ({listed})")
    return ", ".join(parts)


def check_fits(model: Mapping, given: Mapping, *, source, what: str, fix: str) -> None:
    """Raise :class:`CheckpointMismatchError` (one line) unless ``given`` has exactly ``model``'s shapes."""
    differences = state_dict_differences(model, given)
    if any(differences.values()):
        raise CheckpointMismatchError(
            f"{source}: does not fit {what}: {describe_differences(differences)}; {fix}"
        )


def read_torch_file(path, *, what: str, trusted: bool = False, again: str = "copy it again from its source"):
    """``torch.load`` on the CPU with PyTorch's safe unpickler (``trusted``: the full one), each failure
    one line naming the file; ``again``: how to get a damaged file again."""
    path = Path(path)
    if not path.is_file():
        raise MissingInputError(f"{path}: no such file ({what})")
    try:
        return torch.load(path, map_location="cpu", weights_only=not trusted)
    except pickle.UnpicklingError as error:
        with open(path, "rb") as handle:  # a zip (torch.save) or a pickle (PROTO opcode) at all?
            pickled = handle.read(2)[:1] in (b"P", b"\x80")
        if not pickled or "Weights only load failed" not in str(error):
            raise CheckpointError(f"{path}: not a PyTorch checkpoint ({what}): {_reason(error)}") from None
        found = re.search(r"(?:Unsupported global: GLOBAL|unsupported GLOBAL) ([\w.]+)", str(error))
        held = f"a Python object ({found.group(1)})" if found else f"pickled data ({_reason(error)})"
        raise CheckpointError(
            f"{path}: {what} holds {held} beyond tensors and plain values: unpickling it may run code, which "
            "only --trusted=True allows (if you trust the file's source); else save its state dict alone "
            "(torch.save(model.state_dict(), ...))"
        ) from None
    except KeyError as error:  # PyTorch's reader of old-format files, on bytes that are no pickle
        raise CheckpointError(f"{path}: not a PyTorch checkpoint ({what}): no pickle ({error!r})") from None
    except (RuntimeError, EOFError, zipfile.BadZipFile, OSError) as error:
        raise CheckpointError(
            f"{path}: cannot be read ({what}), the file is damaged or cut ({_reason(error)}); {again}"
        ) from None


def _reason(error: BaseException) -> str:
    """The line of PyTorch's message that says what is wrong (its advice about weights_only left out)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    for line in lines:
        if any(word in line for word in ("Unsupported", "invalid load key", "PytorchStreamReader", "Errno")):
            return line.split(". This is an internal")[0][:200]
    return (lines[0] if lines else type(error).__name__)[:200]


def tensor_mapping(value, *, source, what: str) -> dict[str, torch.Tensor]:
    """``value`` as ``{name: tensor}``, or a one-line refusal naming the file."""
    if not isinstance(value, Mapping) or not value:
        raise CheckpointError(
            f"{source}: {what}: expected a state dict (parameter name -> tensor), found {type(value).__name__}"
        )
    bad = [
        str(name)
        for name, tensor in value.items()
        if not isinstance(name, str) or not isinstance(tensor, torch.Tensor)
    ]
    if bad:
        raise CheckpointError(
            f"{source}: {what}: entries that are not named tensors: {', '.join(bad[:NAMES_SHOWN])}"
        )
    return dict(value)

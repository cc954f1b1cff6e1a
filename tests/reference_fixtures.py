"""The reference values computed outside the repository (tests/fixtures/ecapa_ssl/, dast/, wavlm/).

Each ``.npz`` stores its state dicts as one float vector with the names and shapes (and dtypes)
in its ``made_with`` JSON; :func:`unpack_state` rebuilds them.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

FIXTURES = Path(__file__).parent / "fixtures"
ECAPA_SSL_REFERENCE = FIXTURES / "ecapa_ssl" / "ecapa_ssl_reference.npz"
DAST_REFERENCE = FIXTURES / "dast" / "dast_reference.npz"
WAVLM_REFERENCE = FIXTURES / "wavlm" / "wavlm_reference.npz"


def load_reference(path: Path) -> tuple[dict, dict]:
    """``(arrays as tensors, made_with)`` of a reference ``.npz``."""
    with np.load(path) as data:
        arrays = {key: torch.from_numpy(data[key]) for key in data.files if key != "made_with"}
        made_with = json.loads(str(data["made_with"]))
    return arrays, made_with


def unpack_state(flat: torch.Tensor, layout) -> dict[str, torch.Tensor]:
    """``{name: tensor}`` from the vector and its ``[name, shape(, dtype)]`` rows, in order."""
    state, start = {}, 0
    for row in layout:
        name, shape = row[0], row[1]
        dtype = getattr(torch, row[2]) if len(row) > 2 else torch.float32
        size = int(np.prod(shape)) if shape else 1
        state[name] = flat[start : start + size].reshape(shape).to(dtype).clone()
        start += size
    assert start == flat.numel(), "the layout does not cover the vector"
    return state


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """One thread for tiny models: their cost is per-call overhead, which more threads multiply."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)

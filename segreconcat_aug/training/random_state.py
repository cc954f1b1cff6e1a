"""The random state a training resumes with, saved with every checkpoint (a recoverable of the YAML's
``checkpointer``) and restored with it.

A run killed after a checkpoint and rerun then draws what the uninterrupted run draws: dropout and
every other draw from torch's generators (CPU and CUDA), NumPy's and Python's global ones, and the
seed of each DataLoader worker, which PyTorch draws from torch's generator at every epoch.

>>> import tempfile, pathlib
>>> state = RandomState()
>>> path = pathlib.Path(tempfile.mkdtemp()) / "random_state.ckpt"
>>> _ = torch.manual_seed(3); state.save(path); first = torch.rand(2)
>>> _ = torch.rand(5); state.load(path); torch.equal(torch.rand(2), first)
True
"""

from __future__ import annotations

import random

import numpy as np
import torch
from speechbrain.utils.checkpoints import mark_as_loader, mark_as_saver, register_checkpoint_hooks


@register_checkpoint_hooks
class RandomState:
    """The process's random generators as a checkpoint recoverable (plain values: a safe load reads them)."""

    @mark_as_saver
    def save(self, path) -> None:
        kind, keys, position, has_gauss, gauss = np.random.get_state()
        version, internal, gauss_next = random.getstate()
        torch.save(
            {
                "torch": torch.random.get_rng_state(),
                "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
                "numpy": [kind, keys.tolist(), position, has_gauss, gauss],
                "python": [version, list(internal), gauss_next],
            },
            path,
        )

    @mark_as_loader
    def load(self, path, end_of_epoch=True) -> None:
        state = torch.load(path, map_location="cpu", weights_only=True)
        torch.random.set_rng_state(state["torch"])
        if state["cuda"] and torch.cuda.is_available() and len(state["cuda"]) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all(state["cuda"])
        kind, keys, position, has_gauss, gauss = state["numpy"]
        np.random.set_state((kind, np.asarray(keys, dtype=np.uint32), position, has_gauss, gauss))
        version, internal, gauss_next = state["python"]
        random.setstate((version, tuple(internal), gauss_next))

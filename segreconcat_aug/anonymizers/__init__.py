"""Anonymizers: what turns original speech into the speech an attacker is trained and tested on.

An anonymizer has ``sample_rate``, ``__call__(audio, utt_id) -> np.ndarray`` (float32; keep the length
for the original's word times to stay valid) and ``parameters(utt_id) -> dict[str, float]``.

>>> sorted(ANONYMIZERS)
['mcadams']
>>> anonymizer = get_anonymizer("mcadams", seed=3)
>>> anonymizer.sample_rate, sorted(anonymizer.parameters("19-198-0001"))
(16000, ['alpha'])
>>> check_anonymizer(object())
Traceback (most recent call last):
...
TypeError: object is not an anonymizer: it lacks sample_rate, parameters(utt_id), __call__(audio, utt_id)
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

__all__ = ["ANONYMIZERS", "Anonymizer", "check_anonymizer", "get_anonymizer", "register_anonymizer"]


@runtime_checkable
class Anonymizer(Protocol):
    """The interface :func:`~segreconcat_aug.anonymizers.folder.anonymize_folder` needs."""

    sample_rate: int

    def __call__(self, audio: np.ndarray, utt_id: str) -> np.ndarray: ...

    def parameters(self, utt_id: str) -> dict[str, float]: ...


ANONYMIZERS: dict[str, type] = {}


def register_anonymizer(name: str):
    """Class decorator: make an anonymizer available as ``get_anonymizer(name)``."""

    def register(cls):
        if name in ANONYMIZERS and ANONYMIZERS[name] is not cls:
            raise ValueError(f"anonymizer {name!r} is already registered ({ANONYMIZERS[name].__qualname__})")
        ANONYMIZERS[name] = cls
        return cls

    return register


def check_anonymizer(anonymizer) -> None:
    """Raise TypeError naming what ``anonymizer`` lacks of the interface."""
    missing = [
        label
        for label, ok in (
            ("sample_rate", isinstance(getattr(anonymizer, "sample_rate", None), int)),
            ("parameters(utt_id)", callable(getattr(anonymizer, "parameters", None))),
            ("__call__(audio, utt_id)", callable(anonymizer)),
        )
        if not ok
    ]
    if missing:
        raise TypeError(f"{type(anonymizer).__name__} is not an anonymizer: it lacks {', '.join(missing)}")


def get_anonymizer(name: str, **options):
    """A registered anonymizer built with ``options``."""
    if name not in ANONYMIZERS:
        raise ValueError(f"unknown anonymizer {name!r}; registered: {sorted(ANONYMIZERS)}")
    return ANONYMIZERS[name](**options)


from . import mcadams  # noqa: E402,F401  (registers the bundled anonymizer)

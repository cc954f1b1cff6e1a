"""Anonymizers: what turns original speech into the speech an attacker is trained and tested on.

An anonymizer has ``sample_rate``, ``__call__(audio, utt_id) -> np.ndarray`` (float32; keep the length
for the original's word times to stay valid) and ``parameters(utt_id) -> dict[str, float]``.
``hparams/anonymize.yaml`` names the class to run with ``!new:``.

>>> check_anonymizer(object())
Traceback (most recent call last):
...
TypeError: object is not an anonymizer: it lacks sample_rate, parameters(utt_id), __call__(audio, utt_id)
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

__all__ = ["Anonymizer", "check_anonymizer"]


@runtime_checkable
class Anonymizer(Protocol):
    """The interface :func:`~segreconcat_aug.anonymizers.folder.anonymize_folder` needs."""

    sample_rate: int

    def __call__(self, audio: np.ndarray, utt_id: str) -> np.ndarray: ...

    def parameters(self, utt_id: str) -> dict[str, float]: ...


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

"""The speakers and score matrix of one crossed trial list (what identification, pi_link and Singling
Out read), and the memory chunks of resampled computations."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..bootstrap import TrialDesign


@dataclass
class ListStructure:
    """The speakers and score matrix of one trial list, in the units of its bootstrap design.

    ``matrix[e, u]``: score of enrolled unit ``enrolled[e]`` against test utterance ``utterances[u]``
    (NaN where the list has no such trial); ``owner[u]``: the unit of utterance ``u``'s target trial
    (-1 without one); ``utterance_units[u]``: the unit of ``u``'s speaker.
    """

    design: TrialDesign
    enrolled: np.ndarray
    utterances: list[str]
    utterance_units: np.ndarray
    owner: np.ndarray
    matrix: np.ndarray
    notes: dict = field(default_factory=dict)

    @property
    def complete(self) -> bool:
        return bool(np.isfinite(self.matrix).all())


def list_structure(enroll, test, targets, scores, design: TrialDesign) -> ListStructure:
    """The :class:`ListStructure` of scored trials (``design``: their bootstrap design)."""
    targets = np.asarray(targets, dtype=bool)
    utterances = sorted(set(test))
    column = {u: k for k, u in enumerate(utterances)}
    enrolled = np.unique(design.enroll_units)
    row = np.full(len(design.speakers), -1)
    row[enrolled] = np.arange(len(enrolled))
    columns = np.array([column[u] for u in test], dtype=np.int64)
    matrix = np.full((len(enrolled), len(utterances)), np.nan)
    matrix[row[design.enroll_units], columns] = np.asarray(scores, dtype=np.float64)
    utterance_units = np.zeros(len(utterances), dtype=np.int64)
    utterance_units[columns] = design.test_units
    owner = np.full(len(utterances), -1)
    claims = np.bincount(columns[targets], minlength=len(utterances))
    owner[columns[targets]] = design.enroll_units[targets]
    notes = {}
    if (claims > 1).any():
        owner[claims > 1] = -1
        notes["identification"] = (
            f"{int((claims > 1).sum())} utterance(s) with several target trials left out"
        )
    return ListStructure(design, enrolled, utterances, utterance_units, owner, matrix, notes)


def _row_chunks(resamples: int, width: int, elements: int = 4_000_000):
    """Slices of resamples whose ``(rows, width)`` arrays stay near ``elements`` (memory)."""
    step = max(1, elements // max(1, width))
    return [slice(start, min(start + step, resamples)) for start in range(0, resamples, step)]

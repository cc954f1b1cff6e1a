"""Linkability pi_link of Vauquier et al. 2025, through its reference package
``voice-anonymization-legal-eval`` (``legal_eval.metrics.linkability``), on a list's score matrix
(conversations of one utterance)."""

from __future__ import annotations

import numpy as np

from .settings import population_sizes
from .structure import ListStructure


def _score_matrix(structure: ListStructure):
    """legal_eval's :class:`ScoreMatrix` of the utterances with a target trial (one column each)."""
    from legal_eval.io import ScoreMatrix

    columns = np.flatnonzero(structure.owner >= 0)
    names = structure.design.speakers
    return ScoreMatrix(
        scores=structure.matrix[:, columns],
        enroll_speakers=[names[u] for u in structure.enrolled],
        test_speakers=[names[u] for u in structure.owner[columns]],
        metadata={"conversation_length": 1},
    )


def pi_link_sweep(structure: ListStructure, sizes=None) -> dict[int, float]:
    """legal_eval's Linkability pi_link (exact estimator) for each candidate-set size ``N'``."""
    from legal_eval.metrics.linkability import count_beaters
    from legal_eval.metrics.linkability import linkability as legal_linkability

    matrix = _score_matrix(structure)
    beaters = count_beaters(matrix)
    n = len(matrix.enroll_speakers)
    return {
        int(size): legal_linkability(matrix, int(size), estimator="exact", beaters=beaters)[0]
        for size in sorted(set(sizes or population_sizes(n, start=1 if n < 2 else 2)) | {n})
        if 1 <= size <= n
    }

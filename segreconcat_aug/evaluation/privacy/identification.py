"""Closed-set identification: rank-1 and top-k (%) of each test utterance that has a target trial,
among the enrolled speakers it was scored against (a tie with the true speaker counts against it),
under speaker-bootstrap weights."""

from __future__ import annotations

import numpy as np

from .structure import ListStructure, _row_chunks


class Identification:
    """Closed-set identification of the utterances that have a target trial, under speaker weights."""

    def __init__(self, structure: ListStructure):
        self.structure = structure
        m = structure.matrix
        self.columns = np.flatnonzero(structure.owner >= 0)
        rows = {unit: k for k, unit in enumerate(structure.enrolled)}
        true_rows = np.array([rows[u] for u in structure.owner[self.columns]], dtype=np.int64)
        true = m[true_rows, self.columns]
        others = m[:, self.columns]
        self.utterance_units = structure.owner[self.columns]
        # Beaters per (enrolled speaker, utterance): >= for the ranks (a tie counts against), > for pi_link.
        with np.errstate(invalid="ignore"):
            self.at_least = (others >= true) & np.isfinite(others)
            self.above = (others > true) & np.isfinite(others)
        self.at_least[true_rows, np.arange(len(self.columns))] = False
        self.candidates = np.isfinite(others).sum(axis=0)

    def rates(self, unit_counts: np.ndarray, top_k: int, strict: bool = False) -> np.ndarray:
        """Share (%) of utterances whose true speaker ranks within ``top_k`` under ``unit_counts`` (B, units).

        Competitor ``j`` counts ``w_j`` times (each drawn copy is a candidate), an utterance ``w`` of its
        speaker times; the speaker's own extra copies are not competitors. ``strict``: only higher
        scores beat the true speaker (legal_eval's pi_link).
        """
        beaters = (self.above if strict else self.at_least).astype(np.float64)
        hits, total = np.zeros(len(unit_counts)), np.zeros(len(unit_counts))
        for rows in _row_chunks(len(unit_counts), beaters.shape[1]):
            w_enrolled = unit_counts[rows][:, self.structure.enrolled].astype(np.float64)
            ranks = w_enrolled @ beaters  # (resamples, utterances): weighted beaters
            w_utt = unit_counts[rows][:, self.utterance_units].astype(np.float64)
            hits[rows] = (w_utt * (ranks < top_k)).sum(axis=1)
            total[rows] = w_utt.sum(axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(total > 0, 100.0 * hits / total, np.nan)

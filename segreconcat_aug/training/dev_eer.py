"""Checkpoint selection by dev EER (``select_by: dev_eer``, as ESPnet's PR #6532; ``dev_loss``, the
paper's, is the default): a fixed, seeded, class-balanced trial list over the dev rows of the training
speakers, scored by cosine between their embeddings, EER as SpeechBrain computes it.

>>> rows = [(f"{s}{u}", f"{s}{u}", s) for s in "abc" for u in range(3)]
>>> a, b, targets = balanced_trials(rows, size=8, seed=0)
>>> int(targets.sum()), int((~targets).sum())
(4, 4)
"""

from __future__ import annotations

import numpy as np
import torch
from speechbrain.utils.metric_stats import EER

from ..errors import UserError
from .manifest import read_manifest

TRIALS = 10_000  # ESPnet's balanced subset


def balanced_trials(rows, size: int = TRIALS, seed: int = 0):
    """Up to ``size`` trials over ``rows`` (``(id, utterance, speaker)``), half target (two utterances of a
    speaker), half non-target, drawn with ``seed``: ``(ids_a, ids_b, targets)``."""
    rows = sorted(rows)
    rng = np.random.default_rng(seed)
    by_speaker: dict[str, list[int]] = {}
    for index, (_, _, speaker) in enumerate(rows):
        by_speaker.setdefault(speaker, []).append(index)
    same = [
        (i, j)
        for speaker in sorted(by_speaker)
        for n, i in enumerate(by_speaker[speaker])
        for j in by_speaker[speaker][n + 1 :]
        if rows[i][1] != rows[j][1]
    ]
    half = min(size // 2, len(same))
    pairs = [same[k] for k in sorted(rng.choice(len(same), half, replace=False))] if half else []
    different: set = set()
    while len(by_speaker) > 1 and len(different) < half:
        i, j = (int(k) for k in rng.integers(len(rows), size=2))
        if rows[i][2] != rows[j][2]:
            different.add((min(i, j), max(i, j)))
    pairs += sorted(different)
    targets = np.arange(len(pairs)) < half
    return [rows[i][0] for i, _ in pairs], [rows[j][0] for _, j in pairs], targets


class DevTrialsError(UserError, ValueError):
    """The dev split gives no target trial (no training speaker with two dev utterances)."""


class DevEER:
    """The dev embeddings of one validation stage, and their EER (%) on :func:`balanced_trials`."""

    def __init__(self, rows, seed: int):
        self.a, self.b, self.targets = balanced_trials(rows, seed=seed)
        self.embeddings: dict[str, torch.Tensor] = {}

    @classmethod
    def from_manifest(cls, path, seed: int) -> DevEER:
        """Over the dev manifest's rows (a row's utterance: ``utt_id``, its speaker: ``spk_id``)."""
        rows = read_manifest(path)
        found = (rows.row(k) for k in range(len(rows)))
        dev = cls([(row, values["utt_id"], values["spk_id"]) for row, values in found], seed)
        if not dev.targets.any() or dev.targets.all():
            raise DevTrialsError(
                f"select_by: dev_eer: the dev split ({path}) has no training speaker with two dev utterances, "
                "or only one speaker: raise dev_ratio, or set select_by: dev_loss"
            )
        return dev

    def add(self, ids, embeddings: torch.Tensor) -> None:
        for row, vector in zip(ids, embeddings.detach().reshape(len(ids), -1).float().cpu()):
            self.embeddings[row] = vector

    def eer(self) -> float:
        """EER (%) over the trials whose both rows were embedded (all of them in one process)."""
        seen = [
            k for k, (a, b) in enumerate(zip(self.a, self.b)) if a in self.embeddings and b in self.embeddings
        ]
        a = torch.stack([self.embeddings[self.a[k]] for k in seen])
        b = torch.stack([self.embeddings[self.b[k]] for k in seen])
        scores = torch.nn.functional.cosine_similarity(a, b)
        targets = torch.as_tensor(self.targets[seen])
        self.embeddings = {}
        return 100.0 * float(EER(scores[targets], scores[~targets])[0])

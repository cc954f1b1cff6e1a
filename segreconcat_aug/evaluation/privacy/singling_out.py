"""Singling Out of Vauquier et al. 2025, through ``legal_eval.metrics.singling_out``: its population
sweep, and the full population under speaker-bootstrap weights."""

from __future__ import annotations

import numpy as np

from .settings import PrivacyOptions, population_sizes
from .structure import ListStructure


class SinglingOut:
    """Singling Out (legal_eval) of one crossed list: its sweep, and the full population under weights.

    The dataset: every test speaker with at least two utterances in the list (one test and up to
    ``max_calibration`` calibration conversations of one utterance, split by legal_eval's
    ``build_conversations`` per fold); the predicates: the enrolled speakers among them.
    """

    def __init__(self, structure: ListStructure, options: PrivacyOptions):
        from legal_eval.embeddings import build_conversations
        from legal_eval.metrics.singling_out import ConversationScores

        self.structure, self.options = structure, options
        names = structure.design.speakers
        self.unit_of = {name: k for k, name in enumerate(names)}
        spk2utt: dict[
            str, list[str]
        ] = {}  # every test speaker, sorted; legal_eval skips those with one utterance
        for u, unit in sorted(enumerate(structure.utterance_units), key=lambda x: (names[x[1]], x[0])):
            spk2utt.setdefault(names[unit], []).append(structure.utterances[u])
        index = {u: np.array([float(k)]) for k, u in enumerate(structure.utterances)}  # carries the column
        enrolled_names = [names[u] for u in structure.enrolled]
        self.folds = []
        for fold in range(options.singling_out_folds):
            conversations = build_conversations(
                spk2utt, index, 1, max_calibration=options.max_calibration, seed=options.seed, fold=fold
            )
            speakers = list(conversations)
            test_columns = np.array([int(conversations[s].test[0]) for s in speakers], dtype=np.int64)
            calibration = [[int(c[0]) for c in conversations[s].calibration] for s in speakers]
            bounds = np.cumsum([0] + [len(c) for c in calibration])
            cal_columns = np.array([c for block in calibration for c in block], dtype=np.int64)
            scores = ConversationScores(
                enroll_speakers=enrolled_names,
                dataset_speakers=speakers,
                test_scores=structure.matrix[:, test_columns],
                calibration_scores=structure.matrix[:, cal_columns],
                calibration_slices=[(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:])],
            )
            units = np.array([self.unit_of[s] for s in speakers], dtype=np.int64)
            self.folds.append((scores, units, np.repeat(units, np.diff(bounds)), np.diff(bounds)))
        self.dataset = self.folds[0][0].dataset_speakers if self.folds else []
        self.n_dataset = len(self.dataset)
        self.predicates = [s for s in enrolled_names if s in self.dataset]

    @property
    def problem(self) -> str | None:
        if not self.structure.complete:
            return "the list is not a full cross of enrolled speakers and test utterances"
        if self.n_dataset < 2:
            return f"{self.n_dataset} test speaker(s) with two or more utterances: Singling Out needs two"
        if not self.predicates:
            return "no enrolled speaker is among the test speakers with two or more utterances"
        return None

    def sweep(self, sizes=None) -> dict[int, float]:
        """legal_eval's pi_sing for each population size ``N``: the mean isolation outcome over
        predicates, folds and runs (as its ``singling_out_sweep`` averages)."""
        from legal_eval.metrics.singling_out import singling_out

        out = {}
        for size in sorted(set(sizes or population_sizes(self.n_dataset)) | {self.n_dataset}):
            if not 2 <= size <= self.n_dataset:
                continue
            outcomes = []
            for fold, (scores, *_rest) in enumerate(self.folds):
                found = singling_out(
                    scores,
                    int(size),
                    n_runs=self.options.singling_out_runs,
                    seed=self.options.seed,
                    fold=fold,
                )
                outcomes += [float(np.mean(values)) for values in found.values()]
            out[int(size)] = float(np.mean(outcomes))
        return out

    def full_population(self, unit_counts: np.ndarray) -> np.ndarray:
        """pi_sing with the whole dataset as the population, under speaker weights ``(B, units)``.

        A drawn copy of another speaker is one more person in the population (its test conversation
        may fire, its calibration conversations set the threshold ``w`` times); a predicate never
        meets copies of its own speaker. With unit weights: legal_eval's value at ``N`` = all.
        """
        resamples = unit_counts.shape[0]
        hits = np.zeros(resamples)
        weight = np.zeros(resamples)
        enroll_rows = {name: k for k, name in enumerate(self.folds[0][0].enroll_speakers)}
        for scores, units, cal_units, cal_counts in self.folds:
            dataset = {s: k for k, s in enumerate(scores.dataset_speakers)}
            w_units = unit_counts[:, units].astype(np.int64)
            for predicate in self.predicates:
                own = dataset[predicate]
                own_unit = units[own]
                row = enroll_rows[predicate]
                order = np.argsort(-scores.calibration_scores[row], kind="stable")
                cal = scores.calibration_scores[row][order]
                w_cal = unit_counts[:, cal_units[order]].astype(np.int64)
                w_cal[:, cal_units[order] == own_unit] = 1
                cumulative = np.cumsum(w_cal, axis=1)
                needed = int(cal_counts[own])
                valid = cumulative[:, -1] >= needed + 1
                nth = cal[np.argmax(cumulative >= needed, axis=1)]
                next_ = cal[np.argmax(cumulative >= needed + 1, axis=1)]
                threshold = (next_ + nth) / 2.0
                w_test = w_units.copy()
                w_test[:, own] = 1
                firing = (w_test * (scores.test_scores[row][None, :] > threshold[:, None])).sum(axis=1)
                w_predicate = unit_counts[:, self.unit_of[predicate]].astype(np.float64) * valid
                hits += w_predicate * (firing == 1)
                weight += w_predicate
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(weight > 0, hits / weight, np.nan)

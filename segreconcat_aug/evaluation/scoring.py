"""Scoring trials: enrollment models, cosine scores, score normalizations and their cohort.

Score normalization is off by default, as the paper uses none (the options:
docs/evaluation-reference.md).

>>> enroll, test = np.array([[1.0, 0.0], [0.0, 2.0]]), np.array([[3.0, 0.0], [1.0, 1.0]])
>>> [round(float(s), 4) for s in cosine_scores(enroll, test)]
[1.0, 0.7071]
"""

from __future__ import annotations

import numpy as np

from ..data.kaldi import KaldiFolder, group_by_speaker
from ..errors import UserError

SCORE_NORMS = (None, "s-norm", "as-norm", "as-norm-voxattack")
#: Each method's own top-k when ``eval_cohort_top_k`` is null (VoxATtack's: its configs/module/vpc.yaml).
DEFAULT_TOP_K = {"as-norm": 200, "as-norm-voxattack": 1000}
#: How an enrollment model averages its embeddings: raw (both challenges' code for an ECAPA such as
#: ours) or L2-normalized first (VPC 2026's ecapa_ssl extractor, speechbrain_vectors.py after f2c9bdc).
ENROLL_MEANS = ("raw", "l2")
#: How a trial is scored against its speaker's enrollment: cosine to the model (the challenges') or the
#: highest cosine over the enrollment utterances (VoxGuard's max-similarity, arXiv 2509.18413).
ENROLL_SCORINGS = ("mean", "max")


def _unit_rows(matrix: np.ndarray) -> np.ndarray:
    matrix = np.asarray(matrix, dtype=np.float32)
    norms = np.linalg.norm(matrix, axis=-1, keepdims=True)
    return matrix / np.maximum(norms, np.float32(1e-12))


def cosine_scores(enroll: np.ndarray, test: np.ndarray) -> np.ndarray:
    """Row-wise cosine similarity of two ``(n, d)`` matrices, float32."""
    return np.einsum("ij,ij->i", _unit_rows(enroll), _unit_rows(test)).astype(np.float32)


def max_cosine_scores(enroll_sets: list[np.ndarray], test: np.ndarray) -> np.ndarray:
    """Per trial, the highest cosine of its test embedding over its speaker's enrollment embeddings
    (``eval_enroll_scoring: max``, VoxGuard's max-similarity), float32.

    >>> [round(float(s), 4) for s in max_cosine_scores([np.array([[1.0, 0.0], [0.0, 1.0]])], np.array([[1.0, 3.0]]))]
    [0.9487]
    """
    return np.array(
        [(_unit_rows(utts) @ _unit_rows(vector[None])[0]).max() for utts, vector in zip(enroll_sets, test)],
        dtype=np.float32,
    )


def speaker_models(
    speakers: dict[str, list[str]], embeddings: dict[str, np.ndarray], mean: str = "raw"
) -> dict[str, np.ndarray]:
    """Model per speaker (``speaker -> utterances``): the mean of its raw embeddings, or (``"l2"``)
    of its embeddings each divided by its L2 norm first.

    >>> e = {"a": np.array([3.0, 0.0]), "b": np.array([0.0, 1.0])}
    >>> speaker_models({"s": ["a", "b"]}, e)["s"].tolist(), speaker_models({"s": ["a", "b"]}, e, "l2")["s"].tolist()
    ([1.5, 0.5], [0.5, 0.5])
    """
    if mean not in ENROLL_MEANS:
        raise ValueError(f"unknown enrollment mean {mean!r}; choose from {ENROLL_MEANS}")

    def vector(utt):
        return _unit_rows(embeddings[utt]) if mean == "l2" else embeddings[utt]

    return {
        spk: np.mean([vector(utt) for utt in utts], axis=0).astype(np.float32)
        for spk, utts in speakers.items()
    }


def normalize_scores(
    scores: np.ndarray,
    enroll_vectors: np.ndarray,
    test_vectors: np.ndarray,
    cohort: np.ndarray,
    method: str = "s-norm",
    top_k: int | None = None,
) -> np.ndarray:
    """Symmetric (``s-norm``) or adaptive symmetric (``as-norm``, top-``k`` cohort) score normalization:
    ``s = ((s - mu_e) / sd_e + (s - mu_t) / sd_t) / 2`` over each side's cosine scores against the cohort."""
    if method == "as-norm-voxattack":
        return normalize_scores_voxattack(scores, enroll_vectors, test_vectors, cohort, top_k)
    if method not in ("s-norm", "as-norm"):
        raise ValueError(f"unknown score normalization {method!r}; choose from {list(SCORE_NORMS)}")
    cohort_unit = _unit_rows(cohort)

    def stats(vectors):
        against = _unit_rows(vectors) @ cohort_unit.T
        if method == "as-norm":
            k = min(int(top_k or against.shape[1]), against.shape[1])
            against = -np.partition(-against, k - 1, axis=1)[:, :k]
        return against.mean(axis=1), np.maximum(against.std(axis=1), 1e-6)

    mean_e, std_e = stats(enroll_vectors)
    mean_t, std_t = stats(test_vectors)
    return (((scores - mean_e) / std_e + (scores - mean_t) / std_t) / 2).astype(np.float32)


class CohortTooSmallError(UserError, ValueError):
    """A cohort (or top-k) too small to normalize, or an ``as-norm-voxattack`` one under ``eval_cohort_min_size``."""


#: Each side's mean and standard deviation need two cohort scores (VoxATtack's ``ddof=1`` std is NaN
#: with one, and every score would fall back to raw; a population std of one is 0).
MIN_COHORT_SCORES = 2


def used_top_k(method: str, cohort_size: int, top_k: int | None, cohort: str) -> int | None:
    """The k ``method`` takes of each side's cohort scores (None for ``s-norm``: all of them), refusing a
    cohort or k that leaves fewer than :data:`MIN_COHORT_SCORES`. ``cohort``: what the cohort is, for the message.

    >>> used_top_k("as-norm-voxattack", 338, 5000, "T8-5's training set"), used_top_k("s-norm", 3, 9, "x")
    (338, None)
    """
    k = cohort_size if method == "s-norm" else min(int(top_k or DEFAULT_TOP_K[method]), cohort_size)
    if k < MIN_COHORT_SCORES:
        why = (
            f"eval_cohort_top_k: {top_k} leaves one; raise it or leave it null"
            if cohort_size >= MIN_COHORT_SCORES
            else f"{cohort} gives a cohort of {cohort_size}; use a larger training set or eval_score_norm: null"
        )
        raise CohortTooSmallError(
            f"eval_score_norm: {method} needs at least {MIN_COHORT_SCORES} cohort scores per side (their mean "
            f"and standard deviation): {why}"
        )
    return None if method == "s-norm" else k


def normalize_scores_voxattack(
    scores: np.ndarray,
    enroll_vectors: np.ndarray,
    test_vectors: np.ndarray,
    cohort: np.ndarray,
    top_k: int | None = None,
) -> np.ndarray:
    """AS-norm as VoxATtack computes it (``AS_norm`` in its src/modules/metrics/metrics.py, 9fe67f1).

    Each side (the enrollment model, the test embedding) is scored by cosine against every
    cohort utterance embedding; of its ``top_k`` highest (all of them when the cohort is
    smaller) the mean and the *unbiased* (``ddof=1``) standard deviation give
    ``s = ((s - mu_e) / (sd_e + 1e-9) + (s - mu_t) / (sd_t + 1e-9)) / 2``. A trial whose
    normalized score is not finite keeps its raw score, as there. VoxATtack's refusal of a cohort under
    ``eval_cohort_min_size`` is the evaluation's, where the cohort is drawn (:mod:`.system`).
    """
    cohort = np.asarray(cohort, dtype=np.float64)
    k = min(int(top_k or DEFAULT_TOP_K["as-norm-voxattack"]), cohort.shape[0])
    cohort_unit = cohort / np.maximum(np.linalg.norm(cohort, axis=1, keepdims=True), 1e-8)

    def stats(vectors):
        vectors = np.asarray(vectors, dtype=np.float64)
        unit = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-8)
        top = -np.partition(-(unit @ cohort_unit.T), k - 1, axis=1)[:, :k]
        return top.mean(axis=1), top.std(axis=1, ddof=1)

    mean_e, std_e = stats(enroll_vectors)
    mean_t, std_t = stats(test_vectors)
    raw = np.asarray(scores, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        normalized = 0.5 * ((raw - mean_e) / (std_e + 1e-9) + (raw - mean_t) / (std_t + 1e-9))
    return np.where(np.isfinite(normalized), normalized, raw).astype(np.float32)


def cohort_utterance_draw(folder: KaldiFolder, size: int, seed: int) -> list[str]:
    """Up to ``size`` training utterances, balanced over speakers as VoxATtack draws its cohort.

    As ``_cohort_indices`` in VoxATtack's src/modules/audio_vpc.py: each speaker gives up to
    ``size // speakers`` utterances (at least one), then utterances not yet drawn fill the rest;
    all of them when the set has fewer than ``size``. Drawn with ``seed`` (ours, not pandas').
    """
    by_speaker = group_by_speaker(folder.utterances, folder.utt2spk)
    rng = np.random.default_rng(seed)
    per_speaker = max(1, size // max(1, len(by_speaker)))
    chosen: list[str] = []
    for spk in sorted(by_speaker):
        utts = sorted(by_speaker[spk])
        if len(utts) > per_speaker:
            utts = rng.choice(utts, size=per_speaker, replace=False).tolist()
        chosen.extend(utts)
    taken = set(chosen)
    rest = sorted(utt for utt in folder.utterances if utt not in taken)
    missing = min(size - len(chosen), len(rest))
    if missing > 0:
        chosen.extend(rng.choice(rest, size=missing, replace=False).tolist())
    return sorted(chosen[:size])


def cohort_utterances(folder: KaldiFolder, per_speaker: int, seed: int) -> dict[str, list[str]]:
    """Up to ``per_speaker`` utterances of each speaker of a folder, drawn with ``seed``."""
    by_speaker = group_by_speaker(folder.utterances, folder.utt2spk)
    rng = np.random.default_rng(seed)
    chosen = {}
    for spk in sorted(by_speaker):
        utts = sorted(by_speaker[spk])
        if len(utts) > per_speaker:
            utts = sorted(rng.choice(utts, size=per_speaker, replace=False).tolist())
        chosen[spk] = utts
    return chosen

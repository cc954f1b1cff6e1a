"""Scoring trials: enrollment models, cosine scores, score normalizations and their cohort.

An enrollment model is the mean of a speaker's raw embeddings (:func:`speaker_models`; ``l2``:
of its L2-normalized embeddings, as VPC 2026's own WavLM+ECAPA extractor gives them);
a trial's score is the cosine similarity of model and test embedding
(:func:`cosine_scores`). Score normalization is off by default, as the paper uses
none; ``s-norm`` or ``as-norm`` (:func:`normalize_scores`) score both sides against a
cohort drawn from the system's training speakers (:func:`cohort_utterances`).

Example
-------
>>> enroll, test = np.array([[1.0, 0.0], [0.0, 2.0]]), np.array([[3.0, 0.0], [1.0, 1.0]])
>>> [round(float(s), 4) for s in cosine_scores(enroll, test)]
[1.0, 0.7071]
"""

from __future__ import annotations

import numpy as np

from ..data.kaldi import KaldiFolder, group_by_speaker

SCORE_NORMS = (None, "s-norm", "as-norm")
#: How an enrollment model averages its embeddings: raw (both challenges' code for an ECAPA such as
#: ours) or L2-normalized first (VPC 2026's ecapa_ssl extractor, speechbrain_vectors.py after f2c9bdc).
ENROLL_MEANS = ("raw", "l2")


def _unit_rows(matrix: np.ndarray) -> np.ndarray:
    matrix = np.asarray(matrix, dtype=np.float32)
    norms = np.linalg.norm(matrix, axis=-1, keepdims=True)
    return matrix / np.maximum(norms, np.float32(1e-12))


def cosine_scores(enroll: np.ndarray, test: np.ndarray) -> np.ndarray:
    """Row-wise cosine similarity of two ``(n, d)`` matrices, float32."""
    return np.einsum("ij,ij->i", _unit_rows(enroll), _unit_rows(test)).astype(np.float32)


def speaker_models(
    speakers: dict[str, list[str]], embeddings: dict[str, np.ndarray], mean: str = "raw"
) -> dict[str, np.ndarray]:
    """Model per speaker (``speaker -> utterances``): the mean of its embeddings.

    ``mean="raw"``: of the raw (not length-normalized) embeddings; ``"l2"``: of the embeddings
    each divided by its L2 norm first. The enrollment models, and the cohort's for score
    normalization.

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
    """Symmetric (``s-norm``) or adaptive symmetric (``as-norm``, top-``k`` cohort) score normalization.

    ``s = ((s - mu_e) / sd_e + (s - mu_t) / sd_t) / 2`` with the mean and
    standard deviation of each side's cosine scores against the cohort (its
    ``top_k`` highest for ``as-norm``).

    >>> rng = np.random.default_rng(0)
    >>> e, t, c = rng.normal(size=(3, 4)), rng.normal(size=(3, 4)), rng.normal(size=(20, 4))
    >>> normalize_scores(cosine_scores(e, t), e, t, c).shape
    (3,)
    """
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

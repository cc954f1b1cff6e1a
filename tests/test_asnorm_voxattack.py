"""``as-norm-voxattack``: VoxATtack's AS-norm against reference values of its own code, and its cohort draw."""

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from segreconcat_aug.evaluation.scoring import (
    DEFAULT_TOP_K,
    cohort_utterance_draw,
    cosine_scores,
    normalize_scores,
    normalize_scores_voxattack,
)

FIXTURE = Path(__file__).parent / "fixtures" / "asnorm_voxattack"


@pytest.mark.parametrize("top_k", ["10", "50", "1000"])
def test_matches_voxattacks_own_as_norm(top_k):
    """Reference: VoxATtack 9fe67f1 AS_norm run outside the repository (see the fixture's README)."""
    inputs = np.load(FIXTURE / "inputs.npz")
    expected = json.loads((FIXTURE / "expected.json").read_text())
    raw = cosine_scores(inputs["enroll"], inputs["test"])
    np.testing.assert_allclose(raw, expected["raw_scores"], atol=1e-5)
    ours = normalize_scores(
        raw, inputs["enroll"], inputs["test"], inputs["cohort"], "as-norm-voxattack", int(top_k)
    )
    np.testing.assert_allclose(ours, expected["normalized"][top_k], atol=1e-5)


def test_differs_from_our_as_norm_by_its_unbiased_std():
    inputs = np.load(FIXTURE / "inputs.npz")
    raw = cosine_scores(inputs["enroll"], inputs["test"])
    args = (raw, inputs["enroll"], inputs["test"], inputs["cohort"])
    assert not np.allclose(
        normalize_scores(*args, "as-norm", 10), normalize_scores(*args, "as-norm-voxattack", 10)
    )


def test_default_top_k_is_voxattacks_and_a_small_cohort_is_taken_whole():
    """A cohort under eval_cohort_min_size is refused where it is drawn (tests/test_evaluation.py)."""
    assert DEFAULT_TOP_K == {"as-norm": 200, "as-norm-voxattack": 1000}
    rng = np.random.default_rng(0)
    cohort, enroll, test = rng.normal(size=(5, 4)), rng.normal(size=(3, 4)), rng.normal(size=(3, 4))
    scores = cosine_scores(enroll, test)
    np.testing.assert_array_equal(
        normalize_scores_voxattack(scores, enroll, test, cohort),
        normalize_scores_voxattack(scores, enroll, test, cohort, 5),
    )


def fake_training_set(speakers=4, per_speaker=10):
    utt2spk = {f"s{s}-{u:02d}": f"s{s}" for s in range(speakers) for u in range(per_speaker)}
    return SimpleNamespace(utterances=list(utt2spk), utt2spk=utt2spk)


def test_cohort_draw_is_seeded_balanced_and_from_the_training_set():
    train = fake_training_set()
    drawn = cohort_utterance_draw(train, 10, seed=1)
    assert len(drawn) == len(set(drawn)) == 10 and set(drawn) <= set(train.utterances)
    speakers = [train.utt2spk[u] for u in drawn]
    assert sorted(speakers.count(s) for s in set(speakers)) == [2, 2, 3, 3]  # 10 // 4 each, then 2 more
    assert drawn == cohort_utterance_draw(train, 10, seed=1)
    assert drawn != cohort_utterance_draw(train, 10, seed=2)


def test_cohort_draw_takes_the_whole_set_when_it_has_fewer():
    train = fake_training_set(speakers=3, per_speaker=4)
    assert cohort_utterance_draw(train, 40000, seed=0) == sorted(train.utterances)

"""Low false-alarm operating points and QMF calibration, against brute force and scikit-learn."""

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression
from sklearn.preprocessing import StandardScaler

from segreconcat_aug.evaluation.bootstrap import (
    SpeakerWeights,
    resampled_metrics,
    speaker_counts,
    trial_design,
)
from segreconcat_aug.evaluation.calibration import (
    calibrate,
    cross_validated_llr,
    fit_qmf,
    qmf_llr,
    quality_features,
)
from segreconcat_aug.evaluation.metrics import operating_points


class EveryTrialOnce:
    """Bootstrap weights of one resample that holds each of ``trials`` trials once: the point metrics."""

    resamples = 1

    def __init__(self, trials: int):
        self.trials = trials

    def chunk(self, start, stop):
        return np.ones((stop - start, self.trials), np.int32)


def brute_force(pos, neg):
    """Every threshold (accept a score above it), each bound checked one by one."""
    pos, neg = np.asarray(pos, float), np.asarray(neg, float)
    found = {"tpr_at_fpr_1": 0.0, "tpr_at_fpr_0.1": 0.0, "fpr_at_fnr_1": 100.0}
    for t in [-np.inf, *np.concatenate([pos, neg])]:
        tpr, fpr = 100 * np.mean(pos > t), 100 * np.mean(neg > t)
        if fpr <= 1:
            found["tpr_at_fpr_1"] = max(found["tpr_at_fpr_1"], tpr)
        if fpr <= 0.1:
            found["tpr_at_fpr_0.1"] = max(found["tpr_at_fpr_0.1"], tpr)
        if 100 - tpr <= 1:
            found["fpr_at_fnr_1"] = min(found["fpr_at_fnr_1"], fpr)
    return found


@pytest.mark.parametrize("seed", range(5))
def test_operating_points_equal_a_brute_force_search(seed):
    rng = np.random.default_rng(seed)
    pos = np.round(rng.normal(2.0, 1.0, 150), 1)  # ties, within and across the classes
    neg = np.round(rng.normal(0.0, 1.0, 1200), 1)
    found = operating_points(pos.astype(np.float32), neg.astype(np.float32))
    expected = brute_force(pos.astype(np.float32), neg.astype(np.float32))
    assert "undefined_because" not in found
    for key, value in expected.items():
        assert found[key] == pytest.approx(value, abs=1e-9)


def test_a_list_too_small_for_an_operating_point_says_so():
    found = operating_points(np.arange(99.0), np.arange(500.0))
    assert found["tpr_at_fpr_1"] == brute_force(np.arange(99.0), np.arange(500.0))["tpr_at_fpr_1"]
    assert found["tpr_at_fpr_0.1"] is None and found["fpr_at_fnr_1"] is None
    assert found["undefined_because"] == {
        "tpr_at_fpr_0.1": "undefined: fewer than 1000 non-targets (500)",
        "fpr_at_fnr_1": "undefined: fewer than 100 targets (99)",
    }


def test_resampled_operating_points_are_the_repeated_lists_brute_force():
    rng = np.random.default_rng(3)
    speakers = [f"s{k}" for k in range(8)]
    enroll = [speakers[k % 8] for k in range(800)]
    test = [speakers[k % 8] if k % 5 == 0 else speakers[(k + 1 + k // 8) % 8] for k in range(800)]
    targets = np.array([e == t for e, t in zip(enroll, test)])
    scores = np.round(np.where(targets, 1.5, 0.0) + rng.normal(size=800), 2)
    weights = SpeakerWeights(
        trial_design(enroll, test, targets), speaker_counts([trial_design(enroll, test, targets)], 5, 1)
    )
    found = resampled_metrics(scores, targets, weights, ())
    for b in range(5):
        w = weights.chunk(b, b + 1)[0]
        expected = brute_force(
            np.repeat(scores[targets], w[targets]), np.repeat(scores[~targets], w[~targets])
        )
        for key, value in expected.items():
            assert found[key][b] == pytest.approx(value, abs=1e-9)


def synthetic_lists(seed=0):
    """Dev and test lists whose targets depend on the score and on the test duration (a quality measure)."""
    rng = np.random.default_rng(seed)
    lists = {}
    for name in ("dev_f", "dev_m", "test_f"):
        n = 300
        targets = rng.random(n) < 0.3
        seconds = rng.uniform(1, 15, n)
        scores = np.where(targets, 0.4, 0.1) + rng.normal(0, 0.2, n) * 4 / np.sqrt(seconds)
        features = quality_features(
            scores, rng.normal(size=(n, 4)), rng.normal(size=(n, 4)), rng.uniform(20, 40, n), seconds
        )
        lists[name] = (features, targets, [f"{name}{k % 7}" for k in range(n)])
    return lists


def test_qmf_reproduces_scikit_learns_fitted_probabilities():
    features, targets, _ = synthetic_lists()["dev_f"]
    model = fit_qmf(features, targets)
    scaler = StandardScaler().fit(features)
    reference = LogisticRegression().fit(scaler.transform(features), targets)
    expected = reference.predict_proba(scaler.transform(features))[:, 1]
    np.testing.assert_allclose(model.predict_proba(features)[:, 1], expected, rtol=0, atol=1e-12)
    # The LLR is the posterior log odds less the training prior's.
    prior = targets.mean()
    llr = qmf_llr(model, features, targets)
    np.testing.assert_allclose(
        llr + np.log(prior / (1 - prior)), np.log(expected / (1 - expected)), atol=1e-9
    )


def test_dev_is_cross_validated_by_speaker_and_test_gets_the_model_of_all_dev():
    lists = synthetic_lists()
    found = calibrate(lists)
    features, targets, _ = lists["test_f"]
    dev = [np.concatenate([lists[n][k] for n in ("dev_f", "dev_m")]) for k in range(2)]
    llr = qmf_llr(fit_qmf(*dev), features, dev[1])
    assert found["test_f"]["qmf_eer"] == pytest.approx(
        calibrate({**lists, "test_f": (features, targets, [])})["test_f"]["qmf_eer"]
    )
    from segreconcat_aug.evaluation.privacy import cllr

    assert found["test_f"]["qmf_cllr"] == pytest.approx(cllr(llr[targets], llr[~targets]))
    assert found["test_f"]["qmf_cllr"] < 1.0  # calibrated: better than no information
    # A dev trial's LLR comes from a model that never saw its speaker: flipping that speaker's labels leaves
    # its LLRs as they were (the folds depend on the speakers' trial counts only), and moves the others'.
    features, targets, speakers = lists["dev_f"]
    speakers = np.array(speakers, dtype=object)
    own = speakers == speakers[0]
    before = cross_validated_llr(features, targets, speakers)
    after = cross_validated_llr(features, np.where(own, ~targets, targets), speakers)
    np.testing.assert_array_equal(before[own], after[own])
    assert not np.allclose(before[~own], after[~own])

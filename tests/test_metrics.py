"""EER, minDCF and DET points against SpeechBrain and direct computations."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from speechbrain.utils.metric_stats import EER as sb_eer
from speechbrain.utils.metric_stats import minDCF as sb_min_dcf

from segreconcat_aug.evaluation.metrics import det_curve, eer, min_dcf, verification_metrics

# Scores on a coarse grid produce many ties (and ties between targets and non-targets).
tied_scores = st.lists(st.integers(-5, 5).map(lambda k: k / 4), min_size=1, max_size=40)
random_scores = st.lists(st.floats(-1, 1, allow_nan=False, width=32), min_size=1, max_size=60)


def _check_against_speechbrain(pos, neg, dtype):
    pos_t = torch.tensor(pos, dtype=dtype)
    neg_t = torch.tensor(neg, dtype=dtype)
    expected, expected_threshold = sb_eer(pos_t, neg_t)
    ours = eer(pos_t.numpy(), neg_t.numpy())
    assert abs(ours.eer - expected) <= 1e-9
    assert ours.threshold == pytest.approx(expected_threshold, abs=0)


@settings(max_examples=150, deadline=None)
@given(random_scores, random_scores, st.sampled_from([torch.float32, torch.float64]))
def test_eer_equals_speechbrain_on_random_scores(pos, neg, dtype):
    _check_against_speechbrain(pos, neg, dtype)


@settings(max_examples=150, deadline=None)
@given(tied_scores, tied_scores, st.sampled_from([torch.float32, torch.float64]))
def test_eer_equals_speechbrain_on_tied_scores(pos, neg, dtype):
    _check_against_speechbrain(pos, neg, dtype)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.floats(0.5, 1, allow_nan=False, width=32), min_size=1, max_size=30),
    st.lists(st.floats(-1, 0.25, allow_nan=False, width=32), min_size=1, max_size=30),
)
def test_eer_equals_speechbrain_on_separable_scores(pos, neg):
    _check_against_speechbrain(pos, neg, torch.float32)
    assert eer(pos, neg).eer == 0.0


def test_eer_on_realistic_sizes_matches_speechbrain():
    # Counts like a VPAC subset (about 5% targets), where float32 rounding of FAR/FRR matters.
    rng = np.random.default_rng(3)
    pos = rng.normal(0.5, 0.2, 353).astype(np.float32)
    neg = rng.normal(0.2, 0.2, 4700).astype(np.float32)
    expected, _ = sb_eer(torch.from_numpy(pos), torch.from_numpy(neg))
    assert abs(eer(pos, neg).eer - expected) <= 1e-9


def test_eer_hand_computed():
    # pos 0.9 0.8 0.3, neg 0.1 0.4 0.2 0.85. At t = 0.4: FRR = 1/3 (0.3 rejected), FAR = 1/4 (0.85
    # accepted), |FAR - FRR| = 1/12, the smallest of all thresholds; EER = (1/3 + 1/4) / 2 = 7/24.
    result = eer([0.9, 0.8, 0.3], [0.1, 0.4, 0.2, 0.85])
    assert result.threshold == 0.4
    assert result.eer == pytest.approx(7 / 24, abs=1e-7)
    assert (result.frr, result.far) == pytest.approx((1 / 3, 1 / 4), abs=1e-7)


def _direct_min_dcf(pos, neg, p_target, c_miss=1.0, c_fa=1.0):
    pos, neg = np.asarray(pos, float), np.asarray(neg, float)
    unique = np.unique(np.concatenate([pos, neg]))
    thresholds = np.concatenate([unique, (unique[:-1] + unique[1:]) / 2])
    costs = [
        c_miss * p_target * np.mean(pos <= t) + c_fa * (1 - p_target) * np.mean(neg > t) for t in thresholds
    ]
    return min(costs) / min(c_miss * p_target, c_fa * (1 - p_target))


@pytest.mark.parametrize("p_target", [0.01, 0.05, 0.3])
def test_min_dcf_matches_direct_computation_and_speechbrain(p_target):
    rng = np.random.default_rng(int(p_target * 100))
    pos = rng.normal(1.0, 1.0, 120)
    neg = rng.normal(0.0, 1.0, 900)
    ours = min_dcf(pos, neg, p_target=p_target)
    assert ours.min_dcf == pytest.approx(_direct_min_dcf(pos, neg, p_target), abs=1e-12)
    assert 0.0 < ours.min_dcf <= 1.0
    raw, _ = sb_min_dcf(torch.from_numpy(pos), torch.from_numpy(neg), p_target=p_target)
    # SpeechBrain's minDCF is not normalized
    assert ours.min_dcf * min(p_target, 1 - p_target) == pytest.approx(raw, abs=1e-6)


def test_min_dcf_with_costs_is_min_dcf_at_the_effective_prior():
    pos, neg = [0.9, 0.2, 0.7], [0.1, 0.3, 0.8, 0.05]
    effective = 10 * 0.05 / (10 * 0.05 + 1 * 0.95)  # c_miss = 10, c_fa = 1
    ours = min_dcf(pos, neg, p_target=effective)
    assert ours.min_dcf == pytest.approx(_direct_min_dcf(pos, neg, 0.05, 10, 1), abs=1e-12)


def test_det_curve_is_monotone_and_spans_the_range():
    rng = np.random.default_rng(0)
    far, frr = det_curve(rng.normal(1, 1, 500), rng.normal(0, 1, 5000), max_points=300)
    assert len(far) == len(frr) <= 300
    assert np.all(np.diff(far) <= 0) and np.all(np.diff(frr) >= 0)
    assert far[0] == pytest.approx(1 - 1 / 5000) and frr[-1] == 1.0


def test_verification_metrics_reports_percent_and_counts():
    metrics = verification_metrics([0.9, 0.8, 0.3], [0.1, 0.4, 0.2, 0.85])
    assert metrics["eer"] == pytest.approx(100 * 7 / 24, abs=1e-5)
    assert (metrics["target_trials"], metrics["nontarget_trials"]) == (3, 4)


@pytest.mark.parametrize(
    "pos, neg, message",
    [
        ([], [0.1], "no target"),
        ([0.2], [], "no non-target"),
        ([float("nan")], [0.1], "NaN"),
        (["a"], [0.1], "numbers"),
    ],
)
def test_bad_scores_raise_clear_errors(pos, neg, message):
    with pytest.raises((ValueError, TypeError), match=message):
        eer(pos, neg)

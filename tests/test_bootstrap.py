"""The speaker bootstrap on synthetic trials whose true EER is known: coverage, paired p-values, width."""

import numpy as np
import pytest
from bootstrap_reference import resampled_metrics_loop
from scipy.stats import kstest, norm

from segreconcat_aug.evaluation.bootstrap import (
    SpeakerWeights,
    infer_test_speakers,
    paired_difference,
    percentile_interval,
    resampled_metrics,
    speaker_counts,
    trial_design,
)
from segreconcat_aug.evaluation.metrics import (
    eer,
    min_dcf,
)

# Scores of a crossed design (every enrollment model x every test utterance, as the challenge's lists):
# target = MU + a[speaker] + noise, non-target = b[enroll] + c[test speaker] + noise.
MU, SD_TARGET_SPEAKER, SD_NONTARGET_SPEAKER, SD_NOISE = 2.0, 1.0, 0.7, 1.0


def true_eer() -> float:
    """EER (%) of the population: both score distributions are normal with known spreads."""
    sd_target = np.hypot(SD_TARGET_SPEAKER, SD_NOISE)
    sd_nontarget = np.sqrt(2 * SD_NONTARGET_SPEAKER**2 + SD_NOISE**2)
    return 100 * norm.cdf(-MU / (sd_target + sd_nontarget))


def simulate(rng, speakers=30, utterances=3, speaker_sd=(SD_TARGET_SPEAKER, SD_NONTARGET_SPEAKER)):
    """``(enroll, test speakers, test utterances, targets, scores, (enroll index, utterance index))``."""
    a = rng.normal(0, speaker_sd[0], speakers)
    b, c = rng.normal(0, speaker_sd[1], (2, speakers))
    enroll = np.repeat(np.arange(speakers), speakers * utterances)
    utterance = np.tile(np.arange(speakers * utterances), speakers)
    test = utterance // utterances
    targets = enroll == test
    scores = np.where(targets, MU + a[enroll], b[enroll] + c[test]) + rng.normal(0, SD_NOISE, len(enroll))
    names = np.array([f"spk{k:03d}" for k in range(speakers)])
    utts = [f"{names[u // utterances]}-{u % utterances}" for u in utterance]
    return list(names[enroll]), list(names[test]), utts, targets, scores, (enroll, utterance)


def speaker_interval(enroll, test_speakers, targets, scores, resamples, seed):
    design = trial_design(enroll, test_speakers, targets)
    weights = SpeakerWeights(design, speaker_counts([design], resamples, seed))
    return percentile_interval(resampled_metrics(scores, targets, weights, ())["eer"])


def test_interval_covers_the_true_eer_about_95_percent_of_the_time():
    truth, repetitions = true_eer(), 200
    rng = np.random.default_rng(2024)
    covered, half_widths, points = 0, [], []
    for repetition in range(repetitions):
        enroll, test, _, targets, scores, _ = simulate(rng)
        interval = speaker_interval(enroll, test, targets, scores, 200, repetition)
        covered += interval["low"] <= truth <= interval["high"]
        half_widths.append((interval["high"] - interval["low"]) / 2)
        points.append(100 * eer(scores[targets], scores[~targets]).eer)
    # 200 repetitions: the binomial standard error of a 95 % rate is 1.5 points; percentile intervals
    # from 30 speakers run slightly short of nominal, hence the lower bound 3.5 errors below.
    assert 0.89 <= covered / repetitions <= 0.995
    # Nor too wide: a 95 % interval's half-width is about 1.96 times the spread of the EER from one
    # simulated experiment to the next (measured 1.01 times; 99 % intervals give 1.28, 90 % ones 0.86,
    # and that spread is known to about 5 % from 200 experiments).
    ratio = np.mean(half_widths) / (1.96 * np.std(points, ddof=1))
    assert 0.88 <= ratio <= 1.12


def paired_null_p_values(noise: str, repetitions: int = 150) -> np.ndarray:
    """p-values of A vs B where both are the same model plus noise of the given kind (no true difference)."""
    rng = np.random.default_rng(7)
    p_values = []
    for repetition in range(repetitions):
        enroll, test, _, targets, scores, (models, utterances) = simulate(rng, speakers=20)
        speaker_of_utterance = utterances // 3
        if noise == "speaker":  # each model represents each speaker (enrolled or tested) a bit differently
            a, b = (
                scores
                + rng.normal(0, 0.5, models.max() + 1)[models]
                + rng.normal(0, 0.5, models.max() + 1)[speaker_of_utterance]
                for _ in range(2)
            )
        else:  # independent noise on every trial
            a, b = (scores + rng.normal(0, 0.5, len(scores)) for _ in range(2))
        design = trial_design(enroll, test, targets)
        weights = SpeakerWeights(design, speaker_counts([design], 200, repetition))
        eer_a = resampled_metrics(a, targets, weights, ())["eer"]
        eer_b = resampled_metrics(b, targets, weights, ())["eer"]
        point_a, point_b = 100 * eer(a[targets], a[~targets]).eer, 100 * eer(b[targets], b[~targets]).eer
        p_values.append(paired_difference(eer_a, eer_b, point_a, point_b)["p_value"])
    return np.array(p_values)


def test_paired_p_values_are_uniform_for_the_same_model_plus_noise():
    p_values = paired_null_p_values("speaker")
    assert kstest(p_values, "uniform").pvalue > 0.01
    assert np.mean(p_values < 0.05) <= 0.10 and np.mean(p_values < 0.2) >= 0.1


def test_paired_test_is_conservative_when_attackers_differ_by_trial_noise_only():
    # Resampling speakers also resamples the trial-level noise inside each speaker pair (several
    # times over): the test then rejects less often than 5 %, never more (docs/evaluation.md).
    assert np.mean(paired_null_p_values("trial", 100) < 0.05) <= 0.05


def test_paired_test_detects_a_real_difference():
    rng = np.random.default_rng(3)
    enroll, test, _, targets, scores, _ = simulate(rng, speakers=40)
    better = scores + 1.5 * targets  # the same trials, targets separated further
    design = trial_design(enroll, test, targets)
    weights = SpeakerWeights(design, speaker_counts([design], 500, 0))
    a, b = (resampled_metrics(s, targets, weights, ())["eer"] for s in (better, scores))
    result = paired_difference(
        a,
        b,
        100 * eer(better[targets], better[~targets]).eer,
        100 * eer(scores[targets], scores[~targets]).eer,
    )
    assert result["difference"] < 0 and result["high"] < 0 and result["significant"]


class TrialWeights:
    """The naive alternative: trials resampled independently (targets and non-targets apart)."""

    def __init__(self, targets, resamples: int, seed: int):
        self.targets = np.asarray(targets, dtype=bool)
        self.resamples = resamples
        self.seed = seed

    def chunk(self, start: int, stop: int) -> np.ndarray:
        weights = np.zeros((stop - start, len(self.targets)), dtype=np.int32)
        for b in range(start, stop):
            rng = np.random.default_rng([self.seed, b])
            for mask in (self.targets, ~self.targets):
                where = np.flatnonzero(mask)
                weights[b - start, where] = np.bincount(
                    rng.integers(0, len(where), len(where)), minlength=len(where)
                )
        return weights


def test_speaker_bootstrap_is_wider_than_trial_bootstrap_under_speaker_correlation():
    rng = np.random.default_rng(5)
    enroll, test, _, targets, scores, _ = simulate(rng, speakers=30, speaker_sd=(1.5, 1.0))
    by_speaker = speaker_interval(enroll, test, targets, scores, 400, 1)
    by_trial = percentile_interval(
        resampled_metrics(scores, targets, TrialWeights(targets, 400, 1), ())["eer"]
    )
    assert by_speaker["high"] - by_speaker["low"] > 1.3 * (by_trial["high"] - by_trial["low"])


def test_vectorized_equals_the_per_resample_loop_and_the_point_metrics():
    rng = np.random.default_rng(1)
    enroll, test, _, targets, scores, _ = simulate(rng, speakers=12)
    scores = np.round(scores, 1)  # ties
    design = trial_design(enroll, test, targets)
    weights = SpeakerWeights(design, speaker_counts([design], 50, 3))
    fast = resampled_metrics(scores, targets, weights, (0.01, 0.05))
    slow = resampled_metrics_loop(scores, targets, weights, (0.01, 0.05))
    for name in fast:
        np.testing.assert_allclose(fast[name], slow[name], rtol=0, atol=1e-9)

    from test_measures import EveryTrialOnce

    once = resampled_metrics(scores.astype(np.float32), targets, EveryTrialOnce(len(scores)), (0.01,))
    pos, neg = scores[targets].astype(np.float32), scores[~targets].astype(np.float32)
    assert once["eer"][0] == pytest.approx(100 * eer(pos, neg).eer, abs=1e-4)
    assert once["min_dcf_0.01"][0] == pytest.approx(min_dcf(pos, neg, 0.01).min_dcf, abs=1e-9)


def test_same_seed_same_resamples_and_shared_speakers_drawn_together():
    rng = np.random.default_rng(2)
    enroll, test, _, targets, _, _ = simulate(rng, speakers=6)
    dev, test_list = trial_design(enroll, test, targets), trial_design(enroll, test, targets)
    first = speaker_counts([dev, test_list], 20, 9)
    assert all(np.array_equal(first[k], speaker_counts([dev], 20, 9)[k]) for k in first)
    other = trial_design(["x", "x", "y", "y"], ["x", "y", "y", "x"], [True, False, True, False])
    both = speaker_counts([dev, other], 20, 9)
    assert sum(both[k] for k in ("x", "y")).tolist() == [2] * 20  # its own stratum, resampled to its size
    assert sum(both[k] for k in dev.speakers).tolist() == [6] * 20


def test_too_few_speakers_or_targets_give_an_undefined_interval_with_the_reason():
    one_target = trial_design(["a", "a", "b"], ["a", "b", "a"], [True, False, False])
    assert "1 target trial" in one_target.problem
    one_speaker = trial_design(["a"] * 4, ["a", "a", "b", "c"], [True, True, False, False])
    assert "one speaker (a)" in one_speaker.problem
    interval = percentile_interval(np.linspace(0, 1, 10), problem=one_speaker.problem)
    assert interval["low"] is None and interval["high"] is None and "one speaker" in interval["reason"]
    # Perfectly separated trials: every resample has EER 0; no zero-width interval.
    assert percentile_interval(np.zeros(100))["low"] is None


def test_test_speakers_are_inferred_from_target_trials():
    rng = np.random.default_rng(4)
    enroll, test, utts, targets, _, _ = simulate(rng, speakers=5)
    assert infer_test_speakers(enroll, utts, targets) == test

"""The privacy metrics under the speaker bootstrap equal the metrics of each resample's list built out.

A resample draws speakers with replacement; its list has one person per drawn copy: copy ``i`` of
speaker ``k`` keeps ``k``'s target trials, and meets every copy of every other speaker in non-target
trials (the weights ``w_k`` and ``w_e * w_s`` of :mod:`segreconcat_aug.evaluation.bootstrap`). The vectorized
:meth:`ListPrivacy.resampled` must give, resample by resample, what :meth:`ListPrivacy.point` (equal to
the reference code, tests/test_privacy.py) gives on that list.
"""

from pathlib import Path

import numpy as np
import pytest
from test_privacy import singling_out_by_definition

from segreconcat_aug.evaluation import privacy
from segreconcat_aug.evaluation.bootstrap import SpeakerWeights, resampled_metrics, speaker_counts
from segreconcat_aug.evaluation.intervals import subset_design
from segreconcat_aug.evaluation.score_files import ScoreFile, read_score_file

FIXTURES = Path(__file__).parent / "fixtures" / "privacy"
RESAMPLES = 6


def built_out(found, design, counts: dict) -> ScoreFile:
    """The resample's list: every drawn copy a person of its own (``<id>#<copy>``)."""
    rows = []
    names = design.speakers
    for e, t, target, score, e_unit, s_unit in zip(
        found.enroll, found.test, found.targets, found.scores, design.enroll_units, design.test_units
    ):
        ce, cs = counts[names[e_unit]], counts[names[s_unit]]
        if target:
            rows += [(f"{e}#{i}", f"{t}#{i}", True, score, f"{names[s_unit]}#{i}") for i in range(ce)]
        else:
            rows += [
                (f"{e}#{i}", f"{t}#{j}", False, score, f"{names[s_unit]}#{j}")
                for i in range(ce)
                for j in range(cs)
            ]
    enroll, test, targets, scores, speakers = zip(*rows)
    return ScoreFile(
        list(enroll), list(test), np.array(targets), np.array(scores, dtype=np.float32), list(speakers)
    )


@pytest.fixture(scope="module", params=["random.txt", "tied.txt"])
def resampled(request):
    found = read_score_file(FIXTURES / request.param)
    design, _ = subset_design(found)
    weights = SpeakerWeights(design, speaker_counts([design], RESAMPLES, seed=11))
    # The last "resample" draws every speaker once: the point values themselves.
    weights.unit_counts = np.vstack([weights.unit_counts, np.ones((1, len(design.speakers)), np.int32)])
    weights.resamples += 1
    options = privacy.PrivacyOptions(singling_out_folds=2)
    metrics = privacy.ListPrivacy(found, design, options)
    return request.param, found, design, weights, options, metrics, metrics.resampled(weights)


def test_every_resample_equals_its_list_built_out(resampled):
    name, found, design, weights, options, metrics, values = resampled
    compared = ["linkability", "zebra_dece_bits", "zebra_max_abs_log10_lr", "cllr", "min_cllr", "rocch_eer"]
    compared += ["rank1", "top5"] + (["per_speaker_eer_share_below"] if name == "random.txt" else [])
    defined = {metric: 0 for metric in compared}
    for b in range(weights.resamples):
        counts = dict(zip(design.speakers, weights.unit_counts[b].tolist()))
        explicit = built_out(found, design, counts)
        explicit_design, _ = subset_design(explicit)
        expected = privacy.ListPrivacy(explicit, explicit_design, options).point()
        for metric in compared:
            if expected[metric] is None:
                assert np.isnan(values[metric][b]), (metric, b)
            else:
                assert values[metric][b] == pytest.approx(expected[metric], abs=1e-9), (metric, b)
                defined[metric] += 1
        # pi_link: only strictly higher scores beat the true speaker (legal_eval's convention).
        identification = privacy.Identification(
            privacy.list_structure(
                explicit.enroll, explicit.test, explicit.targets, explicit.scores, explicit_design
            )
        )
        ones = np.ones((1, len(explicit_design.speakers)), dtype=np.int64)
        assert values["pi_link"][b] == pytest.approx(
            identification.rates(ones, 1, strict=True)[0] / 100, abs=1e-12
        )
        assert values["singling_out"][b] == pytest.approx(
            singling_out_by_definition(found, options, counts), abs=1e-12
        )
    assert all(count >= 2 for count in defined.values()), defined  # the comparisons were not vacuous


def test_the_resamples_vary_and_unit_weights_give_the_point(resampled):
    _, _, _, weights, _, metrics, values = resampled
    point = metrics.point()
    for metric, samples in values.items():
        if point[metric] is not None:
            assert samples[-1] == pytest.approx(point[metric], abs=1e-9), metric
            assert np.nanstd(samples[:-1]) > 0, metric


def test_speaker_eers_are_resampled_metrics_of_their_weighted_trials(resampled):
    _, found, design, weights, _, metrics, _ = resampled
    risk = metrics.speaker_risk
    fast = risk.resampled(weights.unit_counts)

    class ImpostorWeights:  # targets 1, a non-target w_s: the speaker's own trials in the resamples
        def __init__(self, trials):
            self.trials, self.resamples = trials, weights.resamples

        def chunk(self, start, stop):
            w = weights.unit_counts[start:stop][:, design.test_units[self.trials]].astype(np.int32)
            w[:, found.targets[self.trials]] = 1
            return w

    for k, unit in enumerate(risk.speakers):
        trials = np.flatnonzero(design.enroll_units == unit)
        expected = resampled_metrics(found.scores[trials], found.targets[trials], ImpostorWeights(trials), ())
        np.testing.assert_array_equal(fast[:, k], expected["eer"])


def test_a_speaker_drawn_twice_is_two_people():
    """Hand-checked: two enrolled speakers, one drawn twice; its copies are candidates against each other's
    utterances in identification only through their own models."""
    found = read_score_file(FIXTURES / "random.txt")
    design, _ = subset_design(found)
    metrics = privacy.ListPrivacy(found, design)
    counts = np.zeros((1, len(design.speakers)), dtype=np.int64)
    a, b = design.speakers.index("s00"), design.speakers.index("s01")
    counts[0, [a, b]] = [2, 1]
    ident = metrics.identification
    # Utterances of s00 (weight 2 each) and s01: ranked against the drawn copies of the other speaker only.
    expected_hits = expected_total = 0
    for utt_unit, column in zip(ident.utterance_units, ident.columns):
        if utt_unit not in (a, b):
            continue
        other = b if utt_unit == a else a
        row = {u: k for k, u in enumerate(ident.structure.enrolled)}
        beaten = ident.structure.matrix[row[other], column] >= ident.structure.matrix[row[utt_unit], column]
        copies = counts[0, utt_unit]
        expected_hits += copies * (counts[0, other] * beaten == 0)
        expected_total += copies
    assert ident.rates(counts, 1)[0] == pytest.approx(100 * expected_hits / expected_total)


def test_a_resample_with_one_histogram_bin_has_no_linkability():
    """Resample weights with 10-19 weighted target trials give VPC's histogram one bin, whose integral is
    0 whatever the scores: NaN, as linkability() of the repeated list says (undefined), not 0.0."""
    found = read_score_file(FIXTURES / "random.txt")  # 48 targets, 636 non-targets
    sorted_trials = privacy.ListPrivacy(found, subset_design(found)[0]).sorted
    targets = np.flatnonzero(found.targets)
    rows = []
    for kept, copies in ((10, 1), (19, 1), (6, 3), (20, 1), (30, 2)):  # weighted targets 10, 19, 18, 20, 60
        w = np.ones(len(found.targets), dtype=np.int64)
        w[targets] = 0
        w[targets[:kept]] = copies
        rows.append(w)
    values = sorted_trials.linkability(np.stack(rows))
    scores = found.scores.astype(np.float64)
    for w, value in zip(rows, values):
        repeated = np.repeat(scores, w)
        expected = privacy.linkability(
            repeated[np.repeat(found.targets, w)], repeated[~np.repeat(found.targets, w)]
        )
        if expected.value is None:
            assert np.isnan(value) and "bin(s)" in expected.reason
        else:
            assert value == pytest.approx(expected.value, abs=1e-12)
    assert np.isnan(values[:3]).all() and np.isfinite(values[3:]).all()

"""Privacy metrics equal the field's reference code on fixed score sets (random, tied, separable, the demo's).

The reference values in ``fixtures/privacy/reference_values.json`` were computed by the VoicePrivacy 2024
metrics and ZEBRA themselves (commits named in the file), run unchanged outside this repository by
``benchmarks/privacy_reference.py``; pi_link and Singling Out come from ``legal_eval`` (installed) and
from their definitions written out here; identification and the per-speaker EER from brute force.
"""

import json
from pathlib import Path

import numpy as np
import pytest

from segreconcat_aug.evaluation import privacy
from segreconcat_aug.evaluation.intervals import subset_design
from segreconcat_aug.evaluation.metrics import eer
from segreconcat_aug.evaluation.score_files import read_score_file

FIXTURES = Path(__file__).parent / "fixtures" / "privacy"
REFERENCE = json.loads((FIXTURES / "reference_values.json").read_text(encoding="utf-8"))
TOLERANCE = 1e-9  # every reference here is deterministic
LISTS = ["random.txt", "tied.txt", "separable.txt", "demo_dev_f.txt", "demo_test_m.txt"]


def scores_of(name):
    """``(target scores, non-target scores)`` of a fixed set, as float32 values in float64."""
    if name.endswith(".npz"):
        with np.load(FIXTURES / name) as data:
            scores, targets = data["scores"], data["targets"]
    else:
        found = read_score_file(FIXTURES / name)
        scores, targets = found.scores, found.targets
    scores = scores.astype(np.float64)
    return scores[targets], scores[~targets]


def list_privacy(name, options=None):
    found = read_score_file(FIXTURES / name)
    design, _ = subset_design(found)
    return found, design, privacy.ListPrivacy(found, design, options)


@pytest.mark.parametrize("name", sorted(REFERENCE["sets"]))
def test_linkability_zebra_and_cllr_equal_the_reference_code(name):
    reference = REFERENCE["sets"][name]
    tar, non = scores_of(name)
    assert reference["target_trials"] == len(tar) and reference["nontarget_trials"] == len(non)
    assert abs(privacy.cllr(tar, non) - reference["cllr"]) <= TOLERANCE
    targets = np.arange(len(tar) + len(non)) < len(tar)
    found = privacy.CalibrationMetrics(np.concatenate([tar, non]), targets).point
    assert abs(found["min_cllr"] - reference["min_cllr"]) <= TOLERANCE
    assert abs(found["rocch_eer"] - 100 * reference["rocch_eer"]) <= 100 * TOLERANCE  # ours in %
    for source in ("zebra", "zebra_vpc_port"):  # the ZEBRA repository and VPC 2024's copy agree
        assert abs(found["zebra_dece_bits"] - reference[source]["dece_bits"]) <= TOLERANCE
        assert abs(found["zebra_max_abs_log10_lr"] - reference[source]["max_abs_log10_lr"]) <= TOLERANCE
        assert privacy.zebra_tag(found["zebra_max_abs_log10_lr"]) == reference[source]["tag"]
    link = privacy.linkability(tar, non)
    if len(tar) < privacy.LINKABILITY_MIN_TARGETS:
        # VPC builds one bin and its integral is 0 whatever the scores: undefined here, with the reason.
        assert reference["linkability"]["value"] == 0.0 and len(reference["linkability"]["D"]) == 1
        assert link.value is None and "< 20" in link.reason
    else:
        assert abs(link.value - reference["linkability"]["value"]) <= TOLERANCE
        for ours, key in (
            (link.local, "D"),
            (link.bin_centers, "bin_centers"),
            (link.bin_edges, "bin_edges"),
        ):
            assert len(ours) == len(reference["linkability"][key])
            assert np.abs(ours - np.asarray(reference["linkability"][key])).max() <= TOLERANCE


def test_the_sets_cover_ties_separation_and_vpc_s_full_histogram():
    tar, non = scores_of("tied.txt")
    assert np.intersect1d(tar, non).size >= 3  # scores shared by targets and non-targets
    tar, non = scores_of("separable.txt")
    assert tar.min() > non.max()
    assert REFERENCE["sets"]["separable.txt"]["min_cllr"] == 0.0
    assert REFERENCE["sets"]["separable.txt"]["zebra"]["dece_bits"] == pytest.approx(1 / np.log(4))
    assert len(REFERENCE["sets"]["large.npz"]["linkability"]["D"]) == 100


@pytest.mark.parametrize("name", LISTS)
def test_the_report_path_gives_the_reference_values(name):
    """:meth:`ListPrivacy.point` (what evaluation writes) gives the same numbers as the reference code."""
    reference = REFERENCE["sets"][name]
    _, _, metrics = list_privacy(name)
    point = metrics.point()
    assert abs(point["min_cllr"] - reference["min_cllr"]) <= TOLERANCE
    assert abs(point["rocch_eer"] - 100 * reference["rocch_eer"]) <= 100 * TOLERANCE
    assert abs(point["zebra_dece_bits"] - reference["zebra"]["dece_bits"]) <= TOLERANCE
    assert abs(point["zebra_max_abs_log10_lr"] - reference["zebra"]["max_abs_log10_lr"]) <= TOLERANCE
    assert point["zebra_tag"] == reference["zebra"]["tag"]
    assert abs(point["cllr"] - reference["cllr"]) <= TOLERANCE
    if point["linkability"] is None:
        assert "linkability" in point["undefined_because"]
    else:
        assert abs(point["linkability"] - reference["linkability"]["value"]) <= TOLERANCE


def _trials(found):
    return {
        (e, t): (float(s), bool(g))
        for e, t, s, g in zip(found.enroll, found.test, found.scores, found.targets)
    }


@pytest.mark.parametrize("name", ["random.txt", "tied.txt", "demo_dev_m.txt"])
def test_identification_and_pi_link_by_brute_force_and_legal_eval(name):
    from legal_eval.io import ScoreMatrix
    from legal_eval.metrics.linkability import count_beaters, linkability

    found, design, metrics = list_privacy(name)
    trials = _trials(found)
    enrolled = sorted(set(found.enroll))
    owners = {t: e for (e, t), (_, target) in trials.items() if target}
    ranks, strict = [], []
    for utterance, owner in owners.items():
        true = trials[(owner, utterance)][0]
        others = [trials[(e, utterance)][0] for e in enrolled if e != owner]
        ranks.append(1 + sum(score >= true for score in others))  # a tie counts against the true speaker
        strict.append(sum(score > true for score in others) == 0)
    point = metrics.point()
    assert point["rank1"] == pytest.approx(100 * np.mean(np.array(ranks) == 1), abs=1e-12)
    if len(enrolled) > 5:
        assert point["top5"] == pytest.approx(100 * np.mean(np.array(ranks) <= 5), abs=1e-12)
    else:
        assert point["top5"] is None and "by construction" in point["undefined_because"]["top5"]
    # legal_eval on a score matrix built here: pi_link at every N' of the sweep, exact estimator.
    columns = sorted(owners)
    matrix = ScoreMatrix(
        np.array([[trials[(e, t)][0] for t in columns] for e in enrolled]),
        enrolled,
        [owners[t] for t in columns],
        {},
    )
    beaters = count_beaters(matrix)
    for size, value in point["pi_link_sweep"].items():
        assert value == pytest.approx(
            linkability(matrix, size, estimator="exact", beaters=beaters)[0], abs=1e-12
        )
    assert point["pi_link"] == pytest.approx(np.mean(strict), abs=1e-12)
    assert set(point["pi_link_sweep"]) >= {2, len(enrolled)}


def singling_out_by_definition(found, options, weights=None):
    """pi_sing at N = every test speaker, from Vauquier et al.'s definition, on legal_eval's splits.

    ``weights``: speaker -> copies in a bootstrap resample (a predicate meets no copy of its own speaker).
    """
    from legal_eval.embeddings import build_conversations
    from legal_eval.metrics.singling_out import isolation_threshold

    trials = _trials(found)
    speakers = dict(zip(found.test, found.test_speakers))
    spk2utt = {}
    for utterance in sorted(speakers, key=lambda u: (speakers[u], u)):
        spk2utt.setdefault(speakers[utterance], []).append(utterance)
    weights = weights or {}
    hits = total = 0.0
    for fold in range(options.singling_out_folds):
        embedding = {u: np.array([float(k)]) for k, u in enumerate(sorted(speakers))}
        name_of = {k: u for u, k in ((u, int(v[0])) for u, v in embedding.items())}
        conversations = build_conversations(
            spk2utt, embedding, 1, options.max_calibration, options.seed, fold
        )
        for predicate in sorted(set(found.enroll)):
            if predicate not in conversations:
                continue
            calibration, tests = [], []
            for speaker, conversation in conversations.items():
                copies = 1 if speaker == predicate else weights.get(speaker, 1)
                for c in conversation.calibration:
                    calibration += [trials[(predicate, name_of[int(c[0])])][0]] * copies
                tests += [trials[(predicate, name_of[int(conversation.test[0])])][0]] * copies
            own = len(conversations[predicate].calibration)
            if len(calibration) < own + 1:
                continue
            threshold = isolation_threshold(np.array(calibration), own)
            count = weights.get(predicate, 1)
            hits += count * (sum(score > threshold for score in tests) == 1)
            total += count
    return hits / total


@pytest.mark.parametrize("name", ["random.txt", "demo_test_f.txt"])
def test_singling_out_is_legal_eval_s_and_its_definition(name):
    options = privacy.PrivacyOptions(singling_out_folds=3)
    found, design, metrics = list_privacy(name, options)
    point = metrics.point()
    expected = singling_out_by_definition(found, options)
    assert point["singling_out"] == pytest.approx(expected, abs=1e-12)
    ones = np.ones((1, len(design.speakers)), dtype=np.int64)
    assert metrics.singling.full_population(ones)[0] == pytest.approx(expected, abs=1e-12)
    sweep = point["singling_out_sweep"]
    assert min(sweep) == 2 and max(sweep) == metrics.singling.n_dataset
    assert all(0 <= value <= 1 for value in sweep.values())


def test_per_speaker_eer_by_brute_force():
    found, design, metrics = list_privacy("random.txt", privacy.PrivacyOptions(worst_speakers=3))
    point = metrics.point()
    expected = {}
    for speaker in sorted(set(found.enroll)):
        mine = np.array(found.enroll) == speaker
        expected[speaker] = (
            100 * eer(found.scores[mine & found.targets], found.scores[mine & ~found.targets]).eer
        )
    assert point["per_speaker_eer"] == pytest.approx(expected, abs=1e-12)
    below = [s for s, value in expected.items() if value < 10]
    assert point["per_speaker_eer_share_below"] == pytest.approx(100 * len(below) / len(expected))
    assert [s for s, _ in point["per_speaker_eer_worst"]] == sorted(expected, key=lambda s: (expected[s], s))[
        :3
    ]
    assert point["per_speaker_eer_median"] == pytest.approx(np.median(list(expected.values())))


def test_undefined_metrics_say_why():
    tar, non = [0.9] * 15, list(np.linspace(0, 0.5, 60))
    assert privacy.linkability(tar, non).value is None
    assert privacy.linkability([0.5] * 30, [0.5] * 30).reason == "every score is the same: no histogram"
    assert privacy.zebra_tag(0.0) == "0" and privacy.zebra_tag(6.5) == "F"
    # Raw scores with a posterior of 0 (VPC's cllr returns inf).
    assert privacy.cllr([-800.0, 1.0], [-1.0]) == np.inf

"""The protocol table and what it drives: layouts, sets, languages, the 2026 scoring conventions, tables."""

import json

import numpy as np
import pyloudnorm
import pytest
from vpac_fixture import fixture_audio
from vpc2026_fixture import TRACK2_EVAL, build_track2_layout

from segreconcat_aug.data.protocols import PROTOCOLS, ProtocolError, check_protocol_options, get_protocol
from segreconcat_aug.data.vpac import VPACLayoutError, detect_layout, system_folders, training_folder
from segreconcat_aug.errors import UserError
from segreconcat_aug.evaluation.bootstrap import speaker_counts
from segreconcat_aug.evaluation.embeddings import (
    SILENCE_NOISE,
    WAVE_CACHE_NAMES,
    vpc2026_normalize_wave,
    vpc_normalize_wave,
    wave_normalization,
)
from segreconcat_aug.evaluation.intervals import subset_design, system_intervals
from segreconcat_aug.evaluation.metrics import verification_metrics
from segreconcat_aug.evaluation.references import load_reference_results
from segreconcat_aug.evaluation.tables import comparison_table
from segreconcat_aug.evaluation.trials import (
    SubsetScores,
    SystemResults,
    TrialListError,
    gender_rows,
    load_system_trials,
)
from segreconcat_aug.options import TrainingOptions, validate_hparams_file

REPO_HPARAMS = "hparams/ecapa_segreconcat.yaml"


@pytest.fixture(scope="module")
def track2_root(tmp_path_factory):
    return build_track2_layout(tmp_path_factory.mktemp("vpc2026-track2"))


def test_each_protocol_names_its_sets_subsets_and_conventions_in_one_table():
    vpac, track1, track2 = (PROTOCOLS[name] for name in ("vpac2024", "vpc2026-track1", "vpc2026-track2"))
    assert vpac.sets() == (
        "train-clean-360",
        "libri_dev_enrolls",
        "libri_test_enrolls",
        "libri_dev_trials_f",
        "libri_dev_trials_m",
        "libri_test_trials_f",
        "libri_test_trials_m",
    )
    assert track1.sets() == (
        "train-clean-360",
        "libri_dev_enrolls",
        "libri_test_enrolls",
        "libri_dev_trials_mixed",
        "libri_test_trials_mixed",
    )
    assert [track2.train_set(lang) for lang in ("en", "de", "fr", "es")] == [
        "train_english",
        "train_german",
        "train_french",
        "train_spanish",
    ]
    assert (
        track2.scored_languages == ("en", "de", "fr", "es")
        and track2.trial_set("dev_mixed", "ja") == "ja_dev_trials_mixed"
    )
    assert vpac.table.columns[-1] == track1.table.columns[-1] == "avg"
    assert track1.table.averages == {"avg": ("dev_mixed", "test_mixed")}
    # The scoring conventions: VPAC 2024's for the paper's protocol, the 2026 code's for both tracks.
    assert vpac.conventions == {
        "eval_normalize_wave": "vpc2024",
        "eval_skip_missing_trials": False,
        "eval_enroll_mean": "raw",
        "eval_trials_from": "anonymized",
        "eval_duplicate_trials": "collapse",
        "eval_resample": False,
    }
    assert (
        track1.conventions
        == track2.conventions
        == {
            "eval_normalize_wave": "vpc2026",
            "eval_skip_missing_trials": True,
            "eval_enroll_mean": "raw",
            "eval_trials_from": "original",
            "eval_duplicate_trials": "collapse",
            "eval_resample": True,
        }
    )


def test_options_that_do_not_fit_the_protocol_are_refused_with_the_fix():
    with pytest.raises(
        ProtocolError, match="trains one attacker per language and got no language: give --language="
    ):
        check_protocol_options({"protocol": "vpc2026-track2", "language": None})
    with pytest.raises(ProtocolError, match="vpc2026-track1 is English only: language 'de'"):
        check_protocol_options({"protocol": "vpc2026-track1", "language": "de"})
    with pytest.raises(
        ProtocolError, match=r"eval_subsets: \['dev_f'\] are not subsets of protocol vpc2026-track1"
    ):
        check_protocol_options({"protocol": "vpc2026-track1", "language": None, "eval_subsets": ["dev_f"]})
    with pytest.raises(UserError, match="option protocol: 'vpc2025': input should be 'vpac2024'"):
        validate_hparams_file(REPO_HPARAMS, {"data_folder": "/x", "protocol": "vpc2025"}, TrainingOptions)
    values = validate_hparams_file(
        REPO_HPARAMS,
        {
            "data_folder": "/x",
            "protocol": "vpc2026-track2",
            "language": "de",
            "eval_normalize_wave": "vpc2024",
        },
        TrainingOptions,
    )
    assert values["language"] == "de"


def test_both_layouts_are_read_as_shipped_and_overrides_can_be_scoped_to_one(tmp_path):
    (tmp_path / "B4" / "data" / "libri360_anon_B4").mkdir(parents=True)
    (tmp_path / "data" / "train-clean-360_B4").mkdir(parents=True)
    (tmp_path / "data" / "train-clean-360_sttts").mkdir(parents=True)
    scoped = {"vpac2024": {"B4": {"train-clean-360": "libri360_anon_B4"}}}  # the training YAML's default
    vpac = system_folders(tmp_path, "B4", scoped, sets=["train-clean-360"], layout="vpac2024")
    assert vpac["train-clean-360"] == tmp_path / "B4" / "data" / "libri360_anon_B4"
    # The same overrides do not touch the 2026 layout, where the folder has its plain name.
    vpc = system_folders(tmp_path, "B4", scoped, sets=["train-clean-360"], layout="vpc2026")
    assert vpc["train-clean-360"] == tmp_path / "data" / "train-clean-360_B4"
    assert (
        detect_layout(tmp_path, "B4", "vpc2026") == "vpc2026" and detect_layout(tmp_path, "B4") == "vpac2024"
    )
    assert detect_layout(tmp_path, "sttts") == "vpc2026"  # no <root>/sttts/data: the 2026 layout
    with pytest.raises(VPACLayoutError, match=r"suffixes present for train-clean-360: \['B4', 'sttts'\]"):
        system_folders(tmp_path, "B3", sets=["train-clean-360"], layout="vpc2026")
    with pytest.raises(VPACLayoutError, match="ships no training set for cn: name one with folder_overrides"):
        training_folder(tmp_path, "B4", protocol="vpc2026-track2", language="cn")


def test_track2_lists_read_speakers_from_utt2spk_and_trials_from_the_original_folder(track2_root, tmp_path):
    enrollments, trials = load_system_trials(track2_root, "BM1", protocol="vpc2026-track2", language="de")
    assert sorted(enrollments["dev"].speakers) == sorted(TRACK2_EVAL)  # MLS ids: spk_book_seq
    dev = trials["dev_mixed"]
    assert dev.path == track2_root / "data" / "de_dev_trials_mixed" / "trials"  # the original's list
    assert dev.audio_folder == track2_root / "data" / "de_dev_trials_mixed_BM1"  # the anonymized audio
    assert set(dev.spk2gender.values()) == {"F", "M"}
    assert len(dev) == 4 * 8 and dev.targets.sum() == 8  # every speaker x every test utterance
    # Neither folder has a list: the message names both.
    (track2_root / "data" / "de_test_trials_mixed" / "trials").rename(tmp_path / "moved")
    try:
        with pytest.raises(
            TrialListError,
            match="de_test_trials_mixed_BM1/trials: no such file, nor .*de_test_trials_mixed/trials",
        ):
            load_system_trials(track2_root, "BM1", protocol="vpc2026-track2", language="de")
    finally:
        (tmp_path / "moved").rename(track2_root / "data" / "de_test_trials_mixed" / "trials")


def test_the_2026_wave_normalization_block_size_and_fallbacks():
    wave = fixture_audio("19-198-0001")
    # 0.4 s and longer: the same as VPC 2024's.
    assert np.array_equal(vpc2026_normalize_wave(wave)[0], vpc_normalize_wave(wave)[0])
    # 0.3 s: block min(0.4, max(0.1, d - 1e-6)) = 0.299999 s (VPC 2024 took |d - 0.1| = 0.2 s).
    short = wave[8000:12800]
    meter = pyloudnorm.Meter(16000, block_size=0.3 - 1e-6)
    loud = pyloudnorm.normalize.loudness(short, meter.integrated_loudness(short), -30.0)
    ours, how = vpc2026_normalize_wave(short)
    assert how == "loudness" and np.array_equal(ours, (loud / np.abs(loud).max()).astype(np.float32))
    # 0.1 s: VPC 2024's block |d - 0.1| is 0, so it left the wave as it was; 2026 measures it (block 0.1 s).
    tenth = wave[8000:9600]
    assert vpc_normalize_wave(tenth)[1] is False and vpc2026_normalize_wave(tenth)[1] == "loudness"
    assert np.abs(vpc2026_normalize_wave(tenth)[0]).max() == pytest.approx(1.0)
    # Shorter than its 0.1 s block, or under 0.02 s, or gated away: divided by its own peak.
    for piece in (wave[8000:8800], wave[8000:8160], (1e-5 * np.sin(np.arange(16000) / 3)).astype(np.float32)):
        ours, how = vpc2026_normalize_wave(piece)
        assert how == "peak" and np.array_equal(ours, piece / np.abs(piece).max())
    # Silence (or NaN samples): tiny noise, never NaN, the same at every run.
    for bad in (np.zeros(16000, np.float32), np.r_[wave[:100], np.nan].astype(np.float32)):
        ours, how = vpc2026_normalize_wave(bad)
        assert (
            how == "noise"
            and np.isfinite(ours).all()
            and 0.5 * SILENCE_NOISE < ours.std() < 2 * SILENCE_NOISE
        )
        assert np.array_equal(ours, vpc2026_normalize_wave(bad)[0])


def test_vpac_defaults_name_the_embedding_cache_as_before():
    # eval_normalize_wave: null under vpac2024 is VPC 2024's normalization, cached under the name True had,
    # so embeddings cached before the protocols existed are reused and the numbers stay the same.
    assert wave_normalization(get_protocol("vpac2024").convention("eval_normalize_wave", None)) == "vpc2024"
    assert WAVE_CACHE_NAMES[wave_normalization(True)] == "vpc2024-pyloudnorm"


def _pooled_results(rng):
    """A pooled list: 3 female and 3 male speakers, each enrolled once and tested with 2 utterances, all pairs."""
    speakers = [f"f{k}" for k in range(3)] + [f"m{k}" for k in range(3)]
    genders = {s: "F" if s.startswith("f") else "M" for s in speakers}
    enroll, test, test_speakers = [], [], []
    for spk in speakers:
        for owner in speakers:
            for k in range(2):
                enroll.append(spk)
                test.append(f"{owner}-{k}")
                test_speakers.append(owner)
    targets = np.array([e == t for e, t in zip(enroll, test_speakers)])
    cross = np.array([genders[e] != genders[t] for e, t in zip(enroll, test_speakers)])
    scores = (rng.normal(size=len(targets)) + 2 * targets - 1.5 * cross).astype(np.float32)
    pooled = SubsetScores("dev_mixed", None, enroll, test, targets, scores, test_speakers=test_speakers)
    return pooled, genders


def test_pooled_lists_split_into_same_and_cross_gender_rows_and_resample_both_genders_together():
    rng = np.random.default_rng(3)
    pooled, genders = _pooled_results(rng)
    rows = gender_rows(pooled, genders)
    same, cross = rows["dev_mixed_same"], rows["dev_mixed_cross"]
    assert same.targets.sum() == cross.targets.sum() == pooled.targets.sum()
    assert (~same.targets).sum() + (~cross.targets).sum() == (~pooled.targets).sum()
    easy = verification_metrics(cross.target_scores, cross.nontarget_scores)["eer"]
    assert easy < verification_metrics(same.target_scores, same.nontarget_scores)["eer"]
    # One stratum holds the speakers of both genders: each resample draws 6 of them, from either gender.
    design, _ = subset_design(pooled)
    counts = speaker_counts([design], 200, seed=1)
    drawn = np.stack([counts[s] for s in design.speakers], axis=1)
    assert (drawn.sum(axis=1) == 6).all()
    female = drawn[:, :3].sum(axis=1)
    assert female.min() < 3 < female.max()
    results = SystemResults("B3", {"dev_mixed": pooled, **rows}, protocol="vpc2026-track1")
    for name, subset in results.subsets.items():
        results.metrics[name] = verification_metrics(subset.target_scores, subset.nontarget_scores)
    intervals = system_intervals(results, 200, 1)["intervals"]
    assert set(intervals) == {"dev_mixed", "dev_mixed_same", "dev_mixed_cross", "avg"}
    low, high = intervals["dev_mixed"]["eer"]["low"], intervals["dev_mixed"]["eer"]["high"]
    assert low <= results.metrics["dev_mixed"]["eer"] <= high and low < high
    assert intervals["avg"]["eer"] == intervals["dev_mixed"]["eer"]  # the only subset present


def test_published_2026_numbers_are_the_challenge_attacker_s_and_shown_only_beside_track1():
    rows = [row for row in load_reference_results() if row["table"] == "vpc2026-track1"]
    published = {row["system"]: (row["dev_mixed"], row["test_mixed"]) for row in rows}
    assert published == {"B3": (16.321, 14.243), "B4": (15.281, 11.133), "B5": (20.048, 17.051)}
    assert all("challenge attacker" in row["attacker"] and "WavLM" in row["attacker"] for row in rows)
    assert all(
        row["avg"] == pytest.approx((row["dev_mixed"] + row["test_mixed"]) / 2, abs=1e-4) for row in rows
    )
    row = {"dev_mixed": 30.0, "test_mixed": 20.0, "avg": 25.0}
    table = comparison_table(
        {("B3", "base"): row},
        ["B3"],
        "base",
        [],
        references=load_reference_results(),
        protocol="vpc2026-track1",
    )
    header, _, line = table.splitlines()
    assert header.split(" | ")[2:5] == ["dev mixed", "test mixed", "avg"]
    assert header.endswith("VPC 2026 challenge attacker (WavLM-Large+ECAPA) avg (published) |")
    assert line.endswith("| 15.28 |") and "paper" not in header
    assert json.dumps(PROTOCOLS["vpc2026-track2"].published) == "{}"  # no published Track 2 attacker numbers


def test_privacy_averages_follow_the_protocols_table():
    """A pooled list's privacy metric averages over dev_mixed and test_mixed, not over name prefixes;
    its same/cross gender rows are rows, not members of the average."""
    from segreconcat_aug.data.protocols import MIXED_TABLE
    from segreconcat_aug.evaluation.intervals import metric_problem, privacy_table

    metrics = {
        "dev_mixed": {"min_cllr": 0.4},
        "dev_mixed_cross": {"min_cllr": 0.0},
        "test_mixed": {"min_cllr": 0.8},
    }
    row = privacy_table(metrics, "min_cllr", MIXED_TABLE)
    assert row == {"dev_mixed": 0.4, "test_mixed": 0.8, "avg": pytest.approx(0.6)}
    metrics["test_mixed"] = {"min_cllr": None, "undefined_because": {"min_cllr": "no targets"}}
    assert "avg" not in privacy_table(metrics, "min_cllr", MIXED_TABLE)
    assert metric_problem(metrics, "avg", "min_cllr", MIXED_TABLE) == "test_mixed: no targets"

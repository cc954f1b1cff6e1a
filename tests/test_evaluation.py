"""Evaluation on the tiny VPAC layout: trials, whole-utterance embeddings, cosine scoring, bad input."""

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyloudnorm
import pytest
import soundfile
import torch
from hyperpyyaml import load_hyperpyyaml

from segreconcat_aug.data.audio import read_audio
from segreconcat_aug.data.kaldi import KaldiFormatError, read_kaldi_map, read_trials
from segreconcat_aug.errors import OptionError
from segreconcat_aug.evaluation.embeddings import EmbeddingCache, EmbeddingExtractor, duration_batches
from segreconcat_aug.evaluation.intervals import SUBSET_COLUMNS as SUBSETS
from segreconcat_aug.evaluation.score_files import read_score_file
from segreconcat_aug.evaluation.scoring import cosine_scores, normalize_scores, speaker_models
from segreconcat_aug.evaluation.system import EVAL_KEYS, evaluate_system, load_evaluation_hparams
from segreconcat_aug.evaluation.system_report import read_results
from segreconcat_aug.evaluation.trials import TrialListError, load_system_trials

# One pytest-xdist worker runs the module: its evaluated fixture (a whole evaluation) is computed once.
pytestmark = pytest.mark.xdist_group("evaluation")
REPO = Path(__file__).resolve().parents[1]
HPARAMS = REPO / "hparams" / "ecapa_segreconcat.yaml"
TINY = {"channels": [16, 16, 16, 16, 48], "attention_channels": 8, "lin_neurons": 16}


def tiny_overrides(vpac_root, output_folder, **extra):
    return {
        "data_folder": str(vpac_root),
        "system": "T8-5",
        "output_folder": str(output_folder),
        **TINY,
        **extra,
    }


def load_tiny_hparams(overrides):
    """The training YAML and its evaluation YAML with ``overrides``, each routed to the file that has it."""
    evaluation = {key: overrides[key] for key in EVAL_KEYS if key in overrides}
    evaluation = load_evaluation_hparams(REPO / "hparams" / "evaluate.yaml", evaluation)  # checked first
    with open(HPARAMS, encoding="utf-8") as fin:
        hparams = load_hyperpyyaml(fin, {k: v for k, v in overrides.items() if k not in EVAL_KEYS})
    return {**hparams, **evaluation}


def export_random_model(hparams) -> Path:
    """What recipes/train.py leaves behind: the embedding model's state_dict in the export folder."""
    torch.manual_seed(0)
    model = hparams["embedding_model"]
    for parameter in model.parameters():  # random but deterministic weights
        parameter.data.normal_(0, 0.3)
    export = Path(hparams["output_folder"]) / "export"
    export.mkdir(parents=True, exist_ok=True)
    torch.save(model.state_dict(), export / "embedding_model.ckpt")
    return export


@pytest.fixture(scope="module")
def evaluated(vpac_root, tmp_path_factory):
    torch.set_num_threads(1)
    output = tmp_path_factory.mktemp("run")
    hparams = load_tiny_hparams(tiny_overrides(vpac_root, output))
    hparams["eval_batching"] = (
        "exact"  # one at a time (the default): scores comparable with single embeddings
    )
    export_random_model(hparams)
    return hparams, evaluate_system(hparams, {"device": "cpu"})


def vpc_reference_wave(audio, rate=16000):
    """VPC 2024's extraction, step by step with pyloudnorm: -30 LUFS, divided by the peak, zeros trimmed."""
    duration = len(audio) / rate
    meter = pyloudnorm.Meter(
        rate, block_size=min(duration - 0.0001, abs(duration - 0.1)) if duration < 0.4 else 0.4
    )
    loud = pyloudnorm.normalize.loudness(audio, meter.integrated_loudness(audio), -30.0)
    return np.trim_zeros(np.divide(loud, np.amax(np.abs(loud))).astype(np.float32))


def _embed_alone(hparams, path):
    """Embedding of one whole utterance, computed directly with the YAML's modules on VPC's wave."""
    with torch.no_grad():
        wav = torch.from_numpy(vpc_reference_wave(read_audio(path))).unsqueeze(0)
        lengths = torch.ones(1)
        feats = hparams["mean_var_norm"](hparams["compute_features"](wav), lengths)
        return hparams["embedding_model"](feats, lengths).reshape(-1).numpy()


def test_end_to_end_scores_every_trial_as_the_challenge_does(evaluated, vpac_root):
    hparams, results = evaluated
    assert list(results.subsets) == ["dev_f", "dev_m", "test_f", "test_m"]
    data = vpac_root / "T8-5" / "data"
    for name, subset in results.subsets.items():
        part, gender = name.split("_")
        trials = read_trials(data / f"libri_{part}_trials_{gender}_T8-5" / "trials")
        assert subset.enroll == [t.enroll_speaker for t in trials]
        assert subset.test == [t.test_utterance for t in trials]
        assert subset.targets.tolist() == [t.target for t in trials]
        assert np.all(np.abs(subset.scores) <= 1.0 + 1e-6)
        metrics = results.metrics[name]
        assert (metrics["target_trials"], metrics["nontarget_trials"]) == (
            sum(t.target for t in trials),
            sum(not t.target for t in trials),
        )
    # One score recomputed independently: cosine(mean of enrollment embeddings, test embedding).
    subset = results.subsets["dev_m"]
    enroll_folder = data / "libri_dev_enrolls_T8-5"
    wav = read_kaldi_map(enroll_folder / "wav.scp")
    utt2spk = read_kaldi_map(enroll_folder / "utt2spk")
    speaker, test_utt = subset.enroll[0], subset.test[0]
    enroll = np.mean(
        [_embed_alone(hparams, vpac_root / wav[u]) for u in wav if utt2spk[u] == speaker], axis=0
    )
    trial_wav = read_kaldi_map(data / "libri_dev_trials_m_T8-5" / "wav.scp")
    test = _embed_alone(hparams, vpac_root / trial_wav[test_utt])
    expected = enroll @ test / np.linalg.norm(enroll) / np.linalg.norm(test)
    assert subset.scores[0] == pytest.approx(expected, abs=1e-4)


def test_reports_are_written_and_consistent(evaluated):
    hparams, results = evaluated
    folder = Path(hparams["output_folder"]) / "eval"
    saved = read_results(folder)
    assert saved["table"]["avg"] == pytest.approx(np.mean([saved["subsets"][s]["eer"] for s in SUBSETS]))
    _, _, targets, scores, _ = read_score_file(folder / "scores" / "test_f.txt")
    np.testing.assert_array_equal(scores, results.subsets["test_f"].scores)
    np.testing.assert_array_equal(targets, results.subsets["test_f"].targets)
    assert (folder / "det.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "| T8-5 |" in (folder / "results.md").read_text()


def test_rescoring_from_the_score_files_gives_the_report_they_came_from(evaluated, tmp_path):
    """docs/evaluation.md: rescore_folder recomputes every number from the score files, with the settings
    results.json recorded; unchanged score files give the same results.json, csv and md, byte for byte."""
    from segreconcat_aug.evaluation.rescore import rescore_folder

    hparams, _ = evaluated
    copy = tmp_path / "eval"
    shutil.copytree(
        Path(hparams["output_folder"]) / "eval", copy, ignore=shutil.ignore_patterns("embeddings")
    )
    before = {name: (copy / name).read_bytes() for name in ("results.json", "results.csv", "results.md")}
    written = rescore_folder(copy)
    assert {name: (copy / name).read_bytes() for name in before} == before
    assert written["privacy"].is_file() and "min_cllr" in read_results(copy)["subsets"]["dev_f"]


def test_rescoring_reads_the_embedding_cache(evaluated, monkeypatch):
    hparams, results = evaluated

    def no_model(*args, **kwargs):
        raise AssertionError("the cache should have every embedding")

    monkeypatch.setattr(EmbeddingExtractor, "embed_batch", no_model)
    again = evaluate_system(hparams, write_report=False)
    for name in results.subsets:
        np.testing.assert_array_equal(again.subsets[name].scores, results.subsets[name].scores)


def test_evaluate_recipe_command_line(evaluated, vpac_root):
    hparams, results = evaluated
    # Same output folder and model: the embeddings come from the cache the fixture filled.
    overrides = tiny_overrides(vpac_root, hparams["output_folder"])
    args = [f"--{key}={value}".replace(" ", "") for key, value in overrides.items()]
    done = subprocess.run(
        [sys.executable, str(REPO / "recipes" / "evaluate.py"), str(HPARAMS), *args, "--device=cpu"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "| dev F | dev M | dev avg | test F | test M | test avg | avg |" in done.stdout
    assert read_results(Path(hparams["output_folder"]) / "eval")["table"] == pytest.approx(
        results.table_row()
    )
    eval_folder = Path(hparams["output_folder"]) / "eval"  # keeps the recipe that ran, not cli.py
    assert (eval_folder / "evaluate.py").is_file() and not (eval_folder / "cli.py").exists()


def test_a_full_disk_is_one_line_leaves_no_result_file_and_the_rerun_gives_the_same_report(
    evaluated, vpac_root, tmp_path, monkeypatch, capsys
):
    """Issue 32, probe 6: OSError 28 while evaluate.py writes results.csv (simulated: the CSV writer fails
    after the header, as a full disk does) is one line, exit 2; no empty or cut results file is left, the
    eval folder and its embeddings are kept, and the rerun after space is freed gives the clean run's report."""
    import csv
    import errno
    import importlib.util

    from segreconcat_aug import cli

    spec = importlib.util.spec_from_file_location("evaluate_recipe", REPO / "recipes" / "evaluate.py")
    recipe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(recipe)
    monkeypatch.setitem(sys.modules, "evaluate_recipe", recipe)  # run_main names the recipe from its file
    hparams, _ = evaluated
    base = [
        str(HPARAMS),
        *(
            f"--{k}={v}".replace(" ", "")
            for k, v in tiny_overrides(vpac_root, hparams["output_folder"]).items()
        ),
    ]
    base += ["--device=cpu", "--eval_bootstrap_resamples=50", "--eval_det_plot=False"]

    def evaluate(folder):
        with pytest.raises(SystemExit) as stopped:
            cli.run_main(recipe.main, [*base, f"--eval_folder={folder}"])
        return stopped.value.code

    assert evaluate(tmp_path / "clean") == 0
    real_writer = csv.writer

    def full_disk_writer(handle, *args, **kwargs):
        writer = real_writer(handle, *args, **kwargs)

        class Full:
            rows = 0

            def writerow(self, row):
                Full.rows += 1
                if Full.rows > 1:
                    raise OSError(errno.ENOSPC, "No space left on device")
                return writer.writerow(row)

        return Full()

    folder = tmp_path / "eval"
    capsys.readouterr()
    with monkeypatch.context() as patch:
        patch.setattr(csv, "writer", full_disk_writer)
        assert evaluate(folder) == 2
    error = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert error[-1].startswith(f"evaluate.py: error: {folder / 'results.csv'}: no space left on the device")
    assert "free some space and run the same command again" in error[-1] and "Traceback" not in "".join(error)
    assert not (folder / "results.csv").exists() and not (folder / "results.json").exists()
    assert not list(folder.rglob("*.tmp")) and (folder / "embeddings").is_dir()  # the work done is kept
    assert evaluate(folder) == 0
    assert (folder / "results.csv").read_bytes() == (tmp_path / "clean" / "results.csv").read_bytes()
    again, clean = read_results(folder), read_results(tmp_path / "clean")
    assert all(again[key] == clean[key] for key in ("table", "subsets", "intervals", "score_digests"))


def test_score_normalization_runs_end_to_end(evaluated, vpac_root, tmp_path):
    hparams, results = evaluated
    hparams = dict(hparams)
    hparams.update(
        eval_folder=str(Path(hparams["output_folder"]) / "eval"),  # same cache: only the cohort is embedded
        eval_score_norm="as-norm",
        eval_cohort_utts_per_speaker=1,
        eval_cohort_top_k=3,
        eval_subsets=["dev_f"],
    )
    normed = evaluate_system(hparams, write_report=False)
    raw = results.subsets["dev_f"].scores
    assert normed.subsets["dev_f"].scores.shape == raw.shape
    assert not np.allclose(normed.subsets["dev_f"].scores, raw)
    assert normed.options["score_norm"] == "as-norm"
    assert normed.options["cohort_top_k"] == min(3, normed.options["cohort_size"])
    hparams["eval_cohort_top_k"] = 5000  # clamped to the cohort: the k used is recorded
    clamped = evaluate_system(hparams, write_report=False)
    assert clamped.options["cohort_top_k"] == clamped.options["cohort_size"] < 5000


def test_voxattack_as_norm_uses_a_cohort_of_training_utterances(evaluated, tmp_path):
    from segreconcat_aug.evaluation.scoring import CohortTooSmallError

    hparams, results = evaluated
    hparams = dict(hparams)
    hparams.update(
        eval_folder=str(Path(hparams["output_folder"]) / "eval"),
        eval_score_norm="as-norm-voxattack",
        eval_cohort_size=6,
        eval_cohort_min_size=3,
        eval_subsets=["dev_f"],
    )
    normed = evaluate_system(hparams, write_report=False)
    assert normed.options["score_norm"] == "as-norm-voxattack"
    # The k used is recorded: the default 1000 is clamped to the cohort's 6.
    assert normed.options["cohort_size"] == 6 and normed.options["cohort_top_k"] == 6
    assert not np.allclose(normed.subsets["dev_f"].scores, results.subsets["dev_f"].scores)
    hparams["eval_cohort_min_size"] = 7
    with pytest.raises(CohortTooSmallError, match="eval_cohort_min_size"):
        evaluate_system(hparams, write_report=False)
    # One utterance (or a top-1) has no standard deviation: every score would fall back to raw.
    hparams.update(eval_cohort_min_size=0, eval_cohort_size=1)
    with pytest.raises(CohortTooSmallError, match=r"needs at least 2 .*gives a cohort of 1;"):
        evaluate_system(hparams, write_report=False)
    hparams.update(eval_cohort_size=6, eval_cohort_top_k=1)
    with pytest.raises(CohortTooSmallError, match=r"eval_cohort_top_k: 1 leaves one"):
        evaluate_system(hparams, write_report=False)


def test_max_similarity_scores_a_trial_by_its_best_enrollment_utterance(evaluated, vpac_root):
    """eval_enroll_scoring: max against a brute-force computation on the LibriSpeech fixtures; mean unmoved."""
    hparams, results = evaluated
    hparams = dict(hparams, eval_folder=str(Path(hparams["output_folder"]) / "eval"), eval_subsets=["dev_m"])
    scored = evaluate_system({**hparams, "eval_enroll_scoring": "max"}, write_report=False)
    assert scored.options["enroll_scoring"] == "max" and "enroll_scoring" not in results.options
    data = vpac_root / "T8-5" / "data"
    wav = read_kaldi_map(data / "libri_dev_enrolls_T8-5" / "wav.scp")
    utt2spk = read_kaldi_map(data / "libri_dev_enrolls_T8-5" / "utt2spk")
    trial_wav = read_kaldi_map(data / "libri_dev_trials_m_T8-5" / "wav.scp")
    subset = scored.subsets["dev_m"]
    for k in range(len(subset.enroll)):
        test = _embed_alone(hparams, vpac_root / trial_wav[subset.test[k]])
        best = max(
            float(e @ test / np.linalg.norm(e) / np.linalg.norm(test))
            for e in (
                _embed_alone(hparams, vpac_root / wav[u]) for u in wav if utt2spk[u] == subset.enroll[k]
            )
        )
        assert subset.scores[k] == pytest.approx(best, abs=1e-4)
    mean = evaluate_system({**hparams, "eval_enroll_scoring": "mean"}, write_report=False)
    np.testing.assert_array_equal(mean.subsets["dev_m"].scores, results.subsets["dev_m"].scores)
    assert mean.metrics["dev_m"]["eer"] == results.metrics["dev_m"]["eer"]


def test_max_similarity_with_score_normalization_is_refused_in_one_line():
    with pytest.raises(OptionError, match="eval_enroll_scoring: max .* eval_score_norm"):
        load_evaluation_hparams(
            REPO / "hparams" / "evaluate.yaml", {"eval_enroll_scoring": "max", "eval_score_norm": "s-norm"}
        )


def test_a_too_small_calibration_set_is_refused_before_anything_is_written(evaluated, tmp_path):
    from segreconcat_aug.evaluation.calibration import CalibrationSetTooSmallError

    hparams, _ = evaluated
    folder = tmp_path / "eval"
    with pytest.raises(CalibrationSetTooSmallError, match=r"^eval_calibration: qmf .* 8 target"):
        evaluate_system({**hparams, "eval_folder": str(folder), "eval_calibration": "qmf"})
    assert not folder.exists()


def test_qmf_calibration_reports_calibrated_metrics_beside_the_raw_ones(evaluated, tmp_path, monkeypatch):
    from segreconcat_aug.evaluation import calibration

    monkeypatch.setattr(calibration, "MIN_TRIALS", 4)  # the tiny lists: 8 dev targets of 4 speakers
    monkeypatch.setattr(calibration, "FOLDS", 2)
    hparams, results = evaluated
    copy = tmp_path / "eval"
    shutil.copytree(Path(hparams["output_folder"]) / "eval" / "embeddings", copy / "embeddings")
    calibrated = evaluate_system({**hparams, "eval_folder": str(copy), "eval_calibration": "qmf"})
    for name in SUBSETS:
        assert calibrated.metrics[name]["eer"] == results.metrics[name]["eer"]  # the raw scores unmoved
        assert 0 <= calibrated.metrics[name]["qmf_eer"] <= 100 and calibrated.metrics[name]["qmf_cllr"] > 0
    assert calibrated.options["calibration"] == "qmf"
    assert "| test_m |" in (copy / "results.md").read_text().split("QMF calibration")[1]
    assert read_results(copy)["subsets"]["dev_f"]["qmf_min_cllr"] is not None


def test_results_report_the_operating_points_or_why_they_are_undefined(evaluated):
    hparams, results = evaluated
    saved = read_results(Path(hparams["output_folder"]) / "eval")
    for name in results.subsets:
        values = saved["subsets"][name]
        assert values["tpr_at_fpr_1"] is None
        assert values["undefined_because"]["tpr_at_fpr_1"] == "undefined: fewer than 100 non-targets (4)"
        assert values["undefined_because"]["fpr_at_fnr_1"] == "undefined: fewer than 100 targets (4)"
    text = (Path(hparams["output_folder"]) / "eval" / "results.md").read_text()
    assert "| avg | dev_f: undefined: fewer than 100 non-targets (4) |" in text
    # The rates themselves (every trial once), against a brute-force search on the fixtures' scores.
    from test_measures import EveryTrialOnce, brute_force

    from segreconcat_aug.evaluation.bootstrap import resampled_metrics

    scores = np.concatenate([subset.scores for subset in results.subsets.values()])
    targets = np.concatenate([subset.targets for subset in results.subsets.values()])
    found = resampled_metrics(scores, targets, EveryTrialOnce(len(scores)), ())
    for key, value in brute_force(scores[targets], scores[~targets]).items():
        assert found[key][0] == pytest.approx(value, abs=1e-9)


# ----- pieces -------------------------------------------------------------------------------------


def test_speaker_model_is_the_mean_of_raw_embeddings():
    class Enroll:
        speakers = {"a": ["a1", "a2"], "b": ["b1"]}

    embeddings = {"a1": np.array([2.0, 0.0]), "a2": np.array([0.0, 4.0]), "b1": np.array([1.0, 1.0])}
    models = speaker_models(Enroll.speakers, embeddings)
    np.testing.assert_allclose(models["a"], [1.0, 2.0])  # not the mean of unit vectors ([0.5, 0.5])
    assert cosine_scores(models["a"][None], np.array([[1.0, 2.0]]))[0] == pytest.approx(1.0)


def test_s_norm_matches_its_formula():
    rng = np.random.default_rng(1)
    enroll, test, cohort = rng.normal(size=(4, 5)), rng.normal(size=(4, 5)), rng.normal(size=(30, 5))
    raw = cosine_scores(enroll, test)

    def side(vectors):
        against = np.array([[cosine_scores(v[None], c[None])[0] for c in cohort] for v in vectors])
        return against.mean(axis=1), against.std(axis=1)

    (me, se), (mt, st) = side(enroll), side(test)
    expected = ((raw - me) / se + (raw - mt) / st) / 2
    np.testing.assert_allclose(normalize_scores(raw, enroll, test, cohort, "s-norm"), expected, atol=1e-5)
    # as-norm with the whole cohort is s-norm
    np.testing.assert_allclose(
        normalize_scores(raw, enroll, test, cohort, "as-norm", top_k=30), expected, atol=1e-5
    )


def _extractor(hparams, **options):
    return EmbeddingExtractor(
        hparams["compute_features"], hparams["mean_var_norm"], hparams["embedding_model"], **options
    )


@pytest.mark.parametrize("seconds", [None, 0.3, 0.05])  # whole file; shorter than pyloudnorm's 0.4 s block
def test_evaluation_waves_are_pyloudnorm_normalized_then_zero_trimmed(evaluated, tmp_path, seconds):
    hparams, _ = evaluated
    speech = read_audio(REPO / "tests" / "fixtures" / "librispeech" / "19-198-0001.flac")
    if seconds is not None:
        speech = speech[16000 : 16000 + int(seconds * 16000)]
    padded = np.concatenate([np.zeros(800, np.float32), 0.3 * speech, np.zeros(1200, np.float32)])
    path = tmp_path / "padded.wav"
    soundfile.write(path, padded, 16000, subtype="FLOAT")
    wave = _extractor(hparams).load_wave(path)  # the defaults: as VPC 2024
    np.testing.assert_array_equal(wave, vpc_reference_wave(padded))
    assert wave[0] != 0 and wave[-1] != 0 and np.abs(wave).max() == 1.0
    raw = _extractor(hparams, normalize_wave=False, trim_zeros=False).load_wave(path)
    np.testing.assert_array_equal(raw, padded)


def test_silent_wave_is_embedded_unnormalized_and_counted(evaluated, tmp_path):
    hparams, _ = evaluated
    path = tmp_path / "silence.wav"
    soundfile.write(path, np.zeros(16000, np.float32), 16000, subtype="FLOAT")
    extractor = _extractor(hparams)
    wave = extractor.load_wave(path)
    assert wave.tolist() == [0.0] * 16000 and extractor.not_normalized == [str(path)]


def test_changing_the_wave_options_re_embeds(evaluated, monkeypatch):
    hparams, results = evaluated
    embedded = []
    original = EmbeddingExtractor.embed_batch

    def counting(self, sources):
        embedded.extend(sources)
        return original(self, sources)

    monkeypatch.setattr(EmbeddingExtractor, "embed_batch", counting)
    for option in ("eval_normalize_wave", "eval_trim_zeros"):
        embedded.clear()
        changed = {**hparams, option: False, "eval_subsets": ["dev_f"]}
        other = evaluate_system(changed, write_report=False)
        assert embedded  # not read from the default options' cache
        assert other.options["fingerprint"] != results.options["fingerprint"]
    assert not np.array_equal(other.subsets["dev_f"].scores, results.subsets["dev_f"].scores)


def test_duration_batches_group_similar_lengths():
    rng = np.random.default_rng(0)
    durations = {f"u{k}": float(d) for k, d in enumerate(rng.uniform(1, 30, 50))}
    batches = duration_batches(durations, batch_size=8, max_batch_seconds=100)
    assert sorted(u for b in batches for u in b) == sorted(durations)
    for batch in batches:
        assert len(batch) <= 8
        assert len(batch) == 1 or max(durations[u] for u in batch) * len(batch) <= 100
    flat = [durations[u] for b in batches for u in b]
    assert flat == sorted(flat, reverse=True)


def test_embedding_cache_resumes_from_shards(tmp_path):
    cache = EmbeddingCache(tmp_path / "c")
    cache.add(["a", "b"], np.eye(2, dtype=np.float32))
    cache.flush()
    cache.add(["c"], np.ones((1, 2), dtype=np.float32))
    cache.flush()
    (tmp_path / "c" / ".partial-00002.npz").write_bytes(b"interrupted")  # an unfinished write is ignored
    found = EmbeddingCache(tmp_path / "c").load()
    assert sorted(found) == ["a", "b", "c"]
    np.testing.assert_array_equal(found["b"], [0.0, 1.0])


# ----- bad input ----------------------------------------------------------------------------------


@pytest.fixture
def layout(vpac_root, tmp_path):
    """A private copy of one system, safe to break."""
    shutil.copytree(vpac_root / "T8-5", tmp_path / "T8-5", ignore=shutil.ignore_patterns("*.wav", "train-*"))
    return tmp_path


def _trials(layout, part="dev", gender="f"):
    return layout / "T8-5" / "data" / f"libri_{part}_trials_{gender}_T8-5" / "trials"


def _append(path, line):
    path.write_text(path.read_text() + line + "\n")


def test_unknown_test_utterance_names_file_and_line(layout):
    trials = _trials(layout)
    number = len(trials.read_text().splitlines()) + 1
    _append(trials, "1998 1998-0000-9999 target")
    with pytest.raises(TrialListError, match=rf"trials:{number}: test utterance '1998-0000-9999'"):
        load_system_trials(layout, "T8-5", subsets=["dev_f"])


def test_unknown_speaker_names_file_and_line(layout):
    trials = _trials(layout, "test", "m")
    lines = trials.read_text().splitlines()
    lines[1] = "9999 " + lines[1].split(" ", 1)[1]
    trials.write_text("\n".join(lines) + "\n")
    with pytest.raises(TrialListError, match=r"trials:2: enrollment speaker '9999'"):
        load_system_trials(layout, "T8-5", subsets=["test_m"])


def test_skipping_missing_trials_needs_the_flag_and_is_counted(layout):
    _append(_trials(layout), "9999 1998-0000-9999 nontarget")
    _append(_trials(layout), "1998 1998-0000-9999 target")
    _, trial_lists = load_system_trials(layout, "T8-5", subsets=["dev_f"], skip_missing=True)
    assert trial_lists["dev_f"].skipped == 2
    assert len(trial_lists["dev_f"]) == len(read_trials(_trials(layout))) - 2


def test_empty_trial_list(layout):
    _trials(layout).write_text("")
    with pytest.raises(TrialListError) as refused:
        load_system_trials(layout, "T8-5", subsets=["dev_f"])
    assert str(refused.value) == f"{_trials(layout)}: no trials"  # the file is named


def test_a_wav_scp_pipe_refusal_names_the_evaluation_key(layout):
    wav_scp = _trials(layout).parent / "wav.scp"
    wav_scp.write_text(wav_scp.read_text() + "u9 flac -c -d u9.flac |\n")
    with pytest.raises(KaldiFormatError, match="refused unless --eval_allow_pipes=True"):
        load_system_trials(layout, "T8-5", subsets=["dev_f"])


@pytest.mark.parametrize("kept, kind", [("target", "target"), ("nontarget", "non-target")])
def test_single_class_trial_list(layout, kept, kind):
    trials = _trials(layout)
    lines = [line for line in trials.read_text().splitlines() if line.endswith(f" {kept}")]
    trials.write_text("\n".join(lines) + "\n")
    with pytest.raises(TrialListError, match=rf"all {len(lines)} trials are {kind} trials"):
        load_system_trials(layout, "T8-5", subsets=["dev_f"])


def test_enrolls_naming_an_unknown_utterance(layout):
    _append(layout / "T8-5" / "data" / "libri_dev_enrolls_T8-5" / "enrolls", "1998-0000-0000")
    with pytest.raises(TrialListError, match="enrolls: 1 enrollment utterance"):
        load_system_trials(layout, "T8-5", subsets=["dev_m"])


def test_missing_export_is_a_clear_error(vpac_root, tmp_path):
    hparams = load_tiny_hparams(tiny_overrides(vpac_root, tmp_path / "never-trained"))
    with pytest.raises(FileNotFoundError, match="embedding_model.ckpt: no exported model"):
        evaluate_system(hparams)

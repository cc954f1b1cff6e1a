"""Issue 15: bad audio is found before the work starts, named, and never cached.

Real fixture audio made bad (NaN samples in a float WAV, a truncated FLAC, silence, 0.1 s) in
private copies of the tiny VPAC layout; the tests are numbered as the issue's points. Every test
that runs a stage on a layout checks that the user's data is left as it was.
"""

import hashlib
import json
import logging
import re
import runpy
import shutil
from pathlib import Path

import numpy as np
import pytest
import soundfile
import torch
from test_evaluation import export_random_model, load_tiny_hparams, tiny_overrides
from test_train import _args, _epochs, _train_rows, train_recipe

from segreconcat_aug.align.cache import UtteranceAlignment, Word, load_alignments
from segreconcat_aug.data.audio import AudioReadError, ItemError, read_audio, read_item_audio, write_audio
from segreconcat_aug.data.audio_check import check_audio_files
from segreconcat_aug.data.jobs import Job
from segreconcat_aug.data.kaldi import read_kaldi_map, write_kaldi_map
from segreconcat_aug.data.vpac import JobItem
from segreconcat_aug.errors import OptionError
from segreconcat_aug.evaluation.embeddings import EmbeddingError
from segreconcat_aug.evaluation.system import EvaluationAudioError, evaluate_system
from segreconcat_aug.method.order_computer import OrderComputer
from segreconcat_aug.options import TrainingOptions, validate_hparams_file
from segreconcat_aug.training.augmenter import build_augmenter
from segreconcat_aug.training.data_prep import (
    PROBLEMS_FILE,
    AudioCheckError,
    PrepOptions,
    prepare_vpac_training,
)
from segreconcat_aug.training.pipeline import SkipFailedReads, TrainAudioPipeline

TRAIN = Path("T8-5/data/train-clean-360_T8-5")
TRIALS_F = Path("T8-5/data/libri_dev_trials_f_T8-5")
ENROLL = Path("T8-5/data/libri_dev_enrolls_T8-5")


@pytest.fixture
def root(vpac_root, tmp_path):
    """A private copy of system T8-5 and its alignments, safe to break."""
    copy = tmp_path / "vpac"
    shutil.copytree(vpac_root / "T8-5", copy / "T8-5")
    shutil.copytree(vpac_root / "alignments", copy / "alignments")
    return copy


def snapshot(root) -> dict[str, str]:
    """Digest of every file of the user's data (the system folder)."""
    return {
        str(path.relative_to(root)): hashlib.sha1(path.read_bytes()).hexdigest()
        for path in sorted((Path(root) / "T8-5").rglob("*"))
        if path.is_file()
    }


def wav_of(root, folder: Path, utt: str) -> Path:
    return Path(root) / read_kaldi_map(Path(root) / folder / "wav.scp")[utt]


def utterances(root, folder: Path) -> list[str]:
    return sorted(read_kaldi_map(Path(root) / folder / "wav.scp"))


def make_nan(path: Path) -> np.ndarray:
    """Rewrite a file as a float WAV with NaN samples; returns the original audio."""
    audio = read_audio(path)
    bad = audio.copy()
    bad[1000:1010] = np.nan
    write_audio(path, bad, subtype="FLOAT")
    return audio


def make_truncated_flac(root, folder: Path, utt: str, keep: float = 0.5) -> Path:
    """Point ``utt`` at a FLAC copy of its audio, cut to ``keep`` of its bytes (header intact)."""
    wav = wav_of(root, folder, utt)
    flac = wav.with_suffix(".flac")
    write_audio(flac, read_audio(wav))
    data = flac.read_bytes()
    flac.write_bytes(data[: int(len(data) * keep)])
    scp = read_kaldi_map(Path(root) / folder / "wav.scp")
    scp[utt] = str(flac.relative_to(root))
    write_kaldi_map(Path(root) / folder / "wav.scp", scp)
    return flac


# ----- 1. NaN samples -------------------------------------------------------------------------------


def test_1_nan_training_audio_stops_before_training_naming_the_file(root, tmp_path):
    victim = utterances(root, TRAIN)[3]
    make_nan(wav_of(root, TRAIN, victim))
    before = snapshot(root)
    out = tmp_path / "out"
    with pytest.raises(AudioCheckError, match=rf"{victim} .*nonfinite \(10 NaN or infinite samples\)"):
        train_recipe.main(_args(root, out, "--mode=none"))
    assert (out / PROBLEMS_FILE).read_text().split()[0] == victim
    assert not (out / "train.csv").exists() and _epochs(out) == []
    assert snapshot(root) == before


def test_1_bad_audio_skip_leaves_the_file_out_and_counts_it(root, tmp_path):
    victim = utterances(root, TRAIN)[3]
    original = make_nan(wav_of(root, TRAIN, victim))
    out = tmp_path / "out"
    prepared = prepare_vpac_training(
        root, "T8-5", out, PrepOptions(sentence_len=2.0, dev_ratio=0.1, bad_audio="skip")
    )
    assert prepared["summary"]["bad_audio_left_out"] == 1
    rows = [row["utt_id"] for name in ("train", "dev") for row in _rows(prepared[name])]
    assert victim not in rows and rows
    # The rerun reads the check's cache: nothing is decoded again.
    cache = out / "audio_check.jsonl"
    wav = {utt: str(wav_of(root, TRAIN, utt)) for utt in utterances(root, TRAIN)}
    assert check_audio_files(wav, cache=cache, progress=False).from_cache == len(wav)
    # Once repaired (a changed file), it is checked again and trained on.
    write_audio(wav_of(root, TRAIN, victim), original)
    assert check_audio_files(wav, cache=cache, progress=False).from_cache == len(wav) - 1
    redone = prepare_vpac_training(
        root, "T8-5", out, PrepOptions(sentence_len=2.0, dev_ratio=0.1, bad_audio="skip")
    )
    assert redone["skipped"] is False and redone["summary"]["bad_audio_left_out"] == 0
    assert victim in {row["utt_id"] for name in ("train", "dev") for row in _rows(redone[name])}


def _rows(path):
    import csv

    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def test_1_nan_evaluation_audio_is_named_and_its_embedding_never_cached(root, tmp_path):
    torch.set_num_threads(1)
    victim = utterances(root, TRIALS_F)[0]
    path = wav_of(root, TRIALS_F, victim)
    original = make_nan(path)
    before = snapshot(root)
    out = tmp_path / "run"
    hparams = load_tiny_hparams(tiny_overrides(root, out, eval_subsets=["dev_f"]))
    export_random_model(hparams)
    # The audio check names the file before any embedding is computed.
    with pytest.raises(EvaluationAudioError, match=rf"/{victim} \S+{path.name}: nonfinite"):
        evaluate_system(hparams, {"device": "cpu"})
    assert not (out / "eval" / "embeddings").exists()
    # Past a header-only check, the NaN embedding is refused, named, and not cached.
    hparams["check_audio"] = "header"
    with pytest.raises(EmbeddingError, match=rf"{victim} \(\S+{path.name}\)"):
        evaluate_system(hparams, {"device": "cpu"})
    stored = _stored_embeddings(out)
    assert victim not in stored and all(np.isfinite(vector).all() for vector in stored.values())
    # Repaired: the rerun into the same folder embeds it and scores.
    write_audio(path, original)
    results = evaluate_system(hparams, {"device": "cpu"})
    assert np.isfinite(results.subsets["dev_f"].scores).all()
    assert victim in _stored_embeddings(out)
    assert snapshot(root) == {**before, str(path.relative_to(root)): _digest(path)}


def _digest(path):
    return hashlib.sha1(Path(path).read_bytes()).hexdigest()


def _stored_embeddings(out) -> dict:
    """Every embedding in every shard of the run's embedding caches (later shards win)."""
    found = {}
    for shard in sorted((Path(out) / "eval" / "embeddings").rglob("shard-*.npz")):
        with np.load(shard) as data:
            found.update(zip(data["ids"].tolist(), data["embeddings"]))
    return found


def test_1_a_changed_file_is_embedded_again_on_rerun(root, tmp_path):
    torch.set_num_threads(1)
    out = tmp_path / "run"
    hparams = load_tiny_hparams(tiny_overrides(root, out, eval_subsets=["dev_f"]))
    export_random_model(hparams)
    first = evaluate_system(hparams, {"device": "cpu"})
    cached = _stored_embeddings(out)
    victim = utterances(root, TRIALS_F)[0]
    path = wav_of(root, TRIALS_F, victim)
    audio = read_audio(path)
    write_audio(path, np.concatenate([audio[8000:], audio[:8000]]))  # other content, same length
    second = evaluate_system(hparams, {"device": "cpu"})
    recached = _stored_embeddings(out)
    assert not np.allclose(recached[victim], cached[victim])
    assert all(np.array_equal(recached[utt], cached[utt]) for utt in cached if utt != victim)
    changed = [k for k, utt in enumerate(first.subsets["dev_f"].test) if utt == victim]
    assert not np.allclose(first.subsets["dev_f"].scores[changed], second.subsets["dev_f"].scores[changed])


def test_1_aligners_and_order_jobs_count_nan_audio_as_a_failure(root, tmp_path):
    victim = utterances(root, TRAIN)[0]
    path = wav_of(root, TRAIN, victim)
    make_nan(path)
    with pytest.raises(ItemError, match=rf"{victim}: {path}: 10 NaN or infinite samples") as info:
        read_item_audio(JobItem(victim, str(path), None, None))
    assert info.value.kind == "nonfinite_audio"
    with Job(tmp_path / "out.jsonl", progress=False) as job:
        try:
            read_item_audio(JobItem(victim, str(path), None, None))
        except ItemError as err:
            job.fail(victim, err)
    assert job.failures == {"nonfinite_audio": 1}
    assert "NaN" in (tmp_path / "out.failures.tsv").read_text()
    # The order computation given NaN samples directly: a failure with its kind, not an order.
    computer = OrderComputer("acoustic", load_alignments(root / "alignments" / "T8-5.jsonl"))
    audio = read_audio(path)
    assert np.isnan(audio).any()
    ((utt, result),) = list(computer.compute([(victim, audio)]))
    assert utt == victim and isinstance(result, ItemError) and result.kind == "nonfinite_audio"
    assert "10 NaN or infinite samples" in str(result)


# ----- 2. A truncated FLAC ---------------------------------------------------------------------------


def test_2_truncated_flac_fails_the_full_check_not_the_header_check(root, tmp_path):
    victim = utterances(root, TRAIN)[2]
    flac = make_truncated_flac(root, TRAIN, victim)
    before = snapshot(root)
    with pytest.raises(
        AudioCheckError, match=rf"{victim} {flac}: truncated \(\d+ of the header's \d+ samples"
    ):
        prepare_vpac_training(root, "T8-5", tmp_path / "a", PrepOptions(sentence_len=2.0, dev_ratio=0.1))
    # Opening the header alone does not see it (why check_audio defaults to full)...
    header_only = prepare_vpac_training(
        root,
        "T8-5",
        tmp_path / "b",
        PrepOptions(sentence_len=2.0, dev_ratio=0.1, check_audio="header", min_chunk_amplitude=None),
    )
    assert header_only["summary"]["bad_audio_left_out"] == 0
    # ...but VPC's chunk-amplitude filter decodes every file, and names this one before training.
    with pytest.raises(AudioCheckError, match=rf"{victim} {flac}: cannot read the samples"):
        prepare_vpac_training(
            root, "T8-5", tmp_path / "c", PrepOptions(sentence_len=2.0, dev_ratio=0.1, check_audio="header")
        )
    assert snapshot(root) == before


def test_2_a_file_truncated_after_the_check_is_skipped_and_counted_not_a_crash(root, tmp_path):
    torch.set_num_threads(1)
    out = tmp_path / "out"
    prepared = prepare_vpac_training(root, "T8-5", out, PrepOptions(sentence_len=2.0, dev_ratio=0.1))
    dev = {row["utt_id"] for row in _rows(prepared["dev"])}
    victim = next(row["utt_id"] for row in _rows(prepared["train"]) if row["utt_id"] not in dev)
    flac = make_truncated_flac(root, TRAIN, victim, keep=1.0)  # intact when checked
    prepare_vpac_training(root, "T8-5", out, PrepOptions(sentence_len=2.0, dev_ratio=0.1))  # the same split
    data = flac.read_bytes()
    flac.write_bytes(data[: len(data) // 20])  # changed after the check: no 2 s crop of it reads
    train_recipe.main(_args(root, out, "--number_of_epochs=1", "--skip_prep=True", "--mode=none"))
    (epoch,) = _epochs(out)
    rows = len(_train_rows(out))
    assert epoch["train"]["failed_reads"] >= 1
    assert epoch["train"]["samples"] + epoch["train"]["failed_reads"] == rows - rows % 8
    assert (out / "export" / "embedding_model.ckpt").is_file()


def test_2_read_errors_policy(root):
    victim = utterances(root, TRAIN)[2]
    flac = make_truncated_flac(root, TRAIN, victim, keep=0.05)
    skip = TrainAudioPipeline(sentence_len=2.0, seed=1)
    assert skip(f"{victim}@0", victim, str(flac)) is None
    batch = SkipFailedReads()([{"id": "a", "sig": torch.ones(4)}, {"id": f"{victim}@0", "sig": None}])
    assert batch.failed_reads == 1 and batch.id == ["a"]
    strict = TrainAudioPipeline(sentence_len=2.0, seed=1, read_errors="error")
    with pytest.raises(AudioReadError, match=rf"training row {victim}@0 \(utterance {victim}, {flac}\)"):
        strict(f"{victim}@0", victim, str(flac))


# ----- 3. Options are checked before anything is written ----------------------------------------------


@pytest.mark.parametrize(
    "override, named",
    [
        ("--strategy=bogus", "strategy: 'bogus': input should be 'acoustic', 'random' or 'semantic'"),
        ("--crossfade=-0.01", "crossfade: -0.01: input should be greater than or equal to 0"),
        ("--sentence_len=0", "sentence_len: 0: input should be greater than 0"),
        ("--check_audio=partial", "check_audio: 'partial': input should be 'header' or 'full'"),
        ("--bad_audio=ignore", "bad_audio: 'ignore': input should be 'error' or 'skip'"),
        (
            "--eval_score_norm=z-norm",
            "eval_score_norm: 'z-norm': input should be 's-norm', 'as-norm' or 'as-norm-voxattack'",
        ),
    ],
)
def test_3_bad_option_values_are_refused_before_anything_is_written(root, tmp_path, override, named):
    out = tmp_path / "out"
    with pytest.raises(OptionError, match=re.escape(f"option {named}")):
        train_recipe.main(_args(root, out, override))
    assert not out.exists()


def test_3_evaluate_recipe_validates_first_and_the_table_takes_new_keys(root, tmp_path):
    from test_evaluation import REPO

    out = tmp_path / "out"
    argv = [str(REPO / "hparams/ecapa_segreconcat.yaml"), f"--data_folder={root}", f"--output_folder={out}"]
    evaluate = runpy.run_path(str(REPO / "recipes" / "evaluate.py"))["main"]
    with pytest.raises(OptionError, match="eval_normalize_wave: 'yes': input should be"):
        evaluate([*argv, "--eval_normalize_wave=yes"])
    assert not out.exists()
    values = {"data_folder": str(root), "output_folder": str(out)}
    with pytest.raises(OptionError, match="dev_ratio: 1: input should be less than 1"):
        validate_hparams_file(argv[0], {**values, "dev_ratio": 1}, TrainingOptions)
    with pytest.raises(OptionError, match="rr_redraw: 'twice': input should be 'once' or 'epoch'"):
        validate_hparams_file(argv[0], {**values, "rr_redraw": "twice"}, TrainingOptions)
    fine = {**values, "sr_context": "utterance", "rr_redraw": "epoch", "dev_ratio": 0.02}
    assert validate_hparams_file(argv[0], fine, TrainingOptions)["dev_ratio"] == 0.02


# ----- 4. Alignment repairs are logged; words without text are dropped --------------------------------


def test_4_repairs_are_counted_logged_at_training_start_and_empty_words_dropped(tmp_path, caplog):
    cache = tmp_path / "align.jsonl"
    with open(cache, "w") as handle:
        for record in (
            {"id": "u1", "duration": 3.0, "words": [{"word": "a", "start": 0.1, "end": 0.5},
                                                     {"word": "", "start": 0.5, "end": 1.5},
                                                     {"word": "b", "start": 1.5, "end": 2.0}]},
            {"id": "u2", "duration": 3.0, "words": [{"word": "c", "start": 0.1, "end": 0.5}]},
            {"id": "u3", "duration": 1.0, "words": [{"word": "d", "start": 0.5, "end": 1.4}]},
        ):  # fmt: skip
            handle.write(json.dumps(record) + "\n")
    index = load_alignments(cache)
    assert index.spans("u1")[0].tolist() == [0.1, 1.5]  # the one-second word without text is gone
    assert index.stats["dropped_no_text"] == 1 and index.stats["clamped"] == 1
    assert index.repaired_ids == ["u1", "u3"] and index.repaired_count == 2
    hparams = {
        "mode": "concat", "strategy": "random", "alignment_cache": str(cache), "segment_policy": "cover",
        "crossfade": 0.005, "seed": 1, "sample_rate": 16000, "missing_alignment": "error",
        "min_leading_silence": 0.05, "rr_redraw": "once", "sr_pad_normalize": True,
    }  # fmt: skip
    with caplog.at_level(logging.INFO):
        build_augmenter(hparams)
    (line,) = [r.getMessage() for r in caplog.records if "words repaired" in r.getMessage()]
    assert "'dropped_no_text': 1" in line and "'clamped': 1" in line and "['u1', 'u3']" in line


# ----- 5. A resumed epoch's statistics say what they cover ---------------------------------------------


def test_5_an_epoch_resumed_mid_way_says_its_statistics_cover_the_resumed_part(root, tmp_path, monkeypatch):
    torch.set_num_threads(1)
    out = tmp_path / "out"
    args = _args(root, out, "--number_of_epochs=1", "--mode=none", "--batch_size=4")
    args += ["--ckpt_interval_minutes=0", "--ckpt_interval_steps=2"]
    original = train_recipe.SpeakerBrain.fit_batch

    def killed_at_step_3(self, batch):
        if self.step == 3:
            raise KeyboardInterrupt("killed")
        return original(self, batch)

    monkeypatch.setattr(train_recipe.SpeakerBrain, "fit_batch", killed_at_step_3)
    with pytest.raises(KeyboardInterrupt):
        train_recipe.main(args)
    monkeypatch.setattr(train_recipe.SpeakerBrain, "fit_batch", original)
    train_recipe.main(args)
    (epoch,) = _epochs(out)
    batches = len(_train_rows(out)) // 4
    assert epoch["train"]["resumed_at_batch"] == 2
    assert epoch["train"]["covers"] == "resumed part: batches after 2"
    assert epoch["train"]["samples"] == (batches - 2) * 4


# ----- 6. Silent and 0.1 s enrollment and trial files are scored, with a warning -----------------------


def test_6_silent_and_short_evaluation_files_are_scored_and_reported(root, tmp_path, caplog):
    torch.set_num_threads(1)
    silent, short = utterances(root, TRIALS_F)[:2]
    for utt, make in ((silent, np.zeros_like), (short, lambda audio: audio[16000 : 16000 + 1600])):
        path = wav_of(root, TRIALS_F, utt)
        soundfile.write(path, make(read_audio(path)), 16000, subtype="PCM_16")
    enrolled = utterances(root, ENROLL)[0]
    path = wav_of(root, ENROLL, enrolled)
    soundfile.write(path, read_audio(path)[:1600], 16000, subtype="PCM_16")
    before = snapshot(root)
    out = tmp_path / "run"
    hparams = load_tiny_hparams(tiny_overrides(root, out, eval_subsets=["dev_f"]))
    export_random_model(hparams)
    with caplog.at_level(logging.WARNING):
        results = evaluate_system(hparams, {"device": "cpu"})
    assert silent in results.subsets["dev_f"].test and short in results.subsets["dev_f"].test  # scored
    report = (out / "eval" / "results.md").read_text()
    assert (
        f"1 enrollment/trial file(s) silent, scored all the same; first: ['{TRIALS_F.name}/{silent}']"
        in report
    )
    assert "2 enrollment/trial file(s) shorter than min_audio_duration" in report
    assert f"{ENROLL.name}/{enrolled}" in report and f"{TRIALS_F.name}/{short}" in report
    assert sum("shorter than min_audio_duration" in r.getMessage() for r in caplog.records) == 1
    assert json.loads((out / "eval" / "results.json").read_text())["warnings"] == results.warnings
    assert snapshot(root) == before


# ----- 7. A half-written last line removed on resume is logged -----------------------------------------


def test_7_a_half_written_alignment_line_removed_on_resume_is_logged(tmp_path, caplog):
    cache = tmp_path / "align.jsonl"
    cache.write_text(UtteranceAlignment("u1", 1.0, [Word("a", 0.1, 0.5)], "test").to_json() + "\n")
    with open(cache, "a") as handle:
        handle.write('{"id": "u2", "durat')  # a kill mid-line
    with caplog.at_level(logging.WARNING):
        with Job(cache, progress=False) as job:
            assert job.done == {"u1"}
    assert any("removed a half-written last line (19 bytes" in r.getMessage() for r in caplog.records)
    assert cache.read_text().count("\n") == 1


@pytest.mark.parametrize("mode", ["header", "full"])
def test_2_a_file_that_could_not_be_opened_is_never_cached(root, tmp_path, mode):
    """The same unreadable file checked twice with one cache: unreadable both times, never a cache record."""
    good = wav_of(root, TRAIN, utterances(root, TRAIN)[0])
    bad = tmp_path / "bad.wav"
    bad.write_bytes(b"RIFF" + bytes(60))  # a WAV header's start, then nothing soundfile can open
    cache = tmp_path / "check.jsonl"
    wav = {"good": str(good), "bad": str(bad)}
    for run in range(2):
        report = check_audio_files(wav, mode=mode, cache=cache, progress=False)
        assert [(problem.utt, problem.kind) for problem in report.problems] == [("bad", "unreadable")]
        assert list(report.frames) == ["good"] and report.from_cache == run  # the good file, from the 2nd run
    assert [Path(json.loads(line)["path"]).name for line in cache.read_text().splitlines()] == [good.name]

"""faster-whisper and openai-whisper word timestamps on real audio, with tiny random models.

No hub, no network: the faster-whisper model is :func:`segreconcat_aug.testing.tiny_whisper`
saved and converted by CTranslate2's converter, the openai-whisper one a random checkpoint
written with its ``ModelDimensions``. Their words are garbage; the tests check structure
(order, start < end, inside the duration, pauses kept), batching, windows over 30 s, the
failures and the load errors, which run the same code as Whisper-medium.
"""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile
from tiny_models import tiny_faster_whisper, tiny_openai_whisper
from vpac_fixture import FIXTURES, fixture_audio, kill_when_written

from segreconcat_aug.align import whisper
from segreconcat_aug.align.aligners import AlignmentFailed, make_aligner
from segreconcat_aug.align.aligners.faster_whisper import FasterWhisperAligner
from segreconcat_aug.align.aligners.openai_whisper import OpenAIWhisperAligner
from segreconcat_aug.align.cache import Word, load_alignments
from segreconcat_aug.align.whisper import WhisperLoadError, check_model_folder
from segreconcat_aug.data.jobs import jsonl_ids, read_failures
from segreconcat_aug.data.kaldi import read_kaldi_map, write_kaldi_map
from segreconcat_aug.testing import LETTERS, tiny_whisper

UTTS = ("19-198-0001", "26-495-0007", "1998-15444-0001")
# openai-whisper's decoding shortened for the tests (one temperature, a few tokens); real runs pass none.
OPENAI_TEST_OPTIONS = {"temperature": 0.0, "sample_len": 12, "condition_on_previous_text": False}


@pytest.fixture(scope="module")
def ct2_model(tmp_path_factory):
    return tiny_faster_whisper(tmp_path_factory.mktemp("fw"))


@pytest.fixture(scope="module")
def openai_checkpoint(tmp_path_factory):
    pytest.importorskip("whisper", reason="openai-whisper is in the dev extra: pip install -e '.[dev]'")
    return tiny_openai_whisper(tmp_path_factory.mktemp("ow") / "tiny.pt")


@pytest.fixture(scope="module")
def faster(ct2_model):
    return FasterWhisperAligner(
        ct2_model, device="cpu", compute_type="float32", batch_size=4, max_new_tokens=24
    )


def check_words(words, duration):
    assert words and all(isinstance(w, Word) and w.word for w in words)
    for word in words:
        assert 0.0 <= word.start < word.end <= duration + 1e-6
    for left, right in zip(words, words[1:]):
        assert left.end <= right.start + 1e-6


def pauses(words) -> int:
    """Gaps before the first word and between words: the timing keeps them."""
    return int(words[0].start > 0) + sum(b.start - a.end > 0.005 for a, b in zip(words, words[1:]))


def test_faster_whisper_batch_structure_pauses_and_equal_to_single(faster):
    audios = [fixture_audio(utt) for utt in UTTS]
    batch = faster.align_batch(audios)
    singles = [faster.align(audio) for audio in audios]
    for audio, words, single in zip(audios, batch, singles):
        check_words(words, len(audio) / 16000)
        # Each utterance is timed on its own: its batch neighbours change nothing.
        assert words == single
    assert max(len(words) for words in batch) >= 2  # order is really exercised
    # openai-whisper's timing gives each word a start and an end: pauses stay pauses.
    assert sum(pauses(words) for words in batch) >= 1
    assert faster.name.startswith("faster-whisper:") and faster.name.endswith("ctranslate2")


def test_faster_whisper_over_30_seconds_windows(faster):
    parts = [fixture_audio(u) for u in ("19-198-0001", "19-198-0002", "1998-15444-0001", "26-495-0007")]
    long = np.concatenate(parts)
    duration = len(long) / 16000
    assert duration > 30
    short, words = faster.align_batch([fixture_audio("26-495-0007"), long])
    check_words(words, duration)
    assert words[-1].end > 30.0  # the second window was decoded, its times offset by 30 s
    assert short == faster.align(fixture_audio("26-495-0007"))
    assert faster.stats["long_form_utterances"] >= 1


def test_faster_whisper_bad_input_fails_alone_with_its_reason(faster, ct2_model):
    audio = fixture_audio("26-495-0007")
    results = faster.align_batch([np.zeros(0, np.float32), audio[:1600], audio])
    assert isinstance(results[0], AlignmentFailed) and "empty" in str(results[0])
    assert isinstance(results[1], AlignmentFailed) and "shorter than 0.2 s" in str(results[1])
    assert results[2] == faster.align(audio)
    # A model that can write no word (every word token suppressed): each utterance is a
    # counted "no words" failure, not an empty alignment.
    tokenizer = tiny_whisper().tokenizer
    silent = FasterWhisperAligner(
        ct2_model,
        device="cpu",
        compute_type="float32",
        max_new_tokens=8,
        options={"suppress_tokens": [tokenizer.convert_tokens_to_ids("Ġ" + c) for c in LETTERS]},
    )
    results = silent.align_batch([audio, fixture_audio("19-198-0001")])
    assert all(isinstance(r, AlignmentFailed) and "no words" in str(r) for r in results)
    assert silent.stats["no_words"] == 2
    # openai-whisper's no-speech rule, made to fire on every window: its words are dropped.
    rule = {"no_speech_threshold": 0.0, "log_prob_threshold": None}
    skipping = FasterWhisperAligner(
        ct2_model, device="cpu", compute_type="float32", max_new_tokens=8, options=rule
    )
    assert all(isinstance(r, AlignmentFailed) for r in skipping.align_batch([audio]))
    assert skipping.stats["no_speech_windows"] == 1 and skipping.stats["no_words"] == 1


def test_int8_on_cpu_runs(ct2_model):
    aligner = make_aligner("faster-whisper", model=ct2_model, device="cpu", max_new_tokens=8)
    assert "int8" in aligner.model.model.compute_type  # auto on the CPU
    audio = fixture_audio("19-198-0001")
    result = aligner.align_batch([audio])[0]
    if isinstance(result, AlignmentFailed):  # random int8 weights may write no word; it must have decoded
        assert str(result).startswith("no words found") and aligner.stats["no_words"] == 1, result
    else:
        check_words(result, len(audio) / 16000)


def test_openai_whisper_words_structure(openai_checkpoint):
    aligner = OpenAIWhisperAligner(openai_checkpoint, device="cpu", options=OPENAI_TEST_OPTIONS)
    assert aligner.name.startswith("openai-whisper:") and aligner.batch_size == 1
    assert aligner.options["word_timestamps"] is True and aligner.options["fp16"] is False
    audios = [fixture_audio(utt) for utt in UTTS[:2]]
    results = aligner.align_batch([*audios, np.zeros(1000, np.float32)])
    for audio, words in zip(audios, results):
        check_words(words, len(audio) / 16000)
    assert "shorter than 0.2 s" in str(results[2])


def test_model_folder_of_the_wrong_kind_is_one_clear_error(tmp_path, ct2_model, openai_checkpoint):
    not_a_model = tmp_path / "empty"
    not_a_model.mkdir()
    (tmp_path / "notes.pt").write_text("not a checkpoint")
    with pytest.raises(
        WhisperLoadError, match=r"empty: not a model for --backend=faster-whisper; expected a CTranslate2"
    ):
        FasterWhisperAligner(str(not_a_model), device="cpu")
    with pytest.raises(WhisperLoadError, match="expected an openai-whisper checkpoint"):
        OpenAIWhisperAligner(str(tmp_path / "notes.pt"), device="cpu")
    with pytest.raises(WhisperLoadError, match="expected a transformers Whisper folder"):
        check_model_folder(ct2_model, "transformers")
    with pytest.raises(WhisperLoadError, match="CTranslate2"):
        check_model_folder(openai_checkpoint, "faster-whisper")
    check_model_folder(ct2_model, "faster-whisper")
    check_model_folder(openai_checkpoint, "openai-whisper")


def test_transformers_before_the_end_of_token_convention_is_refused(monkeypatch):
    monkeypatch.setattr(whisper, "installed_transformers", lambda: "4.49.0")
    with pytest.raises(WhisperLoadError, match=r"pip install 'transformers>=4.50.0'"):
        tiny_whisper()
    monkeypatch.setattr(whisper, "installed_transformers", lambda: "4.50.0")
    assert tiny_whisper().name == "tiny-random-whisper"


# ---- recipes/align.py with each backend: shards, failures, resume, kill -9 ------------------

REPO = Path(__file__).resolve().parents[1]
RECIPE = REPO / "recipes" / "align.py"
HPARAMS = str(REPO / "hparams" / "align.yaml")
RECIPE_UTTS = ("19-198-0001", "26-495-0007", "1998-15444-0001", "27-123349-0009")


@pytest.fixture(scope="module")
def recipe():
    spec = importlib.util.spec_from_file_location("align_recipe_backends", RECIPE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _folder(root: Path, copies: int = 1) -> Path:
    """A Kaldi folder of fixture utterances plus one of 0.1 s (a failure)."""
    root.mkdir(parents=True, exist_ok=True)
    soundfile.write(root / "short.wav", fixture_audio("26-495-0007")[:1600], 16000)
    wav = {f"c{k}-{utt}": str(FIXTURES / f"{utt}.flac") for k in range(copies) for utt in RECIPE_UTTS}
    wav["short"] = str(root / "short.wav")
    write_kaldi_map(root / "wav.scp", wav)
    return root


def _backend_args(backend, ct2_model, openai_checkpoint):
    if backend == "faster-whisper":  # the default: no --backend
        return [f"--whisper_model={ct2_model}", "--compute_type=float32", "--max_new_tokens=24"]
    options = ", ".join(f"{key}: {value}" for key, value in OPENAI_TEST_OPTIONS.items())
    return [
        "--backend=openai-whisper",
        f"--whisper_model={openai_checkpoint}",
        f"--transcribe_options={{{options}}}",
    ]


@pytest.mark.parametrize("backend", ["faster-whisper", "openai-whisper"])
def test_recipe_shards_failures_merge_and_resume(recipe, tmp_path, backend, ct2_model, openai_checkpoint):
    folder = _folder(tmp_path / "data")
    out = tmp_path / "cache.jsonl"
    common = [f"--data_folder={folder}", f"--output={out}", "--noprogressbar"]
    common += _backend_args(backend, ct2_model, openai_checkpoint) + ["--batch_size=2"]
    statuses = [recipe.main([HPARAMS, *common, f"--shard={shard}"]) for shard in ("0/2", "1/2")]
    assert 1 in statuses  # the shard holding "short" says so
    failures = read_failures(out)
    assert "shorter than 0.2 s" in failures["short"]
    # A random model may find no word in a real utterance: then that is its counted failure.
    assert all("no words found" in failures[utt] for utt in set(failures) - {"short"})
    assert recipe.main([HPARAMS, *common, "--merge=True"]) == 1  # strict: "short" is missing
    assert recipe.main([HPARAMS, *common, "--merge=True", "--allow_failures=True"]) == 0
    index = load_alignments(out, keep_words=True)
    assert sorted([*index.ids, *failures]) == sorted([f"c0-{utt}" for utt in RECIPE_UTTS] + ["short"])
    assert len(index.ids) >= 2
    assert len(set(index.aligners)) == 1 and index.aligners[0].startswith(f"{backend}:")
    for utt in index.ids:
        duration = soundfile.info(FIXTURES / f"{utt[3:]}.flac").duration
        assert index.duration(utt) == pytest.approx(duration)
        check_words(index.get(utt).words, duration)
    # Resume: a part that lost its last record and half of the one before is completed,
    # each utterance once, to the same words (decoding is deterministic).
    part = next(p for p in sorted(tmp_path.glob("cache.part-*.jsonl")) if len(jsonl_ids(p)) >= 2)
    before = {json.loads(line)["id"]: json.loads(line) for line in part.read_text().splitlines()}
    lines = part.read_text().splitlines(keepends=True)
    part.write_text("".join(lines[:-2]) + lines[-2][: len(lines[-2]) // 2])
    out.unlink()  # the merged file would count the lost records as done
    shard = part.name.split("part-")[1].split("-of-")[0]
    recipe.main([HPARAMS, *common, f"--shard={int(shard)}/2", "--allow_failures=True"])
    after = [json.loads(line) for line in part.read_text().splitlines()]
    assert sorted(r["id"] for r in after) == sorted(before)
    assert {r["id"]: r for r in after} == before


def test_default_backend_killed_with_sigkill_then_resumed(tmp_path, ct2_model):
    folder = _folder(tmp_path / "data", copies=3)
    expected = set(read_kaldi_map(folder / "wav.scp")) - {"short"}
    out = tmp_path / "cache.jsonl"
    command = [
        sys.executable,
        str(RECIPE),
        HPARAMS,
        f"--data_folder={folder}",
        f"--output={out}",
        "--noprogressbar",
        *_backend_args("faster-whisper", ct2_model, None),
        "--batch_size=1",
    ]
    partial = tmp_path / "cache.jsonl.partial"  # the running shard's lines; cache.jsonl appears when it ends
    kill_when_written(command, partial, lines=3, cwd=REPO)
    assert 3 <= partial.read_bytes().count(b"\n") < len(expected)
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert result.returncode == 1, result.stderr[-2000:]  # "short" failed
    failures = read_failures(out)
    assert "short" in failures and all("no words" in failures[u] for u in set(failures) - {"short"})
    ids = [json.loads(line)["id"] for line in out.read_text().splitlines()]
    assert len(ids) == len(set(ids))  # none duplicated
    assert sorted([*ids, *failures]) == sorted([*expected, "short"])  # none lost


def test_recipe_refuses_a_model_folder_of_the_wrong_kind_before_writing(recipe, tmp_path, ct2_model):
    folder = _folder(tmp_path / "data")
    out = tmp_path / "cache.jsonl"
    transformers_folder = str(Path(ct2_model).parent / "transformers")
    with pytest.raises(
        WhisperLoadError,
        match=r"transformers: not a model for --backend=faster-whisper; expected a CTranslate2",
    ):
        recipe.main(
            [HPARAMS, f"--data_folder={folder}", f"--output={out}", f"--whisper_model={transformers_folder}"]
        )
    with pytest.raises(WhisperLoadError, match="expected an openai-whisper checkpoint"):
        recipe.main(
            [
                HPARAMS,
                f"--data_folder={folder}",
                f"--output={out}",
                "--backend=openai-whisper",
                f"--whisper_model={ct2_model}",
            ]
        )
    assert not list(tmp_path.glob("cache*"))  # nothing written

"""The language of each aligned utterance: recorded in the cache, forced by --language, refused where unalignable."""

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
from vpac_fixture import FIXTURES, fixture_audio

from segreconcat_aug.align.aligners import AlignmentFailed
from segreconcat_aug.align.aligners.common import BatchedAligner
from segreconcat_aug.align.cache import UtteranceAlignment, Word
from segreconcat_aug.data.kaldi import write_kaldi_map
from segreconcat_aug.errors import UserError

REPO = Path(__file__).resolve().parents[1]
HPARAMS = str(REPO / "hparams" / "align.yaml")
UTTS = ["26-495-0007", "1998-15444-0007"]


def _languages(cache):
    """``{id: language}`` of the records of an alignment cache file."""
    return {
        record["id"]: record.get("language") for record in map(json.loads, cache.read_text().splitlines())
    }


def _recipe():
    spec = importlib.util.spec_from_file_location("align_recipe", REPO / "recipes" / "align.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _folder(path: Path) -> Path:
    path.mkdir(parents=True)
    write_kaldi_map(path / "wav.scp", {u: str(FIXTURES / f"{u}.flac") for u in UTTS})
    write_kaldi_map(path / "text", {u: "SOME WORDS" for u in UTTS})
    return path


def test_the_cache_line_carries_the_language_and_old_lines_read_as_before():
    words = [Word("hallo", 0.1, 0.5)]
    line = UtteranceAlignment("u1", 1.0, words, "faster-whisper:medium", "de").to_json()
    assert json.loads(line)["language"] == "de"
    assert UtteranceAlignment.from_record(json.loads(line), "x:1").language == "de"
    old = UtteranceAlignment("u1", 1.0, words, "faster-whisper:medium").to_json()
    assert "language" not in json.loads(old)  # lines without a language are written as before
    assert UtteranceAlignment.from_record(json.loads(old), "x:1").language is None
    with pytest.raises(UserError, match="x:1: 'language' must be a string"):
        UtteranceAlignment.from_record({**json.loads(old), "language": 3}, "x:1")


class _Detecting(BatchedAligner):
    """A backend whose decoder "detects" a language per utterance (German for long audio)."""

    label = "fake"
    name = "fake:detecting"
    batch_size = 2
    needs_transcript = False

    def __init__(self):
        from collections import Counter

        self.stats = Counter()

    def _decode(self, audios):
        self._decoded_languages = ["de" if len(a) > 8000 else "fr" for a in audios]
        return [[Word("wort", 0.0, len(a) / 16000)] for a in audios]


def test_a_batched_backend_reports_each_utterance_language_and_none_for_a_failure():
    aligner = _Detecting()
    results = aligner.align_batch(
        [np.ones(16000, np.float32), np.ones(100, np.float32), np.ones(4000, np.float32)]
    )
    assert isinstance(results[1], AlignmentFailed)  # 6 ms: too short to align
    assert aligner.languages == ["de", None, "fr"]


def test_the_recipe_records_the_language_each_utterance_was_transcribed_in(tmp_path, monkeypatch):
    folder = _folder(tmp_path / "data")
    out = tmp_path / "cache.jsonl"
    recipe = _recipe()
    monkeypatch.setattr(recipe, "build_aligner", lambda hparams, device: _Detecting())
    assert recipe.main([HPARAMS, f"--data_folder={folder}", f"--output={out}", "--noprogressbar"]) == 0
    languages = _languages(out)
    assert languages == {"26-495-0007": "de", "1998-15444-0007": "de"}  # both longer than 0.5 s


def test_pocketsphinx_records_english(tmp_path):
    folder = _folder(tmp_path / "data")
    out = tmp_path / "cache.jsonl"
    assert (
        _recipe().main(
            [
                HPARAMS,
                f"--data_folder={folder}",
                f"--output={out}",
                "--backend=pocketsphinx",
                "--allow_failures=True",
                "--noprogressbar",
            ]
        )
        == 0
    )
    assert set(_languages(out).values()) == {"en"}


@pytest.mark.parametrize(
    "name, extra, match",
    [
        (
            "train_german_BM1",
            ["--backend=pocketsphinx"],
            "pocketsphinx aligns English only .*train_german_BM1.* 'de'",
        ),
        (
            "data",
            ["--backend=pocketsphinx", "--language=fr"],
            "pocketsphinx aligns English only .*--language.* 'fr'",
        ),
        ("de_dev_enrolls_BM1", ["--whisper_model=tiny.en"], "tiny.en is an English-only Whisper"),
    ],
)
def test_a_backend_that_cannot_align_the_set_language_is_refused_before_anything_is_written(
    tmp_path, name, extra, match
):
    folder = _folder(tmp_path / name)
    out = tmp_path / "cache.jsonl"
    with pytest.raises(UserError, match=match):
        _recipe().main([HPARAMS, f"--data_folder={folder}", f"--output={out}", *extra, "--noprogressbar"])
    assert not out.exists() and not list(tmp_path.glob("cache*"))


def test_the_transformers_backend_detects_each_utterance_language_without_language(tmp_path, monkeypatch):
    """Issue 28: without --language the transformers aligner forced English (German aligned as English)."""
    import torch

    from segreconcat_aug import testing

    tiny_whisper, built = testing.tiny_whisper, []

    def bilingual_tiny_whisper(**kwargs):
        if built:  # one build for both runs
            return built[0]
        # The random tiny Whisper knows <|en|> only; a spare special token plays <|de|>, and its detection
        # (random weights detect nothing) says German for utterances over 3.5 s, English for the others.
        bundle = tiny_whisper(**kwargs)
        config = bundle.model.generation_config
        ids = {
            "en": config.lang_to_id["<|en|>"],
            "de": bundle.tokenizer.convert_tokens_to_ids("<|startoflm|>"),
        }
        config.lang_to_id = {"<|en|>": ids["en"], "<|de|>": ids["de"]}
        real = bundle.model.detect_language

        def detect_language(input_features, generation_config=None):
            real(input_features=input_features, generation_config=generation_config)  # runs on this model
            # frames with sound: the log-mel padding of Whisper's feature extractor is its minimum
            voiced = (input_features > input_features.amin(dim=(1, 2), keepdim=True)).any(dim=1).sum(dim=1)
            return torch.tensor([ids["de"] if frames > 350 else ids["en"] for frames in voiced.tolist()])

        bundle.model.detect_language = detect_language
        built.append(bundle)
        return bundle

    monkeypatch.setattr(testing, "tiny_whisper", bilingual_tiny_whisper)
    folder = _folder(tmp_path / "data")
    out = tmp_path / "cache.jsonl"
    argv = [HPARAMS, f"--data_folder={folder}", f"--output={out}", "--backend=transformers"]
    argv += [
        "--whisper_model=tiny-random-whisper",
        "--max_new_tokens=8",
        "--allow_failures=True",
        "--noprogressbar",
    ]
    assert _recipe().main(argv) == 0
    durations = {utt: __import__("soundfile").info(str(FIXTURES / f"{utt}.flac")).duration for utt in UTTS}
    expected = {utt: "de" if seconds > 3.5 else "en" for utt, seconds in durations.items()}
    assert set(expected.values()) == {"de", "en"}  # the fixture has one of each
    assert _languages(out) == expected
    # A language given (--language=de) is used as it is: nothing detected.
    from segreconcat_aug.align.aligners.whisper import WhisperAligner

    forced = WhisperAligner(bundle=built[0], language="de", max_new_tokens=4)
    forced.detect_languages = None  # would fail if called
    forced.align_batch([fixture_audio("26-495-0007")[:8000]])
    assert forced.languages == ["de"]

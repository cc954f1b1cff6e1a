"""Whisper word timestamps end to end on real audio, with a tiny random Whisper (no download).

The tiny model's words are garbage; the tests check structure, order, bounds, batching and
the long-form path, which run the same transformers code as openai/whisper-medium.
"""

import numpy as np
import pytest
import torch
from vpac_fixture import fixture_audio

from segreconcat_aug.align.aligners import AlignmentFailed
from segreconcat_aug.align.aligners.whisper import WhisperAligner, tokens_to_words
from segreconcat_aug.align.cache import Word
from segreconcat_aug.align.whisper import WhisperLoadError, check_alignment_heads, load_whisper, resolve_dtype
from segreconcat_aug.align.whisper_encoder import encoder_features, n_frames
from segreconcat_aug.testing import tiny_whisper

UTTS = ("19-198-0001", "26-495-0007", "1998-15444-0001")


@pytest.fixture(scope="module")
def aligner():
    return WhisperAligner(bundle=tiny_whisper(), batch_size=4, max_new_tokens=16)


@pytest.fixture(scope="module")
def singles(aligner):
    return {utt: aligner.align(fixture_audio(utt)) for utt in UTTS}


def _check_words(words, duration):
    assert all(isinstance(w, Word) and w.word for w in words)
    for word in words:
        assert 0.0 <= word.start < word.end <= duration + 1e-6
    for left, right in zip(words, words[1:]):
        assert left.end <= right.start + 1e-6


def test_batch_structure_order_bounds_and_equal_to_single(aligner, singles):
    audios = [fixture_audio(utt) for utt in UTTS]
    batch = aligner.align_batch(audios)
    assert len(batch) == len(UTTS)
    for utt, audio, words in zip(UTTS, audios, batch):
        _check_words(words, len(audio) / 16000)
        # The attention mask makes each utterance independent of its batch neighbours.
        assert [w.word for w in words] == [w.word for w in singles[utt]]
        np.testing.assert_allclose([w.start for w in words], [w.start for w in singles[utt]], atol=0.021)
    assert max(len(words) for words in batch) >= 2  # order is really exercised
    assert aligner.name == "transformers:tiny-random-whisper"


def test_over_30_seconds_in_a_batch_with_a_short_one(aligner, singles):
    long = np.concatenate(
        [
            fixture_audio("19-198-0001"),
            fixture_audio("19-198-0002"),
            fixture_audio("1998-15444-0001"),
            fixture_audio("26-495-0007"),
        ]
    )
    duration = len(long) / 16000
    assert duration > 30
    short, words = aligner.align_batch([fixture_audio("26-495-0007"), long])
    _check_words(words, duration)
    assert words[-1].end > 30.0  # the second window was decoded, times offset by the window
    assert aligner.stats["long_form_batches"] >= 1
    assert [w.word for w in short] == [w.word for w in singles["26-495-0007"]]


def test_empty_audio_fails_alone(aligner, singles):
    results = aligner.align_batch([np.zeros(0, np.float32), fixture_audio("26-495-0007")])
    assert isinstance(results[0], AlignmentFailed) and "empty" in str(results[0])
    assert [w.word for w in results[1]] == [w.word for w in singles["26-495-0007"]]


def test_tokens_to_words_spaces_specials_and_times():
    tokenizer = tiny_whisper().tokenizer
    eot = tokenizer.eos_token_id
    text = tokenizer(" hello, world", add_special_tokens=False).input_ids
    split = next(k for k in range(1, len(text)) if tokenizer.convert_ids_to_tokens(text[k]).startswith("Ġ"))
    ids = [eot + 1] + text + [eot] + tokenizer(" again", add_special_tokens=False).input_ids
    times = np.linspace(0.1, 3.0, len(ids)).tolist()
    words = tokens_to_words(tokenizer, ids, times, eot)
    assert [w.word for w in words] == ["hello", "world", "again"]
    # A word spans from the end of the token before its first token to the end of its last.
    assert words[0] == Word("hello", times[0], times[split])
    assert words[1].start == times[split] and words[1].end == times[len(text)]
    assert words[2].start == times[len(text) + 1]


def test_encoder_features_frames_and_windows():
    bundle = tiny_whisper()
    long = np.concatenate([fixture_audio("19-198-0001")] * 3)  # 35.3 s: two windows
    short = long[: 30 * 16000]
    features_long, features_short = encoder_features(bundle, [long, short], batch_size=2)
    width = bundle.model.config.d_model
    assert features_long.shape == (n_frames(len(long)), width)
    assert features_short.shape == (1500, width)
    np.testing.assert_allclose(features_long[:1500], features_short, atol=1e-4)
    with pytest.raises(ValueError, match="empty"):
        encoder_features(bundle, [np.zeros(0, np.float32)])


def test_alignment_heads_and_dtype_checks():
    bundle = tiny_whisper()
    bundle.model.generation_config.alignment_heads = None
    with pytest.raises(WhisperLoadError, match="alignment_heads is missing"):
        check_alignment_heads(bundle.model, "m")
    bundle.model.generation_config.alignment_heads = [[5, 0]]
    with pytest.raises(WhisperLoadError, match=r"\(5, 0\) outside 2 layers"):
        check_alignment_heads(bundle.model, "m")
    assert resolve_dtype("auto", "cuda:1") == torch.float16
    with pytest.raises(WhisperLoadError, match="dtype"):
        resolve_dtype("float8", "cpu")


def test_reduced_precision_path_runs_end_to_end():
    # bfloat16 runs on the CPU too: it exercises the dtype casts used with float16 on GPUs.
    bf16 = WhisperAligner(bundle=tiny_whisper(dtype=torch.bfloat16), max_new_tokens=8)
    assert next(bf16.bundle.model.parameters()).dtype == torch.bfloat16
    audio = fixture_audio("26-495-0007")
    _check_words(bf16.align(audio), len(audio) / 16000)
    assert encoder_features(bf16.bundle, [audio])[0].dtype == np.float32


def test_load_whisper_from_a_local_checkpoint(tmp_path, singles):
    bundle = tiny_whisper()
    for part in (bundle.model, bundle.tokenizer, bundle.feature_extractor):
        part.save_pretrained(tmp_path)
    loaded = load_whisper(str(tmp_path), device="cpu", local_files_only=True)
    assert loaded.dtype == torch.float32 and loaded.model.config._attn_implementation == "eager"
    words = WhisperAligner(bundle=loaded, max_new_tokens=16).align(fixture_audio("26-495-0007"))
    assert words == singles["26-495-0007"]
    features_only = load_whisper(str(tmp_path), device="cpu", local_files_only=True, word_timestamps=False)
    assert features_only.model.config._attn_implementation == "sdpa"
    # A checkpoint without alignment heads cannot give word times: refused at load.
    bundle.model.generation_config.alignment_heads = None
    bundle.model.save_pretrained(tmp_path)
    with pytest.raises(WhisperLoadError, match="alignment_heads is missing"):
        load_whisper(str(tmp_path), device="cpu", local_files_only=True)
    fixed = load_whisper(str(tmp_path), device="cpu", local_files_only=True, alignment_heads=[[1, 0]])
    assert fixed.model.generation_config.alignment_heads == [[1, 0]]


@pytest.mark.parametrize(
    "hub, message",
    [
        (ConnectionError("Name or service not known"), "the hub cannot be reached"),
        ("missing", "no such model on the Hugging Face hub"),
    ],
)
def test_a_hub_model_not_in_the_cache_is_looked_up_once_not_downloaded(tmp_path, monkeypatch, hub, message):
    """Issue 22: offline or misspelt, one look-up and one line naming the fix; no download and its retries."""
    import huggingface_hub
    import transformers

    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # an empty cache
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    calls = []

    class RepositoryNotFoundError(Exception):  # the hub's answer is told by its class name
        pass

    def model_info(self, name, **kwargs):
        calls.append((name, kwargs.get("timeout")))
        raise hub if isinstance(hub, Exception) else RepositoryNotFoundError(name)

    def no_download(*args, **kwargs):
        raise AssertionError("from_pretrained was called: a download (with its retries) was attempted")

    monkeypatch.setattr(huggingface_hub.HfApi, "model_info", model_info)
    monkeypatch.setattr(transformers.WhisperForConditionalGeneration, "from_pretrained", no_download)
    with pytest.raises(
        WhisperLoadError, match=rf"openai/whisper-mediun: .*{message}.*--whisper_model=<folder>"
    ):
        load_whisper("openai/whisper-mediun", device="cpu")
    assert len(calls) == 1 and calls[0][1] is not None  # one request, with a timeout
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # offline mode: not even that request
    with pytest.raises(
        WhisperLoadError, match="not in the local Hugging Face cache and HF_HUB_OFFLINE is set"
    ):
        load_whisper("openai/whisper-mediun", device="cpu")
    assert len(calls) == 1

"""pocketsphinx forced alignment on the real LibriSpeech fixtures with their transcripts."""

import numpy as np
import pytest
from vpac_fixture import FIXTURES, fixture_audio

from segreconcat_aug.align.aligners import AlignmentFailed, make_aligner
from segreconcat_aug.align.aligners.pocketsphinx import PocketsphinxAligner, normalize_transcript
from segreconcat_aug.data.kaldi import read_kaldi_map

TEXTS = read_kaldi_map(FIXTURES / "text")
NARROW = {"beam": 1e-1, "wbeam": 1e-1, "pbeam": 1e-1}  # too narrow to reach the end of the grammar


@pytest.fixture(scope="module")
def aligner():
    return PocketsphinxAligner()


def test_every_transcript_word_aligned_in_order_inside_thefixture_audio(aligner):
    assert len(TEXTS) >= 10
    for utt, text in TEXTS.items():
        audio = fixture_audio(utt)
        duration = len(audio) / 16000
        words = aligner.align(audio, text)
        assert [w.word for w in words] == normalize_transcript(text), utt
        for word in words:
            assert 0.0 <= word.start < word.end <= duration + 1e-9, (utt, word)
        for left, right in zip(words, words[1:]):
            assert left.end <= right.start + 1e-9, (utt, left, right)
        # Forced alignment leaves the silences out: the words do not cover the whole clip.
        assert words[0].start > 0.0 or words[-1].end < duration
    assert aligner.stats["aligned"] == len(TEXTS)
    assert aligner.stats["oov_added"] >= 1  # "northanger" is not in the dictionary
    assert aligner.name == "pocketsphinx:en-us"


def test_oov_skip_drops_and_counts():
    skipping = PocketsphinxAligner(oov="skip")
    words = skipping.align(fixture_audio("19-198-0000"), TEXTS["19-198-0000"])  # NORTHANGER ABBEY
    assert [w.word for w in words] == ["abbey"]
    assert skipping.stats["oov_skipped"] == 1


def test_wide_beam_retry_rescues_a_failed_alignment():
    text = TEXTS["26-495-0007"]
    retrying = PocketsphinxAligner(decoder_options=NARROW)
    words = retrying.align(fixture_audio("26-495-0007"), text)
    assert [w.word for w in words] == normalize_transcript(text)
    assert retrying.stats["retried_wide_beam"] == 1
    with pytest.raises(AlignmentFailed, match="could not align"):
        PocketsphinxAligner(decoder_options=NARROW, wide_beam_retry=False).align(
            fixture_audio("26-495-0007"), text
        )


def test_missing_transcript_fails_or_is_recognized(aligner):
    audio = fixture_audio("26-495-0007")
    with pytest.raises(AlignmentFailed, match="no transcript"):
        aligner.align(audio, None)
    recognizer = make_aligner("pocketsphinx", recognize_without_transcript=True)
    words = recognizer.align(audio, "  ")
    assert len(words) >= 3 and words[-1].end <= len(audio) / 16000
    assert recognizer.stats["recognized"] == 1


def test_batch_keeps_going_past_a_failure(aligner):
    results = aligner.align_batch(
        [np.zeros(0, np.float32), fixture_audio("26-495-0007")], [TEXTS["26-495-0007"], TEXTS["26-495-0007"]]
    )
    assert isinstance(results[0], AlignmentFailed) and "empty" in str(results[0])
    assert len(results[1]) == len(normalize_transcript(TEXTS["26-495-0007"]))

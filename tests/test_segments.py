"""Word times -> sample spans under each segment policy."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from segreconcat_aug.align.cache import Word, clean_words
from segreconcat_aug.method.segments import AUTHORS_SPANS, span_rule, word_segments

SR = 16000


def _times(words):
    return np.array([w.start for w in words]), np.array([w.end for w in words])


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.floats(0, 5), st.floats(0, 5)), max_size=15),
    st.integers(1, 5 * SR),
    st.floats(0, 0.2),
)
def test_cover_partitions_the_whole_utterance(pairs, num_samples, min_silence):
    words = clean_words([Word("w", s, e) for s, e in pairs], num_samples / SR)
    segments = word_segments(*_times(words), num_samples, SR, "cover", min_silence)
    spans = segments.spans
    assert spans[0, 0] == 0 and spans[-1, 1] == num_samples
    assert np.all(spans[1:, 0] == spans[:-1, 1]), "contiguous: nothing dropped, nothing repeated"
    assert np.all(spans[:, 1] > spans[:, 0])
    assert segments.lengths.sum() == num_samples


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 5), st.floats(0, 5)), max_size=15), st.integers(1, 5 * SR))
def test_words_keeps_only_word_spans(pairs, num_samples):
    words = clean_words([Word("w", s, e) for s, e in pairs], num_samples / SR)
    spans = word_segments(*_times(words), num_samples, SR, "words").spans
    assert len(spans) <= len(words)
    assert np.all(spans[:, 1] > spans[:, 0]) and np.all(spans[:, 1] <= num_samples)
    assert np.all(spans[1:, 0] >= spans[:-1, 1])


def test_cover_cuts_mid_gap_and_makes_a_leading_silence_segment():
    starts, ends = np.array([0.5, 1.0, 2.0]), np.array([0.8, 1.6, 2.4])
    segments = word_segments(starts, ends, 3 * SR, SR, "cover")
    assert segments.leading_silence
    assert segments.spans.tolist() == [[0, 8000], [8000, 14400], [14400, 28800], [28800, 48000]]


def test_no_words():
    assert word_segments(np.array([]), np.array([]), 100, SR, "cover").spans.tolist() == [[0, 100]]
    assert len(word_segments(np.array([]), np.array([]), 100, SR, "words")) == 0


def test_times_past_the_audio_are_clipped():
    segments = word_segments(np.array([0.0, 0.9]), np.array([0.9, 1.5]), SR, SR, "words")
    assert segments.spans.tolist() == [[0, 14400], [14400, 16000]]


def test_unknown_policy():
    with pytest.raises(ValueError, match="unknown segment policy 'gaps'"):
        word_segments(np.array([0.0]), np.array([1.0]), SR, SR, "gaps")
    with pytest.raises(ValueError, match="name the strategy"):
        word_segments(np.array([0.0]), np.array([1.0]), SR, SR, "authors")


def test_authors_policy_cuts_per_strategy_as_their_scripts():
    assert AUTHORS_SPANS == {"random": "words", "semantic": "words_to_end", "acoustic": "onsets"}
    assert span_rule("authors", "my_plugin") == "words"
    starts, ends = np.array([0.5, 1.0, 2.0]), np.array([0.8, 1.6, 2.4])
    for strategy, rule in AUTHORS_SPANS.items():
        authors = word_segments(starts, ends, 3 * SR, SR, "authors", strategy=strategy)
        assert authors.spans.tolist() == word_segments(starts, ends, 3 * SR, SR, rule).spans.tolist()


def test_words_to_end_drops_pauses_and_runs_the_last_word_to_the_end():
    starts, ends = np.array([0.5, 1.0, 2.0]), np.array([0.8, 1.6, 2.4])
    segments = word_segments(starts, ends, 3 * SR, SR, "words_to_end")
    assert segments.spans.tolist() == [[8000, 12800], [16000, 25600], [32000, 48000]]
    assert not segments.leading_silence


def test_onsets_cut_at_word_starts_with_the_leading_silence_first():
    starts, ends = np.array([0.5, 1.0, 2.0]), np.array([0.8, 1.6, 2.4])
    segments = word_segments(starts, ends, 3 * SR, SR, "onsets")
    # the pause after a word stays with it; any lead-in is a segment at the default of 0 s
    assert segments.leading_silence
    assert segments.spans.tolist() == [[0, 8000], [8000, 16000], [16000, 32000], [32000, 48000]]
    tiny = word_segments(np.array([0.001, 0.5]), np.array([0.4, 0.9]), SR, SR, "onsets")
    assert tiny.leading_silence and tiny.spans.tolist() == [[0, 16], [16, 8000], [8000, 16000]]
    # a threshold keeps a short lead-in with the first word
    merged = word_segments(np.array([0.001, 0.5]), np.array([0.4, 0.9]), SR, SR, "onsets", 0.05)
    assert not merged.leading_silence and merged.spans.tolist() == [[0, 8000], [8000, 16000]]
    assert not word_segments(np.array([0.0, 0.5]), np.array([0.4, 0.9]), SR, SR, "onsets").leading_silence


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 5), st.floats(0, 5)), max_size=15), st.integers(1, 5 * SR))
def test_onsets_partition_the_utterance(pairs, num_samples):
    words = clean_words([Word("w", s, e) for s, e in pairs], num_samples / SR)
    spans = word_segments(*_times(words), num_samples, SR, "onsets").spans
    assert spans[0, 0] == 0 and spans[-1, 1] == num_samples
    assert np.all(spans[1:, 0] == spans[:-1, 1]) and np.all(spans[:, 1] > spans[:, 0])

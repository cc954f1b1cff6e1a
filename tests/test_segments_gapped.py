"""The segment policies on gapped word times (openai-whisper / faster-whisper timing).

openai-whisper's timing (the authors' aligner, and faster-whisper's port of it) gives each
word its own start and end: the first word may start late and pauses stay between words,
unlike the contiguous times of the transformers backend. What each policy makes of them
(docs/alignment.md, "Segment policies on gapped word times"):

- ``cover``: a partition of the utterance. A leading silence of at least
  ``min_leading_silence`` is its own first segment, a shorter one stays with the first word;
  each pause is cut at its middle, half to each neighbour; the audio after the last word
  stays with it. Nothing is dropped.
- ``words``: the word spans only; the leading silence, the pauses and the tail are dropped.
"""

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from segreconcat_aug.method.segments import word_segments

SR = 16000


def _gapped(draw_gaps, draw_lengths):
    """Word times from alternating gaps and word lengths (seconds)."""
    starts, ends, t = [], [], 0.0
    for gap, length in zip(draw_gaps, draw_lengths):
        t += gap
        starts.append(t)
        t += length
        ends.append(t)
    return np.array(starts), np.array(ends)


def test_cover_leading_silence_pauses_split_at_their_middle_tail_kept():
    # 0.50 s of silence, "a" 0.5-0.8, pause 0.8-1.2, "b" 1.2-1.5, pause 1.5-1.6, "c" 1.6-2.0, tail to 2.5 s.
    starts, ends = np.array([0.5, 1.2, 1.6]), np.array([0.8, 1.5, 2.0])
    segments = word_segments(starts, ends, int(2.5 * SR), SR, "cover")
    assert segments.leading_silence
    assert segments.spans.tolist() == [[0, 8000], [8000, 16000], [16000, 24800], [24800, 40000]]
    # Each pause is shared by its neighbours, so a rearranged word carries half of each pause.
    pause = (12800 + 19200) // 2
    assert segments.spans[1, 1] == pause


def test_cover_short_lead_in_stays_with_the_first_word():
    starts, ends = np.array([0.03, 0.5]), np.array([0.4, 0.9])
    segments = word_segments(starts, ends, SR, SR, "cover", min_leading_silence=0.05)
    assert not segments.leading_silence
    assert segments.spans.tolist() == [[0, (6400 + 8000) // 2], [(6400 + 8000) // 2, SR]]


def test_words_drops_leading_silence_pauses_and_tail():
    starts, ends = np.array([0.5, 1.2, 1.6]), np.array([0.8, 1.5, 2.0])
    segments = word_segments(starts, ends, int(2.5 * SR), SR, "words")
    assert not segments.leading_silence
    assert segments.spans.tolist() == [[8000, 12800], [19200, 24000], [25600, 32000]]


@given(
    st.lists(st.floats(0.0, 0.6), min_size=1, max_size=12),
    st.lists(st.floats(0.02, 0.8), min_size=12, max_size=12),
    st.floats(0.0, 1.0),
    st.sampled_from([0.0, 0.05, 0.3]),
)
def test_policies_on_any_gapped_times(gaps, lengths, tail, min_leading):
    starts, ends = _gapped(gaps, lengths)
    num_samples = int(round((ends[-1] + tail) * SR)) + 1
    cover = word_segments(starts, ends, num_samples, SR, "cover", min_leading_silence=min_leading)
    words = word_segments(starts, ends, num_samples, SR, "words")
    # cover: contiguous from 0 to the end, nothing dropped, one segment per word (+ silence).
    assert cover.spans[0, 0] == 0 and cover.spans[-1, 1] == num_samples
    assert np.all(cover.spans[1:, 0] == cover.spans[:-1, 1]) and np.all(cover.lengths > 0)
    first = int(np.rint(starts[0] * SR))
    assert cover.leading_silence == (first > 0 and first >= int(round(min_leading * SR)))
    if cover.leading_silence:
        assert cover.spans[0, 1] == first
    # Every word lies inside its own cover segment: cuts fall inside pauses, never inside words.
    word_cover = cover.spans[1:] if cover.leading_silence else cover.spans
    assert len(word_cover) == len(starts)
    # words: exactly the word spans (rounded to samples); pauses and tail are not in them.
    expected = np.stack([np.rint(starts * SR), np.rint(ends * SR)], axis=1).astype(np.int64)
    expected = expected[expected[:, 1] > expected[:, 0]]
    assert words.spans.tolist() == expected.tolist()
    assert words.lengths.sum() <= cover.lengths.sum()
    for lo, hi in words.spans:
        inside = (word_cover[:, 0] <= lo) & (hi <= word_cover[:, 1])
        assert inside.any()

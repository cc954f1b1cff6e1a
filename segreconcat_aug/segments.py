"""Word times -> sample spans: the *segmentation* step of SegReConcat.

Two policies (YAML key ``segment_policy``):

``cover`` (default)
    The utterance is partitioned: cuts fall at the middle of each inter-word
    gap, the audio after the last word stays with it, and a leading silence of
    at least ``min_leading_silence`` seconds becomes its own first segment (the
    paper's AR step starts "from the first segment (or an initial silence
    segment, if detected)"). Nothing is dropped, so the rearranged half is as
    long as the original and concatenation exactly doubles the data, as the
    paper states. Whisper's word times are contiguous already, so for the
    paper's aligner ``cover`` and ``words`` differ only at the edges.
``words``
    Word spans only; inter-word silences are dropped. Useful with forced
    aligners whose pauses you want to remove from the rearranged half.

Spans are half-open sample ranges ``[start, end)``.

Example
-------
>>> import numpy as np
>>> seg = word_segments(np.array([0.5, 1.0]), np.array([0.8, 1.5]), 32000, 1000, "cover")
>>> seg.spans.tolist(), seg.leading_silence
([[0, 500], [500, 900], [900, 32000]], True)
>>> word_segments(np.array([0.5, 1.0]), np.array([0.8, 1.5]), 32000, 1000, "words").spans.tolist()
[[500, 800], [1000, 1500]]
"""

from __future__ import annotations

from typing import NamedTuple

import numba
import numpy as np

SEGMENT_POLICIES = ("cover", "words")


class Segments(NamedTuple):
    """Sample spans of an utterance's segments, in original order."""

    spans: np.ndarray  # int64, shape (N, 2): [start, end)
    leading_silence: bool  # True when spans[0] is a silence segment (cover only)

    def __len__(self) -> int:
        return len(self.spans)

    @property
    def lengths(self) -> np.ndarray:
        return self.spans[:, 1] - self.spans[:, 0]


def check_segment_policy(policy: str) -> str:
    """``policy`` if it is one of :data:`SEGMENT_POLICIES`, else a ValueError listing them."""
    if policy not in SEGMENT_POLICIES:
        raise ValueError(f"unknown segment policy {policy!r}; choose from {SEGMENT_POLICIES}")
    return policy


def word_segments(
    starts: np.ndarray,
    ends: np.ndarray,
    num_samples: int,
    sample_rate: int,
    policy: str = "cover",
    min_leading_silence: float = 0.05,
) -> Segments:
    """Turn cleaned word times (seconds) into sample spans.

    Parameters
    ----------
    starts, ends : numpy.ndarray
        Sorted, non-overlapping word times (as :mod:`segreconcat_aug.alignment` gives).
    num_samples : int
        Length of the audio; times past it are clipped (an alignment made on a
        slightly different decode of the file must not index past the end).
    sample_rate : int
    policy : {"cover", "words"}
    min_leading_silence : float
        Seconds of silence before the first word needed for a silence segment
        (``cover``); a shorter lead-in stays with the first word.

    Returns
    -------
    Segments
        Empty spans are dropped. With ``cover`` and no words, the whole
        utterance is one segment.
    """
    check_segment_policy(policy)
    spans, leading = _spans(
        np.asarray(starts, dtype=np.float64),
        np.asarray(ends, dtype=np.float64),
        int(num_samples),
        int(sample_rate),
        policy == "cover",
        int(round(min_leading_silence * sample_rate)),
    )
    return Segments(spans, bool(leading))


# Compiled: segmentation runs for every training sample in the DataLoader workers,
# where a dozen small numpy calls would cost more than the loop.
@numba.njit(cache=True, nogil=True)
def _spans(starts, ends, num_samples, sample_rate, cover, min_leading):  # pragma: no cover - compiled
    def to_sample(seconds):
        return min(max(np.int64(np.rint(seconds * sample_rate)), 0), num_samples)

    spans = np.empty((len(starts) + 1, 2), dtype=np.int64)
    count = 0
    if not cover:  # word spans only
        for i in range(len(starts)):
            lo, hi = to_sample(starts[i]), to_sample(ends[i])
            if hi > lo:
                spans[count, 0], spans[count, 1] = lo, hi
                count += 1
        return spans[:count], False
    previous = 0
    leading = False
    if len(starts) > 0:
        first = to_sample(starts[0])
        leading = first > 0 and first >= min_leading
        if leading:  # the initial silence is its own segment
            spans[0, 0], spans[0, 1] = 0, first
            count, previous = 1, first
    for i in range(len(starts)):
        # A word's segment ends at the middle of the gap to the next word; the last one at the end.
        if i + 1 < len(starts):
            bound = (to_sample(ends[i]) + to_sample(starts[i + 1])) // 2
        else:
            bound = num_samples
        if bound > previous:
            spans[count, 0], spans[count, 1] = previous, bound
            count, previous = count + 1, bound
    if len(starts) == 0 and num_samples > 0:  # no words: the whole utterance
        spans[0, 0], spans[0, 1] = 0, num_samples
        count = 1
    return spans[:count], leading

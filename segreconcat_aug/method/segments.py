"""Word times -> sample spans: the *segmentation* step of SegReConcat.

Spans are half-open sample ranges ``[start, end)``; the span rules (``segment_policy``) are in
docs/rearrangement.md.

>>> import numpy as np
>>> starts, ends = np.array([0.5, 1.0]), np.array([0.8, 1.5])
>>> seg = word_segments(starts, ends, 3200, 1000, "cover")
>>> seg.spans.tolist(), seg.leading_silence
([[0, 500], [500, 900], [900, 3200]], True)
>>> word_segments(starts, ends, 3200, 1000, "words").spans.tolist()
[[500, 800], [1000, 1500]]
>>> word_segments(starts, ends, 3200, 1000, "words_to_end").spans.tolist()
[[500, 800], [1000, 3200]]
>>> word_segments(starts, ends, 3200, 1000, "onsets").spans.tolist()
[[0, 500], [500, 1000], [1000, 3200]]
>>> word_segments(starts, ends, 3200, 1000, "authors", strategy="acoustic").spans.tolist()
[[0, 500], [500, 1000], [1000, 3200]]
"""

from __future__ import annotations

from typing import NamedTuple

import numba
import numpy as np

SPAN_RULES = ("words", "words_to_end", "onsets", "cover")  # the order is the kernel's rule number
SEGMENT_POLICIES = ("authors", *SPAN_RULES)
# The authors' scripts, per strategy (see the module doc); a plug-in strategy gets word spans.
AUTHORS_SPANS = {"random": "words", "semantic": "words_to_end", "acoustic": "onsets"}


class Segments(NamedTuple):
    """Sample spans of an utterance's segments, in original order."""

    spans: np.ndarray  # int64, shape (N, 2): [start, end)
    leading_silence: bool  # True when spans[0] is a silence segment (onsets, cover)

    def __len__(self) -> int:
        return len(self.spans)

    @property
    def lengths(self) -> np.ndarray:
        return self.spans[:, 1] - self.spans[:, 0]

    def peak(self, audio: np.ndarray) -> float:
        """``max |sample|`` over the segments (0 for none): the peak of any rearrangement of them.

        >>> Segments(np.array([[0, 2], [3, 4]]), False).peak(np.array([0.1, -0.5, 0.9, 0.2], np.float32))
        0.5
        """
        return max((float(np.max(np.abs(audio[s:e]))) for s, e in self.spans if e > s), default=0.0)


def check_segment_policy(policy: str) -> str:
    """``policy`` if it is one of :data:`SEGMENT_POLICIES`, else a ValueError listing them."""
    if policy not in SEGMENT_POLICIES:
        raise ValueError(f"unknown segment policy {policy!r}; choose from {SEGMENT_POLICIES}")
    return policy


def span_rule(policy: str, strategy: str | None = None) -> str:
    """The span rule ``policy`` means for ``strategy`` (``authors`` depends on it).

    >>> span_rule("authors", "random"), span_rule("authors", "acoustic"), span_rule("cover", "acoustic")
    ('words', 'onsets', 'cover')
    """
    check_segment_policy(policy)
    if policy != "authors":
        return policy
    if strategy is None:
        raise ValueError("segment_policy 'authors' cuts per strategy: name the strategy")
    return AUTHORS_SPANS.get(strategy, "words")


def word_segments(
    starts: np.ndarray,
    ends: np.ndarray,
    num_samples: int,
    sample_rate: int,
    policy: str = "authors",
    min_leading_silence: float = 0.0,
    *,
    strategy: str | None = None,
) -> Segments:
    """Turn cleaned word times (seconds) into sample spans."""
    rule = span_rule(policy, strategy)
    spans, leading = _spans(
        np.asarray(starts, dtype=np.float64),
        np.asarray(ends, dtype=np.float64),
        int(num_samples),
        int(sample_rate),
        SPAN_RULES.index(rule),
        int(round(min_leading_silence * sample_rate)),
    )
    return Segments(spans, bool(leading))


# Compiled: segmentation runs for every training sample in the DataLoader workers,
# where a dozen small numpy calls would cost more than the loop.
@numba.njit(cache=True, nogil=True)
def _spans(starts, ends, num_samples, sample_rate, rule, min_leading):  # pragma: no cover - compiled
    # rule: 0 words, 1 words_to_end, 2 onsets, 3 cover (SPAN_RULES)
    def to_sample(seconds):
        return min(max(np.int64(np.rint(seconds * sample_rate)), 0), num_samples)

    spans = np.empty((len(starts) + 1, 2), dtype=np.int64)
    count = 0
    if rule <= 1:  # word spans only
        for i in range(len(starts)):
            lo, hi = to_sample(starts[i]), to_sample(ends[i])
            if rule == 1 and i + 1 == len(starts):
                hi = num_samples  # the last word runs to the end of the file
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
        # A word's segment ends at the next word's start (onsets) or at the middle of
        # the gap to it (cover); the last one at the end of the file.
        if i + 1 < len(starts):
            if rule == 2:
                bound = to_sample(starts[i + 1])
            else:
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

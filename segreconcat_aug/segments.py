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
    if policy not in SEGMENT_POLICIES:
        raise ValueError(f"unknown segment policy {policy!r}; choose from {SEGMENT_POLICIES}")
    # One vectorized pass (this runs per training sample in the DataLoader workers).
    samples = np.rint(np.stack([starts, ends], axis=1) * sample_rate).astype(np.int64)
    samples = np.minimum(np.maximum(samples, 0), num_samples).reshape(-1, 2)
    start_samples, end_samples = samples[:, 0], samples[:, 1]
    if policy == "words":
        return Segments(samples[end_samples > start_samples], False)

    if len(start_samples) == 0:
        whole = [[0, num_samples]] if num_samples > 0 else []
        return Segments(np.array(whole, dtype=np.int64).reshape(-1, 2), False)
    # Cut at the middle of each gap between consecutive words.
    cuts = (end_samples[:-1] + start_samples[1:]) // 2
    first_start = int(start_samples[0])
    leading = first_start >= round(min_leading_silence * sample_rate) and first_start > 0
    bounds = np.concatenate([[0], [first_start] if leading else [], cuts, [num_samples]]).astype(np.int64)
    spans = np.stack([bounds[:-1], bounds[1:]], axis=1)
    keep = spans[:, 1] > spans[:, 0]
    leading = bool(leading and keep[0])
    return Segments(spans[keep], leading)

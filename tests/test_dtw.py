"""All-pairs DTW (segreconcat_aug.method.dtw) against librosa.sequence.dtw."""

import librosa
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from segreconcat_aug.method.dtw import pairwise_dtw


def librosa_last_cell(x, y):
    return librosa.sequence.dtw(x, y, metric="euclidean")[0][-1, -1]


@st.composite
def sequence_sets(draw):
    """2..7 sequences of one dimension d, lengths 1..25, values of MFCC-like scale.

    d is drawn from a few values because each d compiles a kernel of its own (~2 s):
    1 (no dimension loop), 2, an odd 5 and the paper's 13.
    """
    dims = draw(st.sampled_from([1, 2, 5, 13]))
    lengths = draw(st.lists(st.integers(1, 25), min_size=2, max_size=7))
    seed = draw(st.integers(0, 2**32 - 1))
    scale = draw(st.sampled_from([1e-3, 1.0, 300.0]))
    rng = np.random.default_rng(seed)
    return [rng.normal(size=(dims, length)) * scale for length in lengths]


@settings(max_examples=60, deadline=None)
@given(sequence_sets())
def test_pairwise_matches_librosa(features):
    ours = pairwise_dtw(features)
    count = len(features)
    for i in range(count):
        assert ours[i, i] == 0.0
        for j in range(i + 1, count):
            reference = librosa_last_cell(features[i], features[j])
            assert ours[i, j] == pytest.approx(reference, rel=1e-9, abs=1e-12)
            assert ours[j, i] == ours[i, j]


def test_many_segments_of_every_length_match_librosa():
    # Enough segments that each row splits into four chains at many borders; lengths 1..30, d = 1 and 13.
    rng = np.random.default_rng(11)
    for dims in (1, 13):
        features = [rng.normal(size=(dims, int(n))) * 10 for n in rng.integers(1, 31, 40)]
        ours = pairwise_dtw(features)
        reference = np.array(
            [
                [librosa_last_cell(x, y) if i != j else 0.0 for j, y in enumerate(features)]
                for i, x in enumerate(features)
            ]
        )
        np.testing.assert_allclose(ours, reference, rtol=1e-9, atol=0)


def test_real_mfcc_lengths_match_librosa():
    # The benchmark's shape: 13 x T, T in 15..80, with repeated frames (ties in the recursion).
    rng = np.random.default_rng(3)
    features = [
        np.repeat(rng.normal(size=(13, int(n) // 2 + 1)) * 50, 2, axis=1) for n in rng.integers(15, 81, 6)
    ]
    ours = pairwise_dtw(features)
    for i in range(6):
        for j in range(6):
            if i != j:
                assert ours[i, j] == pytest.approx(librosa_last_cell(features[i], features[j]), rel=1e-9)


def test_single_pair_and_asymmetric_lengths():
    x = np.array([[0.0, 0.0, 5.0, 5.0, 5.0]])
    y = np.array([[0.0, 5.0]])
    assert pairwise_dtw([x, y])[0, 1] == pytest.approx(librosa_last_cell(x, y), rel=1e-12)
    assert pairwise_dtw([x, y])[0, 1] == 0.0  # a warping exists with zero cost
    assert pairwise_dtw([y, x + 1.0])[0, 1] == pytest.approx(librosa_last_cell(y, x + 1.0), rel=1e-12)


def test_small_counts():
    assert pairwise_dtw([]).shape == (0, 0)
    assert pairwise_dtw([np.ones((3, 4))]).tolist() == [[0.0]]


@pytest.mark.parametrize(
    "features, message",
    [
        ([np.ones((3, 4)), np.ones((2, 4))], "same d"),
        ([np.ones((3, 4)), np.ones((3, 0))], "sequence 1 has no frames"),
        ([np.ones((3, 4)), np.ones((3, 2)), np.full((3, 2), np.nan)], "sequence 2 has non-finite"),
    ],
)
def test_bad_input_names_the_sequence(features, message):
    with pytest.raises(ValueError, match=message):
        pairwise_dtw(features)

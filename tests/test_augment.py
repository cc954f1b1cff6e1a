"""The SegReConcat augmenter on real LibriSpeech audio."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from segreconcat_aug.align.cache import AlignmentIndex, load_alignments
from segreconcat_aug.data.audio import read_audio
from segreconcat_aug.method.augment import MissingAlignmentError, SegReConcat
from segreconcat_aug.method.render import chain_plan, render
from segreconcat_aug.method.strategies import STRATEGIES, get_strategy, register_strategy

UTT = "27-123349-0009"  # 5.1 s, 14 words


@pytest.fixture(scope="module")
def alignments(vpac_root):
    return load_alignments(vpac_root / "alignments" / "B3.jsonl")


@pytest.fixture(scope="module")
def audio(librispeech_dir):
    return read_audio(librispeech_dir / f"{UTT}.flac")


@pytest.fixture(scope="module")
def gapped(audio):
    """Word times for UTT with a 0.3 s lead-in and a 0.1 s pause after every word."""
    starts = 0.3 + 0.4 * np.arange(12)
    return _index({UTT: list(zip(starts, starts + 0.3))}, duration=len(audio) / 16000)


def _index(spans_by_utt, duration=1.0):
    ids, durations, offsets, starts, ends = [], [], [0], [], []
    for utt, spans in spans_by_utt.items():
        ids.append(utt)
        durations.append(duration)
        starts += [s for s, _ in spans]
        ends += [e for _, e in spans]
        offsets.append(len(starts))
    return AlignmentIndex(ids, durations, offsets, starts, ends, ["test"] * len(ids))


@pytest.mark.parametrize("policy", ["authors", "cover", "words", "words_to_end", "onsets"])
def test_concat_is_the_original_then_the_segments_in_a_new_order(alignments, audio, policy):
    augmenter = SegReConcat(alignments, mode="concat", segment_policy=policy, crossfade=0.0, seed=3)
    out = augmenter(audio, UTT, epoch=1)
    np.testing.assert_array_equal(out[: len(audio)], audio)
    segments = augmenter.segments(UTT, len(audio))
    order = augmenter.order(UTT, segments, audio, epoch=1)
    assert sorted(order.tolist()) == list(range(len(segments))) and len(segments) > 5
    expected = np.concatenate([audio[s:e] for s, e in segments.spans[order]])
    np.testing.assert_array_equal(out[len(audio) :], expected)
    if policy in ("cover", "onsets"):
        assert len(out) == 2 * len(audio)
    else:
        assert len(out) == len(audio) + segments.lengths.sum() <= 2 * len(audio)


def test_rearranged_mode_is_the_segments_alone(alignments, audio):
    augmenter = SegReConcat(alignments, mode="rearranged", segment_policy="cover", seed=3)
    out = augmenter(audio, UTT, epoch=2)
    assert len(out) == len(audio) and not np.array_equal(out, audio)
    np.testing.assert_allclose(np.sort(out), np.sort(audio))  # same samples, new order


def test_exact_output_length_with_crossfade(alignments, audio):
    crossfade = 0.01
    augmenter = SegReConcat(alignments, mode="concat", crossfade=crossfade, seed=5)
    out = augmenter(audio, UTT, epoch=0)
    segments = augmenter.segments(UTT, len(audio))
    lengths = segments.lengths[augmenter.order(UTT, segments, audio, epoch=0)]
    c = int(round(crossfade * 16000))
    overlaps = sum(min(c, a // 2, b // 2) for a, b in zip(lengths, lengths[1:]))
    assert len(out) == len(audio) + lengths.sum() - overlaps
    np.testing.assert_array_equal(out[: len(audio)], audio)
    assert np.max(np.abs(out)) <= np.max(np.abs(audio)) * 1.5


def test_crossfade_removes_the_click_at_a_cut():
    # Two constant pieces at different levels: a hard cut jumps by 2, a crossfade ramps.
    audio = np.concatenate([-np.ones(400, dtype=np.float32), np.ones(400, dtype=np.float32)])
    spans = np.array([[0, 400], [400, 800]])
    hard = render(audio, chain_plan(spans, 0))
    soft = render(audio, chain_plan(spans, 80))
    assert np.max(np.abs(np.diff(hard))) == 2.0
    assert np.max(np.abs(np.diff(soft))) < 0.1
    assert len(soft) == 800 - 80


def test_a_crossfade_is_equal_power_over_exactly_the_overlap():
    audio = np.concatenate([np.full(400, 1.0, dtype=np.float32), np.full(400, 2.0, dtype=np.float32)])
    for c in (80, 300):  # 300: limited to half a piece (200), computed rather than tabulated
        out = render(audio, chain_plan(np.array([[0, 400], [400, 800]]), c))
        overlap = min(c, 200)
        phase = (np.arange(overlap) + 0.5) / overlap * np.pi / 2
        np.testing.assert_allclose(out[400 - overlap : 400], np.cos(phase) + 2 * np.sin(phase), rtol=1e-6)
        assert np.all(out[: 400 - overlap] == 1.0) and np.all(out[400:] == 2.0) and len(out) == 800 - overlap


def test_rendering_a_window_equals_slicing_the_whole_output(alignments, audio):
    augmenter = SegReConcat(alignments, mode="concat", crossfade=0.01, seed=9)
    plan, _ = augmenter.plan(audio, UTT, epoch=4)
    whole = augmenter(audio, UTT, epoch=4)
    assert plan.length == len(whole)
    for start in (0, len(audio) - 8000, len(audio) + 1234, plan.length - 48000, plan.length - 10):
        np.testing.assert_array_equal(render(audio, plan, start, start + 48000), whole[start : start + 48000])


@settings(max_examples=150, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 400), min_size=1, max_size=12),
    crossfade=st.integers(0, 40),
    original=st.integers(0, 500),
    window=st.tuples(st.integers(0, 6000), st.integers(1, 3000)),
    merge_gap=st.sampled_from([0, 50, 10**6]),
    seed=st.integers(0, 2**32 - 1),
)
def test_the_input_ranges_are_all_a_window_reads(lengths, crossfade, original, window, merge_gap, seed):
    # Samples outside input_ranges are NaN: rendering the window from them alone
    # must give the same samples as from the whole input, with no NaN leaking in.
    rng = np.random.default_rng(seed)
    edges = np.concatenate([[0], np.cumsum(lengths)])
    spans = np.stack([edges[:-1], edges[1:]], axis=1)[rng.permutation(len(lengths))]
    audio = rng.normal(size=int(edges[-1]) + original).astype(np.float32)
    plan = chain_plan(spans, crossfade, fade_in_first=original > 0, after_original=original)
    start, stop = window[0] % max(plan.length, 1), window[0] % max(plan.length, 1) + window[1]
    ranges = plan.input_ranges(start, stop, merge_gap=merge_gap)
    assert np.all(ranges[:, 0] < ranges[:, 1]) and np.all(ranges[1:, 0] - ranges[:-1, 1] > merge_gap)
    whole = render(audio, plan, start, stop)
    masked = np.full_like(audio, np.nan)
    for a, b in ranges:
        masked[a:b] = audio[a:b]
    np.testing.assert_array_equal(render(masked, plan, start, stop), whole)
    if len(whole):
        lo, hi = ranges[0, 0], ranges[-1, 1]
        np.testing.assert_array_equal(render(masked[lo:hi], plan, start, stop, audio_start=lo), whole)
        for edge in ranges.ravel() - [0, 1] * len(ranges):  # every range's first and last sample is read
            bumped = audio.copy()
            bumped[edge] += 1.0
            assert not np.array_equal(render(bumped, plan, start, stop), whole)
    else:
        assert ranges.shape == (0, 2)


def test_rr_is_drawn_once_per_utterance_for_the_whole_training_by_default(alignments, audio):
    augmenter = SegReConcat(alignments, seed=11)
    segments = augmenter.segments(UTT, len(audio))
    epoch1 = augmenter.order(UTT, segments, audio, epoch=1)
    assert epoch1.tolist() != list(range(len(segments)))
    for epoch in (2, 5, 30):
        np.testing.assert_array_equal(augmenter.order(UTT, segments, audio, epoch=epoch), epoch1)
    np.testing.assert_array_equal(augmenter(audio, UTT, epoch=5), augmenter(audio, UTT, epoch=1))
    # Drawn from the seed and the utterance id: another seed or utterance, another order.
    assert SegReConcat(alignments, seed=12).order(UTT, segments, audio, epoch=1).tolist() != epoch1.tolist()
    other = "27-123349-0001"
    assert augmenter.order(other, segments, audio, epoch=1).tolist() != epoch1.tolist()
    redrawn = SegReConcat(alignments, seed=11, rr_redraw="epoch")
    assert (
        redrawn.order(UTT, segments, audio, epoch=5).tolist()
        != redrawn.order(UTT, segments, audio, 1).tolist()
    )


def test_joins_are_hard_splices_by_default(gapped, audio):
    augmenter = SegReConcat(gapped, mode="concat", seed=2)
    plan, _ = augmenter.plan(audio, UTT, epoch=1)
    assert plan.crossfade == 0 and not plan.fade_in.any() and not plan.fade_out.any()
    segments = augmenter.segments(UTT, len(audio))
    order = augmenter.order(UTT, segments, audio, epoch=1)
    pieces = [audio] + [audio[s:e] for s, e in segments.spans[order]]
    np.testing.assert_array_equal(augmenter(audio, UTT, epoch=1), np.concatenate(pieces))  # bit-exact


def test_rr_rearranged_half_holds_exactly_the_word_spans(gapped, audio):
    augmenter = SegReConcat(gapped, mode="concat", seed=4)
    starts, ends = gapped.spans(UTT)
    words = np.rint(np.stack([starts, ends], axis=1) * 16000).astype(np.int64)
    segments = augmenter.segments(UTT, len(audio))
    assert segments.spans.tolist() == words.tolist() and not segments.leading_silence  # pauses dropped
    order = augmenter.order(UTT, segments, audio, epoch=1)
    out = augmenter(audio, UTT, epoch=1)
    np.testing.assert_array_equal(out[: len(audio)], audio)
    np.testing.assert_array_equal(out[len(audio) :], np.concatenate([audio[s:e] for s, e in words[order]]))
    assert len(out) - len(audio) == (words[:, 1] - words[:, 0]).sum() < len(audio)


def _semantic(index, audio, **options):
    segments = SegReConcat(index, segment_policy="words_to_end").segments(UTT, len(audio))
    order = np.roll(np.arange(len(segments)), 3)
    return SegReConcat(index, strategy="semantic", orders={UTT: order}, **options), segments, order


def test_sr_rearranged_audio_is_zero_padded_and_peak_normalized_as_the_authors(gapped, audio):
    augmenter, segments, order = _semantic(gapped, audio)
    assert segments.spans[-1, 1] == len(audio)  # SR's last word runs to the end of the file
    assert segments.spans[0, 0] > 0 and np.all(segments.spans[1:, 0] > segments.spans[:-1, 1])  # no pauses
    assert augmenter.segments(UTT, len(audio)).spans.tolist() == segments.spans.tolist()
    assert not augmenter.plans_from_length  # the peak needs the samples
    rearranged = np.concatenate([audio[s:e] for s, e in segments.spans[order]])
    out = augmenter(audio, UTT, epoch=1)
    assert len(out) == 2 * len(audio)
    np.testing.assert_array_equal(out[: len(audio)], audio)  # the original half untouched
    half = out[len(audio) :]
    np.testing.assert_allclose(half[: len(rearranged)], rearranged / np.abs(rearranged).max(), rtol=1e-6)
    assert np.abs(half).max() == pytest.approx(1.0, abs=1e-6) and not half[len(rearranged) :].any()
    alone = SegReConcat(gapped, mode="rearranged", strategy="semantic", orders={UTT: order})(audio, UTT, 1)
    np.testing.assert_array_equal(alone, half)
    plain, _, _ = _semantic(gapped, audio, sr_pad_normalize=False)
    assert plain.plans_from_length
    np.testing.assert_array_equal(plain(audio, UTT, epoch=1), np.concatenate([audio, rearranged]))
    # The peak the order cache stores: the same output, planned from the length alone.
    cached, _, _ = _semantic(gapped, audio, peaks={UTT: segments.peak(audio)})
    assert cached.plans_from_length
    np.testing.assert_array_equal(render(audio, cached.plan(None, UTT, 1, num_samples=len(audio))[0]), out)


def test_ar_segments_start_at_word_starts_with_the_leading_silence_first(gapped, audio):
    augmenter = SegReConcat(gapped, strategy="acoustic", orders={})
    starts, _ = gapped.spans(UTT)
    segments = augmenter.segments(UTT, len(audio))
    assert segments.leading_silence
    onsets = np.rint(starts * 16000).astype(np.int64)
    assert segments.spans[:, 0].tolist() == [0, *onsets.tolist()]
    assert segments.spans[:, 1].tolist() == [*onsets.tolist(), len(audio)]  # pauses stay with the word before


def test_permutations_are_reproducible_and_change_every_epoch_with_rr_redraw_epoch(alignments, audio):
    first = SegReConcat(alignments, seed=11, rr_redraw="epoch")
    second = SegReConcat(alignments, seed=11, rr_redraw="epoch")
    epoch1 = first(audio, UTT, epoch=1)
    np.testing.assert_array_equal(epoch1, second(audio, UTT, epoch=1))
    others = [first(audio, UTT, epoch=e) for e in range(2, 6)]
    assert all(not np.array_equal(epoch1, other) for other in others)
    assert not np.array_equal(
        epoch1, SegReConcat(alignments, seed=12, rr_redraw="epoch")(audio, UTT, epoch=1)
    )


def test_utterances_with_few_segments_pass_through_and_say_why():
    index = _index({"none": [], "one": [(0.2, 0.6)], "two": [(0.0, 0.5), (0.5, 1.0)]})
    audio = np.linspace(-1, 1, 16000, dtype=np.float32)
    rearranged = SegReConcat(index, mode="rearranged", segment_policy="words", crossfade=0.0)
    np.testing.assert_array_equal(rearranged(audio, "none", 0), audio)
    np.testing.assert_array_equal(rearranged(audio, "one", 0), audio)
    outcomes = [rearranged.plan(audio, utt, 0)[1] for utt in ("none", "one", "two")]
    assert outcomes == ["few_segments", "few_segments", "augmented"]
    concat = SegReConcat(index, mode="concat", segment_policy="words", crossfade=0.0)
    np.testing.assert_array_equal(concat(audio, "none", 0), audio)
    assert len(concat(audio, "one", 0)) == 16000 + 6400
    assert (
        concat.plan(audio, "none", 0) == (None, "no_segments")
        and concat.plan(audio, "one", 0)[1] == "augmented"
    )


def test_missing_alignment_policies(alignments, audio):
    strict = SegReConcat(alignments)
    with pytest.raises(
        MissingAlignmentError, match=r"2 of 3 training utterances have no alignment; first: \['x1', 'x2'\]"
    ):
        strict.check_coverage([UTT, "x1", "x2"])
    with pytest.raises(MissingAlignmentError, match="'x1' has no alignment"):
        strict(audio, "x1", 0)
    lenient = SegReConcat(alignments, missing_alignment="passthrough")
    assert lenient.check_coverage([UTT, "x1"]) == ["x1"]
    np.testing.assert_array_equal(lenient(audio, "x1", 0), audio)
    assert lenient.plan(audio, "x1", 0) == (None, "missing_alignment")


def test_mode_none_returns_the_input(alignments, audio):
    augmenter = SegReConcat(alignments, mode="none")
    assert augmenter.check_coverage(["anything"]) == []
    np.testing.assert_array_equal(augmenter(audio, "anything", 0), audio)


def test_bad_configuration_is_refused(alignments):
    with pytest.raises(ValueError, match="unknown mode 'shuffle'"):
        SegReConcat(alignments, mode="shuffle")
    with pytest.raises(ValueError, match="unknown strategy 'nope'; available: .*'random'"):
        SegReConcat(alignments, strategy="nope")
    with pytest.raises(ValueError, match="unknown missing_alignment policy"):
        SegReConcat(alignments, missing_alignment="skip")
    with pytest.raises(ValueError, match="unknown rr_redraw 'always'"):
        SegReConcat(alignments, rr_redraw="always")
    with pytest.raises(ValueError, match="unknown segment policy 'gaps'"):
        SegReConcat(alignments, segment_policy="gaps")


def test_a_new_strategy_slots_in_without_touching_the_augmenter(alignments, audio):
    @register_strategy("reverse_for_test", paper_name="REV")
    def reverse(segments, audio, rng, **_):
        return np.arange(len(segments))[::-1]

    try:
        augmenter = SegReConcat(alignments, mode="rearranged", strategy="reverse_for_test", crossfade=0.0)
        segments = augmenter.segments(UTT, len(audio))
        expected = np.concatenate([audio[s:e] for s, e in segments.spans[::-1]])
        np.testing.assert_array_equal(augmenter(audio, UTT, 0), expected)
        assert get_strategy("reverse_for_test").paper_name == "REV"
    finally:
        del STRATEGIES["reverse_for_test"]


def test_precomputed_strategy_reads_orders_and_checks_them(alignments, audio):
    @register_strategy("fixed_for_test", precomputed=True)
    def fixed(segments, audio, rng, **_):  # pragma: no cover - computed offline
        raise AssertionError("a precomputed strategy must not run in the pipeline")

    try:
        with pytest.raises(ValueError, match="reads precomputed orders"):
            SegReConcat(alignments, strategy="fixed_for_test")
        n = len(SegReConcat(alignments).segments(UTT, len(audio)))
        orders = {UTT: np.roll(np.arange(n), 1)}
        augmenter = SegReConcat(alignments, strategy="fixed_for_test", orders=orders, crossfade=0.0)
        out = augmenter(audio, UTT, 0)
        np.testing.assert_array_equal(out, augmenter(audio, UTT, 7))  # no epoch dependence
        with pytest.raises(MissingAlignmentError, match=r"have no fixed_for_test order"):
            augmenter.check_coverage([UTT, "27-123349-0001"])
        bad = SegReConcat(alignments, strategy="fixed_for_test", orders={UTT: [0, 1]})
        with pytest.raises(ValueError, match=rf"'{UTT}': fixed_for_test order \[0, 1\] is not a permutation"):
            bad(audio, UTT, 0)
    finally:
        del STRATEGIES["fixed_for_test"]

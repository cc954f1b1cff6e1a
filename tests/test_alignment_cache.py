"""The alignment cache: cleaning, validation errors, resuming after a kill, fast index."""

import json
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from segreconcat_aug.align.cache import (
    AlignmentCacheError,
    UtteranceAlignment,
    Word,
    clean_words,
    load_alignments,
)
from segreconcat_aug.data.jobs import Job, Shard, merge_jsonl, shard_path
from segreconcat_aug.data.jsonl_files import truncate_partial_tail


def _write_lines(path, lines):
    path.write_text("".join(line + "\n" for line in lines))
    return path


def _record(utt, words, duration=3.0):
    return json.dumps(
        {"id": utt, "duration": duration, "words": [{"word": w, "start": s, "end": e} for w, s, e in words]}
    )


times = st.floats(-1.0, 4.0, allow_nan=False)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(times, times), max_size=20), st.floats(0.1, 3.0))
def test_clean_words_gives_sorted_disjoint_words_inside_the_audio(pairs, duration):
    words = [Word(f"w{k}", s, e) for k, (s, e) in enumerate(pairs)]
    stats = Counter()
    cleaned = clean_words(words, duration, stats)
    for word in cleaned:
        assert 0.0 <= word.start < word.end <= duration
    for left, right in zip(cleaned, cleaned[1:]):
        assert left.end <= right.start
    assert len(cleaned) + stats["dropped_empty"] == len(words)


def test_clean_words_counts_each_kind_of_fix():
    stats = Counter()
    words = [Word("c", 2.5, 3.5), Word("a", 0.0, 1.2), Word("b", 1.0, 2.0), Word("z", 2.0, 2.0)]
    cleaned = clean_words(words, 3.0, stats)
    assert [w.word for w in cleaned] == ["a", "b", "c"]
    assert cleaned[0].end == pytest.approx(1.1) and cleaned[1].start == pytest.approx(1.1)
    assert cleaned[2].end == 3.0
    assert stats == Counter(reordered=1, clamped=1, overlaps_resolved=1, dropped_empty=1)


def test_lines_and_index_round_trip(tmp_path):
    alignments = [
        UtteranceAlignment("u1", 2.0, [Word("hello", 0.1, 0.5), Word("there", 0.5, 1.9)], "x"),
        UtteranceAlignment("u2", 1.0, [], "x"),
        UtteranceAlignment("u3", 1.0, [Word("late", 0.5, 1.7)], "x"),
    ]
    path = _write_lines(tmp_path / "cache.jsonl", [alignment.to_json() for alignment in alignments])
    index = load_alignments(path, keep_words=True)
    assert len(index) == 3 and "u2" in index and "nope" not in index
    starts, ends = index.spans("u1")
    np.testing.assert_allclose(starts, [0.1, 0.5])
    np.testing.assert_allclose(ends, [0.5, 1.9])
    assert index.spans("u2")[0].size == 0
    assert index.get("u3").words == [Word("late", 0.5, 1.0)]  # clamped when read
    assert index.stats == Counter(clamped=1) and index.repaired_ids == ["u3"]
    assert index.missing(["u1", "u9", "u3", "u8"]) == ["u9", "u8"]


@pytest.mark.parametrize(
    "line, message",
    [
        ("{not json", "not valid JSON"),
        ('{"duration": 1.0, "words": []}', "missing key 'id'"),
        ('{"id": "u", "duration": -1, "words": []}', "duration must be a positive number"),
        ('{"id": "u", "duration": 1, "words": [{"word": "a", "start": "x", "end": 1}]}', "word 0 needs"),
        ('{"id": "u", "duration": 1, "words": {}}', "'words' must be a list"),
    ],
)
def test_malformed_line_names_file_and_line(tmp_path, line, message):
    path = _write_lines(tmp_path / "bad.jsonl", [_record("ok", [("a", 0, 1)]), line])
    with pytest.raises(AlignmentCacheError, match=rf"bad\.jsonl:2: .*{message}"):
        load_alignments(path)


def test_duplicate_id_names_both_places(tmp_path):
    folder = tmp_path / "shards"
    folder.mkdir()
    _write_lines(folder / "a.jsonl", [_record("u1", [("a", 0, 1)])])
    _write_lines(folder / "b.jsonl", [_record("u2", []), _record("u1", [])])
    with pytest.raises(
        AlignmentCacheError, match=r"b\.jsonl:2: id 'u1' already defined at .*a\.jsonl:1 with other content"
    ):
        load_alignments(folder)


def test_shards_of_a_file_load_before_and_after_a_merge(tmp_path, caplog):
    """A sharded run into b3.jsonl: its parts load as one cache, merged or not (the merge keeps them)."""
    target = tmp_path / "b3.jsonl"
    records = {"u1": [("a", 0.1, 0.5)], "u2": [("b", 0.2, 0.9)], "u3": [("c", 1.0, 1.4)]}
    parts = [shard_path(target, Shard(k, 2)) for k in range(2)]
    for k, (utt, words) in enumerate(records.items()):
        with open(parts[k % 2], "a", encoding="utf-8") as handle:
            handle.write(UtteranceAlignment(utt, 3.0, [Word(*w) for w in words], "test").to_json() + "\n")
    unmerged = load_alignments(target)
    assert sorted(unmerged.ids) == ["u1", "u2", "u3"]
    merge_jsonl(parts, target)
    with caplog.at_level("INFO", logger="segreconcat_aug.data.jsonl_files"):
        merged = load_alignments(target)
    assert sorted(merged.ids) == ["u1", "u2", "u3"]  # each once, though read from b3.jsonl and its parts
    for utt in records:
        assert [s.tolist() for s in merged.spans(utt)] == [s.tolist() for s in unmerged.spans(utt)]
    assert "3 alignments read twice" in caplog.text
    with pytest.raises(FileNotFoundError, match=r"b4\.jsonl: alignment cache not found .*b4\.part-"):
        load_alignments(tmp_path / "b4.jsonl")


def test_folder_of_shards_loads_as_one_index(tmp_path):
    folder = tmp_path / "shards"
    folder.mkdir()
    _write_lines(folder / "part-0.jsonl", [_record("u1", [("a", 0, 1)])])
    _write_lines(folder / "part-1.jsonl", [_record("u2", [("b", 0.5, 1)])])
    assert sorted(load_alignments(folder).ids) == ["u1", "u2"]


def test_half_written_tail_is_detected_truncated_and_redone(tmp_path):
    path = tmp_path / "cache.jsonl"
    complete = _record("u1", [("a", 0, 1)])
    path.write_text(complete + "\n" + _record("u2", [("b", 0, 1)])[:25])
    with pytest.raises(AlignmentCacheError, match="cache.jsonl:2"):
        load_alignments(path)
    with Job(path, progress=False) as job:
        assert job.done == {"u1"} and path.read_text() == complete + "\n"
        job.write("u2", UtteranceAlignment("u2", 3.0, [Word("b", 0, 1)]).to_json())
    assert load_alignments(path).ids == ["u1", "u2"]


def test_truncate_partial_tail_without_any_newline(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text('{"id": "u1", "dur')
    assert truncate_partial_tail(path) and path.read_text() == ""
    assert not truncate_partial_tail(path)


def test_loading_a_challenge_sized_cache_is_a_flat_index(tmp_path):
    path = tmp_path / "big.jsonl"
    rng = np.random.default_rng(0)
    with open(path, "w") as handle:
        for k in range(5000):
            ends = np.cumsum(rng.uniform(0.1, 0.5, 30))
            words = [("w", float(e - 0.1), float(e)) for e in ends]
            handle.write(_record(f"u{k}", words, duration=float(ends[-1] + 0.2)) + "\n")
    index = load_alignments(path)
    assert len(index) == 5000 and index.starts.shape == (150000,)
    assert index.offsets[-1] == 150000

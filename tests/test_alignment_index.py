"""The binary index of an alignment cache: the same index as parsing, rebuilt whenever it cannot be trusted."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from segreconcat_aug.align import cache as alignment
from segreconcat_aug.align.cache import index_path, load_alignments
from segreconcat_aug.data.jobs import Shard, merge_jsonl, shard_path


@pytest.fixture(autouse=True)
def index_small_caches(monkeypatch):
    monkeypatch.setattr(alignment, "INDEX_MIN_BYTES", 0)


def test_small_cache_is_parsed_and_nothing_written(tmp_path, monkeypatch):
    path = _messy_cache(tmp_path / "b3.jsonl", count=20)
    monkeypatch.setattr(alignment, "INDEX_MIN_BYTES", path.stat().st_size + 1)
    _same(load_alignments(path, use_index=False), load_alignments(path))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b3.jsonl"]


def _record(utt, words, duration=3.0, aligner="test"):
    return json.dumps(
        {
            "id": utt,
            "duration": duration,
            "aligner": aligner,
            "words": [{"word": w, "start": s, "end": e} for w, s, e in words],
        }
    )


def _messy_cache(path, count=300, seed=0):
    """Lines an aligner could write: unsorted, overlapping, out of range, empty and non-finite words."""
    rng = np.random.default_rng(seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        for k in range(count):
            duration = float(rng.uniform(1.0, 6.0))
            words = []
            for j in range(int(rng.integers(0, 12))):
                start = float(rng.uniform(-0.3, duration + 0.3))
                end = start + float(rng.uniform(-0.1, 0.8))
                words.append((f"w{k}é{j}", start, end))
            if k % 50 == 7:
                words.append(("nan", float("nan"), 1.0))
            handle.write(_record(f"u{k:04d}", words, duration, aligner=f"aligner-{k % 3}") + "\n")
    return path


def _same(a, b):
    assert a.ids == b.ids and a.aligners == b.aligners and a.words == b.words
    for name in ("durations", "offsets", "starts", "ends"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    assert a.stats == b.stats
    assert all(a.get(utt) == b.get(utt) for utt in a.ids[:20])


def _parsed_again(monkeypatch):
    """Make any parse fail: what loads now came from an index."""

    def refuse(*args, **kwargs):
        raise AssertionError("parsed although a valid index exists")

    monkeypatch.setattr(alignment, "_parse", refuse)


@pytest.mark.parametrize("keep_words", [False, True])
def test_index_gives_the_parsed_index_and_the_same_repair_counts(tmp_path, monkeypatch, keep_words):
    path = _messy_cache(tmp_path / "b3.jsonl")
    parsed = load_alignments(path, keep_words=keep_words, use_index=False)
    assert not index_path(path).exists()  # use_index=False writes nothing
    assert sum(parsed.stats.values()) > 0  # the fixture does exercise the cleaning
    built = load_alignments(path, keep_words=keep_words)
    assert index_path(path).is_file()
    _parsed_again(monkeypatch)
    indexed = load_alignments(path, keep_words=keep_words)
    _same(parsed, built)
    _same(parsed, indexed)


def test_merged_file_beside_its_parts_counts_each_record_once_from_the_indexes(tmp_path, monkeypatch):
    target = tmp_path / "b3.jsonl"
    whole = _messy_cache(tmp_path / "whole.jsonl", count=40)
    lines = whole.read_text().splitlines(keepends=True)
    parts = [shard_path(target, Shard(k, 2)) for k in range(2)]
    for k, part in enumerate(parts):
        part.write_text("".join(lines[k::2]))
    reference = load_alignments(whole, use_index=False)
    load_alignments(target)  # indexes the parts
    merge_jsonl(parts, target)
    parsed = load_alignments(target, use_index=False)
    load_alignments(target)  # indexes the merged file
    _parsed_again(monkeypatch)
    indexed = load_alignments(target)
    _same(parsed, indexed)
    assert sorted(indexed.ids) == sorted(reference.ids)
    assert indexed.stats == reference.stats and sum(reference.stats.values()) > 0


def test_conflicting_repeat_is_an_error_from_the_index_too(tmp_path):
    folder = tmp_path / "shards"
    folder.mkdir()
    (folder / "a.jsonl").write_text(_record("u1", [("a", 0, 1)]) + "\n")
    (folder / "b.jsonl").write_text(_record("u2", []) + "\n" + _record("u1", []) + "\n")
    for _ in range(2):  # parsed, then from the indexes of each (valid) file
        with pytest.raises(alignment.AlignmentCacheError, match=r"b\.jsonl:2: id 'u1' already defined at"):
            load_alignments(folder)


def test_index_is_rebuilt_when_the_cache_changes(tmp_path):
    path = tmp_path / "b3.jsonl"
    path.write_text(_record("u1", [("a", 0.1, 0.5)]) + "\n")
    assert load_alignments(path).ids == ["u1"]
    with open(path, "a", encoding="utf-8") as handle:  # an aligner resumed and appended
        handle.write(_record("u2", [("b", 0.2, 0.9)]) + "\n")
    assert load_alignments(path).ids == ["u1", "u2"]
    # The same size, and the modification time set back: the digest of the bytes tells.
    stat = path.stat()
    path.write_text(path.read_text().replace("0.9", "0.8"))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert path.stat().st_size == stat.st_size
    assert load_alignments(path).spans("u2")[1].tolist() == [0.8]


def test_index_of_another_version_of_the_code_is_not_used(tmp_path, monkeypatch):
    path = _messy_cache(tmp_path / "b3.jsonl", count=20)
    load_alignments(path)
    monkeypatch.setattr(alignment, "_CODE_DIGEST", "another-version")
    calls = []
    original = alignment._parse
    monkeypatch.setattr(alignment, "_parse", lambda *a: calls.append(a) or original(*a))
    load_alignments(path)
    assert len(calls) == 1


@pytest.mark.parametrize(
    "damage",
    [
        lambda data: data[: len(data) // 2],  # cut (a copy interrupted)
        lambda data: b"garbage" * 10,  # not an index at all
        lambda data: b"",  # empty
    ],
)
def test_damaged_index_is_ignored_and_rebuilt(tmp_path, caplog, damage):
    path = _messy_cache(tmp_path / "b3.jsonl", count=50)
    expected = load_alignments(path, use_index=False)
    load_alignments(path)
    location = index_path(path)
    location.write_bytes(damage(location.read_bytes()))
    with caplog.at_level("INFO", logger="segreconcat_aug.align.cache"):
        _same(expected, load_alignments(path))
    assert "alignment index ignored" in caplog.text
    with np.load(location) as saved:  # rewritten whole
        assert saved["offsets"].shape == (51,)


def test_index_with_inconsistent_arrays_is_rebuilt(tmp_path):
    path = _messy_cache(tmp_path / "b3.jsonl", count=50)
    expected = load_alignments(path, use_index=False)
    load_alignments(path)
    location = index_path(path)
    with np.load(location) as saved:
        arrays = dict(saved)
    arrays["starts"] = arrays["starts"][:-1]  # a valid zip whose arrays do not fit together
    with open(location, "wb") as handle:
        np.savez(handle, **arrays)
    _same(expected, load_alignments(path))


def test_unterminated_file_is_never_indexed(tmp_path):
    path = tmp_path / "b3.jsonl"
    path.write_text(_record("u1", [("a", 0, 1)]) + "\n" + _record("u2", [("b", 0, 1)])[:20])
    with pytest.raises(alignment.AlignmentCacheError, match=r"b3\.jsonl:2: not valid JSON"):
        load_alignments(path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b3.jsonl"]


def test_an_index_that_cannot_be_written_leaves_the_cache_loading(tmp_path, monkeypatch, caplog):
    """Something that is not our index at its place: left alone, the cache parsed at every load."""
    path = _messy_cache(tmp_path / "data" / "b3.jsonl", count=30)
    beside = index_path(path)
    beside.mkdir()
    expected = load_alignments(path, use_index=False)
    with caplog.at_level("INFO", logger="segreconcat_aug.align.cache"):
        _same(expected, load_alignments(path))
    assert "cannot write the binary index" in caplog.text
    assert beside.is_dir() and not [p for p in path.parent.iterdir() if p.name.endswith(".tmp")]
    _same(expected, load_alignments(path))


def test_read_only_folder_still_loads(tmp_path, monkeypatch):
    """A folder we may not write into (simulated: root, as CI runs, writes anywhere): the same index,
    and nothing left beside the file."""
    path = _messy_cache(tmp_path / "data" / "b3.jsonl", count=30)
    expected = load_alignments(path, use_index=False)

    real_open = open

    def no_write_access(file, mode="r", *args, **kwargs):  # the index's temporary cannot be made there
        if "w" in mode and Path(file).parent == path.parent:
            raise PermissionError(13, "Permission denied", str(file))
        return real_open(file, mode, *args, **kwargs)

    monkeypatch.setattr("builtins.open", no_write_access)
    _same(expected, load_alignments(path))
    assert sorted(p.name for p in path.parent.iterdir()) == ["b3.jsonl"]
    _same(expected, load_alignments(path))


def test_an_edit_that_keeps_the_size_and_the_time_is_seen(tmp_path):
    """Size and modification time restored after an edit (``touch -r``): the digest of the bytes gives it away."""
    path = tmp_path / "b3.jsonl"
    path.write_text(_record("u1", [("a", 0.1, 0.44), ("b", 0.6, 1.0)]) + "\n")
    os.utime(path, (1.6e9, 1.6e9))  # written long ago
    assert load_alignments(path).spans("u1")[1].tolist() == [0.44, 1.0]
    assert index_path(path).is_file()
    stat = path.stat()
    path.write_text(path.read_text().replace("0.44", "0.55"))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # what touch -r <copy> does
    assert (path.stat().st_size, path.stat().st_mtime_ns) == (stat.st_size, stat.st_mtime_ns)
    assert load_alignments(path).spans("u1")[1].tolist() == [0.55, 1.0]


def test_concurrent_loaders_all_get_the_full_index(tmp_path):
    """Several processes building the same index at once: each reads a whole one, none a half-written file."""
    path = _messy_cache(tmp_path / "b3.jsonl", count=400)
    expected = load_alignments(path, use_index=False)
    code = (
        "import sys; from segreconcat_aug.align.cache import load_alignments\n"
        "for _ in range(3):\n"
        "    index = load_alignments(sys.argv[1])\n"
        "    print(len(index), int(index.offsets[-1]), sum(index.stats.values()))\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    loaders = [
        subprocess.Popen([sys.executable, "-c", code, str(path)], stdout=subprocess.PIPE, text=True, env=env)
        for _ in range(3)
    ]
    outputs = [loader.communicate(timeout=120)[0].split("\n") for loader in loaders]
    line = f"{len(expected)} {int(expected.offsets[-1])} {sum(expected.stats.values())}"
    assert all(loader.returncode == 0 for loader in loaders)
    assert all(output[:3] == [line] * 3 for output in outputs)
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_a_folder_cache_keeps_its_index_inside_and_a_changed_part_rebuilds_it(tmp_path, monkeypatch):
    folder = tmp_path / "shards"
    _messy_cache(folder / "part-000-of-002.jsonl", count=30, seed=1)
    _messy_cache(folder / "part-001-of-002.jsonl", count=30, seed=2)
    (folder / "part-001-of-002.jsonl").write_text(
        (folder / "part-001-of-002.jsonl").read_text().replace('"u00', '"v00')
    )
    expected = load_alignments(folder, use_index=False)
    _same(expected, load_alignments(folder))
    assert index_path(folder) == folder / ".segreconcat-index.npz" and index_path(folder).is_file()
    (folder / "part-001-of-002.jsonl").unlink()  # another set of files: another digest
    assert len(load_alignments(folder)) == 30
    _parsed_again(monkeypatch)
    assert len(load_alignments(folder)) == 30

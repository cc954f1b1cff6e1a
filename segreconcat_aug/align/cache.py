"""The word-alignment cache: JSON Lines, one utterance per line.

This is the contract between the aligners (``recipes/align.py``), the order
cache and the augmenter::

    {"id": "1272-128104-0000", "duration": 5.855, "aligner": "faster-whisper:medium",
     "language": "en", "words": [{"word": "mister", "start": 0.42, "end": 0.71}, ...]}

Times are seconds. ``language`` (optional) is the language the aligner transcribed the
utterance in: Whisper's per-utterance detection, or the language it was told. On reading and writing, words are cleaned (see
:func:`clean_words`) and every fix is counted, so a user can see how much an
aligner's output had to be repaired.

Writing is append-only and crash-safe: a run killed mid-line leaves at most one
half-written last line, which :func:`completed_ids` detects and truncates, so a
rerun redoes that utterance and no id is ever written twice.

Example
-------
>>> import tempfile, os
>>> path = os.path.join(tempfile.mkdtemp(), "align.jsonl")
>>> with AlignmentWriter(path) as writer:
...     _ = writer.write(UtteranceAlignment("u1", 2.0, [Word("hello", 0.1, 0.5), Word("world", 0.5, 0.9)], "test"))
>>> index = load_alignments(path)
>>> index.spans("u1")
(array([0.1, 0.5]), array([0.5, 0.9]))
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import tempfile
import time
import zipfile
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np

from ..data.jsonl_files import cache_files, truncate_partial_tail
from ..errors import UserError

logger = logging.getLogger(__name__)


class AlignmentCacheError(UserError, ValueError):
    """A cache line is malformed; the message names the file and line."""


class Word(NamedTuple):
    """One aligned word, times in seconds."""

    word: str
    start: float
    end: float


@dataclass
class UtteranceAlignment:
    """The word alignment of one utterance."""

    id: str
    duration: float
    words: list[Word]
    aligner: str = "unknown"
    language: str | None = None  # the language transcribed (detected or forced); None: not recorded

    def to_json(self) -> str:
        """One cache line (without the newline)."""
        words = [{"word": w.word, "start": round(w.start, 4), "end": round(w.end, 4)} for w in self.words]
        record = {"id": self.id, "duration": round(self.duration, 4), "aligner": self.aligner}
        if self.language is not None:
            record["language"] = self.language
        record["words"] = words
        return json.dumps(record, ensure_ascii=False)

    @classmethod
    def from_record(cls, record: dict, where: str) -> UtteranceAlignment:
        """Build from a parsed JSON object; ``where`` is 'file:line' for errors."""
        if not isinstance(record, dict):
            raise AlignmentCacheError(f"{where}: expected a JSON object")
        try:
            utt_id = record["id"]
            duration = float(record["duration"])
            raw_words = record["words"]
        except KeyError as err:
            raise AlignmentCacheError(f"{where}: missing key {err}") from None
        except (TypeError, ValueError):
            raise AlignmentCacheError(f"{where}: duration is not a number") from None
        if not isinstance(utt_id, str) or not utt_id:
            raise AlignmentCacheError(f"{where}: 'id' must be a non-empty string")
        if not np.isfinite(duration) or duration <= 0:
            raise AlignmentCacheError(f"{where}: duration must be a positive number, got {duration}")
        if not isinstance(raw_words, list):
            raise AlignmentCacheError(f"{where}: 'words' must be a list")
        words = []
        for k, item in enumerate(raw_words):
            try:
                words.append(Word(str(item["word"]), float(item["start"]), float(item["end"])))
            except (KeyError, TypeError, ValueError):
                raise AlignmentCacheError(
                    f"{where}: word {k} needs 'word', numeric 'start' and 'end', got {item!r}"
                ) from None
        language = record.get("language")
        if language is not None and not isinstance(language, str):
            raise AlignmentCacheError(f"{where}: 'language' must be a string, got {language!r}")
        return cls(utt_id, duration, words, str(record.get("aligner", "unknown")), language)


FIX_KEYS = (
    "reordered",
    "clamped",
    "overlaps_resolved",
    "dropped_empty",
    "dropped_nonfinite",
    "dropped_no_text",
)


def clean_words(words: Iterable[Word], duration: float, stats: Counter | None = None) -> list[Word]:
    """Sort, clamp to [0, duration], resolve overlaps and drop empty words and words without text.

    Overlapping neighbours are cut at the middle of the overlap (neither word
    wins); words with no time left are dropped. Each fix is counted in
    ``stats`` under the keys of :data:`FIX_KEYS`.

    Example
    -------
    >>> stats = Counter()
    >>> words = [Word("b", 0.4, 0.9), Word("a", -0.1, 0.6), Word("c", 1.5, 1.5), Word(" ", 0.9, 1.0)]
    >>> clean_words(words, 1.0, stats)
    [Word(word='a', start=0.0, end=0.5), Word(word='b', start=0.5, end=0.9)]
    >>> sorted(stats.items())
    [('clamped', 2), ('dropped_empty', 1), ('dropped_no_text', 1), ('overlaps_resolved', 1), ('reordered', 1)]
    """
    stats = Counter() if stats is None else stats
    finite = []
    for word in words:
        if not (math.isfinite(word.start) and math.isfinite(word.end)):
            stats["dropped_nonfinite"] += 1
            continue
        if not word.word.strip():  # a span with no text is not a word (a segment of nothing said)
            stats["dropped_no_text"] += 1
            continue
        finite.append(word)
    ordered = sorted(finite, key=lambda w: (w.start, w.end))
    if ordered != finite:
        stats["reordered"] += 1
    result: list[Word] = []
    for word in ordered:
        start, end = min(max(word.start, 0.0), duration), min(max(word.end, 0.0), duration)
        if (start, end) != (word.start, word.end):
            stats["clamped"] += 1
        if end <= start:
            stats["dropped_empty"] += 1
            continue
        if result and start < result[-1].end:
            previous = result[-1]
            # An earlier cut may have moved the previous start past ours.
            start = max(start, previous.start)
            cut = (start + previous.end) / 2
            stats["overlaps_resolved"] += 1
            if cut <= previous.start:  # no representable room left for the previous word
                result.pop()
                stats["dropped_empty"] += 1
            else:
                result[-1] = Word(previous.word, previous.start, cut)
                start = cut
            if end <= start:
                stats["dropped_empty"] += 1
                continue
        result.append(Word(word.word, start, end))
    return result


class AlignmentWriter:
    """Append cleaned alignments to a cache file, one flushed line each.

    Opening an existing file first truncates a half-written last line (from a
    killed run), so appending never glues two records together.
    """

    def __init__(self, path, *, fsync: bool = False):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.path.exists():
            truncate_partial_tail(self.path)
        self._handle = open(self.path, "a", encoding="utf-8")
        self._fsync = fsync
        self.stats: Counter = Counter()

    def write(self, alignment: UtteranceAlignment) -> UtteranceAlignment:
        """Clean, then write one line; returns the cleaned alignment."""
        words = clean_words(alignment.words, alignment.duration, self.stats)
        cleaned = UtteranceAlignment(
            alignment.id, alignment.duration, words, alignment.aligner, alignment.language
        )
        # One write call per record keeps a kill from interleaving two records.
        self._handle.write(cleaned.to_json() + "\n")
        self._handle.flush()
        if self._fsync:
            os.fsync(self._handle.fileno())
        return cleaned

    def close(self) -> None:
        self._handle.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def iter_jsonl(path, *, partial_tail: str = "error", error=None):
    """Yield ``(where, record, line)`` for each JSON line of an append-only cache file.

    ``where`` is ``"file:line"`` for error messages and ``line`` the raw text.
    Shared by the alignment and order caches. ``partial_tail="ignore"`` skips
    (and logs) a last line without its newline: a writer killed mid-line, or one
    still running. ``"error"`` parses it like any other line. Unparsable lines
    raise ``error`` (default :class:`AlignmentCacheError`) naming the file and line.
    """
    error = error or AlignmentCacheError
    path = Path(path)
    with open(path, encoding="utf-8") as handle:
        lines = handle.readlines()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        if partial_tail == "ignore" and number == len(lines) and not line.endswith("\n"):
            logger.warning("%s: ignoring an unterminated last line (a writer killed or still running)", where)
            return
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise error(f"{where}: not valid JSON ({err.msg})") from None
        yield where, record, line


def iter_cache(path, *, partial_tail: str = "error"):
    """Yield ``(line_number, UtteranceAlignment)`` from one alignment cache file (see :func:`iter_jsonl`)."""
    for where, record, _ in iter_jsonl(path, partial_tail=partial_tail):
        yield int(where.rsplit(":", 1)[1]), UtteranceAlignment.from_record(record, where)


def completed_ids(path) -> set[str]:
    """Ids already in a cache, after truncating a half-written tail (for resuming)."""
    path = Path(path)
    if not path.exists():
        return set()
    truncate_partial_tail(path)
    return {alignment.id for _, alignment in iter_cache(path)}


class RepeatedIds:
    """Where each id of a cache was first read, to decide what a second line for it means.

    The same line again (a merged file read beside its parts) is skipped and
    counted; another line for the same id is an error naming both places.

    >>> seen = RepeatedIds(ValueError)
    >>> seen.is_repeat("u1", "a.jsonl:1", '{"id": "u1"}\\n'), seen.is_repeat("u1", "b.jsonl:4", '{"id": "u1"}')
    (False, True)
    >>> seen.is_repeat("u1", "b.jsonl:5", '{"id": "u1", "x": 1}')
    Traceback (most recent call last):
    ...
    ValueError: b.jsonl:5: id 'u1' already defined at a.jsonl:1 with other content
    """

    def __init__(self, error: type[Exception]):
        self._first: dict[str, tuple[str, int]] = {}
        self._error = error
        self.repeats = 0

    def is_repeat(self, utt_id: str, where: str, line: str | None, fingerprint: int | None = None) -> bool:
        """``fingerprint`` (of the line without its newline) replaces ``line`` when given."""
        if fingerprint is None:
            fingerprint = hash(line.rstrip("\n"))  # the same process compares: str hashes are stable here
        first = self._first.get(utt_id)
        if first is None:
            self._first[utt_id] = (where, fingerprint)
            return False
        if first[1] != fingerprint:
            raise self._error(f"{where}: id {utt_id!r} already defined at {first[0]} with other content")
        self.repeats += 1
        return True

    def log(self, path, what: str) -> None:
        if self.repeats:
            logger.info(
                "%s: %d %s read twice (a merged file beside its parts) counted once", path, self.repeats, what
            )


class AlignmentIndex:
    """All alignments of a cache in flat arrays, indexed by utterance id.

    Flat numpy arrays (not one object per word) keep 104k utterances small,
    quick to load, and cheap to share with forked DataLoader workers.
    """

    def __init__(
        self,
        ids,
        durations,
        offsets,
        starts,
        ends,
        aligners,
        words=None,
        stats=None,
        repaired_ids=(),
        repaired_count: int = 0,
    ):
        self._row = {utt: k for k, utt in enumerate(ids)}
        self.ids = list(ids)
        self.durations = np.asarray(durations, dtype=np.float64)
        self.offsets = np.asarray(offsets, dtype=np.int64)
        self.starts = np.asarray(starts, dtype=np.float64)
        self.ends = np.asarray(ends, dtype=np.float64)
        self.aligners = list(aligners)
        self.words = words
        self.stats: Counter = stats if stats is not None else Counter()
        # The loader's repairs by utterance: how many utterances needed a fix, and the first of them.
        self.repaired_ids = list(repaired_ids)
        self.repaired_count = int(repaired_count)

    def __len__(self) -> int:
        return len(self.ids)

    def __contains__(self, utt_id) -> bool:
        return utt_id in self._row

    def spans(self, utt_id: str) -> tuple[np.ndarray, np.ndarray]:
        """Word start and end times (seconds) of one utterance."""
        row = self._row[utt_id]
        lo, hi = self.offsets[row], self.offsets[row + 1]
        return self.starts[lo:hi], self.ends[lo:hi]

    def duration(self, utt_id: str) -> float:
        return float(self.durations[self._row[utt_id]])

    def get(self, utt_id: str) -> UtteranceAlignment:
        """The alignment as an object (word text only if loaded with ``keep_words``)."""
        row = self._row[utt_id]
        starts, ends = self.spans(utt_id)
        lo = self.offsets[row]
        texts = self.words[lo : lo + len(starts)] if self.words is not None else [""] * len(starts)
        words = [Word(t, float(s), float(e)) for t, s, e in zip(texts, starts, ends)]
        return UtteranceAlignment(utt_id, self.duration(utt_id), words, self.aligners[row])

    def missing(self, utt_ids: Iterable[str]) -> list[str]:
        """The ids (in the given order) that have no alignment."""
        return [utt for utt in utt_ids if utt not in self._row]


def load_alignments(
    path, *, keep_words: bool = False, partial_tail: str = "error", use_index: bool = True
) -> AlignmentIndex:
    """Load a cache file (with its shards, see :func:`cache_files`) or folder into an :class:`AlignmentIndex`.

    Words are cleaned as they are read (fixes counted in ``index.stats``); an id
    that appears twice with different content is an error naming both places.

    ``use_index``: read each file's cleaned arrays from its binary index (see
    :func:`index_locations`) when that index matches the file's size,
    modification time and this module's code, and write one after a successful
    read otherwise (files of :data:`INDEX_MIN_BYTES` or more). The result, repair
    counts included, is the same either way.
    """
    parts, built = [], []
    for file in cache_files(path):
        indexed = use_index and file.stat().st_size >= INDEX_MIN_BYTES
        part = _read_index(file, keep_words) if indexed else None
        if part is None:
            part = _parse_file(file, keep_words, partial_tail)
            if indexed:
                built.append(part)
        parts.append(part)
    index = _combine(parts, keep_words, path)
    for part in built:  # only after the whole load succeeded: nothing broken is cached
        _write_index(part)
    return index


# ---------------------------------------------------------------------------------------------------------
# The binary index of one cache file: its cleaned arrays, so a 104k-utterance cache loads in a fraction of
# a second instead of parsing and cleaning millions of words in Python at every training start.

INDEX_FORMAT = 1
# Smaller caches (a few thousand utterances) parse in a fraction of a second: no file is written for them.
INDEX_MIN_BYTES = 4 << 20
_INDEX_SUFFIX = ".segreconcat-index.npz"
# Any change to this module (cleaning rules, record parsing) invalidates every index it wrote.
_CODE_DIGEST = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]


def _fingerprint(line: str) -> int:
    """A stable digest of a cache line (without its newline): equal lines, equal fingerprints."""
    digest = hashlib.blake2b(line.rstrip("\n").encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "little", signed=True)


@dataclass
class _FileAlignments:
    """Every record of one cache file, cleaned, in file order (repeats not yet resolved)."""

    file: Path
    key: dict | None  # the file's path, size, times and inode when read (_file_key); None: not indexable
    ids: list[str]
    lines: np.ndarray  # line number of each record
    fingerprints: np.ndarray  # int64, of each record's line
    durations: np.ndarray
    offsets: np.ndarray
    starts: np.ndarray
    ends: np.ndarray
    aligners: list[str]
    words: list[str] | None
    fix_keys: list[str]
    fixes: np.ndarray  # (k, 3) int64 rows of (record, key number, count), the fixes of each record


def _file_key(file: Path) -> dict:
    """What identifies one state of a cache file. Size and modification time alone miss an edit that keeps
    the size and sets the time back (``touch -r``); any write changes the inode's change time (ctime),
    which no user can set, and a file replaced by another has another inode."""
    stat = file.stat()
    return {
        "path": str(file.resolve()),
        "size": stat.st_size,
        "mtime_ns": stat.st_mtime_ns,
        "ctime_ns": stat.st_ctime_ns,
        "inode": stat.st_ino,
    }


def _ends_with_newline(file: Path, size: int) -> bool:
    if size == 0:
        return True
    with open(file, "rb") as handle:
        handle.seek(-1, os.SEEK_END)
        return handle.read(1) == b"\n"


def _parse_file(file: Path, keep_words: bool, partial_tail: str) -> _FileAlignments:
    """Parse and clean one cache file (the slow path the index saves)."""
    key = _file_key(file)
    # A file without its last newline is being written, or was cut: never indexed.
    indexable = _ends_with_newline(file, key["size"])
    ids, lines, fingerprints, durations, aligners, offsets = [], [], [], [], [], [0]
    starts, ends, texts = [], [], []
    fix_keys: dict[str, int] = {}
    fixes = []
    names: dict[str, str] = {}  # one str object per aligner name, however many records share it
    for where, record, line in iter_jsonl(file, partial_tail=partial_tail):
        alignment = UtteranceAlignment.from_record(record, where)
        stats: Counter = Counter()
        words = clean_words(alignment.words, alignment.duration, stats)
        for name, count in stats.items():
            if count:
                fixes.append((len(ids), fix_keys.setdefault(name, len(fix_keys)), count))
        ids.append(alignment.id)
        lines.append(int(where.rsplit(":", 1)[1]))
        fingerprints.append(_fingerprint(line))
        durations.append(alignment.duration)
        aligners.append(names.setdefault(alignment.aligner, alignment.aligner))
        starts.extend(w.start for w in words)
        ends.extend(w.end for w in words)
        if keep_words:
            texts.extend(w.word for w in words)
        offsets.append(len(starts))
    if indexable and _file_key(file) != key:
        indexable = False  # changed while we read it (a writer is appending): not a consistent state
    return _FileAlignments(
        file=file,
        key=key if indexable else None,
        ids=ids,
        lines=np.asarray(lines, dtype=np.int64),
        fingerprints=np.asarray(fingerprints, dtype=np.int64),
        durations=np.asarray(durations, dtype=np.float64),
        offsets=np.asarray(offsets, dtype=np.int64),
        starts=np.asarray(starts, dtype=np.float64),
        ends=np.asarray(ends, dtype=np.float64),
        aligners=aligners,
        words=texts if keep_words else None,
        fix_keys=list(fix_keys),
        fixes=np.asarray(fixes, dtype=np.int64).reshape(-1, 3),
    )


def _combine(parts: list[_FileAlignments], keep_words: bool, path) -> AlignmentIndex:
    """One index from the files' records: repeats read once (or an error), fixes of the kept records summed."""
    repeated = RepeatedIds(AlignmentCacheError)
    keep = []
    count = sum(len(part.ids) for part in parts)
    if len({utt for part in parts for utt in part.ids}) == count:  # no id twice: every record is kept
        parts_to_check = []
        keep = [np.ones(len(part.ids), dtype=bool) for part in parts]
    else:
        parts_to_check = parts
    for part in parts_to_check:
        where_prefix = f"{part.file}:"
        fingerprints = part.fingerprints.tolist()
        lines = part.lines.tolist()
        keep.append(
            np.fromiter(
                (
                    not repeated.is_repeat(utt, where_prefix + str(lines[k]), None, fingerprints[k])
                    for k, utt in enumerate(part.ids)
                ),
                dtype=bool,
                count=len(part.ids),
            )
        )
    repeated.log(path, "alignments")
    ids, aligners, texts, durations, lengths, starts, ends = [], [], [], [], [], [], []
    stats: Counter = Counter()
    repaired: list[str] = []  # the first utterances whose words needed a fix
    repaired_count = 0
    for part, kept in zip(parts, keep):
        lengths_all = np.diff(part.offsets)
        if kept.all():
            ids.extend(part.ids)
            aligners.extend(part.aligners)
            word_rows = slice(None)
        else:
            rows = np.flatnonzero(kept)
            ids.extend(part.ids[r] for r in rows)
            aligners.extend(part.aligners[r] for r in rows)
            word_rows = np.flatnonzero(np.repeat(kept, lengths_all))
        durations.append(part.durations[kept])
        lengths.append(lengths_all[kept])
        starts.append(part.starts[word_rows])
        ends.append(part.ends[word_rows])
        if keep_words:
            kept_words = part.words if isinstance(word_rows, slice) else [part.words[r] for r in word_rows]
            texts.extend(kept_words)
        kept_fixes = part.fixes[kept[part.fixes[:, 0]]]
        for _record, key, count in kept_fixes.tolist():
            stats[part.fix_keys[key]] += count
        fixed_records = np.unique(kept_fixes[:, 0])  # records whose words needed a fix (logged by training)
        repaired_count += len(fixed_records)
        repaired.extend(part.ids[r] for r in fixed_records[: 10 - len(repaired)].tolist())
    all_lengths = np.concatenate(lengths) if lengths else np.zeros(0, dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(all_lengths)])

    def joined(arrays):
        return np.concatenate(arrays) if arrays else np.zeros(0)

    return AlignmentIndex(
        ids,
        joined(durations),
        offsets,
        joined(starts),
        joined(ends),
        aligners,
        texts if keep_words else None,
        stats,
        repaired_ids=repaired,
        repaired_count=repaired_count,
    )


def _user_cache_folder() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "segreconcat_aug" / "alignment-index"


def index_locations(file) -> list[Path]:
    """Where the binary index of a cache file is looked for, in order.

    Beside the file as ``.<name>.segreconcat-index.npz`` (hidden, and no
    ``*.jsonl`` glob matches it), else, where that folder is read-only, in the
    user's cache folder (``$XDG_CACHE_HOME`` or ``~/.cache``) under a name made
    from the file's absolute path.

    >>> [p.name for p in index_locations("/data/align/B3.jsonl")][0]
    '.B3.jsonl.segreconcat-index.npz'
    """
    file = Path(file).resolve()
    hashed = hashlib.sha256(str(file).encode("utf-8")).hexdigest()[:24]
    return [file.with_name(f".{file.name}{_INDEX_SUFFIX}"), _user_cache_folder() / f"{hashed}{_INDEX_SUFFIX}"]


# File times tick coarsely (a few ms on Linux): a file rewritten at the same size within one tick of being
# indexed keeps its key. As git does, an index written that soon after the file's last change is "racy"
# and checked against the file's content digest whenever it is read.
_RACY_SECONDS = 2.0


def _content_digest(file: Path) -> str:
    digest = hashlib.blake2b(digest_size=16)
    with open(file, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def _index_meta(part: _FileAlignments) -> dict:
    return {"format": INDEX_FORMAT, "code": _CODE_DIGEST, **part.key}


def _json_array(value) -> np.ndarray:
    return np.frombuffer(json.dumps(value, ensure_ascii=False).encode("utf-8"), dtype=np.uint8)


def _from_json_array(array: np.ndarray):
    return json.loads(array.tobytes().decode("utf-8"))


def _write_index(part: _FileAlignments) -> Path | None:
    """Save a freshly parsed file's arrays atomically; None when no location is writable (logged)."""
    if part.key is None:
        return None
    names = sorted(set(part.aligners))
    code = {name: k for k, name in enumerate(names)}
    changed = max(part.key["mtime_ns"], part.key["ctime_ns"]) / 1e9  # ctime: when it was really last written
    racy = time.time() - changed < _RACY_SECONDS
    arrays = {
        "meta": _json_array(_index_meta(part)),
        "content": _json_array(_content_digest(part.file) if racy else None),
        "ids": _json_array(part.ids),
        "aligner_names": _json_array(names),
        "aligner_codes": np.asarray([code[name] for name in part.aligners], dtype=np.int32),
        "fix_keys": _json_array(part.fix_keys),
        "words": _json_array(part.words) if part.words is not None else np.zeros(0, dtype=np.uint8),
        "has_words": np.asarray(part.words is not None),
        **{
            name: getattr(part, name)
            for name in ("lines", "fingerprints", "durations", "offsets", "starts", "ends", "fixes")
        },
    }
    for location in index_locations(part.file):
        tmp = None
        try:
            location.parent.mkdir(parents=True, exist_ok=True)
            # A unique temporary name, then an atomic rename: concurrent readers see the old index or the
            # new one, never a half-written file, and two writers do not mix their bytes.
            handle, tmp = tempfile.mkstemp(prefix=location.name + ".", suffix=".tmp", dir=location.parent)
            with os.fdopen(handle, "wb") as out:
                np.savez(out, **arrays)
            os.chmod(tmp, part.file.stat().st_mode & 0o666)  # readable by whoever reads the cache
            os.replace(tmp, location)
            return location
        except OSError as err:
            if tmp is not None:
                Path(tmp).unlink(missing_ok=True)
            logger.debug("%s: cannot write the alignment index (%s)", location, err)
    logger.info("%s: no writable place for its binary index; it will be parsed again next time", part.file)
    return None


def _read_index(file: Path, keep_words: bool) -> _FileAlignments | None:
    """The file's arrays from a matching index, or None (none, stale, unreadable: then it is rebuilt)."""
    try:
        key = _file_key(file)
    except OSError:
        return None
    for location in index_locations(file):
        if not location.is_file():
            continue
        try:
            with np.load(location, allow_pickle=False) as saved:
                if _from_json_array(saved["meta"]) != {"format": INDEX_FORMAT, "code": _CODE_DIGEST, **key}:
                    continue
                if keep_words and not bool(saved["has_words"]):
                    continue
                content = _from_json_array(saved["content"])
                if content is not None and content != _content_digest(file):
                    continue
                names = _from_json_array(saved["aligner_names"])
                part = _FileAlignments(
                    file=file,
                    key=key,
                    ids=_from_json_array(saved["ids"]),
                    lines=saved["lines"],
                    fingerprints=saved["fingerprints"],
                    durations=saved["durations"],
                    offsets=saved["offsets"],
                    starts=saved["starts"],
                    ends=saved["ends"],
                    aligners=[names[k] for k in saved["aligner_codes"].tolist()],
                    words=_from_json_array(saved["words"]) if keep_words else None,
                    fix_keys=_from_json_array(saved["fix_keys"]),
                    fixes=saved["fixes"],
                )
        except (OSError, ValueError, KeyError, IndexError, EOFError, zipfile.BadZipFile) as err:
            logger.info("%s: unreadable alignment index ignored, rebuilding it (%s)", location, err)
            continue
        if _consistent(part):
            return part
        logger.info("%s: inconsistent alignment index ignored, rebuilding it", location)
    return None


def _consistent(part: _FileAlignments) -> bool:
    """Shapes that agree with each other (a damaged index that still unzips fails here)."""
    n = len(part.ids)
    offsets = part.offsets
    return (
        part.lines.shape == part.fingerprints.shape == part.durations.shape == (n,)
        and len(part.aligners) == n
        and offsets.shape == (n + 1,)
        and offsets[0] == 0
        and bool(np.all(np.diff(offsets) >= 0))
        and part.starts.shape == part.ends.shape == (int(offsets[-1]),)
        and (part.words is None or len(part.words) == int(offsets[-1]))
        and part.fixes.ndim == 2
        and part.fixes.shape[1] == 3
        and bool(np.all((part.fixes[:, 0] >= 0) & (part.fixes[:, 0] < n)))
        and bool(np.all((part.fixes[:, 1] >= 0) & (part.fixes[:, 1] < len(part.fix_keys))))
    )

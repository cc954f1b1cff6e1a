"""The word-alignment cache: JSON Lines, one utterance per line.

This is the contract between the aligners (``recipes/align.py``), the order
cache and the augmenter::

    {"id": "1272-128104-0000", "duration": 5.855, "aligner": "whisper:openai/whisper-medium",
     "words": [{"word": "mister", "start": 0.42, "end": 0.71}, ...]}

Times are seconds. On reading and writing, words are cleaned (see
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

import json
import logging
import os
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np

from segreconcat_aug.errors import UserError

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

    def to_json(self) -> str:
        """One cache line (without the newline)."""
        words = [{"word": w.word, "start": round(w.start, 4), "end": round(w.end, 4)} for w in self.words]
        record = {"id": self.id, "duration": round(self.duration, 4), "aligner": self.aligner, "words": words}
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
        return cls(utt_id, duration, words, str(record.get("aligner", "unknown")))


FIX_KEYS = ("reordered", "clamped", "overlaps_resolved", "dropped_empty", "dropped_nonfinite")


def clean_words(words: Iterable[Word], duration: float, stats: Counter | None = None) -> list[Word]:
    """Sort, clamp to [0, duration], resolve overlaps and drop empty words.

    Overlapping neighbours are cut at the middle of the overlap (neither word
    wins); words with no time left are dropped. Each fix is counted in
    ``stats`` under the keys of :data:`FIX_KEYS`.

    Example
    -------
    >>> stats = Counter()
    >>> clean_words([Word("b", 0.4, 0.9), Word("a", -0.1, 0.6), Word("c", 1.5, 1.5)], 1.0, stats)
    [Word(word='a', start=0.0, end=0.5), Word(word='b', start=0.5, end=0.9)]
    >>> sorted(stats.items())
    [('clamped', 2), ('dropped_empty', 1), ('overlaps_resolved', 1), ('reordered', 1)]
    """
    stats = Counter() if stats is None else stats
    finite = []
    for word in words:
        if not (np.isfinite(word.start) and np.isfinite(word.end)):
            stats["dropped_nonfinite"] += 1
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
        cleaned = UtteranceAlignment(alignment.id, alignment.duration, words, alignment.aligner)
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


def truncate_partial_tail(path) -> bool:
    """Cut a last line that has no newline (a write interrupted by a kill).

    Returns True when something was cut.
    """
    path = Path(path)
    size = path.stat().st_size
    if size == 0:
        return False
    with open(path, "rb+") as handle:
        handle.seek(-1, os.SEEK_END)
        if handle.read(1) == b"\n":
            return False
        # Walk back to the previous newline in blocks (lines are short).
        position = size
        while position > 0:
            step = min(4096, position)
            position -= step
            handle.seek(position)
            block = handle.read(step)
            newline = block.rfind(b"\n")
            if newline >= 0:
                handle.truncate(position + newline + 1)
                return True
        handle.truncate(0)
        return True


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


def cache_files(path, *, what: str = "alignment cache", required: bool = True) -> list[Path]:
    """The files of a JSON Lines cache, sorted: a folder's ``*.jsonl``, or ``x.jsonl`` and its shards.

    The shards of a sharded run into ``x.jsonl`` (``x.part-002-of-008.jsonl``)
    are read beside it, merged or not: after a merge, ``x.jsonl`` and the parts
    hold the same lines, which :class:`RepeatedIds` lets the loaders read once.
    Shared by the alignment and order caches; ``required`` raises
    :class:`FileNotFoundError` (naming ``what``) when there is nothing to read.
    """
    from .jobs import shard_files  # jobs imports this module

    path = Path(path)
    if path.is_dir():
        files = sorted(path.glob("*.jsonl"))
        if required and not files:
            raise FileNotFoundError(f"{path}: no *.jsonl files of the {what} in this folder")
        return files
    files = sorted({*shard_files(path), *([path] if path.is_file() else [])})
    if required and not files:
        raise FileNotFoundError(
            f"{path}: {what} not found (neither this file nor shards {path.stem}.part-*-of-*.jsonl)"
        )
    return files


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

    def is_repeat(self, utt_id: str, where: str, line: str) -> bool:
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

    def __init__(self, ids, durations, offsets, starts, ends, aligners, words=None, stats=None):
        self._row = {utt: k for k, utt in enumerate(ids)}
        self.ids = list(ids)
        self.durations = np.asarray(durations, dtype=np.float64)
        self.offsets = np.asarray(offsets, dtype=np.int64)
        self.starts = np.asarray(starts, dtype=np.float64)
        self.ends = np.asarray(ends, dtype=np.float64)
        self.aligners = list(aligners)
        self.words = words
        self.stats: Counter = stats if stats is not None else Counter()

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


def load_alignments(path, *, keep_words: bool = False, partial_tail: str = "error") -> AlignmentIndex:
    """Load a cache file (with its shards, see :func:`cache_files`) or folder into an :class:`AlignmentIndex`.

    Words are cleaned as they are read (fixes counted in ``index.stats``); an id
    that appears twice with different content is an error naming both places.
    """
    ids, durations, aligners, offsets = [], [], [], [0]
    starts, ends, texts = [], [], []
    repeated = RepeatedIds(AlignmentCacheError)
    stats: Counter = Counter()
    for file in cache_files(path):
        for where, record, line in iter_jsonl(file, partial_tail=partial_tail):
            alignment = UtteranceAlignment.from_record(record, where)
            if repeated.is_repeat(alignment.id, where, line):
                continue
            words = clean_words(alignment.words, alignment.duration, stats)
            ids.append(alignment.id)
            durations.append(alignment.duration)
            aligners.append(alignment.aligner)
            starts.extend(w.start for w in words)
            ends.extend(w.end for w in words)
            if keep_words:
                texts.extend(w.word for w in words)
            offsets.append(len(starts))
    repeated.log(path, "alignments")
    return AlignmentIndex(
        ids, durations, offsets, starts, ends, aligners, texts if keep_words else None, stats
    )

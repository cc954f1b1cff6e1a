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
import zipfile
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np

from ..data.jsonl_files import RepeatedIds, cache_files, truncate_partial_tail
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

    ``use_index``: a cache of :data:`INDEX_MIN_BYTES` or more is read from its binary index (see
    :func:`index_locations`) when that index was written for the same content (a digest of the cache's files
    and of this module's code), and the index is written after a successful parse otherwise. The result,
    repair counts included, is the same either way.
    """
    files = cache_files(path)
    indexed = use_index and sum(file.stat().st_size for file in files) >= INDEX_MIN_BYTES
    key = _digest(files) if indexed else None
    index = _read_index(path, key, keep_words) if indexed else None
    if index is None:
        index = _parse(files, path, partial_tail)
        # A file without its last newline is being written, or was cut; a changed file was read half old:
        # neither is indexed (nothing broken is cached).
        if indexed and all(_ends_with_newline(file) for file in files) and _digest(files) == key:
            _write_index(path, index, key)
        if not keep_words:
            index.words = None
    return index


def _parse(files: list[Path], path, partial_tail: str) -> AlignmentIndex:
    """Parse and clean the records of a cache's files (the slow path the index saves); repeats read once."""
    repeated = RepeatedIds(AlignmentCacheError)
    ids, aligners, durations, offsets, starts, ends, words = [], [], [], [0], [], [], []
    stats: Counter = Counter()
    repaired: list[str] = []  # the first utterances whose words needed a fix (logged by training)
    repaired_count = 0
    names: dict[str, str] = {}  # one str object per aligner name, however many records share it
    for file in files:
        for where, record, line in iter_jsonl(file, partial_tail=partial_tail):
            alignment = UtteranceAlignment.from_record(record, where)
            if repeated.is_repeat(alignment.id, where, line):
                continue
            fixes: Counter = Counter()
            cleaned = clean_words(alignment.words, alignment.duration, fixes)
            if fixes:
                stats.update(fixes)
                repaired_count += 1
                if len(repaired) < 10:
                    repaired.append(alignment.id)
            ids.append(alignment.id)
            durations.append(alignment.duration)
            aligners.append(names.setdefault(alignment.aligner, alignment.aligner))
            starts.extend(w.start for w in cleaned)
            ends.extend(w.end for w in cleaned)
            words.extend(w.word for w in cleaned)
            offsets.append(len(starts))
    repeated.log(path, "alignments")
    return AlignmentIndex(
        ids, durations, offsets, starts, ends, aligners, words, stats, repaired, repaired_count
    )


# ---------------------------------------------------------------------------------------------------------
# The binary index of a cache: its loaded arrays in one .npz, so a 104k-utterance cache loads in about a second
# instead of parsing and cleaning millions of words in Python at every training start.

# Smaller caches (a few thousand utterances) parse in a fraction of a second: no file is written for them.
INDEX_MIN_BYTES = 4 << 20
_INDEX_SUFFIX = ".segreconcat-index.npz"
# Any change to this module (cleaning rules, record parsing) invalidates every index it wrote.
_CODE_DIGEST = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]
_ARRAYS = ("durations", "offsets", "starts", "ends")


def index_locations(path) -> list[Path]:
    """Where the binary index of a cache is looked for, in order.

    Beside the file as ``.<name>.segreconcat-index.npz`` (inside a folder cache as
    ``.segreconcat-index.npz``; hidden, and no ``*.jsonl`` glob matches it), else, where that folder is
    read-only, in the user's cache folder (``$XDG_CACHE_HOME`` or ``~/.cache``) under a name made from
    the cache's absolute path.

    >>> [p.name for p in index_locations("/data/align/B3.jsonl")][0]
    '.B3.jsonl.segreconcat-index.npz'
    """
    path = Path(path).resolve()
    beside = path / _INDEX_SUFFIX if path.is_dir() else path.with_name(f".{path.name}{_INDEX_SUFFIX}")
    user_cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    hashed = hashlib.sha256(str(path).encode("utf-8")).hexdigest()[:24]
    return [beside, Path(user_cache) / "segreconcat_aug" / "alignment-index" / f"{hashed}{_INDEX_SUFFIX}"]


def _digest(files: list[Path]) -> str:
    """What the index is valid for: the cache files' names and bytes, and this module's code."""
    digest = hashlib.sha256(_CODE_DIGEST.encode())  # sha256: hardware-accelerated on current CPUs
    for file in files:
        digest.update(f"\0{file.name}\0".encode())
        with open(file, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 22), b""):
                digest.update(block)
    return digest.hexdigest()


def _ends_with_newline(file: Path) -> bool:
    with open(file, "rb") as handle:
        if handle.seek(0, os.SEEK_END) == 0:
            return True
        handle.seek(-1, os.SEEK_END)
        return handle.read(1) == b"\n"


def _json_array(value) -> np.ndarray:
    return np.frombuffer(json.dumps(value, ensure_ascii=False).encode("utf-8"), dtype=np.uint8)


def _from_json_array(array: np.ndarray):
    return json.loads(array.tobytes().decode("utf-8"))


def _write_index(path, index: AlignmentIndex, key: str) -> Path | None:
    """Save the index atomically at the first writable location; None when there is none (logged)."""
    names = sorted(set(index.aligners))
    code = {name: k for k, name in enumerate(names)}
    meta = {"key": key, "stats": dict(index.stats), "repaired": [index.repaired_ids, index.repaired_count]}
    arrays = {
        "meta": _json_array(meta),
        "ids": _json_array(index.ids),
        "aligner_names": _json_array(names),
        "aligner_codes": np.asarray([code[name] for name in index.aligners], dtype=np.int32),
        "words": _json_array(index.words),
        **{name: getattr(index, name) for name in _ARRAYS},
    }
    for location in index_locations(path):
        tmp = None
        try:
            location.parent.mkdir(parents=True, exist_ok=True)
            # A unique temporary name, then an atomic rename: concurrent readers see the old index or the
            # new one, never a half-written file, and two writers do not mix their bytes.
            handle, tmp = tempfile.mkstemp(prefix=location.name + ".", suffix=".tmp", dir=location.parent)
            with os.fdopen(handle, "wb") as out:
                np.savez(out, **arrays)
            os.chmod(tmp, 0o644)  # readable by whoever reads the cache
            os.replace(tmp, location)
            return location
        except OSError as err:
            if tmp is not None:
                Path(tmp).unlink(missing_ok=True)
            logger.debug("%s: cannot write the alignment index (%s)", location, err)
    logger.info("%s: no writable place for its binary index; it will be parsed again next time", path)
    return None


def _read_index(path, key: str, keep_words: bool) -> AlignmentIndex | None:
    """The index saved for this content, or None (none, stale, unreadable: then it is rebuilt)."""
    for location in index_locations(path):
        if not location.is_file():
            continue
        try:
            with np.load(location, allow_pickle=False) as saved:
                meta = _from_json_array(saved["meta"])
                if meta["key"] != key:
                    continue
                names = _from_json_array(saved["aligner_names"])
                index = AlignmentIndex(
                    _from_json_array(saved["ids"]),
                    *(saved[name] for name in _ARRAYS),
                    [names[k] for k in saved["aligner_codes"].tolist()],
                    _from_json_array(saved["words"]) if keep_words else None,
                    Counter(meta["stats"]),
                    *meta["repaired"],
                )
        except (OSError, ValueError, KeyError, IndexError, TypeError, EOFError, zipfile.BadZipFile) as err:
            logger.info("%s: unreadable alignment index ignored, rebuilding it (%s)", location, err)
            continue
        n, offsets = len(index.ids), index.offsets
        if (  # shapes that agree with each other (a damaged index that still unzips fails here)
            index.durations.shape == (n,)
            and len(index.aligners) == n
            and offsets.shape == (n + 1,)
            and offsets[0] == 0
            and bool(np.all(np.diff(offsets) >= 0))
            and index.starts.shape == index.ends.shape == (int(offsets[-1]),)
            and (index.words is None or len(index.words) == int(offsets[-1]))
        ):
            return index
        logger.info("%s: inconsistent alignment index ignored, rebuilding it", location)
    return None

"""The word-alignment cache: JSON Lines, one utterance per line, the contract between the aligners
(``recipes/align.py``), the order cache and the augmenter (times in seconds; ``language``: optional)::

    {"id": "1272-128104-0000", "duration": 5.855, "aligner": "faster-whisper:medium",
     "language": "en", "words": [{"word": "mister", "start": 0.42, "end": 0.71}, ...]}

Words are cleaned on writing and reading (:func:`clean_words`), every fix counted. A loaded cache of 4 MiB
or more leaves its arrays in one numpy file beside it, used while the digest of the cache's files holds.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import math
import sys
import zipfile
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

import numpy as np

from ..data.jsonl_files import RepeatedIds, cache_files, iter_jsonl
from ..data.result_files import atomic_writer, file_digest
from ..errors import UserError

logger = logging.getLogger(__name__)


class AlignmentCacheError(UserError, ValueError):
    """A cache line is malformed; the message names the file and line."""


class Word(NamedTuple):
    """One aligned word, times in seconds."""

    word: str
    start: float
    end: float


@dataclasses.dataclass
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


def clean_words(words: Iterable[Word], duration: float, stats: Counter | None = None) -> list[Word]:
    """Sort, clamp to [0, duration], resolve overlaps and drop empty words and words without text."""
    stats = Counter() if stats is None else stats
    finite = []
    for word in words:
        if not (math.isfinite(word.start) and math.isfinite(word.end)):
            stats["dropped_nonfinite"] += 1
        elif not word.word.strip():  # a span with no text is not a word (a segment of nothing said)
            stats["dropped_no_text"] += 1
        else:
            finite.append(word)
    ordered = sorted(finite, key=lambda w: (w.start, w.end))
    if ordered != finite:
        stats["reordered"] += 1
    result: list[Word] = []
    for word in ordered:
        start, end = min(max(word.start, 0.0), duration), min(max(word.end, 0.0), duration)
        if (start, end) != (word.start, word.end):
            stats["clamped"] += 1
        if result and start < end and start < result[-1].end:
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
        else:
            result.append(Word(word.word, start, end))
    return result


@dataclasses.dataclass(eq=False, repr=False)
class AlignmentIndex:
    """All alignments of a cache in flat arrays (small, quick to load, shared by forked workers), by id."""

    ids: list
    durations: np.ndarray
    offsets: np.ndarray
    starts: np.ndarray
    ends: np.ndarray
    aligners: list
    words: list | None = None
    stats: Counter = dataclasses.field(default_factory=Counter)
    # The first utterances whose words needed a fix, and how many did.
    repaired_ids: list = dataclasses.field(default_factory=list)
    repaired_count: int = 0

    def __post_init__(self):
        self._row = {utt: k for k, utt in enumerate(self.ids)}
        self.aligners = [sys.intern(name) for name in self.aligners]  # one str object per aligner name
        self.stats = Counter(self.stats)
        self.offsets = np.asarray(self.offsets, dtype=np.int64)
        self.durations, self.starts, self.ends = (
            np.asarray(values, dtype=np.float64) for values in (self.durations, self.starts, self.ends)
        )
        n, offsets = len(self.ids), self.offsets
        if not (  # a damaged index file that still unzips fails here
            self.durations.shape == (n,)
            and len(self.aligners) == n
            and offsets.shape == (n + 1,)
            and offsets[0] == 0
            and bool(np.all(np.diff(offsets) >= 0))
            and self.starts.shape == self.ends.shape == (offsets[-1],)
            and (self.words is None or len(self.words) == offsets[-1])
        ):
            raise ValueError("the arrays of an alignment index do not fit together")

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
        lo, hi = self.offsets[row], self.offsets[row + 1]
        texts = self.words[lo:hi] if self.words is not None else [""] * (hi - lo)
        words = [Word(*word) for word in zip(texts, self.starts[lo:hi].tolist(), self.ends[lo:hi].tolist())]
        return UtteranceAlignment(utt_id, self.duration(utt_id), words, self.aligners[row])

    def missing(self, utt_ids: Iterable[str]) -> list[str]:
        """The ids (in the given order) that have no alignment."""
        return [utt for utt in utt_ids if utt not in self._row]


def load_alignments(path, *, keep_words: bool = False, use_index: bool = True) -> AlignmentIndex:
    """Load a cache file (with its shards, see :func:`cache_files`) or folder into an :class:`AlignmentIndex`,
    from its binary index when one was saved for these files."""
    files = cache_files(path)
    indexed = use_index and sum(file.stat().st_size for file in files) >= INDEX_MIN_BYTES
    key = _digest(files) if indexed else None
    index = _load_index(path, key, keep_words) if indexed else None
    if index is None:
        index = _parse(files, path)
        if indexed and _digest(files) == key:  # a file changed while read is not indexed
            _save_index(path, index, key)
        if not keep_words:
            index.words = None
    return index


def _parse(files: list[Path], path) -> AlignmentIndex:
    """Parse and clean the records of a cache's files (the slow path the index saves); repeats read once."""
    repeated = RepeatedIds(AlignmentCacheError)
    ids, aligners, durations, offsets, starts, ends, words = [], [], [], [0], [], [], []
    stats: Counter = Counter()
    repaired: list[str] = []  # the first utterances whose words needed a fix (logged by training)
    repaired_count = 0
    for file in files:
        for where, record, line in iter_jsonl(file, error=AlignmentCacheError):
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
            aligners.append(alignment.aligner)
            starts.extend(w.start for w in cleaned)
            ends.extend(w.end for w in cleaned)
            words.extend(w.word for w in cleaned)
            offsets.append(len(starts))
    repeated.log(path, "alignments")
    return AlignmentIndex(
        ids, durations, offsets, starts, ends, aligners, words, stats, repaired, repaired_count
    )


# The binary index: a cache's loaded arrays in one .npz, so 104k utterances load in about a second instead
# of parsing and cleaning millions of words in Python at every training start. Smaller caches (a few
# thousand utterances) parse in a fraction of a second: no file is written for them.
INDEX_MIN_BYTES = 4 << 20
_INDEX_SUFFIX = ".segreconcat-index.npz"
# Any change to this module (cleaning rules, record parsing) invalidates every index it wrote.
_CODE_DIGEST = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]
_ARRAYS = ("durations", "offsets", "starts", "ends")
_META = ("ids", "aligners", "stats", "repaired_ids", "repaired_count")  # saved as JSON


def index_path(path) -> Path:
    """Where the binary index of a cache is: beside the file, or inside the folder."""
    path = Path(path)
    return path / _INDEX_SUFFIX if path.is_dir() else path.with_name(f".{path.name}{_INDEX_SUFFIX}")


def _digest(files: list[Path]) -> str:
    """What the index is valid for: the cache files' names and bytes, and this module's code."""
    digest = hashlib.sha256(_CODE_DIGEST.encode())
    for file in files:
        digest.update(f"\0{file.name}\0{file_digest(file)}".encode())
    return digest.hexdigest()


def _save_index(path, index: AlignmentIndex, key: str) -> None:
    """Save the index beside the cache, whole or not at all: concurrent loaders see the old index or the
    new one, never a half-written file. A folder we cannot write to gets none."""
    location = index_path(path)
    meta = {"key": key, "fields": {name: getattr(index, name) for name in _META}}
    try:
        with atomic_writer(location, "wb") as out:
            arrays = {name: getattr(index, name) for name in _ARRAYS}
            np.savez(out, meta=_bytes(meta), words=_bytes(index.words), **arrays)
    except OSError as err:
        logger.info("%s: cannot write the binary index (%s); the cache is parsed at every load", path, err)


def _bytes(value) -> np.ndarray:
    return np.frombuffer(json.dumps(value, ensure_ascii=False).encode("utf-8"), dtype=np.uint8)


def _load_index(path, key: str, keep_words: bool) -> AlignmentIndex | None:
    """The index saved for this digest, or None (none, stale, unreadable: then it is rebuilt)."""
    location = index_path(path)
    if not location.is_file():
        return None
    try:
        with np.load(location) as saved:
            meta = json.loads(saved["meta"].tobytes())
            if meta["key"] != key:
                return None
            words = json.loads(saved["words"].tobytes()) if keep_words else None
            return AlignmentIndex(**meta["fields"], **{name: saved[name] for name in _ARRAYS}, words=words)
    except (OSError, ValueError, KeyError, IndexError, TypeError, EOFError, zipfile.BadZipFile) as err:
        logger.info("%s: unreadable alignment index ignored, rebuilding it (%s)", location, err)
        return None

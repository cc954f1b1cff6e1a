"""The audio check run before any work: every file a run will read, decoded once, in parallel
(what is checked, and what callers do with problems: docs/data.md#the-audio-check). Measurements,
not verdicts, are cached per file signature, so a rerun only stats the files.

>>> import tempfile, os, numpy as np
>>> from segreconcat_aug.data.audio import write_audio
>>> folder = tempfile.mkdtemp()
>>> write_audio(os.path.join(folder, "ok.wav"), 0.1 * np.sin(np.arange(16000, dtype=np.float32)))
>>> write_audio(os.path.join(folder, "nan.wav"), np.full(16000, np.nan, dtype=np.float32), subtype="FLOAT")
>>> wav = {u: os.path.join(folder, f"{u}.wav") for u in ("ok", "nan")}
>>> report = check_audio_files(wav, cache=os.path.join(folder, "check.jsonl"), progress=False)
>>> report.frames, [(p.utt, p.kind) for p in report.problems]
({'ok': 16000}, [('nan', 'nonfinite')])
>>> check_audio_files(wav, cache=os.path.join(folder, "check.jsonl"), progress=False).from_cache
2
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import soundfile

from .audio import SAMPLE_RATE, file_signature
from .kaldi import PipeCommand

logger = logging.getLogger(__name__)

#: Problems that make a file unusable (the others, ``silent`` and ``too_short``, leave it usable).
FATAL_KINDS = ("missing", "unreadable", "sample_rate", "truncated", "nonfinite", "empty")
CACHE_VERSION = 1
_BLOCK = 1 << 18  # frames decoded at a time: bounded memory for any file length
_SHOWN = 5  # problems named in a message, which is one line (all of them go to the list file)


@dataclass
class AudioProblem:
    """One file's problem: ``kind`` (fatal: :data:`FATAL_KINDS`) and details."""

    utt: str
    path: str
    kind: str
    detail: str

    @property
    def fatal(self) -> bool:
        return self.kind in FATAL_KINDS

    def __str__(self) -> str:
        return f"{self.utt} {self.path}: {self.kind} ({self.detail})"


@dataclass
class AudioCheckReport:
    """The result of :func:`check_audio_files`. ``frames``: utterance -> header length of every file
    without a fatal problem; ``problems``: fatal and weak, in input order."""

    total: int
    frames: dict[str, int] = field(default_factory=dict)
    problems: list[AudioProblem] = field(default_factory=list)
    from_cache: int = 0
    unchecked: list[str] = field(default_factory=list)
    chunk_means: dict[str, np.ndarray] = field(default_factory=dict)  # with ``chunk``: per usable file
    rates: dict[str, int] = field(default_factory=dict)  # utterance -> sample rate, as ``frames``

    @property
    def fatal(self) -> list[AudioProblem]:
        return [p for p in self.problems if p.fatal]

    @property
    def weak(self) -> list[AudioProblem]:
        return [p for p in self.problems if not p.fatal]


class _ChunkMeans:
    """Mean ``|x|`` of consecutive ``chunk``-sample chunks of a stream read block by block (tail left out)."""

    def __init__(self, chunk: int):
        self.chunk, self.sums, self._carry, self._carried = int(chunk), [], 0.0, 0

    def add(self, block: np.ndarray) -> None:
        magnitudes = np.abs(block).astype(np.float64)
        if self._carried:
            head = magnitudes[: self.chunk - self._carried]
            self._carry += float(head.sum())
            self._carried += len(head)
            magnitudes = magnitudes[len(head) :]
            if self._carried < self.chunk:
                return
            self.sums.append(self._carry)
        whole = len(magnitudes) // self.chunk
        self.sums.extend(magnitudes[: whole * self.chunk].reshape(whole, self.chunk).sum(axis=1).tolist())
        tail = magnitudes[whole * self.chunk :]
        self._carry, self._carried = float(tail.sum()), len(tail)

    def means(self) -> list[float]:
        return [total / self.chunk for total in self.sums]


def measure_file(path: str, *, full: bool = True, chunk: int | None = None) -> dict:
    """What the check needs to know of one file (the cache record, without the signature)."""
    with soundfile.SoundFile(path) as handle:
        record = {"rate": handle.samplerate, "frames": int(handle.frames), "channels": handle.channels}
        if not full:
            return record
        decoded = nonfinite = 0
        peak = square_sum = 0.0
        read_error = None
        chunks = _ChunkMeans(chunk) if chunk else None
        try:
            while True:
                block = handle.read(_BLOCK, dtype="float32", always_2d=True)
                if not len(block):
                    break
                block = block.mean(axis=1) if block.shape[1] > 1 else block[:, 0]
                decoded += len(block)
                if chunks is not None:
                    chunks.add(block)
                finite = np.isfinite(block)
                if not finite.all():
                    nonfinite += int(len(block) - finite.sum())
                    block = block[finite]
                if len(block):
                    peak = max(peak, float(np.abs(block).max()))
                    square_sum += float(np.dot(block, block))
        except (RuntimeError, OSError, soundfile.LibsndfileError) as err:
            read_error = " ".join(str(err).split())
        record.update(
            decoded=decoded,
            read_error=read_error,
            nonfinite=nonfinite,
            peak=peak,
            mean_square=square_sum / max(decoded - nonfinite, 1),
        )
        if chunks is not None:
            record["chunk_means"] = {str(chunk): chunks.means()}
        return record


def file_problems(
    record: dict, *, full: bool, sample_rate: int | None, min_duration: float, silence_db: float | None
) -> list[tuple[str, str]]:
    """``(kind, detail)`` of each problem a measured record shows (empty: the file is fine).

    >>> ok = {"rate": 16000, "frames": 16000, "channels": 1, "decoded": 16000, "read_error": None,
    ...       "nonfinite": 0, "peak": 0.5, "mean_square": 0.01}
    >>> file_problems(ok, full=True, sample_rate=16000, min_duration=0.5, silence_db=-60.0)
    []
    >>> file_problems({**ok, "frames": 1600, "decoded": 1600, "peak": 0.0, "mean_square": 0.0},
    ...               full=True, sample_rate=16000, min_duration=0.5, silence_db=-60.0)
    [('silent', 'RMS -inf dBFS, threshold -60 dBFS'), ('too_short', '0.100 s, minimum 0.5 s')]
    """
    if sample_rate is not None and record["rate"] != sample_rate:
        return [("sample_rate", f"{record['rate']} Hz, expected {sample_rate} Hz")]
    if record["frames"] == 0:
        return [("empty", "0 samples")]
    problems = []
    if full:
        if record["read_error"] is not None or record["decoded"] != record["frames"]:
            why = f": {record['read_error']}" if record["read_error"] else ""
            problems.append(
                ("truncated", f"{record['decoded']} of the header's {record['frames']} samples decode{why}")
            )
        if record["nonfinite"]:
            problems.append(("nonfinite", f"{record['nonfinite']} NaN or infinite samples"))
        if problems:
            return problems
        if silence_db is not None:
            level = 10 * math.log10(record["mean_square"]) if record["mean_square"] > 0 else -math.inf
            if level < silence_db:
                problems.append(("silent", f"RMS {level:.1f} dBFS, threshold {silence_db:g} dBFS"))
    duration = record["frames"] / record["rate"]
    if duration < min_duration:
        problems.append(("too_short", f"{duration:.3f} s, minimum {min_duration:g} s"))
    return problems


class AudioCheckCache:
    """Measured records by file signature, in an append-only JSON Lines file; a line that does not
    parse (a run killed mid-write) is ignored, so its file is measured again."""

    def __init__(self, path):
        self.path = Path(path)
        self.records: dict[str, dict] = {}
        if self.path.is_file():
            with open(self.path, encoding="utf-8") as handle:
                for line in handle:
                    try:
                        record = json.loads(line)
                        if record.get("version") == CACHE_VERSION:
                            self.records[record["path"]] = record
                    except (json.JSONDecodeError, AttributeError, KeyError):
                        continue
        self._pending: list[dict] = []

    def get(self, signature, full: bool, chunk: int | None = None) -> dict | None:
        record = self.records.get(signature[0])
        if record is None or (record["size"], record["mtime_ns"]) != signature[1:]:
            return None
        if full and "decoded" not in record:
            return None  # only the header was read then
        if full and chunk and str(chunk) not in record.get("chunk_means", {}):
            return None  # measured without this chunk length
        return record

    def add(self, signature, record: dict) -> None:
        path, size, mtime_ns = signature
        entry = {"version": CACHE_VERSION, "path": path, "size": size, "mtime_ns": mtime_ns, **record}
        self.records[path] = entry
        self._pending.append(entry)
        if len(self._pending) >= 1000:
            self.flush()

    def flush(self) -> None:
        if not self._pending:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        text = "".join(json.dumps(entry) + "\n" for entry in self._pending)
        with open(self.path, "ab+") as handle:
            if handle.tell() > 0:
                handle.seek(-1, os.SEEK_END)
                if handle.read(1) != b"\n":  # a line cut by a kill must not glue to the next one
                    text = "\n" + text
            handle.write(text.encode("utf-8"))
        self._pending = []


def check_audio_files(
    wav: dict,
    *,
    mode: str = "full",
    sample_rate: int | None = SAMPLE_RATE,
    min_duration: float = 0.0,
    silence_db: float | None = -60.0,
    workers: int = 8,
    cache=None,
    chunk: int | None = None,
    desc: str = "checking audio",
    progress: bool = True,
) -> AudioCheckReport:
    """Check every file of ``wav`` (utterance -> path); ``mode``: ``full`` decodes each, ``header`` opens it."""
    full = mode == "full"
    store = AudioCheckCache(cache) if cache is not None else None
    report = AudioCheckReport(total=len(wav))
    todo, errors = [], {}
    measured: dict[str, dict] = {}
    for utt, source in wav.items():
        if isinstance(source, PipeCommand):
            report.unchecked.append(utt)
            continue
        signature = file_signature(source)
        if signature is None:
            continue  # missing: reported below
        cached = store.get(signature, full, chunk) if store is not None else None
        if cached is not None:
            measured[utt] = cached
            report.from_cache += 1
        else:
            todo.append((utt, signature))

    def run(job):
        utt, signature = job
        try:
            return utt, signature, measure_file(str(wav[utt]), full=full, chunk=chunk), None
        except (RuntimeError, OSError, soundfile.LibsndfileError) as err:
            return utt, signature, None, " ".join(str(err).split())

    if todo:
        from tqdm import tqdm

        # Threads: libsndfile decodes with the GIL released, and header reads wait on the disk.
        with ThreadPoolExecutor(max_workers=max(1, int(workers))) as pool:
            results = pool.map(run, todo, chunksize=16)
            for utt, signature, record, error in tqdm(
                results, total=len(todo), desc=desc, mininterval=2, disable=not progress
            ):
                if record is None:
                    errors[utt] = error
                    continue
                measured[utt] = record
                if store is not None:
                    store.add(signature, record)
        if store is not None:
            store.flush()

    for utt, source in wav.items():
        if isinstance(source, PipeCommand):  # listed in report.unchecked
            continue
        path = str(source)
        if utt in errors:
            report.problems.append(AudioProblem(utt, path, "unreadable", errors[utt]))
            continue
        if utt not in measured:
            report.problems.append(AudioProblem(utt, path, "missing", "no such file"))
            continue
        record = measured[utt]
        found = file_problems(
            record, full=full, sample_rate=sample_rate, min_duration=min_duration, silence_db=silence_db
        )
        report.problems.extend(AudioProblem(utt, path, kind, detail) for kind, detail in found)
        if not any(kind in FATAL_KINDS for kind, _ in found):
            report.frames[utt] = int(record["frames"])
            report.rates[utt] = int(record["rate"])
            if full and chunk:
                report.chunk_means[utt] = np.asarray(record["chunk_means"][str(chunk)], dtype=np.float64)
    if report.unchecked:
        logger.info(
            "%d shell-pipe entries of wav.scp are not checked (first: %s)",
            len(report.unchecked),
            report.unchecked[:5],
        )
    return report


def write_problem_list(problems, path) -> Path:
    """One line per problem (``<utt> <path>: <kind> (<detail>)``) in ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{problem}\n" for problem in problems), encoding="utf-8")
    return path


def problem_message(problems, total: int, what: str, listed_in=None) -> str:
    """One line naming the files with problems (the first few) and the list file that names them all.

    >>> print(problem_message([AudioProblem("u1", "a/u1.flac", "truncated", "10 of 20 samples decode")], 5,
    ...                       "training audio files"))
    1 of 5 training audio files failed the audio check: u1 a/u1.flac: truncated (10 of 20 samples decode)
    """
    problems = list(problems)
    kinds = Counter(problem.kind for problem in problems)
    where = f" (all listed in {listed_in})" if listed_in is not None else ""
    by_kind = ", ".join(f"{kind}: {count}" for kind, count in kinds.items())
    shown = "; ".join(str(problem) for problem in problems[:_SHOWN])
    more = f"; and {len(problems) - _SHOWN} more" if len(problems) > _SHOWN else ""
    files = len({problem.utt for problem in problems})
    head = f"{files} of {total} {what} failed the audio check"
    if len(kinds) > 1:
        head += f" ({by_kind})"
    return f"{head}{where}: {shown}{more}"

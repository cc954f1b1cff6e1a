"""Import alignments users already have: Montreal Forced Aligner TextGrids and Kaldi CTM (the formats:
docs/alignment.md).

>>> import tempfile, pathlib
>>> d = pathlib.Path(tempfile.mkdtemp())
>>> _ = (d / "a.ctm").write_text("u1 1 0.10 0.30 hello 0.9\\nu1 1 0.45 0.20 world 0.8\\n")
>>> read_ctm(d / "a.ctm")
{'u1': [Word(word='hello', start=0.1, end=0.4), Word(word='world', start=0.45, end=0.65)]}
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from pathlib import Path
from typing import NamedTuple

from ...data.jobs import Job, Shard
from ...errors import UserError
from ..cache import UtteranceAlignment, Word, clean_words

logger = logging.getLogger(__name__)

SILENCE_LABELS = frozenset({"", "sil", "sp", "spn", "<eps>", "<sil>"})


class ImportFormatError(UserError, ValueError):
    """An alignment file cannot be parsed; the message names the file (and line)."""


_TOKEN = re.compile(r'"((?:[^"]|"")*)"|([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)|(<exists>|<absent>)')
_LABEL_LINE = re.compile(r"^\s*\w+\s*\[\d*\]\s*:?\s*$")  # "item []:", "intervals [3]:"


def _read_text(path: Path) -> str:
    raw = path.read_bytes()
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")):
        return raw.decode("utf-16")
    return raw.decode("utf-8-sig")


def _textgrid_tokens(path: Path) -> list:
    """Values in file order (strings and numbers); keys and item labels are skipped,
    so the long and the short text formats give the same sequence."""
    tokens = []
    for line in _read_text(path).splitlines():
        if _LABEL_LINE.match(line):
            continue
        value = line.split("=", 1)[1] if "=" in line and not line.lstrip().startswith('"') else line
        for text, number, flag in _TOKEN.findall(value):
            if flag:
                tokens.append(flag)
            elif number:
                tokens.append(float(number))
            else:
                tokens.append(text.replace('""', '"'))
    return tokens


class TextGridTier(NamedTuple):
    name: str
    kind: str
    xmin: float
    xmax: float
    intervals: list  # (start, end, label) or (time, time, label) for point tiers


def read_textgrid(path) -> tuple[float, list[TextGridTier]]:
    """``(xmax, tiers)`` of a Praat TextGrid in the long or short text format."""
    path = Path(path)
    tokens = _textgrid_tokens(path)
    try:
        if tokens[:2] != ["ooTextFile", "TextGrid"]:
            raise ImportFormatError(f"{path}: not a Praat TextGrid text file")
        position = 2
        xmax = float(tokens[position + 1])  # xmin is not needed
        position += 2
        if tokens[position] != "<exists>":
            return xmax, []
        n_tiers = int(tokens[position + 1])
        position += 2
        tiers = []
        for _ in range(n_tiers):
            kind, name = tokens[position], tokens[position + 1]
            tier_min, tier_max, count = tokens[position + 2 : position + 5]
            position += 5
            intervals = []
            for _ in range(int(count)):
                if kind == "IntervalTier":
                    start, end, label = tokens[position : position + 3]
                    position += 3
                else:
                    start, label = tokens[position : position + 2]
                    end = start
                    position += 2
                intervals.append((float(start), float(end), str(label)))
            tiers.append(TextGridTier(str(name), str(kind), float(tier_min), float(tier_max), intervals))
    except (IndexError, ValueError, TypeError) as err:
        if isinstance(err, ImportFormatError):
            raise
        raise ImportFormatError(f"{path}: malformed TextGrid ({err})") from None
    return xmax, tiers


def textgrid_words(path, tier: str = "words") -> tuple[float, list[Word]]:
    """``(xmax, words)`` from the tier ``tier`` (or ``<speaker> - tier``)."""
    xmax, tiers = read_textgrid(path)
    matches = [t for t in tiers if t.name == tier or t.name.endswith(f" - {tier}")]
    if not matches:
        names = [t.name for t in tiers]
        raise ImportFormatError(f"{path}: no interval tier named {tier!r} (tiers: {names})")
    words = [
        Word(label.strip(), start, end)
        for match in matches
        if match.kind == "IntervalTier"
        for start, end, label in match.intervals
        if label.strip().lower() not in SILENCE_LABELS
    ]
    return xmax, sorted(words, key=lambda w: w.start)


def read_ctm(path) -> dict[str, list[Word]]:
    """``{utt: words}`` from a CTM file, in file order per utterance."""
    path = Path(path)
    result: dict[str, list[Word]] = {}
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            fields = line.split()
            if not fields or fields[0].startswith(";;"):
                continue
            if len(fields) < 5:
                raise ImportFormatError(
                    f"{path}:{number}: expected '<utt> <channel> <start> <duration> <word> [conf]', got {line!r}"
                )
            try:
                start, duration = float(fields[2]), float(fields[3])
            except ValueError:
                raise ImportFormatError(f"{path}:{number}: start and duration must be numbers") from None
            if duration < 0:
                raise ImportFormatError(f"{path}:{number}: negative duration {duration}")
            if fields[4].lower() in SILENCE_LABELS:
                continue
            # Rounded: start + duration in binary floats gives 0.8999999999999999 for 0.9.
            result.setdefault(fields[0], []).append(Word(fields[4], start, round(start + duration, 6)))
    return result


def _write(job: Job, utt: str, duration: float, words: list[Word], aligner: str, stats: Counter) -> None:
    words = clean_words(words, duration, stats)
    job.write(utt, UtteranceAlignment(utt, duration, words, aligner).to_json())


def import_textgrids(
    source,
    output,
    *,
    tier: str = "words",
    durations: dict | None = None,
    ids=None,
    aligner: str = "mfa",
    shard: Shard | None = None,
    progress: bool = True,
) -> tuple[Job, Counter]:
    """Every ``*.TextGrid`` under ``source`` (recursively) into the cache ``output``; the closed job and
    the word fixes. ``ids``: only these utterances, those without a TextGrid failures (``missing``)."""
    source = Path(source)
    files = sorted(source.rglob("*.TextGrid")) if source.is_dir() else [source]
    by_id: dict[str, Path] = {}
    for file in files:
        utt = file.name[: -len(".TextGrid")] if file.name.endswith(".TextGrid") else file.stem
        if utt in by_id:
            raise ImportFormatError(f"{file}: utterance {utt!r} also has {by_id[utt]}")
        by_id[utt] = file
    wanted = list(ids) if ids is not None else list(by_id)
    stats: Counter = Counter()
    with Job(output, shard=shard or Shard(), desc="import mfa", progress=progress) as job:
        for utt in job.track(job.pending(wanted)):
            if utt not in by_id:
                job.fail(utt, f"no TextGrid for this utterance under {source}", kind="missing")
                continue
            try:
                xmax, words = textgrid_words(by_id[utt], tier)
            except ImportFormatError as err:
                job.fail(utt, err, kind="malformed")
                continue
            duration = float((durations or {}).get(utt, xmax))
            if duration <= 0:
                job.fail(utt, f"{by_id[utt]}: duration {duration} is not positive", kind="malformed")
                continue
            _write(job, utt, duration, words, aligner, stats)
    return job, stats


def import_ctm(
    source,
    output,
    *,
    durations: dict | None = None,
    ids=None,
    aligner: str = "ctm",
    shard: Shard | None = None,
    progress: bool = True,
) -> tuple[Job, Counter]:
    """A CTM file into the cache ``output`` (see :func:`import_textgrids` for ``ids``)."""
    by_id = read_ctm(source)
    wanted = list(ids) if ids is not None else list(by_id)
    stats: Counter = Counter()
    with Job(output, shard=shard or Shard(), desc="import ctm", progress=progress) as job:
        for utt in job.track(job.pending(wanted)):
            words = by_id.get(utt)
            if words is None:
                job.fail(utt, f"no line for this utterance in {source}", kind="missing")
                continue
            duration = (durations or {}).get(utt)
            if duration is None:
                duration = max(w.end for w in words)
                stats["duration_from_last_word"] += 1
            if float(duration) <= 0:
                job.fail(utt, f"duration {duration} is not positive", kind="malformed")
                continue
            _write(job, utt, float(duration), words, aligner, stats)
    return job, stats

"""The files of a JSON Lines cache (shards, ``.partial`` files of unfinished ones), their records, a
half-written tail, and an id read twice; shared by the alignment and order caches and the jobs that write them.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from ..errors import MissingInputError

logger = logging.getLogger(__name__)

#: What a shard appends to while it runs; renamed into place (``x.jsonl.partial`` -> ``x.jsonl``) when done.
PARTIAL = ".partial"


def _is_folder_target(output: Path) -> bool:
    return output.is_dir() or output.suffix != ".jsonl"


def shard_files(output, ending: str = ".jsonl") -> list[Path]:
    """The part files written for ``output`` (a folder's ``*.jsonl`` or ``x.part-*.jsonl``; another
    ``ending``: their ``.jsonl.partial`` or ``.failures.tsv``), sorted."""
    output = Path(output)
    if _is_folder_target(output):
        return sorted(output.glob(f"*{ending}")) if output.is_dir() else []
    return sorted(output.parent.glob(f"{output.stem}.part-[0-9]*-of-[0-9]*{ending}"))


def cache_files(
    path, *, what: str = "alignment cache", required: bool = True, in_progress: bool = False
) -> list[Path]:
    """The files of a JSON Lines cache, sorted: a folder's ``*.jsonl``, or ``x.jsonl`` and its shards
    (``in_progress``: with the ``.partial`` files of unfinished shards)."""
    path = Path(path)
    suffixes = ["", PARTIAL] if in_progress else [""]
    files = {file for suffix in suffixes for file in shard_files(path, f".jsonl{suffix}")}
    if not path.is_dir():
        files |= {Path(f"{path}{suffix}") for suffix in suffixes if Path(f"{path}{suffix}").is_file()}
    if required and not files:
        if path.is_dir():
            raise MissingInputError(f"{path}: no *.jsonl files of the {what} in this folder")
        raise MissingInputError(
            f"{path}: {what} not found (neither this file nor shards {path.stem}.part-*-of-*.jsonl)"
        )
    return sorted(files)


def truncate_partial_tail(path) -> bool:
    """Cut a last line that has no newline (a write interrupted by a kill); True when something was cut."""
    path = Path(path)
    data = path.read_bytes()
    kept = data.rfind(b"\n") + 1
    if kept == len(data):
        return False
    os.truncate(path, kept)
    logger.warning(
        "%s: removed a half-written last line (%d bytes, from a killed run); its utterance is redone",
        path,
        len(data) - kept,
    )
    return True


def iter_jsonl(path, *, error: type[Exception], partial_tail: str = "parse"):
    """Yield ``(where, record, line)`` for each JSON line of an append-only file, streamed. An unterminated
    last line (its writer killed or still running) is parsed like the others (``parse``), left out
    with a warning (``ignore``) or silently (``skip``), or refused (``refuse``: a shard to finish first)."""
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            where = f"{path}:{number}"
            if not line.endswith("\n") and partial_tail != "parse":  # only the last line can lack one
                if partial_tail == "refuse":
                    raise error(
                        f"{where}: unterminated last line (is this shard still running or was it killed? "
                        "rerun it to completion first)"
                    )
                if partial_tail == "ignore":
                    logger.warning(
                        "%s: ignoring an unterminated last line (a writer killed or still running)", where
                    )
                return
            try:
                record = json.loads(line)
            except json.JSONDecodeError as err:
                raise error(f"{where}: not valid JSON ({err.msg})") from None
            yield where, record, line


class RepeatedIds:
    """Where each id of a cache was first read, to decide what a second line for it means."""

    def __init__(self, error: type[Exception]):
        self._first: dict[str, tuple[str, int]] = {}
        self._error = error
        self.repeats = 0

    def is_repeat(self, utt_id: str, where: str, line: str) -> bool:
        fingerprint = hash(line.rstrip("\n"))  # the same process compares: str hashes are stable here
        first = self._first.setdefault(utt_id, (where, fingerprint))
        if first[0] == where:
            return False
        if first[1] != fingerprint:
            raise self._error(f"{where}: id {utt_id!r} already defined at {first[0]} with other content")
        self.repeats += 1
        return True

    def __contains__(self, utt_id: str) -> bool:
        return utt_id in self._first

    def log(self, path, what: str) -> None:
        if self.repeats:
            logger.info(
                "%s: %d %s read twice (a merged file beside its parts) counted once", path, self.repeats, what
            )

"""The files of a JSON Lines cache: shard names, listing, a half-written tail, an id read twice.

The alignment cache (:mod:`segreconcat_aug.align.cache`), the order cache
(:mod:`segreconcat_aug.method.orders`) and the batch jobs that write them
(:mod:`segreconcat_aug.data.jobs`) share these pieces; this module imports none of them.

- :func:`shard_files` lists the files the shards of a run wrote: ``<folder>/part-002-of-008.jsonl``
  or ``x.part-002-of-008.jsonl`` beside an ``x.jsonl`` target (named by :func:`segreconcat_aug.data.jobs.shard_path`).
- :func:`cache_files` lists what a reader reads: a folder's ``*.jsonl``, or ``x.jsonl`` and its parts; with
  ``in_progress``, also the ``*.jsonl.partial`` files of shards still running or stopped.
- :func:`truncate_partial_tail` cuts a last line left without its newline by a killed writer.
- :class:`RepeatedIds` decides what a second line for an id means (a merged file beside its parts).
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

from ..errors import MissingInputError

logger = logging.getLogger(__name__)

_PART = re.compile(r"part-(\d+)-of-(\d+)\.jsonl$")
#: What a shard appends to while it runs; renamed into place (``x.jsonl.partial`` -> ``x.jsonl``) when done.
PARTIAL = ".partial"


def _is_folder_target(output: Path) -> bool:
    return output.is_dir() or output.suffix != ".jsonl"


def shard_files(output, suffix: str = "") -> list[Path]:
    """The part files written for ``output`` (a folder's ``*.jsonl`` or ``x.part-*.jsonl``), sorted."""
    output = Path(output)
    if _is_folder_target(output):
        return sorted(output.glob(f"*.jsonl{suffix}")) if output.is_dir() else []
    pattern = f"{output.stem}.part-*-of-*.jsonl{suffix}"
    return sorted(p for p in output.parent.glob(pattern) if _PART.search(p.name.removesuffix(suffix)))


def cache_files(
    path, *, what: str = "alignment cache", required: bool = True, in_progress: bool = False
) -> list[Path]:
    """The files of a JSON Lines cache, sorted: a folder's ``*.jsonl``, or ``x.jsonl`` and its shards.

    The shards of a sharded run into ``x.jsonl`` (``x.part-002-of-008.jsonl``)
    are read beside it, merged or not: after a merge, ``x.jsonl`` and the parts
    hold the same lines, which :class:`RepeatedIds` lets the loaders read once.
    Shared by the alignment and order caches; ``required`` raises
    :class:`~segreconcat_aug.errors.MissingInputError` (naming ``what``) when there is nothing to read.
    ``in_progress`` adds the ``*.partial`` files of unfinished shards (what a resumed job counts as done).
    """
    path = Path(path)
    suffixes = ["", PARTIAL] if in_progress else [""]
    files = sorted({file for suffix in suffixes for file in shard_files(path, suffix)})
    if not path.is_dir():
        files = sorted({*files, *(file for file in (Path(f"{path}{s}") for s in suffixes) if file.is_file())})
    if required and not files:
        if path.is_dir():
            raise MissingInputError(f"{path}: no *.jsonl files of the {what} in this folder")
        raise MissingInputError(
            f"{path}: {what} not found (neither this file nor shards {path.stem}.part-*-of-*.jsonl)"
        )
    return files


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

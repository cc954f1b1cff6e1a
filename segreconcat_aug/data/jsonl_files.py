"""The files of an append-only JSON Lines cache: shard names, listing, a half-written tail.

The alignment cache (:mod:`segreconcat_aug.align.cache`), the order cache
(:mod:`segreconcat_aug.method.orders`) and the batch jobs that write them
(:mod:`segreconcat_aug.data.jobs`) share these pieces; this module imports none of them.

- :func:`shard_files` lists the part files a sharded run wrote: ``<folder>/part-002-of-008.jsonl``
  or ``x.part-002-of-008.jsonl`` beside an ``x.jsonl`` target (named by :func:`segreconcat_aug.data.jobs.shard_path`).
- :func:`cache_files` lists what a reader reads: a folder's ``*.jsonl``, or ``x.jsonl`` and its parts.
- :func:`truncate_partial_tail` cuts a last line left without its newline by a killed writer.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

from ..errors import MissingInputError

logger = logging.getLogger(__name__)


_PART = re.compile(r"part-(\d+)-of-(\d+)\.jsonl$")


def _is_folder_target(output: Path) -> bool:
    return output.is_dir() or output.suffix != ".jsonl"


def shard_files(output) -> list[Path]:
    """The part files written for ``output`` (a folder's ``*.jsonl`` or ``x.part-*.jsonl``), sorted."""
    output = Path(output)
    if _is_folder_target(output):
        return sorted(output.glob("*.jsonl")) if output.is_dir() else []
    return sorted(p for p in output.parent.glob(f"{output.stem}.part-*-of-*.jsonl") if _PART.search(p.name))


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
                break
        else:
            handle.truncate(0)
    kept = path.stat().st_size
    logger.warning(
        "%s: removed a half-written last line (%d bytes, from a killed run); its utterance is redone",
        path,
        size - kept,
    )
    return True


def cache_files(path, *, what: str = "alignment cache", required: bool = True) -> list[Path]:
    """The files of a JSON Lines cache, sorted: a folder's ``*.jsonl``, or ``x.jsonl`` and its shards.

    The shards of a sharded run into ``x.jsonl`` (``x.part-002-of-008.jsonl``)
    are read beside it, merged or not: after a merge, ``x.jsonl`` and the parts
    hold the same lines, which :class:`~segreconcat_aug.align.cache.RepeatedIds` lets the loaders read once.
    Shared by the alignment and order caches; ``required`` raises
    :class:`~segreconcat_aug.errors.MissingInputError` (naming ``what``) when there is nothing to read.
    """
    path = Path(path)
    if path.is_dir():
        files = sorted(path.glob("*.jsonl"))
        if required and not files:
            raise MissingInputError(f"{path}: no *.jsonl files of the {what} in this folder")
        return files
    files = sorted({*shard_files(path), *([path] if path.is_file() else [])})
    if required and not files:
        raise MissingInputError(
            f"{path}: {what} not found (neither this file nor shards {path.stem}.part-*-of-*.jsonl)"
        )
    return files

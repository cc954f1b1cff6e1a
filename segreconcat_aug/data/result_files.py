"""Writing result files so that no reader meets half of one: atomic replacement (a full disk becomes
one line naming the file), strict JSON (NaN and infinities, which JSON lacks, become ``null``) and
file digests (so a score file changed since is noticed).

>>> json_text({"cllr": float("inf"), "eer": np.float32(12.5), "bins": np.arange(2)})
'{"cllr": null, "eer": 12.5, "bins": [0, 1]}'
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import math
import os
import uuid
from pathlib import Path

import numpy as np

from ..errors import UserError

#: The errno values of a device or a quota out of space.
DISK_FULL = {errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)}


class DiskFullError(UserError, OSError):
    """The disk (or the user's quota) filled up while a file was written; the message names the file.

    The run's folders are kept: what was written is a resume's head start; freeing space is the fix.
    """

    keep_new_folders = True


def disk_full(path, error: OSError) -> DiskFullError:
    """The one-line error for a full disk while ``path`` was written (``path`` None: the file is unknown).

    >>> print(disk_full("eval/results.csv", OSError(28, "No space left on device")))
    eval/results.csv: no space left on the device (No space left on device) while writing it; nothing of it was kept (the previous version, if any, is as it was): free some space and run the same command again
    """
    if path:
        text = (
            f"{path}: no space left on the device ({error.strerror or error}) while writing it; nothing of it "
            "was kept (the previous version, if any, is as it was): free some space and run the same command again"
        )
    else:  # from elsewhere (a library's own write): which file, and how much of it, is not known here
        text = (
            f"no space left on the device ({error.strerror or error}): free some space and run the same command "
            "again (the run's folders are kept; what was written completely is reused)"
        )
    found = DiskFullError(text)
    found.errno = error.errno
    return found


@contextlib.contextmanager
def atomic_writer(path, mode: str = "w", **open_options):
    """``open(path, mode)`` that appears at ``path`` only once it is completely written (a temporary
    file beside it, then ``os.replace``); on any error it is removed, ``path`` is left as it was, and a
    full disk is raised as :class:`DiskFullError`.
    """
    path = Path(path)
    # Unique across processes and hosts: writers on several nodes may share a pid.
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    if "b" not in mode:
        open_options.setdefault("encoding", "utf-8")
    try:
        with open(temporary, mode, **open_options) as handle:
            yield handle
        os.replace(temporary, path)
    except OSError as error:
        temporary.unlink(missing_ok=True)
        if error.errno in DISK_FULL and not isinstance(error, DiskFullError):
            raise disk_full(path, error) from None
        raise
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def write_text(path, text: str) -> Path:
    """Write ``text`` to ``path`` atomically (:func:`atomic_writer`); returns the path."""
    with atomic_writer(path) as handle:
        handle.write(text)
    return Path(path)


def finite(value):
    """``value`` as plain JSON data: non-finite floats -> None, numpy scalars and arrays -> Python's.

    >>> finite({"a": [1.0, float("nan")], "b": (np.int64(3), np.bool_(True))})
    {'a': [1.0, None], 'b': [3, True]}
    """
    if isinstance(value, dict):
        return {key: finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(item) for item in value]
    if isinstance(value, np.ndarray):
        return finite(value.tolist())
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def json_text(value, **options) -> str:
    """``json.dumps`` of :func:`finite` ``(value)`` with ``allow_nan=False``: valid JSON, always."""
    return json.dumps(finite(value), allow_nan=False, **options)


def file_digest(path) -> str:
    """``"sha256:<hex>"`` of the file's bytes.

    >>> import tempfile; folder = tempfile.mkdtemp(); _ = (Path(folder) / "a").write_text("x")
    >>> file_digest(Path(folder) / "a")[:15]
    'sha256:2d711642'
    """
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return f"sha256:{digest.hexdigest()}"

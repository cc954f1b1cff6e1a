"""One writer per output folder: ``flock(2)`` on a small file in it, which the kernel releases when its
holder exits however it exits (``kill -9`` included). The file stays: it names its holder, for a second
run's one-line refusal, and removing it while another process opens it would let both lock a new one."""

from __future__ import annotations

import fcntl
import os
import sys
import time
from pathlib import Path

from ..errors import UserError

#: The lock file of an output folder (``train.py``, ``evaluate.py``).
LOCK_FILE = ".segreconcat.lock"
#: The lock files this process holds until it exits (a recipe's folder is its own for the whole run).
_HELD: dict = {}


class FolderInUseError(UserError, RuntimeError):
    """Another process holds the lock of the folder this run would write; ``holder`` names it."""


def lock_folder(folder, what: str = "a run", name: str = LOCK_FILE):
    """Lock ``folder`` (made if missing) while the returned file is open."""
    Path(folder).mkdir(parents=True, exist_ok=True)
    handle = open(Path(folder) / name, "a+", encoding="utf-8")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip() or "another process"
        handle.close()
        error = FolderInUseError(
            f"{folder} is in use by {holder}: wait for it to finish, or stop it (a killed run leaves no lock "
            "behind), or give this one another folder; two writers in one folder would mix their files"
        )
        error.holder = holder
        raise error from None
    handle.truncate(0)
    handle.write(
        f"{what} (pid {os.getpid()}, since {time.strftime('%Y-%m-%d %H:%M:%S')}: {' '.join(sys.argv)})\n"
    )
    handle.flush()
    return handle


def hold_folder(folder, what: str = "a run", name: str = LOCK_FILE) -> None:
    """:func:`lock_folder` for the rest of this process (or until :func:`release_held`)."""
    path = (Path(folder) / name).absolute()
    if path not in _HELD:
        _HELD[path] = lock_folder(folder, what, name)


def release_held() -> None:
    """Release every lock :func:`hold_folder` took (a recipe run in-process, as the tests do, ends)."""
    while _HELD:
        _HELD.popitem()[1].close()

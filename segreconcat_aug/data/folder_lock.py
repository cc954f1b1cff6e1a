"""One writer per output folder: an exclusive lock that a dead process cannot leave behind.

A run takes :class:`FolderLock` on the folder it writes (``recipes/train.py`` its output folder,
``recipes/evaluate.py`` its evaluation folder, ``recipes/run_grid.py`` the grid's output folder)
before it writes anything there; a second run into the same folder stops with one line naming the
folder and the process that holds it (:class:`FolderInUseError`), instead of two trainers writing
one folder's checkpoints.

The lock is ``flock(2)`` on a small file in the folder (:data:`LOCK_FILE`, or the name given): the
kernel releases it when its holder exits, however it exits (``kill -9`` included), so a lock left by
a dead process never blocks, and nothing has to be cleaned up. The file stays (it holds the holder's
pid and command line, for the message); removing it while another process may be opening it would
let two processes each lock a file of that name. Where ``fcntl`` is missing (Windows) the lock is a
no-op.

>>> import tempfile
>>> folder = tempfile.mkdtemp()
>>> with FolderLock(folder, "a run"):  # doctest: +ELLIPSIS
...     FolderLock(folder, "another run").acquire()
Traceback (most recent call last):
...
segreconcat_aug.data.folder_lock.FolderInUseError: ... is in use by a run (pid ...): ...
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from ..errors import UserError

try:
    import fcntl
except ImportError:  # Windows: no flock
    fcntl = None

#: The lock file of an output folder (``train.py``, ``evaluate.py``).
LOCK_FILE = ".segreconcat.lock"


class FolderInUseError(UserError, RuntimeError):
    """Another process holds the lock of the folder this run would write."""


class FolderLock:
    """An exclusive, non-blocking lock on ``folder`` (made if missing) for as long as it is held.

    ``what``: how the holder is named to a second run (``"a training run"``); ``name``: the lock
    file's name in the folder (one folder can hold the locks of different roles, e.g. the grid's and
    the training's in a cell folder).
    """

    def __init__(self, folder, what: str = "a run", name: str = LOCK_FILE):
        self.folder, self.what = Path(folder), what
        self.path = self.folder / name
        self._handle = None

    def acquire(self) -> FolderLock:
        if fcntl is None or self._handle is not None:
            return self
        self.folder.mkdir(parents=True, exist_ok=True)
        handle = open(self.path, "a+", encoding="utf-8")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip()
            handle.close()
            raise FolderInUseError(
                f"{self.folder} is in use by {holder_text(holder)}: wait for it to finish, or stop it "
                "(a killed run leaves no lock behind), or give this one another folder; two writers in one "
                "folder would mix their files"
            ) from None
        handle.seek(0)
        handle.truncate()
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        handle.write(f"{os.getpid()}\t{stamp}\t{self.what}\t{' '.join(sys.argv)}\n")
        handle.flush()
        self._handle = handle
        return self

    def release(self) -> None:
        if self._handle is not None:
            fcntl.flock(self._handle, fcntl.LOCK_UN)
            self._handle.close()
            self._handle = None

    @property
    def held(self) -> bool:
        return self._handle is not None

    def __enter__(self) -> FolderLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def holder_text(line: str) -> str:
    """How a lock file's line names its holder: ``a training run (pid 12, since ..., python train.py ...)``.

    >>> holder_text("12\\t2026-01-01 10:00:00\\ta training run\\tpython recipes/train.py x.yaml")
    'a training run (pid 12, since 2026-01-01 10:00:00: python recipes/train.py x.yaml)'
    >>> holder_text("")
    'another process'
    """
    parts = line.split("\t")
    if len(parts) < 4 or not parts[0].isdigit():
        return "another process"
    pid, since, what, command = parts[0], parts[1], parts[2], "\t".join(parts[3:])
    return f"{what} (pid {pid}, since {since}: {command})"


#: Locks this process holds until it exits (the recipes': their folder is theirs for the whole run).
_HELD: list[FolderLock] = []


def hold_folder(folder, what: str = "a run", name: str = LOCK_FILE) -> FolderLock:
    """Take the folder's lock for the rest of this process (released when it exits, or by
    :func:`release_held`); taking one this process already holds is a no-op."""
    path = (Path(folder) / name).absolute()
    for lock in _HELD:
        if lock.path.absolute() == path:
            return lock
    lock = FolderLock(folder, what, name).acquire()
    _HELD.append(lock)
    return lock


def release_held() -> None:
    """Release every lock :func:`hold_folder` took (a recipe run in-process, as the tests do, ends)."""
    while _HELD:
        _HELD.pop().release()

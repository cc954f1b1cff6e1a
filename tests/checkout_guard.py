"""The suite must leave the checkout as it found it: every path under it, before and after.

Git's own view would hide new files inside folders that existed already and are ignored
(``results/`` in a checkout that has run the demo), so the folder is walked. Only ``.git``
and the running environment's folder (``make``'s ``.venv``, when it lies in the checkout)
are left out: they are not the suite's to write, nor the checkout's content.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def checkout_paths(root, skip=()) -> set[str]:
    """Every file and folder under ``root`` (relative, ``/``-separated), without the ``skip`` folders.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     (Path(tmp) / "a" / "b").mkdir(parents=True)
    ...     _ = (Path(tmp) / "a" / "b" / "c.txt").write_text("x")
    ...     (Path(tmp) / ".git").mkdir()
    ...     sorted(checkout_paths(tmp, skip=[Path(tmp) / ".git"]))
    ['a', 'a/b', 'a/b/c.txt']
    """
    root = Path(root).resolve()
    skipped = {Path(path).resolve() for path in skip}
    found = set()
    for folder, subfolders, files in os.walk(root):
        here = Path(folder)
        subfolders[:] = [name for name in subfolders if (here / name).resolve() not in skipped]
        for name in [*subfolders, *files]:
            found.add((here / name).relative_to(root).as_posix())
    return found


def default_skip(root) -> list[Path]:
    """``.git`` and the running environment's folder."""
    return [Path(root) / ".git", Path(sys.prefix)]

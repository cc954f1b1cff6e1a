"""Run many recipe command lines, each in a process of its own, for about the price of one.

    python tests/forked_recipes.py cases.json results.json

``cases.json`` lists ``{"recipe": "train", "argv": [...], "watch": [paths], "cwd": path}``; each case
runs exactly as the console script ``segreconcat-<recipe>`` does (:func:`segreconcat_aug.cli.run_recipe`:
the recipe's ``__main__``, ``run_main`` and all), in a child forked from this process after torch,
SpeechBrain and the library are imported once; so a case costs its own work, not the seconds of imports
a fresh interpreter pays. ``results.json`` gets, per case, its exit status, stdout, stderr, seconds and
the watched paths whose content changed (a digest of every file under each, before and after).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path


def digest(path) -> dict[str, str] | None:
    """Every file and folder under ``path`` (itself included) -> its content digest (or "folder")."""
    path = Path(path)
    if not path.exists():
        return None
    paths = [path, *sorted(path.rglob("*"))] if path.is_dir() else [path]
    return {
        str(item): "folder" if item.is_dir() else hashlib.sha1(item.read_bytes()).hexdigest()
        for item in paths
    }


def run_case(case: dict) -> dict:
    out, err = tempfile.TemporaryFile(), tempfile.TemporaryFile()
    before = {path: digest(path) for path in case.get("watch", [])}
    start = time.time()
    pid = os.fork()
    if pid == 0:  # the child: the recipe, with its output in the two files
        code = 1
        try:
            os.dup2(out.fileno(), 1)
            os.dup2(err.fileno(), 2)
            if case.get("cwd"):
                os.chdir(case["cwd"])
            from segreconcat_aug import cli

            cli.run_recipe(case["recipe"], case["argv"])
            code = 0
        except SystemExit as stop:
            if isinstance(stop.code, int) or stop.code is None:
                code = stop.code or 0
            else:  # SystemExit("message"): Python prints it and exits with 1
                print(stop.code, file=sys.stderr)
        except BaseException:
            traceback.print_exc()  # what the interpreter prints for an uncaught exception
        finally:
            logging.shutdown()
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    seconds = time.time() - start
    outputs = []
    for handle in (out, err):
        handle.seek(0)
        outputs.append(handle.read().decode("utf-8", errors="replace"))
        handle.close()
    changed = [path for path, content in before.items() if digest(path) != content]
    return {
        "returncode": os.waitstatus_to_exitcode(status),
        "stdout": outputs[0],
        "stderr": outputs[1],
        "seconds": seconds,
        "changed": changed,
    }


def main() -> None:
    cases = json.loads(Path(sys.argv[1]).read_text(encoding="utf-8"))
    # What every recipe imports (and the recipe-specific heavy ones), once, before forking.
    import hyperpyyaml  # noqa: F401
    import speechbrain.core  # noqa: F401
    import torch  # noqa: F401

    import segreconcat_aug.anonymizers.mcadams  # noqa: F401
    import segreconcat_aug.cli  # noqa: F401
    import segreconcat_aug.evaluation.system  # noqa: F401
    import segreconcat_aug.method.orders  # noqa: F401
    import segreconcat_aug.method.similarity  # noqa: F401

    results = [run_case(case) for case in cases]
    Path(sys.argv[2]).write_text(json.dumps(results, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()

"""One writer per output folder (issue 32, probe 2): a second writer is refused, a killed holder's lock is
free at once, and the grid runner's children die with it, so a rerun after ``kill -9`` trains alone.

The refusals through train.py, evaluate.py and run_grid.py themselves are cases of tests/test_user_errors.py.
"""

import os
import signal
import sys
import time
from pathlib import Path

import pytest
from test_grid import _argv, run_grid

from segreconcat_aug.data.folder_lock import FolderInUseError, hold_folder, lock_folder, release_held

# A training stand-in: records its pid in the cell folder, then works for a minute if told to (SLOW).
STUB = """
import os, sys, time
from pathlib import Path
step, out, calls, slow = sys.argv[1:5]
out = Path(out)
out.mkdir(parents=True, exist_ok=True)
with open(calls, "a") as handle:
    handle.write(f"{step} {os.getpid()}\\n")
if step == "train" and Path(slow).exists():
    (out / "train.pid").write_text(str(os.getpid()))
    time.sleep(60)
if step == "eval":
    sys.exit(3)  # nothing to evaluate: the cell fails after training, the grid goes on
"""


def _wait_for(condition, seconds=20.0):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return False


def _alive(pid: int) -> bool:
    """Running (a zombie, killed and waiting for a parent that never reaps, counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def _fork(work):
    """Run ``work()`` in a forked child of this process (everything is imported already); its pid."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)
            os.dup2(devnull, 2)
            code = work() or 0
        finally:
            os._exit(code)
    return pid


def test_a_second_writer_is_refused_and_a_killed_holders_lock_is_free(tmp_path):
    folder = tmp_path / "run"
    holder = _fork(lambda: (lock_folder(folder, "a training run"), time.sleep(60)))
    assert _wait_for(
        lambda: (
            (folder / ".segreconcat.lock").is_file()
            and str(holder) in (folder / ".segreconcat.lock").read_text()
        )
    )
    with pytest.raises(
        FolderInUseError, match=rf"{folder} is in use by a training run \(pid {holder}, since "
    ):
        lock_folder(folder, "another")
    os.kill(holder, signal.SIGKILL)
    os.waitpid(holder, 0)
    with lock_folder(folder, "the rerun"):  # the kernel released the dead holder's lock
        assert "the rerun (pid " in (folder / ".segreconcat.lock").read_text()


def test_a_held_folder_is_held_once_until_released(tmp_path):
    hold_folder(tmp_path, "a training run")
    hold_folder(tmp_path, "a training run")  # this process holds it already: kept
    with pytest.raises(
        FolderInUseError, match=rf"^{tmp_path} is in use by a training run \(pid {os.getpid()}"
    ):
        lock_folder(tmp_path, "another")  # another open file of this process is another holder
    release_held()
    lock_folder(tmp_path, "the next run").close()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_killing_the_grid_runner_kills_its_training_and_the_rerun_trains_alone(tmp_path):
    (tmp_path / "stub.py").write_text(STUB)
    calls = tmp_path / "calls.txt"
    command = f"{{python}} {tmp_path / 'stub.py'} {{step}} {{output_folder}} {calls} {tmp_path / 'SLOW'}"
    overrides = {
        "data_folder": str(tmp_path / "vpac"),
        "output_folder": str(tmp_path / "grid"),
        "systems": ["B3"],
        "train_command": command.replace("{step}", "train"),
        "eval_command": command.replace("{step}", "eval"),
        "comparison": {"baseline": "baseline", "compared": []},
        "ablation": None,
        "bootstrap_resamples": 0,
    }
    (tmp_path / "grid").mkdir()
    (tmp_path / "SLOW").touch()
    pid_file = tmp_path / "grid" / "B3" / "baseline" / "train.pid"
    runner = _fork(lambda: run_grid.main(_argv(overrides)))
    assert _wait_for(pid_file.is_file), "the training never started"
    training = int(pid_file.read_text())
    os.kill(runner, signal.SIGKILL)  # kill -9 of run_grid.py
    os.waitpid(runner, 0)
    died = _wait_for(lambda: not _alive(training), 10)
    if not died:
        os.kill(training, signal.SIGKILL)  # leave no orphan behind a failed test
    assert died, "the training ran on after its grid runner died"

    (tmp_path / "SLOW").unlink()
    assert run_grid.main(_argv(overrides)) == 1  # the rerun: trains (alone), then its eval stub fails
    steps = [line.split()[0] for line in calls.read_text().splitlines()]
    assert steps == ["train", "train", "eval"]

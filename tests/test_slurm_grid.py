"""The grid through SLURM (``launcher: slurm``): the same results as ``local``, failed jobs, one runner.

The SLURM tests need a cluster whose ``sacct`` works (``scripts/slurm/start.sh`` starts a single-node
one; ``.ci/run`` does); without one they skip and say why. ``--dry_run`` and the checks of the
``launcher``/``slurm_*`` keys need none.
"""

import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_grid import STUB, TINY_TRAINING, _argv, run_grid, stub_grid

from segreconcat_aug.grid.plan import load_grid
from segreconcat_aug.grid.runner import STATUS_FILE, SlurmSubmitError

REPO = Path(__file__).resolve().parents[1]
GRID = REPO / "hparams" / "grid.yaml"
# One CPU per job, two at once: what a 2-core test machine holds.
SMALL_JOBS = {
    "slurm_gpus_per_node": None,  # grid.yaml asks for one GPU; null: none
    "slurm_cpus_per_task": 1,
    "slurm_mem_gb": 2,
    "slurm_time_min": 20,
    "slurm_array_parallelism": 2,
}


def _slurm_problem() -> str | None:
    """Why the SLURM tests cannot run here, or None."""
    if shutil.which("sbatch") is None:
        return "no SLURM: sbatch is not on PATH (scripts/slurm/start.sh starts a single-node cluster)"
    for command in (["sinfo", "-h", "-o", "%T"], ["sacct", "-n", "-X", "-S", "now"]):
        try:
            probe = subprocess.run(command, capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired) as error:
            return f"no SLURM cluster answers: {' '.join(command)}: {error}"
        if probe.returncode != 0:
            return (
                f"no SLURM cluster answers: {' '.join(command)}: {probe.stderr.strip() or probe.returncode}"
            )
    return None


SLURM_PROBLEM = _slurm_problem()
needs_slurm = pytest.mark.skipif(SLURM_PROBLEM is not None, reason=str(SLURM_PROBLEM))
# One worker of a parallel run holds the cluster's two CPUs; a second grid's jobs would wait behind the first's.
pytestmark = pytest.mark.xdist_group("slurm")


def _stub_grid(tmp_path, **more):
    """A grid of stub steps (tests/test_grid.py's): a configuration's ``train`` waits while
    ``SLOW-<configuration>`` exists, its SLURM job id written first."""
    waiting = (
        "slow = Path(calls).parent / f'SLOW-{config}'\n"
        "if step == 'train' and slow.exists():\n"
        "    (out / 'job_id').write_text(os.environ.get('SLURM_JOB_ID', 'none'))\n"
        "    deadline = time.time() + 300\n"
        "    while slow.exists() and time.time() < deadline:\n"
        "        time.sleep(0.2)\n"
    )
    stub = STUB.replace("import shutil, sys", "import os, shutil, sys, time", 1)
    return {
        **stub_grid(tmp_path, stub.replace('if step == "train":', waiting + 'if step == "train":', 1)),
        "comparison": {"baseline": "baseline", "compared": ["rr_concat"]},
        "ablation": None,
        "bootstrap_resamples": 0,
        **more,
    }


def _run_grid_process(overrides, *flags) -> subprocess.Popen:
    environment = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    return subprocess.Popen(
        [sys.executable, str(REPO / "recipes" / "run_grid.py"), *_argv(overrides), *flags],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=environment,
    )


def _wait_for(condition, seconds=120.0) -> bool:
    deadline = time.time() + seconds
    while time.time() < deadline:
        if condition():
            return True
        time.sleep(0.2)
    return False


@pytest.mark.parametrize("launcher", ["local", "slurm"])
def test_dry_run_lists_each_step_it_would_run_and_runs_and_writes_nothing(tmp_path, capsys, launcher):
    overrides = _stub_grid(tmp_path, launcher=launcher, **SMALL_JOBS)
    done = tmp_path / "grid" / "B3" / "baseline"
    done.mkdir(parents=True)  # a finished cell: listed as not run again
    (done / STATUS_FILE).write_text('{"train": "done", "eval": "done"}')
    shutil.copytree(tmp_path / "templates" / "baseline", done / "eval")
    before = sorted(path for path in tmp_path.rglob("*"))

    assert run_grid.main([*_argv(overrides), "--dry_run"]) == 0
    lines = capsys.readouterr().out.splitlines()
    steps = [line for line in lines if line.startswith("B3/")]
    assert steps[0] == "B3/baseline: finished, not run again"
    assert steps[1].startswith(
        f"B3/rr_concat train: {sys.executable} {tmp_path / 'stub.py'} train B3 rr_concat "
    )
    assert steps[2].startswith("B3/rr_concat eval: ") and len(steps) == 3
    if launcher == "slurm":
        assert lines[0].startswith(f"launcher slurm: jobs in {tmp_path / 'grid' / 'slurm_jobs'}, ")
        assert "'slurm_array_parallelism': 2" in lines[0]
    assert sorted(tmp_path.rglob("*")) == before and not (tmp_path / "calls.txt").exists()


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"launcher": "cloud"}, "option launcher: 'cloud': input should be 'local' or 'slurm'"),
        ({"launcher": "slurm", "slurm_mem_gb": "lots"}, 'slurm_mem_gb: Parameter "mem_gb" expected type'),
        ({"slurm_additional_parameters": ["--qos=high"]}, "slurm_additional_parameters: .+ valid dictionary"),
        (
            {"launcher": "slurm", "slurm_cpus_per_task": 1.5},
            'slurm_cpus_per_task: Parameter "cpus_per_task" expected',
        ),
    ],
)
def test_a_bad_launcher_or_slurm_parameter_is_refused_in_one_line(tmp_path, overrides, message):
    with pytest.raises(ValueError, match=message) as refused:
        load_grid(GRID, {"data_folder": str(tmp_path), **overrides})
    assert "\n" not in str(refused.value) and str(GRID) in str(refused.value)


@needs_slurm
def test_jobs_sbatch_refuses_stop_the_grid_in_one_line(tmp_path):
    missing = "no-such-partition"
    overrides = _stub_grid(tmp_path, launcher="slurm", **SMALL_JOBS, slurm_partition=missing)
    with pytest.raises(
        SlurmSubmitError, match="sbatch refused the grid's train jobs: sbatch: error: "
    ) as refused:
        run_grid.main(_argv(overrides))
    assert "\n" not in str(refused.value) and missing in str(refused.value)
    assert not (tmp_path / "calls.txt").exists()


@needs_slurm
def test_a_two_cell_grid_through_slurm_writes_the_same_grid_results_as_local(vpac_root, tmp_path):
    """Two real tiny trainings and evaluations on the VPAC fixture, once here and once as SLURM jobs."""
    overrides = {
        "data_folder": str(vpac_root),
        "systems": ["T8-5"],
        "comparison": {"baseline": "baseline", "compared": ["rr_concat"]},
        "ablation": None,
        "show_published": False,
        "bootstrap_resamples": 50,
        "parallel": 2,
        "environment": {"OMP_NUM_THREADS": 1},
        "extra_overrides": TINY_TRAINING,
        **SMALL_JOBS,
    }
    results = {}
    for launcher in ("local", "slurm"):
        folder = tmp_path / launcher
        assert run_grid.main(_argv({**overrides, "launcher": launcher, "output_folder": str(folder)})) == 0
        with open(folder / "grid_results.csv", encoding="utf-8") as handle:
            results[launcher] = handle.read().replace(str(folder), "<grid>")
        assert len(list(csv.DictReader(results[launcher].splitlines()))) == 2
    assert results["slurm"] == results["local"]
    # Each step ran as its own job, its log in slurm_jobs/.
    logs = sorted(path.name for path in (tmp_path / "slurm" / "slurm_jobs").rglob("*_log.out"))
    assert len(logs) == 4, logs
    train_log = (tmp_path / "slurm" / "T8-5" / "rr_concat" / "grid_train.log").read_text()
    assert train_log.startswith("$ OMP_NUM_THREADS=1 ") and "epoch 1/1" in train_log


@needs_slurm
def test_a_second_grid_is_refused_and_a_cancelled_job_fails_with_its_log_then_its_rerun_completes(tmp_path):
    overrides = _stub_grid(tmp_path, launcher="slurm", **SMALL_JOBS)
    (tmp_path / "SLOW-rr_concat").touch()
    cell = tmp_path / "grid" / "B3" / "rr_concat"
    first = _run_grid_process(overrides)
    try:
        assert _wait_for((cell / "job_id").is_file, 600), "the training job never started"
        second = _run_grid_process(overrides)
        out, err = second.communicate(timeout=120)
        assert second.returncode == 2
        assert len(err.strip().splitlines()) == 1 and "is in use by a grid run" in err

        job_id = (cell / "job_id").read_text()
        subprocess.run(["scancel", job_id], check=True)
        out, err = first.communicate(timeout=600)
    finally:
        if first.poll() is None:  # a failed test: Ctrl-C, on which the grid cancels its jobs
            first.send_signal(signal.SIGINT)
            try:
                first.wait(60)
            except subprocess.TimeoutExpired:
                first.kill()
        (tmp_path / "SLOW-rr_concat").unlink(missing_ok=True)
    assert first.returncode == 1
    failure = next((line for line in err.splitlines() if "ERROR B3/rr_concat: train " in line), None)
    assert failure and " CANCELLED" in failure, err
    log = Path(failure.rsplit(", see ", 1)[1].rstrip(")"))
    assert log.is_file() and log.parent.parent == tmp_path / "grid" / "slurm_jobs"
    assert "1 cell(s) failed: B3/rr_concat" in err
    assert not (cell / "eval").exists()  # a run whose training failed is not evaluated

    calls = (tmp_path / "calls.txt").read_text().splitlines()
    assert run_grid.main(_argv(overrides)) == 0  # the rerun: the cancelled cell only
    assert (tmp_path / "calls.txt").read_text().splitlines()[len(calls) :] == [
        "train B3 rr_concat",
        "eval B3 rr_concat",
    ]
    assert json.loads((cell / STATUS_FILE).read_text()) == {"train": "done", "eval": "done"}
    assert run_grid.main(_argv(overrides)) == 0  # finished: nothing is submitted again
    assert len((tmp_path / "calls.txt").read_text().splitlines()) == len(calls) + 2

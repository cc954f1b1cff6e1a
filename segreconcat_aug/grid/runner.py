"""Running the grid's runs: ``train_command`` then ``eval_command`` each, here (``launcher: local``,
``parallel`` at a time) or as SLURM jobs through submitit (``launcher: slurm``); docs/evaluation.md, docs/scale.md.

Finished steps are recorded in the run's ``grid_status.json``: a rerun skips them, a failed step runs again.
"""

from __future__ import annotations

import ctypes
import json
import logging
import os
import shlex
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from ..cli import PROGRESS_PREFIX, REPO, checkout_path
from ..data.jobs import slurm_executor, slurm_parameters
from ..data.protocols import get_protocol
from ..errors import UserError
from ..evaluation.system import EVAL_SUBFOLDER
from .plan import cell_folder, grid_runs, run_environment, split_unit

logger = logging.getLogger(__name__)
STATUS_FILE = "grid_status.json"
#: The grid runner's lock in its output folder (segreconcat_aug.data.folder_lock): one runner per grid.
GRID_LOCK = ".segreconcat-grid.lock"
#: Where ``launcher: slurm`` keeps its jobs' scripts, pickles and logs, in the grid's output folder.
SLURM_FOLDER = "slurm_jobs"
_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _die_with_this_process():
    """A ``preexec_fn`` that makes the child get SIGTERM when this process dies (Linux), or None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def set_death_signal():
        prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM))
        if os.getppid() != parent:  # the runner died before the call: go now
            os.kill(os.getpid(), signal.SIGTERM)

    return set_death_signal


def _status(folder: Path) -> dict:
    path = folder / STATUS_FILE
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def format_command(template: str, fields: dict) -> list[str]:
    """Fill a command template and split it into arguments (no shell); of repeated ``--key=`` options the last wins."""
    quoted = {
        key: shlex.quote(str(value)) if key not in ("overrides", "extra", "language") else value
        for key, value in fields.items()
    }
    arguments = shlex.split(template.format(**quoted))
    keys = [
        argument[2:].split("=", 1)[0] if argument[:2] == "--" and "=" in argument else None
        for argument in arguments
    ]
    return [
        argument
        for position, (argument, key) in enumerate(zip(arguments, keys))
        if key is None or key not in keys[position + 1 :]
    ]


def overrides_string(value) -> str:
    """Command-line overrides from a string (kept) or a mapping (``{key: value}`` -> ``--key=value``)."""
    if not value or isinstance(value, str):
        return value or ""
    return " ".join(
        shlex.quote(f"--{key}={item if isinstance(item, str) else json.dumps(item, separators=(',', ':'))}")
        for key, item in value.items()
    )


def config_setting(grid, config: str, key: str):
    """A configuration's own ``train_hparams``, ``train_command`` or ``eval_command``, else the grid's."""
    spec = grid["configurations"][config] or {}
    if key == "train_command" and spec.get("model_of"):
        return ""  # it evaluates another configuration's model
    return spec[key] if key in spec and spec[key] is not None else grid[key]


def unit_command(
    grid, template: str, unit: str, folder, spec: dict, *overrides: str, configuration=""
) -> list[str]:
    """``template`` filled for ``unit`` writing into ``folder``: a configuration ``spec``'s ``overrides``, then
    ``overrides``; the grid's ``extra_overrides``, then the spec's own (a fine-tuning's lr over a demo's lr)."""
    system, language = split_unit(unit)
    overrides = (overrides_string(spec.get("overrides")), *overrides)
    fields = {
        "python": grid.get("python") or sys.executable,
        "hparams": checkout_path(spec.get("train_hparams") or grid["train_hparams"]),
        "recipes": REPO / "recipes",
        "data_folder": grid["data_folder"],
        "system": system,
        "protocol": get_protocol(grid.get("protocol")).name,
        "language": f"--language={language}" if language else "",
        "configuration": configuration,
        # The system pooled with this one (pool_with: {system: other}; hparams/attackers.yaml), else empty.
        "pool_with": (grid.get("pool_with") or {}).get(system, ""),
        "output_folder": folder,
        "overrides": " ".join(part for part in overrides if part),
        "extra": overrides_string(
            {**(grid.get("extra_overrides") or {}), **(spec.get("extra_overrides") or {})}
        ),
    }
    return format_command(template, fields)


def step_command(grid, system: str, config: str, seed: int | None, step: str) -> tuple[list[str], str]:
    """A run's ``train`` or ``eval`` command, and the grid's variables as its processes get them
    (``NAME=value ...``, written before the logged command so that it reruns as it ran); a ``model_of``
    configuration evaluates that cell's export."""
    spec = grid["configurations"][config] or {}
    model = cell_folder(grid, system, spec["model_of"], seed) / "export" if spec.get("model_of") else None
    command = unit_command(
        grid,
        config_setting(grid, config, f"{step}_command"),
        system,
        cell_folder(grid, system, config, seed),
        spec,
        f"--seed={seed}" if seed is not None else "",
        f"--eval_model_folder={model.as_posix()}" if model else "",
        configuration=config,
    )
    environment = run_environment(grid)
    assignments = "".join(
        f"{name}={shlex.quote(environment[name])} " for name in grid.get("environment") or {}
    )
    return command, assignments


def pending_steps(grid, system: str, config: str, seed: int | None = None) -> list[str]:
    """What a run still has to do: ``[]``, ``["eval"]`` or ``["train", "eval"]``."""
    folder = cell_folder(grid, system, config, seed)
    status = _status(folder)
    if status.get("eval") == "done" and (folder / EVAL_SUBFOLDER / "results.json").is_file():
        return []
    trains = status.get("train") != "done" and config_setting(grid, config, "train_command")
    return ["train", "eval"] if trains else ["eval"]


def run_step(grid, system: str, config: str, seed: int | None, step: str) -> str | None:
    """Run one step of a run (here, or in a SLURM job), its output in the run's ``grid_<step>.log`` and its
    progress lines on the console; None when it succeeded, else why it failed."""
    folder = cell_folder(grid, system, config, seed)
    folder.mkdir(parents=True, exist_ok=True)
    command, assignments = step_command(grid, system, config, seed, step)
    prefix = f"{split_unit(system)[0]}/{config} {step}"
    logger.info("%s: %s%s", prefix, assignments, shlex.join(command))
    log_path = folder / f"grid_{step}.log"
    error = ""  # the last line a recipe printed as its error
    with open(log_path, "a", encoding="utf-8") as log:
        log.write(f"$ {assignments}{shlex.join(command)}\n")
        log.flush()
        process = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            bufsize=1,
            env=run_environment(grid),
            preexec_fn=_die_with_this_process(),
        )
        with process.stdout:
            for line in process.stdout:
                log.write(line)
                if ".py: error: " in line:
                    error = line.strip()
                if line.startswith(PROGRESS_PREFIX):
                    log.flush()
                    print(f"{prefix}: {line[len(PROGRESS_PREFIX) :].rstrip()}", flush=True)
    returncode = process.wait()
    if returncode != 0:
        return f"{step} failed (exit {returncode}){f': {error}' if error else ''}, see {log_path}"
    status = {**_status(folder), step: "done"}
    (folder / STATUS_FILE).write_text(json.dumps(status, indent=2) + "\n", encoding="utf-8")
    return None


def run_label(system: str, config: str, seed: int | None) -> str:
    return f"{system}/{config}" + (f"/seed{seed}" if seed is not None else "")


def run_all(grid) -> list[str]:
    """Every run's pending steps with the grid's ``launcher``: the trainings, then the evaluations of the
    runs whose training did not fail (a ``model_of`` run's model is trained by then); with
    ``stop_on_error`` a failure starts nothing more. The runs that failed."""
    launch = run_on_slurm if grid.get("launcher") == "slurm" else run_here
    steps = {run: pending_steps(grid, *run) for run in grid_runs(grid)}
    for run in (run for run, pending in steps.items() if not pending):
        logger.info("%s: skipped", run_label(*run))  # trained and evaluated by an earlier start
    failed: list[str] = []
    for step in ("train", "eval"):
        batch = [run for run, pending in steps.items() if step in pending and run_label(*run) not in failed]
        if not batch or (failed and grid.get("stop_on_error")):
            continue
        for run, failure in launch(grid, batch, step, failed):
            logger.info("%s %s: %s", run_label(*run), step, "failed" if failure else "done")
            if failure:
                logger.error("%s: %s", run_label(*run), failure)
                failed.append(run_label(*run))
    return failed


def run_here(grid, batch, step: str, failed: list[str]):
    """Each run's ``step`` as processes of this machine, ``parallel`` at a time: ``(run, failure)`` as each ends."""

    def run(one):
        if not (failed and grid.get("stop_on_error")):
            return one, run_step(grid, *one, step)

    with ThreadPoolExecutor(grid.get("parallel") or 1) as pool:
        for done in as_completed([pool.submit(run, one) for one in batch]):
            if done.result():  # None: not started, another run failed first
                yield done.result()


class SlurmSubmitError(UserError, RuntimeError):
    """sbatch refused the grid's jobs: a partition, account or resource the cluster does not have."""


def run_on_slurm(grid, batch, step: str, failed: list[str]):
    """Each run's ``step`` as a job of one SLURM array: ``(run, failure)`` as each job ends."""
    from submitit.core.utils import FailedJobError, UncompletedJobError
    from submitit.helpers import as_completed as jobs_completed

    executor = slurm_executor(Path(grid["output_folder"]) / SLURM_FOLDER / "%j", grid, "segreconcat-grid")
    try:
        with executor.batch():
            jobs = {executor.submit(run_step, grid, *run, step): run for run in batch}
    except FailedJobError as error:  # sbatch's own message
        raise SlurmSubmitError(
            f"sbatch refused the grid's {step} jobs: {'; '.join(str(error).splitlines())} "
            f"(fix the grid's slurm_* keys: {slurm_parameters(grid)})"
        ) from None
    logger.info("%s: %d job(s) submitted, logs in %s", step, len(jobs), executor.folder.parent)
    try:
        for job in jobs_completed(list(jobs), poll_frequency=5):
            try:
                failure = job.result()
            except (UncompletedJobError, FailedJobError):  # killed, cancelled, out of time or memory
                failure = f"{step} did not finish"
            if failure:  # what SLURM says of the job (CANCELLED, TIMEOUT, ...) and its own log
                failure += f" (job {job.job_id} {_final_state(job)}, see {job.paths.stderr})"
            yield jobs[job], failure
    except KeyboardInterrupt:
        for job in jobs:
            job.cancel(check=False)
        raise


def _final_state(job, seconds: float = 60) -> str:
    """What SLURM says of a job in the end (CANCELLED, TIMEOUT, ...)."""
    deadline = time.monotonic() + seconds
    while not job.watcher.is_done(job.job_id, mode="force") and time.monotonic() < deadline:
        time.sleep(2)
    return job.state


def describe_runs(grid) -> list[str]:
    """What :func:`run_all` would run, one line per step in its order (``--dry_run``): nothing is run or written."""
    lines = []
    if grid.get("launcher") == "slurm":
        lines.append(
            f"launcher slurm: jobs in {Path(grid['output_folder']) / SLURM_FOLDER}, {slurm_parameters(grid)}"
        )
    steps = {run: pending_steps(grid, *run) for run in grid_runs(grid)}
    lines += [f"{run_label(*run)}: finished, not run again" for run, pending in steps.items() if not pending]
    for step in ("train", "eval"):
        for run in [run for run, pending in steps.items() if step in pending]:
            command, assignments = step_command(grid, *run, step)
            lines.append(f"{run_label(*run)} {step}: {assignments}{shlex.join(command)}")
    return lines

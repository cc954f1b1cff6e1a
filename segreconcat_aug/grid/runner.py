"""Running the grid's cells: each run is ``train_command`` then ``eval_command``, here or as SLURM jobs.

The templates come from the grid YAML, so torchrun or a cluster wrapper can be used; each run
gets ``--output_folder=<output_folder>/<system>/<configuration>[/seed<N>]``. Finished steps are
recorded in the run's ``grid_status.json`` (:data:`STATUS_FILE`): a rerun skips evaluated runs and
does not retrain trained ones, and a failed step runs again. A step's output goes to
``grid_train.log`` / ``grid_eval.log`` in the run's folder. The processes get the grid's
``environment`` for the variables not already set (:func:`~segreconcat_aug.grid.plan.run_environment`).

``launcher: local`` (:func:`run_here`) runs ``parallel`` runs at a time as subprocesses of this one,
their progress lines on the console. On Linux each child asks the kernel for SIGTERM when the
runner dies (``prctl(PR_SET_PDEATHSIG)``), so a ``kill -9`` of ``run_grid.py`` leaves no training
running on; elsewhere they run on (and a rerun's ``train.py`` refuses the folder they hold, as
``train.py`` and ``evaluate.py`` lock their folders).

``launcher: slurm`` (:func:`run_on_slurm`) submits each step as a SLURM job through submitit, with the
grid's ``slurm_*`` resources: one job array of the trainings, then one of the evaluations (of the runs
trained), then the same for the runs that evaluate another configuration's model. The jobs' own logs are
in ``<output_folder>/slurm_jobs/<job id>/``; a job cancelled, killed or out of time is a failed step.
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
from pathlib import Path

from tqdm import tqdm

from ..cli import PROGRESS_PREFIX, REPO, checkout_path
from ..data.protocols import get_protocol
from ..errors import UserError
from ..evaluation.system import EVAL_SUBFOLDER
from .plan import cell_folder, grid_runs, run_environment, slurm_parameters, split_unit

logger = logging.getLogger(__name__)
STATUS_FILE = "grid_status.json"
#: The grid runner's lock in its output folder (segreconcat_aug.data.folder_lock): one runner per grid.
GRID_LOCK = ".segreconcat-grid.lock"
#: Where ``launcher: slurm`` keeps its jobs' scripts, pickles and logs, in the grid's output folder.
SLURM_FOLDER = "slurm_jobs"
_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _death_signal():
    """A ``preexec_fn`` that makes the child get SIGTERM when this process dies (Linux), or None.

    Resolved here, in the parent: the child runs only the prctl call and a pid check between fork and
    exec (no import, no lock, no allocation worth the name). The signal goes when the thread that
    started the child ends; :func:`run_logged` waits for its child in that thread.
    """
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


def _mark(folder: Path, step: str) -> None:
    status = _status(folder)
    status[step] = "done"
    (folder / STATUS_FILE).write_text(json.dumps(status, indent=2) + "\n", encoding="utf-8")


def format_command(template: str, fields: dict) -> list[str]:
    """Fill a command template and split it into arguments (no shell).

    A ``--key=value`` given again later (the configuration's overrides, then ``extra_overrides``,
    over the template's own) replaces the earlier one: the recipes refuse a key given twice.

    >>> format_command("{python} x.py --a={a} {extra}", {"python": "py", "a": "1 2", "extra": ""})
    ['py', 'x.py', '--a=1 2']
    >>> format_command("x.py --b=False {extra}", {"extra": "--b=True --c=1"})
    ['x.py', '--b=True', '--c=1']
    """
    quoted = {
        key: shlex.quote(str(value)) if key not in ("overrides", "extra", "language") else value
        for key, value in fields.items()
    }
    arguments = shlex.split(template.format(**quoted))
    last = {_option_key(argument): position for position, argument in enumerate(arguments)}
    return [
        argument
        for position, argument in enumerate(arguments)
        if _option_key(argument) is None or last[_option_key(argument)] == position
    ]


def _option_key(argument: str) -> str | None:
    return argument[2:].split("=", 1)[0] if argument.startswith("--") and "=" in argument else None


def overrides_string(value) -> str:
    """Command-line overrides from a string (kept) or a mapping (``{key: value}`` -> ``--key=value``).

    The mapping form is what works from the command line, where SpeechBrain's parser splits any value
    containing ``--``.

    >>> overrides_string({"device": "cuda:0", "channels": [16, 16]})
    "--device=cuda:0 '--channels=[16,16]'"
    >>> overrides_string("--mode=none")
    '--mode=none'
    """
    if not value:
        return ""
    if isinstance(value, str):
        return value
    parts = []
    for key, item in value.items():
        token = item if isinstance(item, str) else json.dumps(item, separators=(",", ":"))
        parts.append(shlex.quote(f"--{key}={token}"))
    return " ".join(parts)


def run_logged(command: list[str], log, prefix: str = "", env: dict | None = None, errors=None) -> int:
    """Run ``command`` (in ``env``, default this process's) with its output going to ``log``; its
    progress lines are also shown on the console.

    Progress lines are the ones :func:`segreconcat_aug.cli.report_progress` prints (one per
    training epoch: losses, error rate, speed, time left). ``errors``: a list that gets the recipe's
    one-line user errors (``<recipe>.py: error: ...``).
    """
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        bufsize=1,
        env=env,
        preexec_fn=_death_signal(),
    )
    with process.stdout:
        for line in process.stdout:
            log.write(line)
            if errors is not None and ".py: error: " in line:
                errors.append(line.strip())
            if line.startswith(PROGRESS_PREFIX):
                log.flush()
                tqdm.write(f"{prefix}: {line[len(PROGRESS_PREFIX) :].rstrip()}", file=sys.stdout)
    return process.wait()


def config_setting(grid, config: str, key: str):
    """A configuration's own ``train_hparams``, ``train_command`` or ``eval_command``, else the grid's.

    A configuration with ``train_command: ""`` trains nothing: its evaluation reads a given model
    (e.g. ``--eval_model_folder=<pretrained model>``, hparams/attackers.yaml's ``pretrained``).

    >>> grid = {"train_command": "train", "configurations": {"a": {}, "b": {"train_command": ""}}}
    >>> config_setting(grid, "a", "train_command"), config_setting(grid, "b", "train_command")
    ('train', '')
    """
    spec = grid["configurations"][config] or {}
    if key == "train_command" and spec.get("model_of"):
        return ""  # it evaluates another configuration's model
    return spec[key] if key in spec and spec[key] is not None else grid[key]


def model_of_override(grid, system: str, config: str, seed: int | None) -> str:
    """``--eval_model_folder=<that cell's export>`` for a configuration with ``model_of``, else ``""``.

    ``model_of: <configuration>``: this configuration trains nothing and evaluates the model that
    configuration trained (same unit and seed) with its own overrides, e.g. the same fine-tuned
    attacker scored with AS-norm (hparams/attackers.yaml).

    >>> grid = {"output_folder": "g", "configurations": {"ft": {}, "ft_asnorm": {"model_of": "ft"}}}
    >>> model_of_override(grid, "B4", "ft_asnorm", None), model_of_override(grid, "B4", "ft", None)
    ('--eval_model_folder=g/B4/ft/export', '')
    """
    source = (grid["configurations"][config] or {}).get("model_of")
    if not source:
        return ""
    return f"--eval_model_folder={(cell_folder(grid, system, source, seed) / 'export').as_posix()}"


def command_fields(
    grid,
    system: str,
    output_folder,
    *,
    hparams,
    overrides: str = "",
    extra: str = "",
    language=None,
    configuration="",
) -> dict:
    """The fields a grid's ``train_command`` / ``eval_command`` template is filled with (:func:`format_command`)."""
    return {
        "python": grid.get("python") or sys.executable,
        "hparams": checkout_path(hparams),
        "recipes": REPO / "recipes",
        "data_folder": grid["data_folder"],
        "system": system,
        "protocol": get_protocol(grid.get("protocol")).name,
        "language": f"--language={language}" if language else "",
        "configuration": configuration,
        # The system pooled with this one (pool_with: {system: other}; hparams/attackers.yaml), else empty.
        "pool_with": (grid.get("pool_with") or {}).get(system, ""),
        "output_folder": output_folder,
        "overrides": overrides,
        "extra": extra,
    }


def run_waves(grid) -> list[list[tuple[str, str, int | None]]]:
    """The grid's runs in two waves: the runs that evaluate another configuration's model (``model_of``)
    after all the others."""
    every = list(grid_runs(grid))
    evaluates_another = [bool((grid["configurations"][run[1]] or {}).get("model_of")) for run in every]
    return [
        [run for run, later in zip(every, evaluates_another) if not later],
        [run for run, later in zip(every, evaluates_another) if later],
    ]


def pending_steps(grid, system: str, config: str, seed: int | None = None) -> list[str]:
    """What a run still has to do: ``[]`` (evaluated), ``["eval"]`` (trained, or nothing to train: a
    configuration that evaluates a given model) or ``["train", "eval"]``."""
    folder = cell_folder(grid, system, config, seed)
    status = _status(folder)
    if status.get("eval") == "done" and (folder / EVAL_SUBFOLDER / "results.json").is_file():
        return []
    trains = status.get("train") != "done" and config_setting(grid, config, "train_command")
    return ["train", "eval"] if trains else ["eval"]


def step_command(grid, system: str, config: str, seed: int | None, step: str) -> tuple[list[str], str]:
    """A run's ``train`` or ``eval`` command, and the grid's variables as its processes get them
    (``NAME=value ...``, written before the logged command so that it reruns as it ran)."""
    model_override = model_of_override(grid, system, config, seed)
    folder = cell_folder(grid, system, config, seed)
    system, language = split_unit(system)
    spec = grid["configurations"][config] or {}
    fields = command_fields(
        grid,
        system,
        folder,
        hparams=config_setting(grid, config, "train_hparams"),
        overrides=" ".join(
            part
            for part in (
                overrides_string(spec.get("overrides")),
                f"--seed={seed}" if seed is not None else "",
                model_override,
            )
            if part
        ),
        # The grid's extra_overrides, then the configuration's own (a fine-tuning's lr over a demo's lr).
        extra=overrides_string(
            {**(grid.get("extra_overrides") or {}), **(spec.get("extra_overrides") or {})}
        ),
        language=language,
        configuration=config,
    )
    environment = run_environment(grid)
    assignments = "".join(
        f"{name}={shlex.quote(environment[name])} " for name in grid.get("environment") or {}
    )
    return format_command(config_setting(grid, config, f"{step}_command"), fields), assignments


def run_step(grid, system: str, config: str, seed: int | None, step: str) -> str | None:
    """Run one step of a run (here, or in a SLURM job); None when it succeeded, else why it failed."""
    folder = cell_folder(grid, system, config, seed)
    folder.mkdir(parents=True, exist_ok=True)
    command, assignments = step_command(grid, system, config, seed, step)
    where = f"{split_unit(system)[0]}/{config}"
    logger.info("%s %s: %s%s", where, step, assignments, shlex.join(command))
    log_path = folder / f"grid_{step}.log"
    with open(log_path, "a", encoding="utf-8") as log:
        log.write(f"$ {assignments}{shlex.join(command)}\n")
        log.flush()
        errors: list[str] = []
        returncode = run_logged(
            command, log, prefix=f"{where} {step}", env=run_environment(grid), errors=errors
        )
    if returncode != 0:
        return f"{step} failed (exit {returncode}){f': {errors[-1]}' if errors else ''}, see {log_path}"
    _mark(folder, step)
    return None


def run_cell(grid, system: str, config: str, seed: int | None = None) -> str:
    """Train and evaluate one cell (one seed) unless done; returns ``"skipped"``, ``"done"`` or ``"failed"``."""
    steps = pending_steps(grid, system, config, seed)
    for step in steps:
        failure = run_step(grid, system, config, seed, step)
        if failure:
            logger.error("%s/%s: %s", split_unit(system)[0], config, failure)
            return "failed"
    return "done" if steps else "skipped"


def run_label(system: str, config: str, seed: int | None) -> str:
    return f"{system}/{config}" + (f"/seed{seed}" if seed is not None else "")


def run_all(grid) -> list[str]:
    """Train and evaluate every run of the grid with its ``launcher``; the runs that failed.

    With ``stop_on_error`` a failure starts no further run (those started finish).
    """
    return run_on_slurm(grid) if grid.get("launcher") == "slurm" else run_here(grid)


def run_here(grid) -> list[str]:
    """Every run as processes of this machine, ``parallel`` at a time.

    Each run is its own processes (one training, then one evaluation), so runs at once change
    nothing they compute; ``parallel: 2`` fills two cores with runs of one math thread each.
    """
    from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

    waves = run_waves(grid)
    parallel = max(1, int(grid.get("parallel") or 1))
    failed: list[str] = []
    with (
        tqdm(total=sum(map(len, waves)), desc="grid", unit="run") as bar,
        ThreadPoolExecutor(parallel) as pool,
    ):
        for runs in waves:
            pending: dict = {}
            while runs or pending:
                while runs and len(pending) < parallel and not (failed and grid.get("stop_on_error")):
                    run = runs.pop(0)
                    pending[pool.submit(run_cell, grid, *run)] = run_label(*run)
                if not pending:
                    break
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for future in done:
                    where = pending.pop(future)
                    outcome = future.result()
                    logger.info("%s: %s", where, outcome)
                    bar.update()
                    if outcome == "failed":
                        failed.append(where)
    return failed


class SlurmSubmitError(UserError, RuntimeError):
    """sbatch refused the grid's jobs: a partition, account or resource the cluster does not have."""


def slurm_executor(grid):
    """submitit's SLURM executor with the grid's ``slurm_*`` resources, its jobs in :data:`SLURM_FOLDER`."""
    import submitit

    executor = submitit.AutoExecutor(
        folder=Path(grid["output_folder"]) / SLURM_FOLDER / "%j", cluster="slurm"
    )
    executor.update_parameters(name="segreconcat-grid", **slurm_parameters(grid))
    return executor


def run_on_slurm(grid) -> list[str]:
    """Every run's steps as SLURM jobs: per wave, an array of the trainings, then one of the evaluations.

    A run whose training failed is not evaluated. Interrupted (Ctrl-C), the grid cancels its jobs.
    """
    from submitit.core.utils import FailedJobError, UncompletedJobError
    from submitit.helpers import as_completed

    executor = slurm_executor(grid)
    failed: list[str] = []
    for runs in run_waves(grid):
        steps = {run: pending_steps(grid, *run) for run in runs}
        for step in ("train", "eval"):
            batch = [run for run in runs if step in steps[run] and run_label(*run) not in failed]
            if not batch or (failed and grid.get("stop_on_error")):
                continue
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
                for job in as_completed(list(jobs), poll_frequency=5):
                    try:
                        failure = job.result()
                    except (UncompletedJobError, FailedJobError):  # killed, cancelled, out of time or memory
                        failure = f"{step} did not finish"
                    if failure:  # what SLURM says of the job (CANCELLED, TIMEOUT, ...) and its own log
                        failure += f" (job {job.job_id} {_final_state(job)}, see {job.paths.stderr})"
                    where = run_label(*jobs[job])
                    logger.info(
                        "%s %s (job %s): %s", where, step, job.job_id, "failed" if failure else "done"
                    )
                    if failure:
                        logger.error("%s: %s", where, failure)
                        failed.append(where)
            except KeyboardInterrupt:
                for job in jobs:
                    job.cancel(check=False)
                raise
    return failed


def _final_state(job, seconds: float = 60) -> str:
    """What SLURM says of a job in the end (CANCELLED, TIMEOUT, ...): a cancelled step's function may
    return before its job has ended (submitit lets SIGTERM pass and SIGKILL follows)."""
    deadline = time.monotonic() + seconds
    while not job.watcher.is_done(job.job_id, mode="force") and time.monotonic() < deadline:
        time.sleep(2)
    return job.state


def describe_runs(grid) -> list[str]:
    """What :func:`run_all` would run, one line per step (``--dry_run``): nothing is run or written."""
    lines = []
    if grid.get("launcher") == "slurm":
        lines.append(
            f"launcher slurm: jobs in {Path(grid['output_folder']) / SLURM_FOLDER}, {slurm_parameters(grid)}"
        )
    for runs in run_waves(grid):
        for run in runs:
            steps = pending_steps(grid, *run)
            for step in steps:
                command, assignments = step_command(grid, *run, step)
                lines.append(f"{run_label(*run)} {step}: {assignments}{shlex.join(command)}")
            if not steps:
                lines.append(f"{run_label(*run)}: finished, not run again")
    return lines

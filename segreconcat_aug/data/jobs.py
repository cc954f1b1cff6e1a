"""Batch jobs: shards, each written as its own file, resumable; failures, merge, inputs; SLURM job arrays.

Long per-utterance jobs (word alignment, order computation) share these pieces:

- :func:`resolve_shard` turns ``--shard i/n`` (0-based ``i``) and/or torchrun's ``RANK`` /
  ``WORLD_SIZE`` into a :class:`Shard`; ``Shard.owns(id)`` picks ids by a stable hash, so a
  shard's share does not depend on the input order.
- A shard is its own file (:func:`shard_path`): ``<folder>/part-002-of-008.jsonl`` when the output is a
  folder (``load_alignments(folder)`` then reads all parts, no merge needed), or ``x.part-002-of-008.jsonl``
  next to an ``x.jsonl`` target (one shard writes ``x.jsonl``).
- :class:`Job` runs one shard. It appends one JSON object per line (key ``"id"``), flushed, to
  ``<shard file>.partial`` and, when the shard is done, writes the shard file whole (its earlier lines,
  then this run's) and renames it into place: readers see finished shards only. A run stopped before the
  end leaves its ``.partial`` for the next run to resume; the next run skips ids already in any file of the
  output (so changing the shard count never duplicates an id). One writer per shard
  (:func:`~segreconcat_aug.data.folder_lock.lock_folder`). Failures go to ``<stem>.failures.tsv`` as
  ``<id>\\t<reason>`` lines (rewritten each run: failed ids are retried; no file when nothing failed),
  counted by kind; a tqdm bar shows utterances/s and the ETA.
- :func:`merge_jsonl` concatenates shards into one file, refusing two different lines for an id.
- :func:`run_array` runs the shards that have work left as one SLURM job array (submitit), each task
  the same command with its ``--shard=k/n``.
- :func:`read_inputs` yields :class:`JobItem` ``(id, source, text, problem)`` from a Kaldi
  folder or a SpeechBrain CSV manifest (columns ``ID``, ``wav``, optional ``text``), and
  :func:`read_item_audio` reads one item's audio or raises :class:`ItemError` whose ``kind``
  (``unreadable``, ``sample_rate``, ``empty_audio``) :meth:`Job.fail` counts.

Example
-------
>>> import tempfile, pathlib, json
>>> out = pathlib.Path(tempfile.mkdtemp()) / "cache"
>>> items = [JobItem(f"u{k}", f"/audio/u{k}.wav", None) for k in range(6)]
>>> for spec in ("0/2", "1/2"):
...     with Job(out, shard=resolve_shard(spec, env={}), progress=False) as job:
...         for item in job.track(job.pending(items)):
...             if item.id == "u3":
...                 job.fail(item.id, "cannot read audio", kind="unreadable")
...             else:
...                 job.write(item.id, json.dumps({"id": item.id, "n": 1}))
>>> sorted(p.name for p in out.glob("part-*"))  # a failures file only for the shard where u3 failed
['part-000-of-002.failures.tsv', 'part-000-of-002.jsonl', 'part-001-of-002.jsonl']
>>> report = merge_jsonl(shard_files(out), out.parent / "all.jsonl")
>>> report.lines, sorted(read_failures(out))
(5, ['u3'])

A rerun skips what is done (here it retries ``u3`` only):

>>> with Job(out, shard=resolve_shard("0/1", env={}), progress=False) as job:
...     [item.id for item in job.pending(items)]
['u3']
"""

from __future__ import annotations

import csv
import json
import logging
import os
import re
import shutil
import subprocess
import zlib
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from ..errors import MissingInputError, UserError
from .folder_lock import FolderInUseError, lock_folder
from .jsonl_files import (
    PARTIAL,
    RepeatedIds,
    _is_folder_target,
    cache_files,
    shard_files,
    truncate_partial_tail,
)
from .kaldi import KaldiFormatError, PipeCommand, load_kaldi_folder
from .vpac import log_completion, sibling_original

logger = logging.getLogger(__name__)

__all__ = [
    "Job",
    "JobError",
    "JobItem",
    "MergeReport",
    "Shard",
    "default_device",
    "jsonl_ids",
    "merge_jsonl",
    "ItemError",
    "read_failures",
    "read_inputs",
    "read_item_audio",
    "resolve_shard",
    "array_shards",
    "run_array",
    "task_arguments",
    "shard_path",
    "written_ids",
]


class JobError(UserError, RuntimeError):
    """A job cannot start or a merge cannot proceed; the message names the file and the fix."""


class ShardError(UserError, ValueError):
    """A ``--shard`` that is not ``i/n`` with ``0 <= i < n``."""


# --------------------------------------------------------------------------- shards


@dataclass(frozen=True)
class Shard:
    """Shard ``index`` of ``count`` (0-based).

    >>> Shard(1, 4).owns("19-198-0001") in (True, False)
    True
    >>> sum(Shard(k, 3).owns("x") for k in range(3))  # each id in exactly one shard
    1
    """

    index: int = 0
    count: int = 1

    def __post_init__(self):
        if self.count < 1 or not 0 <= self.index < self.count:
            raise ShardError(
                f"--shard {self.index}/{self.count}: need 0 <= i < n in i/n, e.g. 0/{max(self.count, 2)}"
            )

    def owns(self, utt_id: str) -> bool:
        """Whether this shard processes ``utt_id``."""
        return self.count == 1 or shard_of(utt_id, self.count) == self.index

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def shard_of(utt_id: str, count: int) -> int:
    """Which of ``count`` shards processes ``utt_id`` (a stable CRC32 hash of the id)."""
    return zlib.crc32(utt_id.encode("utf-8")) % count


def resolve_shard(spec: str | None = None, *, env=None) -> Shard:
    """The shard of this process from ``--shard i/n`` and torchrun's ``RANK``/``WORLD_SIZE``.

    Both combine: ``--shard 1/4`` on a torchrun job of 8 ranks makes rank ``r`` shard
    ``1 * 8 + r`` of 32 (four machines, eight GPUs each, one command per machine).

    >>> resolve_shard("2/4", env={})
    Shard(index=2, count=4)
    >>> resolve_shard(None, env={"RANK": "3", "WORLD_SIZE": "8"})
    Shard(index=3, count=8)
    >>> resolve_shard("1/4", env={"RANK": "3", "WORLD_SIZE": "8"})
    Shard(index=11, count=32)
    """
    env = os.environ if env is None else env
    index, count = 0, 1
    if spec not in (None, "", "None"):
        match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", str(spec))
        if not match:
            raise ShardError(f"--shard {spec!r}: expected 'i/n' with 0 <= i < n, e.g. 0/4")
        index, count = int(match.group(1)), int(match.group(2))
        Shard(index, count)  # validates
    world = int(env.get("WORLD_SIZE", "1") or 1)
    rank = int(env.get("RANK", "0") or 0)
    return Shard(index * world + rank, count * world)


def default_device(env=None) -> str:
    """``cuda:<LOCAL_RANK>`` when CUDA is available (one GPU per torchrun rank), else ``cpu``."""
    import torch

    env = os.environ if env is None else env
    if torch.cuda.is_available():
        return f"cuda:{int(env.get('LOCAL_RANK', '0') or 0) % torch.cuda.device_count()}"
    return "cpu"


def shard_path(output, shard: Shard = Shard()) -> Path:
    """The file one shard writes (see module doc).

    >>> shard_path("cache", Shard(2, 8)).as_posix()
    'cache/part-002-of-008.jsonl'
    >>> shard_path("b3.jsonl", Shard(2, 8)).as_posix(), shard_path("b3.jsonl").as_posix()
    ('b3.part-002-of-008.jsonl', 'b3.jsonl')
    """
    output = Path(output)
    part = f"part-{shard.index:03d}-of-{shard.count:03d}.jsonl"
    if _is_folder_target(output):
        return output / part
    if shard.count == 1:
        return output
    return output.with_name(f"{output.stem}.{part}")


def failures_path(path) -> Path:
    """``x.jsonl`` -> ``x.failures.tsv``."""
    path = Path(path)
    return path.with_name(f"{path.stem}.failures.tsv")


def read_failures(output) -> dict[str, str]:
    """``{id: reason}`` from every failures file of ``output`` (a folder, a file, or its parts)."""
    output = Path(output)
    files = [failures_path(p) for p in shard_files(output)]
    if not _is_folder_target(output):
        files.append(failures_path(output))
    result: dict[str, str] = {}
    for file in files:
        if file.is_file():
            for line in file.read_text(encoding="utf-8").splitlines():
                if line.strip():
                    utt, _, reason = line.partition("\t")
                    result[utt] = reason
    return result


# --------------------------------------------------------------------------- JSON Lines ids


def _line_id(line: str, key: str, where: str):
    """The ``key`` field of one JSON line; a clear error naming ``file:line`` otherwise."""
    try:
        return json.loads(line)[key]
    except (json.JSONDecodeError, KeyError, TypeError):
        raise JobError(f"{where}: not a JSON object with key {key!r}") from None


def jsonl_ids(path, *, key: str = "id") -> dict[str, int]:
    """``{id: line}`` of a JSON Lines file.

    An unterminated last line is ignored (a writer killed, or still writing). Any other malformed line or a
    duplicate id is an error naming file and line.
    """
    path = Path(path)
    if not path.exists():
        return {}
    ids: dict[str, int] = {}
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            if not line.endswith("\n"):
                break  # unterminated tail of a file still being written
            utt = _line_id(line, key, f"{path}:{number}")
            if utt in ids:
                raise JobError(f"{path}:{number}: id {utt!r} already on line {ids[utt]}")
            ids[utt] = number
    return ids


def written_ids(output, *, key: str = "id") -> set[str]:
    """The ids in any file of ``output``: its finished shards and the ``.partial`` of unfinished ones."""
    return {
        utt
        for file in cache_files(output, required=False, in_progress=True)
        for utt in jsonl_ids(file, key=key)
    }


# --------------------------------------------------------------------------- the job


class JobItem(NamedTuple):
    """One unit of work: an utterance id, its audio source, its transcript (or None).

    ``problem`` is set by :func:`read_inputs` for an entry that must not be processed
    (a refused shell pipe); :meth:`Job.track` records it as a failure instead of yielding it.
    """

    id: str
    source: str
    text: str | None = None
    problem: str | None = None


def _item_id(item) -> str:
    return item if isinstance(item, str) else item.id


class Job:
    """One shard's resumable run writing JSON Lines (see module doc).

    Parameters
    ----------
    output : path
        A folder (parts inside) or an ``x.jsonl`` file.
    shard : Shard
    key : str
        The id field of each JSON record.
    desc : str
        Progress-bar label.
    progress : bool
        Show the tqdm bar (utterances/s, ETA).
    fsync : bool
        fsync after each line (survives power loss, not only kill -9; slower).
    """

    def __init__(
        self,
        output,
        *,
        shard: Shard = Shard(),
        key: str = "id",
        desc: str = "job",
        progress: bool = True,
        fsync: bool = False,
    ):
        self.output = Path(output)
        self.shard = shard
        self.desc = desc
        self.show_progress = progress
        self.path = shard_path(self.output, shard)
        self.partial = Path(f"{self.path}{PARTIAL}")
        self.failures_path = failures_path(self.path)
        lock_name = f".{self.path.name}.lock"
        try:
            self._lock = lock_folder(self.path.parent, f"{desc} shard {shard}", name=lock_name)
        except FolderInUseError:
            holder = (self.path.parent / lock_name).read_text(encoding="utf-8").strip() or "another process"
            raise JobError(
                f"{self.path}: another process is writing this shard ({holder}): wait for it to finish, "
                "or give this one another --shard"
            ) from None
        for own in (self.path, self.partial):  # a line cut by a kill (ours: this shard is locked)
            if own.is_file():
                truncate_partial_tail(own)
        self.done = written_ids(self.output, key=key)
        self.previously_done = len(self.done)
        self._handle = open(self.partial, "a", encoding="utf-8")
        self._failures = open(self.failures_path, "w", encoding="utf-8")
        self._fsync = fsync
        self.written = 0
        self.failures: Counter = Counter()

    def pending(self, items: Iterable) -> list:
        """The items (or ids) this shard owns that are not done yet, in input order."""
        return [item for item in items if self.shard.owns(_item_id(item)) and _item_id(item) not in self.done]

    def track(self, items: Sequence, *, batch_size: int | None = None) -> Iterator:
        """Iterate ``items`` (or lists of ``batch_size``) under a progress bar.

        Items carrying a ``problem`` are recorded as failures and not yielded. The bar
        advances by each item or batch when the caller asks for the next one.
        """
        from tqdm.auto import tqdm

        logger.info(
            "%s shard %s: %d already done, %d to do -> %s",
            self.desc,
            self.shard,
            self.previously_done,
            len(items),
            self.path,
        )
        bar = tqdm(
            total=len(items),
            desc=f"{self.desc} [{self.shard}]",
            unit="utt",
            smoothing=0.05,
            disable=not self.show_progress,
        )
        ready = []
        for item in items:
            problem = getattr(item, "problem", None)
            if problem:
                self.fail(_item_id(item), problem, kind="refused")
                bar.update(1)
                continue
            ready.append(item)
            if len(ready) == (batch_size or 1):
                yield ready if batch_size else ready[0]
                bar.update(len(ready))
                ready = []
        if ready:
            yield ready
            bar.update(len(ready))
        bar.set_postfix(written=self.written, failed=self.failed)
        bar.close()

    def write(self, utt_id: str, line: str) -> None:
        """Append one JSON record (no newline inside) for ``utt_id``; an id twice is an error."""
        if utt_id in self.done:
            raise JobError(f"{self.path}: id {utt_id!r} is already written")
        if "\n" in line:
            raise ValueError("a JSON Lines record must not contain a newline")
        # One write + flush per record: a kill leaves at most one unterminated line.
        self._handle.write(line + "\n")
        self._handle.flush()
        if self._fsync:
            os.fsync(self._handle.fileno())
        self.done.add(utt_id)
        self.written += 1

    def fail(self, utt_id: str, reason, *, kind: str | None = None) -> None:
        """Record a failure: ``<id>\\t<reason>`` in the failures file, counted by ``kind``.

        ``reason`` may be an exception; its ``kind`` attribute (:class:`ItemError`) or its
        class name is then the default kind.
        """
        if kind is None:
            kind = getattr(reason, "kind", None) or (
                type(reason).__name__ if isinstance(reason, BaseException) else "error"
            )
        text = " ".join(str(reason).split()) or kind
        self._failures.write(f"{utt_id}\t{text}\n")
        self._failures.flush()
        self.failures[kind] += 1
        logger.warning("%s: %s failed (%s): %s", self.desc, utt_id, kind, text)

    @property
    def failed(self) -> int:
        return sum(self.failures.values())

    def summary(self) -> str:
        """One line: written, skipped, failures by kind, where they are."""
        kinds = ", ".join(f"{k}: {n}" for k, n in sorted(self.failures.items()))
        text = f"{self.desc} shard {self.shard}: {self.written} written, {self.previously_done} already done"
        text += f", {self.failed} failed" + (f" ({kinds}) -> {self.failures_path}" if self.failed else "")
        return text

    def exit_status(self, allow_failures: bool = False) -> int:
        """0 when nothing failed (or failures are allowed), else 1."""
        return 0 if allow_failures or not self.failed else 1

    def close(self, finished: bool = True) -> None:
        """Close; a ``finished`` shard's file is written whole and renamed into place, an unfinished one's
        lines stay in its ``.partial`` for the next run."""
        if self._handle.closed:
            return
        self._handle.close()
        self._failures.close()
        if self.failures_path.stat().st_size == 0:
            self.failures_path.unlink()
        if self.partial.stat().st_size == 0:
            self.partial.unlink()
        elif finished:
            temporary = Path(f"{self.path}.tmp")
            with open(temporary, "wb") as out:
                for file in (self.path, self.partial):
                    if file.is_file():
                        with open(file, "rb") as lines:
                            shutil.copyfileobj(lines, out)
                if self._fsync:
                    out.flush()
                    os.fsync(out.fileno())
            os.replace(temporary, self.path)
            self.partial.unlink()
        self._lock.close()

    def __enter__(self):
        return self

    def __exit__(self, error_type, *exc):
        self.close(finished=error_type is None)


# --------------------------------------------------------------------------- merge


class MergeReport(NamedTuple):
    """What :func:`merge_jsonl` did."""

    output: Path
    lines: int
    per_file: dict


def merge_jsonl(inputs: Iterable, output, *, key: str = "id", expected_ids=None) -> MergeReport:
    """Concatenate JSON Lines shards into ``output``, each id once.

    The same line twice (``output`` itself among the inputs, or a part merged before) is written once;
    two different lines for an id are refused. An unterminated last line is refused (finish or rerun that
    shard first). ``expected_ids`` (optional) makes missing ids an error too. The output is written to a
    temporary file and renamed, so it is never half-merged.
    """
    output = Path(output)
    inputs = [Path(p) for p in inputs]
    if not inputs:
        raise JobError(f"{output}: no shard files to merge")
    repeated = RepeatedIds(JobError)
    per_file: dict[str, int] = {}
    temporary = output.with_name(output.name + ".merging")
    output.parent.mkdir(parents=True, exist_ok=True)
    try:
        with open(temporary, "w", encoding="utf-8") as out:
            for file in inputs:
                per_file[str(file)] = 0
                with open(file, encoding="utf-8") as handle:
                    for number, line in enumerate(handle, start=1):
                        if not line.strip():
                            continue
                        if not line.endswith("\n"):
                            raise JobError(
                                f"{file}:{number}: unterminated last line (is this shard still running "
                                "or was it killed? rerun it to completion first)"
                            )
                        if not repeated.is_repeat(
                            _line_id(line, key, f"{file}:{number}"), f"{file}:{number}", line
                        ):
                            out.write(line)
                            per_file[str(file)] += 1
        merged = sum(per_file.values())
        if expected_ids is not None:
            missing = [utt for utt in expected_ids if utt not in repeated]
            if missing:
                raise JobError(f"{output}: {len(missing)} expected id(s) missing, first: {missing[:5]}")
        os.replace(temporary, output)
    finally:
        temporary.unlink(missing_ok=True)
    return MergeReport(output, merged, per_file)


# --------------------------------------------------------------------------- SLURM job arrays

#: submitit's cluster for ``--launcher=slurm`` (its AutoExecutor would pick SLURM by itself whenever ``srun``
#: is on PATH; naming it keeps the choice explicit). Tests set ``"local"``: the same array, run here.
ARRAY_CLUSTER = "slurm"
#: The YAML keys of a job array's resources, and submitit's names for them.
SLURM_KEYS = {
    "slurm_partition": "slurm_partition",
    "slurm_gpus_per_node": "gpus_per_node",
    "slurm_cpus_per_task": "cpus_per_task",
    "slurm_mem_gb": "mem_gb",
    "slurm_time_min": "timeout_min",
    "slurm_array_parallelism": "slurm_array_parallelism",
    "slurm_additional_parameters": "slurm_additional_parameters",
}


def array_shards(hparams) -> int | None:
    """``shards`` when ``launcher: slurm`` asks for a job array; None for a run here (``launcher: local``)."""
    launcher, shards = hparams.get("launcher", "local"), hparams.get("shards")
    if launcher not in ("local", "slurm"):
        raise ShardError(
            f"--launcher={launcher!r}: expected local (this process) or slurm (a SLURM job array)"
        )
    if launcher == "local":
        if shards is not None:
            raise ShardError(
                f"--shards={shards} is the size of a --launcher=slurm job array; here give --shard=i/n (or torchrun)"
            )
        return None
    if isinstance(shards, bool) or not isinstance(shards, int) or shards < 1:
        raise ShardError(
            f"--shards={shards!r}: --launcher=slurm needs the number of array tasks, e.g. --shards=8"
        )
    if hparams.get("shard") not in (None, "", "None"):
        raise ShardError(
            "--shard=i/n runs one shard here; --launcher=slurm runs all --shards: give one of them"
        )
    return shards


def task_arguments(argv: list[str]) -> list[str]:
    """A recipe's arguments for one array task: its own, run here (``--launcher=local``, no ``--shards``)."""
    kept, skip = [], False
    for arg in argv:
        if not skip and arg.split("=", 1)[0] not in ("--launcher", "--shards"):
            kept.append(arg)
        skip = arg in ("--launcher", "--shards")  # the value follows as its own argument
    return [*kept, "--launcher=local", "--shards=null"]


def run_command(command: list[str], cwd: str) -> int:
    """One array task: the command's exit status (its output goes to the task's log)."""
    return subprocess.run(command, cwd=cwd, check=False).returncode


def run_array(
    command: list[str], output, ids: Iterable[str], *, shards: int, hparams: dict, name: str
) -> int:
    """Run ``command --shard=k/<shards>`` for each shard ``k`` with work left, as one job array; wait for it.

    Work left: an id of ``ids`` the shard owns that no file of ``output`` holds (failures are retried, as a
    local rerun does). The tasks' logs go to ``<output>.submitit/``. Returns 0 when every task exited 0,
    else 1 (each shard's failures are in its ``*.failures.tsv``; a task that died left its ``.partial``).
    """
    try:
        import submitit
    except ImportError:
        raise JobError("--launcher=slurm submits through submitit: pip install submitit") from None
    done = written_ids(output)
    todo = {shard_of(utt, shards) for utt in ids if utt not in done}
    if not todo:
        logger.info("%s: every shard of %d is done; nothing to submit", output, shards)
        return 0
    executor = submitit.AutoExecutor(folder=f"{output}.submitit", cluster=ARRAY_CLUSTER)
    resources = {SLURM_KEYS[key]: hparams[key] for key in SLURM_KEYS if hparams.get(key) is not None}
    executor.update_parameters(name=name, **resources)
    tasks = [[*command, f"--shard={k}/{shards}"] for k in sorted(todo)]
    jobs = executor.map_array(run_command, tasks, [os.getcwd()] * len(tasks))
    logger.info(
        "%s: %d of %d shard(s) submitted as job(s) %s; waiting (logs in %s.submitit)",
        name,
        len(jobs),
        shards,
        ", ".join(job.job_id for job in jobs),
        output,
    )
    status = 0
    for task, job in zip(tasks, jobs):
        try:
            code = job.result()
        except (submitit.core.utils.FailedJobError, submitit.core.utils.UncompletedJobError) as err:
            logger.error("%s: task %s did not finish: %s", name, job.job_id, str(err).splitlines()[0])
            code = 1
        status = max(status, int(code != 0))
        logger.info("%s: %s exited %s", job.job_id, task[-1], code)
    return status


# --------------------------------------------------------------------------- inputs


class ItemError(RuntimeError):
    """One item cannot be processed; ``kind`` names the failure class for the counts."""

    def __init__(self, message: str, kind: str):
        super().__init__(message)
        self.kind = kind


def read_item_audio(item: JobItem, *, resample: bool = False, sample_rate: int = 16000):
    """The item's audio as 16 kHz mono float32, or :class:`ItemError` with a ``kind``.

    Kinds: ``unreadable`` (missing file, bad format, failing pipe), ``sample_rate``
    (another rate and ``resample`` off), ``empty_audio`` (no samples), ``nonfinite_audio``
    (NaN or infinite samples: an aligner or strategy would give meaningless times or orders).
    Every job that reads audio (each aligner backend, the order computation) reads it here.
    """
    import numpy as np

    from .audio import AudioReadError, read_audio

    try:
        audio = read_audio(item.source, sample_rate=sample_rate, resample=resample)
    except AudioReadError as err:
        kind = "sample_rate" if "sample rate" in str(err) else "unreadable"
        raise ItemError(f"{item.id}: {err}", kind) from err
    if len(audio) == 0:
        raise ItemError(f"{item.id}: {item.source}: empty audio (0 samples)", "empty_audio")
    bad = np.count_nonzero(~np.isfinite(audio))
    if bad:
        raise ItemError(f"{item.id}: {item.source}: {bad} NaN or infinite samples", "nonfinite_audio")
    return audio


def _csv_rows(path: Path):
    with open(path, encoding="utf-8", newline="") as handle:
        reader = csv.DictReader(handle)
        fields = reader.fieldnames or []
        for column in ("ID", "wav"):
            if column not in fields:
                raise KaldiFormatError(f"{path}: CSV manifest needs columns ID and wav, has {fields}")
        yield from enumerate(reader, start=2)


def read_inputs(
    source,
    *,
    allow_pipes: bool = False,
    root=None,
    text_column: str = "text",
    replacements: dict | None = None,
) -> list[JobItem]:
    """Utterances of a Kaldi folder or a SpeechBrain CSV manifest, as :class:`JobItem`.

    Kaldi folder: ``wav.scp`` (paths relative to ``root``, the folder, or the working
    directory) and optional ``text``; a VPC 2026 anonymized folder without them (``wav/*.wav`` only) is
    completed from its original beside it, as the 2026 toolkit does (:func:`.vpac.sibling_original`). A ``wav.scp`` shell pipe is kept as a
    :class:`~segreconcat_aug.data.kaldi.PipeCommand` when ``allow_pipes``; otherwise the item
    carries a ``problem`` (the job records it as a failure and goes on).

    CSV manifest: columns ``ID``, ``wav`` and optionally ``text_column`` (``text``; the
    SpeechBrain LibriSpeech ``wrd`` column is used when ``text`` is absent). ``$key``
    placeholders in ``wav`` are replaced from ``replacements`` (e.g. ``{"data_root": ...}``);
    relative paths resolve against ``root`` or the manifest's folder. A duplicate ID is an
    error naming the line.

    Example
    -------
    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (d / "m.csv").write_text("ID,duration,wav,text\\nu1,1.0,$data_root/u1.wav,HELLO\\n")
    >>> item = read_inputs(d / "m.csv", replacements={"data_root": "/data"})[0]
    >>> item.id, item.source, item.text
    ('u1', '/data/u1.wav', 'HELLO')
    """
    source = Path(source)
    if source.is_dir():
        # A VPC 2026 anonymized folder holding only its audio: the lists from its original beside it.
        original = None if (source / "wav.scp").is_file() else sibling_original(source)
        folder = load_kaldi_folder(
            source, root=root, allow_pipes=True, require_utt2spk=False, original=original
        )
        log_completion(folder)
        texts = folder.text or {}
        items = []
        for utt, wav in folder.wav.items():
            problem = None
            if isinstance(wav, PipeCommand) and not allow_pipes:
                problem = (
                    f"{source / 'wav.scp'}: entry is a shell pipe ({wav} |); refused unless "
                    "allow_pipes is enabled"
                )
            items.append(JobItem(utt, wav, texts.get(utt), problem))
        return items
    if not source.is_file():
        raise MissingInputError(f"{source}: neither a Kaldi data folder nor a CSV manifest")
    items, seen = [], {}
    for number, row in _csv_rows(source):
        utt, wav = (row.get("ID") or "").strip(), (row.get("wav") or "").strip()
        if not utt or not wav:
            raise KaldiFormatError(f"{source}:{number}: empty ID or wav")
        if utt in seen:
            raise KaldiFormatError(f"{source}:{number}: ID {utt!r} already on line {seen[utt]}")
        seen[utt] = number
        for name, value in (replacements or {}).items():
            wav = wav.replace(f"${name}", str(value))
        path = Path(wav)
        if not path.is_absolute():
            candidates = ([Path(root) / path] if root is not None else []) + [source.parent / path]
            path = next((c for c in candidates if c.exists()), candidates[0])
        text = row.get(text_column)
        if text is None and text_column == "text":
            text = row.get("wrd")
        items.append(JobItem(utt, str(path), text))
    if not items:
        raise KaldiFormatError(f"{source}: no rows after the header: an empty manifest lists nothing to do")
    return items

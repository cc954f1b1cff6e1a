"""Batch jobs over utterances (alignment, orders): shards, each its own file written atomically and
resumed; failures; merge; SLURM job arrays (submitit).

A shard appends to ``<shard file>.partial`` and, when done, writes its file whole and renames it into
place; a rerun skips the ids any file of the output holds. docs/alignment.md describes the layout.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import shutil
import subprocess
import sys
import zlib
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..errors import OptionError, UserError
from .folder_lock import FolderInUseError, lock_folder
from .jsonl_files import (
    PARTIAL,
    RepeatedIds,
    _is_folder_target,
    cache_files,
    iter_jsonl,
    shard_files,
    truncate_partial_tail,
)
from .result_files import atomic_writer

logger = logging.getLogger(__name__)


class JobError(UserError, RuntimeError):
    """A job cannot start or a merge cannot proceed; the message names the file and the fix."""


@dataclass(frozen=True)
class Shard:
    """Shard ``index`` of ``count`` (0-based)."""

    index: int = 0
    count: int = 1

    def __post_init__(self):
        if self.count < 1 or not 0 <= self.index < self.count:
            raise OptionError(
                f"--shard {self.index}/{self.count}: need 0 <= i < n in i/n, e.g. 0/{max(self.count, 2)}"
            )

    def owns(self, utt_id: str) -> bool:
        """Whether this shard processes ``utt_id``."""
        return shard_of(utt_id, self.count) == self.index

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def shard_of(utt_id: str, count: int) -> int:
    """Which of ``count`` shards processes ``utt_id`` (a stable CRC32 hash of the id)."""
    return zlib.crc32(utt_id.encode("utf-8")) % count


def resolve_shard(spec: str | None = None, *, env=None) -> Shard:
    """The shard of this process from ``--shard i/n`` and torchrun's ``RANK``/``WORLD_SIZE``."""
    env = os.environ if env is None else env
    index, count = 0, 1
    if spec not in (None, "", "None"):
        match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", str(spec))
        if not match:
            raise OptionError(f"--shard {spec!r}: expected 'i/n' with 0 <= i < n, e.g. 0/4")
        index, count = int(match.group(1)), int(match.group(2))
        Shard(index, count)  # validates
    world = int(env.get("WORLD_SIZE", "1") or 1)
    rank = int(env.get("RANK", "0") or 0)
    return Shard(index * world + rank, count * world)


def default_device() -> str:
    """``cuda:<LOCAL_RANK>`` when CUDA is available (one GPU per torchrun rank), else ``cpu``."""
    import torch

    if torch.cuda.is_available():
        return f"cuda:{int(os.environ.get('LOCAL_RANK', '0') or 0) % torch.cuda.device_count()}"
    return "cpu"


def shard_path(output, shard: Shard = Shard()) -> Path:
    """``<folder>/part-002-of-008.jsonl``, or ``x.part-002-of-008.jsonl`` beside an ``x.jsonl`` (one shard: itself)."""
    output = Path(output)
    part = f"part-{shard.index:03d}-of-{shard.count:03d}.jsonl"
    if _is_folder_target(output):
        return output / part
    return output if shard.count == 1 else output.with_name(f"{output.stem}.{part}")


def failures_path(path) -> Path:
    """``x.jsonl`` -> ``x.failures.tsv``."""
    path = Path(path)
    return path.with_name(f"{path.stem}.failures.tsv")


def read_failures(output) -> dict[str, str]:
    """``{id: reason}`` from every failures file of ``output`` (a folder, a file, or its parts), those of
    shards that wrote no line (every utterance failed) included."""
    output = Path(output)
    files = shard_files(output, ".failures.tsv")
    if not _is_folder_target(output):
        files.append(failures_path(output))
    result: dict[str, str] = {}
    for file in files:
        if file.is_file():
            for line in file.read_text(encoding="utf-8").splitlines():
                utt, _, reason = line.partition("\t")
                if utt.strip():
                    result[utt] = reason
    return result


def _record_id(record, where: str) -> str:
    """The ``id`` of one JSON record; a clear error naming ``file:line`` otherwise."""
    if not isinstance(record, dict) or "id" not in record:
        raise JobError(f"{where}: not a JSON object with key 'id'")
    return record["id"]


def jsonl_ids(path) -> list[str]:
    """The ids of a JSON Lines file, in order; an unterminated last line (still being written) is left out."""
    if not Path(path).exists():
        return []
    return [
        _record_id(record, where)
        for where, record, _ in iter_jsonl(path, error=JobError, partial_tail="skip")
    ]


def written_ids(output) -> set[str]:
    """The ids in any file of ``output``: its finished shards and the ``.partial`` of unfinished ones."""
    return {utt for file in cache_files(output, required=False, in_progress=True) for utt in jsonl_ids(file)}


class Job:
    """One shard's resumable run writing JSON Lines (see the module doc); a context manager."""

    def __init__(
        self,
        output,
        *,
        shard: Shard = Shard(),
        desc: str = "job",
        progress: bool = True,
        fsync: bool = False,
    ):
        self.shard = shard
        self.desc = desc
        self.show_progress = progress
        self.path = shard_path(output, shard)
        self.partial = Path(f"{self.path}{PARTIAL}")
        self.failures_path = failures_path(self.path)
        try:
            self._lock = lock_folder(
                self.path.parent, f"{desc} shard {shard}", name=f".{self.path.name}.lock"
            )
        except FolderInUseError as err:
            raise JobError(
                f"{self.path}: another process is writing this shard ({err.holder}): wait for it to finish, "
                "or give this one another --shard"
            ) from None
        for own in (self.path, self.partial):  # a line cut by a kill (ours: this shard is locked)
            if own.is_file():
                truncate_partial_tail(own)
        self.done = written_ids(output)
        self.previously_done = len(self.done)
        self._handle = open(self.partial, "a", encoding="utf-8")
        self._failures = open(self.failures_path, "w", encoding="utf-8")
        self._fsync = fsync
        self.written = 0
        self.failures: Counter = Counter()

    def pending(self, items: Iterable) -> list:
        """The items (or ids) this shard owns that are not done yet, in input order."""
        return [
            item
            for item in items
            if (utt := getattr(item, "id", item)) not in self.done and self.shard.owns(utt)
        ]

    def track(self, items: Sequence, *, batch_size: int | None = None) -> Iterator:
        """Iterate ``items`` (or lists of ``batch_size``) under a progress bar; an item with a ``problem``
        is recorded as a failure (kind ``refused``) instead."""
        from tqdm.auto import tqdm

        for item in items:
            if getattr(item, "problem", None):
                self.fail(item.id, item.problem, kind="refused")
        ready = [item for item in items if not getattr(item, "problem", None)]
        logger.info(
            "%s shard %s: %d already done, %d to do -> %s",
            self.desc,
            self.shard,
            self.previously_done,
            len(items),
            self.path,
        )
        size = batch_size or 1
        title = f"{self.desc} [{self.shard}]"
        with tqdm(
            total=len(items), desc=title, unit="utt", smoothing=0.05, disable=not self.show_progress
        ) as bar:
            bar.update(len(items) - len(ready))
            for start in range(0, len(ready), size):
                batch = ready[start : start + size]
                yield batch if batch_size else batch[0]
                bar.update(len(batch))
            bar.set_postfix(written=self.written, failed=self.failed)

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
        """Record a failure: ``<id>\\t<reason>`` in the failures file, counted by ``kind`` (by default the
        reason's own ``kind``, else its exception type)."""
        kind = kind or getattr(reason, "kind", None) or type(reason).__name__
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
        return (
            text + f", {self.failed} failed" + (f" ({kinds}) -> {self.failures_path}" if self.failed else "")
        )

    def exit_status(self, allow_failures: bool = False) -> int:
        """The recipe's exit status: 0 when nothing failed (or failures are allowed), else 1."""
        return 0 if allow_failures or not self.failed else 1

    def close(self, finished: bool = True) -> None:
        """Close; a finished shard's file is written whole and renamed into place, else its ``.partial`` stays."""
        if self._handle.closed:
            return
        self._handle.close()
        self._failures.close()
        for file in (self.failures_path, self.partial):
            if file.stat().st_size == 0:
                file.unlink()
        if finished and self.partial.exists():
            with atomic_writer(self.path, "wb") as out:
                for file in (self.path, self.partial):
                    if file.is_file():
                        with open(file, "rb") as lines:
                            shutil.copyfileobj(lines, out)
                if self._fsync:
                    out.flush()
                    os.fsync(out.fileno())
            self.partial.unlink()
        self._lock.close()

    def __enter__(self):
        return self

    def __exit__(self, error_type, *exc):
        self.close(finished=error_type is None)


def merge_jsonl(inputs: Iterable, output, *, expected_ids=None) -> int:
    """Concatenate JSON Lines shards into ``output``, each id once; returns the number of lines."""
    output = Path(output)
    inputs = [Path(p) for p in inputs]
    if not inputs:
        raise JobError(f"{output}: no shard files to merge")
    repeated = RepeatedIds(JobError)
    merged = 0
    output.parent.mkdir(parents=True, exist_ok=True)
    with atomic_writer(output) as out:  # streamed: a challenge-size cache is never held whole
        for file in inputs:
            for where, record, line in iter_jsonl(file, error=JobError, partial_tail="refuse"):
                if not repeated.is_repeat(_record_id(record, where), where, line):
                    out.write(line)
                    merged += 1
        missing = [utt for utt in expected_ids or () if utt not in repeated]
        if missing:
            raise JobError(f"{output}: {len(missing)} expected id(s) missing, first: {missing[:5]}")
    return merged


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


def slurm_parameters(settings) -> dict:
    """submitit's parameters from the ``slurm_*`` keys of ``settings`` that are not null."""
    return {name: settings[key] for key, name in SLURM_KEYS.items() if settings.get(key) is not None}


def slurm_executor(folder, settings, name: str, cluster: str = "slurm"):
    """submitit's executor writing in ``folder``, with the ``slurm_*`` resources of ``settings``."""
    try:
        import submitit
    except ImportError:
        raise JobError("--launcher=slurm submits through submitit: pip install submitit") from None
    executor = submitit.AutoExecutor(folder=folder, cluster=cluster)
    executor.update_parameters(name=name, **slurm_parameters(settings))
    return executor


def run_array(
    script, argv: list[str], output, ids: Iterable[str], *, shards: int, hparams: dict, name: str
) -> int:
    """Run ``script`` with ``argv`` and ``--shard=k/<shards>`` (here: ``--launcher=local``) for each shard
    ``k`` with work left, as one SLURM job array through submitit; wait for it; 1 when a task failed."""
    done = written_ids(output)
    todo = sorted({shard_of(utt, shards) for utt in ids if utt not in done})
    if not todo:
        logger.info("%s: every shard of %d is done; nothing to submit", output, shards)
        return 0
    executor = slurm_executor(f"{output}.submitit", hparams, name, ARRAY_CLUSTER)
    from submitit.core.utils import FailedJobError, UncompletedJobError

    # Each task is this command, run here: without the array's own options (a key given twice is refused),
    # each as ``--key=value`` or as ``--key value``.
    own = ("--launcher", "--shards")
    pairs = zip(["", *argv], argv)  # (the argument before, the argument)
    kept = [arg for before, arg in pairs if before not in own and arg.split("=", 1)[0] not in own]
    command = [sys.executable, str(Path(script).resolve()), *kept, "--launcher=local", "--shards=null"]
    tasks = [[*command, f"--shard={k}/{shards}"] for k in todo]
    # A task's exit status is its command's; its output goes to the task's log.
    jobs = executor.map_array(functools.partial(subprocess.call, cwd=os.getcwd()), tasks)
    logger.info(
        "%s: %d of %d shard(s) submitted; waiting (logs in %s.submitit)", name, len(jobs), shards, output
    )
    status = 0
    for task, job in zip(tasks, jobs):
        try:
            code = job.result()
        except (FailedJobError, UncompletedJobError) as err:
            logger.error("%s: task %s did not finish: %s", name, job.job_id, str(err).splitlines()[0])
            code = 1
        status = max(status, int(code != 0))
        logger.info("%s: job %s (%s) exited %s", name, job.job_id, task[-1], code)
    return status

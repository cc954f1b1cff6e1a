"""The recipes' command line: SpeechBrain's ``parse_arguments`` and HyperPyYAML overrides, plus

- ``--help`` (``-h``): the YAML's keys with their end-of-line comments, then the recipe's usage (exit 0);
- a misspelt ``--key`` named with its closest match, a key given twice refused;
- every option checked (:mod:`segreconcat_aug.options`) before anything is written;
- :func:`run_main`: a :class:`~segreconcat_aug.errors.UserError` as one line and exit status 2, the
  folders this run created removed (a file the message cites kept beside them); ``--traceback`` shows it;
- console scripts: ``segreconcat-train ...`` is ``python recipes/train.py ...`` from any directory (a
  relative ``hparams/...`` path not found there is the checkout's).
"""

from __future__ import annotations

import difflib
import logging
import re
import runpy
import shutil
import sys
from pathlib import Path

from segreconcat_aug.data.folder_lock import release_held
from segreconcat_aug.data.hparams_text import hparams_text
from segreconcat_aug.data.result_files import DISK_FULL, disk_full
from segreconcat_aug.errors import USAGE_EXIT_STATUS, UserError, user_message

REPO = Path(__file__).resolve().parents[1]
# Console script name -> (its recipe, the YAML whose keys its --help lists when none is given).
RECIPES = {
    "align": ("align.py", "hparams/align.yaml"),
    "anonymize": ("anonymize.py", "hparams/anonymize.yaml"),
    "demo": ("run_demo.py", "hparams/demo.yaml"),
    "evaluate": ("evaluate.py", "hparams/ecapa_segreconcat.yaml"),
    "grid": ("run_grid.py", "hparams/grid.yaml"),
    "orders": ("compute_orders.py", "hparams/orders.yaml"),
    "train": ("train.py", "hparams/ecapa_segreconcat.yaml"),
    "trials": ("make_mixed_trials.py", "hparams/mixed_trials.yaml"),
}
DEFAULT_HPARAMS = dict(RECIPES.values())
TRACEBACK_FLAG = "--traceback"
# Lines a recipe prints for the console even when its output goes to a log (run_grid.py shows them).
PROGRESS_PREFIX = "progress: "
# Libraries whose DEBUG records would fill SpeechBrain's log file (numba logs every step of a JIT compile).
QUIET_LOGGERS = ("numba", "matplotlib", "PIL", "urllib3", "filelock", "fsspec")

logger = logging.getLogger(__name__)
# Folders this run created (and only those): removed when the run stops on a user error.
_FOLDERS_TO_REMOVE: list[Path] = []


class UnknownOptionError(UserError, ValueError):
    """A ``--key=value`` whose key is not in the recipe's YAML, or a YAML file that is not there."""


class RepeatedOptionError(UserError, ValueError):
    """The same ``--key`` given twice on the command line (which one was meant?)."""


def report_progress(message: str) -> None:
    """Print a progress line (flushed: the reader may be a pipe); run_grid.py echoes these to its console."""
    print(f"{PROGRESS_PREFIX}{message}", flush=True)


def checkout_path(path) -> str:
    """``path`` as given when it exists (or is absolute), else the checkout's file of that relative name."""
    given = Path(path)
    if given.is_absolute() or given.exists() or not (REPO / given).exists():
        return str(path)
    return str(REPO / given)


def yaml_lines(hparams_file) -> list[tuple[str, str, str]]:
    """``(key, value, end-of-line comment)`` of each top-level key of a YAML file, in file order."""
    rows = []
    for line in hparams_text(hparams_file).splitlines():
        match = re.match(r"([A-Za-z_]\w*):(.*)$", line)
        if match:
            value, _, comment = match.group(2).partition(" #")
            rows.append((match.group(1), value.strip() or "...", comment.strip(" #")))
    return rows


def override_keys(hparams_file) -> list[str]:
    """The keys a YAML's command line may set: its own, and a training YAML's ``eval_hparams``' keys."""
    from .evaluation.system import EVAL_KEYS

    keys = [key for key, _, _ in yaml_lines(hparams_file)]
    return keys + list(EVAL_KEYS) if "eval_hparams" in keys else keys


def check_override_keys(hparams_file, overrides) -> None:
    """Every overridden key must be one of :func:`override_keys`; a misspelt one is named with the closest."""
    keys = override_keys(hparams_file)
    for key in overrides:
        if key not in keys:
            guess = difflib.get_close_matches(str(key), keys, n=1, cutoff=0.6)
            hint = f"did you mean --{guess[0]}?" if guess else "check its spelling"
            raise UnknownOptionError(
                f"--{key}: {hparams_file} has no key {key!r}; {hint} (--help lists the keys with their meaning)"
            )


def check_repeated_keys(argv, keys) -> None:
    """Refuse a YAML key (of ``keys``) given twice (``--key=value`` or ``--key value``).

    >>> check_repeated_keys(["--seed=1", "--seed", "2"], ["seed"])
    Traceback (most recent call last):
    ...
    segreconcat_aug.cli.RepeatedOptionError: --seed is given twice (1, then 2): give it once
    """
    given: dict[str, list[str]] = {}
    for position, argument in enumerate(argv):
        if argument.startswith("--"):
            key, equals, value = argument[2:].partition("=")
            if not equals:
                following = argv[position + 1] if position + 1 < len(argv) else ""
                value = "" if following.startswith("--") else following
            given.setdefault(key, []).append(value)
    for key, values in given.items():
        if key in keys and len(values) > 1:
            times = {2: "twice", 3: "three times"}.get(len(values), f"{len(values)} times")
            raise RepeatedOptionError(f"--{key} is given {times} ({', then '.join(values)}): give it once")


def parse_recipe_arguments(argv=None) -> tuple[str, dict, dict]:
    """``hparams.yaml --key=value ...`` -> ``(hparams_file, run_opts, overrides)`` as SpeechBrain's
    ``parse_arguments`` (the overrides a mapping), every key checked."""
    import ruamel.yaml
    import speechbrain as sb

    argv = [a for a in (sys.argv[1:] if argv is None else argv) if a != TRACEBACK_FLAG]
    if not argv or argv[0].startswith("-"):
        raise UnknownOptionError("expected a hyperparameter file first (hparams/...yaml); --help shows usage")
    if not Path(argv[0]).is_file():
        raise UnknownOptionError(f"{argv[0]}: no such hyperparameter file (give a path to hparams/...yaml)")
    check_repeated_keys(argv[1:], override_keys(argv[0]))
    hparams_file, run_opts, overrides = sb.parse_arguments(argv)
    overrides = dict(ruamel.yaml.YAML().load(overrides) or {}) if overrides.strip() else {}
    check_override_keys(hparams_file, overrides)
    return hparams_file, run_opts, overrides


def check_options(argv, schema, *, new_folders=(), check=None, derive=None):
    """``(hparams_file, run_opts, overrides, values)``: the command line parsed and every option value
    checked against ``schema``, nothing loaded or written.

    ``values``: the YAML's with references resolved (no object built), a training YAML's evaluation
    values (its ``eval_hparams`` file's, whose overrides leave ``overrides``) among them. ``derive(hparams_file,
    values, overrides)``: overrides a run derives (a preset, an ``init_from`` folder's sizes), under the
    user's. ``check(values)``: the recipe's own checks. ``new_folders``: keys of folders to remove if this
    run creates them and stops on a user error.
    """
    from .data.protocols import check_protocol_options
    from .evaluation.system import EVAL_KEYS, evaluation_hparams_file, load_evaluation_hparams
    from .options import validate_hparams_file

    hparams_file, run_opts, overrides = parse_recipe_arguments(argv)
    stated = {key: overrides.pop(key) for key in list(overrides) if key in EVAL_KEYS}
    values = validate_hparams_file(hparams_file, overrides, schema)
    derived = derive(hparams_file, values, overrides) if derive is not None else None
    if derived:
        overrides = {**derived, **overrides}
        values = validate_hparams_file(hparams_file, overrides, schema)
    if "eval_hparams" in values or any(key in EVAL_KEYS for key in values):
        evaluation = load_evaluation_hparams(evaluation_hparams_file(hparams_file, values), stated)
        check_protocol_options({**values, **evaluation})
        values.update(evaluation)
    if check is not None:
        check(values)
    for key in new_folders:
        if values.get(key):
            note_new_folder(values[key])
    for name in QUIET_LOGGERS:  # before SpeechBrain's log file is set up
        logging.getLogger(name).setLevel(logging.WARNING)
    return hparams_file, run_opts, overrides, values


def load_recipe_hparams(argv, schema, *, configure_logging: bool = True, **checks):
    """:func:`check_options`, then the YAML loaded (HyperPyYAML) with the overrides; its evaluation values added."""
    hparams_file, run_opts, overrides, values = check_options(argv, schema, **checks)
    hparams = {**values, **load_hparams(hparams_file, overrides)}
    if configure_logging:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s: %(message)s")
    return hparams_file, run_opts, overrides, hparams


def load_hparams(hparams_file, overrides) -> dict:
    """The YAML loaded by HyperPyYAML with ``overrides`` (a YAML over ``base_hparams`` composed first)."""
    from hyperpyyaml import load_hyperpyyaml

    return load_hyperpyyaml(hparams_text(hparams_file), overrides)


def save_hparams_as_run(folder, hparams_file, overrides) -> None:
    """``<folder>/hyperparams.yaml``, the YAML as run, as SpeechBrain's ``create_experiment_directory`` saves
    it (given no YAML to save), for a YAML over ``base_hparams`` too."""
    from hyperpyyaml import resolve_references
    from speechbrain.utils.distributed import if_main_process

    if if_main_process():
        resolved = resolve_references(hparams_text(hparams_file), overrides).getvalue()
        (Path(folder) / "hyperparams.yaml").write_text(resolved, encoding="utf-8")


def note_new_folder(folder) -> None:
    """Remove ``folder`` if the run stops on a user error, when it does not exist yet (its outermost
    missing folder: ``results/`` itself on a first run; never a folder that exists now)."""
    folder = Path(folder).absolute()
    if folder.exists():
        return
    while not folder.parent.exists():
        folder = folder.parent
    _FOLDERS_TO_REMOVE.append(folder)


def stop_removing_new_folders() -> None:
    """From here on the run's folders hold work worth keeping: a later user error leaves them."""
    _FOLDERS_TO_REMOVE.clear()


def hold_output_folder(folder, what: str, name: str | None = None) -> None:
    """This run is the one writer of ``folder`` until it exits (:mod:`segreconcat_aug.data.folder_lock`):
    a second run into it stops with one line (exit 2). Under torchrun only rank 0 takes it."""
    from speechbrain.utils.distributed import get_rank

    from .data.folder_lock import LOCK_FILE, hold_folder

    if (get_rank() or 0) == 0:
        hold_folder(folder, what, name or LOCK_FILE)


def _remove_new_folders(keep=()) -> dict[Path, Path]:
    """Remove this run's new folders; a file of ``keep`` inside one moves beside it first, as
    ``<folder name>.<file name>`` (an earlier file of that name is kept). Returns ``{cited: where now}``."""
    from speechbrain.utils.distributed import if_main_process

    moved: dict[Path, Path] = {}
    while _FOLDERS_TO_REMOVE:
        folder = _FOLDERS_TO_REMOVE.pop()
        if not (folder.exists() and if_main_process()):
            continue
        for cited in keep:
            where = Path(cited).absolute()
            if where.is_file() and folder in where.parents:
                target, number = folder.parent / f"{folder.name}.{where.name}", 1
                while target.exists():
                    target = folder.parent / f"{folder.name}.{where.stem}.{number}{where.suffix}"
                    number += 1
                shutil.move(str(where), str(target))
                moved[Path(cited)] = target
        _close_log_files_in(folder)
        shutil.rmtree(folder, ignore_errors=True)
    return moved


def _close_log_files_in(folder: Path) -> None:
    """Detach and close the log handlers writing into ``folder`` (SpeechBrain's ``<folder>/log.txt``):
    a closed FileHandler left attached reopens its file at the next record, which fails once the folder
    is gone (a caller that goes on in the same process, such as a test or a notebook)."""
    loggers = [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]
    for log in loggers:
        for handler in list(getattr(log, "handlers", [])):
            if isinstance(handler, logging.FileHandler) and folder in Path(handler.baseFilename).parents:
                log.removeHandler(handler)
                handler.close()


def recipe_help(script: str, argv: list[str], doc: str | None, extra: str = "") -> str:
    """The ``--help`` text: the keys of the YAML given (or the recipe's default one), then usage."""
    from .evaluation.system import evaluation_hparams_file

    given = [argument for argument in argv if not argument.startswith("-")]
    hparams_file = given[0] if given and Path(given[0]).is_file() else REPO / DEFAULT_HPARAMS[script]
    files = [hparams_file]
    named = {key: value for key, value, _ in yaml_lines(hparams_file) if key == "eval_hparams"}
    if named:  # a training YAML: its evaluation YAML's keys are its command line's too
        files.append(evaluation_hparams_file(hparams_file, named))
    parts = [(doc or "").strip().split("\n")[0]]
    for path in files:
        rows = [
            (f"--{k}", "(required)" if v == "!PLACEHOLDER" else v[:34], c) for k, v, c in yaml_lines(path)
        ]
        rows = [row for row in rows if not row[0].startswith("--__")]
        width = max(len(row[0]) for row in rows)
        parts.append(
            f"Keys of {path} (override any with --key=value):\n"
            + "\n".join(f"  {k:<{width}}  {v:<34}  {c}".rstrip() for k, v, c in rows)
        )
    parts += [extra.strip()] if extra else []
    parts.append(
        "Also: SpeechBrain's run options (--device=cuda:0, --precision=fp16, --distributed_backend=...), "
        f"and {TRACEBACK_FLAG} to show the traceback of a user error."
    )
    usage = re.search(r"^Usage[^\n]*\n((?:[ \t]*\n|[ \t]+\S[^\n]*\n)+)", doc or "", re.M)
    if usage:
        parts.append(
            "usage:\n" + "\n".join(f"  {line.strip()}" for line in usage.group(1).split("\n") if line.strip())
        )
    return "\n\n".join(parts) + "\n"


def run_main(main, argv: list[str] | None = None, *, extra_help: str = "") -> None:
    """A recipe's ``__main__``: ``--help``, then ``main(argv)`` with user errors as one line (exit 2)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    module = sys.modules.get(main.__module__)
    script = Path(getattr(module, "__file__", None) or sys.argv[0]).name
    if "--help" in argv or "-h" in argv:
        sys.stdout.write(recipe_help(script, argv, getattr(module, "__doc__", None), extra_help))
        sys.exit(0)
    _FOLDERS_TO_REMOVE.clear()
    show_traceback = TRACEBACK_FLAG in argv
    try:
        try:
            outcome = main([argument for argument in argv if argument != TRACEBACK_FLAG])
        except OSError as error:
            if error.errno not in DISK_FULL or isinstance(error, UserError):
                raise
            raise disk_full(error.filename, error) from error  # a full disk anywhere: one line too
    except UserError as error:
        release_held()
        if not show_traceback:  # logged before the removal: the log file may be in a new folder
            logger.debug("user error", exc_info=True)
        # A full disk keeps the run's folders: what was written completely is the rerun's head start.
        keep = getattr(error, "keep_new_folders", False)
        moved = {} if keep else _remove_new_folders(keep=error.cited_files)
        if show_traceback:
            raise
        message = user_message(error)
        for cited, now in moved.items():  # the message says where the file it cites is now
            message = message.replace(str(cited), str(now))
        print(f"{script}: error: {message}", file=sys.stderr)
        sys.exit(USAGE_EXIT_STATUS)
    finally:
        release_held()
        leave_process_group()
    sys.exit(outcome if isinstance(outcome, int) else 0)


def leave_process_group() -> None:
    """Close a torchrun rank's process group: a rank that exits with it open can abort at exit
    ("terminate called without an active exception") and fail the whole job."""
    dist = sys.modules.get("torch.distributed")  # never imports torch for a recipe that did not
    if dist is not None and dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def run_recipe(name: str, argv: list[str] | None = None) -> None:
    """Run ``recipes/<file>`` as ``__main__`` with ``argv`` (a relative ``hparams/...`` not found here:
    the checkout's)."""
    script = REPO / "recipes" / RECIPES[name][0]
    if not script.is_file():
        raise SystemExit(
            f"segreconcat-{name}: {script} not found; the console scripts run the recipes of a source "
            "checkout: clone the repository and install it with `pip install -e .`"
        )
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and not argv[0].startswith("-"):
        argv[0] = checkout_path(argv[0])
    sys.argv = [str(script), *argv]
    sys.path.insert(0, str(script.parent))
    runpy.run_path(str(script), run_name="__main__")


def _entry(name: str):
    def main() -> None:
        run_recipe(name)

    main.__name__ = f"{name}_main"
    main.__doc__ = f"Console script ``segreconcat-{name}``: runs ``recipes/{RECIPES[name][0]}``."
    return main


align = _entry("align")
anonymize = _entry("anonymize")
demo = _entry("demo")
evaluate = _entry("evaluate")
grid = _entry("grid")
orders = _entry("orders")
train = _entry("train")
trials = _entry("trials")

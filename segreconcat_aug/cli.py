"""The recipes' command line: console scripts, ``--help`` from the YAML, and user errors as one line.

``segreconcat-train hparams/ecapa_segreconcat.yaml --system=T8-5`` is
``python recipes/train.py hparams/ecapa_segreconcat.yaml --system=T8-5``, from any
directory: a relative ``hparams/...`` path that does not exist where the command runs is
taken from the checkout. The recipes and YAML files live in the repository (SpeechBrain
style), so the scripts need the editable install of the README (``pip install -e .``).

Every recipe ends with ``run_main(main)``, which gives it

- ``--help`` (or ``-h``): the YAML's own keys with their one-line comments (read from the
  YAML file itself), then the recipe's usage lines; exit status 0;
- user errors (:class:`segreconcat_aug.errors.UserError`: a wrong layout, a missing
  alignment, a misspelt or repeated ``--key``...) as one line without a traceback, exit status 2,
  and no results folder left behind that this run created (a file the message cites is kept
  beside it, and the message says where); ``--traceback`` shows the traceback
  (SpeechBrain's own ``--debug`` means "run a few batches").

>>> sorted(RECIPES)[:3]
['align', 'anonymize', 'demo']
>>> closest_key("outptu", ["output", "data_folder"])
'output'
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
from segreconcat_aug.data.result_files import DISK_FULL, disk_full
from segreconcat_aug.errors import USAGE_EXIT_STATUS, UserError, user_message

REPO = Path(__file__).resolve().parents[1]
RECIPES = {
    "align": "align.py",
    "anonymize": "anonymize.py",
    "demo": "run_demo.py",
    "evaluate": "evaluate.py",
    "grid": "run_grid.py",
    "orders": "compute_orders.py",
    "train": "train.py",
    "trials": "make_mixed_trials.py",
}
# The YAML whose keys a recipe's --help lists when none is given on the command line.
DEFAULT_HPARAMS = {
    "align.py": "hparams/align.yaml",
    "anonymize.py": "hparams/anonymize.yaml",
    "run_demo.py": "hparams/demo.yaml",
    "evaluate.py": "hparams/ecapa_segreconcat.yaml",
    "run_grid.py": "hparams/grid.yaml",
    "compute_orders.py": "hparams/orders.yaml",
    "train.py": "hparams/ecapa_segreconcat.yaml",
    "make_mixed_trials.py": "hparams/mixed_trials.yaml",
}
TRACEBACK_FLAG = "--traceback"
# Lines a recipe prints for the console even when its output goes to a log (run_grid.py shows them).
PROGRESS_PREFIX = "progress: "
HELP_FLAGS = ("--help", "-h")

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


def closest_key(key: str, keys) -> str | None:
    """The key of ``keys`` closest in spelling to ``key`` (None when nothing is close)."""
    matches = difflib.get_close_matches(key, list(keys), n=1, cutoff=0.6)
    return matches[0] if matches else None


TOP_LEVEL_KEY = re.compile(r"^([A-Za-z_]\w*):(.*)$")


def yaml_lines(hparams_file) -> list[tuple[str, str, str]]:
    r"""``(key, value, comment)`` of each top-level key of a YAML file, read line by line.

    The comment is the key's end-of-line one, else the first line of the comment block right above
    it (a section header, ``---- Data ----``, is not about the key). A nested value reads ``...``.

    >>> import tempfile
    >>> path = Path(tempfile.mkdtemp()) / "x.yaml"
    >>> _ = path.write_text("# the seed\nseed: 1  # numpy's too\n# ---- Data ----\n# where\ndata: !PLACEHOLDER\nm:\n  a: 1\n")
    >>> yaml_lines(path)
    [('seed', '1', "numpy's too"), ('data', '!PLACEHOLDER', 'where'), ('m', '...', '')]
    """
    rows, above = [], []
    for line in Path(hparams_file).read_text(encoding="utf-8").splitlines():
        match = TOP_LEVEL_KEY.match(line)
        if match is None:
            text = line.strip()
            above = (
                above + [text.lstrip("#").strip()] if text.startswith("#") and not line[0].isspace() else []
            )
            continue
        value, _, comment = match.group(2).partition(" #")
        if not comment.strip():
            comment = next((text for text in above if text and not text.startswith("-")), "")
        rows.append((match.group(1), value.strip() or "...", comment.strip().lstrip("#").strip()))
        above = []
    return rows


def yaml_keys(hparams_file) -> list[str]:
    """The top-level keys of a hyperparameter file, in file order."""
    return [key for key, _, _ in yaml_lines(hparams_file)]


def overrides_mapping(overrides) -> dict:
    """SpeechBrain's command-line overrides (a YAML string, or a mapping) as a mapping.

    >>> overrides_mapping("{system: B3, seed: 7}"), overrides_mapping("")
    ({'system': 'B3', 'seed': 7}, {})
    """
    import ruamel.yaml

    if isinstance(overrides, str):
        overrides = ruamel.yaml.YAML().load(overrides) if overrides.strip() else None
    return dict(overrides or {})


def override_keys(hparams_file) -> list[str]:
    """The keys a YAML's command line may override: its own, and a training YAML's evaluation keys
    (``eval_hparams``: :mod:`segreconcat_aug.evaluation.system`)."""
    from .evaluation.system import EVAL_KEYS

    keys = yaml_keys(hparams_file)
    return keys + list(EVAL_KEYS) if {"eval_hparams", *EVAL_KEYS} & set(keys) else keys


def check_override_keys(hparams_file, overrides) -> None:
    """Every overridden key must be one of :func:`override_keys`; a misspelt one is named with the closest."""
    keys = override_keys(hparams_file)
    for key in overrides_mapping(overrides):
        if key in keys:
            continue
        guess = closest_key(str(key), keys)
        hint = f"did you mean --{guess}?" if guess else "check its spelling"
        raise UnknownOptionError(
            f"--{key}: {hparams_file} has no key {key!r}; {hint} (--help lists the keys with their meaning)"
        )


def check_repeated_keys(argv, keys) -> None:
    """Refuse a YAML key given twice among ``argv``'s ``--key=value`` (or ``--key value``) arguments.

    >>> check_repeated_keys(["x.yaml", "--seed=1", "--lr", "2"], ["seed", "lr"])
    >>> check_repeated_keys(["x.yaml", "--seed=1", "--seed=2"], ["seed"])
    Traceback (most recent call last):
    ...
    segreconcat_aug.cli.RepeatedOptionError: --seed is given twice (1, then 2): give it once
    """
    given: dict[str, list[str]] = {}
    for position, argument in enumerate(argv):
        if not argument.startswith("--"):
            continue
        key, equals, value = argument[2:].partition("=")
        if not equals:
            following = argv[position + 1] if position + 1 < len(argv) else ""
            value = "" if following.startswith("--") else following
        given.setdefault(key, []).append(value)
    for key, values in given.items():
        if key in keys and len(values) > 1:
            raise RepeatedOptionError(
                f"--{key} is given {_times(len(values))} ({', then '.join(values)}): give it once"
            )


def _times(count: int) -> str:
    return {2: "twice", 3: "three times"}.get(count, f"{count} times")


def parse_recipe_arguments(argv=None):
    """``hparams.yaml --key=value ...`` -> ``(hparams_file, run_opts, overrides)``, the keys checked.

    As SpeechBrain's ``parse_arguments``; a missing YAML file or an override key the YAML does
    not have is an :class:`UnknownOptionError`, a key given twice a :class:`RepeatedOptionError`.
    """
    import speechbrain as sb

    argv = sys.argv[1:] if argv is None else list(argv)
    argv = [argument for argument in argv if argument != TRACEBACK_FLAG]
    if not argv or argv[0].startswith("-"):
        raise UnknownOptionError("expected a hyperparameter file first (hparams/...yaml); --help shows usage")
    if not Path(argv[0]).is_file():
        raise UnknownOptionError(f"{argv[0]}: no such hyperparameter file (give a path to hparams/...yaml)")
    check_repeated_keys(argv[1:], override_keys(argv[0]))
    hparams_file, run_opts, overrides = sb.parse_arguments(argv)
    check_override_keys(hparams_file, overrides)
    return hparams_file, run_opts, overrides


def load_recipe_hparams(
    argv=None,
    *,
    configure_logging: bool = True,
    new_folders: tuple[str, ...] = (),
    check=None,
    derive=None,
):
    """The start of every recipe: ``hparams.yaml --key=value ...`` -> its loaded hyperparameters.

    Returns ``(hparams_file, run_opts, overrides, hparams)`` as SpeechBrain's ``parse_arguments``
    and ``load_hyperpyyaml`` give them (``overrides``: a mapping), every option value checked
    (:func:`segreconcat_aug.options.validate_hparams_file`, before loading); ``argv`` defaults to
    this process's arguments. A training YAML's evaluation keys (``eval_hparams``) are in ``hparams``
    too, its overrides of them checked by :func:`segreconcat_aug.evaluation.system.load_evaluation_hparams`
    and left out of ``overrides``. Logging goes to the console at INFO unless told otherwise (a recipe
    that creates a SpeechBrain experiment folder lets that configure it).
    ``new_folders``: keys of folders to remove if this run creates them and stops on a user error.
    ``check``: the recipe's own checks of the option values (a callable given them), run before
    anything is written. ``derive``: a callable ``(hparams_file, values, stated) -> overrides`` whose
    values go UNDER the user's own (a preset, an ``init_from`` folder's model sizes:
    :func:`segreconcat_aug.training.init_from.training_overrides`).
    """
    from hyperpyyaml import load_hyperpyyaml

    from .data.protocols import check_protocol_options
    from .evaluation.system import EVAL_KEYS, evaluation_hparams_file, load_evaluation_hparams
    from .options import validate_hparams_file

    hparams_file, run_opts, overrides = parse_recipe_arguments(argv)
    overrides = overrides_mapping(overrides)
    # A training YAML (evaluation keys: its eval_hparams'; a YAML still holding some is refused there)
    evaluated = {"eval_hparams", *EVAL_KEYS} & set(yaml_keys(hparams_file))
    if evaluated:
        stated = {key: overrides.pop(key) for key in list(overrides) if key in EVAL_KEYS}
    values = validate_hparams_file(hparams_file, overrides)  # every option value, before anything is written
    if derive is not None:
        derived = derive(hparams_file, values, overrides)
        if derived:
            overrides = {**derived, **overrides}
            values = validate_hparams_file(hparams_file, overrides)
    evaluation = {}
    if evaluated:
        evaluation = load_evaluation_hparams(evaluation_hparams_file(hparams_file, values), stated)
    check_protocol_options({**values, **evaluation})
    if check is not None:
        check(values)
    note_new_folders({**values, **evaluation}, *new_folders)
    with open(hparams_file, encoding="utf-8") as handle:
        hparams = load_hyperpyyaml(handle, overrides)
    hparams.update(evaluation)
    if configure_logging:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s: %(message)s")
    return hparams_file, run_opts, overrides, hparams


def create_experiment_directory(experiment_directory, hyperparams_to_save, overrides, recipe=None) -> None:
    """SpeechBrain's experiment folder (log, env.log, YAML, a copy of ``recipe``: the script that ran),
    remembered when it is new.

    The folder is removed again if the run stops on a user error (:func:`run_main`), and
    ``env.log`` lists the packages of the running interpreter (SpeechBrain's runs whatever
    ``pip`` comes first on PATH, often the system's).
    """
    import speechbrain as sb
    from speechbrain.utils.distributed import if_main_process

    note_new_folder(experiment_directory)
    sb.create_experiment_directory(
        experiment_directory=str(experiment_directory),
        hyperparams_to_save=hyperparams_to_save,
        overrides=overrides,
        save_env_desc=False,
    )
    if if_main_process():
        (Path(experiment_directory) / "env.log").write_text(environment_description(), encoding="utf-8")
        # SpeechBrain copies the file of its caller, this one: the folder keeps the recipe that ran instead.
        (Path(experiment_directory) / Path(__file__).name).unlink(missing_ok=True)
        if recipe is not None:
            shutil.copy(recipe, experiment_directory)
    quiet_third_party_debug()


#: Libraries whose DEBUG records SpeechBrain's log file would otherwise keep: numba logs every
#: bytecode step of a JIT compile (4.4 MB and seconds per training run that compiles the renderer).
QUIET_LOGGERS = ("numba", "matplotlib", "PIL", "urllib3", "filelock", "fsspec")


def quiet_third_party_debug() -> None:
    """Keep the experiment log to our records and the libraries' warnings.

    >>> quiet_third_party_debug(); logging.getLogger("numba.core.byteflow").isEnabledFor(logging.DEBUG)
    False
    """
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)


def installed_packages() -> list[str]:
    """``name==version`` of every distribution the running interpreter imports from, sorted.

    >>> any(line.startswith("torch==") for line in installed_packages())
    True
    """
    from importlib import metadata

    found = {}
    for distribution in metadata.distributions():
        name = distribution.metadata["Name"]
        if name and name.lower() not in found:
            found[name.lower()] = f"{name}=={distribution.version}"
    return [found[key] for key in sorted(found)]


def environment_description() -> str:
    """SpeechBrain's ``env.log`` layout, for the running interpreter and this checkout.

    SpeechBrain's own runs ``pip freeze`` and ``git`` through the shell, so it lists the
    packages of whichever ``pip`` is first on PATH (often the system's, without torch) and the
    revision of the current directory. Here: this interpreter's distributions, the checkout's revision.

    >>> environment_description().splitlines()[0]
    'SpeechBrain system description'
    """
    import subprocess

    import torch

    try:
        revision = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
        ).stdout.strip()
    except OSError:
        revision = ""
    if torch.cuda.is_available():
        accelerator = (
            f"CUDA version:\n{torch.version.cuda}"
            if torch.version.cuda
            else f"ROCm version:\n{torch.version.hip}"
        )
    else:
        accelerator = "CUDA not available"
    rule = "=============================="
    sections = [
        f"Python version:\n{sys.version}\nInterpreter: {sys.executable}",
        "Installed Python packages:\n" + "\n".join(installed_packages()),
        f"Git revision:\n{revision}" if revision else "Could not get git revision",
        accelerator,
    ]
    return f"SpeechBrain system description\n{rule}\n" + f"\n{rule}\n".join(sections) + "\n"


def note_new_folder(folder) -> None:
    """Note ``folder`` for removal on a user error if it does not exist yet (this run creates it).

    What is remembered is the outermost missing folder on its path (``results/`` itself on a
    first run), never a folder that exists now.
    """
    folder = Path(folder).absolute()
    if folder.exists():
        return
    while not folder.parent.exists():
        folder = folder.parent
    _FOLDERS_TO_REMOVE.append(folder)


def note_new_folders(resolved, *keys: str) -> None:
    """:func:`note_new_folder` for the folders the YAML's ``keys`` name, BEFORE the YAML is loaded
    (loading it creates some: SpeechBrain's Checkpointer makes its folder).

    ``resolved``: the YAML's values with their references resolved, as
    :func:`segreconcat_aug.options.validate_hparams_file` returns them.
    """
    for key in keys:
        if resolved.get(key):
            note_new_folder(resolved[key])


def hold_output_folder(folder, what: str, name: str | None = None) -> None:
    """This run is the one writer of ``folder`` until it exits (:mod:`segreconcat_aug.data.folder_lock`):
    a second run into it stops with one line (exit 2). Under torchrun only rank 0 takes it (the ranks of
    one run share the folder)."""
    from speechbrain.utils.distributed import get_rank

    from .data.folder_lock import LOCK_FILE, hold_folder

    if (get_rank() or 0) == 0:
        hold_folder(folder, what, name or LOCK_FILE)


def stop_removing_new_folders() -> None:
    """From here on the run's folders hold work worth keeping: a later user error leaves them."""
    _FOLDERS_TO_REMOVE.clear()


def _remove_new_folders(keep=()) -> dict[Path, Path]:
    """Remove this run's new folders; the files of ``keep`` inside one move beside it first.

    Returns ``{a kept file as cited: where it is now}``. A kept file lands in the removed
    folder's parent (which was there before this run) as ``<folder name>.<file name>``.
    """
    from speechbrain.utils.distributed import if_main_process

    moved: dict[Path, Path] = {}
    while _FOLDERS_TO_REMOVE:
        folder = _FOLDERS_TO_REMOVE.pop()
        if not (folder.exists() and if_main_process()):
            continue
        for cited in keep:
            where = Path(cited).absolute()
            if where.is_file() and folder in where.parents:
                target = _free_name(folder.parent / f"{folder.name}.{where.name}")
                shutil.move(str(where), str(target))
                moved[Path(cited)] = target
        logging.shutdown()  # SpeechBrain's log file handler holds <folder>/log.txt open
        shutil.rmtree(folder, ignore_errors=True)
    return moved


def _free_name(path: Path) -> Path:
    """``path``, or ``<stem>.<n><suffix>`` with the first free ``n``: an earlier run's file is not overwritten."""
    number = 1
    candidate = path
    while candidate.exists():
        candidate = path.with_name(f"{path.stem}.{number}{path.suffix}")
        number += 1
    return candidate


# ---------------------------------------------------------------------------------------------------
# --help from the YAML
# ---------------------------------------------------------------------------------------------------


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def yaml_help(hparams_file) -> str:
    """The YAML's top-level keys, each with its default and its one-line comment (:func:`yaml_lines`).

    Keys starting with ``__`` (SpeechBrain's internal ones) are left out.
    """
    rows = [
        (f"--{key}", "(required)" if value == "!PLACEHOLDER" else value, comment)
        for key, value, comment in yaml_lines(hparams_file)
        if not key.startswith("__")
    ]
    width = max((len(row[0]) for row in rows), default=0)
    value_width = min(max((len(row[1]) for row in rows), default=0), 34)
    body = [
        f"  {name:<{width}}  {_clip(value, value_width):<{value_width}}  {comment}".rstrip()
        for name, value, comment in rows
    ]
    return f"Keys of {hparams_file} (override any with --key=value):\n" + "\n".join(body)


def usage_lines(doc: str | None) -> str:
    """The ``Usage`` block of a recipe's docstring (its indented command lines)."""
    lines = (doc or "").splitlines()
    for start, line in enumerate(lines):
        if line.strip().lower().startswith("usage"):
            block = []
            for text in lines[start + 1 :]:
                if text.strip() and not text.startswith(" "):
                    break
                block.append(text)
            commands = [text.strip() for text in block if text.strip()]
            if commands:
                return "usage:\n" + "\n".join(f"  {text}" for text in commands)
    return ""


def recipe_help(script: str, argv: list[str], doc: str | None = None, extra: str = "") -> str:
    """The ``--help`` text: the keys of the YAML on the command line (or the recipe's default one), then usage."""
    given = [argument for argument in argv if not argument.startswith("-")]
    hparams_file = given[0] if given and Path(given[0]).is_file() else None
    if hparams_file is None and script in DEFAULT_HPARAMS:
        hparams_file = str(REPO / DEFAULT_HPARAMS[script])
    parts = [doc.strip().splitlines()[0]] if doc else []
    if hparams_file:
        parts.append(yaml_help(hparams_file))
        named = {key: value for key, value, _ in yaml_lines(hparams_file) if key == "eval_hparams"}
        if named:  # a training YAML: its evaluation YAML's keys are its command line's too
            from .evaluation.system import evaluation_hparams_file

            parts.append(yaml_help(evaluation_hparams_file(hparams_file, named)))
    if extra:
        parts.append(extra.strip())
    parts.append(
        "Also: SpeechBrain's run options (--device=cuda:0, --precision=fp16, --distributed_backend=...), "
        f"and {TRACEBACK_FLAG} to show the traceback of a user error."
    )
    usage = usage_lines(doc)
    if usage:
        parts.append(usage)
    return "\n\n".join(parts) + "\n"


# ---------------------------------------------------------------------------------------------------
# Entry points
# ---------------------------------------------------------------------------------------------------


def run_main(main, argv: list[str] | None = None, *, extra_help: str = "") -> None:
    """A recipe's ``__main__``: ``--help``, then ``main(argv)`` with user errors as one line (exit 2)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    module = sys.modules.get(main.__module__)
    script = Path(getattr(module, "__file__", None) or sys.argv[0]).name
    if any(flag in argv for flag in HELP_FLAGS):
        sys.stdout.write(recipe_help(script, argv, getattr(module, "__doc__", None), extra_help))
        sys.exit(0)
    _FOLDERS_TO_REMOVE.clear()
    show_traceback = TRACEBACK_FLAG in argv
    argv = [argument for argument in argv if argument != TRACEBACK_FLAG]
    try:
        try:
            outcome = main(argv)
        except OSError as error:
            if error.errno not in DISK_FULL or isinstance(error, UserError):
                raise
            raise disk_full(error.filename, error) from error  # a full disk anywhere: one line too
    except UserError as error:
        release_held()
        if not show_traceback:
            logger.debug(
                "user error", exc_info=True
            )  # before the removal: the log file may be in a new folder
        # A full disk keeps the run's folders: what was written completely is the rerun's head start.
        moved = (
            {} if getattr(error, "keep_new_folders", False) else _remove_new_folders(keep=error.cited_files)
        )
        if show_traceback:
            raise
        message = user_message(error)
        for cited, now in moved.items():  # the message says where the file it cites is now
            message = message.replace(str(cited), str(now))
        print(f"{script}: error: {message}", file=sys.stderr)
        sys.exit(USAGE_EXIT_STATUS)
    finally:
        release_held()
    sys.exit(outcome if isinstance(outcome, int) else 0)


def run_recipe(name: str, argv: list[str] | None = None) -> None:
    """Run ``recipes/<file>`` as ``__main__`` with ``argv`` (default: this process's arguments).

    A relative hyperparameter file (``hparams/...``) that is not found from the current
    directory is taken from the checkout.
    """
    script = REPO / "recipes" / RECIPES[name]
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
    main.__doc__ = f"Console script ``segreconcat-{name}``: runs ``recipes/{RECIPES[name]}``."
    return main


align = _entry("align")
anonymize = _entry("anonymize")
demo = _entry("demo")
evaluate = _entry("evaluate")
grid = _entry("grid")
orders = _entry("orders")
train = _entry("train")
trials = _entry("trials")

"""The one mark of a user's mistake: :class:`UserError`.

``cli.run_main`` prints a UserError as one line and exits 2; any other exception is a bug and keeps its
traceback. :func:`cite` names a file the run wrote, which is kept when the run's new folders are removed.

>>> class LayoutError(UserError, FileNotFoundError):
...     pass
>>> isinstance(LayoutError("x"), (UserError, OSError))
True
>>> user_message(KeyError("no alignment for utterance 'u1'"))
"no alignment for utterance 'u1'"
>>> [path.name for path in cite(LayoutError("see /out/problems.txt"), "/out/problems.txt").cited_files]
['problems.txt']
"""

from __future__ import annotations

from pathlib import Path

USAGE_EXIT_STATUS = 2  # a command-line mistake, as argparse exits


class UserError(Exception):
    """Mixin (or base) of the errors a user fixes by changing input files or options."""

    #: Files the message names, which must outlive the run (see :func:`cite`).
    cited_files: tuple[Path, ...] = ()


class OptionError(UserError, ValueError):
    """An option has a value outside what it allows; the message names key, value and allowed values."""


def option_error(error, values, source="") -> OptionError:
    """A pydantic ``ValidationError`` of an options schema as one :class:`OptionError` line.

    >>> from typing import Literal
    >>> from pydantic import BaseModel, ConfigDict, ValidationError
    >>> class Options(BaseModel):
    ...     model_config = ConfigDict(extra="forbid", strict=True)
    ...     mode: Literal["a", "b"]
    >>> try:
    ...     Options.model_validate({"mode": "c"})
    ... except ValidationError as error:
    ...     print(option_error(error, {"mode": "c"}))
    option mode: 'c': input should be 'a' or 'b'
    """
    problems = {}
    for item in error.errors():
        # A validator's own message as written; a model validator's (no key) names its keys itself.
        text = str(item["ctx"]["error"]) if item["type"] == "value_error" else item["msg"]
        text = text[0].lower() + text[1:]
        # A nested key by its path (configurations.<name>.seeds); a union's member names are not keys; a
        # refused mapping key (its location ends in "[key]") is shown itself, under its mapping's path.
        loc = list(item["loc"])
        refused_key = loc[-2] if loc[-1:] == ["[key]"] and len(loc) > 1 else None
        loc = loc[:-2] if refused_key is not None else loc
        names, value = [], values
        for part in loc:
            if isinstance(part, str) and isinstance(value, dict) and part in value:
                names.append(part)
                value = value[part]
        if not names and loc:
            names, value = [loc[0]], values.get(loc[0])
        value = refused_key if refused_key is not None else value
        key = ".".join(map(str, names)) if names else text
        if key in problems:
            continue
        if item["type"] == "missing":
            problems[key] = f"{key} is missing: give it in the YAML or as --{key}=..."
            continue
        where = "".join(f" item {part}" for part in loc[1:] if isinstance(part, int))
        problems[key] = f"{key}: {value!r}:{where} {text}" if item["loc"] else text
    prefix = f"{source}: " if source else ""
    if len(problems) == 1:
        return OptionError(f"{prefix}option {next(iter(problems.values()))}")
    return OptionError(
        f"{prefix}{len(problems)} option values are not allowed: " + "; ".join(problems.values())
    )


class MissingInputError(UserError, FileNotFoundError):
    """A file or folder the options or an input list name is not there; the message names it."""


def cite(error: BaseException, *paths) -> BaseException:
    """Mark the files ``error``'s message names as ones to keep (returns ``error``, to raise it)."""
    error.cited_files = tuple(Path(path) for path in paths if path is not None)
    return error


def user_message(error: BaseException) -> str:
    """The error's message as written (a KeyError's ``str`` would add quotes around it)."""
    if isinstance(error, KeyError) and len(error.args) == 1:
        return str(error.args[0])
    return str(error)

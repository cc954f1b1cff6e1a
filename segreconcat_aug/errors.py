"""The one mark of a user's mistake: :class:`UserError`.

An error class that also derives from :class:`UserError` says "the input or the options are
wrong, and the message names what and how to fix it". The recipes' entry point
(:func:`segreconcat_aug.cli.run_main`) prints such an error as one line, without a traceback,
and exits with status 2; any other exception is a bug and keeps its traceback.

>>> class LayoutError(UserError, FileNotFoundError):
...     pass
>>> isinstance(LayoutError("x"), (UserError, OSError))
True
>>> user_message(KeyError("no alignment for utterance 'u1'"))
"no alignment for utterance 'u1'"
"""

from __future__ import annotations

USAGE_EXIT_STATUS = 2  # a command-line mistake, as argparse exits


class UserError(Exception):
    """Mixin (or base) of the errors a user fixes by changing input files or options."""


def user_message(error: BaseException) -> str:
    """The error's message as written (a KeyError's ``str`` would add quotes around it)."""
    if isinstance(error, KeyError) and len(error.args) == 1:
        return str(error.args[0])
    return str(error)

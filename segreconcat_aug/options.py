"""One check of every option's value, run by each recipe before it writes anything.

:data:`OPTION_RULES` is a table: YAML key -> what it may hold (a set of values or a
range). :func:`validate_options` checks the keys of a loaded hyperparameter mapping
that the table knows (others pass: a recipe's own keys are its business) and raises
ONE :class:`OptionError` listing every bad value with the values allowed. A recipe
calls it right after loading its YAML, so ``--strategy=bogus`` or ``--crossfade=-0.01``
is refused before ``train.csv``, ``dev.csv`` or any output folder exists.

Recipes call :func:`validate_hparams_file` on the YAML file and its overrides BEFORE
loading it: loading instantiates the YAML's objects, and SpeechBrain's checkpointer
creates its folder as it is built.

A new option is one line of the table.

Example
-------
>>> validate_options({"mode": "concat", "crossfade": 0.005, "eval_subsets": ["dev_f"], "unknown_key": 1})
>>> validate_options({"eval_subsets": ["dev_x"]})
Traceback (most recent call last):
...
segreconcat_aug.options.OptionError: option eval_subsets: ['dev_x'] is not a non-empty list, each item one of 'dev_f', 'dev_m', 'test_f', 'test_m'
>>> validate_options({"mode": "bogus", "crossfade": -0.01})
Traceback (most recent call last):
...
segreconcat_aug.options.OptionError: 2 option values are not allowed:
  mode: 'bogus' is not one of 'concat', 'rearranged', 'none'
  crossfade: -0.01 is not a number >= 0
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from .errors import UserError


class OptionError(UserError, ValueError):
    """An option has a value outside what it allows; the message names key, value and allowed values."""


@dataclass(frozen=True)
class Rule:
    """What one option may hold: ``choices`` (a tuple, or a callable giving it), or a number range.

    ``integer`` asks for a whole number; ``low``/``high`` bound it, excluded when
    ``low_open``/``high_open``. ``optional`` also accepts ``None`` (YAML ``null``).
    """

    choices: tuple | Callable[[], tuple] | None = None
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    integer: bool = False
    optional: bool = False
    each: bool = False  # the value is a list, and each item must be allowed

    def allowed(self) -> str:
        """The allowed values, in words."""
        if self.choices is not None:
            choices = self.choices() if callable(self.choices) else self.choices
            text = "one of " + ", ".join(repr(choice) for choice in choices)
        else:
            kind = "an integer" if self.integer else "a number"
            bounds = []
            if self.low is not None:
                bounds.append(f"{'>' if self.low_open else '>='} {self.low:g}")
            if self.high is not None:
                bounds.append(f"{'<' if self.high_open else '<='} {self.high:g}")
            text = kind + (" " + " and ".join(bounds) if bounds else "")
        if self.each:
            text = f"a non-empty list, each item {text}"
        return text + (" (or null)" if self.optional else "")

    def accepts(self, value) -> bool:
        if value is None:
            return self.optional
        if self.each:
            if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)) or not value:
                return False
            item = Rule(self.choices, self.low, self.high, self.low_open, self.high_open, self.integer)
            return all(item.accepts(element) for element in value)
        if self.choices is not None:
            choices = self.choices() if callable(self.choices) else self.choices
            # bool is an int in Python: True must not pass for 1 (nor 1 for True).
            return any(
                value == choice and isinstance(value, bool) == isinstance(choice, bool) for choice in choices
            )
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        if self.integer and not float(value).is_integer():
            return False
        if not math.isfinite(value):
            return False
        if self.low is not None and (value < self.low or (self.low_open and value == self.low)):
            return False
        if self.high is not None and (value > self.high or (self.high_open and value == self.high)):
            return False
        return True


def one_of(*choices, optional: bool = False, each: bool = False) -> Rule:
    return Rule(choices=tuple(choices), optional=optional, each=each)


def number(*, ge=None, gt=None, le=None, lt=None, integer: bool = False, optional: bool = False) -> Rule:
    return Rule(
        low=gt if gt is not None else ge,
        high=lt if lt is not None else le,
        low_open=gt is not None,
        high_open=lt is not None,
        integer=integer,
        optional=optional,
    )


FLAG = one_of(True, False)


def _strategies() -> tuple:
    from .strategies import STRATEGIES, _load_builtin_strategies

    _load_builtin_strategies()
    return tuple(sorted(STRATEGIES))


def _modes() -> tuple:
    from .augment import MODES

    return MODES


def _missing_policies() -> tuple:
    from .augment import MISSING_POLICIES

    return MISSING_POLICIES


def _rr_redraws() -> tuple:
    from .augment import RR_REDRAWS

    return RR_REDRAWS


def _sr_contexts() -> tuple:
    from .similarity import SR_CONTEXTS

    return SR_CONTEXTS


def _segment_policies() -> tuple:
    from .segments import SEGMENT_POLICIES

    return SEGMENT_POLICIES


#: Every option a recipe checks before writing: key -> allowed values. Keys absent from a
#: recipe's YAML are not checked there. One line per option.
OPTION_RULES: dict[str, Rule] = {
    # SegReConcat (training, order computation)
    "mode": Rule(choices=_modes),
    "strategy": Rule(choices=_strategies),
    "segment_policy": Rule(choices=_segment_policies),
    "missing_alignment": Rule(choices=_missing_policies),
    "crossfade": number(ge=0),
    "min_leading_silence": number(ge=0),
    "rr_redraw": Rule(choices=_rr_redraws),
    "sr_context": Rule(choices=_sr_contexts),
    "sr_pad_normalize": FLAG,
    # Data preparation and the audio check (segreconcat_aug.audio_check)
    "sentence_len": number(gt=0),
    "dev_ratio": number(gt=0, lt=1),
    "min_chunk_amplitude": number(ge=0, lt=1, optional=True),
    "sample_rate": number(gt=0, integer=True),
    "check_workers": number(ge=1, integer=True),
    "check_audio": one_of("header", "full"),
    "bad_audio": one_of("error", "skip"),
    "min_audio_duration": number(ge=0),
    "silence_db": number(le=0),
    "read_errors": one_of("skip", "error"),
    "decoded_cache_mb": number(ge=0),
    # Training
    "specaug": FLAG,
    "number_of_epochs": number(ge=1, integer=True),
    "patience": number(ge=0, integer=True),
    "warmup": number(ge=0, integer=True),
    "batch_size": number(ge=1, integer=True),
    "num_workers": number(ge=0, integer=True),
    "lr": number(gt=0),
    "base_lr": number(gt=0),
    "step_size": number(ge=1, integer=True),
    "weight_decay": number(ge=0),
    "ckpt_interval_minutes": number(ge=0),
    "skip_prep": FLAG,
    "evaluate_after_training": FLAG,
    # Evaluation (segreconcat_aug.evaluation)
    "eval_subsets": one_of("dev_f", "dev_m", "test_f", "test_m", each=True),
    "eval_p_targets": Rule(low=0, high=1, low_open=True, high_open=True, each=True),
    "eval_normalize_wave": FLAG,
    "eval_trim_zeros": FLAG,
    "eval_bootstrap_resamples": number(ge=0, integer=True),
    "eval_bootstrap_seed": number(ge=0, integer=True),
    "bootstrap_resamples": number(ge=0, integer=True),
    "bootstrap_seed": number(ge=0, integer=True),
    "eval_score_norm": one_of("s-norm", "as-norm", optional=True),
    "eval_batch_size": number(ge=1, integer=True),
    "eval_max_batch_seconds": number(gt=0, optional=True),
    "eval_cohort_utts_per_speaker": number(ge=1, integer=True),
    "eval_cohort_top_k": number(ge=1, integer=True, optional=True),
    "eval_skip_missing_trials": FLAG,
    "eval_allow_pipes": FLAG,
    "eval_save_every": number(ge=1, integer=True),
    "eval_det_plot": FLAG,
    # Alignment and order jobs
    "backend": one_of(
        "faster-whisper", "openai-whisper", "transformers", "whisper", "pocketsphinx", "mfa", "ctm"
    ),
    "dtype": one_of("auto", "float32", "float16", "bfloat16"),
    "whisper_backend": one_of("faster-whisper", "transformers"),
    "oov": one_of("add", "skip"),
    "allow_pipes": FLAG,
    "resample": FLAG,
    "allow_failures": FLAG,
    "merge": FLAG,
    "fsync": FLAG,
    "num_beams": number(ge=1, integer=True),
    "encoder_batch_size": number(ge=1, integer=True),
}


def validate_options(hparams: Mapping, rules: Mapping[str, Rule] | None = None) -> None:
    """Check every key of ``hparams`` that ``rules`` (default :data:`OPTION_RULES`) knows.

    Raises
    ------
    OptionError
        Naming each bad key, its value and the values allowed (all at once).
    """
    rules = OPTION_RULES if rules is None else rules
    problems = [
        f"{key}: {hparams[key]!r} is not {rule.allowed()}"
        for key, rule in rules.items()
        if key in hparams and not rule.accepts(hparams[key])
    ]
    if len(problems) == 1:
        raise OptionError(f"option {problems[0]}")
    if problems:
        raise OptionError(f"{len(problems)} option values are not allowed:\n  " + "\n  ".join(problems))


def validate_hparams_file(hparams_file, overrides=None) -> Mapping:
    """:func:`validate_options` on a YAML file with its overrides, without loading it; the values checked.

    The references are resolved (``!ref``) and the text parsed without building
    any object (``!new:``, ``!apply:`` stay tags), so nothing is created or
    written, not even the checkpointer's folder.
    """
    import ruamel.yaml
    from hyperpyyaml import resolve_references

    with open(hparams_file, encoding="utf-8") as handle:
        text = resolve_references(handle, overrides or {}).getvalue()
    values = ruamel.yaml.YAML(typ="rt").load(text)
    if not isinstance(values, Mapping):
        return {}
    validate_options(values)
    return values

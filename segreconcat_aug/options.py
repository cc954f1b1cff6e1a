"""One check of every option's value, run by each recipe before it writes anything.

:data:`OPTION_RULES` is a table: YAML key -> what it may hold (a set of values or a
range). :func:`validate_options` checks the keys of a loaded hyperparameter mapping
that the table knows (others pass: a recipe's own keys are its business) and raises
ONE :class:`OptionError` listing every bad value with the values allowed, on one line. A recipe
calls it right after loading its YAML, so ``--strategy=bogus`` or ``--crossfade=-0.01``
is refused before ``train.csv``, ``dev.csv`` or any output folder exists.

Recipes call :func:`validate_hparams_file` on the YAML file and its overrides BEFORE
loading it: loading instantiates the YAML's objects, and SpeechBrain's checkpointer
creates its folder as it is built. It also refuses a required key left out (``!PLACEHOLDER``),
paths that cannot be what they name (:data:`PATH_RULES`: an output folder that is a file, or
lies under one) and values that do not fit together (:data:`CONSTRAINTS`: the ECAPA-TDNN's layer lists).

A new option is one line of the table.

Example
-------
>>> validate_options({"mode": "concat", "crossfade": 0.005, "unknown_key": 1})
>>> validate_options({"channels": [16, 0, 16]})
Traceback (most recent call last):
...
segreconcat_aug.errors.OptionError: option channels: [16, 0, 16] is not a non-empty list, each item an integer >= 1
>>> validate_options({"mode": "bogus", "crossfade": -0.01})
Traceback (most recent call last):
...
segreconcat_aug.errors.OptionError: 2 option values are not allowed: mode: 'bogus' is not one of 'concat', 'rearranged', 'none'; crossfade: -0.01 is not a number >= 0
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from .errors import OptionError


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
    test: Callable[[object], bool] | None = None  # any other rule, described by ``text``
    text: str = ""

    def allowed(self) -> str:
        """The allowed values, in words."""
        if self.test is not None:
            text = self.text
        elif self.choices is not None:
            choices = self.choices() if callable(self.choices) else self.choices
            text = "one of " + ", ".join(repr(choice) for choice in choices)
        else:
            kind = "an integer" if self.integer else "a number"
            bounds = []
            if self.low is not None:
                bounds.append(f"{'>' if self.low_open else '>='} {self._bound(self.low)}")
            if self.high is not None:
                bounds.append(f"{'<' if self.high_open else '<='} {self._bound(self.high)}")
            text = kind + (" " + " and ".join(bounds) if bounds else "")
        if self.each:
            text = f"a non-empty list, each item {text}"
        return text + (" (or null)" if self.optional else "")

    def _bound(self, value) -> str:
        return str(int(value)) if self.integer and float(value).is_integer() else f"{value:g}"

    def accepts(self, value) -> bool:
        if value is None:
            return self.optional
        if self.each:
            if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)) or not value:
                return False
            item = Rule(self.choices, self.low, self.high, self.low_open, self.high_open, self.integer)
            return all(item.accepts(element) for element in value)
        if self.test is not None:
            return bool(self.test(value))
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
#: Seeds seed numpy's global generator too (SpeechBrain's seed_everything), which takes 0 .. 2**32 - 1.
SEED = number(ge=0, le=2**32 - 1, integer=True)


def _is_shard(value) -> bool:
    match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", str(value))
    return bool(match) and int(match.group(1)) < int(match.group(2))


SHARD = Rule(test=_is_shard, text="'i/n' with 0 <= i < n, e.g. 0/4", optional=True)


def _strategies() -> tuple:
    from .method.strategies import STRATEGIES, _load_builtin_strategies

    _load_builtin_strategies()
    return tuple(sorted(STRATEGIES))


def _modes() -> tuple:
    from .method.augment import MODES

    return MODES


def _missing_policies() -> tuple:
    from .method.augment import MISSING_POLICIES

    return MISSING_POLICIES


def _rr_redraws() -> tuple:
    from .method.augment import RR_REDRAWS

    return RR_REDRAWS


def _sr_contexts() -> tuple:
    from .method.similarity import SR_CONTEXTS

    return SR_CONTEXTS


def _segment_policies() -> tuple:
    from .method.segments import SEGMENT_POLICIES

    return SEGMENT_POLICIES


def _protocols() -> tuple:
    from .data.protocols import PROTOCOLS

    return tuple(PROTOCOLS)


def _subsets() -> tuple:
    from .data.protocols import ALL_SUBSETS

    return ALL_SUBSETS


#: Every option a recipe checks before writing: key -> allowed values. Keys absent from a
#: recipe's YAML are not checked there. One line per option.
OPTION_RULES: dict[str, Rule] = {
    # SegReConcat (training, order computation)
    "seed": SEED,
    "mode": Rule(choices=_modes),
    "train_systems": Rule(
        optional=True,
        test=lambda value: (
            isinstance(value, (list, tuple))
            and bool(value)
            and all(isinstance(name, str) and name.strip() and "/" not in name for name in value)
        ),
        text="a non-empty list of system names (e.g. [T10-2, B4])",
    ),
    "train_system_caches": Rule(
        optional=True,
        test=lambda value: (
            isinstance(value, Mapping)
            and all(
                isinstance(entry, Mapping) and set(entry) <= {"alignment_cache", "orders_cache"}
                for entry in value.values()
            )
        ),
        text="a mapping of pooled system -> {alignment_cache: <file>, orders_cache: <file>}",
    ),
    "strategy": Rule(choices=_strategies),
    "segment_policy": Rule(choices=_segment_policies),
    "missing_alignment": Rule(choices=_missing_policies),
    "crossfade": number(ge=0),
    "min_leading_silence": number(ge=0),
    "rr_redraw": Rule(choices=_rr_redraws),
    "sr_context": Rule(choices=_sr_contexts),
    "sr_pad_normalize": FLAG,
    # The protocol (segreconcat_aug.data.protocols; check_protocol_options checks language and subsets against it)
    "protocol": Rule(choices=_protocols),
    # Data preparation and the audio check (segreconcat_aug.data.audio_check)
    "sentence_len": number(gt=0),
    "dev_ratio": number(gt=0, lt=1),
    "train_fraction": number(gt=0, le=1),
    "train_subsample": one_of("utterances", "speakers"),
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
    # Fine-tuning and presets (segreconcat_aug.training.init_from, .presets)
    "init_freeze_epochs": number(ge=0, integer=True),
    "optimizer": one_of("adam", "adamw"),
    "step_size_epochs": number(gt=0, optional=True),
    "aam_margin": number(ge=0),
    "aam_scale": number(gt=0),
    # The grid's bootstrap (its eval_* keys: hparams/evaluate.yaml, segreconcat_aug.evaluation.system)
    "bootstrap_resamples": number(ge=0, integer=True),
    "bootstrap_seed": SEED,
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
    "shard": SHARD,
    # McAdams anonymization (segreconcat_aug.anonymizers.mcadams)
    "audio_format": one_of("wav", "flac", "ogg", "opus"),
    "alpha_low": number(gt=0),
    "alpha_high": number(gt=0),
    "compression_level": number(ge=0, le=1, optional=True),
    # Model (the ECAPA-TDNN; how its lists fit together: CONSTRAINTS)
    "channels": Rule(low=1, integer=True, each=True),
    "kernel_sizes": Rule(low=1, integer=True, each=True),
    "dilations": Rule(low=1, integer=True, each=True),
    "attention_channels": number(ge=1, integer=True),
    "lin_neurons": number(ge=1, integer=True),
    "n_mels": number(ge=1, integer=True),
    "se_channels": number(ge=1, integer=True),
    "res2net_scale": number(ge=1, integer=True),
    # The ecapa_ssl attacker (hparams/ecapa_ssl_segreconcat.yaml, docs/attackers-ssl.md)
    "ssl_input": one_of("same_window", "file_window"),
    "trusted": FLAG,
}

#: What a path option must be: a folder, a file, or either (a JSON Lines file or a folder of parts). A path
#: that cannot be one (a folder that is a file, a file that is a folder, anything under a file) is refused
#: before anything is written. Only what exists is looked at: a path that is not there yet is fine.
PATH_RULES: dict[str, str] = {
    "output_folder": "folder",
    "save_folder": "folder",
    "export_folder": "folder",
    "audio_check_cache": "file",
    "train_log": "file",
    "train_annotation": "file",
    "valid_annotation": "file",
    "output": "file or folder",
    "merge_output": "file",
    "orders_cache": "file or folder",
    "wavlm_checkpoint": "file",
}


def path_problem(key: str, value, kind: str) -> tuple[str, Path] | None:
    """Why ``value`` cannot be the ``kind`` of path ``key`` asks for, and the path in the way (None: it can).

    >>> path_problem("output_folder", "/no/such/place", "folder") is None
    True
    >>> path_problem("audio_check_cache", "/", "file")[0]
    "audio_check_cache: '/' is a folder, not a file: give a file path"
    """
    if value is None or not isinstance(value, (str, os.PathLike)) or not str(value):
        return None
    path = Path(value)
    shown = repr(str(value))
    if path.exists():
        if kind == "folder" and not path.is_dir():
            return f"{key}: {shown} is a file, not a folder: give a folder path (or move the file away)", path
        if kind == "file" and path.is_dir():
            return f"{key}: {shown} is a folder, not a file: give a file path", path
        return None
    for parent in path.absolute().parents:
        if parent.exists():
            if not parent.is_dir():
                return f"{key}: {shown} lies under {str(parent)!r}, which is a file, not a folder", parent
            return None
    return None


def path_problems(hparams: Mapping) -> list[str]:
    """:func:`path_problem` of each :data:`PATH_RULES` key; a path in the way is named once (by the first key).

    The YAML derives paths from others (``save_folder`` is ``<output_folder>/save``): a file given as
    ``output_folder`` is named once, as ``output_folder``.
    """
    problems, in_the_way = [], set()
    for key, kind in PATH_RULES.items():
        found = path_problem(key, hparams[key], kind) if key in hparams else None
        if found is not None and found[1].absolute() not in in_the_way:
            in_the_way.add(found[1].absolute())
            problems.append(found[0])
    return problems


def _ecapa_lists(values: Mapping) -> str | None:
    lists = {key: values.get(key) for key in ("channels", "kernel_sizes", "dilations")}
    if not all(isinstance(value, (list, tuple)) for value in lists.values()):
        return None  # not this model's YAML, or the items' own rule names the problem
    lengths = {key: len(value) for key, value in lists.items()}
    if len(set(lengths.values())) > 1 or lengths["channels"] < 3:
        return (
            f"channels, kernel_sizes and dilations: one entry per ECAPA-TDNN layer, the same number each "
            f"(at least 3), got {lengths['channels']}, {lengths['kernel_sizes']} and {lengths['dilations']}"
        )
    scale = values.get("res2net_scale", _RES2NET_SCALE)
    inner = [
        c for c in lists["channels"][1:-1] if isinstance(c, int) and isinstance(scale, int) and c % scale
    ]
    if inner:
        return (
            f"channels: {list(lists['channels'])}: the SE-Res2Net layers (all but the first and last) need "
            f"a multiple of {scale} channels (res2net_scale), got {inner}"
        )
    return None


_RES2NET_SCALE = 8  # SpeechBrain's ECAPA_TDNN default, which the ECAPA YAML keeps


def _waveform_model(values: Mapping) -> str | None:
    """A YAML whose model embeds waveforms (``embed_batch``: ecapa_ssl) has no feature step to SpecAugment,
    and needs its WavLM file."""
    if "embed_batch" not in values:
        return None
    if values.get("specaug") is True:
        return (
            "specaug: True, but this YAML's model embeds waveforms (embed_batch: WavLM + fbank), so SpecAugment "
            "has no feature step to work on: set specaug False"
        )
    if "wavlm_checkpoint" in values and not values.get("wavlm_checkpoint") and not values.get("init_from"):
        return (
            "wavlm_checkpoint: null: give --wavlm_checkpoint=<exp/asv_ssl/WavLM-Large.pt> "
            "(or --init_from=<exp/asv_ssl>, which sets it)"
        )
    return None


def _alpha_range(values: Mapping) -> str | None:
    low, high = values.get("alpha_low"), values.get("alpha_high")
    if isinstance(low, (int, float)) and isinstance(high, (int, float)) and low > high:
        return f"alpha_low ({low}) is above alpha_high ({high}): the McAdams coefficient is drawn from [low, high]"
    return None


#: How values of several keys must fit together: each check names the problem, or returns None.
CONSTRAINTS: list[Callable[[Mapping], str | None]] = [_ecapa_lists, _alpha_range, _waveform_model]


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
    if not problems:  # the values that fit together and name possible paths, once each is allowed
        problems = [problem for check in CONSTRAINTS if (problem := check(hparams))]
        problems += path_problems(hparams)
    if len(problems) == 1:
        raise OptionError(f"option {problems[0]}")
    if problems:
        raise OptionError(f"{len(problems)} option values are not allowed: " + "; ".join(problems))


def validate_hparams_file(hparams_file, overrides=None) -> Mapping:
    """:func:`validate_options` on a YAML file with its overrides, without loading it; the values checked.

    The references are resolved (``!ref``) and the text parsed without building
    any object (``!new:``, ``!apply:`` stay tags), so nothing is created or
    written, not even the checkpointer's folder. A required key (``!PLACEHOLDER``)
    that is not given is an :class:`OptionError` naming it.
    """
    import ruamel.yaml
    from hyperpyyaml import resolve_references

    with open(hparams_file, encoding="utf-8") as handle:
        try:
            text = resolve_references(handle, overrides or {}).getvalue()
        except ValueError as err:
            required = re.fullmatch(r"'(.+)' is a !PLACEHOLDER and must be replaced\.", str(err))
            if required is None:
                raise
            key = required.group(1)
            raise OptionError(
                f"--{key} is required: {hparams_file} has no default for it (--help says what it is)"
            ) from None
    values = ruamel.yaml.YAML(typ="rt").load(text)
    if not isinstance(values, Mapping):
        return {}
    validate_options(values)
    from .data.protocols import check_protocol_options

    check_protocol_options(values)
    return values

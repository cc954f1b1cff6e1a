"""One pydantic schema per recipe YAML, checked before anything is written.

:func:`validate_hparams_file` resolves a YAML's references with the command line's overrides, without
building any object (loading would: SpeechBrain's checkpointer makes its folder), and checks the values
against the recipe's schema: a bad value, a required key left out (``!PLACEHOLDER``), a path that cannot
be what it names, values that do not fit together. Keys a schema does not name pass (the YAML's objects).
The evaluation YAML's schema: :class:`segreconcat_aug.evaluation.system.EvaluationOptions`.

>>> validate_values(MixedTrialsOptions, {"seed": 2**32, "output_folder": "out"})
Traceback (most recent call last):
...
segreconcat_aug.errors.OptionError: option seed: 4294967296: input should be less than or equal to 4294967295
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, model_validator

from .data.hparams_text import hparams_text
from .data.protocols import PROTOCOLS, check_protocol_options
from .errors import OptionError, option_error

Seed = Annotated[int, Field(ge=0, le=2**32 - 1)]  # numpy's global seed range (SpeechBrain's seed_everything)
Count = Annotated[int, Field(ge=1)]
Natural = Annotated[int, Field(ge=0)]
Positive = Annotated[float, Field(gt=0)]
NonNegative = Annotated[float, Field(ge=0)]
Layers = Annotated[list[Count], Field(min_length=1)]
Protocol = Literal[tuple(PROTOCOLS)]
# What a path option must be; only what exists is looked at (a path not there yet is fine).
Folder = Annotated[str | None, "folder"]
File = Annotated[str | None, "file"]
FileOrFolder = Annotated[str | None, "file or folder"]


def one_of(names: Callable[[], tuple]) -> AfterValidator:
    """A choice among ``names()``, read when checked (the method's registries import numba)."""

    def check(value):
        allowed = tuple(names())
        if value not in allowed:
            listed = ", ".join(map(repr, allowed[:-1])) + f" or {allowed[-1]!r}"
            raise ValueError(f"input should be {listed}")
        return value

    return AfterValidator(check)


def _strategies() -> tuple:
    from .method.strategies import STRATEGIES, _load_builtin_strategies

    _load_builtin_strategies()
    return tuple(sorted(STRATEGIES))


def _method(name: str) -> Callable[[], tuple]:
    def names() -> tuple:
        from .method import augment, segments, similarity

        return next(getattr(m, name) for m in (augment, segments, similarity) if hasattr(m, name))

    return names


def _shard(value):
    match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", str(value))
    if value is not None and not (match and int(match.group(1)) < int(match.group(2))):
        raise ValueError("input should be 'i/n' with 0 <= i < n, e.g. 0/4")
    return value


Shard = Annotated[str | None, AfterValidator(_shard)]


def _system_name(value: str) -> str:
    if not value.strip() or "/" in value:
        raise ValueError("input should be a system name, e.g. [T10-2, B4]")
    return value


def path_problem(key: str, value, kind: str) -> tuple[str, Path] | None:
    """Why ``value`` cannot be the ``kind`` of path ``key`` asks for, and the path in the way (None: it can).

    >>> path_problem("audio_check_cache", "/", "file")[0]
    "audio_check_cache: '/' is a folder, not a file: give a file path"
    """
    if not value:
        return None
    path, shown = Path(value), repr(str(value))
    if path.exists():
        if kind == "folder" and not path.is_dir():
            return f"{key}: {shown} is a file, not a folder: give a folder path (or move the file away)", path
        if kind == "file" and path.is_dir():
            return f"{key}: {shown} is a folder, not a file: give a file path", path
        return None
    parent = next(parent for parent in path.absolute().parents if parent.exists())
    if not parent.is_dir():
        return f"{key}: {shown} lies under {str(parent)!r}, which is a file, not a folder", parent
    return None


class RecipeOptions(BaseModel):
    """What a recipe's YAML keys may hold; the YAML's other keys (its objects) pass unchecked."""

    model_config = ConfigDict(extra="allow", strict=True)

    @model_validator(mode="after")
    def _paths_can_be_what_they_name(self):
        # A path in the way is named once, by the first key (save_folder is <output_folder>/save).
        problems, in_the_way = [], set()
        for key, field in type(self).model_fields.items():
            kind = next((m for m in field.metadata if isinstance(m, str)), None)
            found = path_problem(key, getattr(self, key), kind) if kind else None
            if found and found[1].absolute() not in in_the_way:
                in_the_way.add(found[1].absolute())
                problems.append(found[0])
        if problems:
            raise ValueError("; ".join(problems))
        return self


class TrainingOptions(RecipeOptions):
    """hparams/ecapa_segreconcat.yaml and hparams/ecapa_ssl_segreconcat.yaml (their comments say what each is)."""

    seed: Seed
    protocol: Protocol
    train_systems: (
        Annotated[list[Annotated[str, AfterValidator(_system_name)]], Field(min_length=1)] | None
    ) = None
    train_system_caches: dict[str, dict[Literal["alignment_cache", "orders_cache"], Any]] | None = None
    skip_prep: bool
    sample_rate: Count
    sentence_len: Positive
    check_audio: Literal["header", "full"]
    bad_audio: Literal["error", "skip"]
    min_audio_duration: NonNegative
    silence_db: Annotated[float, Field(le=0)]
    read_errors: Literal["skip", "error"]
    decoded_cache_mb: NonNegative
    dev_ratio: Annotated[float, Field(gt=0, lt=1)]
    train_fraction: Annotated[float, Field(gt=0, le=1)]
    train_subsample: Literal["utterances", "speakers"]
    min_chunk_amplitude: Annotated[float, Field(ge=0, lt=1)] | None
    check_workers: Count
    strategy: Annotated[str, one_of(_strategies)]
    mode: Annotated[str, one_of(_method("MODES"))]
    segment_policy: Annotated[str, one_of(_method("SEGMENT_POLICIES"))]
    crossfade: NonNegative
    min_leading_silence: NonNegative
    rr_redraw: Annotated[str, one_of(_method("RR_REDRAWS"))]
    sr_pad_normalize: bool
    missing_alignment: Annotated[str, one_of(_method("MISSING_POLICIES"))]
    sr_context: Annotated[str, one_of(_method("SR_CONTEXTS"))]
    specaug: bool
    number_of_epochs: Count
    patience: Natural
    select_by: Literal["dev_loss", "dev_eer"]
    warmup: Natural
    batch_size: Count
    num_workers: Natural
    lr: Positive
    base_lr: Positive
    step_size: Count
    weight_decay: NonNegative
    optimizer: Literal["adam", "adamw"]
    aam_margin: NonNegative
    aam_scale: Positive
    step_size_epochs: Positive | None
    trusted: bool
    init_freeze_epochs: Natural
    ckpt_interval_minutes: NonNegative
    evaluate_after_training: bool
    n_mels: Count
    channels: Layers
    kernel_sizes: Layers
    dilations: Layers
    attention_channels: Count
    lin_neurons: Count
    se_channels: Count | None = None
    res2net_scale: Count = 8  # SpeechBrain's ECAPA_TDNN default, which the ECAPA YAML keeps
    ssl_input: Literal["same_window", "file_window"] | None = None
    output_folder: Folder
    save_folder: Folder
    export_folder: Folder
    train_log: File
    train_annotation: File
    valid_annotation: File
    audio_check_cache: File
    orders_cache: FileOrFolder
    wavlm_checkpoint: File = None

    @model_validator(mode="after")
    def _ecapa_lists_fit(self):
        lengths = [len(self.channels), len(self.kernel_sizes), len(self.dilations)]
        if len(set(lengths)) > 1 or lengths[0] < 3:
            raise ValueError(
                "channels, kernel_sizes and dilations: one entry per ECAPA-TDNN layer, the same number each "
                "(at least 3), got {}, {} and {}".format(*lengths)
            )
        inner = [c for c in self.channels[1:-1] if c % self.res2net_scale]
        if inner:
            raise ValueError(
                f"channels: {self.channels}: the SE-Res2Net layers (all but the first and last) need "
                f"a multiple of {self.res2net_scale} channels (res2net_scale), got {inner}"
            )
        return self

    @model_validator(mode="after")
    def _waveform_model_has_no_specaugment(self):
        if self.ssl_input is not None and self.specaug:
            raise ValueError(
                "specaug: True, but this YAML's model embeds waveforms (embed_batch: WavLM + fbank), so "
                "SpecAugment has no feature step to work on: set specaug False"
            )
        return self


class TrainingRunOptions(TrainingOptions):
    """A training run: a model on waveforms needs its WavLM (an evaluation reads it from the export)."""

    @model_validator(mode="after")
    def _wavlm_named(self):
        extra = self.model_extra or {}
        if self.ssl_input is not None and not self.wavlm_checkpoint and not extra.get("init_from"):
            raise ValueError(
                "wavlm_checkpoint: null: give --wavlm_checkpoint=<exp/asv_ssl/WavLM-Large.pt> "
                "(or --init_from=<exp/asv_ssl>, which sets it)"
            )
        return self


class SlurmOptions(RecipeOptions):
    """``launcher`` and, under ``launcher: slurm``, the ``slurm_*`` resources, each as submitit takes it."""

    launcher: Literal["local", "slurm"] = "local"
    slurm_additional_parameters: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _slurm_parameters_as_submitit_takes_them(self):
        if self.launcher != "slurm":
            return self
        import submitit

        from .data.jobs import SLURM_KEYS, slurm_parameters

        executor = submitit.AutoExecutor(folder=".", cluster="slurm")  # writes nothing
        for key in SLURM_KEYS:
            try:
                executor.update_parameters(**slurm_parameters({key: getattr(self, key, None)}))
            except (AssertionError, TypeError, ValueError) as error:
                raise ValueError(f"{key}: {str(error).splitlines()[0]}") from None
        return self


class ArrayOptions(SlurmOptions):
    """A job over utterances: one ``--shard`` here (``launcher: local``), or ``--shards`` as a SLURM job array."""

    launcher: Literal["local", "slurm"]
    shard: Shard
    shards: Count | None

    @model_validator(mode="after")
    def _shard_or_shards(self):
        if self.launcher == "local" and self.shards is not None:
            raise ValueError(
                f"shards: {self.shards} is the size of a --launcher=slurm job array; here give --shard=i/n "
                "(or torchrun)"
            )
        if self.launcher == "slurm" and self.shards is None:
            raise ValueError("shards: --launcher=slurm needs the number of array tasks, e.g. --shards=8")
        if self.launcher == "slurm" and self.shard is not None:
            raise ValueError(
                "shard: --shard=i/n runs one shard here; --launcher=slurm runs all --shards: give one of them"
            )
        return self


class AlignOptions(ArrayOptions):
    """hparams/align.yaml."""

    backend: Literal[
        "faster-whisper", "openai-whisper", "transformers", "whisper", "pocketsphinx", "mfa", "ctm"
    ]
    dtype: Literal["auto", "float32", "float16", "bfloat16"]
    oov: Literal["add", "skip"]
    allow_pipes: bool
    resample: bool
    allow_failures: bool
    merge: bool
    fsync: bool
    batch_size: Count
    num_beams: Count
    output: FileOrFolder
    merge_output: File


class OrdersOptions(ArrayOptions):
    """hparams/orders.yaml."""

    protocol: Protocol
    strategy: Annotated[str, one_of(_strategies)]
    segment_policy: Annotated[str, one_of(_method("SEGMENT_POLICIES"))]
    min_leading_silence: NonNegative
    sr_context: Annotated[str, one_of(_method("SR_CONTEXTS"))]
    whisper_backend: Literal["faster-whisper", "transformers"]
    dtype: Literal["auto", "float32", "float16", "bfloat16"]
    allow_pipes: bool
    resample: bool
    allow_failures: bool
    batch_size: Count
    encoder_batch_size: Count
    orders_cache: FileOrFolder


class AnonymizeOptions(RecipeOptions):
    """hparams/anonymize.yaml."""

    seed: Seed
    allow_pipes: bool
    sample_rate: Count
    audio_format: Literal["wav", "flac", "ogg", "opus"]
    alpha_low: Positive
    alpha_high: Positive
    compression_level: Annotated[float, Field(ge=0, le=1)] | None
    output_folder: Folder

    @model_validator(mode="after")
    def _alpha_range(self):
        if self.alpha_low > self.alpha_high:
            raise ValueError(
                f"alpha_low ({self.alpha_low}) is above alpha_high ({self.alpha_high}): the McAdams "
                "coefficient is drawn from [low, high]"
            )
        return self


class MixedTrialsOptions(RecipeOptions):
    """hparams/mixed_trials.yaml."""

    seed: Seed
    output_folder: Folder


def _distinct(values: list) -> list:
    if len(set(values)) != len(values):
        raise ValueError("input should list each seed once")
    return values


def _variable_name(name: str) -> str:
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise ValueError(f"{name!r} is not a variable name")
    return name


def _privacy_column(name: str) -> str:
    from .evaluation.metrics import OPERATING_POINTS
    from .evaluation.privacy import INTERVAL_METRICS

    allowed = [metric for metric in (*INTERVAL_METRICS, *OPERATING_POINTS) if metric != "top5"]
    if name not in allowed and not (name.startswith("top") and name[3:].isdigit()):
        raise ValueError(f"input should be a privacy metric ({', '.join(allowed)}, top<k>)")
    return name


def _environment_value(value):
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ValueError("input should be a string or a number")
    return value


Seeds = Annotated[list[Seed], Field(min_length=1), AfterValidator(_distinct)] | None


class ConfigurationOptions(BaseModel):
    """One entry of a grid's ``configurations`` (its other keys: :mod:`segreconcat_aug.grid.runner`)."""

    model_config = ConfigDict(extra="allow", strict=True)
    seeds: Seeds = None


class GridOptions(SlurmOptions):
    """hparams/grid.yaml, demo.yaml and attackers.yaml (how they fit together: :func:`segreconcat_aug.grid.load_grid`)."""

    protocol: Protocol | None = None
    configurations: dict[str, ConfigurationOptions | None]
    seeds: Seeds = None
    parallel: Count | None = 1
    environment: (
        dict[
            Annotated[str, AfterValidator(_variable_name)], Annotated[Any, AfterValidator(_environment_value)]
        ]
        | None
    ) = None
    privacy_columns: list[Annotated[str, AfterValidator(_privacy_column)]] | None = []
    bootstrap_resamples: Natural
    bootstrap_seed: Seed = 0
    output_folder: Folder
    dast_folder: Folder = None  # hparams/attackers.yaml
    dast_rows: list[str] = []

    @model_validator(mode="after")
    def _dast_rows_have_a_folder(self):
        if self.dast_rows and not self.dast_folder:
            raise ValueError(
                f"dast_rows: {self.dast_rows} fine-tune DAST's Stage II model, but dast_folder is null: "
                "give --dast_folder=<folder with embedding_model.ckpt (or epoch_N.ckpt) and WavLM-Large.pt>"
            )
        return self


def validate_values(schema: type[RecipeOptions], values: Mapping, source: str = "") -> None:
    """Check ``values`` against ``schema``: one :class:`OptionError` naming every bad key, its value and the fix."""
    try:
        schema.model_validate(dict(values))
    except ValidationError as error:
        raise option_error(error, values, source) from None
    check_protocol_options(values)


def validate_hparams_file(hparams_file, overrides, schema: type[RecipeOptions], source: str = "") -> dict:
    """The values of a YAML file with its overrides, references resolved and nothing built, checked against
    ``schema`` (errors begin with ``source``); a required key (``!PLACEHOLDER``) left out is an
    :class:`OptionError` naming it."""
    import ruamel.yaml
    from hyperpyyaml import resolve_references

    try:
        text = resolve_references(hparams_text(hparams_file), overrides or {}).getvalue()
    except ValueError as err:
        required = re.fullmatch(r"'(.+)' is a !PLACEHOLDER and must be replaced\.", str(err))
        if required is None:
            raise
        raise OptionError(
            f"--{required.group(1)} is required: {hparams_file} has no default for it (--help says what it is)"
        ) from None
    values = dict(ruamel.yaml.YAML(typ="rt").load(text) or {})
    validate_values(schema, values, source)
    return values

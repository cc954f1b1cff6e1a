"""The checks before a training writes anything (:func:`check_before_training`): a rerun that would resume
the folder's checkpoints is the same run, what it reads is there, and the checkpoint it resumes is whole."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import ruamel.yaml
from speechbrain.utils.checkpoints import CKPT_PREFIX, METAFNAME, Checkpointer
from speechbrain.utils.distributed import get_rank

from segreconcat_aug.data.jsonl_files import cache_files
from segreconcat_aug.data.vpac import VPACLayoutError, training_folder
from segreconcat_aug.errors import UserError
from segreconcat_aug.method.strategies import get_strategy
from segreconcat_aug.training.pooled import check_pooled_caches, pooled_systems

EXPERIMENT_HPARAMS = "hyperparams.yaml"  # what SpeechBrain's experiment folder keeps of the YAML as run
RUN_SETTING_KEYS = tuple(
    "protocol language system mode strategy segment_policy crossfade min_leading_silence rr_redraw "
    "sr_pad_normalize sr_context orders_variant missing_alignment specaug seed sentence_len dev_ratio "
    "train_fraction train_subsample min_chunk_amplitude sample_rate channels attention_channels lin_neurons "
    "batch_size lr base_lr step_size weight_decay optimizer aam_margin aam_scale init_freeze_epochs "
    "train_systems step_size_epochs".split()
)
# Keys left out at these values: the folders of runs made before the keys existed resume as before.
RUN_SETTING_DEFAULTS = {
    "protocol": "vpac2024",
    "language": None,
    "train_fraction": 1.0,
    "train_subsample": "utterances",
    "optimizer": "adam",
    "aam_margin": 0.2,
    "aam_scale": 30,
    "init_freeze_epochs": 0,
    "train_systems": None,
    "step_size_epochs": None,
}


class RunSettingsError(UserError, ValueError):
    """The output folder holds a run made with other settings (or settings that cannot be read)."""


def has_checkpoints(save_folder) -> bool:
    """Whether ``save_folder`` holds a SpeechBrain checkpoint: training has started there."""
    return any(Path(save_folder).glob(f"{CKPT_PREFIX}+*/{METAFNAME}"))


def run_settings(hparams) -> dict:
    """The values of :data:`RUN_SETTING_KEYS` this run has, as JSON gives them back (pooled systems in any
    order are the same data)."""
    values = {
        key: hparams[key]
        for key in RUN_SETTING_KEYS
        if key in hparams and not (key in RUN_SETTING_DEFAULTS and hparams[key] == RUN_SETTING_DEFAULTS[key])
    }
    if hparams.get("step_size_epochs"):  # step_size is then derived from the training set's size
        values.pop("step_size", None)
    if values.get("train_systems"):
        values["train_systems"] = sorted(set(pooled_systems(hparams.get("system"), values["train_systems"])))
    return json.loads(json.dumps(values, default=str))


def saved_hparams(folder) -> dict | None:
    """The YAML's values the run in ``folder`` started with (SpeechBrain's ``hyperparams.yaml``); None if unreadable."""
    try:
        values = ruamel.yaml.YAML(typ="rt").load(
            (Path(folder) / EXPERIMENT_HPARAMS).read_text(encoding="utf-8")
        )
    except (OSError, ruamel.yaml.YAMLError, UnicodeDecodeError):
        return None
    return values if isinstance(values, dict) else None


def check_run_settings(hparams) -> None:
    """Refuse to resume the checkpoints of a run made with other :data:`RUN_SETTING_KEYS` than ``hparams``
    (the YAML's values), as the ``hyperparams.yaml`` SpeechBrain saved in the output folder gives them."""
    folder = Path(hparams["output_folder"])
    save_folder = hparams.get("save_folder") or folder / "save"
    if (get_rank() or 0) != 0 or not has_checkpoints(save_folder):
        return
    saved = saved_hparams(folder)
    if saved is None:
        raise RunSettingsError(
            f"{folder / EXPERIMENT_HPARAMS}: missing or damaged, so nothing says which settings made the checkpoints in "
            f"{save_folder}, and a rerun would resume them: choose another --output_folder, or remove "
            f"{save_folder} to start over"
        )
    then, now = run_settings(saved), run_settings(hparams)
    changed = [key for key in sorted(then.keys() | now.keys()) if then.get(key) != now.get(key)]
    init_then, init_now = saved.get("init_from"), hparams.get("init_from")
    if init_now and not (
        init_then and (not Path(init_then).is_dir() or Path(init_then).resolve() == Path(init_now).resolve())
    ):
        changed.append("init_from")
        then["init_from"], now["init_from"] = init_then, init_now
    if changed:
        differences = "; ".join(f"{key}: {then.get(key)!r} there, {now.get(key)!r} now" for key in changed)
        raise RunSettingsError(
            f"{hparams['output_folder']} holds a run made with other settings ({differences}), and a "
            "rerun into it would resume that run's checkpoints: choose another --output_folder (or "
            "--experiment_name), or remove that folder to start over"
        )


def check_training_inputs(hparams) -> None:
    """What the run reads is there: the system's training folder (unless ``skip_prep``), and SegReConcat's
    alignment cache (and, for AR/SR, order cache), each pooled system's too."""
    systems = (
        [] if hparams.get("skip_prep") else pooled_systems(hparams["system"], hparams.get("train_systems"))
    )
    for system in systems:
        try:  # a pooled system without a training set, before its missing caches are blamed
            training_folder(
                hparams["data_folder"],
                system,
                hparams.get("folder_overrides"),
                protocol=hparams.get("protocol"),
                language=hparams.get("language"),
            )
        except VPACLayoutError as err:
            if system == systems[0]:
                raise
            raise VPACLayoutError(f"train_systems: system {system!r} has no training set: {err}") from None
    if hparams["mode"] == "none":
        return
    cache_files(hparams["alignment_cache"], what="alignment cache (recipes/align.py writes it)")
    if get_strategy(hparams["strategy"]).precomputed:
        cache_files(hparams["orders_cache"], what="order cache (recipes/compute_orders.py writes it)")
    check_pooled_caches(hparams)


class CheckpointDamagedError(UserError, RuntimeError):
    """The checkpoint a rerun would resume from is cut or unreadable (e.g. the machine stopped mid-save)."""


def damaged_file_problem(path) -> str | None:
    """Why a checkpoint file cannot be whole (empty, or a ``torch.save`` zip cut short), or None."""
    size = Path(path).stat().st_size
    if size == 0:
        return "empty"
    with open(path, "rb") as handle:
        if handle.read(4) == b"PK\x03\x04" and not zipfile.is_zipfile(handle):
            return f"cut short ({size} bytes; a torch.save file whose end is missing)"
    return None


def check_resumable_checkpoint(hparams) -> None:
    """The checkpoint a rerun resumes from (SpeechBrain's latest in ``save_folder``) must be whole."""
    save_folder = Path(hparams["save_folder"])
    if not has_checkpoints(save_folder):
        return
    way_out = (
        f"move that checkpoint folder out of {save_folder} to resume from the one before it, or train into "
        "a new output_folder"
    )
    try:  # the folder's own listing is what SpeechBrain recovers from: its newest checkpoint
        latest = Checkpointer(save_folder).find_checkpoint()
    except Exception as err:  # a cut CKPT.yaml: ruamel's or SpeechBrain's parse errors
        reason = " ".join(str(err).split())[:160]
        raise CheckpointDamagedError(
            f"{save_folder}: a checkpoint's {METAFNAME} cannot be read ({type(err).__name__}: {reason}); "
            + way_out
        ) from None
    for path in sorted(latest.paramfiles.values()) if latest is not None else []:
        problem = damaged_file_problem(path) if Path(path).is_file() else "missing"
        if problem:
            raise CheckpointDamagedError(
                f"{path}: {problem}, in {latest.path.name}, the checkpoint this run would resume from; "
                + way_out
            )


def check_before_training(hparams) -> None:
    """The three checks, before anything is written (``recipes/train.py`` gives them the YAML's values)."""
    check_run_settings(hparams)
    check_training_inputs(hparams)
    check_resumable_checkpoint(hparams)

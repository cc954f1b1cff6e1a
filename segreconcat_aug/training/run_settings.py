"""What makes a training run the run it is, kept beside its checkpoints and checked before a rerun.

A rerun into the same output folder resumes its checkpoints, so it must not differ in any of
:data:`RUN_SETTING_KEYS` (``experiment_name`` names only strategy, mode, SpecAugment and seed).
Once a checkpoint exists, the run's settings are written to ``<output_folder>/run_settings.json``
(:func:`save_run_settings`); :func:`check_run_settings` refuses a rerun made with other ones, before
anything is written. :func:`check_training_inputs` checks, as early, that what the run reads is there,
and :func:`check_resumable_checkpoint` that the checkpoint a rerun resumes from is whole.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import ruamel.yaml
from speechbrain.utils.checkpoints import CKPT_PREFIX, METAFNAME, Checkpointer

from segreconcat_aug.data.jsonl_files import cache_files
from segreconcat_aug.data.vpac import training_folder
from segreconcat_aug.errors import UserError
from segreconcat_aug.method.strategies import get_strategy
from segreconcat_aug.training.pooled import check_pooled_caches

RUN_SETTINGS_FILE = "run_settings.json"
EXPERIMENT_HPARAMS = "hyperparams.yaml"  # what SpeechBrain's experiment folder keeps of the YAML as run
RUN_SETTING_KEYS = (
    "protocol",
    "language",
    "system",
    "mode",
    "strategy",
    "segment_policy",
    "crossfade",
    "min_leading_silence",
    "rr_redraw",
    "sr_pad_normalize",
    "sr_context",
    "orders_variant",
    "missing_alignment",
    "specaug",
    "seed",
    "sentence_len",
    "dev_ratio",
    "train_fraction",
    "train_subsample",
    "min_chunk_amplitude",
    "sample_rate",
    "channels",
    "attention_channels",
    "lin_neurons",
    "batch_size",
    "lr",
    "base_lr",
    "step_size",
    "weight_decay",
    "optimizer",
    "aam_margin",
    "aam_scale",
    "init_from",
    "init_freeze_epochs",
    "train_systems",
    "step_size_epochs",
)
# Keys left out of run_settings.json at these values, so the folders of runs made before the keys
# existed (VPAC 2024, no language) resume as before.
RUN_SETTING_DEFAULTS = {
    "protocol": "vpac2024",
    "language": None,
    "train_fraction": 1.0,
    "train_subsample": "utterances",
    "optimizer": "adam",
    "aam_margin": 0.2,
    "aam_scale": 30,
    "init_from": None,
    "init_freeze_epochs": 0,
    "train_systems": None,
    "step_size_epochs": None,
}


class RunSettingsError(UserError, ValueError):
    """The output folder holds a run made with other method settings (or settings that cannot be read)."""


def has_checkpoints(save_folder) -> bool:
    """Whether ``save_folder`` holds a SpeechBrain checkpoint: training has started there.

    >>> import tempfile
    >>> has_checkpoints(tempfile.mkdtemp())
    False
    """
    return any(Path(save_folder).glob(f"{CKPT_PREFIX}+*/{METAFNAME}"))


def run_settings(hparams) -> dict:
    """The values of :data:`RUN_SETTING_KEYS` this run has, as JSON gives them back.

    >>> run_settings({"mode": "concat", "protocol": "vpac2024", "channels": (8, 24), "lr": 0.01, "epochs": 9})
    {'mode': 'concat', 'channels': [8, 24], 'lr': 0.01}
    """
    values = {
        key: hparams[key]
        for key in RUN_SETTING_KEYS
        if key in hparams and not (key in RUN_SETTING_DEFAULTS and hparams[key] == RUN_SETTING_DEFAULTS[key])
    }
    if hparams.get("step_size_epochs"):  # step_size is then derived from the training set's size
        values.pop("step_size", None)
    return json.loads(json.dumps(values, default=str))


def saved_run_settings(folder) -> dict | None:
    """The settings the run in ``folder`` was made with: its ``run_settings.json``, else the
    ``hyperparams.yaml`` (the YAML with its overrides) SpeechBrain saved when that run started; None if neither.

    Raises
    ------
    RunSettingsError
        ``run_settings.json`` is there but is not a JSON object.
    """
    folder = Path(folder)
    path = folder / RUN_SETTINGS_FILE
    if path.is_file():
        try:
            saved = json.loads(path.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError) as err:
            saved = err
        if not isinstance(saved, dict):
            raise RunSettingsError(
                f"{path}: damaged (not a JSON object of settings), so the checkpoints in {folder} cannot be "
                "checked against this run's settings: restore the file, or delete it to check them against "
                f"{folder / EXPERIMENT_HPARAMS} instead"
            )
        return saved
    yaml_file = folder / EXPERIMENT_HPARAMS
    if yaml_file.is_file():
        try:
            values = ruamel.yaml.YAML(typ="rt").load(yaml_file.read_text(encoding="utf-8"))
        except (ruamel.yaml.YAMLError, UnicodeDecodeError):
            return None
        if isinstance(values, dict):
            return run_settings(values)
    return None


def check_run_settings(hparams) -> None:
    """Refuse to resume a run of the same folder made with other settings (named, with the fix).

    Parameters
    ----------
    hparams : dict
        The YAML's values (:func:`segreconcat_aug.options.validate_hparams_file`, read before
        anything is loaded or written) or the loaded YAML. A folder without checkpoints has no
        run to resume, so its settings never refuse a rerun.

    Raises
    ------
    RunSettingsError
        The folder's checkpoints were made with other settings, or nothing says which.
    """
    folder = Path(hparams["output_folder"])
    save_folder = hparams.get("save_folder") or folder / "save"
    if not has_checkpoints(save_folder):
        return
    saved = saved_run_settings(folder)
    if saved is None:
        raise RunSettingsError(
            f"{save_folder} holds checkpoints, but neither {RUN_SETTINGS_FILE} nor {EXPERIMENT_HPARAMS} in "
            f"{folder} says which settings made them, and a rerun would resume them: choose another "
            f"--output_folder, or remove {save_folder} to start over"
        )
    current = run_settings(hparams)
    changed = [key for key in sorted(saved.keys() | current.keys()) if saved.get(key) != current.get(key)]
    if changed:
        differences = "; ".join(
            f"{key}: {saved.get(key)!r} there, {current.get(key)!r} now" for key in changed
        )
        raise RunSettingsError(
            f"{hparams['output_folder']} holds a run made with other settings ({differences}), and a "
            "rerun into it would resume that run's checkpoints: choose another --output_folder (or "
            "--experiment_name), or remove that folder to start over"
        )


def save_run_settings(output_folder, settings: dict) -> None:
    """Write ``settings`` (:func:`run_settings`) into the output folder (a later rerun is checked against them)."""
    folder = Path(output_folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / RUN_SETTINGS_FILE).write_text(json.dumps(settings, indent=2), encoding="utf-8")


def check_training_inputs(hparams) -> None:
    """What the run reads is there, before anything is written: the system's training folder (unless
    ``skip_prep``), and the alignment cache (and, for AR/SR, the order cache) SegReConcat reads; with
    ``train_systems``, each pooled system's too (:func:`segreconcat_aug.training.pooled.check_pooled_caches`)."""
    if not hparams.get("skip_prep"):
        training_folder(
            hparams["data_folder"],
            hparams["system"],
            hparams.get("folder_overrides"),
            protocol=hparams.get("protocol"),
            language=hparams.get("language"),
        )
    if hparams["mode"] == "none":
        return
    cache_files(hparams["alignment_cache"], what="alignment cache (recipes/align.py writes it)")
    if get_strategy(hparams["strategy"]).precomputed:
        cache_files(hparams["orders_cache"], what="order cache (recipes/compute_orders.py writes it)")
    check_pooled_caches(hparams)


class CheckpointDamagedError(UserError, RuntimeError):
    """The checkpoint a rerun would resume from is cut or unreadable (e.g. the machine stopped mid-save)."""


def damaged_file_problem(path) -> str | None:
    """Why a checkpoint file cannot be whole (empty; a ``torch.save`` zip cut short), or None.

    Cheap: a zip's directory sits at its end, so a file cut anywhere fails to open; the data is
    not decompressed. Files in other formats are only checked for being empty.

    >>> import tempfile, torch
    >>> path = Path(tempfile.mkdtemp()) / "model.ckpt"
    >>> torch.save({"w": torch.zeros(1000)}, path)
    >>> damaged_file_problem(path) is None
    True
    >>> _ = path.write_bytes(path.read_bytes()[:2000])
    >>> damaged_file_problem(path)
    'cut short (2000 bytes; a torch.save file whose end is missing)'
    """
    path = Path(path)
    size = path.stat().st_size
    if size == 0:
        return "empty"
    with open(path, "rb") as handle:
        zipped = handle.read(4) == b"PK\x03\x04"
    if zipped:
        try:
            with zipfile.ZipFile(path) as archive:
                archive.infolist()
        except (zipfile.BadZipFile, OSError, EOFError):
            return f"cut short ({size} bytes; a torch.save file whose end is missing)"
    return None


def check_resumable_checkpoint(hparams) -> None:
    """The checkpoint a rerun resumes from (SpeechBrain's latest in ``save_folder``) must be whole.

    Without this check a checkpoint cut by a crash mid-save stops the rerun deep in
    ``Brain.fit`` with a traceback; this names the file and the way out. Nothing is removed:
    the user decides which checkpoint to drop.
    """
    save_folder = Path(hparams["save_folder"])
    if not has_checkpoints(save_folder):
        return
    # The folder's own listing is what SpeechBrain recovers from (its newest checkpoint, every .ckpt in it).
    checkpointer = Checkpointer(save_folder)
    way_out = (
        f"move that checkpoint folder out of {save_folder} to resume from the one before it, or train into "
        "a new output_folder"
    )
    try:
        latest = checkpointer.find_checkpoint()
    except Exception as err:  # a cut CKPT.yaml: ruamel's or SpeechBrain's parse errors
        reason = " ".join(str(err).split())[:160]
        raise CheckpointDamagedError(
            f"{save_folder}: a checkpoint's {METAFNAME} cannot be read ({type(err).__name__}: {reason}); "
            + way_out
        ) from None
    if latest is None:
        return
    for path in sorted(latest.paramfiles.values()):
        problem = damaged_file_problem(path) if Path(path).is_file() else "missing"
        if problem:
            raise CheckpointDamagedError(
                f"{path}: {problem}, in {latest.path.name}, the checkpoint this run would resume from; "
                + way_out
            )


def check_before_training(hparams) -> None:
    """Before anything is written: never resume another run's checkpoints
    (:func:`check_run_settings`), every input the run reads is there (:func:`check_training_inputs`),
    and the checkpoint it resumes from is whole (:func:`check_resumable_checkpoint`)."""
    check_run_settings(hparams)
    check_training_inputs(hparams)
    check_resumable_checkpoint(hparams)

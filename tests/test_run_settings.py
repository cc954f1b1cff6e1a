"""segreconcat_aug.training.run_settings: a rerun into a folder with checkpoints must be the same run."""

import time

import pytest
import ruamel.yaml
import torch
from speechbrain.utils.checkpoints import Checkpointer

from segreconcat_aug.errors import MissingInputError, UserError
from segreconcat_aug.training.run_settings import (
    EXPERIMENT_HPARAMS,
    CheckpointDamagedError,
    RunSettingsError,
    check_resumable_checkpoint,
    check_run_settings,
    check_training_inputs,
    has_checkpoints,
    run_settings,
)

VALUES = {
    "system": "T8-5",
    "mode": "concat",
    "strategy": "random",
    "crossfade": 0.0,
    "seed": 1986,
    "lr": 0.01,
}


def _write_hparams(folder, values):
    """The ``hyperparams.yaml`` SpeechBrain saves when a run starts: the YAML's values as run."""
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / EXPERIMENT_HPARAMS, "w", encoding="utf-8") as handle:
        ruamel.yaml.YAML().dump({**values, "number_of_epochs": 10, "data_folder": "/data"}, handle)


def _started_run(tmp_path, values=VALUES):
    """An output folder whose training has started: a checkpoint and the YAML it was run with."""
    out = tmp_path / "out"
    Checkpointer(out / "save", {"model": torch.nn.Linear(1, 1)}).save_checkpoint(meta={"loss": 1.0})
    _write_hparams(out, values)
    return {**values, "output_folder": str(out)}


def test_a_changed_setting_is_refused_naming_it_and_a_resume_is_not(tmp_path):
    run = _started_run(tmp_path)
    assert has_checkpoints(tmp_path / "out" / "save")
    check_run_settings({**run, "number_of_epochs": 20, "patience": 9})  # more epochs: the same run resumed
    with pytest.raises(
        RunSettingsError, match=r"lr: 0\.01 there, 0\.02 now.*choose another --output_folder"
    ) as err:
        check_run_settings({**run, "lr": 0.02})
    assert isinstance(err.value, UserError) and "\n" not in str(err.value)
    with pytest.raises(RunSettingsError, match="specaug: None there, True now"):
        check_run_settings({**run, "specaug": True})  # a key the saved run did not have


def test_without_checkpoints_nothing_is_refused(tmp_path):
    out = tmp_path / "out"
    _write_hparams(out, VALUES)  # a run that stopped before training
    check_run_settings({**VALUES, "lr": 0.5, "output_folder": str(out)})
    check_run_settings({**VALUES, "output_folder": str(tmp_path / "new")})


def test_keys_at_their_old_default_are_left_out_so_older_folders_resume(tmp_path):
    assert "protocol" not in run_settings({**VALUES, "protocol": "vpac2024", "language": None})
    assert run_settings({**VALUES, "protocol": "vpc2026-track2", "language": "de"})["language"] == "de"
    run = _started_run(tmp_path)  # saved without protocol and language
    check_run_settings({**run, "protocol": "vpac2024", "language": None})
    with pytest.raises(RunSettingsError, match="protocol: None there, 'vpc2026-track1' now"):
        check_run_settings({**run, "protocol": "vpc2026-track1"})


@pytest.mark.parametrize("damaged", [None, "mode: [conc", "- 1\n- 2\n", "\udcff"])
def test_a_missing_or_damaged_hyperparams_yaml_is_refused_naming_it(tmp_path, damaged):
    run = _started_run(tmp_path)
    path = tmp_path / "out" / EXPERIMENT_HPARAMS
    if damaged is None:
        path.unlink()
    else:
        path.write_bytes(damaged.encode("utf-8", errors="surrogateescape"))
    with pytest.raises(RunSettingsError, match=f"^{path}: missing or damaged.*remove .*save to start over$"):
        check_run_settings(run)


def test_the_same_pooled_systems_in_another_order_resume(tmp_path):
    run = _started_run(tmp_path, {**VALUES, "system": "T10-2", "train_systems": ["B4", "B5"]})
    check_run_settings({**run, "train_systems": ["B5", "T10-2", "B4"]})
    with pytest.raises(
        RunSettingsError, match=r"train_systems: \['B4', 'B5', 'T10-2'\] there, \['B4', 'T10-2'\]"
    ):
        check_run_settings({**run, "train_systems": ["B4"]})
    with pytest.raises(RunSettingsError, match="train_systems: .* there, None now"):
        check_run_settings({**run, "train_systems": None})  # one system, not pooled: another manifest


def test_init_from_given_another_way_moved_or_left_out_resumes(tmp_path, monkeypatch):
    hub = tmp_path / "hub"
    hub.mkdir()
    run = _started_run(tmp_path, {**VALUES, "init_from": str(hub)})
    monkeypatch.chdir(tmp_path)
    check_run_settings({**run, "init_from": "hub"})  # the same folder, relative
    check_run_settings({**run, "init_from": None})  # left out: the checkpoints are resumed
    other = tmp_path / "other"
    other.mkdir()
    with pytest.raises(RunSettingsError, match=rf"init_from: '{hub}' there, '{other}' now"):
        check_run_settings({**run, "init_from": str(other)})
    hub.rename(tmp_path / "moved")
    check_run_settings({**run, "init_from": str(tmp_path / "moved")})
    # A fine-tuning asked of a folder whose run started from scratch would silently resume that run.
    scratch = _started_run(tmp_path / "scratch")
    with pytest.raises(RunSettingsError, match=rf"init_from: None there, '{other}' now"):
        check_run_settings({**scratch, "init_from": str(other)})


def test_under_torchrun_rank_0_checks_the_settings(tmp_path, monkeypatch):
    run = _started_run(tmp_path)
    monkeypatch.setenv("RANK", "1")
    check_run_settings({**run, "lr": 0.02})
    monkeypatch.setenv("RANK", "0")
    with pytest.raises(RunSettingsError, match="lr: 0.01 there, 0.02 now"):
        check_run_settings({**run, "lr": 0.02})


def test_training_inputs_are_checked_before_anything_is_written(tmp_path):
    values = {
        "skip_prep": True,
        "mode": "concat",
        "strategy": "random",
        "alignment_cache": str(tmp_path / "a.jsonl"),
    }
    with pytest.raises(
        MissingInputError, match=r"a\.jsonl: alignment cache \(recipes/align\.py writes it\) not found"
    ):
        check_training_inputs(values)
    check_training_inputs({**values, "mode": "none"})  # the baseline reads no alignment
    (tmp_path / "a.jsonl").write_text("")
    check_training_inputs(values)
    with pytest.raises(MissingInputError, match=r"o\.jsonl: order cache \(recipes/compute_orders\.py"):
        check_training_inputs({**values, "strategy": "acoustic", "orders_cache": str(tmp_path / "o.jsonl")})
    assert list(tmp_path.iterdir()) == [tmp_path / "a.jsonl"]


def _checkpointed_run(tmp_path):
    """A save folder with two checkpoints, as SpeechBrain's Checkpointer writes them."""
    save = tmp_path / "save"
    modules = {"embedding_model": torch.nn.Linear(30, 30), "classifier": torch.nn.Linear(4, 4)}
    checkpointer = Checkpointer(save, recoverables=modules)
    older = checkpointer.save_checkpoint(meta={"loss": 2.0})
    time.sleep(0.01)  # SpeechBrain resumes from the newest
    newer = checkpointer.save_checkpoint(meta={"loss": 1.0})
    return save, older, newer


def test_a_cut_checkpoint_is_named_before_the_rerun_resumes_from_it(tmp_path):
    save, older, newer = _checkpointed_run(tmp_path)
    check_resumable_checkpoint({"save_folder": str(save)})  # whole: nothing to say
    victim = newer.path / "embedding_model.ckpt"
    victim.write_bytes(victim.read_bytes()[:500])  # the machine stopped mid-save
    with pytest.raises(CheckpointDamagedError) as refused:
        check_resumable_checkpoint({"save_folder": str(save)})
    message = str(refused.value)
    assert isinstance(refused.value, UserError) and "\n" not in message
    assert message.startswith(f"{victim}: cut short (500 bytes") and newer.path.name in message
    assert "move that checkpoint folder out of" in message
    assert victim.stat().st_size == 500 and older.path.is_dir()  # nothing removed: the user decides
    # Moved away as the message says: the rerun resumes from the one before.
    newer.path.rename(tmp_path / newer.path.name)
    check_resumable_checkpoint({"save_folder": str(save)})
    # A cut CKPT.yaml is named too, not a parser's traceback.
    (older.path / "CKPT.yaml").write_text("end-of-epoch: [tr")
    with pytest.raises(CheckpointDamagedError, match=r"save: a checkpoint's CKPT.yaml cannot be read"):
        check_resumable_checkpoint({"save_folder": str(save)})

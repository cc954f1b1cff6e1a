"""A training killed right after an epoch's checkpoint and rerun trains and exports what the uninterrupted
run does, digit for digit: the checkpoints hold the random state (segreconcat_aug.training.random_state)."""

import json
from pathlib import Path

import pytest
import torch
from test_ecapa_ssl_recipe import _argv as ssl_argv
from test_train import _args as ecapa_args
from test_vpc2026 import train_recipe
from tiny_models import tiny_challenge_folder
from vpc2026_fixture import build_track1_layout


class Killed(BaseException):
    """The process dying after a checkpoint (no handler of the recipe's catches it)."""


def _killed_after_first_checkpoint(monkeypatch, argv):
    """Run ``argv`` until epoch 1 is checkpointed and its line is in ``epochs.jsonl``, then stop it there."""
    log_epoch = train_recipe.training.log_epoch

    def log_then_die(*args, **kwargs):
        log_epoch(*args, **kwargs)
        raise Killed

    with monkeypatch.context() as patch:
        patch.setattr(train_recipe.training, "log_epoch", log_then_die)
        with pytest.raises(Killed):
            train_recipe.main(argv)


def _outcome(out: Path) -> tuple[list, dict]:
    """The epochs' records (times left out) and every tensor of the export."""
    epochs = []
    for line in (out / "epochs.jsonl").read_text().splitlines():
        record = json.loads(line)
        train = {key: value for key, value in record["train"].items() if not key.endswith("per_s")}
        epochs.append({"epoch": record["epoch"], "train": train, "valid": record["valid"]})
    export = {
        path.name: torch.load(path, map_location="cpu")
        for path in sorted((out / "export").glob("*.ckpt"))
        if path.name != "label_encoder.ckpt"  # text
    }
    return epochs, export


def _assert_same(resumed: Path, straight: Path):
    (epochs, export), (expected_epochs, expected_export) = _outcome(resumed), _outcome(straight)
    assert [record["epoch"] for record in epochs] == [1, 2]
    assert epochs == expected_epochs  # losses and counts of both epochs, digit for digit
    assert export.keys() == expected_export.keys() and "embedding_model.ckpt" in export
    for name, state in expected_export.items():
        if isinstance(state, dict):
            for key, value in state.items():
                if isinstance(value, torch.Tensor):
                    assert torch.equal(export[name][key], value), (name, key)


def test_ecapa_ssl_fine_tune_killed_after_epoch_1_resumes_exactly(tmp_path, monkeypatch):
    """Dropout 0.3 draws from torch's generator: without the saved state the resumed epoch 2 differs."""
    data_root = build_track1_layout(tmp_path / "root")
    challenge = tiny_challenge_folder(tmp_path / "exp" / "asv_ssl", seed=3)
    wavlm = challenge / "WavLM-Large.pt"

    def argv(out):
        return ssl_argv(data_root, out, wavlm, "--number_of_epochs=2", f"--init_from={challenge}")

    train_recipe.main(argv(tmp_path / "straight"))
    _killed_after_first_checkpoint(monkeypatch, argv(tmp_path / "resumed"))
    assert len(list((tmp_path / "resumed" / "save").glob("CKPT*"))) == 1  # epoch 1's, and then the end
    train_recipe.main(argv(tmp_path / "resumed"))
    _assert_same(tmp_path / "resumed", tmp_path / "straight")


def test_ecapa_training_killed_after_epoch_1_resumes_exactly(vpac_root, tmp_path, monkeypatch):
    def argv(out):
        return ecapa_args(vpac_root, out, "--number_of_epochs=2")

    train_recipe.main(argv(tmp_path / "straight"))
    _killed_after_first_checkpoint(monkeypatch, argv(tmp_path / "resumed"))
    train_recipe.main(argv(tmp_path / "resumed"))
    _assert_same(tmp_path / "resumed", tmp_path / "straight")

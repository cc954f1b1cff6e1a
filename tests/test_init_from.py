"""recipes/train.py --init_from=<speaker-model folder>: fine-tuning starts from the folder's model.

Tiny offline folders (tests/model_folders.py: the hub's spkrec-ecapa-voxceleb layout, a VPC 2024 ASV
folder, one of our exports) on the tiny VPAC layout of real LibriSpeech speech (tests/conftest.py).
"""

import shutil
from pathlib import Path

import pytest
import torch
from model_folders import SMALL, build_export, hub_folder, vpc_folder
from test_train import HPARAMS, TINY, _epochs, train_recipe

from segreconcat_aug.cli import run_main
from segreconcat_aug.training.init_from import training_overrides
from segreconcat_aug.training.presets import PRESETS, PresetError
from segreconcat_aug.training.run_settings import saved_hparams

SIZE_KEYS = ("--channels", "--lin_neurons", "--attention_channels")
TINY_RUN = [arg for arg in TINY if arg.split("=")[0] not in SIZE_KEYS]


def _args(root, out, folder, *extra):
    return [
        str(HPARAMS),
        f"--data_folder={root}",
        "--system=T8-5",
        f"--output_folder={out}",
        f"--init_from={folder}",
        "--mode=none",  # SegReConcat's own tests cover the pipeline; here the model's start matters
        *[arg for arg in TINY_RUN if arg.split("=")[0] not in {e.split("=")[0] for e in extra}],
        *extra,
    ]


@pytest.fixture
def loads(monkeypatch):
    """The embedding model's weights right after init_from loaded them (one entry per load)."""
    seen = []
    original = train_recipe.training.load_init_weights

    def spy(folder, modules, *, training, trusted=False):
        pretrained = original(folder, modules, training=training, trusted=trusted)
        seen.append({k: v.detach().clone() for k, v in modules["embedding_model"].state_dict().items()})
        return pretrained

    monkeypatch.setattr(train_recipe.training, "load_init_weights", spy)
    return seen


def _export_state(out):
    return torch.load(Path(out) / "export" / "embedding_model.ckpt", map_location="cpu")


def test_fine_tuning_starts_from_the_hub_folder_with_a_new_head_and_the_loss_falls(
    vpac_root, tmp_path, loads
):
    from speechbrain.inference.speaker import EncoderClassifier

    hub, model = hub_folder(tmp_path / "hub")
    out = tmp_path / "out"
    torch.set_num_threads(1)
    train_recipe.main(_args(vpac_root, out, hub, "--number_of_epochs=3", "--warmup=3", "--step_size=4"))
    # Step 0: the folder's weights, every one of them.
    assert len(loads) == 1
    for name, value in model.state_dict().items():
        assert torch.equal(loads[0][name], value), name
    # The head is new: sized for the training speakers, not the folder's.
    speakers = {line.split(",")[-1] for line in (out / "train.csv").read_text().splitlines()[1:] if line}
    export = out / "export"
    head = torch.load(export / "classifier.ckpt", map_location="cpu")["weight"]
    encoder = EncoderClassifier.from_hparams(source=str(export), savedir=str(tmp_path / "sb"))
    assert head.shape[1] == SMALL["lin_neurons"]
    assert head.shape[0] == len(speakers) == len(encoder.hparams.label_encoder.lab2ind)
    assert set(encoder.hparams.label_encoder.lab2ind) == speakers  # not the hub folder's speakers
    # The loss falls; the weights moved away from the folder's; the export embeds at the folder's size.
    losses = [epoch["train"]["loss"] for epoch in _epochs(out)]
    assert len(losses) == 3 and losses[-1] < losses[0], losses
    tuned = _export_state(out)
    assert any(not torch.equal(tuned[k], v) for k, v in model.state_dict().items())
    wave = torch.randn(1, 16000)
    assert encoder.encode_batch(wave).shape == (1, 1, SMALL["lin_neurons"])
    settings = saved_hparams(out)
    assert settings["init_from"] == str(hub) and settings["channels"] == SMALL["channels"]


def test_a_rerun_resumes_the_fine_tuning_instead_of_starting_again(vpac_root, tmp_path, loads):
    hub, _ = hub_folder(tmp_path / "hub")
    out = tmp_path / "out"
    torch.set_num_threads(1)
    train_recipe.main(_args(vpac_root, out, hub, "--number_of_epochs=1", "--warmup=2"))
    train_recipe.main(_args(vpac_root, out, hub, "--number_of_epochs=2", "--warmup=2"))
    assert len(loads) == 1  # the second run recovered its checkpoint, not the folder
    assert [epoch["epoch"] for epoch in _epochs(out)] == [1, 2]


@pytest.mark.parametrize("kind", ["vpc2024", "export"])
def test_a_vpc_folder_and_an_export_fine_tune_too(vpac_root, tmp_path, loads, kind):
    if kind == "vpc2024":
        folder, model = vpc_folder(tmp_path / "asv")
        state = model.state_dict()
    else:
        folder = build_export(tmp_path / "first", {k: v for k, v in SMALL.items() if k != "n_mels"}, seed=3)
        state = torch.load(folder / "embedding_model.ckpt", map_location="cpu")
    torch.set_num_threads(1)
    train_recipe.main(_args(vpac_root, tmp_path / "out", folder, "--number_of_epochs=1", "--warmup=1"))
    assert all(torch.equal(loads[0][k], v) for k, v in state.items())


@pytest.mark.parametrize("frozen", [1, 0])
def test_a_frozen_first_epoch_trains_only_the_head(vpac_root, tmp_path, frozen, monkeypatch):
    hub, model = hub_folder(tmp_path / "hub")
    out = tmp_path / "out"
    after_first = {}
    original = train_recipe.SpeakerBrain.on_stage_start

    def spy(self, stage, epoch=None):  # the embedding model as the first epoch left it
        if epoch == 2 and not after_first:
            state = self.modules.embedding_model.state_dict()
            after_first.update({k: v.detach().clone() for k, v in state.items()})
        return original(self, stage, epoch)

    monkeypatch.setattr(train_recipe.SpeakerBrain, "on_stage_start", spy)
    torch.set_num_threads(1)
    train_recipe.main(
        _args(vpac_root, out, hub, "--number_of_epochs=2", "--warmup=2", f"--init_freeze_epochs={frozen}")
    )
    same = all(torch.equal(after_first[k], v) for k, v in model.state_dict().items())
    assert same is bool(frozen)


def _refused(argv, capsys):
    with pytest.raises(SystemExit) as stopped:
        run_main(train_recipe.main, argv)
    assert stopped.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


def test_what_cannot_be_fine_tuned_is_refused_in_one_line_before_anything_is_written(
    vpac_root, tmp_path, capsys
):
    hub, _ = hub_folder(tmp_path / "hub")
    out = tmp_path / "out"
    # Sizes that do not fit: a size stated on the command line against the folder's.
    line = _refused(_args(vpac_root, out, hub, "--channels=[16,16,16,16,48]"), capsys)
    assert "--channels=" in line and "contradicts init_from" in line and str(hub) in line
    # A checkpoint cut short.
    cut = tmp_path / "cut"
    shutil.copytree(hub, cut)
    data = (cut / "embedding_model.ckpt").read_bytes()
    (cut / "embedding_model.ckpt").write_bytes(data[: len(data) // 2])
    line = _refused(_args(vpac_root, out, cut), capsys)
    assert "embedding_model.ckpt" in line
    # Not a speaker model.
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "README.txt").write_text("nothing")
    line = _refused(_args(vpac_root, out, notes), capsys)
    assert "not a speaker-model folder" in line
    # Every epoch frozen: nothing would be fine-tuned.
    line = _refused(_args(vpac_root, out, hub, "--number_of_epochs=1", "--init_freeze_epochs=5"), capsys)
    assert "--init_freeze_epochs=5" in line and "below number_of_epochs" in line
    # An empty folder name would train the YAML's model from scratch.
    line = _refused(_args(vpac_root, out, ""), capsys)
    assert "--init_from is empty" in line
    assert not out.exists()


def test_presets_go_under_the_command_line_and_unknown_ones_are_refused(tmp_path):
    values = {
        "preset": "voxattack-finetune",
        "init_from": None,
        **dict.fromkeys(PRESETS["voxattack-finetune"]),
    }
    derived = training_overrides(HPARAMS, values, {"lr": 0.5})
    assert (
        derived["optimizer"] == "adamw" and derived["aam_margin"] == 0.15 and derived["sentence_len"] == 10.0
    )
    # The command line's step_size wins over the preset's half-period in epochs.
    derived = training_overrides(HPARAMS, values, {"step_size": 7})
    assert derived["step_size_epochs"] is None
    with pytest.raises(PresetError, match="both set the cyclic half-period"):
        training_overrides(HPARAMS, values, {"step_size": 7, "step_size_epochs": 3})
    with pytest.raises(PresetError, match="unknown 'voxatack'; known: dast-stage3, voxattack-finetune"):
        training_overrides(HPARAMS, {**values, "preset": "voxatack"}, {})
    with pytest.raises(PresetError, match="sets .*which this training YAML does not have"):
        training_overrides(HPARAMS, {"preset": "vpc2026-track1"}, {})


def test_the_voxattack_preset_reaches_the_optimizer_and_the_loss(vpac_root, tmp_path, monkeypatch):
    hub, _ = hub_folder(tmp_path / "hub")
    seen = {}
    original = train_recipe.SpeakerBrain.init_optimizers

    def spy(self):
        original(self)
        seen["optimizer"] = type(self.optimizer).__name__
        seen["lr"] = self.optimizer.param_groups[0]["lr"]
        seen["margin"] = self.hparams.compute_cost.loss_fn.margin
        seen["step_size"] = self.hparams.lr_annealing.step_size

    monkeypatch.setattr(train_recipe.SpeakerBrain, "init_optimizers", spy)
    torch.set_num_threads(1)
    out = tmp_path / "out"
    train_recipe.main(
        _args(
            vpac_root,
            out,
            hub,
            "--preset=voxattack-finetune",
            "--number_of_epochs=1",
            "--batch_size=8",
            "--sentence_len=2.0",
        )
    )
    rows = len((out / "train.csv").read_text().splitlines()) - 1
    assert seen["optimizer"] == "AdamW" and seen["margin"] == 0.15
    assert seen["step_size"] == 2 * (rows // 8)  # two epochs of optimizer steps
    assert "preset voxattack-finetune: {'optimizer': 'adamw'" in (out / "log.txt").read_text()

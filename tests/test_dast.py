"""DAST's folders (monkeyDarefeen/DAST at 097be15) read by the ecapa_ssl family: its model folder
(``embedding_model.ckpt`` + ``WavLM-Large.pt``) and its Stage II ``epoch_N.ckpt`` files, saved as DAST saves
and loads them (an ``ECAPA_TDNN_test`` state dict, bare or under ``state_dict``, with DDP's ``module.`` or
without: training/dast_training.py:680-685); fine-tuned with ``--preset=dast-stage3``, resumed, exported."""

import json
import shutil

import pytest
import torch
from test_ecapa_ssl_recipe import HPARAMS, TINY, _waves
from test_vpc2026 import train_recipe  # noqa: E402  (recipes/train.py, loaded once)
from tiny_models import TINY_ECAPA_SSL, tiny_wavlm
from vpc2026_fixture import build_track1_layout

from segreconcat_aug.errors import UserError
from segreconcat_aug.models.ecapa_ssl import EcapaSSL, load_challenge_folder, to_challenge_state_dict
from segreconcat_aug.models.folder import load_speaker_model
from segreconcat_aug.models.pretrained import read_pretrained
from segreconcat_aug.models.wavlm import unilm_checkpoint
from segreconcat_aug.training.run_settings import saved_hparams


def _dast_model(seed: int) -> EcapaSSL:
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return EcapaSSL(**TINY_ECAPA_SSL)


@pytest.fixture(scope="module")
def stage2(tmp_path_factory):
    """DAST's pretrained_ckpt/ with WavLM-Large.pt put beside (as its README asks): epoch_2.ckpt bare,
    epoch_4.ckpt from DDP under ``state_dict``; returns (folder, {epoch: model})."""
    folder = tmp_path_factory.mktemp("dast") / "pretrained_ckpt"
    folder.mkdir()
    models = {2: _dast_model(2), 4: _dast_model(4)}
    torch.save(to_challenge_state_dict(models[2].state_dict()), folder / "epoch_2.ckpt")
    ddp = {f"module.{name}": value for name, value in to_challenge_state_dict(models[4].state_dict()).items()}
    torch.save({"state_dict": ddp}, folder / "epoch_4.ckpt")
    (folder / "wavlmlarge.txt").write_text("Please download the .pt checkpoint from microsoft/unilm")
    torch.save(unilm_checkpoint(tiny_wavlm(3)), folder / "WavLM-Large.pt")
    return folder, models


def _one_epoch(stage2, tmp_path, epoch: int):
    folder, _ = stage2
    single = tmp_path / f"epoch{epoch}"
    single.mkdir()
    shutil.copy(folder / f"epoch_{epoch}.ckpt", single)
    shutil.copy(folder / "WavLM-Large.pt", single)
    return single


def _same_weights(state, model) -> bool:
    return all(torch.equal(state[name], value) for name, value in model.state_dict().items())


def test_stage2_folder_asks_for_a_choice_and_reads_the_one_linked(stage2, tmp_path):
    folder, models = stage2
    with pytest.raises(UserError) as error:
        read_pretrained(folder)
    message = str(error.value)
    assert "\n" not in message and "epoch_2.ckpt, epoch_4.ckpt" in message and "ln -s epoch_4.ckpt" in message
    chosen = tmp_path / "chosen"
    shutil.copytree(folder, chosen)
    (chosen / "embedding_model.ckpt").symlink_to(chosen / "epoch_4.ckpt")
    pretrained = read_pretrained(chosen)
    assert (
        pretrained.family == "ecapa_ssl"
        and pretrained.files["embedding_model"].name == "embedding_model.ckpt"
    )
    assert _same_weights(pretrained.states["embedding_model"], models[4])


def test_one_epoch_file_is_read_bare_or_from_ddp(stage2, tmp_path):
    _, models = stage2
    for epoch in (2, 4):
        pretrained = read_pretrained(_one_epoch(stage2, tmp_path, epoch))
        assert pretrained.files["embedding_model"].name == f"epoch_{epoch}.ckpt"
        assert _same_weights(pretrained.states["embedding_model"], models[epoch])
        assert pretrained.hparams["wavlm_checkpoint"].endswith("WavLM-Large.pt")
    # --eval_model_folder=<a Stage II folder>: evaluated with that epoch's weights.
    speaker = load_speaker_model(tmp_path / "epoch2", {"sample_rate": 16000}, savedir=tmp_path / "links")
    assert speaker.loader == "ecapa_ssl" and speaker.checkpoint.name == "epoch_2.ckpt"
    assert _same_weights(speaker.embedding_model.state_dict(), models[2])


def test_a_stage2_folder_without_wavlm_names_the_download(stage2, tmp_path):
    bare = _one_epoch(stage2, tmp_path, 2)
    (bare / "WavLM-Large.pt").unlink()
    with pytest.raises(UserError, match="no WavLM-Large.pt beside its checkpoint: download WavLM-Large"):
        read_pretrained(bare)


def test_dast_model_folder_from_ddp_evaluates_as_dast_does(stage2, tmp_path):
    """DAST's inference folder, its embedding_model.ckpt saved from DDP: evaluation embeds with its weights."""
    folder = _one_epoch(stage2, tmp_path, 4)
    (folder / "epoch_4.ckpt").rename(folder / "embedding_model.ckpt")
    speaker = load_speaker_model(folder, {"sample_rate": 16000}, savedir=tmp_path / "links")
    assert speaker.loader == "ecapa_ssl" and speaker.checkpoint.name == "embedding_model.ckpt"
    assert _same_weights(speaker.embedding_model.state_dict(), stage2[1][4])
    wavs, lengths = _waves()
    reference = load_challenge_folder(folder, **TINY_ECAPA_SSL)
    speaker.embedding_model.eval()
    with torch.no_grad():
        ours = speaker.embedding_model(wavs, lengths)
        torch.testing.assert_close(ours, reference(wavs, lengths), rtol=1e-5, atol=1e-6)


def test_stage3_preset_fine_tunes_resumes_and_exports(stage2, tmp_path_factory, tmp_path):
    data_root = tmp_path_factory.mktemp("vpc2026_root")
    build_track1_layout(data_root)
    start = _one_epoch(stage2, tmp_path, 2)
    out = tmp_path / "run"
    argv = [HPARAMS, f"--data_folder={data_root}", "--system=B3", f"--output_folder={out}", *TINY]
    argv += [f"--init_from={start}", "--preset=dast-stage3"]  # init_from sets wavlm_checkpoint
    train_recipe.main(argv + ["--number_of_epochs=1"])
    settings = saved_hparams(out)
    assert settings["init_from"] == str(start) and settings["wavlm_checkpoint"] == str(
        start / "WavLM-Large.pt"
    )
    assert settings["optimizer"] == "adam" and settings["weight_decay"] == 2.0e-6 and settings["lr"] == 0.01
    assert settings["batch_size"] == 8  # the command line wins over the preset's 64
    assert "preset dast-stage3: {'optimizer': 'adam'" in (out / "log.txt").read_text()
    train_recipe.main(argv + ["--number_of_epochs=2"])  # more epochs: a resume
    epochs = [json.loads(line)["epoch"] for line in (out / "epochs.jsonl").read_text().splitlines()]
    assert epochs == [1, 2]
    exported = torch.load(out / "export" / "embedding_model.ckpt", map_location="cpu")
    assert not _same_weights(exported, stage2[1][2])  # fine-tuned: no longer Stage II's weights

"""segreconcat_aug.models.export: the best-dev-loss checkpoint as a folder SpeechBrain's EncoderClassifier loads."""

import json
import shutil
from pathlib import Path

import pytest
import speechbrain as sb
import torch
from hyperpyyaml import load_hyperpyyaml

from segreconcat_aug.data.audio import read_audio
from segreconcat_aug.models.export import EXPORT_MODULES, export_best_model

REPO = Path(__file__).resolve().parents[1]
HPARAMS = REPO / "hparams" / "ecapa_segreconcat.yaml"
SPEAKERS = ["19", "1998", "2007"]


def _tiny_training(tmp_path):
    """A training's loaded YAML (tiny, non-default model sizes) with its label encoder in save_folder."""
    overrides = {
        "data_folder": str(tmp_path),
        "output_folder": str(tmp_path / "run"),
        "channels": [8, 8, 8, 8, 24],
        "attention_channels": 4,
        "lin_neurons": 12,
        "n_speakers": len(SPEAKERS),
    }
    with open(HPARAMS, encoding="utf-8") as fin:
        hparams = load_hyperpyyaml(fin, overrides)
    encoder = sb.dataio.encoder.CategoricalEncoder()
    encoder.update_from_iterable(SPEAKERS)
    Path(hparams["save_folder"]).mkdir(parents=True, exist_ok=True)
    encoder.save(Path(hparams["save_folder"]) / "label_encoder.txt")
    return hparams, overrides


def _embed(hparams, wavs, lengths):
    with torch.no_grad():
        feats = hparams["mean_var_norm"](hparams["compute_features"](wavs), lengths)
        return hparams["embedding_model"](feats, lengths)


def _randomize(module, seed):
    torch.manual_seed(seed)
    for parameter in module.parameters():
        parameter.data.normal_(0, 0.3)


def test_the_export_loads_in_encoder_classifier_and_embeds_as_the_best_checkpoint(tmp_path):
    from speechbrain.inference.speaker import EncoderClassifier

    hparams, overrides = _tiny_training(tmp_path)
    model, checkpointer, counter = (
        hparams["embedding_model"],
        hparams["checkpointer"],
        hparams["epoch_counter"],
    )
    model.eval()
    files = sorted((REPO / "tests" / "fixtures" / "librispeech").glob("*.flac"))[:2]
    waves = [torch.from_numpy(read_audio(path)[:32000]) for path in files]
    waves[1] = waves[1][:20000]  # two lengths: one padded batch with relative lengths
    wavs = torch.nn.utils.rnn.pad_sequence(waves, batch_first=True)
    lengths = torch.tensor([len(wave) / wavs.shape[1] for wave in waves])

    _randomize(model, 0)
    _randomize(hparams["classifier"], 1)
    counter.current = 2
    checkpointer.save_checkpoint(meta={"loss": 1.0})  # the best dev loss
    best = _embed(hparams, wavs, lengths)
    classifier_weight = hparams["classifier"].weight.detach().clone()
    _randomize(model, 2)
    counter.current = 3
    checkpointer.save_checkpoint(meta={"loss": 2.0})  # a later, worse epoch: the model now holds its weights
    assert (_embed(hparams, wavs, lengths) - best).abs().max() > 1e-3

    export = export_best_model(hparams, HPARAMS, overrides)
    assert export == Path(hparams["export_folder"])
    info = json.loads((export / "export_info.json").read_text())
    assert (info["epoch"], info["dev_loss"]) == (2, 1.0)
    names = {path.name for path in export.iterdir()}
    assert names == {
        "hyperparams.yaml", "train_hyperparams.yaml", "export_info.json", "label_encoder.txt",
        "label_encoder.ckpt", *(f"{key}.ckpt" for key, saved in EXPORT_MODULES.items() if saved),
    }  # fmt: skip

    moved = tmp_path / "elsewhere" / "asv_model"  # no path inside: the folder loads wherever it is
    shutil.copytree(export, moved)
    shutil.rmtree(tmp_path / "run")
    encoder = EncoderClassifier.from_hparams(
        source=str(moved), savedir=str(tmp_path / "savedir"), run_opts={"device": "cpu"}
    )
    theirs = encoder.encode_batch(wavs, lengths)
    assert theirs.shape == best.shape == (2, 1, 12)  # the sizes come from the export, not from defaults
    assert (theirs - best).abs().max() < 1e-5
    assert torch.equal(encoder.mods.classifier.weight, classifier_weight)
    assert set(encoder.hparams.label_encoder.lab2ind) == set(SPEAKERS)
    with open(moved / "train_hyperparams.yaml", encoding="utf-8") as fin:
        assert load_hyperpyyaml(fin)["lin_neurons"] == 12  # the training YAML as run


def test_no_checkpoint_with_a_dev_loss_is_no_export(tmp_path):
    hparams, overrides = _tiny_training(tmp_path)
    with pytest.raises(RuntimeError, match="no checkpoint with a dev loss to export"):
        export_best_model(hparams, HPARAMS, overrides)
    assert not Path(hparams["export_folder"]).exists()

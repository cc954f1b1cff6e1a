"""Evaluation loads any SpeechBrain speaker-model folder through its hyperparams.yaml (issue 23, part 3).

Our export with sizes other than the YAML's scores without restating them, exactly as its bare checkpoint
(in the YAML's own modules, sizes restated) scores; a copy of the hub's
spkrec-ecapa-voxceleb and a VPC 2024 ASV folder load offline and embed as their modules do; a folder
that does not fit, or disagrees with the evaluation YAML, is one line naming both.
"""

import importlib.util
import logging
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from hyperpyyaml import load_hyperpyyaml
from model_folders import SMALL, VPC_YAML, build_export, hub_folder, vpc_folder
from speechbrain.lobes.features import Fbank
from speechbrain.processing.features import InputNormalization

from segreconcat_aug.data.audio import read_audio
from segreconcat_aug.evaluation.embeddings import EmbeddingExtractor
from segreconcat_aug.evaluation.system import EVAL_KEYS, evaluate_system, load_evaluation_hparams
from segreconcat_aug.evaluation.system_report import read_results
from segreconcat_aug.models.folder import (
    MODEL_SAVEDIR,
    ExportError,
    MissingExportError,
    ModelFolderError,
    ModelMismatchError,
    load_speaker_model,
)
from segreconcat_aug.models.state_dicts import CheckpointError

REPO = Path(__file__).resolve().parents[1]
HPARAMS = REPO / "hparams" / "ecapa_segreconcat.yaml"
# Not the YAML's sizes (1024 channels), nor the other tests' TINY ones.
SIZES = {"channels": [8, 8, 8, 8, 24], "attention_channels": 4, "lin_neurons": 12}
QUICK = {"eval_privacy": False, "eval_bootstrap_resamples": 0, "eval_det_plot": False}
SPEECH = sorted((REPO / "tests" / "fixtures" / "librispeech").glob("*.flac"))[:2]


def _load_recipe(name):
    spec = importlib.util.spec_from_file_location(f"{name}_recipe", REPO / "recipes" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_SCRATCH: list[Path] = []  # the module's temporary folder: loading the YAML makes <output_folder>/save


@pytest.fixture(scope="module", autouse=True)
def _scratch(tmp_path_factory):
    _SCRATCH[:] = [tmp_path_factory.mktemp("yaml-outputs")]
    yield
    _SCRATCH.clear()


def _hparams(**overrides):
    scratch = str(_SCRATCH[0])
    with open(HPARAMS, encoding="utf-8") as fin:
        return load_hyperpyyaml(fin, {"data_folder": scratch, "output_folder": scratch, **overrides})


@pytest.fixture(scope="module")
def export(tmp_path_factory):
    """``recipes/train.py``'s export of a model of :data:`SIZES` (random weights)."""
    return build_export(tmp_path_factory.mktemp("trained"), SIZES)


@pytest.fixture(scope="module")
def yaml_hparams():
    """The evaluation YAML as a user loads it: its own (1024-channel) sizes, none restated."""
    return _hparams()


def test_export_of_other_sizes_scores_as_the_old_path_with_its_sizes_restated(export, vpac_root, tmp_path):
    torch.set_num_threads(1)
    common = {"data_folder": str(vpac_root), "system": "T8-5", "eval_subsets": ["dev_f", "test_m"], **QUICK}
    # New: recipes/evaluate.py with no size override loads the folder's hyperparams.yaml.
    new_out = tmp_path / "new"
    args = [f"--{key}={value}".replace(" ", "") for key, value in common.items()]
    evaluate = _load_recipe("evaluate")
    new = evaluate.main([str(HPARAMS), *args, f"--output_folder={new_out}", f"--eval_model_folder={export}"])
    # Bare: the same checkpoint into the YAML's embedding_model, sizes restated (a folder without hyperparams.yaml).
    old_export = tmp_path / "old-export"
    old_export.mkdir()
    shutil.copyfile(export / "embedding_model.ckpt", old_export / "embedding_model.ckpt")
    given = {**common, **SIZES, "output_folder": str(tmp_path / "old"), "eval_model_folder": str(old_export)}
    evaluation = load_evaluation_hparams(
        REPO / "hparams" / "evaluate.yaml", {k: v for k, v in given.items() if k in EVAL_KEYS}
    )
    with open(HPARAMS, encoding="utf-8") as fin:
        hparams = load_hyperpyyaml(fin, {k: v for k, v in given.items() if k not in EVAL_KEYS})
    old = evaluate_system({**hparams, **evaluation}, {"device": "cpu"}, write_report=False)

    assert (new.options["model_loader"], old.options["model_loader"]) == ("EncoderClassifier", "fallback")
    assert list(new.subsets) == list(old.subsets) == ["dev_f", "test_m"]
    for name in new.subsets:
        np.testing.assert_array_equal(new.subsets[name].scores, old.subsets[name].scores)
        assert np.ptp(new.subsets[name].scores) > 1e-4  # distinct scores: the comparison has teeth
    assert new.metrics == old.metrics
    assert read_results(new_out / "eval")["table"] == pytest.approx(new.table_row())
    # SpeechBrain's links are in the eval folder, pointing at the export.
    linked = new_out / "eval" / MODEL_SAVEDIR
    assert (linked / "embedding_model.ckpt").resolve() == (export / "embedding_model.ckpt").resolve()
    assert (linked / "hyperparams.yaml").resolve() == (export / "hyperparams.yaml").resolve()


def _direct_embeddings(model, sizes=SMALL):
    """What ``encode_batch`` computes with a fresh Fbank, sentence mean normalization and ``model``."""
    waves = [torch.from_numpy(read_audio(path)) for path in SPEECH]
    longest = max(len(wave) for wave in waves)
    batch = torch.stack([torch.nn.functional.pad(wave, (0, longest - len(wave))) for wave in waves])
    lengths = torch.tensor([len(wave) / longest for wave in waves])
    with torch.no_grad():
        feats = InputNormalization(norm_type="sentence", std_norm=False)(
            Fbank(n_mels=sizes["n_mels"])(batch), lengths
        )
        return model.eval()(feats, lengths).reshape(len(waves), -1).numpy()


def _embed(model):
    extractor = EmbeddingExtractor(model.compute_features, model.mean_var_norm, model.embedding_model)
    return extractor.embed_batch([str(path) for path in SPEECH])


def test_hub_copy_and_vpc_folder_load_offline_and_embed_as_their_modules(tmp_path, yaml_hparams):
    hub, hub_model = hub_folder(tmp_path / "spkrec-ecapa-voxceleb")
    vpc, vpc_model = vpc_folder(tmp_path / "asv_orig")
    savedir = tmp_path / "eval" / MODEL_SAVEDIR

    loaded = load_speaker_model(hub, yaml_hparams, savedir=savedir)  # its pretrained_path is a hub id
    assert loaded.loader == "EncoderClassifier" and loaded.sizes == {"sample_rate": 16000, **SMALL}
    np.testing.assert_allclose(_embed(loaded), _direct_embeddings(hub_model), rtol=1e-5, atol=1e-5)
    # label_encoder.txt is collected under SpeechBrain's name, from the folder, not the hub
    assert (savedir / "label_encoder.ckpt").resolve() == (hub / "label_encoder.txt").resolve()

    rng = torch.random.get_rng_state()
    loaded = load_speaker_model(vpc, yaml_hparams, savedir=savedir)  # the same savedir: relinked, not reused
    assert torch.equal(torch.random.get_rng_state(), rng)  # its YAML's torch.manual_seed left no trace
    assert next(loaded.embedding_model.parameters()).device.type == "cpu"  # its device: 'cuda:0' is not used
    vpc_embeddings = _embed(loaded)
    np.testing.assert_allclose(vpc_embeddings, _direct_embeddings(vpc_model), rtol=1e-5, atol=1e-5)
    assert np.abs(vpc_embeddings - _direct_embeddings(hub_model)).max() > 1e-3
    assert (savedir / "embedding_model.ckpt").resolve() == (vpc / "embedding_model.ckpt").resolve()


def _without_embedding_model(folder):
    folder.mkdir()
    text = VPC_YAML.format(**SMALL).replace("embedding_model", "encoder")
    (folder / "hyperparams.yaml").write_text(text)
    return folder / "hyperparams.yaml"


@pytest.mark.parametrize(
    "case",
    ["n_mels stated", "channels stated", "sample rate", "no embedding_model", "damaged checkpoint",
     "missing file", "checkpoint of other sizes", "nothing there", "not HyperPyYAML"],
)  # fmt: skip
def test_a_folder_that_does_not_fit_is_one_line_naming_both(tmp_path, case):
    hub, _ = hub_folder(tmp_path / "hub")
    yaml_file = hub / "hyperparams.yaml"
    hparams, stated = _hparams(), ()
    if case == "n_mels stated":
        hparams, stated = _hparams(n_mels=40), {"n_mels"}
        expected = ModelMismatchError, [f"{yaml_file}: its model has n_mels=80", "--n_mels=40 was given"]
    elif case == "channels stated":
        hparams, stated = _hparams(channels=[16, 16, 16, 16, 48]), {"channels", "data_folder"}
        expected = ModelMismatchError, ["channels=[8, 8, 8, 8, 24]", "--channels=[16, 16, 16, 16, 48]"]
    elif case == "sample rate":
        hparams = _hparams(sample_rate=8000)
        expected = ModelMismatchError, [f"{yaml_file}: its model takes 16000 Hz", "sample_rate is 8000"]
    elif case == "no embedding_model":
        yaml_file = _without_embedding_model(tmp_path / "encoder-only")
        hub = yaml_file.parent
        expected = ModelFolderError, [f"{yaml_file}: no embedding_model key"]
    elif case == "damaged checkpoint":
        checkpoint = hub / "embedding_model.ckpt"
        checkpoint.write_bytes(checkpoint.read_bytes()[:500])
        expected = (
            CheckpointError,
            [f"{checkpoint}: cannot be read (model checkpoint), the file is damaged or cut"],
        )
    elif case == "missing file":
        (hub / "classifier.ckpt").unlink()
        expected = ModelFolderError, [f"{yaml_file}: pretrainer.paths.classifier", f"{hub}/classifier.ckpt"]
    elif case == "checkpoint of other sizes":
        yaml_file.write_text(yaml_file.read_text().replace("attention_channels: 4", "attention_channels: 6"))
        expected = (
            ModelFolderError,
            [f"{hub}/embedding_model.ckpt: does not fit {yaml_file}'s embedding_model"],
        )
    elif case == "nothing there":
        hub = tmp_path / "empty"
        hub.mkdir()
        expected = (
            MissingExportError,
            [f"{hub}/embedding_model.ckpt: no exported model, nor hyperparams.yaml"],
        )
    else:
        yaml_file.write_text("embedding_model: !ref <nowhere>\n")
        expected = ModelFolderError, [f"{yaml_file}: cannot be read as HyperPyYAML"]
    savedir = tmp_path / "eval" / MODEL_SAVEDIR
    with pytest.raises(expected[0]) as raised:
        load_speaker_model(hub, hparams, savedir=savedir, stated=stated)
    message = str(raised.value)
    assert "\n" not in message
    for fragment in expected[1]:
        assert fragment in message, (fragment, message)
    assert not (tmp_path / "eval").exists()  # checked before SpeechBrain links anything, or removed again


def test_a_bare_checkpoint_goes_into_the_yaml_modules_with_one_warning(export, tmp_path, caplog):
    bare = tmp_path / "bare"
    bare.mkdir()
    shutil.copyfile(export / "embedding_model.ckpt", bare / "embedding_model.ckpt")
    hparams = _hparams(**SIZES)
    with caplog.at_level(logging.WARNING, logger="segreconcat_aug.models.folder"):
        for _ in range(2):
            loaded = load_speaker_model(bare, hparams, savedir=tmp_path / "eval" / MODEL_SAVEDIR)
    warnings = [record.getMessage() for record in caplog.records if record.levelno == logging.WARNING]
    assert len(warnings) == 1 and "has no hyperparams.yaml" in warnings[0], warnings
    assert loaded.loader == "fallback" and loaded.embedding_model is hparams["embedding_model"]
    assert not (tmp_path / "eval").exists()  # nothing linked
    # and its sizes must then be the YAML's
    with pytest.raises(ExportError, match="the export has channels=\\[8, 8, 8, 8, 24\\]"):
        load_speaker_model(
            bare, _hparams(**{**SIZES, "channels": [16, 16, 16, 16, 48]}), savedir=tmp_path / "e"
        )


def test_a_training_yaml_as_hyperparams_yaml_is_refused_in_one_line(export, tmp_path):
    """A folder whose hyperparams.yaml has no pretrainer is no speaker-model folder, whatever lies beside it."""
    folder = tmp_path / "training-yaml"
    folder.mkdir()
    shutil.copyfile(export / "embedding_model.ckpt", folder / "embedding_model.ckpt")
    shutil.copyfile(export / "train_hyperparams.yaml", folder / "hyperparams.yaml")
    with pytest.raises(ModelFolderError, match=f"^{folder}/hyperparams.yaml: no pretrainer key") as raised:
        load_speaker_model(folder, _hparams(**SIZES), savedir=tmp_path / "eval" / MODEL_SAVEDIR)
    assert "\n" not in str(raised.value) and not (tmp_path / "eval").exists()

"""The models wing (issue 29, part 7): speaker-model folders read one way for evaluation and fine-tuning,
by the family of their embedding model (segreconcat_aug.models.registry)."""

import shutil

import pytest
import torch
from hyperpyyaml import load_hyperpyyaml
from model_folders import SMALL, build_export, hub_folder, vpc_folder
from test_model_folder import HPARAMS, SIZES

from segreconcat_aug.models import registry
from segreconcat_aug.models.folder import MODEL_SAVEDIR, load_speaker_model
from segreconcat_aug.models.pretrained import PretrainedModelError, read_pretrained
from segreconcat_aug.models.registry import ModelFamily, PretrainedModel, register_model_family


def _hparams(folder):
    with open(HPARAMS, encoding="utf-8") as fin:
        return load_hyperpyyaml(fin, {"data_folder": str(folder), "output_folder": str(folder / "yaml-out")})


def _same_weights(a: dict, b: dict) -> bool:
    return set(a) == set(b) and all(torch.equal(a[key], b[key]) for key in a)


@pytest.mark.parametrize("layout", ["hub", "vpc", "export"])
def test_a_folder_reads_for_fine_tuning_as_evaluation_loads_it(tmp_path, layout):
    if layout == "hub":
        folder, _ = hub_folder(tmp_path / "spkrec-ecapa-voxceleb")
        sizes = SMALL
    elif layout == "vpc":
        folder, _ = vpc_folder(tmp_path / "asv_orig")
        sizes = SMALL
    else:
        folder, sizes = build_export(tmp_path / "run", SIZES), {"n_mels": 80, **SIZES}
    read = read_pretrained(folder)
    loaded = load_speaker_model(folder, _hparams(tmp_path), savedir=tmp_path / "eval" / MODEL_SAVEDIR)
    assert read.family == "ecapa" and read.source == folder / "hyperparams.yaml"
    assert _same_weights(read.states["embedding_model"], loaded.embedding_model.state_dict())
    kwargs = read.definitions["embedding_model"].kwargs
    assert kwargs["input_size"] == sizes["n_mels"] and kwargs["channels"] == sizes["channels"]
    assert read.sample_rate == 16000


def test_a_checkpoint_alone_is_read_by_the_ecapa_family_with_its_sizes(tmp_path):
    export = build_export(tmp_path / "run", SIZES)
    bare = tmp_path / "bare"
    bare.mkdir()
    shutil.copyfile(export / "embedding_model.ckpt", bare / "embedding_model.ckpt")
    read = read_pretrained(bare)
    assert read.family == "ecapa" and set(read.definitions) == {"embedding_model"}
    assert read.definitions["embedding_model"].kwargs == {
        "input_size": 80,
        "channels": SIZES["channels"],
        "kernel_sizes": [5, 3, 3, 3, 1],
        "attention_channels": SIZES["attention_channels"],
        "lin_neurons": SIZES["lin_neurons"],
    }


XVECTOR_YAML = """n_mels: 24
compute_features: !new:speechbrain.lobes.features.Fbank
    n_mels: 24
mean_var_norm: !new:speechbrain.processing.features.InputNormalization
    norm_type: sentence
embedding_model: !new:speechbrain.lobes.models.Xvector.Xvector
    in_channels: 24
    tdnn_channels: [8, 8, 8, 8, 16]
    lin_neurons: 6
modules:
    compute_features: !ref <compute_features>
    mean_var_norm: !ref <mean_var_norm>
    embedding_model: !ref <embedding_model>
pretrainer: !new:speechbrain.utils.parameter_transfer.Pretrainer
    loadables:
        embedding_model: !ref <embedding_model>
"""


@pytest.fixture
def xvector_folder(tmp_path):
    from speechbrain.lobes.models.Xvector import Xvector

    folder = tmp_path / "xvector"
    folder.mkdir()
    (folder / "hyperparams.yaml").write_text(XVECTOR_YAML)
    torch.save(Xvector(in_channels=24, tdnn_channels=[8, 8, 8, 8, 16], lin_neurons=6).state_dict(),
               folder / "embedding_model.ckpt")  # fmt: skip
    return folder


def test_another_speechbrain_model_is_read_generically_and_a_family_can_claim_it(xvector_folder, tmp_path):
    generic = read_pretrained(xvector_folder)
    assert generic.family == "speechbrain"
    assert generic.definitions["embedding_model"].cls == "speechbrain.lobes.models.Xvector.Xvector"

    calls = []

    def read(
        folder, spec, *, trusted=False
    ):  # a family's own reader: its name mapping into the training's modules
        calls.append(("read", folder))
        return PretrainedModel(folder, "", folder / "x", {"xvector": {}}, {})

    def load(folder, hparams, *, savedir, device, stated):
        calls.append(("load", folder))
        return "the family's SpeakerModel"

    register_model_family(
        ModelFamily("xvector", read=read, classes=("speechbrain.lobes.models.Xvector.Xvector",), load=load)
    )
    try:
        claimed = read_pretrained(xvector_folder)
        assert claimed.family == "xvector" and claimed.states == {"xvector": {}}
        assert load_speaker_model(xvector_folder, {}, savedir=tmp_path / "s") == "the family's SpeakerModel"
        assert calls == [("read", xvector_folder), ("load", xvector_folder)]
        with pytest.raises(ValueError, match="already read by model family 'xvector'"):
            register_model_family(
                ModelFamily("other", read=read, classes=("speechbrain.lobes.models.Xvector.Xvector",))
            )
    finally:
        registry.FAMILIES.pop("xvector")
    assert read_pretrained(xvector_folder).family == "speechbrain"


@pytest.mark.parametrize("case", ["a file", "no model", "missing"])
def test_what_is_not_a_speaker_model_folder_is_one_line(tmp_path, case):
    hub, _ = hub_folder(tmp_path / "hub")
    if case == "a file":
        target, expected = (
            hub / "embedding_model.ckpt",
            [
                "is a file, not a speaker-model folder",
                f"--init_from={hub}",
            ],
        )
    elif case == "no model":
        target = tmp_path / "notes"
        target.mkdir()
        (target / "README.txt").write_text("nothing")
        expected = [f"{target}: not a speaker-model folder", "README.txt"]
    else:
        target, expected = tmp_path / "nowhere", ["does not exist"]
    with pytest.raises(PretrainedModelError) as raised:
        read_pretrained(target)
    assert "\n" not in str(raised.value)
    for fragment in expected:
        assert fragment in str(raised.value)


def test_a_challenge_folder_is_ecapa_ssls_whatever_order_the_families_were_imported_in(tmp_path):
    """exp/asv_ssl/ is also a bare ECAPA checkpoint's layout: the ecapa_ssl family must claim it even when
    the ecapa module was imported (and registered) first, as in a full test session."""
    from tiny_models import tiny_challenge_folder

    folder = tiny_challenge_folder(tmp_path / "asv_ssl", seed=3)
    saved = dict(registry.model_families())
    try:
        registry.FAMILIES.clear()
        registry.FAMILIES.update(reversed(list(saved.items())))  # ecapa registered before ecapa_ssl
        assert registry.family_of(folder, None).name == "ecapa_ssl"
    finally:
        registry.FAMILIES.clear()
        registry.FAMILIES.update(saved)

"""A model folder runs no code unless the user trusts it (``--trusted=True``), and a folder that cannot be
loaded is refused in one line naming the file and what is wrong with it (issue 40)."""

import argparse
import pickle
import shutil
from pathlib import Path

import pytest
import torch
from model_folders import SPEAKERS, build_export, hub_folder, vpc_folder
from tiny_models import TINY_ECAPA_SSL, tiny_challenge_folder

from segreconcat_aug.cli import load_hparams
from segreconcat_aug.errors import UserError
from segreconcat_aug.models.export import export_best_model
from segreconcat_aug.models.folder import load_speaker_model, read_spec
from segreconcat_aug.models.pretrained import read_pretrained
from segreconcat_aug.models.trust import UntrustedModelError
from segreconcat_aug.training.init_from import _READ, training_overrides

REPO = Path(__file__).resolve().parents[1]
SSL_HPARAMS = REPO / "hparams" / "ecapa_ssl_segreconcat.yaml"
EMBEDDING = "embedding_model: !new:speechbrain.lobes.models.ECAPA_TDNN.ECAPA_TDNN\n"


def hostile(folder: Path, where: str = "top") -> tuple[Path, Path, int]:
    """``folder``'s hyperparams.yaml made to write ``<folder>/ran`` when built: a key of its own (``top``),
    or an argument of its embedding model (``embedding_model``, as an ``init_from`` folder's would run).
    Returns the folder, the marker and the tag's line."""
    marker = folder / "ran"
    write = f"!apply:pathlib.Path.write_text [!new:pathlib.Path ['{marker}'], '']"  # returns 0
    yaml_path = folder / "hyperparams.yaml"
    text = yaml_path.read_text()
    if where == "top":
        text += f"\nran: {write}\n"
    else:  # ECAPA_TDNN's dropout: 0 either way
        assert EMBEDDING in text
        text = text.replace(EMBEDDING, f"{EMBEDDING}    dropout: {write}\n")
    yaml_path.write_text(text)
    line = next(n for n, row in enumerate(text.splitlines(), 1) if "!apply:pathlib" in row)
    return folder, marker, line


def _one_line(raised) -> str:
    message = str(raised.value)
    assert "\n" not in message and isinstance(raised.value, UserError)
    return message


def ecapa_ssl_export(folder: Path) -> Path:
    """Our export of a tiny ecapa_ssl training (its WavLM a tiny challenge folder's), random weights."""
    from speechbrain.dataio.encoder import CategoricalEncoder

    challenge = tiny_challenge_folder(folder / "asv_ssl", seed=4)
    overrides = {
        "data_folder": str(folder / "no-data"),
        "output_folder": str(folder / "run"),
        "n_speakers": len(SPEAKERS),
        "wavlm_checkpoint": str(challenge / "WavLM-Large.pt"),
        **{
            key: TINY_ECAPA_SSL[key]
            for key in ("channels", "attention_channels", "se_channels", "lin_neurons")
        },
    }
    hparams = load_hparams(SSL_HPARAMS, overrides)
    Path(hparams["save_folder"]).mkdir(parents=True, exist_ok=True)
    labels = CategoricalEncoder()
    labels.update_from_iterable(SPEAKERS)
    labels.save(Path(hparams["save_folder"]) / "label_encoder.txt")
    hparams["checkpointer"].save_checkpoint(meta={"loss": 1.0})
    return Path(export_best_model(hparams, SSL_HPARAMS, overrides))


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("folders")
    return {
        "hub": hub_folder(root / "hub")[0],
        "vpc": vpc_folder(root / "vpc")[0],
        "export": build_export(
            root / "ecapa", {"channels": [8, 8, 8, 8, 24], "attention_channels": 4, "lin_neurons": 12}
        ),
        "ecapa_ssl": ecapa_ssl_export(root / "ssl"),
    }


def _copy(folders, name, target: Path) -> Path:
    shutil.copytree(folders[name], target)
    return target


@pytest.mark.parametrize("name", ["hub", "vpc", "export", "ecapa_ssl"])
def test_the_hub_layout_vpc_folders_and_our_exports_load_untrusted(folders, name, tmp_path):
    folder = folders[name]
    read_spec(folder / "hyperparams.yaml", folder)  # every tag allowed
    model = load_speaker_model(folder, {"sample_rate": 16000}, savedir=tmp_path / "links")
    assert model.loader == "EncoderClassifier"
    assert read_pretrained(folder).states["embedding_model"]


@pytest.mark.parametrize("name", ["hub", "ecapa_ssl"])
def test_a_model_folder_that_would_run_code_is_refused_for_evaluation_unless_trusted(folders, name, tmp_path):
    folder, marker, line = hostile(_copy(folders, name, tmp_path / name))
    savedir = tmp_path / "eval" / "model"
    with pytest.raises(UntrustedModelError) as raised:
        load_speaker_model(folder, {"sample_rate": 16000}, savedir=savedir)
    message = _one_line(raised)
    assert message.startswith(
        f"{folder / 'hyperparams.yaml'}:{line}: the tag !apply:pathlib.Path.write_text "
    )
    assert "--trusted=True" in message
    assert not marker.exists() and not (tmp_path / "eval").exists()  # nothing ran, nothing written
    load_speaker_model(folder, {"sample_rate": 16000, "trusted": True}, savedir=savedir)
    assert marker.exists()  # trusted: the folder's YAML is built as it is


def test_an_init_from_folder_that_would_run_code_is_refused_unless_trusted(folders, tmp_path):
    folder, marker, line = hostile(_copy(folders, "hub", tmp_path / "hub"), "embedding_model")
    yaml_path = folder / "hyperparams.yaml"
    _READ.clear()
    with pytest.raises(UntrustedModelError) as raised:
        training_overrides(None, {"init_from": str(folder), "trusted": False, "lin_neurons": 12}, {})
    message = _one_line(raised)
    assert "the tag !apply:pathlib.Path.write_text" in message and "--trusted=True" in message
    assert message.startswith(f"{yaml_path}:{line}: ")
    assert not marker.exists()
    derived = training_overrides(None, {"init_from": str(folder), "trusted": True, "lin_neurons": 12}, {})
    assert derived == {"lin_neurons": 12} and marker.exists()


def test_an_init_from_checkpoint_holding_python_objects_needs_trusted(tmp_path):
    challenge = tiny_challenge_folder(tmp_path / "asv_ssl", seed=5)
    checkpoint = challenge / "embedding_model.ckpt"
    state = torch.load(checkpoint)
    torch.save({"state_dict": state, "args": argparse.Namespace(lr=0.1)}, checkpoint)
    with pytest.raises(UserError) as raised:
        read_pretrained(challenge)
    message = _one_line(raised)
    assert message.startswith(f"{checkpoint}: ") and "a Python object (argparse.Namespace)" in message
    assert "--trusted=True" in message
    assert read_pretrained(challenge, trusted=True).states["embedding_model"]


class _Hostile:
    def __reduce__(self):
        return (print, ("ran",))


@pytest.mark.parametrize(
    "case",
    ["missing class", "code in a pickle", "cut classifier", "empty label encoder", "a file", "plain ECAPA"],
)
def test_a_folder_that_cannot_be_loaded_is_one_line_naming_the_file(folders, case, tmp_path):
    folder = _copy(folders, "export", tmp_path / "export")
    yaml_path = folder / "hyperparams.yaml"
    read = "evaluate"
    if case == "missing class":
        read = "init_from"
        text = yaml_path.read_text().replace("ECAPA_TDNN.ECAPA_TDNN", "ECAPA_TDNN.NoSuchModel", 1)
        yaml_path.write_text(text)
        expected = [f"{yaml_path}'s embedding_model: cannot be built (ImportError", "NoSuchModel"]
    elif case == "code in a pickle":
        with open(folder / "embedding_model.ckpt", "wb") as handle:
            pickle.dump({"weights": _Hostile()}, handle, protocol=2)
        expected = [
            f"{folder / 'embedding_model.ckpt'}: ",
            "holds a Python object (",
            "print",
            "--trusted=True",
        ]
    elif case == "cut classifier":
        cut = folder / "classifier.ckpt"
        cut.write_bytes(cut.read_bytes()[:300])
        expected = [f"{cut}: cannot be read (model checkpoint), the file is damaged or cut"]
    elif case == "empty label encoder":
        (folder / "label_encoder.ckpt").write_text("")
        expected = [f"{folder / 'label_encoder.ckpt'}: cannot be read as a SpeechBrain label encoder"]
    elif case == "a file":
        folder = folder / "hyperparams.yaml"
        expected = [f"{folder}: is a file, not a folder"]
    else:  # a plain ECAPA checkpoint where the challenge's exp/asv_ssl/ keeps its WavLM + ECAPA
        read = "init_from"
        folder = tiny_challenge_folder(tmp_path / "asv_ssl", seed=6)
        shutil.copyfile(folders["export"] / "embedding_model.ckpt", folder / "embedding_model.ckpt")
        expected = [
            f"{folder / 'embedding_model.ckpt'}: not an ecapa_ssl embedding model's weights",
            "ECAPA-TDNN",
        ]
    with pytest.raises(UserError) as raised:
        if read == "evaluate":
            load_speaker_model(folder, {"sample_rate": 16000}, savedir=tmp_path / "eval" / "model")
        else:
            read_pretrained(folder)
    message = _one_line(raised)
    for fragment in expected:
        assert fragment in message, (fragment, message)
    assert case == "a file" or not message.startswith(f"{yaml_path}:")  # the file at fault, not the YAML
    assert not (tmp_path / "eval").exists()

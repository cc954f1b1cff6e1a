"""Tiny SpeechBrain speaker-model folders for the evaluation tests, in the three layouts evaluation loads.

- :func:`build_export`: what ``recipes/train.py`` leaves in ``<output_folder>/export`` when training
  ends, written by the recipe's own export function from a checkpoint of random weights;
- :func:`hub_folder`: a local copy of ``speechbrain/spkrec-ecapa-voxceleb`` as its model card lays it
  out (``hyperparams.yaml`` with ``pretrained_path`` and ``paths``, ``embedding_model.ckpt``,
  ``mean_var_norm_emb.ckpt``, ``classifier.ckpt``, ``label_encoder.txt``), tiny sizes;
- :func:`vpc_folder`: a VPC 2024 ASV model folder (the toolkit's inference YAML,
  ``evaluation/privacy/asv/asv_train/hparams/ecapa/hyperparams.yaml`` at 400de3a, with its
  ``device: 'cuda:0'`` and its seed, beside ``embedding_model.ckpt``), tiny sizes.
"""

from __future__ import annotations

from pathlib import Path

import torch
from hyperpyyaml import load_hyperpyyaml
from test_train import HPARAMS

from segreconcat_aug.models.export import export_best_model

SPEAKERS = ["s1", "s2", "s3"]


def randomize(model: torch.nn.Module, seed: int) -> torch.nn.Module:
    """Random but deterministic weights (a fresh ECAPA embeds every utterance alike)."""
    torch.manual_seed(seed)
    for parameter in model.parameters():
        parameter.data.normal_(0, 0.3)
    return model


def build_export(output_folder: Path, sizes: dict, seed: int = 0) -> Path:
    """``<output_folder>/export`` as ``recipes/train.py`` exports it, for a model of ``sizes``."""
    from speechbrain.dataio.encoder import CategoricalEncoder

    overrides = {
        "data_folder": str(output_folder / "no-data"),
        "output_folder": str(output_folder),
        "n_speakers": len(SPEAKERS),
        **sizes,
    }
    with open(HPARAMS, encoding="utf-8") as fin:
        hparams = load_hyperpyyaml(fin, overrides)
    randomize(hparams["embedding_model"], seed)
    Path(hparams["save_folder"]).mkdir(parents=True, exist_ok=True)
    labels = CategoricalEncoder()
    labels.update_from_iterable(SPEAKERS)
    labels.save(Path(hparams["save_folder"]) / "label_encoder.txt")
    hparams["checkpointer"].save_checkpoint(meta={"loss": 1.0})  # the best (only) dev loss
    return Path(export_best_model(hparams, HPARAMS, overrides))


HUB_YAML = """# As speechbrain/spkrec-ecapa-voxceleb's hyperparams.yaml, with tiny sizes
n_mels: {n_mels}
pretrained_path: speechbrain/spkrec-ecapa-voxceleb
out_n_neurons: 3

compute_features: !new:speechbrain.lobes.features.Fbank
    n_mels: !ref <n_mels>

mean_var_norm: !new:speechbrain.processing.features.InputNormalization
    norm_type: sentence
    std_norm: False

embedding_model: !new:speechbrain.lobes.models.ECAPA_TDNN.ECAPA_TDNN
    input_size: !ref <n_mels>
    channels: {channels}
    kernel_sizes: [5, 3, 3, 3, 1]
    dilations: [1, 2, 3, 4, 1]
    attention_channels: {attention_channels}
    lin_neurons: {lin_neurons}

classifier: !new:speechbrain.lobes.models.ECAPA_TDNN.Classifier
    input_size: {lin_neurons}
    out_neurons: !ref <out_n_neurons>

mean_var_norm_emb: !new:speechbrain.processing.features.InputNormalization
    norm_type: global
    std_norm: False

modules:
    compute_features: !ref <compute_features>
    mean_var_norm: !ref <mean_var_norm>
    embedding_model: !ref <embedding_model>
    mean_var_norm_emb: !ref <mean_var_norm_emb>
    classifier: !ref <classifier>

label_encoder: !new:speechbrain.dataio.encoder.CategoricalEncoder

pretrainer: !new:speechbrain.utils.parameter_transfer.Pretrainer
    loadables:
        embedding_model: !ref <embedding_model>
        mean_var_norm_emb: !ref <mean_var_norm_emb>
        classifier: !ref <classifier>
        label_encoder: !ref <label_encoder>
    paths:
        embedding_model: !ref <pretrained_path>/embedding_model.ckpt
        mean_var_norm_emb: !ref <pretrained_path>/mean_var_norm_emb.ckpt
        classifier: !ref <pretrained_path>/classifier.ckpt
        label_encoder: !ref <pretrained_path>/label_encoder.txt
"""

VPC_YAML = """# As the VPC 2024 toolkit's evaluation/privacy/asv/asv_train/hparams/ecapa/hyperparams.yaml, tiny sizes
seed: 1234
__set_seed: !apply:torch.manual_seed [!ref <seed>]
device: 'cuda:0'

n_mels: {n_mels}
left_frames: 0
right_frames: 0
deltas: False

compute_features: !new:speechbrain.lobes.features.Fbank
    n_mels: !ref <n_mels>

mean_var_norm: !new:speechbrain.processing.features.InputNormalization
    norm_type: sentence
    std_norm: False

embedding_model: !new:speechbrain.lobes.models.ECAPA_TDNN.ECAPA_TDNN
    input_size: !ref <n_mels>
    channels: {channels}
    kernel_sizes: [5, 3, 3, 3, 1]
    dilations: [1, 2, 3, 4, 1]
    attention_channels: {attention_channels}
    lin_neurons: {lin_neurons}

mean_var_norm_emb: !new:speechbrain.processing.features.InputNormalization
    norm_type: sentence
    std_norm: True

classifier: !new:speechbrain.lobes.models.ECAPA_TDNN.Classifier
    input_size: {lin_neurons}
    out_neurons: 3

modules:
    compute_features: !ref <compute_features>
    embedding_model: !ref <embedding_model>
    mean_var_norm: !ref <mean_var_norm>
    classifier: !ref <classifier>


pretrainer: !new:speechbrain.utils.parameter_transfer.Pretrainer
    loadables:
        embedding_model: !ref <embedding_model>
"""

SMALL = {"n_mels": 80, "channels": [8, 8, 8, 8, 24], "attention_channels": 4, "lin_neurons": 12}


def _ecapa(sizes: dict, seed: int):
    from speechbrain.lobes.models.ECAPA_TDNN import ECAPA_TDNN

    return randomize(
        ECAPA_TDNN(
            sizes["n_mels"],
            channels=sizes["channels"],
            attention_channels=sizes["attention_channels"],
            lin_neurons=sizes["lin_neurons"],
        ),
        seed,
    )


def hub_folder(folder: Path, sizes: dict = SMALL, seed: int = 1) -> tuple[Path, torch.nn.Module]:
    """A local copy of the hub's spkrec-ecapa-voxceleb layout; returns it and its embedding model."""
    from speechbrain.dataio.encoder import CategoricalEncoder
    from speechbrain.lobes.models.ECAPA_TDNN import Classifier
    from speechbrain.processing.features import InputNormalization

    folder.mkdir(parents=True)
    (folder / "hyperparams.yaml").write_text(HUB_YAML.format(**sizes), encoding="utf-8")
    model = _ecapa(sizes, seed)
    torch.save(model.state_dict(), folder / "embedding_model.ckpt")
    torch.save(
        Classifier(sizes["lin_neurons"], out_neurons=len(SPEAKERS)).state_dict(), folder / "classifier.ckpt"
    )
    norm = InputNormalization(norm_type="global", std_norm=False)
    norm(torch.randn(4, sizes["lin_neurons"]).unsqueeze(1), torch.ones(4))  # global statistics to save
    norm._save(folder / "mean_var_norm_emb.ckpt")
    labels = CategoricalEncoder()
    labels.update_from_iterable(SPEAKERS)
    labels.save(folder / "label_encoder.txt")
    return folder, model


def vpc_folder(folder: Path, sizes: dict = SMALL, seed: int = 2) -> tuple[Path, torch.nn.Module]:
    """A VPC 2024 ASV model folder: its inference hyperparams.yaml and embedding_model.ckpt."""
    folder.mkdir(parents=True)
    (folder / "hyperparams.yaml").write_text(VPC_YAML.format(**sizes), encoding="utf-8")
    model = _ecapa(sizes, seed)
    torch.save(model.state_dict(), folder / "embedding_model.ckpt")
    return folder, model

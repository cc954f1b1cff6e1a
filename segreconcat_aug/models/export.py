"""The trained attacker as a SpeechBrain model folder (``EncoderClassifier.from_hparams`` loads it)."""

from __future__ import annotations

import io
import logging
import shutil
from pathlib import Path

import ruamel.yaml
from ruamel.yaml.comments import CommentedMap, CommentedSeq

from ..data.hparams_text import hparams_text
from ..data.result_files import json_text

logger = logging.getLogger(__name__)

#: The inference YAML, which SpeechBrain's ``EncoderClassifier.from_hparams`` loads.
EXPORT_HPARAMS = "hyperparams.yaml"
#: The training YAML as run (overrides applied, references resolved).
EXPORT_TRAIN_HPARAMS = "train_hyperparams.yaml"
EXPORT_LABELS = "label_encoder.txt"  # the training's speaker <-> classifier index
EXPORT_INFO = "export_info.json"  # epoch, dev loss and checkpoint of the exported model
#: Inference modules (EncoderClassifier's names) and the checkpoint recoverable holding each one's
#: weights. Each is exported as ``<module>.ckpt``, the file SpeechBrain's Pretrainer looks for.
EXPORT_MODULES = {
    "compute_features": None,  # Fbank: no weights
    "mean_var_norm": "normalizer",
    "embedding_model": "embedding_model",
    "classifier": "classifier",
}


def detached(node):
    """A copy of a round-trip YAML node without its comments and anchors (its tags kept).

    >>> yaml = ruamel.yaml.YAML()
    >>> node = yaml.load("model: &m !new:Model  # a comment\\n    sizes: [1, 2]\\n")["model"]
    >>> copy = detached(node)
    >>> copy.tag.value, dict(copy), copy.anchor.value
    ('!new:Model', {'sizes': [1, 2]}, None)
    """
    if isinstance(node, CommentedMap):
        copy = CommentedMap((key, detached(value)) for key, value in node.items())
    elif isinstance(node, CommentedSeq):
        copy = CommentedSeq(detached(value) for value in node)
        copy.fa.set_flow_style()
    else:
        return node
    if node.tag.value:
        copy.yaml_set_ctag(node.tag)
    return copy


def exported_definition(training, key: str):
    """The definition of the export's module ``key``: the training YAML's ``export_<key>`` if it has one, else ``key``.

    A model whose inference modules differ from its training's (``ecapa_ssl``: the training embeds
    with a hook; its export takes waveforms) names them ``export_<key>``; one written ``!name:`` (not
    built with the training) is written ``!new:``, which the export's YAML builds.

    >>> yaml = ruamel.yaml.YAML()
    >>> training = yaml.load("embedding_model: !new:A {x: 1}\\nexport_embedding_model: !name:B {x: 1}\\n")
    >>> exported_definition(training, "embedding_model").tag.value
    '!new:B'
    """
    node = detached(training.get(f"export_{key}", training[key]))
    tag = getattr(getattr(node, "tag", None), "value", None) or ""
    if tag.startswith("!name:"):
        node.yaml_set_ctag(ruamel.yaml.comments.Tag(suffix="!new:" + tag[len("!name:") :]))
    return node


def inference_hparams(resolved_training_yaml: str) -> str:
    """The export's ``hyperparams.yaml``: the training's module definitions as trained, plus SpeechBrain's
    ``pretrainer``, ``label_encoder`` and ``modules``. The Pretrainer gives no paths (``<source>/<key>.ckpt``),
    so the folder can be moved and still loads.

    >>> training = '''sample_rate: 16000
    ... compute_features: !new:Fbank {n_mels: 80}
    ... mean_var_norm: !new:Norm {norm_type: sentence}
    ... embedding_model: !new:ECAPA {channels: [8, 24]}
    ... classifier: !new:Classifier {out_neurons: 3}
    ... lr: 0.01
    ... '''
    >>> text = inference_hparams(training)
    >>> "embedding_model: !new:ECAPA\\n    channels: [8, 24]" in text, "lr:" in text
    (True, False)
    >>> print(text[text.index("pretrainer"):])
    pretrainer: !new:speechbrain.utils.parameter_transfer.Pretrainer
        loadables:
            mean_var_norm: !ref <mean_var_norm>
            embedding_model: !ref <embedding_model>
            classifier: !ref <classifier>
            label_encoder: !ref <label_encoder>
    <BLANKLINE>
    """
    yaml = ruamel.yaml.YAML()
    yaml.indent(mapping=4, sequence=4, offset=2)
    training = yaml.load(resolved_training_yaml)
    definitions = CommentedMap((key, exported_definition(training, key)) for key in EXPORT_MODULES)
    text = io.StringIO()
    yaml.dump(definitions, text)
    modules = "\n".join(f"    {key}: !ref <{key}>" for key in EXPORT_MODULES)
    loadables = "\n".join(f"        {key}: !ref <{key}>" for key, saved in EXPORT_MODULES.items() if saved)
    return f"""# Speaker encoder trained by segreconcat-aug (recipes/train.py): the best-dev-loss
# checkpoint. Load it as any SpeechBrain speaker model (the VPC 2024 evaluation toolkit does the same):
#   from speechbrain.inference.speaker import EncoderClassifier
#   encoder = EncoderClassifier.from_hparams(source="<this folder>")
#   embeddings = encoder.encode_batch(wavs, wav_lens)  # wavs: [batch, samples] at {training["sample_rate"]} Hz
# Files: <key>.ckpt for each loadable below; {EXPORT_LABELS} is the same label encoder under its usual name.

sample_rate: {training["sample_rate"]}

{text.getvalue().rstrip()}

label_encoder: !new:speechbrain.dataio.encoder.CategoricalEncoder

modules:
{modules}

pretrainer: !new:speechbrain.utils.parameter_transfer.Pretrainer
    loadables:
{loadables}
        label_encoder: !ref <label_encoder>
"""


def checkpoint_key(select_by: str | None) -> str:
    """The checkpoints' meta key the best one has the lowest of (``select_by``: dev_loss or dev_eer)."""
    return "dev_eer" if select_by == "dev_eer" else "loss"


def export_best_model(hparams, hparams_file, overrides) -> Path:
    """The best-dev-loss (``select_by: dev_eer``: dev-EER) checkpoint -> ``<export_folder>``, loadable by SpeechBrain's ``EncoderClassifier``
    (its files: docs/evaluation.md). ``hparams_file``, ``overrides``: the training YAML as run."""
    import torch
    from hyperpyyaml import resolve_references

    selected_by = hparams.get("select_by") or "dev_loss"
    checkpoint = hparams["checkpointer"].find_checkpoint(min_key=checkpoint_key(selected_by))
    if checkpoint is None:
        raise RuntimeError(f"{hparams['save_folder']}: no checkpoint with a dev loss to export")
    export = Path(hparams["export_folder"])
    export.mkdir(parents=True, exist_ok=True)
    state = torch.load(checkpoint.paramfiles["embedding_model"], map_location="cpu")
    hparams["embedding_model"].load_state_dict(state)  # fails loudly if the checkpoint does not fit
    for module, recoverable in EXPORT_MODULES.items():
        if recoverable is not None:  # the checkpointer's own file: the format its loader reads
            shutil.copyfile(checkpoint.paramfiles[recoverable], export / f"{module}.ckpt")
    labels = Path(hparams["save_folder"]) / EXPORT_LABELS
    shutil.copyfile(labels, export / EXPORT_LABELS)
    shutil.copyfile(labels, export / "label_encoder.ckpt")
    if hparams.get("wavlm_checkpoint"):  # named by path: absolute, so the export works from any folder
        overrides = {**overrides, "wavlm_checkpoint": str(Path(hparams["wavlm_checkpoint"]).resolve())}
    resolved = resolve_references(hparams_text(hparams_file), overrides).getvalue()
    (export / EXPORT_TRAIN_HPARAMS).write_text(resolved, encoding="utf-8")
    (export / EXPORT_HPARAMS).write_text(inference_hparams(resolved), encoding="utf-8")
    with open(checkpoint.paramfiles["counter"], encoding="utf-8") as handle:
        epoch = ruamel.yaml.YAML(typ="safe").load(handle)["current_epoch"]
    info = {"checkpoint": str(checkpoint.path), "epoch": epoch, "dev_loss": checkpoint.meta["loss"]}
    info.update(
        selected_by=selected_by, **{k: checkpoint.meta[k] for k in ("dev_eer",) if k in checkpoint.meta}
    )
    (export / EXPORT_INFO).write_text(json_text(info, indent=2) + "\n", encoding="utf-8")
    logger.info(
        "Exported the model of the lowest %s (epoch %s, dev loss %.4f) to %s",
        selected_by.replace("_", " "),
        epoch,
        info["dev_loss"],
        export,
    )
    return export

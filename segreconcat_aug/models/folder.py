"""Speaker-model folders, read as SpeechBrain reads them (docs/evaluation.md).

A folder with ``hyperparams.yaml`` is checked (its keys, every file its pretrainer loads), then
loaded by ``EncoderClassifier.from_hparams`` with no model hub; a bare ``embedding_model.ckpt`` goes
into the evaluation YAML's own modules. Every refusal is one line naming the file and the YAML key.
"""

from __future__ import annotations

import hashlib
import logging
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..errors import UserError
from .registry import family_of
from .state_dicts import read_torch_file
from .trust import UntrustedModelError, check_model_text

logger = logging.getLogger(__name__)

#: The files of a model folder that evaluation reads by name.
MODEL_HPARAMS = "hyperparams.yaml"
MODEL_CHECKPOINT = "embedding_model.ckpt"
#: Where SpeechBrain collects (links) the folder's files: ``<eval_folder>/model``.
MODEL_SAVEDIR = "model"
#: The modules of the folder that embed (``EncoderClassifier.encode_batch`` uses these three).
EMBEDDING_MODULES = ("compute_features", "mean_var_norm", "embedding_model")
#: Evaluation-YAML keys that describe the model: when the user states one (an override), the folder's
#: model must have that value. Left unstated, the folder's value is used.
MODEL_KEYS = ("n_mels", "channels", "attention_channels", "lin_neurons")


class MissingExportError(UserError, FileNotFoundError):
    """No exported model where evaluation looks for one."""


class ExportError(UserError, RuntimeError):
    """The exported model cannot be loaded: a damaged file, or another model size than the YAML's."""


class ModelFolderError(ExportError):
    """A model folder cannot be loaded as a SpeechBrain speaker model (its hyperparams.yaml or a file it names)."""


class ModelMismatchError(ModelFolderError):
    """The model folder and the evaluation YAML disagree (sample rate, or a model key the user stated)."""


@dataclass
class SpeakerModel:
    """The three modules that embed, and where they came from."""

    folder: Path
    compute_features: torch.nn.Module
    mean_var_norm: torch.nn.Module
    embedding_model: torch.nn.Module
    checkpoint: Path  # the embedding model's weights
    loader: str  # "EncoderClassifier" (the folder's hyperparams.yaml) or "fallback" (a bare checkpoint)
    # Files besides the checkpoint whose bytes decide the embeddings (hyperparams.yaml, normalizer
    # statistics, an ecapa_ssl model's WavLM): part of the embedding cache's name. Empty for a bare
    # checkpoint, whose modules are the YAML's.
    files: tuple[Path, ...] = ()
    sizes: dict = field(default_factory=dict)  # sample_rate, n_mels and the ECAPA sizes found

    def cache_options(self) -> dict:
        """What the embedding cache's name must hold beyond the checkpoint's bytes."""
        if not self.files:
            return {}
        digest = hashlib.sha1()
        for path in self.files:
            digest.update(path.name.encode() + b"\0")
            with open(path, "rb") as handle:  # in blocks: a WavLM-Large file is 1.2 GB
                for block in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(block)
        return {"model_files": digest.hexdigest()[:16]}


def model_folder(hparams: dict, folder=None) -> Path:
    """``folder``, else ``eval_model_folder``, else ``export_folder``, else ``<output_folder>/export``."""
    return Path(
        folder
        or hparams.get("eval_model_folder")
        or hparams.get("export_folder")
        or Path(hparams["output_folder"]) / "export"
    )


_BARE_LOGGED: set[str] = set()  # one warning per folder


def load_speaker_model(folder, hparams: dict, *, savedir, device: str = "cpu", stated=()) -> SpeakerModel:
    """The speaker model of ``folder`` under the evaluation YAML ``hparams``.

    ``savedir``: where SpeechBrain links the folder's files, made only once the folder passed its
    checks (removed again if loading fails). ``stated``: the keys the user gave; those of
    :data:`MODEL_KEYS` must equal the folder's.
    """
    folder = Path(folder)
    if folder.is_file():
        raise MissingExportError(
            f"{folder}: is a file, not a folder: eval_model_folder names the speaker-model folder (the one "
            f"holding {MODEL_HPARAMS} and {MODEL_CHECKPOINT})"
        )
    yaml_path = folder / MODEL_HPARAMS
    checkpoint = folder / MODEL_CHECKPOINT
    trusted = bool(hparams.get("trusted", False))
    spec, overrides = read_spec(yaml_path, folder, trusted=trusted) if yaml_path.is_file() else (None, {})
    family = family_of(folder, spec)
    if family is not None and family.load is not None:  # a family EncoderClassifier cannot load
        return family.load(folder, hparams, savedir=savedir, device=device, stated=stated)
    if spec is None:
        if not checkpoint.is_file():
            raise MissingExportError(
                f"{checkpoint}: no exported model, nor {MODEL_HPARAMS} beside it (recipes/train.py writes both "
                "when training ends; set eval_model_folder to evaluate another SpeechBrain model folder)"
            )
        return load_bare_checkpoint(hparams, folder)
    return load_with_encoder_classifier(
        folder, hparams, spec, overrides, savedir=savedir, device=device, stated=stated
    )


def load_with_encoder_classifier(
    folder: Path, hparams: dict, spec, overrides, *, savedir, device: str = "cpu", stated=()
) -> SpeakerModel:
    """A folder with a speaker model's ``hyperparams.yaml`` (``spec``, read by :func:`read_spec` with its
    ``overrides``), checked, then loaded by ``EncoderClassifier.from_hparams`` (see :func:`load_speaker_model`)."""
    yaml_path = folder / MODEL_HPARAMS
    files = speaker_model_files(spec, folder, yaml_path)
    states = read_pretrainer_files(spec, files, trusted=bool(hparams.get("trusted", False)))
    # Checked: from here on SpeechBrain writes (links in savedir); what it creates goes if loading fails.
    savedir = Path(savedir).absolute()
    # The outermost folder of savedir not there yet: what loading creates.
    created = next((path for path in (*reversed(savedir.parents), savedir) if not path.exists()), None)
    try:
        encoder = _from_hparams(folder, yaml_path, savedir, device, overrides, spec, states)
        return _checked_model(encoder, hparams, folder, yaml_path, files, states, stated)
    except Exception:
        if created is not None:
            shutil.rmtree(created, ignore_errors=True)
        raise


def speaker_model_files(spec, folder: Path, yaml_path: Path) -> dict[str, Path]:
    """The files a speaker model's YAML loads, once it is one: a ``pretrainer`` loading
    ``embedding_model``, and ``modules`` holding :data:`EMBEDDING_MODULES` (one line otherwise)."""
    if "pretrainer" not in spec:
        raise ModelFolderError(
            f"{yaml_path}: no pretrainer key, so EncoderClassifier.from_hparams cannot load it (a SpeechBrain "
            "speaker model's hyperparams.yaml has modules and a pretrainer; eval_model_folder names the folder)"
        )
    for key in ("embedding_model", "modules"):
        if key not in spec:
            raise ModelFolderError(
                f"{yaml_path}: no {key} key; a speaker model's hyperparams.yaml defines {', '.join(EMBEDDING_MODULES)} "
                "and lists them under modules (eval_model_folder names a folder that is not a speaker model)"
            )
    modules = spec["modules"] if isinstance(spec["modules"], dict) else {}
    missing = [name for name in EMBEDDING_MODULES if name not in modules]
    if missing:
        raise ModelFolderError(
            f"{yaml_path}: modules has no {', '.join(missing)}; evaluation embeds with "
            f"{', '.join(EMBEDDING_MODULES)} as EncoderClassifier.encode_batch does"
        )
    # Every file the pretrainer loads (paths, else <folder>/<key>.ckpt), all checked local.
    pretrainer = spec["pretrainer"] if isinstance(spec["pretrainer"], dict) else {}
    paths = pretrainer.get("paths") or {}
    files = {}
    for name in pretrainer.get("loadables") or {}:
        given = paths.get(name)
        path = Path(str(given)) if given is not None else folder / f"{name}.ckpt"
        if not path.is_absolute():
            path = Path.cwd() / path  # SpeechBrain reads a relative path from the working directory
        if not path.is_file():
            where = (
                f"pretrainer.paths.{name}: {given}" if given is not None else f"pretrainer.loadables.{name}"
            )
            raise ModelFolderError(
                f"{yaml_path}: {where} needs {path}, which is not there (the model is read from local files "
                "only, never from the model hub: copy the file into the folder)"
            )
        files[name] = path
    if "embedding_model" not in files:
        raise ModelFolderError(
            f"{yaml_path}: its pretrainer does not load embedding_model (pretrainer.loadables), so the model "
            "would keep random weights"
        )
    return files


def read_pretrainer_files(spec, files: dict[str, Path], *, trusted: bool = False) -> dict[str, dict]:
    """Every file the folder's pretrainer loads, read as it will be (one line naming a file that cannot
    be); the checkpoints of :data:`EMBEDDING_MODULES`, by module."""
    from speechbrain.dataio.encoder import CategoricalEncoder

    loadables = spec["pretrainer"].get("loadables") or {}
    states = {}
    for name, path in files.items():
        tag = str(getattr(getattr(loadables.get(name), "tag", None), "value", None) or "")
        if not tag.endswith(".CategoricalEncoder"):
            state = read_checkpoint(path, trusted=trusted)
            if name in EMBEDDING_MODULES:
                states[name] = state
            continue
        try:  # a text file, read as SpeechBrain reads it (literal values only)
            CategoricalEncoder().load(path)
        except Exception as err:  # noqa: BLE001 (an empty or cut file fails with KeyError, ValueError...)
            reason = " ".join(str(err).split())[:120] or "no labels"
            raise ModelFolderError(
                f"{path}: cannot be read as a SpeechBrain label encoder ({type(err).__name__}: {reason}); "
                "copy the file again from the folder's source"
            ) from None
    return states


def read_spec(yaml_path: Path, folder: Path, *, trusted: bool = False):
    """The folder's YAML, references resolved, as plain nodes (nothing instantiated), and its overrides:
    a ``pretrained_path`` (a hub id in SpeechBrain's model cards) points at the folder, so the hub is never asked."""
    import ruamel.yaml
    from hyperpyyaml import resolve_references

    yaml = ruamel.yaml.YAML(typ="rt")
    try:
        text = yaml_path.read_text(encoding="utf-8")
        raw = yaml.load(text)  # nodes only: ruamel's round-trip loader calls nothing a tag names
        if not isinstance(raw, dict):
            raise ValueError("not a mapping of keys")
        # EncoderClassifier builds a YAML with a pretrainer whole (else only its modules are built, each checked).
        if "pretrainer" in raw:
            check_model_text(text, yaml_path, trusted=trusted)  # before an !include: is followed
        overrides = {"pretrained_path": str(folder.absolute())} if "pretrained_path" in raw else {}
        spec = yaml.load(resolve_references(text, overrides).getvalue())
    except UntrustedModelError:
        raise
    except Exception as err:  # noqa: BLE001 (ruamel and hyperpyyaml raise many types for a bad file)
        reason = " ".join(str(err).split())[:160]
        raise ModelFolderError(
            f"{yaml_path}: cannot be read as HyperPyYAML ({type(err).__name__}: {reason})"
        ) from None
    return spec, overrides


def read_checkpoint(path: Path, *, trusted: bool = False) -> dict:
    """A model folder's checkpoint (:func:`~.state_dicts.read_torch_file`): one line naming it if it
    cannot be read, saying whether it is damaged or holds Python objects (``trusted`` unpickles those)."""
    return read_torch_file(
        path,
        what="model checkpoint",
        trusted=trusted,
        again="rerun recipes/train.py with the training's options to export the best checkpoint again, "
        "or copy the folder again from its source",
    )


def _from_hparams(folder, yaml_path, savedir, device, overrides, spec, states):
    """``EncoderClassifier.from_hparams`` on the local folder, any failure as one line."""
    from speechbrain.inference.classifiers import EncoderClassifier
    from speechbrain.utils.fetching import FetchConfig

    try:
        # overwrite: links left in savedir by an earlier model folder are replaced, never reused. The
        # folder's YAML may seed torch (VPC 2024's calls torch.manual_seed): evaluation's own random
        # state stays as it was.
        with torch.random.fork_rng(devices=[]):
            return EncoderClassifier.from_hparams(
                source=str(folder.absolute()),
                savedir=str(savedir),
                overrides=overrides,
                run_opts={"device": device},
                fetch_config=FetchConfig(overwrite=True, allow_network=False),
            )
    except Exception as err:  # noqa: BLE001 (one line for whatever the folder's YAML makes fail)
        model = spec["embedding_model"] if isinstance(spec["embedding_model"], dict) else {}
        if "embedding_model" in states and isinstance(err, RuntimeError) and "size mismatch" in str(err):
            written = {
                key: model[key] for key in ("channels", "attention_channels", "lin_neurons") if key in model
            }
            raise ModelFolderError(
                f"{folder / MODEL_CHECKPOINT}: does not fit {yaml_path}'s embedding_model: the checkpoint has "
                f"{sizes_text(ecapa_sizes(states['embedding_model']))}, the YAML "
                f"{sizes_text(written) or 'other sizes'}; the folder's files do not belong together"
            ) from None
        reason = " ".join(str(err).split())[:200]
        raise ModelFolderError(
            f"{yaml_path}: EncoderClassifier.from_hparams cannot load the folder ({type(err).__name__}: {reason})"
        ) from None


def _checked_model(encoder, hparams, folder, yaml_path, files, states, stated) -> SpeakerModel:
    """The loaded modules, once their weights are their checkpoints' and the YAML agrees with the folder."""
    mods = encoder.mods
    model = mods["embedding_model"]
    # SpeechBrain's transfer is not strict (a weight missing on either side only logs): the model must
    # hold exactly its checkpoint's weights. (The normalizer's checkpoint is its statistics, not a state_dict.)
    keys, state = set(model.state_dict()), states["embedding_model"]
    if keys != set(state):
        lost, extra = sorted(keys - set(state)), sorted(set(state) - keys)
        raise ModelFolderError(
            f"{files['embedding_model']}: does not fit {yaml_path}'s embedding_model: {len(lost)} of its weights "
            f"are not in the checkpoint (first: {lost[:2]}), {len(extra)} of the checkpoint's are not in it "
            f"(first: {extra[:2]}); the folder's files do not belong together"
        )
    sizes = folder_sizes(mods["compute_features"], model, getattr(encoder.hparams, "sample_rate", None))
    _check_agreement(sizes, hparams, yaml_path, stated)
    logger.info(
        "%s: loaded with EncoderClassifier from its %s (%s)", folder, MODEL_HPARAMS, sizes_text(sizes)
    )
    return SpeakerModel(
        folder=folder,
        compute_features=mods["compute_features"],
        mean_var_norm=mods["mean_var_norm"],
        embedding_model=model,
        checkpoint=files["embedding_model"],
        loader="EncoderClassifier",
        files=(yaml_path, *(files[name] for name in ("compute_features", "mean_var_norm") if name in files)),
        sizes=sizes,
    )


def folder_sizes(compute_features, embedding_model, sample_rate=None) -> dict:
    """The folder model's ``sample_rate``, ``n_mels`` and ECAPA sizes, as the evaluation YAML names them.

    ``sample_rate``: the folder YAML's key, else its Fbank's (SpeechBrain's default 16000).

    >>> from speechbrain.lobes.features import Fbank
    >>> from speechbrain.lobes.models.ECAPA_TDNN import ECAPA_TDNN
    >>> model = ECAPA_TDNN(40, channels=[8, 8, 8, 8, 24], attention_channels=4, lin_neurons=12)
    >>> folder_sizes(Fbank(n_mels=40), model)
    {'sample_rate': 16000, 'n_mels': 40, 'channels': [8, 8, 8, 8, 24], 'attention_channels': 4, 'lin_neurons': 12}
    """
    if sample_rate is None:
        sample_rate = getattr(getattr(compute_features, "compute_STFT", None), "sample_rate", None)
    n_mels = getattr(getattr(compute_features, "compute_fbanks", None), "n_mels", None)
    state = embedding_model.state_dict()
    if n_mels is None and "blocks.0.conv.conv.weight" in state:  # another front end: the ECAPA's input
        n_mels = int(state["blocks.0.conv.conv.weight"].shape[1])
    found = {key: value for key, value in ecapa_sizes(state).items() if value != []}
    return {"sample_rate": sample_rate, "n_mels": n_mels, **found}


def _check_agreement(sizes: dict, hparams: dict, yaml_path: Path, stated) -> None:
    """The audio's sample rate (always) and every model key the user stated must be the folder's."""
    rate = hparams.get("sample_rate")
    if rate is not None and sizes.get("sample_rate") is not None and int(rate) != int(sizes["sample_rate"]):
        raise ModelMismatchError(
            f"{yaml_path}: its model takes {sizes['sample_rate']} Hz audio, the evaluation YAML's sample_rate is "
            f"{rate}: evaluate a model of the data's rate (or data at the model's)"
        )
    for key in MODEL_KEYS:
        given, found = hparams.get(key), sizes.get(key)
        if key in stated and key in hparams and given != found:
            there = "none (not an ECAPA-TDNN)" if found is None else f"{key}={found}"
            raise ModelMismatchError(
                f"{yaml_path}: its model has {there}, but --{key}={given} was given; the model folder decides "
                f"the model: leave --{key} out, or set eval_model_folder to a model with {key}={given}"
            )


def load_bare_checkpoint(hparams: dict, folder: Path) -> SpeakerModel:
    """A folder with ``embedding_model.ckpt`` alone, in the evaluation YAML's modules (its sizes must fit)."""
    checkpoint = folder / MODEL_CHECKPOINT
    state = read_checkpoint(checkpoint)
    model = hparams["embedding_model"]
    try:
        model.load_state_dict(state)
    except RuntimeError as err:
        theirs, ours = ecapa_sizes(state), ecapa_sizes(model.state_dict())
        if theirs != ours:
            sizes = f"the export has {sizes_text(theirs)}, the YAML's embedding_model {sizes_text(ours)}"
        else:
            sizes = " ".join(str(err).split())[:200]
        raise ExportError(
            f"{checkpoint}: does not fit: {sizes}; give the training's values (its train_hyperparams.yaml "
            "beside the export lists them)"
        ) from None
    if str(folder) not in _BARE_LOGGED:
        _BARE_LOGGED.add(str(folder))
        logger.warning(
            "%s: it has no %s; loaded %s into the evaluation YAML's embedding_model (with its "
            "compute_features and mean_var_norm)",
            folder,
            MODEL_HPARAMS,
            MODEL_CHECKPOINT,
        )
    return SpeakerModel(
        folder=folder,
        compute_features=hparams["compute_features"],
        mean_var_norm=hparams["mean_var_norm"],
        embedding_model=model,
        checkpoint=checkpoint,
        loader="fallback",
        sizes=ecapa_sizes(model.state_dict()),
    )


def ecapa_sizes(state: dict) -> dict:
    """``channels``, ``attention_channels`` and ``lin_neurons`` of an ECAPA-TDNN state dict (what is found).

    >>> from speechbrain.lobes.models.ECAPA_TDNN import ECAPA_TDNN
    >>> model = ECAPA_TDNN(80, channels=[16, 16, 16, 16, 48], attention_channels=8, lin_neurons=16)
    >>> ecapa_sizes(model.state_dict())
    {'channels': [16, 16, 16, 16, 48], 'attention_channels': 8, 'lin_neurons': 16}
    """
    channels = []
    key = "blocks.0.conv.conv.weight"
    while key in state:
        channels.append(int(state[key].shape[0]))
        key = f"blocks.{len(channels)}.tdnn2.conv.conv.weight"
    if "mfa.conv.conv.weight" in state:
        channels.append(int(state["mfa.conv.conv.weight"].shape[0]))
    sizes = {"channels": channels}
    for name, key in (("attention_channels", "asp.tdnn.conv.conv.weight"), ("lin_neurons", "fc.conv.weight")):
        if key in state:
            sizes[name] = int(state[key].shape[0])
    return sizes


def sizes_text(sizes: dict) -> str:
    return ", ".join(f"{name}={value}" for name, value in sizes.items())

"""Model families: who reads a speaker-model folder of each kind, for fine-tuning and for evaluation.

A *family* is one kind of embedding model (the paper's ECAPA-TDNN; VPC 2026's WavLM+ECAPA
``ecapa_ssl``). It says which folders are its own and how to read one: ``read`` gives the weights of
the training's modules under the training's module names (its name mapping) and what the folder
builds, so ``init_from: <folder>`` fine-tunes it (:mod:`segreconcat_aug.training.init_from`);
``load``, where SpeechBrain's ``EncoderClassifier`` cannot load the folder, gives evaluation's
:class:`~segreconcat_aug.models.folder.SpeakerModel`. The folder's kind is the class of the
``embedding_model`` its ``hyperparams.yaml`` builds (the ``!new:`` tag); a folder without one is
the first family's whose ``recognizes`` says so. A folder with ``hyperparams.yaml`` whose class no
family claims is read by the generic SpeechBrain reader (``speechbrain``), so any SpeechBrain
speaker model can be evaluated and fine-tuned; nothing dispatches with ``if model == ...``.

Adding a family: a module of this wing that calls :func:`register_model_family` when imported, and
its name in :data:`FAMILY_MODULES` (imported on the first lookup, as the strategies' registry does)::

    register_model_family(ModelFamily(
        "ecapa_ssl",
        classes=("segreconcat_aug.models.ecapa_ssl.EcapaSSL",),
        read=read_ecapa_ssl_folder,        # (folder, spec or None, *, trusted) -> PretrainedModel
        recognizes=has_wavlm_checkpoint,   # a VPC 2026 exp/asv_ssl folder has no hyperparams.yaml
    ))

>>> sorted(model_families())
['ecapa', 'ecapa_ssl', 'speechbrain']
>>> model_family("ecapa").classes
('speechbrain.lobes.models.ECAPA_TDNN.ECAPA_TDNN',)
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import UserError
from .trust import check_model_text

#: Modules of this wing that register a family when imported (add a new family's module here).
# ecapa_ssl_folders before ecapa: both recognize a folder with embedding_model.ckpt and no YAML.
FAMILY_MODULES = ("pretrained", "ecapa_ssl_folders", "ecapa")
#: The family that reads any SpeechBrain folder whose embedding model no other family claims.
GENERIC = "speechbrain"


class UnknownModelFamilyError(UserError, ValueError):
    """A family name that no registered family has."""


class ModelDefinitionError(UserError, ValueError):
    """A module a model folder's YAML defines cannot be built (a class that does not exist, bad arguments)."""


@dataclass(frozen=True)
class Definition:
    """One module as a folder's YAML builds it: the dotted class, its arguments, and its HyperPyYAML text.

    >>> made = Definition("torch.nn.Linear", {"in_features": 2, "out_features": 3},
    ...                   "module: !new:torch.nn.Linear {in_features: 2, out_features: 3}").build()
    >>> made.weight.shape
    torch.Size([3, 2])
    """

    cls: str
    kwargs: dict  # plain values (a tagged value as its tag and text), for messages
    text: str  # ``module: !new:<cls> ...``: what :meth:`build` instantiates
    source: str = ""  # where it was defined ("<folder>/hyperparams.yaml's embedding_model"), for messages
    trusted: bool = False  # build tags beyond a speaker model's modules (models.trust)

    @classmethod
    def of(cls, dotted: str, kwargs: dict) -> Definition:
        """The definition of ``dotted(**kwargs)`` for plain values (numbers, lists of them).

        >>> Definition.of("torch.nn.Linear", {"in_features": 2, "out_features": 3}).build().weight.shape
        torch.Size([3, 2])
        """
        arguments = ", ".join(f"{key}: {value}" for key, value in kwargs.items())
        return cls(dotted, kwargs, f"module: !new:{dotted} {{{arguments}}}\n")

    def build(self):
        """The module, built on the CPU from the folder's definition (no weights loaded); one line if it
        cannot be.

        >>> Definition.of("torch.nn.Nowhere", {"size": 2}).build()  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        segreconcat_aug.models.registry.ModelDefinitionError: torch.nn.Nowhere: cannot be built (ImportError: ...
        """
        from hyperpyyaml import load_hyperpyyaml

        where = self.source or self.cls
        check_model_text(self.text, where, trusted=self.trusted)
        try:
            return load_hyperpyyaml(self.text)["module"]
        except Exception as err:  # noqa: BLE001 (an import, an argument, the module's own check: one line each)
            reason = " ".join(str(err).split())[:200]
            raise ModelDefinitionError(
                f"{where}: cannot be built ({type(err).__name__}: {reason}); the folder's YAML must name a class "
                "that exists here, with arguments it takes"
            ) from None


@dataclass(frozen=True)
class PretrainedModel:
    """What fine-tuning takes from a speaker-model folder (a family's ``read`` gives it).

    ``states``: the weights, keyed by the TRAINING's module names (``embedding_model``; a family whose
    checkpoint names its modules otherwise maps them here). ``definitions``: the modules the folder
    builds (``compute_features``, ``mean_var_norm``, ``embedding_model``), which the training's must
    compute alike. ``hparams``: training-YAML values the family sets itself (e.g. the path of a frozen
    front end's weights); the model's sizes come from ``definitions``.
    """

    folder: Path
    family: str
    source: Path  # what describes the model: hyperparams.yaml, or the checkpoint of a folder without one
    states: dict[str, dict]
    files: dict[str, Path]  # module name -> the file its weights were read from
    definitions: dict[str, Definition] = field(default_factory=dict)
    sample_rate: int | None = None
    hparams: dict = field(default_factory=dict)


@dataclass(frozen=True)
class ModelFamily:
    """One kind of embedding model and how its folders are read (see the module's text)."""

    name: str
    read: Callable[..., PretrainedModel]  # (folder, spec or None, *, trusted) -> PretrainedModel
    classes: tuple[str, ...] = ()  # embedding_model classes (dotted) whose folders are this family's
    recognizes: Callable[[Path], bool] | None = None  # a folder without hyperparams.yaml that is its own
    load: Callable | None = (
        None  # (folder, hparams, *, savedir, device, stated) -> SpeakerModel; None: EncoderClassifier
    )
    description: str = ""


FAMILIES: dict[str, ModelFamily] = {}


def register_model_family(family: ModelFamily) -> ModelFamily:
    """Add ``family`` to :data:`FAMILIES` (its name, and each of its classes, at most once)."""
    if family.name in FAMILIES:
        raise ValueError(f"model family {family.name!r} is already registered")
    taken = {cls: other.name for other in FAMILIES.values() for cls in other.classes}
    for cls in family.classes:
        if cls in taken:
            raise ValueError(f"{cls} is already read by model family {taken[cls]!r}")
    FAMILIES[family.name] = family
    return family


def _load_families() -> None:
    for name in FAMILY_MODULES:
        importlib.import_module(f"{__package__}.{name}")


def model_families() -> dict[str, ModelFamily]:
    """Every registered family, by name (the built-in ones loaded first)."""
    _load_families()
    return dict(FAMILIES)


def model_family(name: str) -> ModelFamily:
    """The family registered as ``name``; a clear error lists the others."""
    families = model_families()
    if name not in families:
        raise UnknownModelFamilyError(f"unknown model family {name!r}; registered: {sorted(families)}")
    return families[name]


def embedding_class(spec: Mapping) -> str | None:
    """The dotted class of a YAML's ``embedding_model`` (its ``!new:`` tag), or None.

    >>> import ruamel.yaml
    >>> embedding_class(ruamel.yaml.YAML().load("embedding_model: !new:a.b.Model {x: 1}"))
    'a.b.Model'
    """
    node = spec.get("embedding_model")
    tag = getattr(getattr(node, "tag", None), "value", None)
    if not tag or not tag.startswith("!new:"):
        return None
    return tag[len("!new:") :]


def family_of(folder: Path, spec: Mapping | None) -> ModelFamily | None:
    """The family of a folder: by its YAML's embedding class (the generic reader when none claims
    it), else the first whose ``recognizes`` accepts the folder; None when no family reads it."""
    families = model_families()
    if spec is not None:
        cls = embedding_class(spec)
        for family in families.values():
            if cls is not None and cls in family.classes:
                return family
        return families[GENERIC]

    # In FAMILY_MODULES order (a challenge exp/asv_ssl/ folder is also a bare ECAPA checkpoint's layout),
    # whatever order the modules happened to be imported in; other families after, as registered.
    def rank(family: ModelFamily) -> int:
        module = getattr(family.read, "__module__", "").rpartition(".")[2]
        return FAMILY_MODULES.index(module) if module in FAMILY_MODULES else len(FAMILY_MODULES)

    for family in sorted(families.values(), key=rank):
        if family.recognizes is not None and family.recognizes(Path(folder)):
            return family
    return None

"""Model families: who reads a speaker-model folder of each kind, for fine-tuning and for evaluation.

A folder's family is the one claiming the class of the ``embedding_model`` its ``hyperparams.yaml``
builds (the generic SpeechBrain reader when none does), else the first whose ``recognizes`` accepts
it. Adding a family: docs/design.md.

>>> sorted(model_families())
['ecapa', 'ecapa_ssl', 'speechbrain']
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import UserError

#: Modules of this wing that register a family when imported (add a new family's module here).
# ecapa_ssl_folders before ecapa: both recognize a folder with embedding_model.ckpt and no YAML.
FAMILY_MODULES = ("pretrained", "ecapa_ssl_folders", "ecapa")
#: The family that reads any SpeechBrain folder whose embedding model no other family claims.
GENERIC = "speechbrain"


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

    @classmethod
    def of(cls, dotted: str, kwargs: dict) -> Definition:
        """The definition of ``dotted(**kwargs)`` for plain values (numbers, lists of them).

        >>> Definition.of("torch.nn.Linear", {"in_features": 2, "out_features": 3}).build().weight.shape
        torch.Size([3, 2])
        """
        arguments = ", ".join(f"{key}: {value}" for key, value in kwargs.items())
        return cls(dotted, kwargs, f"module: !new:{dotted} {{{arguments}}}\n")

    def build(self):
        """The module, built on the CPU (no weights loaded); one line if it cannot be. Its tags were
        checked with the folder's whole YAML (:func:`.folder.read_spec`).

        >>> Definition.of("torch.nn.Nowhere", {"size": 2}).build()  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        segreconcat_aug.models.registry.ModelDefinitionError: torch.nn.Nowhere: cannot be built (ImportError: ...
        """
        from hyperpyyaml import load_hyperpyyaml

        where = self.source or self.cls
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
    """What fine-tuning takes from a speaker-model folder (a family's ``read`` gives it): ``states`` under
    the TRAINING's module names, the ``definitions`` the training's modules must compute alike, and
    ``hparams`` the family sets itself (e.g. a frozen front end's weights)."""

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
    load: Callable | None = None  # (folder, hparams, *, savedir, device, stated); None: EncoderClassifier


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


def model_families() -> dict[str, ModelFamily]:
    """Every registered family, by name (the built-in ones loaded first)."""
    for name in FAMILY_MODULES:
        importlib.import_module(f"{__package__}.{name}")
    return dict(FAMILIES)


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

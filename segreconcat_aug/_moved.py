"""The module paths of 0.1.0, before the package was split into wings, and of modules moved since, still import.

``import segreconcat_aug.augment`` gives the module now at ``segreconcat_aug.method.augment``
(the same object, so ``monkeypatch`` on either name patches both). A path whose module was
split (``segreconcat_aug.mcadams``) gives a module that forwards every name to the modules that
now hold them. New code imports the new paths; docs/design.md lists them.

>>> import importlib
>>> importlib.import_module("segreconcat_aug.kaldi") is importlib.import_module("segreconcat_aug.data.kaldi")
True
>>> from segreconcat_aug.mcadams import McAdamsAnonymizer, anonymize_folder
>>> anonymize_folder.__module__, McAdamsAnonymizer.__module__
('segreconcat_aug.anonymizers.folder', 'segreconcat_aug.anonymizers.mcadams')
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types

#: Old module (relative to the package) -> the module(s) that hold its names now (several: the first
#: that has a name wins). A dotted old name is a module of a wing that moved to another wing.
MOVED: dict[str, tuple[str, ...]] = {
    "kaldi": ("data.kaldi",),
    "audio": ("data.audio",),
    "audio_check": ("data.audio_check",),
    "jsonl_files": ("data.jsonl_files",),
    "jobs": ("data.jobs",),
    "vpac": ("data.vpac",),
    "protocols": ("data.protocols",),
    "mixed_trials": ("data.mixed_trials",),
    "alignment": ("align.cache",),
    "whisper": ("align.whisper",),
    "aligners": ("align.aligners",),
    "segments": ("method.segments",),
    "strategies": ("method.strategies",),
    "augment": ("method.augment",),
    "similarity": ("method.similarity",),
    "dtw": ("method.dtw",),
    "orders": ("method.orders",),
    "data_prep": ("training.data_prep",),
    "manifest": ("training.manifest",),
    "pipeline": ("training.pipeline",),
    "embeddings": ("evaluation.embeddings",),
    "scoring": ("evaluation.scoring",),
    "metrics": ("evaluation.metrics",),
    "bootstrap": ("evaluation.bootstrap",),
    "privacy": ("evaluation.privacy",),
    "report": (
        "evaluation.score_files",
        "evaluation.intervals",
        "evaluation.system_report",
        "evaluation.figures",
        "evaluation.references",
        "evaluation.comparison",
        "evaluation.tables",
    ),
    "mcadams": ("anonymizers.mcadams", "anonymizers.folder"),
    # moved into the models wing, which training and evaluation share (#29)
    "evaluation.model_folder": ("models.folder",),
    "training.export": ("models.export",),
}
# ``segreconcat_aug.evaluation`` (the system runner of 0.1.0) is now the evaluation wing, whose
# package re-exports the runner's names (segreconcat_aug/evaluation/__init__.py).

_PACKAGE = __name__.rpartition(".")[0]


def new_location(fullname: str) -> tuple[str, ...] | None:
    """The new module(s) of an old dotted name, submodules of a moved package included.

    >>> new_location("segreconcat_aug.aligners.pocketsphinx"), new_location("segreconcat_aug.cli")
    (('segreconcat_aug.align.aligners.pocketsphinx',), None)
    >>> new_location("segreconcat_aug.evaluation.model_folder"), new_location("segreconcat_aug.evaluation.metrics")
    (('segreconcat_aug.models.folder',), None)
    """
    prefix = _PACKAGE + "."
    if not fullname.startswith(prefix):
        return None
    parts = fullname[len(prefix) :].split(".")
    for cut in range(len(parts), 0, -1):  # the longest old name that is a prefix of this one
        head, tail = ".".join(parts[:cut]), ".".join(parts[cut:])
        if head in MOVED:
            return tuple(f"{prefix}{target}" + (f".{tail}" if tail else "") for target in MOVED[head])
    return None


class _Forwarding(types.ModuleType):
    """An old module that was split: each name comes from the first new module that has it."""

    def __init__(self, name: str, targets: tuple[str, ...]):
        super().__init__(name, f"moved to {', '.join(targets)}")
        self.__targets = [importlib.import_module(target) for target in targets]
        self.__all__ = sorted(
            {n for m in self.__targets for n in getattr(m, "__all__", vars(m)) if n[:1] != "_"}
        )

    def __getattr__(self, name):
        for module in self.__targets:
            if hasattr(module, name):
                return getattr(module, name)
        raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}")

    def __dir__(self):
        return sorted({*super().__dir__(), *self.__all__})


class _MovedLoader(importlib.abc.Loader):
    def __init__(self, targets: tuple[str, ...]):
        self.targets = targets

    def create_module(self, spec):
        if len(self.targets) == 1:
            return importlib.import_module(self.targets[0])  # the same module object under both names
        return _Forwarding(spec.name, self.targets)

    def exec_module(self, module):
        pass  # already executed under its new name


class MovedModuleFinder(importlib.abc.MetaPathFinder):
    """Finds 0.1.0 module paths (:data:`MOVED`); goes first so a moved file is never loaded twice."""

    def find_spec(self, fullname, path=None, target=None):
        targets = new_location(fullname)
        if targets is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, _MovedLoader(targets))


def install() -> None:
    """Put the finder first on ``sys.meta_path`` (once)."""
    if not any(isinstance(finder, MovedModuleFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, MovedModuleFinder())

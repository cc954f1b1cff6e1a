"""SegReConcat on pooled training sets (``train_systems`` with ``mode`` concat or rearranged).

Each system's copy of an utterance has its own word times, so each row is augmented with its own
system's alignments (and orders), exactly as a run on that system alone would.

>>> pooled_key("B4", "1034-121119-0001"), split_pooled_key("B4/1034-121119-0001")
('B4/1034-121119-0001', ('B4', '1034-121119-0001'))
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

import numpy as np

from ..data.jsonl_files import cache_files
from ..errors import UserError
from ..method.augment import MissingAlignmentError, SegReConcat
from ..method.render import Plan
from ..method.strategies import get_strategy

logger = logging.getLogger(__name__)

#: The keys of one pooled system's entry in ``train_system_caches``.
CACHE_KEYS = ("alignment_cache", "orders_cache")


class PooledCachesError(UserError, ValueError):
    """A pooled SegReConcat run lacks a system's alignment (or order) cache, or shares one between systems."""


def pooled_key(system: str, utt_id: str) -> str:
    """The augmenter's key of a pooled training row: its system and its source utterance."""
    return f"{system}/{utt_id}"


def split_pooled_key(key: str) -> tuple[str, str]:
    """``<system>/<utt_id>`` -> ``(system, utt_id)`` (a system is a folder-name suffix: it has no ``/``)."""
    system, _, utt_id = key.partition("/")
    return system, utt_id


def pooled_systems(system: str, train_systems) -> list[str]:
    """The systems whose training sets are pooled: ``system`` (the attacked one) first, then the others listed.

    >>> pooled_systems("T10-2", ["B4", "T10-2"]), pooled_systems("T10-2", ["B4"])
    (['T10-2', 'B4'], ['T10-2', 'B4'])
    """
    return list(dict.fromkeys([system, *(train_systems or [])]))


def other_systems(values: Mapping) -> list[str]:
    """The pooled systems besides the attacked one, in ``train_systems`` order.

    >>> other_systems({"system": "T10-2", "train_systems": ["T10-2", "B4", "B4"]})
    ['B4']
    """
    return pooled_systems(values["system"], values.get("train_systems"))[1:]


def augments_pooled(values: Mapping) -> bool:
    """Whether a run pools systems and augments them (the case this module serves)."""
    return bool(values.get("train_systems")) and values.get("mode", "none") != "none"


def pooled_cache_overrides(values: Mapping, stated: Mapping, resolve: Callable[[str], Mapping]) -> dict:
    """``{"train_system_caches": ...}`` for a pooled SegReConcat run the user gave none for, else ``{}``
    (a ``train_system_caches`` the user gives is taken as it is, and must name every other system).

    >>> paths = lambda name: {"alignment_cache": f"a/{name}.jsonl", "orders_cache": f"o/{name}.jsonl"}
    >>> pooled_cache_overrides({"system": "T10-2", "train_systems": ["B4"], "mode": "concat"}, {}, paths)
    {'train_system_caches': {'B4': {'alignment_cache': 'a/B4.jsonl', 'orders_cache': 'o/B4.jsonl'}}}
    """
    if not augments_pooled(values) or stated.get("train_system_caches"):
        return {}
    caches = {}
    for name in other_systems(values):
        resolved = resolve(name)
        caches[name] = {key: str(resolved[key]) for key in CACHE_KEYS if key in resolved}
    return {"train_system_caches": caches}


def system_hparams(hparams: Mapping, system: str) -> dict:
    """The training hyperparameters as one pooled system's augmenter sees them: its own caches."""
    if system == hparams["system"]:
        return dict(hparams)
    entry = (hparams.get("train_system_caches") or {}).get(system) or {}
    return {**hparams, "system": system, **{key: entry[key] for key in CACHE_KEYS if key in entry}}


def check_pooled_caches(values: Mapping) -> None:
    """Before anything is written: every pooled system has its own alignment cache (and, for AR/SR, its
    own order cache), and ``train_system_caches`` names only pooled systems."""
    if not augments_pooled(values):
        return
    others = other_systems(values)
    caches = values.get("train_system_caches") or {}
    unknown = sorted(set(caches) - set(others))
    if unknown:
        raise PooledCachesError(
            f"train_system_caches: {unknown} {'is' if len(unknown) == 1 else 'are'} not pooled with "
            f"{values['system']} (train_systems: {list(values['train_systems'])}); list only the other pooled systems"
        )
    keys = CACHE_KEYS if get_strategy(values["strategy"]).precomputed else CACHE_KEYS[:1]
    seen = {key: {str(values[key]): values["system"]} for key in keys}
    for name in others:
        entry = caches.get(name) or {}
        for key in keys:
            if not entry.get(key):
                raise PooledCachesError(
                    f"train_system_caches: pooled system {name!r} has no {key}; give it as "
                    f'--train_system_caches="{{{name}: {{{key}: <file>}}}}" (with every other pooled system\'s), or '
                    "leave train_system_caches {} to take the YAML's paths with system set to each"
                )
            path = str(entry[key])
            if path in seen[key]:
                raise PooledCachesError(
                    f"{key}: {path} is the cache of both {seen[key][path]} and {name}: each pooled system needs "
                    f"its own (a --{key} given on the command line is {values['system']}'s only; give the others' "
                    f'as --train_system_caches="{{{name}: {{{key}: <file>}}}}")'
                )
            seen[key][path] = name
            what = "alignment cache" if key == "alignment_cache" else "order cache"
            cache_files(path, what=f"{what} of pooled system {name} (train_system_caches)")


class PooledSegReConcat:
    """One :class:`SegReConcat` per pooled system, chosen by the key ``<system>/<utt_id>``
    (:func:`pooled_key`); the rest of the training pipeline sees one augmenter.
    """

    def __init__(self, augmenters: Mapping[str, SegReConcat]):
        if not augmenters:
            raise ValueError("PooledSegReConcat needs at least one system's augmenter")
        self.augmenters = dict(augmenters)
        self.mode = next(iter(self.augmenters.values())).mode

    @property
    def systems(self) -> list[str]:
        return list(self.augmenters)

    @property
    def plans_from_length(self) -> bool:
        return all(augmenter.plans_from_length for augmenter in self.augmenters.values())

    def _of(self, key: str) -> tuple[SegReConcat, str]:
        system, utt_id = split_pooled_key(key)
        try:
            return self.augmenters[system], utt_id
        except KeyError:
            raise MissingAlignmentError(
                f"training row of {system!r} (utterance {utt_id!r}): no such pooled system (pooled: {self.systems})"
            ) from None

    def plan(
        self, audio, key: str, epoch: int, num_samples: int | None = None
    ) -> tuple[Plan | None, str | None]:
        augmenter, utt_id = self._of(key)
        return augmenter.plan(audio, utt_id, epoch, num_samples=num_samples)

    def __call__(self, audio, key: str, epoch: int) -> np.ndarray:
        augmenter, utt_id = self._of(key)
        return augmenter(audio, utt_id, epoch)

    def check_coverage(self, keys) -> list[str]:
        """:meth:`SegReConcat.check_coverage` of each system's utterances; a refusal names the system."""
        by_system: dict[str, list[str]] = {name: [] for name in self.augmenters}
        for key in keys:
            system, utt_id = split_pooled_key(key)
            if system not in by_system:
                self._of(key)  # raises, naming the system
            by_system[system].append(utt_id)
        missing = []
        for system, utt_ids in by_system.items():
            try:
                found = self.augmenters[system].check_coverage(utt_ids)
            except MissingAlignmentError as err:
                raise MissingAlignmentError(f"pooled system {system}: {err}") from None
            missing += [pooled_key(system, utt_id) for utt_id in found]
        return missing


def coverage_keys(train_rows, augmenter) -> list[str]:
    """The keys whose alignments the training needs: source utterance ids, or ``<system>/<utt_id>``
    pairs of a pooled manifest (its ``system`` column) for :class:`PooledSegReConcat`."""
    if isinstance(augmenter, PooledSegReConcat):
        return [pooled_key(system, utt_id) for system, utt_id in train_rows.distinct("system", "utt_id")]
    return train_rows.distinct("utt_id")

"""Rearrangement strategies: the *order* step of SegReConcat.

A strategy is ``(segments, audio, rng, *, sample_rate, **options) -> order``, a permutation of
``range(len(segments))``, registered under its YAML name.

>>> import numpy as np
>>> from segreconcat_aug.method.segments import Segments
>>> segs = Segments(np.array([[0, 10], [10, 20], [20, 30]]), False)
>>> order = get_strategy("random").fn(segs, None, np.random.default_rng(0), sample_rate=16000)
>>> sorted(order.tolist())
[0, 1, 2]
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..errors import UserError
from .segments import Segments


class UnknownStrategyError(UserError, ValueError):
    """A strategy name that no registered strategy has (the message lists those that are)."""


@dataclass(frozen=True)
class Strategy:
    """A registered rearrangement strategy."""

    name: str
    fn: Callable[..., np.ndarray]
    precomputed: bool  # True: orders come from the offline order cache
    paper_name: str
    uses_audio: bool = True  # False: the order needs only the segments (the pipeline may read partially)


STRATEGIES: dict[str, Strategy] = {}


def register_strategy(name: str, *, precomputed: bool = False, paper_name: str = "", uses_audio: bool = True):
    """Decorator adding a strategy function to :data:`STRATEGIES`.

    ``precomputed``: orders come from the offline order cache (too costly for DataLoader workers);
    ``uses_audio=False``: the function may get ``audio=None``, so a crop reads only its own samples.
    """

    def decorate(fn):
        if name in STRATEGIES:
            raise ValueError(f"strategy {name!r} is already registered")
        STRATEGIES[name] = Strategy(name, fn, precomputed, paper_name or name, uses_audio)
        return fn

    return decorate


def get_strategy(name: str) -> Strategy:
    """The strategy registered as ``name``; a clear error lists the others."""
    _load_builtin_strategies()
    try:
        return STRATEGIES[name]
    except KeyError:
        raise UnknownStrategyError(f"unknown strategy {name!r}; available: {sorted(STRATEGIES)}") from None


def is_order_of(order, count: int) -> bool:
    """True when ``order`` is a permutation of ``range(count)``: each index exactly once.

    >>> is_order_of([2, 0, 1], 3), is_order_of([0, 0, 2], 3), is_order_of([0, 1], 3), is_order_of([], 0)
    (True, False, False, True)
    """
    order = np.asarray(order)
    if order.shape != (count,):
        return False
    if count == 0:
        return True
    if order.dtype.kind not in "iu" or order.min() < 0:  # not integers: e.g. a JSON number past int64
        return False
    return bool((np.bincount(order, minlength=count) == 1).all())


def _load_builtin_strategies() -> None:
    # Similarity strategies live in their own module (heavier imports); importing
    # it registers them. Until that module exists the registry holds RR alone.
    if importlib.util.find_spec(f"{__package__}.similarity") is not None:
        importlib.import_module(f"{__package__}.similarity")


@register_strategy("random", paper_name="RR", uses_audio=False)
def random_order(segments: Segments, audio, rng: np.random.Generator, **_) -> np.ndarray:
    """RR: a uniformly random permutation of the segments."""
    return rng.permutation(len(segments))

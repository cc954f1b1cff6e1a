"""The order cache: precomputed AR/SR orders, one utterance per JSON line.

An order is valid only for the segmentation it was computed on: ``key`` hashes everything that fixes
it, and :func:`load_orders` refuses a record whose key differs (:class:`StaleOrderError`).

>>> import tempfile, os
>>> from segreconcat_aug.align.cache import AlignmentIndex
>>> alignments = AlignmentIndex(["u1"], [1.0], [0, 3], [0.0, 0.3, 0.6], [0.3, 0.6, 1.0], ["test"])
>>> path = os.path.join(tempfile.mkdtemp(), "orders.jsonl")
>>> with open(path, "w") as handle:
...     _ = handle.write(order_record("u1", [2, 0, 1], strategy="acoustic", options={},
...                                   alignments=alignments, segment_policy="cover") + "\\n")
>>> load_orders(path, strategy="acoustic", alignments=alignments, segment_policy="cover")["u1"].tolist()
[2, 0, 1]
>>> load_orders(path, strategy="acoustic", alignments=alignments, segment_policy="words")
Traceback (most recent call last):
...
segreconcat_aug.method.orders.StaleOrderError: ...orders.jsonl:1: the acoustic order of utterance 'u1' is stale ...
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from ..align.cache import AlignmentIndex
from ..data.jsonl_files import RepeatedIds, cache_files, iter_jsonl
from ..errors import UserError
from .segments import span_rule
from .strategies import get_strategy, is_order_of

logger = logging.getLogger(__name__)


class OrderCacheError(UserError, ValueError):
    """An order cache line is malformed or conflicts with another; names file and line."""


class StaleOrderError(OrderCacheError):
    """A cached order does not match the current alignment, segmentation or options."""


FORMAT = 2  # 2: keys hash the span rule and every option, defaults included
#: Strategies whose records carry the segments' peak (SR's pad-and-normalize divides by it).
PEAK_STRATEGIES = ("semantic",)


class Orders(dict):
    """Utterance id -> int64 order, as :func:`load_orders` returns; ``peaks``: id -> segments' peak
    (SR records; empty for the other strategies)."""

    def __init__(self, *args, peaks=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.peaks: dict[str, float] = dict(peaks or {})


def canonical_options(options: Mapping | None) -> str:
    """Strategy options as the one JSON text a key hashes (sorted keys, no spaces)."""
    try:
        return json.dumps(dict(options or {}), sort_keys=True, separators=(",", ":"))
    except TypeError as err:
        raise ValueError(f"strategy options must be JSON values (numbers, strings, lists): {err}") from None


def order_key(
    utt_id: str,
    *,
    strategy: str,
    options: Mapping | None,
    alignments: AlignmentIndex,
    segment_policy: str,
    min_leading_silence: float = 0.0,
) -> str:
    """16 hex digits that change with anything the utterance's order depends on.

    >>> from segreconcat_aug.align.cache import AlignmentIndex
    >>> a = AlignmentIndex(["u"], [1.0], [0, 2], [0.0, 0.5], [0.5, 1.0], ["t"])
    >>> b = AlignmentIndex(["u"], [1.0], [0, 2], [0.0, 0.4], [0.4, 1.0], ["t"])
    >>> key = dict(strategy="acoustic", options={}, segment_policy="cover")
    >>> order_key("u", alignments=a, **key) == order_key("u", alignments=b, **key)
    False
    >>> same = dict(strategy="acoustic", options={}, alignments=a)  # authors' AR cut = onsets
    >>> order_key("u", segment_policy="authors", **same) == order_key("u", segment_policy="onsets", **same)
    True
    """
    starts, ends = alignments.spans(utt_id)
    payload = {
        "format": FORMAT,
        "strategy": strategy,
        "options": resolved_options(strategy, options),
        "span_rule": span_rule(segment_policy, strategy),
        "min_leading_silence": round(float(min_leading_silence), 6),
        "duration": round(alignments.duration(utt_id), 4),
        "words": [[round(float(s), 4), round(float(e), 4)] for s, e in zip(starts, ends)],
    }
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"))
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:16]


def order_record(
    utt_id: str,
    order: Sequence[int],
    *,
    strategy: str,
    options: Mapping | None,
    alignments: AlignmentIndex,
    segment_policy: str,
    min_leading_silence: float = 0.0,
    peak: float | None = None,
) -> str:
    """One cache line (without the newline) for ``utt_id``; ``peak``: SR's segments' peak."""
    key = order_key(
        utt_id,
        strategy=strategy,
        options=options,
        alignments=alignments,
        segment_policy=segment_policy,
        min_leading_silence=min_leading_silence,
    )
    record = {
        "id": utt_id,
        "strategy": strategy,
        "order": [int(k) for k in order],
        "key": key,
        "format": FORMAT,
        "segment_policy": segment_policy,
        "span_rule": span_rule(segment_policy, strategy),
        "min_leading_silence": float(min_leading_silence),
        "options": resolved_options(strategy, options),
    }
    if peak is not None:
        record["peak"] = float(peak)
    return json.dumps(record, separators=(", ", ": "))


_WHAT = "order cache (made by recipes/compute_orders.py)"


def _what_changed(record: Mapping, strategy: str, segment_policy: str, min_leading_silence: float) -> str:
    """Why a record's key no longer matches: the settings that differ, else the word times."""
    rule = span_rule(segment_policy, strategy)
    changes = []
    if record.get("format") != FORMAT:
        changes.append("written by an older compute_orders.py (before the authors' segmentation defaults)")
    cached_rule = record.get("span_rule", record.get("segment_policy"))
    if cached_rule != rule:
        changes.append(
            f"segments cut by {cached_rule!r} (segment_policy={record.get('segment_policy')!r}), now by "
            f"{rule!r} (segment_policy={segment_policy!r})"
        )
    cached_silence = record.get("min_leading_silence")
    if cached_silence is None or round(float(cached_silence), 6) != round(float(min_leading_silence), 6):
        changes.append(f"min_leading_silence {cached_silence!r}, now {min_leading_silence!r}")
    if not changes:
        changes.append("the word times or duration in the alignment cache changed (or the line was edited)")
    return "; ".join(changes)


# Supplied by the computer, not the user.
_NOT_OPTIONS = {"sample_rate", "utt_id", "frames", "vectors", "whisper"}


@functools.cache
def _keyword_options(fn) -> tuple[frozenset, dict]:
    """A strategy function's options (keyword-only, not runtime inputs) and the defaults they have."""
    import inspect

    parameters = [
        p
        for p in inspect.signature(fn).parameters.values()
        if p.kind is p.KEYWORD_ONLY and p.name not in _NOT_OPTIONS
    ]
    return frozenset(p.name for p in parameters), {
        p.name: p.default for p in parameters if p.default is not p.empty
    }


def option_names(fn) -> set[str]:
    """The options a strategy function takes (what a key and a record name)."""
    return set(_keyword_options(fn)[0])


def _missing_options(strategy: str, stored: Mapping) -> list[str]:
    """Options the strategy has now that a cache record does not name (an older version wrote it)."""
    return sorted(option_names(get_strategy(strategy).fn) - set(stored))


def resolved_options(strategy: str, options: Mapping | None) -> dict:
    """``options`` with every other option of ``strategy`` at its default: what the key hashes.

    >>> resolved_options("acoustic", {"fixed_frames": 100})["n_fft"], resolved_options("acoustic", {})["scale"]
    (2048, 32768.0)
    """
    return json.loads(_resolved_text(strategy, canonical_options(options)))


@functools.lru_cache(maxsize=256)
def _resolved_text(strategy: str, options_text: str) -> str:
    # Loading a cache resolves the same options for every line: computed once per distinct options.
    _, defaults = _keyword_options(get_strategy(strategy).fn)
    return canonical_options({**defaults, **json.loads(options_text)})


def _records(file: Path):
    # An unterminated last line is an order still being written, not an order yet.
    for where, record, line in iter_jsonl(file, partial_tail="ignore", error=OrderCacheError):
        try:
            utt_id, strategy, order, key = record["id"], record["strategy"], record["order"], record["key"]
        except (KeyError, TypeError) as err:
            raise OrderCacheError(f"{where}: not an order record ({err})") from None
        if not isinstance(order, list) or not all(isinstance(k, int) for k in order):
            raise OrderCacheError(f"{where}: utterance {utt_id!r}: 'order' must be a list of integers")
        if not is_order_of(order, len(order)):
            raise OrderCacheError(f"{where}: utterance {utt_id!r}: order {order} is not a permutation")
        yield where, utt_id, strategy, order, key, record, line


def load_orders(
    path,
    *,
    strategy: str,
    alignments: AlignmentIndex,
    segment_policy: str,
    min_leading_silence: float = 0.0,
    options: Mapping | None = None,
    required_options: Mapping | None = None,
    require_peaks: bool = False,
    rebuild: str | None = None,
) -> Orders:
    """Read and validate an order cache for training."""
    orders = Orders()
    repeated = RepeatedIds(OrderCacheError)
    segmentation = dict(
        alignments=alignments, segment_policy=segment_policy, min_leading_silence=min_leading_silence
    )
    reference = None if options is None else resolved_options(strategy, options)
    reference_where = "the options given"
    skipped = 0
    for file in cache_files(path, what=_WHAT):
        for where, utt_id, cached_strategy, order, key, record, line in _records(file):
            if repeated.is_repeat(utt_id, where, line):
                continue
            if cached_strategy != strategy:
                raise StaleOrderError(
                    f"{where}: utterance {utt_id!r} has a {cached_strategy!r} order, but the strategy "
                    f"is {strategy!r}; point to that strategy's order cache"
                )
            stored = record.get("options", {})
            missing = _missing_options(strategy, stored)
            if missing:
                raise StaleOrderError(
                    f"{where}: the {strategy} order of utterance {utt_id!r} was computed by an older "
                    f"version, without the option(s) {missing} (whose defaults are now the authors'); "
                    "rerun recipes/compute_orders.py into a new output"
                )
            # Options given: those must match (the cache may name more, e.g. SR's Whisper model).
            comparable = stored if options is None else {k: stored.get(k) for k in reference}
            for name, value in (required_options or {}).items():
                if stored.get(name) != value:
                    raise StaleOrderError(
                        f"{where}: the {strategy} order of utterance {utt_id!r} was computed with the "
                        f"option {name}={stored.get(name)!r} (None: written before the option existed), "
                        f"not {value!r} as asked (SR's context is the YAML key sr_context); compute orders "
                        "with the setting asked into another orders_cache (recipes/compute_orders.py)"
                    )
            if reference is None:
                reference, reference_where = stored, where
            elif comparable != reference:
                raise StaleOrderError(
                    f"{where}: the {strategy} order of utterance {utt_id!r} was computed with options "
                    f"{stored}, not {reference} ({reference_where}); rerun recipes/compute_orders.py"
                )
            if utt_id not in alignments:
                skipped += 1
                continue
            if key != order_key(utt_id, strategy=strategy, options=stored, **segmentation):
                changed = _what_changed(record, strategy, segment_policy, min_leading_silence)
                raise StaleOrderError(
                    f"{where}: the {strategy} order of utterance {utt_id!r} is stale ({changed}): rerun "
                    "recipes/compute_orders.py into a new output after a change of alignments, "
                    "segmentation or defaults"
                )
            peak = record.get("peak")
            if peak is not None:
                if not isinstance(peak, (int, float)) or not peak >= 0:
                    raise OrderCacheError(f"{where}: utterance {utt_id!r}: 'peak' must be a number >= 0")
                orders.peaks[utt_id] = float(peak)
            elif require_peaks:
                raise OrderCacheError(
                    f"{where}: the {strategy} order of utterance {utt_id!r} has no 'peak' (written before "
                    "compute_orders.py stored it; SR training needs it to read only each crop's samples); "
                    f"rebuild the cache: {rebuild or 'recipes/compute_orders.py into a new orders_cache'}"
                )
            orders[utt_id] = np.asarray(order, dtype=np.int64)
    repeated.log(path, "orders")
    if skipped:
        logger.warning("%s: %d orders skipped: their utterances have no alignment", path, skipped)
    logger.info("loaded %d %s orders from %s (options %s)", len(orders), strategy, path, reference)
    return orders


def stale_orders(
    files,
    *,
    strategy: str,
    options: Mapping | None,
    alignments: AlignmentIndex,
    segment_policy: str,
    min_leading_silence: float = 0.0,
) -> list[str]:
    """Ids in existing cache files whose key differs from what a run would now write."""
    segmentation = dict(
        alignments=alignments, segment_policy=segment_policy, min_leading_silence=min_leading_silence
    )
    stale = []
    for file in files:
        if not Path(file).is_file():
            continue
        for _, utt_id, cached_strategy, _, key, record, _ in _records(Path(file)):
            if cached_strategy != strategy or utt_id not in alignments:
                stale.append(utt_id)
                continue
            if strategy in PEAK_STRATEGIES and "peak" not in record:
                stale.append(utt_id)
                continue
            if key != order_key(utt_id, strategy=strategy, options=options, **segmentation):
                stale.append(utt_id)
    return stale

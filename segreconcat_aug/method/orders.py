"""The order cache: precomputed AR/SR orders, one utterance per JSON line.

The similarity strategies (:mod:`segreconcat_aug.method.similarity`) are deterministic
per utterance and too costly for DataLoader workers (DTW, a Whisper encoder),
so ``recipes/compute_orders.py`` computes each order once and training reads
them (``SegReConcat(..., orders=load_orders(...))``)::

    {"id": "1272-128104-0000", "strategy": "acoustic", "order": [0, 4, 2, 1, 3],
     "key": "3f0c9a41d2e8b7a6", "format": 2, "segment_policy": "authors", "span_rule": "onsets",
     "min_leading_silence": 0.0, "options": {"n_mfcc": 13, "n_fft": 2048, ...}}

An SR (``semantic``) record also holds ``"peak"``: the largest absolute sample of the
utterance's segments (:meth:`segreconcat_aug.method.segments.Segments.peak`, the same for every
order of them), which ``sr_pad_normalize`` divides the rearranged half by. With it, SR
training plans each sample from the file's length and reads only the crop's samples, as
RR and AR do. A cache without it is refused where the peak is needed
(``load_orders(..., require_peaks=True)``), naming the command that rebuilds it, and
``compute_orders.py`` does not resume into it.

An order indexes the utterance's segments, so it is only valid for the
segmentation it was computed on. ``key`` hashes everything that fixes that
segmentation and the order: the strategy, its options (every option, the
defaults included, so a changed default changes the key), the utterance's
cleaned word times and duration (from the alignment cache), the span rule the
segment policy means for the strategy and ``min_leading_silence``.
:func:`load_orders` recomputes the key from the current alignments and
settings, and a mismatch is an error naming the utterance, the line and what
changed (:class:`StaleOrderError`): a stale order is never used. Caches written
before the authors' defaults (no ``format`` 2, or options missing) are refused
the same way.

Example
-------
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

from ..align.cache import AlignmentIndex, RepeatedIds, iter_jsonl
from ..data.jsonl_files import cache_files
from ..errors import UserError
from .segments import span_rule, word_segments
from .strategies import get_strategy, is_order_of

logger = logging.getLogger(__name__)

__all__ = [
    "OrderCacheError",
    "OrderComputer",
    "OrderOptionError",
    "Orders",
    "StaleOrderError",
    "load_orders",
    "order_key",
    "order_record",
    "run_order_job",
    "stale_orders",
]


class OrderCacheError(UserError, ValueError):
    """An order cache line is malformed or conflicts with another; names file and line."""


class StaleOrderError(OrderCacheError):
    """A cached order does not match the current alignment, segmentation or options."""


class OrderOptionError(UserError, ValueError):
    """The order computation was asked for something it cannot do (a strategy or option it lacks)."""


FORMAT = 2  # 2: keys hash the span rule and every option, defaults included
#: Strategies whose records carry the segments' peak (SR's pad-and-normalize divides by it).
PEAK_STRATEGIES = ("semantic",)


class Orders(dict):
    """Utterance id -> int64 order, as :func:`load_orders` returns; ``peaks``: id -> segments' peak
    (SR records; empty for the other strategies)."""

    def __init__(self, *args, peaks=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.peaks: dict[str, float] = dict(peaks or {})


def _canonical(options: Mapping | None) -> str:
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

    Word times are rounded to 0.1 ms (the alignment cache's precision), so a
    cache rewritten by a merge or reload keeps its keys.

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


def _missing_options(strategy: str, stored: Mapping) -> list[str]:
    """Options the strategy has now that a cache record does not name (an older version wrote it)."""
    return sorted(_option_names(get_strategy(strategy).fn) - set(stored))


def resolved_options(strategy: str, options: Mapping | None) -> dict:
    """``options`` with every other option of ``strategy`` at its default: what the key hashes.

    >>> resolved_options("acoustic", {"fixed_frames": 100})["n_fft"], resolved_options("acoustic", {})["scale"]
    (2048, 32768.0)
    """
    return json.loads(_resolved_text(strategy, _canonical(options)))


@functools.lru_cache(maxsize=256)
def _resolved_text(strategy: str, options_text: str) -> str:
    # Loading a cache resolves the same options for every line: computed once per distinct options.
    _, defaults = _keyword_options(get_strategy(strategy).fn)
    return _canonical({**defaults, **json.loads(options_text)})


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
    """Read and validate an order cache for training.

    Parameters
    ----------
    path : path
        A cache file with its shards ``x.part-*.jsonl`` (merged or not), or a
        folder of ``*.jsonl`` shards (see :func:`segreconcat_aug.data.jsonl_files.cache_files`).
    strategy : str
        The strategy the augmenter uses; orders of another strategy are an error.
    alignments : AlignmentIndex
        The alignment cache training uses (the orders must come from the same word times).
    segment_policy, min_leading_silence
        The augmenter's segmentation settings (``authors`` resolved for ``strategy``).
    options : mapping, optional
        The strategy options expected (completed with the defaults). ``None``
        accepts the options stored in the cache, provided every entry has the
        same ones and names every option the strategy has now.
    required_options : mapping, optional
        Options the stored ones must hold with these values (training passes SR's
        ``{"context": sr_context}``); a cache without the key is stale too.
    require_peaks : bool
        Every record must hold its segments' ``peak`` (SR training with
        ``sr_pad_normalize``); a record without one is an :class:`OrderCacheError`.
    rebuild : str, optional
        The command that rebuilds this cache, named in that error.

    Returns
    -------
    Orders
        Utterance id -> int64 order, and ``peaks`` (id -> float) where records hold
        one. Entries for utterances absent from ``alignments`` are skipped (the
        augmenter treats them as unaligned).

    Raises
    ------
    StaleOrderError
        An entry made with another strategy, options, alignment or segmentation
        (names the utterance, the file and line, and what differs).
    OrderCacheError
        A malformed line, or an id with two different lines.
    """
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
    """Ids in existing cache files whose key differs from what a run would now write.

    ``compute_orders.py`` refuses to resume into such a cache, so one file never
    mixes orders from two settings. Ids without an alignment count as stale, and so
    do SR records without the segments' peak (written before it was stored).
    """
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


def _option_names(fn) -> set[str]:
    return set(_keyword_options(fn)[0])


class OrderComputer:
    """Compute orders for batches of utterances: segmentation, the strategy, cache lines.

    The object the order job holds: it owns the settings that go into the key
    and, for SR, the Whisper model (``whisper``, a
    :class:`segreconcat_aug.align.whisper.WhisperBundle`), run once per batch over all
    its utterances' segments (:func:`segreconcat_aug.method.similarity.sr_vectors`, as the
    ``context`` option says) before each order is computed from its vectors.

    Parameters
    ----------
    strategy : str
        A registered precomputed strategy (``acoustic``, ``semantic``).
    alignments : AlignmentIndex
    segment_policy : str
        See :mod:`segreconcat_aug.method.segments` (``authors``: the strategy's authors' cut).
    min_leading_silence : float
    options : mapping
        Strategy options (JSON values); with the defaults of the others, they are part of the key.
    whisper : WhisperBundle, optional
        Needed by ``semantic``.
    encoder_batch_size : int
        30 s windows per encoder pass (SR's ``segment`` context: one window per segment).
    sample_rate : int

    Example
    -------
    >>> from segreconcat_aug.align.cache import AlignmentIndex
    >>> alignments = AlignmentIndex(["u1"], [1.0], [0, 3], [0.1, 0.4, 0.7], [0.4, 0.7, 1.0], ["t"])
    >>> computer = OrderComputer("acoustic", alignments)
    >>> noise = np.random.default_rng(0).normal(size=16000).astype(np.float32)
    >>> audio = np.concatenate([np.zeros(1600), noise[:4800], 1e-4 * noise[4800:9600], noise[9600:]])
    >>> # silence (pinned first), then the chain from the first word: loud, loud, quiet
    >>> [(utt, order.tolist()) for utt, order in computer.compute([("u1", audio)])]
    [('u1', [0, 1, 3, 2])]
    """

    def __init__(
        self,
        strategy: str,
        alignments: AlignmentIndex,
        *,
        segment_policy: str = "authors",
        min_leading_silence: float = 0.0,
        options: Mapping | None = None,
        whisper=None,
        encoder_batch_size: int = 8,
        sample_rate: int = 16000,
    ):
        from .strategies import get_strategy

        self.strategy = get_strategy(strategy)
        if not self.strategy.precomputed:
            raise OrderOptionError(
                f"strategy {strategy!r} draws its order in the data pipeline; nothing to precompute "
                "(--strategy=acoustic or semantic)"
            )
        self.span_rule = span_rule(segment_policy, self.strategy.name)  # checks the policy
        self.options = json.loads(_canonical(options))
        accepted = _option_names(self.strategy.fn)
        unknown = sorted(set(self.options) - accepted)
        if unknown:
            raise OrderOptionError(f"unknown {strategy} option(s) {unknown}; accepted: {sorted(accepted)}")
        if self.strategy.name == "semantic":
            # SR's feature context is always in the options, hence in the key and the record: caches
            # written before it existed (utterance context) are stale, never read as the default.
            from .similarity import check_sr_context

            self.options["context"] = check_sr_context(self.options.get("context", "segment"))
        # What the key hashes: every option (defaults included), plus the model that makes SR's features.
        self.key_options = resolved_options(self.strategy.name, self.options)
        if self.strategy.name == "semantic":
            if whisper is None:
                raise ValueError(
                    "the semantic strategy needs a Whisper model (segreconcat_aug.align.whisper.load_whisper)"
                )
            self.key_options["whisper_model"] = str(whisper.name)
            self.key_options["whisper_dtype"] = str(whisper.dtype).replace("torch.", "")
            backend = getattr(whisper, "backend", "transformers")
            if backend != "transformers":  # so the transformers path's caches keep their keys
                self.key_options["whisper_backend"] = backend
        self.alignments = alignments
        self.segment_policy = segment_policy
        self.min_leading_silence = float(min_leading_silence)
        self.whisper = whisper
        self.encoder_batch_size = int(encoder_batch_size)
        self.sample_rate = int(sample_rate)

    @property
    def settings(self) -> dict:
        """The keyword arguments of :func:`order_key` / :func:`stale_orders` for this computer."""
        return {
            "strategy": self.strategy.name,
            "options": self.key_options,
            "alignments": self.alignments,
            "segment_policy": self.segment_policy,
            "min_leading_silence": self.min_leading_silence,
        }

    def segments(self, utt_id: str, num_samples: int):
        starts, ends = self.alignments.spans(utt_id)
        return word_segments(
            starts, ends, num_samples, self.sample_rate, self.span_rule, self.min_leading_silence
        )

    def compute(self, batch: Sequence[tuple[str, np.ndarray]]):
        """Yield ``(utt_id, order)`` or ``(utt_id, exception)`` for each ``(utt_id, audio)``.

        An utterance's failure (no alignment, NaN audio, ...) is returned, not
        raised, so the job records it and goes on with the rest of the batch.
        """
        vectors = [None] * len(batch)
        if self.whisper is not None and self.strategy.name == "semantic":
            vectors = self._sr_vectors(batch)
        for (utt_id, audio), utt_vectors in zip(batch, vectors):
            try:
                if isinstance(utt_vectors, Exception):
                    raise utt_vectors
                yield utt_id, self.order(utt_id, audio, vectors=utt_vectors)
            except Exception as err:  # reported per utterance by the caller
                yield utt_id, err

    def _sr_vectors(self, batch) -> list:
        """SR's segment vectors for a batch: one batched encoder run over all its segments.

        Utterances that cannot be segmented get ``None`` (:meth:`order` then names the
        problem); if the batched run fails (e.g. out of memory), each utterance is retried
        alone, and one that fails again gets its exception.
        """
        from .similarity import sr_vectors

        context = self.options["context"]
        usable = {}
        for k, (utt_id, audio) in enumerate(batch):
            audio = np.asarray(audio, dtype=np.float32)
            if utt_id in self.alignments and len(audio) and np.all(np.isfinite(audio)):
                try:
                    segments = self.segments(utt_id, len(audio))
                except Exception:  # order() raises it again, naming the utterance
                    continue
                if len(segments) >= 2:  # fewer segments: nothing to order, no encoder run
                    usable[k] = (audio, segments)
        vectors: list = [None] * len(batch)
        if not usable:
            return vectors
        try:
            encoded = sr_vectors(
                self.whisper, list(usable.values()), context=context, batch_size=self.encoder_batch_size
            )
            for k, value in zip(usable, encoded):
                vectors[k] = value
        except Exception:
            for k, item in usable.items():
                try:
                    vectors[k] = sr_vectors(
                        self.whisper, [item], context=context, batch_size=self.encoder_batch_size
                    )[0]
                except Exception as err:
                    vectors[k] = err
        return vectors

    def order(self, utt_id: str, audio: np.ndarray, *, vectors=None) -> np.ndarray:
        """The order of one utterance (raises on failure, naming it)."""
        if utt_id not in self.alignments:
            raise KeyError(f"utterance {utt_id!r} has no alignment")
        audio = np.asarray(audio, dtype=np.float32)
        if len(audio) == 0:
            raise ValueError(f"utterance {utt_id!r}: empty audio")
        if not np.isfinite(audio).all():
            from ..data.jobs import ItemError

            bad = int(np.count_nonzero(~np.isfinite(audio)))
            raise ItemError(f"utterance {utt_id!r}: {bad} NaN or infinite samples", "nonfinite_audio")
        segments = self.segments(utt_id, len(audio))
        extra = {"vectors": vectors} if vectors is not None else {}
        if self.strategy.name == "semantic" and vectors is None:
            extra["whisper"] = self.whisper
        order = self.strategy.fn(
            segments, audio, None, sample_rate=self.sample_rate, utt_id=utt_id, **self.options, **extra
        )
        order = np.asarray(order, dtype=np.int64)
        if not is_order_of(order, len(segments)):
            raise RuntimeError(f"utterance {utt_id!r}: strategy returned {order.tolist()}, not a permutation")
        return order

    def record(self, utt_id: str, order, audio: np.ndarray | None = None) -> str:
        """The cache line for ``utt_id``; SR's holds the peak of its segments in ``audio`` (needed)."""
        peak = None
        if self.strategy.name in PEAK_STRATEGIES:
            if audio is None:
                raise ValueError(f"utterance {utt_id!r}: an SR record needs the audio for its segments' peak")
            peak = self.segments(utt_id, len(audio)).peak(np.asarray(audio, dtype=np.float32))
        return order_record(utt_id, order, **self.settings, peak=peak)


def run_order_job(
    computer: OrderComputer,
    items,
    output,
    *,
    shard=None,
    batch_size: int = 16,
    progress: bool = True,
    resample: bool = False,
):
    """Compute and append the orders of ``items`` this shard owns and has not done yet.

    Resumable (see :class:`segreconcat_aug.data.jobs.Job`): a rerun skips written ids
    and retries failed ones. Refuses to resume into a cache written with other
    settings (:func:`stale_orders`): one cache never mixes two settings.

    Parameters
    ----------
    computer : OrderComputer
    items : list of segreconcat_aug.data.jobs.JobItem
        From :func:`segreconcat_aug.data.jobs.read_inputs`.
    output : path
        ``x.jsonl`` or a folder (shards write their own parts; see :func:`segreconcat_aug.data.jobs.shard_path`).
    shard : segreconcat_aug.data.jobs.Shard, optional
    batch_size : int
        Utterances read and computed together (SR: one encoder pass per batch).
    progress : bool
    resample : bool
        Resample audio that is not 16 kHz instead of failing it.

    Returns
    -------
    segreconcat_aug.data.jobs.Job
        Closed; ``summary()``, ``written``, ``failures``, ``exit_status()``.
    """
    from ..data.jobs import ItemError, Job, JobError, Shard, read_item_audio

    shard = Shard() if shard is None else shard
    stale = stale_orders(cache_files(output, required=False, in_progress=True), **computer.settings)
    if stale:
        raise JobError(
            f"{output}: {len(stale)} cached order(s) were computed with other alignments, segmentation or "
            f"options, or hold no SR peak (first: {stale[:5]}); write to a new output (or delete the old "
            "one) to recompute"
        )
    with Job(output, shard=shard, desc=f"orders:{computer.strategy.name}", progress=progress) as job:
        for batch in job.track(job.pending(items), batch_size=batch_size):
            ready = []
            for item in batch:
                if item.id not in computer.alignments:
                    job.fail(item.id, "no word alignment (run recipes/align.py)", kind="no_alignment")
                    continue
                try:  # the shared reader: unreadable, wrong rate, empty, NaN samples are counted failures
                    audio = read_item_audio(item, sample_rate=computer.sample_rate, resample=resample)
                except ItemError as err:
                    job.fail(item.id, err)
                    continue
                ready.append((item.id, audio))
            audios = dict(ready)
            for utt_id, result in computer.compute(ready):
                if isinstance(result, Exception):
                    job.fail(utt_id, result)
                else:
                    job.write(utt_id, computer.record(utt_id, result, audios[utt_id]))
    return job

"""Computing AR/SR orders for the order cache: :class:`OrderComputer` (segments, the strategy, SR's
batched encoder run, the cache line) and :func:`run_order_job` (``recipes/compute_orders.py``'s
resumable, sharded job). The cache itself, its keys and its reading are :mod:`segreconcat_aug.method.orders`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

import numpy as np

from ..align.cache import AlignmentIndex
from ..data.jsonl_files import cache_files
from ..errors import UserError
from .orders import (
    PEAK_STRATEGIES,
    canonical_options,
    option_names,
    order_record,
    resolved_options,
    stale_orders,
)
from .segments import span_rule, word_segments
from .strategies import get_strategy, is_order_of


class OrderOptionError(UserError, ValueError):
    """The order computation was asked for something it cannot do (a strategy or option it lacks)."""


class OrderComputer:
    """Compute orders for batches of utterances: segmentation, the strategy, cache lines.

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
        self.strategy = get_strategy(strategy)
        if not self.strategy.precomputed:
            raise OrderOptionError(
                f"strategy {strategy!r} draws its order in the data pipeline; nothing to precompute "
                "(--strategy=acoustic or semantic)"
            )
        self.span_rule = span_rule(segment_policy, self.strategy.name)  # checks the policy
        self.options = json.loads(canonical_options(options))
        accepted = option_names(self.strategy.fn)
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
        """Yield ``(utt_id, order)`` or ``(utt_id, exception)`` for each ``(utt_id, audio)``."""
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
        """SR's segment vectors for a batch: one batched encoder run over all its segments."""
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
            from ..data.audio import ItemError

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
    """Compute and append the orders of ``items`` this shard owns and has not done yet."""
    from ..data.audio import ItemError, read_item_audio
    from ..data.jobs import Job, JobError, Shard

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

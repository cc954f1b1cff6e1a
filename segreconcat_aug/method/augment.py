"""SegReConcat, top to bottom: alignment -> segments -> order -> concatenation.

For one anonymized utterance ``u`` with cached word times:

1. *Segmentation* (:mod:`segreconcat_aug.method.segments`): word times become sample
   spans ``w_1 .. w_N``, cut per strategy as the authors' scripts cut them
   (``segment_policy: authors``; ``cover`` and the others are options).
2. *Rearrangement* (:mod:`segreconcat_aug.method.strategies`): a strategy gives an
   order ``g``. RR draws one permutation per utterance for the whole training,
   from ``(seed, utterance id)`` (:mod:`segreconcat_aug.seeding`), as the paper's fixed rearranged copy
   (``rr_redraw: once``; ``epoch`` draws a new one every epoch); AR/SR read
   their fixed order from the order cache.
3. *Concatenation*: the output is ``u`` itself, untouched, followed by the
   segments in the new order, spliced hard as the authors do (``crossfade: 0``;
   a positive crossfade joins them with short equal-power crossfades). For SR
   the rearranged audio is zero-padded to ``len(u)`` and peak-normalized, as the
   authors' SR script writes it (``sr_pad_normalize``).

Modes (YAML ``mode``): ``concat`` (SegReConcat), ``rearranged`` (the rearranged
sequence alone, the paper's Table 1 rows "RR", "AR", "SR") and ``none``.

Output length, exactly (``c`` = crossfade in samples, ``l_k`` segment lengths
in the new order): each join between two rearranged segments overlaps
``o_k = min(c, l_k // 2, l_{k+1} // 2)`` samples, so the rearranged sequence is
``sum(l) - sum(o)`` long (at least ``len(u)`` for SR with padding); ``concat``
adds ``len(u)`` (the first rearranged segment fades in over ``min(c, l_1 // 2)``
samples instead of overlapping, so the original half stays bit-exact).

The augmenter first *plans* the output (:class:`~segreconcat_aug.method.render.Plan`: which input span
goes where, with which fades and gain) and then *renders* it (:func:`~segreconcat_aug.method.render.render`). The
training pipeline renders only its random 3 s crop of the plan, from a read of
just the input samples that crop is made of (:meth:`Plan.input_ranges`), so the
cost per sample does not grow with the length of the augmented utterance.

>>> import numpy as np
>>> from segreconcat_aug.align.cache import AlignmentIndex
>>> index = AlignmentIndex(["u1"], [1.0], [0, 3], [0.0, 0.3, 0.6], [0.3, 0.6, 1.0], ["test"])
>>> aug = SegReConcat(index, mode="concat", sample_rate=10)
>>> audio = np.arange(10, dtype=np.float32)
>>> out = aug(audio, "u1", epoch=1)
>>> out[:10].tolist() == audio.tolist(), sorted(out[10:].tolist()) == audio.tolist()
(True, True)
"""

from __future__ import annotations

import logging

import numpy as np
import torch

from ..align.cache import AlignmentIndex
from ..errors import UserError
from ..seeding import KeyedRandom
from .render import Plan, chain_plan, render
from .segments import Segments, span_rule, word_segments
from .strategies import get_strategy, is_order_of

logger = logging.getLogger(__name__)

MODES = ("concat", "rearranged", "none")
MISSING_POLICIES = ("error", "passthrough")
RR_REDRAWS = ("once", "epoch")
_ONCE = 0  # the epoch number a ``once`` draw is keyed by: the same in every epoch
#: What :meth:`SegReConcat.plan` did with an utterance (the training counts them per row).
COUNT_KEYS = (
    "augmented",  # output built from a rearrangement
    "missing_alignment",  # no alignment (passthrough policy): original returned
    "few_segments",  # 0 or 1 segments in "rearranged" mode: original returned
    "no_segments",  # 0 segments in "concat" mode: original returned
    "missing_order",  # precomputed strategy without an order (passthrough policy)
)


class MissingAlignmentError(UserError, KeyError):
    """Training utterances have no alignment and the policy is ``error``."""

    def __str__(self):  # KeyError would print the message with quotes
        return str(self.args[0])


class SegReConcat:
    """The SegReConcat augmenter, callable inside DataLoader workers."""

    def __init__(
        self,
        alignments: AlignmentIndex,
        mode: str = "concat",
        strategy: str = "random",
        segment_policy: str = "authors",
        crossfade: float = 0.0,
        seed: int = 1986,
        sample_rate: int = 16000,
        missing_alignment: str = "error",
        orders=None,
        min_leading_silence: float = 0.0,
        rr_redraw: str = "once",
        sr_pad_normalize: bool = True,
        peaks=None,
    ):
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}; choose from {MODES}")
        if rr_redraw not in RR_REDRAWS:
            raise ValueError(f"unknown rr_redraw {rr_redraw!r}; choose from {RR_REDRAWS}")
        if min_leading_silence < 0:
            raise ValueError(f"min_leading_silence must be >= 0 seconds, got {min_leading_silence}")
        if missing_alignment not in MISSING_POLICIES:
            raise ValueError(
                f"unknown missing_alignment policy {missing_alignment!r}; choose from {MISSING_POLICIES}"
            )
        if crossfade < 0:
            raise ValueError(f"crossfade must be >= 0 seconds, got {crossfade}")
        self.strategy = get_strategy(strategy)
        if self.strategy.precomputed and orders is None and mode != "none":
            raise ValueError(
                f"strategy {strategy!r} reads precomputed orders: pass the order cache "
                "(recipes/compute_orders.py writes it)"
            )
        self.alignments = alignments
        self.mode = mode
        self.segment_policy = segment_policy
        self.span_rule = span_rule(segment_policy, self.strategy.name)  # checks the policy
        self.rr_redraw = rr_redraw
        # The authors' SR output: zero-padded to the original length, peak-normalized.
        self.pad_normalize = bool(sr_pad_normalize) and self.strategy.name == "semantic"
        self.crossfade_samples = int(round(crossfade * sample_rate))
        self.seed = int(seed)
        self._draw = KeyedRandom(seed)
        self.sample_rate = sample_rate
        self.missing_alignment = missing_alignment
        self.orders = orders
        self.peaks = peaks if self.pad_normalize else None
        self.min_leading_silence = min_leading_silence

    def check_coverage(self, utt_ids) -> list[str]:
        """Find utterances without an alignment (or order); raise under ``error``."""
        if self.mode == "none":
            return []
        utt_ids = list(utt_ids)
        missing = self.alignments.missing(utt_ids)
        what = "alignment"
        if not missing and self.strategy.precomputed:
            missing = [utt for utt in utt_ids if utt not in self.orders]
            what = f"{self.strategy.name} order"
        if missing and self.missing_alignment == "error":
            raise MissingAlignmentError(
                f"{len(missing)} of {len(utt_ids)} training utterances have no {what}; "
                f"first: {missing[:5]}. Run recipes/align.py (and compute_orders.py for AR/SR) "
                "or set missing_alignment: passthrough"
            )
        if missing:
            logger.warning("%d utterances have no %s; they pass through unaugmented", len(missing), what)
        return missing

    def segments(self, utt_id: str, num_samples: int) -> Segments:
        """The segments of one utterance under this augmenter's policy."""
        starts, ends = self.alignments.spans(utt_id)
        return word_segments(
            starts, ends, num_samples, self.sample_rate, self.span_rule, self.min_leading_silence
        )

    def order(self, utt_id: str, segments: Segments, audio: np.ndarray, epoch: int) -> np.ndarray | None:
        """The rearrangement order, or None when a precomputed one is missing."""
        if self.strategy.precomputed:
            if utt_id not in self.orders:
                return None
            order = np.asarray(self.orders[utt_id], dtype=np.int64)
        else:
            rng = self._draw(epoch if self.rr_redraw == "epoch" else _ONCE, utt_id)
            order = np.asarray(self.strategy.fn(segments, audio, rng, sample_rate=self.sample_rate))
        # Checked every time: a stale order cache or a buggy plug-in strategy must not
        # silently drop or repeat audio.
        if not is_order_of(order, len(segments)):
            raise ValueError(
                f"utterance {utt_id!r}: {self.strategy.name} order {order.tolist()} is not a permutation "
                f"of its {len(segments)} segments (stale order cache? rerun compute_orders.py)"
            )
        return order

    @property
    def plans_from_length(self) -> bool:
        """True when :meth:`plan` needs only the number of samples, not the samples."""
        if self.mode == "none":
            return True
        peak_known = not self.pad_normalize or self.peaks is not None
        return (self.strategy.precomputed or not self.strategy.uses_audio) and peak_known

    def plan(
        self, audio: np.ndarray | None, utt_id: str, epoch: int, num_samples: int | None = None
    ) -> tuple[Plan | None, str | None]:
        """The output layout for one utterance, None when it passes through unchanged, and why."""
        if num_samples is None:
            num_samples = len(audio)
        if audio is None and not self.plans_from_length:
            raise ValueError(f"strategy {self.strategy.name!r} uses the audio: pass it to plan()")
        if self.mode == "none":
            return None, None
        if utt_id not in self.alignments:
            if self.missing_alignment == "error":
                raise MissingAlignmentError(f"utterance {utt_id!r} has no alignment")
            return None, "missing_alignment"
        segments = self.segments(utt_id, num_samples)
        if len(segments) == 0 or (self.mode == "rearranged" and len(segments) < 2):
            return None, "no_segments" if self.mode == "concat" else "few_segments"
        order = self.order(utt_id, segments, audio, epoch)
        if order is None:
            if self.missing_alignment == "error":
                raise MissingAlignmentError(f"utterance {utt_id!r} has no {self.strategy.name} order")
            return None, "missing_order"
        rearranged = segments.spans[order]
        if self.mode == "rearranged":
            plan = chain_plan(rearranged, self.crossfade_samples)
        else:  # the original stays untouched; the rearranged half fades in after it
            plan = chain_plan(
                rearranged, self.crossfade_samples, fade_in_first=True, after_original=num_samples
            )
        if self.pad_normalize:
            # Word spans never add up to more than the file, so padding is all the length match needs.
            halves = 1 if self.mode == "rearranged" else 2
            plan = plan.padded_and_scaled(
                halves * num_samples, _peak_gain(self._peak(utt_id, segments, audio)), halves - 1
            )
        return plan, "augmented"

    def _peak(self, utt_id: str, segments: Segments, audio: np.ndarray | None) -> float:
        """The segments' peak: cached with the SR order, else measured on the audio."""
        if self.peaks is not None:
            try:
                return float(self.peaks[utt_id])
            except KeyError:
                raise MissingAlignmentError(
                    f"utterance {utt_id!r} has an SR order but no peak in the order cache: rebuild it "
                    "with recipes/compute_orders.py"
                ) from None
        return segments.peak(audio)

    def __call__(self, audio, utt_id: str, epoch: int) -> np.ndarray:
        """Augment one waveform (1-D numpy or torch); returns float32 numpy."""
        audio = audio.numpy() if isinstance(audio, torch.Tensor) else np.asarray(audio)
        audio = audio.astype(np.float32, copy=False)
        plan, _ = self.plan(audio, utt_id, epoch)
        return audio if plan is None else render(audio, plan)


def _peak_gain(peak: float) -> float:
    """``1 / peak`` (what the authors' SR script divides the rearranged audio by); 1 for silence."""
    return 1.0 / peak if peak > 0 else 1.0

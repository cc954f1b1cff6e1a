"""SpeechBrain data-pipeline steps: read -> SegReConcat -> random crop.

>>> import speechbrain as sb
>>> pipeline = TrainAudioPipeline(augmenter=None, sentence_len=3.0, seed=7)
>>> item = pipeline.dynamic_item()
>>> item.takes, item.provides
(('id', 'utt_id', 'wav'), ('sig',))
"""

from __future__ import annotations

import logging

import numpy as np
import soundfile
import speechbrain as sb
import torch
from speechbrain.dataio.batch import PaddedBatch

from ..data.audio import SAMPLE_RATE, AudioFile, AudioReadError, DecodedCache, read_audio
from ..method.augment import COUNT_KEYS, SegReConcat
from ..method.render import render
from ..seeding import KeyedRandom
from .pooled import PooledSegReConcat, pooled_key

logger = logging.getLogger(__name__)

READ_ERROR_POLICIES = ("skip", "error")

_CROP_STREAM = 1  # keeps crop draws independent of the augmenter's permutation draws
_MERGE_GAP = 8000  # samples: one more seek + read costs about as much as reading 0.5 s
_MAX_WORKER_SLOTS = 64  # counts: row 0 the main process, row k + 1 DataLoader worker k


def crop_start(length: int, crop: int, rng: np.random.Generator) -> int:
    """Start of a random ``crop``-sample window in ``length`` samples (0 when shorter).

    >>> crop_start(10, 4, np.random.default_rng(0)) in range(7)
    True
    """
    return int(rng.integers(0, length - crop + 1)) if length > crop else 0


def random_crop(audio: np.ndarray, length: int, rng: np.random.Generator) -> np.ndarray:
    """A random ``length``-sample window; shorter audio is returned whole (not padded).

    >>> random_crop(np.arange(10), 4, np.random.default_rng(0)).shape
    (4,)
    """
    start = crop_start(len(audio), length, rng)
    return audio[start : start + length]


class TrainAudioPipeline:
    """Training audio: SegReConcat (optional), then a random crop, reading only what the crop needs.

    The result equals cropping the augmentation of the whole file. Call :meth:`set_epoch` from
    ``Brain.on_stage_start``: the epoch (and the counts) live in shared memory, seen by every worker. Files at
    another rate than ``sample_rate`` are resampled to it, as the evaluation does.
    """

    def __init__(
        self,
        augmenter: SegReConcat | PooledSegReConcat | None = None,
        sentence_len: float = 3.0,
        sample_rate: int = SAMPLE_RATE,
        seed: int = 1986,
        read_errors: str = "skip",
        decoded_cache_mb: float = 0,
    ):
        if read_errors not in READ_ERROR_POLICIES:
            raise ValueError(
                f"read_errors: unknown policy {read_errors!r}; choose from {READ_ERROR_POLICIES}"
            )
        self.read_errors = read_errors
        self.augmenter = augmenter
        self.by_system = isinstance(augmenter, PooledSegReConcat)
        self.crop_samples = int(round(sentence_len * sample_rate))
        self.sample_rate = sample_rate
        self.seed = int(seed)
        self._draw = KeyedRandom(seed)
        self._epoch = torch.zeros(1, dtype=torch.int64).share_memory_()
        self._decoded = DecodedCache(int(decoded_cache_mb * 2**20)) if decoded_cache_mb else None
        systems = augmenter.systems if self.by_system else [""]
        self._system_slot = {name: k for k, name in enumerate(systems)}
        # The workers' counts reach the main process; one row per worker so increments never race.
        self._counts = torch.zeros(
            _MAX_WORKER_SLOTS, len(systems), len(COUNT_KEYS), dtype=torch.int64
        ).share_memory_()
        self._counts_view = None

    def __getstate__(self):
        # The numpy view is rebuilt in each worker from the shared tensor.
        return {**self.__dict__, "_counts_view": None}

    def set_epoch(self, epoch: int) -> None:
        """A training epoch starts: its crops are drawn anew and its counts start from zero."""
        self._epoch[0] = int(epoch)
        self.reset_counts()

    @property
    def epoch(self) -> int:
        # Reading through numpy is ~30x cheaper than indexing the tensor.
        return int(self._epoch.numpy()[0])

    def __call__(self, row_id: str, utt_id: str, wav: str, system: str | None = None) -> torch.Tensor | None:
        key = utt_id if system is None else pooled_key(system, utt_id)  # the augmenter's key
        try:
            crop = self._crop(row_id, key, wav, system)
            if not torch.isfinite(crop).all():
                raise AudioReadError(f"{wav}: NaN or infinite samples")
        except (AudioReadError, OSError, soundfile.LibsndfileError) as err:
            message = f"training row {row_id} (utterance {utt_id}, {wav}): {err}"
            if self.read_errors == "error":
                raise AudioReadError(
                    f"{message} (read_errors: skip drops such rows and counts them)"
                ) from err
            logger.warning("%s: skipped (read_errors: skip)", message)
            return None
        return crop

    def _plan(self, audio, key: str, epoch: int, system: str | None, num_samples: int | None = None):
        """The augmenter's plan for the row (None: the original), its outcome counted."""
        if self.augmenter is None:
            return None
        plan, outcome = self.augmenter.plan(audio, key, epoch, num_samples=num_samples)
        if outcome is not None:
            if self._counts_view is None:
                # A numpy view of the shared tensor: increments cost ~1 us instead of ~200 us.
                self._counts_view = self._counts.numpy()
            info = torch.utils.data.get_worker_info()
            slot = 0 if info is None else 1 + info.id % (_MAX_WORKER_SLOTS - 1)
            self._counts_view[slot, self._system_slot[system or ""], COUNT_KEYS.index(outcome)] += 1
        return plan

    def counts(self) -> dict[str, int]:
        """Each outcome's count (:data:`COUNT_KEYS` order), summed over systems, the main process and all workers."""
        return dict(zip(COUNT_KEYS, self._counts.sum(dim=(0, 1)).tolist()))

    def reset_counts(self) -> None:
        self._counts.zero_()

    def report(self) -> str:
        """One line for the epoch log, e.g. ``augmented=9800 missing_alignment=12``; pooled, the
        summed counts then each system's, e.g. ``augmented=20 (T10-2: augmented=10; B4: augmented=10)``."""
        totals = _counts_line(self.counts())
        if not self.by_system:
            return totals
        per_system = self._counts.sum(dim=0).tolist()
        each = "; ".join(
            f"{name}: {_counts_line(dict(zip(COUNT_KEYS, per_system[k])))}"
            for name, k in self._system_slot.items()
        )
        return f"{totals} ({each})"

    def _crop(self, row_id: str, key: str, wav: str, system: str | None) -> torch.Tensor:
        epoch = self.epoch
        rng = self._draw(epoch, row_id, stream=_CROP_STREAM)
        if self.augmenter is not None and not self.augmenter.plans_from_length:
            return self._crop_after_full_read(epoch, rng, key, wav, system)
        # Plan from the header's length and read only the samples the crop is made of:
        # a 3 s crop of a 12 s file reads 3 s, in one piece or in a few (its words).
        with AudioFile(wav, self.sample_rate, cache=self._decoded, resample=True) as source:
            length = source.frames
            plan = self._plan(None, key, epoch, system, num_samples=length)
            if plan is None:
                start = crop_start(length, self.crop_samples, rng)
                crop = source.read(start, start + self.crop_samples)
            else:
                start = crop_start(plan.length, self.crop_samples, rng)
                stop = start + self.crop_samples
                ranges = plan.input_ranges(start, stop, merge_gap=_MERGE_GAP)
                audio_start = int(ranges[0, 0]) if len(ranges) else 0
                crop = render(source.read_ranges(ranges), plan, start, stop, audio_start=audio_start)
        return torch.from_numpy(crop)

    def _crop_after_full_read(self, epoch, rng, key, wav, system) -> torch.Tensor:
        # A plan that looks at the samples (SR's peak, a plug-in strategy) is made from the
        # whole file; same draws, same crop.
        audio = read_audio(wav, sample_rate=self.sample_rate, resample=True)
        plan = self._plan(audio, key, epoch, system)
        if plan is None:
            crop = random_crop(audio, self.crop_samples, rng)
        else:
            start = crop_start(plan.length, self.crop_samples, rng)
            crop = render(audio, plan, start, start + self.crop_samples)
        return torch.from_numpy(np.ascontiguousarray(crop))

    def dynamic_item(self, takes=None, provides="sig"):
        """This pipeline as a SpeechBrain ``@takes/@provides`` dynamic item (``takes``: the manifest's
        ``id``, ``utt_id`` and ``wav``, and ``system`` for a pooled augmenter)."""
        if takes is None:
            takes = ("id", "utt_id", "wav", "system") if self.by_system else ("id", "utt_id", "wav")
        return sb.utils.data_pipeline.takes(*takes)(sb.utils.data_pipeline.provides(provides)(self))


def _counts_line(counts: dict) -> str:
    return " ".join(f"{key}={value}" for key, value in counts.items() if value or key == "augmented")


class SkipFailedReads:
    """A DataLoader ``collate_fn``: :class:`PaddedBatch` of the examples whose ``sig`` was read.

    >>> batch = SkipFailedReads()([{"id": "a", "sig": torch.ones(3)}, {"id": "b", "sig": None}])
    >>> batch.id, batch.failed_reads
    (['a'], 1)
    """

    def __init__(self, key: str = "sig"):
        self.key = key

    def __call__(self, examples):
        kept = [example for example in examples if example[self.key] is not None]
        if not kept:
            ids = [example.get("id") for example in examples]
            raise AudioReadError(
                f"no example of a batch could be read (rows {ids[:5]}); see the warnings above"
            )
        batch = PaddedBatch(kept)
        batch.failed_reads = len(examples) - len(kept)
        return batch


@sb.utils.data_pipeline.takes("wav", "start", "stop")
@sb.utils.data_pipeline.provides("sig")
def chunk_audio_pipeline(wav, start, stop):
    """A fixed chunk ``[start, stop)`` (samples) of a file: the dev set's rows (fixed, so the dev loss
    compares across epochs and runs)."""
    with AudioFile(wav, resample=True) as audio:  # exact spans in every format, at 16 kHz
        return torch.from_numpy(audio.read(int(start), int(stop)))

"""Whole-utterance speaker embeddings for evaluation (VPC 2024/2026 extraction), and their cache.

Each step and its source in the challenges' code: docs/evaluation-reference.md.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path

import numpy as np
import torch
from speechbrain.utils.distributed import ddp_barrier, ddp_prevent_block
from tqdm import tqdm

from ..data.audio import SAMPLE_RATE, AudioReadError, audio_duration, read_audio_and_rate, resample_wave
from ..data.audio_check import file_signature
from ..data.kaldi import PipeCommand
from ..errors import UserError

logger = logging.getLogger(__name__)


class EmbeddingError(UserError, RuntimeError):
    """An utterance gave no usable (finite) embedding; the message names the utterance and its file."""


#: The loudness VPC 2024's ``normalize_wave`` scales to before dividing by the peak.
TARGET_LUFS = -30.0
#: The challenge wave normalizations (``eval_normalize_wave``), and the name each gives the embedding cache.
WAVE_NORMALIZATIONS = ("vpc2024", "vpc2026")
WAVE_CACHE_NAMES = {"vpc2024": "vpc2024-pyloudnorm", "vpc2026": "vpc2026-pyloudnorm"}
#: VPC 2026 replaces a silent wave by Gaussian noise of this standard deviation (so no NaN embedding).
SILENCE_NOISE = 1e-6


def wave_normalization(value) -> str | None:
    """``eval_normalize_wave`` as a method name: True is VPC 2024's (its meaning before 2026), False None.

    >>> wave_normalization(True), wave_normalization(False), wave_normalization("vpc2026")
    ('vpc2024', None, 'vpc2026')
    """
    if value is True:
        return "vpc2024"
    if value is False or value is None:
        return None
    if value not in WAVE_NORMALIZATIONS:
        raise ValueError(
            f"eval_normalize_wave: unknown {value!r}; choose from {WAVE_NORMALIZATIONS}, True, False"
        )
    return value


def loudness_block_size(duration: float) -> float:
    """pyloudnorm's gating block (seconds) as VPC 2024 sets it: 0.4 s, shorter for waves under 0.4 s.

    >>> loudness_block_size(3.0), loudness_block_size(0.3), round(loudness_block_size(0.05), 4)
    (0.4, 0.19999999999999998, 0.0499)
    """
    return 0.4 if duration >= 0.4 else min(duration - 0.0001, abs(duration - 0.1))


def vpc_normalize_wave(audio: np.ndarray, sample_rate: int = SAMPLE_RATE) -> tuple[np.ndarray, bool]:
    """VPC 2024's evaluation wave normalization (``evaluation/privacy/asv/utils.py: normalize_wave``).

    Returns ``(wave, normalized)``. Where the loudness cannot be measured (e.g. digital silence), the
    wave is returned unchanged with ``normalized`` False: VPC's ``except ZeroDivisionError`` fallback,
    where the installed pyloudnorm would otherwise give NaN samples.

    >>> tone = 0.01 * np.sin(np.arange(16000) / 5.0).astype(np.float32)
    >>> wave, normalized = vpc_normalize_wave(tone)
    >>> normalized, round(float(np.abs(wave).max()), 6), wave.dtype
    (True, 1.0, dtype('float32'))
    >>> vpc_normalize_wave(np.zeros(8000, dtype=np.float32))[1]
    False
    """
    import warnings

    import pyloudnorm

    audio = np.asarray(audio, dtype=np.float32)
    duration = len(audio) / sample_rate
    block = loudness_block_size(duration)
    if len(audio) == 0 or block <= 0 or len(audio) < block * sample_rate:
        return audio, False
    meter = pyloudnorm.Meter(sample_rate, block_size=block)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # pyloudnorm warns of clipping; the peak division follows
        loudness = meter.integrated_loudness(audio)
        if not np.isfinite(loudness):
            return audio, False
        scaled = pyloudnorm.normalize.loudness(audio, loudness, TARGET_LUFS)
    peak = np.amax(np.abs(scaled))
    if not peak > 0 or not np.isfinite(peak):
        return audio, False
    return np.divide(scaled, peak).astype(np.float32), True


def vpc2026_block_size(duration: float) -> float:
    """pyloudnorm's gating block (seconds) as VPC 2026 sets it: ``min(0.4, max(0.1, duration - 1e-6))``.

    >>> vpc2026_block_size(3.0), vpc2026_block_size(0.3), vpc2026_block_size(0.05)
    (0.4, 0.299999, 0.1)
    """
    return min(0.4, max(0.1, duration - 1e-6))


def vpc2026_normalize_wave(
    audio: np.ndarray, sample_rate: int = SAMPLE_RATE, rng: np.random.Generator | None = None
) -> tuple[np.ndarray, str]:
    """VPC 2026's evaluation wave normalization (``evaluation/privacy/asv/utils.py: normalize_wave``).

    Returns ``(wave, how)``: float32 samples and ``"loudness"``, ``"peak"`` or ``"noise"`` (the
    fallbacks: docs/evaluation-reference.md). The 2026 code draws its noise unseeded; here it comes
    from ``rng`` (default: seeded 0), so a rerun embeds the same wave.

    >>> tone = 0.01 * np.sin(np.arange(16000) / 5.0).astype(np.float32)
    >>> wave, how = vpc2026_normalize_wave(tone)
    >>> how, round(float(np.abs(wave).max()), 6), wave.dtype
    ('loudness', 1.0, dtype('float32'))
    >>> vpc2026_normalize_wave(tone[:800])[1], vpc2026_normalize_wave(np.zeros(800, np.float32))[1]
    ('peak', 'noise')
    """
    import warnings

    import pyloudnorm

    audio = np.asarray(audio, dtype=np.float32)
    duration = len(audio) / sample_rate
    peak_abs = np.amax(np.abs(audio)) if len(audio) else np.float32(0)
    how = "peak"
    if peak_abs > 0 and duration >= 0.02:
        wave = audio / peak_abs
        try:
            meter = pyloudnorm.Meter(sample_rate, block_size=vpc2026_block_size(duration))
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # pyloudnorm warns of clipping; the peak division follows
                loudness = meter.integrated_loudness(audio)
                if np.isfinite(loudness):
                    scaled = pyloudnorm.normalize.loudness(audio, loudness, TARGET_LUFS)
                    if np.all(np.isfinite(scaled)):
                        peak = np.amax(np.abs(scaled))
                        if peak > 0:
                            wave, how = np.divide(scaled, peak), "loudness"
        except Exception:  # noqa: BLE001 (the 2026 code falls back on any error of the measure)
            pass
    elif peak_abs > 0:
        wave = audio / peak_abs
    else:
        rng = np.random.default_rng(0) if rng is None else rng
        wave, how = rng.standard_normal(audio.shape).astype(np.float32) * np.float32(SILENCE_NOISE), "noise"
    return np.nan_to_num(wave, nan=0.0, posinf=0.0, neginf=0.0).astype(np.float32), how


#: ``eval_batching``: ``exact`` embeds one utterance at a time (what both challenges' code does: no
#: padding, so an embedding does not depend on its batch); ``padded`` batches similar durations,
#: zero-padded (a speed option: measurably other embeddings, docs/evaluation.md).
BATCHINGS = ("exact", "padded")


def trim_zeros(audio: np.ndarray) -> np.ndarray:
    """Drop leading and trailing exact zeros (VPC 2024's extractor); an all-zero wave is returned whole.

    >>> trim_zeros(np.array([0, 0, 0.5, 0, -0.5, 0], dtype=np.float32)).tolist()
    [0.5, 0.0, -0.5]
    """
    trimmed = np.trim_zeros(audio)
    return trimmed if len(trimmed) else audio


def model_fingerprint(path, extra: dict | None = None) -> str:
    """A short hash of a checkpoint file's bytes and the extraction options (names the cache)."""
    digest = hashlib.sha1()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    digest.update(json.dumps(extra or {}, sort_keys=True).encode())
    return digest.hexdigest()[:16]


def source_signature(source) -> str:
    """What identifies an audio source's content for the embedding cache: size and mtime, or the pipe.

    >>> source_signature("/no/such/file")
    'missing'
    """
    if isinstance(source, PipeCommand):
        return f"pipe:{source}"
    signature = file_signature(source)
    return "missing" if signature is None else f"{signature[1]}:{signature[2]}"


class EmbeddingCache:
    """Embeddings of one folder, as ``shard-*.npz`` files (ids, file signatures, float32 matrix).

    Shards are written atomically, so an interrupted run resumes. An entry whose file signature
    (:func:`source_signature`) changed is embedded again (a later shard's entry wins); non-finite
    embeddings are never stored nor used.

    >>> import tempfile
    >>> cache = EmbeddingCache(tempfile.mkdtemp())
    >>> cache.add(["u1", "u2"], np.array([[1.0, 2.0], [np.nan, 0.0]]), ["10:1", "10:2"]); cache.flush()
    >>> again = EmbeddingCache(cache.folder); sorted(again.load()), again.signatures
    (['u1'], {'u1': '10:1'})
    """

    def __init__(self, folder):
        self.folder = Path(folder)
        self.signatures: dict[str, str] = {}
        self._pending_ids: list[str] = []
        self._pending_signatures: list[str] = []
        self._pending: list[np.ndarray] = []

    def load(self) -> dict[str, np.ndarray]:
        """Cached embeddings by id; ``self.signatures`` gets their files' signatures ("" if unknown)."""
        found: dict[str, np.ndarray] = {}
        for shard in sorted(self.folder.glob("shard-*.npz")):
            with np.load(shard) as data:
                ids = data["ids"].tolist()
                signatures = data["signatures"].tolist() if "signatures" in data else [""] * len(ids)
                for utt, signature, vector in zip(ids, signatures, data["embeddings"]):
                    if np.isfinite(vector).all():
                        found[utt], self.signatures[utt] = vector, signature
        return found

    def add(self, ids, embeddings: np.ndarray, signatures=None) -> None:
        """Queue embeddings (rows) of ``ids`` for the next shard; non-finite rows are left out."""
        embeddings = np.asarray(embeddings, dtype=np.float32)
        signatures = [""] * len(ids) if signatures is None else list(signatures)
        keep = np.isfinite(embeddings).all(axis=1)
        self._pending_ids.extend(utt for utt, ok in zip(ids, keep) if ok)
        self._pending_signatures.extend(sig for sig, ok in zip(signatures, keep) if ok)
        self._pending.append(embeddings[keep])

    def flush(self, suffix: str = "") -> None:
        """Write the queued embeddings as the next shard; ``suffix`` keeps ranks writing at once apart."""
        if not self._pending_ids:
            self._pending = []
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        number = len(list(self.folder.glob("shard-*.npz")))
        target = self.folder / f"shard-{number:05d}{suffix}.npz"
        partial = self.folder / f".partial-{number:05d}{suffix}.npz"
        np.savez(
            partial,
            ids=np.array(self._pending_ids),
            signatures=np.array(self._pending_signatures),
            embeddings=np.concatenate(self._pending),
        )
        os.replace(partial, target)
        self._pending_ids, self._pending_signatures, self._pending = [], [], []


def duration_batches(durations: dict[str, float], batch_size: int, max_batch_seconds: float | None = None):
    """Utterance ids in batches of similar duration (longest first), of at most ``batch_size``
    utterances and ``max_batch_seconds`` of padded audio (a longer utterance gets its own batch).

    >>> duration_batches({"a": 1.0, "b": 9.0, "c": 2.0, "d": 8.5}, batch_size=2)
    [['b', 'd'], ['c', 'a']]
    >>> duration_batches({"a": 1.0, "b": 9.0, "c": 2.0}, batch_size=8, max_batch_seconds=10)
    [['b'], ['c', 'a']]
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    order = sorted(durations, key=lambda utt: (-durations[utt], utt))
    batches, current = [], []
    for utt in order:
        # Sorted longest first, so the padded size of a batch is its first item's duration x its size.
        longest = durations[current[0]] if current else durations[utt]
        full = len(current) >= batch_size or (
            max_batch_seconds is not None and current and longest * (len(current) + 1) > max_batch_seconds
        )
        if full:
            batches.append(current)
            current = []
        current.append(utt)
    if current:
        batches.append(current)
    return batches


class EmbeddingExtractor:
    """Embeds whole utterances: Fbank -> sentence mean normalization -> embedding model.

    ``compute_features``, ``mean_var_norm`` and ``embedding_model`` are the training YAML's modules
    (weights loaded). The options are the ``eval_*`` keys (docs/evaluation-reference.md):
    ``normalize_wave`` (:func:`wave_normalization`), ``trim_zeros``, ``resample`` (else audio at
    another rate is an error naming the file), ``padded`` (``eval_batching: padded``, with
    ``batch_size`` and ``max_batch_seconds``; False embeds one utterance at a time).
    """

    def __init__(
        self,
        compute_features,
        mean_var_norm,
        embedding_model,
        device: str = "cpu",
        batch_size: int = 16,
        max_batch_seconds: float | None = 600.0,
        normalize_wave: str | bool | None = "vpc2024",
        sample_rate: int = SAMPLE_RATE,
        save_every: int = 50,
        trim_zeros: bool = True,
        resample: bool = False,
        padded: bool = False,
    ):
        self.compute_features = compute_features.to(device).eval()
        self.mean_var_norm = mean_var_norm.to(device).eval()
        self.embedding_model = embedding_model.to(device).eval()
        self.device = device
        self.batch_size = int(batch_size)
        self.max_batch_seconds = max_batch_seconds
        self.normalize_wave = wave_normalization(normalize_wave)
        self.trim_zeros = bool(trim_zeros)
        self.not_normalized: list[str] = []  # sources whose loudness could not be measured (fallbacks)
        self.sample_rate = int(sample_rate)
        self.save_every = int(save_every)
        self.resample = bool(resample)
        self.padded = bool(padded)

    def load_wave(self, source) -> np.ndarray:
        """The wave the model embeds: read, normalized (at its own rate), resampled and trimmed as the options say."""
        signal, rate = read_audio_and_rate(source)
        if rate != self.sample_rate and not self.resample:
            raise AudioReadError(
                f"{source}: sample rate {rate} Hz, expected {self.sample_rate} Hz "
                "(eval_resample: True resamples it as the VPC 2026 toolkit does, or convert the data)"
            )
        if self.normalize_wave == "vpc2024":
            signal, normalized = vpc_normalize_wave(signal, rate)
            if not normalized:
                self.not_normalized.append(str(source))
        elif self.normalize_wave == "vpc2026":
            signal, how = vpc2026_normalize_wave(signal, rate)
            if how != "loudness":
                self.not_normalized.append(f"{source} ({how})")
        if rate != self.sample_rate:
            signal = resample_wave(signal, rate, self.sample_rate)
        if self.trim_zeros:
            signal = trim_zeros(signal)
        return signal

    @torch.no_grad()
    def embed_batch(self, sources: list) -> np.ndarray:
        """Embeddings (rows, float32) of a list of audio sources, zero-padded to the longest."""
        signals = [self.load_wave(source) for source in sources]
        longest = max(len(signal) for signal in signals)
        batch = torch.zeros(len(signals), longest)
        for row, signal in enumerate(signals):
            batch[row, : len(signal)] = torch.from_numpy(signal)
        lengths = torch.tensor([len(signal) / longest for signal in signals])
        batch, lengths = batch.to(self.device), lengths.to(self.device)
        feats = self.compute_features(batch)
        feats = self.mean_var_norm(feats, lengths)
        embeddings = self.embedding_model(feats, lengths)
        return embeddings.reshape(len(signals), -1).float().cpu().numpy()

    def embed(
        self,
        wav: dict[str, str],
        cache_folder,
        durations: dict[str, float] | None = None,
        desc: str = "embed",
    ) -> dict[str, np.ndarray]:
        """Embeddings of the utterances in ``wav`` (id -> source), read from / added to the cache; a
        non-finite one raises :class:`EmbeddingError` naming its utterances and files."""
        cache = EmbeddingCache(cache_folder)
        found = cache.load()
        signatures = {utt: source_signature(wav[utt]) for utt in wav}
        missing = [utt for utt in wav if utt not in found or cache.signatures.get(utt) != signatures[utt]]
        rank, world = _rank_and_world()
        if world > 1:  # all ranks split the same missing list only if none writes before all have read
            ddp_barrier()
        if missing:
            if self.padded:
                durations = durations or {}
                lengths = {
                    utt: durations[utt] if utt in durations else audio_duration(wav[utt]) for utt in missing
                }
                batches = duration_batches(lengths, self.batch_size, self.max_batch_seconds)
            else:  # one at a time: no padding, so no embedding depends on the others
                batches = [[utt] for utt in missing]
            # Under torchrun each rank embeds every world-th batch; the shares are gathered below.
            mine, bad, suffix = batches[rank::world], [], f"-rank{rank}" if world > 1 else ""
            with tqdm(total=sum(map(len, mine)), desc=desc, unit="utt", disable=rank != 0) as progress:
                for number, batch in enumerate(mine, start=1):
                    vectors = self.embed_batch([wav[utt] for utt in batch])
                    cache.add(batch, vectors, [signatures[utt] for utt in batch])
                    bad = [utt for utt, vector in zip(batch, vectors) if not np.isfinite(vector).all()]
                    if bad:  # the finite ones are kept; the bad ones are embedded again next run
                        break
                    found.update(zip(batch, vectors))
                    progress.update(len(batch))
                    if number % self.save_every == 0:
                        cache.flush(suffix)
            cache.flush(suffix)
            if world > 1:
                shares = [None] * world
                share = {utt: found[utt] for batch in mine for utt in batch if utt in found}
                torch.distributed.all_gather_object(shares, (share, bad))
                for share, share_bad in shares:
                    found.update(share)
                    bad = bad or share_bad
            if bad:
                named = ", ".join(f"{utt} ({wav[utt]})" for utt in bad[:5])
                raise EmbeddingError(
                    f"{len(bad)} utterance(s) gave a NaN or infinite embedding: {named}; check their "
                    "audio for NaN or infinite samples (check_audio: full finds them) or the model"
                )
            if self.not_normalized:
                fallback = "unnormalized" if self.normalize_wave == "vpc2024" else "with VPC 2026's fallback"
                logger.warning(
                    "%s: %d wave(s) too quiet or too short for a loudness measure were embedded %s, first: %s",
                    desc,
                    len(self.not_normalized),
                    fallback,
                    self.not_normalized[:3],
                )
                self.not_normalized = []
        return {utt: found[utt] for utt in wav}


def _rank_and_world() -> tuple[int, int]:
    """This process's rank and the number of ranks sharing the work: ``(0, 1)`` outside a torchrun job
    and inside SpeechBrain's ``run_on_main`` (the other ranks are not embedding then)."""
    if ddp_prevent_block():
        return 0, 1
    return torch.distributed.get_rank(), torch.distributed.get_world_size()

"""Whisper's encoder for SR's features: the last encoder layer of whole utterances (:func:`encoder_features`,
20 ms frames, 50 per second) or pooled over each word segment encoded on its own (:func:`encoder_pooled`, the
paper's SR), run by transformers (:class:`~segreconcat_aug.align.whisper.WhisperBundle`) or CTranslate2
(:class:`CTranslate2Encoder`, the aligner's faster-whisper model); :func:`load_encoder` loads either.

>>> from segreconcat_aug.testing import tiny_whisper
>>> import numpy as np
>>> bundle = tiny_whisper()
>>> [f.shape for f in encoder_features(bundle, [np.zeros(16000, np.float32)])]
[(50, 64)]
>>> encoder_pooled(bundle, [np.zeros(8000, np.float32), np.ones(320, np.float32)]).shape
(2, 128)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from ..data.audio import SAMPLE_RATE
from .whisper import (
    DEFAULT_MODELS,
    WhisperLoadError,
    load_faster_whisper,
    load_whisper,
    resolve_compute_type,
    split_windows,
)

FRAME_SECONDS = 0.02  # one encoder frame: 2 mel hops of 10 ms
SAMPLES_PER_FRAME = int(SAMPLE_RATE * FRAME_SECONDS)


@dataclass
class CTranslate2Encoder:
    """Whisper's encoder run by CTranslate2: the model and backend that segment (faster-whisper)."""

    model: object  # a faster_whisper.WhisperModel
    feature_extractor: object
    name: str
    device: str = "cpu"
    compute_type: str = "int8"

    backend = "faster-whisper"

    @property
    def dtype(self) -> str:
        """The compute type (``int8``, ``float16``, ...): what an SR order's key records."""
        return self.compute_type

    def encode(self, chunk) -> torch.Tensor:
        """Last encoder layer of a list of windows (each zero-padded to 30 s), float32 torch."""
        import ctranslate2

        features = self.feature_extractor(chunk, sampling_rate=SAMPLE_RATE, return_tensors="np")
        storage = ctranslate2.StorageView.from_array(
            np.ascontiguousarray(features.input_features, np.float32)
        )
        output = self.model.model.encode(storage, to_cpu=False)
        if output.device == "cuda":
            return torch.as_tensor(output, device=f"cuda:{output.device_index}").float()
        return torch.from_numpy(np.array(output, dtype=np.float32))


def load_ctranslate2_encoder(
    model: str = DEFAULT_MODELS["faster-whisper"],
    *,
    device: str | None = None,
    compute_type: str = "auto",
) -> CTranslate2Encoder:
    """SR's encoder from a faster-whisper model (size name or CTranslate2 folder), as
    :func:`load_faster_whisper` loads it for the aligner: the same model, the same backend
    (``compute_type``: ``auto`` = float16 on CUDA, the authors' SR precision, float32 on the CPU).
    """
    from transformers import WhisperFeatureExtractor

    from ..data.jobs import default_device

    device = device or default_device()
    # Not the aligner's int8 on the CPU: it changed 8 of 10 SR orders of the demo (docs/rearrangement.md).
    compute_type = resolve_compute_type(compute_type, device, cpu="float32")
    loaded = load_faster_whisper(model, device=device, compute_type=compute_type)
    extractor = WhisperFeatureExtractor(feature_size=int(loaded.model.n_mels))
    return CTranslate2Encoder(loaded, extractor, str(model), device, compute_type)


#: SR's encoder backends: faster-whisper (CTranslate2, the aligner's default) and transformers.
ENCODER_BACKENDS = ("faster-whisper", "transformers")


def load_encoder(
    backend: str,
    model: str | None = None,
    *,
    device: str | None = None,
    compute_type: str = "auto",
    dtype="auto",
):
    """SR's encoder: :func:`load_ctranslate2_encoder` or :func:`load_whisper` (features only)."""
    if backend not in ENCODER_BACKENDS:
        raise WhisperLoadError(f"whisper_backend {backend!r}: expected one of {', '.join(ENCODER_BACKENDS)}")
    model = model or DEFAULT_MODELS[backend]
    if backend == "faster-whisper":
        return load_ctranslate2_encoder(model, device=device, compute_type=compute_type)
    return load_whisper(model, device=device, dtype=dtype, word_timestamps=False)


def n_frames(n_samples: int) -> int:
    """Encoder frames covering ``n_samples`` (20 ms each, last one partial).

    >>> n_frames(16000), n_frames(16001), n_frames(0)
    (50, 51, 0)
    """
    return math.ceil(n_samples / SAMPLES_PER_FRAME)


@torch.inference_mode()
def encoder_pooled(bundle, audios, *, batch_size: int = 8, padded: bool = False) -> np.ndarray:
    """``concat(mean, max)`` of the last encoder layer over each audio, ``(len(audios), 2 * d_model)``."""
    windows, owners, _ = split_windows(audios)
    sums = maxima = None
    counts = np.zeros(len(audios), dtype=np.int64)
    for lo in range(0, len(windows), batch_size):
        chunk = windows[lo : lo + batch_size]
        hidden = bundle.encode(chunk).float()
        if sums is None:  # the width is the encoder's output (d_model)
            sums = np.zeros((len(audios), hidden.shape[-1]), dtype=np.float64)
            maxima = np.full((len(audios), hidden.shape[-1]), -np.inf, dtype=np.float64)
        used = [hidden.shape[1] if padded else n_frames(len(window)) for window in chunk]
        mask = (
            torch.arange(hidden.shape[1], device=hidden.device)[None, :]
            < torch.tensor(used, device=hidden.device)[:, None]
        )
        window_sums = (hidden * mask[..., None]).sum(dim=1).double().cpu().numpy()
        window_max = hidden.masked_fill(~mask[..., None], -torch.inf).amax(dim=1).double().cpu().numpy()
        for offset in range(len(chunk)):
            owner = owners[lo + offset]
            sums[owner] += window_sums[offset]
            maxima[owner] = np.maximum(maxima[owner], window_max[offset])
            counts[owner] += used[offset]
    if sums is None:  # no audio given
        return np.zeros((0, 0), dtype=np.float64)
    return np.concatenate([sums / counts[:, None], maxima], axis=1)


@torch.inference_mode()
def encoder_features(bundle, audios, *, batch_size: int = 8) -> list[np.ndarray]:
    """Last encoder layer, ``(frames, d_model)`` float32 per utterance, 50 frames/s."""
    windows, owners, _ = split_windows(audios)
    pieces: list[list[np.ndarray]] = [[] for _ in audios]
    for lo in range(0, len(windows), batch_size):
        chunk = windows[lo : lo + batch_size]
        hidden = bundle.encode(chunk).float().cpu().numpy()
        for offset, window in enumerate(chunk):
            pieces[owners[lo + offset]].append(hidden[offset, : n_frames(len(window))])
    return [np.concatenate(parts, axis=0) for parts in pieces]

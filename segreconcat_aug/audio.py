"""Audio reading through soundfile (``torchaudio.load`` needs torchcodec; we avoid it).

Every error names the source, so a bad entry among 104k is found at once.
"""

from __future__ import annotations

import io
import subprocess

import numpy as np
import soundfile

from .kaldi import PipeCommand

SAMPLE_RATE = 16000


class AudioReadError(RuntimeError):
    """Audio could not be read or does not have the expected form."""


def read_audio(source, *, sample_rate: int | None = SAMPLE_RATE, resample: bool = False):
    """Read a mono float32 waveform.

    Parameters
    ----------
    source : str or PipeCommand
        A file path, or a ``wav.scp`` pipe command (run through the shell).
    sample_rate : int or None
        The rate the caller expects; ``None`` accepts any rate.
    resample : bool
        Resample (polyphase, scipy) instead of refusing another rate.

    Returns
    -------
    numpy.ndarray
        float32 samples in [-1, 1], one channel (channels are averaged).

    Example
    -------
    >>> import tempfile, os, numpy as np
    >>> path = os.path.join(tempfile.mkdtemp(), "x.wav")
    >>> write_audio(path, np.zeros(1600, dtype=np.float32))
    >>> read_audio(path).shape
    (1600,)
    """
    try:
        if isinstance(source, PipeCommand):
            data = subprocess.run(str(source), shell=True, check=True, capture_output=True).stdout
            audio, rate = soundfile.read(io.BytesIO(data), dtype="float32", always_2d=True)
        else:
            audio, rate = soundfile.read(str(source), dtype="float32", always_2d=True)
    except (RuntimeError, OSError, subprocess.CalledProcessError, soundfile.LibsndfileError) as err:
        raise AudioReadError(f"{source}: cannot read audio ({err})") from err
    audio = audio.mean(axis=1) if audio.shape[1] > 1 else audio[:, 0]
    if sample_rate is not None and rate != sample_rate:
        if not resample:
            raise AudioReadError(
                f"{source}: sample rate {rate} Hz, expected {sample_rate} Hz "
                "(enable resampling or convert the data)"
            )
        audio = resample_audio(audio, rate, sample_rate)
    return np.ascontiguousarray(audio, dtype=np.float32)


def resample_audio(audio: np.ndarray, rate: int, target: int) -> np.ndarray:
    """Polyphase resampling (scipy), exact for integer rate ratios."""
    from math import gcd

    from scipy.signal import resample_poly

    divisor = gcd(rate, target)
    return resample_poly(audio, target // divisor, rate // divisor).astype(np.float32)


def audio_duration(source) -> float:
    """Duration in seconds from the file header (no decoding)."""
    try:
        info = soundfile.info(str(source))
    except (RuntimeError, OSError, soundfile.LibsndfileError) as err:
        raise AudioReadError(f"{source}: cannot read audio header ({err})") from err
    return info.frames / info.samplerate


def write_audio(path, audio, sample_rate: int = SAMPLE_RATE, subtype: str | None = None) -> None:
    """Write a mono waveform; the format follows the file extension."""
    soundfile.write(str(path), np.asarray(audio, dtype=np.float32), sample_rate, subtype=subtype)

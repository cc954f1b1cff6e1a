"""Audio reading through soundfile (``torchaudio.load`` needs torchcodec; we avoid it)."""

from __future__ import annotations

import io
import os
import subprocess

import numpy as np
import soundfile

from ..errors import UserError
from .kaldi import PipeCommand

SAMPLE_RATE = 16000


class AudioReadError(UserError, RuntimeError):
    """Audio could not be read or does not have the expected form."""


def file_signature(path) -> tuple[str, int, int] | None:
    """``(absolute path, size, mtime in ns)`` of a file, or None when it is not a file.

    >>> file_signature("/no/such/file") is None
    True
    """
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return os.path.abspath(path), int(stat.st_size), int(stat.st_mtime_ns)


def _mono(audio: np.ndarray) -> np.ndarray:
    """``(frames, channels)`` -> ``(frames,)``: channels averaged (one place, so every reader agrees)."""
    return audio.mean(axis=1) if audio.shape[1] > 1 else audio[:, 0]


def read_audio(source, *, sample_rate: int | None = SAMPLE_RATE, resample: bool = False):
    """Read a mono float32 waveform (channels averaged) from a path or a ``wav.scp`` pipe command; another
    rate than ``sample_rate`` is an error, or with ``resample`` resampled (:func:`resample_wave`).

    >>> import tempfile, os, numpy as np
    >>> path = os.path.join(tempfile.mkdtemp(), "x.wav")
    >>> write_audio(path, np.zeros(1600, dtype=np.float32))
    >>> read_audio(path).shape
    (1600,)
    """
    audio, rate = read_audio_and_rate(source)
    if sample_rate is not None and rate != sample_rate:
        if not resample:
            raise AudioReadError(
                f"{source}: sample rate {rate} Hz, expected {sample_rate} Hz "
                "(enable resampling or convert the data)"
            )
        audio = resample_wave(audio, rate, sample_rate)
    return np.ascontiguousarray(audio, dtype=np.float32)


class ItemError(RuntimeError):
    """One utterance cannot be processed; ``kind`` names the failure class for a job's counts."""

    def __init__(self, message: str, kind: str):
        super().__init__(message)
        self.kind = kind


def read_item_audio(item, *, resample: bool = False, sample_rate: int = SAMPLE_RATE) -> np.ndarray:
    """The audio of ``item`` (an ``id`` and a ``source``) as mono float32, or :class:`ItemError` with a
    ``kind``: ``unreadable``, ``sample_rate``, ``empty_audio``, ``nonfinite_audio``."""
    try:
        audio = read_audio(item.source, sample_rate=sample_rate, resample=resample)
    except AudioReadError as err:
        kind = "sample_rate" if "sample rate" in str(err) else "unreadable"
        raise ItemError(f"{item.id}: {err}", kind) from err
    if len(audio) == 0:
        raise ItemError(f"{item.id}: {item.source}: empty audio (0 samples)", "empty_audio")
    bad = np.count_nonzero(~np.isfinite(audio))
    if bad:
        raise ItemError(f"{item.id}: {item.source}: {bad} NaN or infinite samples", "nonfinite_audio")
    return audio


def read_audio_and_rate(source) -> tuple[np.ndarray, int]:
    """A mono float32 waveform (channels averaged) at its own sample rate, and that rate."""
    try:
        if isinstance(source, PipeCommand):
            data = subprocess.run(str(source), shell=True, check=True, capture_output=True).stdout
            audio, rate = soundfile.read(io.BytesIO(data), dtype="float32", always_2d=True)
        else:
            audio, rate = soundfile.read(str(source), dtype="float32", always_2d=True)
    except (RuntimeError, OSError, subprocess.CalledProcessError, soundfile.LibsndfileError) as err:
        raise AudioReadError(f"{source}: cannot read audio ({err})") from err
    return np.ascontiguousarray(_mono(audio), dtype=np.float32), int(rate)


def resample_wave(audio: np.ndarray, rate: int, target: int = SAMPLE_RATE) -> np.ndarray:
    """``audio`` from ``rate`` to ``target`` Hz as the VPC 2026 toolkit resamples (``torchaudio``'s defaults).

    >>> wave = np.sin(np.arange(22050) / 10.0).astype(np.float32)
    >>> resample_wave(wave, 22050).shape, resample_wave(wave, 16000) is wave
    ((16000,), True)
    """
    if rate == target:
        return audio
    import torch
    import torchaudio

    tensor = torch.from_numpy(np.ascontiguousarray(audio, dtype=np.float32))
    return torchaudio.functional.resample(tensor, int(rate), int(target)).numpy()


# Subtypes whose samples libsndfile addresses exactly: integer PCM of any width (WAV,
# FLAC, AIFF, ...), float, double, mu-law and A-law. Seeking in lossy codecs (Vorbis,
# Opus, MP3) is approximate in libsndfile 1.2: a span read there can be shifted or short.
_EXACT_SEEK_SUBTYPES = ("PCM_", "FLOAT", "DOUBLE", "ULAW", "ALAW")


class DecodedCache:
    """The decoded samples of lossy files, kept up to ``max_bytes``, the least recently used dropped first.

    A span of a lossy file is read by decoding the whole file (:class:`AudioFile`), so an epoch
    taking several crops of it would decode it each time (``decoded_cache_mb``). Keyed by path, size
    and modification time; each process (each DataLoader worker) holds its own.
    >>> cache = DecodedCache(max_bytes=8)
    >>> cache.put(("a", 0, 0), np.zeros(2, np.float32)); cache.put(("b", 0, 0), np.ones(2, np.float32))
    >>> cache.get(("a", 0, 0)) is None, cache.get(("b", 0, 0)).tolist()
    (True, [1.0, 1.0])
    """

    def __init__(self, max_bytes: int):
        from collections import OrderedDict

        self.max_bytes = int(max_bytes)
        self._entries: OrderedDict = OrderedDict()
        self._bytes = 0

    def get(self, key):
        audio = self._entries.get(key)
        if audio is not None:
            self._entries.move_to_end(key)
        return audio

    def put(self, key, audio: np.ndarray) -> None:
        if audio.nbytes > self.max_bytes or key in self._entries:
            return
        self._entries[key] = audio
        self._bytes += audio.nbytes
        while self._bytes > self.max_bytes:
            _, dropped = self._entries.popitem(last=False)
            self._bytes -= dropped.nbytes


class AudioFile:
    """A file opened for reading spans: its length from the header, then only the samples asked for.

    >>> import tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "x.wav")
    >>> write_audio(path, np.arange(1600, dtype=np.float32) / 2000)
    >>> with AudioFile(path) as audio:
    ...     audio.frames, audio.exact_seek, bool(np.array_equal(audio.read(100, 104), read_audio(path)[100:104]))
    (1600, True, True)
    """

    def __init__(
        self,
        source,
        sample_rate: int | None = SAMPLE_RATE,
        cache: DecodedCache | None = None,
        resample: bool = False,
    ):
        self.source = str(source)
        self.cache = cache
        try:
            self._file = soundfile.SoundFile(self.source)
        except (RuntimeError, OSError, soundfile.LibsndfileError) as err:
            raise AudioReadError(f"{source}: cannot read audio ({err})") from err
        rate = self._file.samplerate
        if sample_rate is not None and rate != sample_rate and not resample:
            self._file.close()
            raise AudioReadError(
                f"{source}: sample rate {rate} Hz, expected {sample_rate} Hz (convert the data)"
            )
        self.frames = int(self._file.frames)
        self.exact_seek = self._file.subtype.startswith(_EXACT_SEEK_SUBTYPES)
        self._whole = None
        self._rates = (rate, sample_rate) if sample_rate is not None and rate != sample_rate else None
        if self._rates:  # spans are sliced from the resampled file (decoded and resampled once if cached)
            self._whole = self._decode_whole()
            self.frames, self.exact_seek = len(self._whole), False

    def read(self, start: int, stop: int) -> np.ndarray:
        """Samples ``[start, stop)``, mono float32; a file shorter than its header is an error."""
        start, stop = max(int(start), 0), min(int(stop), self.frames)
        if stop <= start:
            return np.zeros(0, dtype=np.float32)
        if not self.exact_seek:
            if self._whole is None:
                self._whole = self._decode_whole()
            span = self._whole[start:stop]
            return span.copy() if self.cache is not None else span  # the cached samples stay unchanged
        return self._read_from(start, stop)

    def read_ranges(self, ranges) -> np.ndarray:
        """Samples ``ranges[0][0]`` to ``ranges[-1][1]`` with only the given sorted, disjoint ``[a, b)``
        ranges read (zeros between them; a lossy file's samples whole).

        >>> import tempfile, os
        >>> path = os.path.join(tempfile.mkdtemp(), "x.wav")
        >>> write_audio(path, np.arange(1, 9, dtype=np.float32) / 10)
        >>> with AudioFile(path) as audio:
        ...     (audio.read_ranges([[1, 3], [5, 6]]) * 10).round().tolist()
        [2.0, 3.0, 0.0, 0.0, 6.0]
        """
        ranges = np.asarray(ranges, dtype=np.int64).reshape(-1, 2)
        if len(ranges) == 0:
            return np.zeros(0, dtype=np.float32)
        lo, hi = int(ranges[0, 0]), int(ranges[-1, 1])
        if len(ranges) == 1 or not self.exact_seek:
            return self.read(lo, hi)
        out = np.empty(hi - lo, dtype=np.float32)
        previous = lo
        for a, b in ranges.tolist():
            out[previous - lo : a - lo] = 0.0
            out[a - lo : b - lo] = self.read(a, b)
            previous = b
        return out

    def _decode_whole(self) -> np.ndarray:
        def decode():
            audio = self._read_from(0, self.frames)
            return resample_wave(audio, *self._rates) if self._rates else audio

        if self.cache is None:
            return decode()
        key = (file_signature(self.source), self._rates)
        audio = self.cache.get(key)
        if audio is None:
            audio = decode()
            audio.flags.writeable = False  # shared by every later read of the file
            self.cache.put(key, audio)
        return audio

    def _read_from(self, start: int, stop: int) -> np.ndarray:
        try:
            self._file.seek(start)
            audio = self._file.read(stop - start, dtype="float32", always_2d=True)
        except (RuntimeError, OSError, soundfile.LibsndfileError) as err:
            raise AudioReadError(f"{self.source}: cannot read samples {start}-{stop} ({err})") from err
        if len(audio) != stop - start:
            raise AudioReadError(
                f"{self.source}: {len(audio)} samples at {start}, expected {stop - start}; "
                f"the header says {self.frames} frames (truncated file?)"
            )
        return np.ascontiguousarray(_mono(audio), dtype=np.float32)

    def close(self) -> None:
        self._file.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def audio_duration(source) -> float:
    """Duration in seconds from the file header (no decoding)."""
    try:
        info = soundfile.info(str(source))
    except (RuntimeError, OSError, soundfile.LibsndfileError) as err:
        raise AudioReadError(f"{source}: cannot read audio header ({err})") from err
    return info.frames / info.samplerate


def write_audio(
    path,
    audio,
    sample_rate: int = SAMPLE_RATE,
    subtype: str | None = None,
    compression_level: float | None = None,
) -> None:
    """Write a mono waveform; the format follows the file extension. ``compression_level``:
    libsndfile's 0 (best quality) .. 1 (smallest) for FLAC and Ogg (None: the codec's default)."""
    soundfile.write(
        str(path),
        np.asarray(audio, dtype=np.float32),
        sample_rate,
        subtype=subtype,
        compression_level=compression_level,
    )

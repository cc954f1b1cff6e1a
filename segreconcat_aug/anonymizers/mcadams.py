"""The McAdams anonymizer (VoicePrivacy Challenge baseline B2; Patino et al., 2021), vectorized.

The output keeps the input's length, so the original's word times stay valid (steps: docs/demo.md).

>>> import numpy as np
>>> t = np.arange(16000) / 16000
>>> speechlike = np.sin(2 * np.pi * 150 * t) * (1 + np.sin(2 * np.pi * 3 * t))
>>> out = mcadams(speechlike, alpha=0.8)
>>> out.shape == speechlike.shape, out.dtype, bool(np.abs(out).max() <= 1.0)
(True, dtype('float32'), True)
>>> anonymizer = McAdamsAnonymizer(seed=3)
>>> anonymizer.alpha("19-198-0001") == McAdamsAnonymizer(seed=3).alpha("19-198-0001")
True
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..data.audio import SAMPLE_RATE
from ..seeding import seeded_rng

_ALPHA_STREAM = 7  # keeps the McAdams draw independent of other draws keyed by the same utterance id
_MAX_RADIUS = 0.9999  # pole radius cap: a synthesis filter that rings for seconds is no speech filter
_SILENT_FRAME = 1e-10  # frame energy below which LPC is ill-posed: the frame passes through unchanged


def _frames(audio: np.ndarray, winlen: int, shift: int) -> tuple[np.ndarray, int]:
    """Overlapping frames covering every sample by full windows; returns (frames, front padding)."""
    # Pad so that every sample lies under all the windows that overlap it (exact overlap-add).
    front = winlen - shift
    count = max(1, -(-(len(audio) + winlen - 2 * shift) // shift) + 1)
    padded = np.zeros((count - 1) * shift + winlen, dtype=np.float64)
    padded[front : front + len(audio)] = audio
    index = np.arange(count)[:, None] * shift + np.arange(winlen)[None, :]
    return padded[index], front


def _poly_from_roots(roots: np.ndarray) -> np.ndarray:
    """Monic polynomial coefficients (highest power first) of each row of roots, batched ``np.poly``."""
    count, order = roots.shape
    coeffs = np.zeros((count, order + 1), dtype=np.complex128)
    coeffs[:, 0] = 1.0
    for k in range(order):
        # Multiply by (z - r_k): new[j] = old[j] - r_k * old[j - 1].
        coeffs[:, 1 : k + 2] = coeffs[:, 1 : k + 2] - roots[:, k : k + 1] * coeffs[:, : k + 1]
    return coeffs.real


def _fir(coeffs: np.ndarray, frames: np.ndarray) -> np.ndarray:
    """``lfilter(b, [1], frame)`` for every frame with its own ``b`` (zero initial state)."""
    out = np.zeros_like(frames)
    length = frames.shape[1]
    for k in range(coeffs.shape[1]):
        out[:, k:] += coeffs[:, k : k + 1] * frames[:, : length - k]
    return out


def _all_pole(coeffs: np.ndarray, frames: np.ndarray) -> np.ndarray:
    """``lfilter([1], a, frame)`` for every frame with its own monic ``a`` (zero initial state): the
    recursion runs over time, vectorized over frames."""
    count, length = frames.shape
    order = coeffs.shape[1] - 1
    # History buffer, newest first: y[n-1], y[n-2], ..., y[n-order].
    history = np.zeros((count, order), dtype=np.float64)
    feedback = coeffs[:, 1:]
    out = np.empty_like(frames)
    for n in range(length):
        value = frames[:, n] - np.einsum("ij,ij->i", feedback, history)
        out[:, n] = value
        history[:, 1:] = history[:, :-1]
        history[:, 0] = value
    return out


def mcadams(
    audio,
    alpha: float,
    sample_rate: int = SAMPLE_RATE,
    *,
    win_ms: float = 20.0,
    shift_ms: float = 10.0,
    lpc_order: int = 20,
    peak: float = 1.0,
) -> np.ndarray:
    """Anonymize one waveform (mono, any float range) with McAdams coefficient ``alpha`` (B2 draws it
    in [0.5, 0.9]; 1 leaves the poles as they are). ``peak``: the output's peak amplitude (B2: 1.0;
    keep headroom for lossy codecs). Returns float32, exactly as long as ``audio``.

    >>> import numpy as np
    >>> noise = np.random.default_rng(0).standard_normal(4000)
    >>> out = mcadams(noise, 0.7, peak=0.5)
    >>> len(out), round(float(np.abs(out).max()), 3)
    (4000, 0.5)
    """
    import librosa  # imported here: its numba warm-up is paid only by callers that anonymize

    audio = np.asarray(audio, dtype=np.float64)
    if audio.ndim != 1:
        raise ValueError(f"mcadams expects mono audio (1-D), got shape {audio.shape}")
    if not 0 < alpha:
        raise ValueError(f"McAdams coefficient must be positive, got {alpha}")
    if not np.all(np.isfinite(audio)):
        raise ValueError("mcadams: audio has NaN or infinite samples")
    if len(audio) == 0:
        return np.zeros(0, dtype=np.float32)
    winlen = int(round(win_ms * 1e-3 * sample_rate))
    shift = int(round(shift_ms * 1e-3 * sample_rate))
    if not 0 < shift <= winlen or winlen <= lpc_order:
        raise ValueError(f"need 0 < shift <= window and window > lpc_order (window {winlen}, shift {shift})")

    # sqrt-Hann analysis and synthesis windows whose product overlap-adds to one.
    hann = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(winlen) / winlen)
    window = np.sqrt(hann / (hann.sum() / shift))
    frames, front = _frames(audio, winlen, shift)
    frames = frames * window

    voiced = np.einsum("ij,ij->i", frames, frames) > _SILENT_FRAME
    lpc = np.zeros((len(frames), lpc_order + 1))
    lpc[:, 0] = 1.0
    if voiced.any():
        lpc[voiced] = librosa.lpc(frames[voiced], order=lpc_order, axis=-1)

    # Poles: eigenvalues of the companion matrices, all frames at once.
    companion = np.zeros((len(frames), lpc_order, lpc_order))
    companion[:, 0, :] = -lpc[:, 1:]
    companion[:, np.arange(1, lpc_order), np.arange(lpc_order - 1)] = 1.0
    poles = np.linalg.eigvals(companion)
    angles = np.angle(poles)
    complex_pole = poles.imag != 0  # LAPACK returns real eigenvalues with an exact zero imaginary part
    new_angles = np.where(complex_pole, np.sign(angles) * np.abs(angles) ** alpha, angles)
    new_angles = np.clip(new_angles, -np.pi, np.pi)
    # Near-periodic frames can make the LPC numerically unstable (roots outside the unit circle);
    # reflecting them inside keeps the magnitude response and the synthesis filter bounded.
    radius = np.abs(poles)
    radius = np.minimum(np.where(radius > 1.0, 1.0 / np.maximum(radius, 1e-12), radius), _MAX_RADIUS)
    new_poles = radius * np.exp(1j * new_angles)
    new_lpc = _poly_from_roots(new_poles)
    new_lpc[~voiced] = lpc[~voiced]

    residual = _fir(lpc, frames)
    rebuilt = _all_pole(new_lpc, residual) * window

    count, length = frames.shape
    out = np.zeros((count - 1) * shift + winlen)
    index = np.arange(count)[:, None] * shift + np.arange(length)[None, :]
    np.add.at(out, index.ravel(), rebuilt.ravel())
    out = out[front : front + len(audio)]
    top = np.abs(out).max()
    if top > 0:
        out = out * (peak / top)
    return out.astype(np.float32)


@dataclass
class McAdamsAnonymizer:
    """McAdams anonymization with a per-utterance coefficient ``alpha ~ U[alpha_low, alpha_high]``
    (B2: 0.5, 0.9; equal values give a fixed one), fixed by ``seed`` and the utterance id; the other
    fields: see :func:`mcadams`.
    """

    seed: int = 1986
    alpha_low: float = 0.5
    alpha_high: float = 0.9
    win_ms: float = 20.0
    shift_ms: float = 10.0
    lpc_order: int = 20
    peak: float = 1.0
    sample_rate: int = SAMPLE_RATE

    def __post_init__(self):
        if not 0 < self.alpha_low <= self.alpha_high:
            raise ValueError(f"need 0 < alpha_low <= alpha_high, got [{self.alpha_low}, {self.alpha_high}]")

    def alpha(self, utt_id: str) -> float:
        """The coefficient of one utterance (the same in every run and process)."""
        if self.alpha_low == self.alpha_high:
            return float(self.alpha_low)
        rng = seeded_rng(self.seed, 0, utt_id, _ALPHA_STREAM)
        return float(rng.uniform(self.alpha_low, self.alpha_high))

    name = "McAdams"

    def parameters(self, utt_id: str) -> dict[str, float]:
        """The per-utterance draw an anonymized folder records (``utt2alpha``)."""
        return {"alpha": self.alpha(utt_id)}

    def __call__(self, audio, utt_id: str) -> np.ndarray:
        """Anonymize one utterance with its own coefficient."""
        return mcadams(
            audio,
            self.alpha(utt_id),
            self.sample_rate,
            win_ms=self.win_ms,
            shift_ms=self.shift_ms,
            lpc_order=self.lpc_order,
            peak=self.peak,
        )

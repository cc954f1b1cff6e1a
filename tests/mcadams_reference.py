"""The VoicePrivacy B2 McAdams script's frame-by-frame loop: the reference ``mcadams`` is tested and
benchmarked against (docs/demo.md)."""

import numpy as np

from segreconcat_aug.data.audio import SAMPLE_RATE


def mcadams_frame_loop(
    audio, alpha: float, sample_rate: int = SAMPLE_RATE, lpc_order: int = 20
) -> np.ndarray:
    """The B2 script's frame-by-frame loop (VPC 2024 ``anonymise_dir_mcadams.py``), kept as the
    reference for tests and ``benchmarks/``; conjugate poles are found by the sign of their angle
    instead of by position, so a pair listed in the other order cannot produce NaN.
    """
    import librosa
    from scipy.signal import lfilter, tf2zpk

    eps = np.finfo(np.float32).eps
    samples = np.asarray(audio, dtype=np.float64) + eps
    winlen, shift = int(0.02 * sample_rate), int(0.01 * sample_rate)
    hann = np.hanning(winlen)
    window = np.sqrt(hann / (hann.sum() / shift))
    count = 1 + (len(samples) - winlen) // shift
    out = np.zeros(len(samples))
    for m in range(1, count):
        frame = samples[m * shift : m * shift + winlen] * window
        lpc = librosa.lpc(frame + eps, order=lpc_order)
        poles = tf2zpk(np.array([1.0]), lpc)[1]
        angles = np.angle(poles)
        moved = np.where(poles.imag != 0, np.sign(angles) * np.abs(angles) ** alpha, angles)
        new_poles = np.abs(poles) * np.exp(1j * np.clip(moved, -np.pi, np.pi))
        residual = lfilter(lpc, [1.0], frame)
        rebuilt = lfilter([1.0], np.real(np.poly(new_poles)), residual) * window
        out[m * shift : m * shift + winlen] += rebuilt
    return (out / np.abs(out).max()).astype(np.float32)

"""Seeded randomness: every random choice keyed by ``(seed, epoch, key, stream)``."""

from __future__ import annotations

import zlib

import numpy as np


def seeded_rng(seed: int, epoch: int, key: str, stream: int = 0) -> np.random.Generator:
    """A generator fixed by ``(seed, epoch, key, stream)``, equal in every process (``zlib.crc32``:
    Python salts ``hash`` per process).

    >>> int(seeded_rng(1, 2, "u").integers(1000)) == int(seeded_rng(1, 2, "u").integers(1000))
    True
    """
    return np.random.default_rng([seed, epoch, zlib.crc32(key.encode("utf-8")), stream])


_MASK64 = (1 << 64) - 1


def _mix64(*values: int) -> int:
    """A 64-bit hash of integers (splitmix64 finalizer steps), the same in every process."""
    h = 0x9E3779B97F4A7C15
    for value in values:
        h = ((h ^ (value & _MASK64)) * 0xBF58476D1CE4E5B9) & _MASK64
        h ^= h >> 31
        h = (h * 0x94D049BB133111EB) & _MASK64
        h ^= h >> 29
    return h


class KeyedRandom:
    """Per-sample draws for the DataLoader hot path, fixed by ``(seed, epoch, key, stream)``.

    One generator re-keyed in place (3 us instead of 11 us): it is valid only until the next call.

    >>> draw = KeyedRandom(1986)
    >>> first = draw(3, "utt").permutation(10).tolist()
    >>> first == draw(3, "utt").permutation(10).tolist() != draw(4, "utt").permutation(10).tolist()
    True
    """

    def __init__(self, seed: int):
        self.seed = int(seed)
        self._bits = np.random.PCG64(0)
        self._generator = np.random.Generator(self._bits)

    def __call__(self, epoch: int, key: str, stream: int = 0) -> np.random.Generator:
        high = _mix64(self.seed, epoch, zlib.crc32(key.encode("utf-8")), stream)
        low = _mix64(high, stream, 0x5EED)
        self._bits.state = {
            "bit_generator": "PCG64",
            "state": {"state": (high << 64) | low, "inc": ((low << 64) | high) | 1},
            "has_uint32": 0,
            "uinteger": 0,
        }
        return self._generator

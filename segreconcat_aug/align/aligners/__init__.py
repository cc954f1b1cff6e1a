"""Word aligners: audio (16 kHz mono float32) + optional transcript -> words with times.

Each has ``name``, ``batch_size``, ``needs_transcript``, ``align``, ``align_batch`` (an exception in
place of a failed utterance's words) and ``stats``; the backends are in docs/alignment.md.

>>> aligner = make_aligner("pocketsphinx")
>>> aligner.name, aligner.needs_transcript
('pocketsphinx:en-us', True)
"""

from __future__ import annotations

BACKENDS = ("faster-whisper", "openai-whisper", "transformers", "pocketsphinx")
ALIASES = {"whisper": "transformers"}  # the transformers backend's name before faster-whisper


class AlignmentFailed(RuntimeError):
    """An utterance could not be aligned; the message says why."""


def make_aligner(backend: str, **options):
    """The aligner of a backend of :data:`BACKENDS` (or an alias); ``options`` go to its constructor."""
    backend = ALIASES.get(backend, backend)
    if backend == "faster-whisper":
        from .faster_whisper import FasterWhisperAligner

        return FasterWhisperAligner(**options)
    if backend == "openai-whisper":
        from .openai_whisper import OpenAIWhisperAligner

        return OpenAIWhisperAligner(**options)
    if backend == "transformers":
        from .whisper import WhisperAligner

        return WhisperAligner(**options)
    if backend == "pocketsphinx":
        from .pocketsphinx import PocketsphinxAligner

        return PocketsphinxAligner(**options)
    raise ValueError(f"backend {backend!r}: expected one of {', '.join(BACKENDS)}")


__all__ = ["ALIASES", "AlignmentFailed", "BACKENDS", "make_aligner"]

"""Word aligners: audio (16 kHz mono float32) + optional transcript -> words with times.

Every aligner has the same small API, so ``recipes/align.py`` and other code can swap them:

- ``name``: what the cache records as ``aligner``, backend and model
  (``"faster-whisper:medium"``, ``"openai-whisper:medium"``,
  ``"transformers:openai/whisper-medium"``, ``"pocketsphinx:en-us"``);
- ``batch_size``: how many utterances :meth:`align_batch` takes at once;
- ``needs_transcript``: whether a missing transcript is a failure;
- ``align(audio, transcript=None) -> list[Word]`` for one utterance;
- ``align_batch(audios, transcripts) -> list[list[Word] | Exception]``: one result per
  utterance, an exception in place of the words of an utterance that failed (the others
  still count);
- ``stats``: a ``Counter`` of what had to be handled (OOV words, retries, clamped times).

Returned words are cleaned (:func:`segreconcat_aug.align.cache.clean_words`): in order, inside
``[0, duration]``, non-overlapping, non-empty. :func:`make_aligner` builds one by backend name (the
backends: docs/alignment.md); importers of existing alignments are in :mod:`.importers`.

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

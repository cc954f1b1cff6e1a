"""Word aligners: audio (16 kHz mono float32) + optional transcript -> words with times.

Every aligner has the same small API, so ``recipes/align.py`` and other code can swap them:

- ``name``: what the cache records as ``aligner`` (``"whisper:openai/whisper-medium"``,
  ``"pocketsphinx:en-us"``);
- ``batch_size``: how many utterances :meth:`align_batch` takes at once;
- ``needs_transcript``: whether a missing transcript is a failure;
- ``align(audio, transcript=None) -> list[Word]`` for one utterance;
- ``align_batch(audios, transcripts) -> list[list[Word] | Exception]``: one result per
  utterance, an exception in place of the words of an utterance that failed (the others
  still count);
- ``stats``: a ``Counter`` of what had to be handled (OOV words, retries, clamped times).

Returned words are cleaned (:func:`segreconcat_aug.alignment.clean_words`): in order,
inside ``[0, duration]``, non-overlapping, non-empty.

:func:`make_aligner` builds one by backend name; the importers for existing alignments
(Montreal Forced Aligner TextGrid, Kaldi CTM) are in :mod:`.importers`.

Example
-------
>>> aligner = make_aligner("pocketsphinx")
>>> aligner.name, aligner.needs_transcript
('pocketsphinx:en-us', True)
"""

from __future__ import annotations

BACKENDS = ("whisper", "pocketsphinx")


class AlignmentFailed(RuntimeError):
    """An utterance could not be aligned; the message says why."""


def make_aligner(backend: str, **options):
    """``"whisper"`` -> :class:`.whisper.WhisperAligner`, ``"pocketsphinx"`` ->
    :class:`.pocketsphinx.PocketsphinxAligner`; ``options`` go to the constructor."""
    if backend == "whisper":
        from .whisper import WhisperAligner

        return WhisperAligner(**options)
    if backend == "pocketsphinx":
        from .pocketsphinx import PocketsphinxAligner

        return PocketsphinxAligner(**options)
    raise ValueError(f"backend {backend!r}: expected one of {', '.join(BACKENDS)}")


__all__ = ["AlignmentFailed", "BACKENDS", "make_aligner"]

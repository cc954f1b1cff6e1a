"""What every Whisper backend does the same way: refuse unusable audio (an :class:`AlignmentFailed`
that the recipe counts, and goes on), clean the words.

>>> import numpy as np
>>> from collections import Counter
>>> unusable(np.zeros(1000, np.float32))
'audio of 0.062 s is shorter than 0.2 s'
>>> stats = Counter()
>>> words = finish_words([Word("Hi,", 0.1, 0.4), Word("you", 0.6, 0.9)], 1.0, stats)
>>> [w.word for w in words]
['hi', 'you']
>>> finish_words([], 1.0, stats)
AlignmentFailed('no words found (silence, non-speech or unreadable speech)')
>>> stats["no_words"]
1
"""

from __future__ import annotations

import logging
import re
from collections import Counter

import numpy as np

from ...data.audio import SAMPLE_RATE
from ..cache import Word, clean_words
from . import AlignmentFailed

logger = logging.getLogger(__name__)

MIN_SECONDS = 0.2  # shorter than a syllable: Whisper hallucinates rather than aligns
_EDGE_PUNCTUATION = re.compile(r"^[^\w']+|[^\w']+$")


def normalize_word(text: str) -> str:
    """Lower case, surrounding punctuation removed.

    >>> normalize_word(' "Hello,'), normalize_word("don't."), normalize_word(" -")
    ('hello', "don't", '')
    """
    return _EDGE_PUNCTUATION.sub("", text.strip().lower()).strip("'")


def unusable(audio: np.ndarray) -> str | None:
    """Why ``audio`` (16 kHz mono) cannot be aligned, or None."""
    if audio.ndim != 1 or len(audio) == 0:
        return "empty audio"
    if len(audio) < MIN_SECONDS * SAMPLE_RATE:
        return f"audio of {len(audio) / SAMPLE_RATE:.3f} s is shorter than {MIN_SECONDS} s"
    return None


def words_of(segments) -> list[Word]:
    """The words of openai-whisper-style segments (dicts with a ``words`` list of ``word``/``start``/``end``)."""
    return [
        Word(w["word"], float(w["start"]), float(w["end"]))
        for segment in segments
        for w in segment.get("words", [])
    ]


def finish_words(words: list[Word], duration: float, stats: Counter):
    """Normalized, cleaned words (:func:`clean_words`), or :class:`AlignmentFailed` if none."""
    words = [Word(normalize_word(w.word), w.start, w.end) for w in words]
    cleaned = clean_words([w for w in words if w.word], duration, stats)
    if not cleaned:
        stats["no_words"] += 1
        return AlignmentFailed("no words found (silence, non-speech or unreadable speech)")
    return cleaned


class BatchedAligner:
    """The batch loop every batched Whisper backend shares; a backend adds ``_decode``."""

    label = "whisper"
    stats: Counter
    language: str | None = None
    languages: list = []
    _decoded_languages: list | None = None

    def _decode(self, audios: list[np.ndarray]) -> list[list[Word]]:
        raise NotImplementedError

    def align(self, audio, transcript: str | None = None) -> list[Word]:
        """Words of one utterance (``transcript`` is ignored)."""
        result = self.align_batch([audio])[0]
        if isinstance(result, Exception):
            raise result
        return result

    def align_batch(self, audios, transcripts=None) -> list:
        """One word list per utterance, or an exception for an utterance that failed."""
        audios = [np.asarray(audio, dtype=np.float32) for audio in audios]
        results: list = [None] * len(audios)
        languages: list = [None] * len(audios)
        self.languages = languages
        good = []
        for k, audio in enumerate(audios):
            reason = unusable(audio)
            if reason:
                results[k] = AlignmentFailed(reason)
            else:
                good.append(k)
        if not good:
            return results
        self._decoded_languages = None
        try:
            decoded = self._decode([audios[k] for k in good])
        except (RuntimeError, ValueError, IndexError) as err:
            if len(good) == 1:
                results[good[0]] = AlignmentFailed(f"{self.label} failed: {err}")
                return results
            logger.warning("%s batch of %d failed (%s); retrying one by one", self.label, len(good), err)
            self.stats["batch_retried_singly"] += 1
            for k in good:
                results[k] = self.align_batch([audios[k]])[0]
                languages[k] = self.languages[0]
            self.languages = languages
            return results
        found = self._decoded_languages or [self.language] * len(good)
        for k, words, language in zip(good, decoded, found):
            results[k] = finish_words(words, len(audios[k]) / SAMPLE_RATE, self.stats)
            if not isinstance(results[k], Exception):
                languages[k] = language
        return results

"""Whisper word timestamps with openai-whisper: the authors' own tool, the exact reference.

>>> OpenAIWhisperAligner.batch_size, OpenAIWhisperAligner.needs_transcript
(1, False)
"""

from __future__ import annotations

import logging
from collections import Counter

import numpy as np

from ..cache import Word
from ..whisper import DEFAULT_MODELS, load_openai_whisper
from .common import BatchedAligner, words_of

logger = logging.getLogger(__name__)


class OpenAIWhisperAligner(BatchedAligner):
    """``whisper.load_model(model).transcribe(audio, word_timestamps=True)`` per utterance;
    ``language`` None lets openai-whisper detect it (the authors' call)."""

    label = "openai-whisper"
    batch_size = 1
    needs_transcript = False

    def __init__(
        self,
        model: str = DEFAULT_MODELS["openai-whisper"],
        *,
        device: str | None = None,
        language: str | None = "en",
        options: dict | None = None,
    ):
        self.model = load_openai_whisper(model, device=device)
        self.options = {"word_timestamps": True, "fp16": self.model.device.type == "cuda"}
        self.language = language if language is not None or self.model.is_multilingual else "en"
        if language is not None:
            self.options["language"] = language
        self.options.update(options or {})
        self.name = f"openai-whisper:{model}"
        self.stats: Counter = Counter()

    def _decode(self, audios: list[np.ndarray]) -> list[list[Word]]:
        results = [self.model.transcribe(audio, **self.options) for audio in audios]
        # transcribe() reports the language it decoded in (detected on the first 30 s when not given).
        self._decoded_languages = [result.get("language") or self.language for result in results]
        return [words_of(result.get("segments", [])) for result in results]

"""Whisper word timestamps through transformers (``--backend=transformers``).

>>> import numpy as np
>>> from segreconcat_aug.testing import tiny_whisper
>>> aligner = WhisperAligner(bundle=tiny_whisper(), batch_size=2, max_new_tokens=8)
>>> aligner.name
'transformers:tiny-random-whisper'
>>> results = aligner.align_batch([np.zeros(16000, np.float32), np.zeros(1600, np.float32)])
>>> all(w.end <= 1.0 for w in results[0])
True
>>> results[1]
AlignmentFailed('audio of 0.100 s is shorter than 0.2 s')
"""

from __future__ import annotations

import logging
from collections import Counter

import numpy as np
import torch

from ...data.audio import SAMPLE_RATE
from ..cache import Word
from ..whisper import DEFAULT_MODEL, WINDOW_SAMPLES, WhisperBundle, load_whisper
from .common import BatchedAligner, normalize_word

logger = logging.getLogger(__name__)


def tokens_to_words(tokenizer, token_ids, times, text_limit: int) -> list[Word]:
    """Group text tokens into words with times."""
    words: list[Word] = []
    group: list[int] = []
    start = end = 0.0

    def flush():
        if group:
            text = normalize_word(tokenizer.decode(group))
            if text:
                words.append(Word(text, start, end))
            group.clear()

    for i, (token, time) in enumerate(zip(token_ids, times)):
        token = int(token)
        if token >= text_limit:
            flush()
            continue
        begin = float(times[i - 1]) if i > 0 else 0.0
        if group and tokenizer.convert_ids_to_tokens(token).startswith("Ġ"):
            flush()
        if not group:
            start = begin
        group.append(token)
        end = float(time)
    flush()
    return words


class WhisperAligner(BatchedAligner):
    """Word timestamps from Whisper, batched."""

    label = "whisper"

    needs_transcript = False

    def __init__(
        self,
        bundle: WhisperBundle | None = None,
        *,
        model: str = DEFAULT_MODEL,
        device: str | None = None,
        dtype="auto",
        batch_size: int = 16,
        language: str | None = "en",
        max_new_tokens: int | None = None,
        num_beams: int = 1,
    ):
        self.bundle = bundle if bundle is not None else load_whisper(model, device=device, dtype=dtype)
        self.batch_size = int(batch_size)
        self.language = language if self.bundle.multilingual else "en"
        self.max_new_tokens = max_new_tokens
        self.num_beams = num_beams
        self.name = f"transformers:{self.bundle.name}"
        self.stats: Counter = Counter()
        self._text_limit = int(self.bundle.tokenizer.eos_token_id)

    def detect_languages(self, features: torch.Tensor) -> list[str]:
        """Each utterance's language code, detected on its first 30 s window (``<|de|>`` -> ``de``)."""
        config = self.bundle.model.generation_config
        codes = {token_id: token.strip("<|>") for token, token_id in config.lang_to_id.items()}
        detected = self.bundle.model.detect_language(input_features=features, generation_config=config)
        return [codes[int(token_id)] for token_id in detected.reshape(-1).tolist()]

    @torch.inference_mode()
    def _decode(self, audios: list[np.ndarray]) -> list[list[Word]]:
        bundle = self.bundle
        long_form = any(len(audio) > WINDOW_SAMPLES for audio in audios)
        # Short batches use the standard 30 s padding; a batch with a long utterance is
        # padded to its longest member instead (long-form decoding walks the windows).
        padding = {"truncation": False, "padding": "longest"} if long_form else {}
        inputs = bundle.feature_extractor(
            audios, sampling_rate=SAMPLE_RATE, return_attention_mask=True, return_tensors="pt", **padding
        )
        if long_form:
            self.stats["long_form_batches"] += 1
        options = {
            "attention_mask": inputs.attention_mask.to(bundle.device),
            "return_token_timestamps": True,
            "return_timestamps": True,
            "return_segments": True,
            "num_beams": self.num_beams,
        }
        features = inputs.input_features.to(bundle.device, bundle.dtype)
        if bundle.multilingual:
            languages = [self.language] * len(audios) if self.language else self.detect_languages(features)
            self._decoded_languages = languages
            options.update(language=languages, task="transcribe")
        if self.max_new_tokens is not None:
            options["max_new_tokens"] = self.max_new_tokens
        output = bundle.model.generate(features, **options)
        words = []
        for k in range(len(audios)):
            segments = output["segments"][k] if "segments" in output else None
            if segments:
                tokens = torch.cat([segment["tokens"] for segment in segments]).tolist()
                times = torch.cat([segment["token_timestamps"] for segment in segments]).tolist()
            elif segments is None:
                tokens = output["sequences"][k].tolist()
                times = output["token_timestamps"][k].tolist()
            else:
                tokens, times = [], []
            words.append(tokens_to_words(bundle.tokenizer, tokens, times, self._text_limit))
        return words

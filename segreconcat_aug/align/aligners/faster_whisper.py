"""Whisper word timestamps with faster-whisper (CTranslate2): the default backend."""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import replace
from math import ceil

import numpy as np

from ...data.audio import SAMPLE_RATE
from ...errors import UserError
from ..cache import Word
from ..whisper import DEFAULT_MODELS, WINDOW_SAMPLES, load_faster_whisper, split_windows
from .common import BatchedAligner, words_of

logger = logging.getLogger(__name__)


class FasterWhisperAligner(BatchedAligner):
    """Word timestamps from a CTranslate2 Whisper, batched across utterances."""

    label = "faster-whisper"

    needs_transcript = False

    def __init__(
        self,
        model: str = DEFAULT_MODELS["faster-whisper"],
        *,
        device: str | None = None,
        compute_type: str = "auto",
        batch_size: int = 16,
        language: str | None = "en",
        max_new_tokens: int | None = None,
        num_beams: int = 1,
        options: dict | None = None,
    ):
        from faster_whisper import BatchedInferencePipeline
        from faster_whisper.tokenizer import Tokenizer
        from faster_whisper.transcribe import TranscriptionOptions, get_suppressed_tokens

        self.model = load_faster_whisper(model, device=device, compute_type=compute_type)
        self.pipeline = BatchedInferencePipeline(self.model)
        multilingual = bool(self.model.model.is_multilingual)
        if not multilingual and language not in (None, "en"):
            raise AlignerLanguageError(
                f"{model} is an English-only Whisper: it cannot transcribe language {language!r}; use a "
                "multilingual model (--whisper_model=medium, the paper's) or leave --language unset"
            )
        self.language = language or (None if multilingual else "en")
        self._tokenizer_class = Tokenizer
        self.tokenizer = Tokenizer(
            self.model.hf_tokenizer, multilingual, task="transcribe", language=language or "en"
        )
        self._tokenizers = {self.tokenizer.language_code: self.tokenizer}
        overrides = dict(options or {})
        suppress = list(overrides.pop("suppress_tokens", [-1]))
        # The fields of faster-whisper's batched pipeline, set as openai-whisper's transcribe sets them.
        self.options = TranscriptionOptions(
            beam_size=int(num_beams),
            best_of=5,
            patience=1.0,
            length_penalty=1.0,
            repetition_penalty=1.0,
            no_repeat_ngram_size=0,
            log_prob_threshold=-1.0,
            no_speech_threshold=0.6,
            compression_ratio_threshold=2.4,
            condition_on_previous_text=False,
            prompt_reset_on_temperature=0.5,
            temperatures=[0.0],
            initial_prompt=None,
            prefix=None,
            suppress_blank=True,
            suppress_tokens=get_suppressed_tokens(self.tokenizer, suppress),
            without_timestamps=False,
            max_initial_timestamp=1.0,
            word_timestamps=True,
            prepend_punctuations="\"'“¿([{-",
            append_punctuations="\"'.。,，!！?？:：”)]}、",
            multilingual=multilingual and language is None,
            max_new_tokens=max_new_tokens,
            clip_timestamps="0",
            hallucination_silence_threshold=None,
            hotwords=None,
        )
        if overrides:
            self.options = replace(self.options, **overrides)
        self.batch_size = int(batch_size)
        self.name = f"faster-whisper:{model}"
        self.stats: Counter = Counter()

    def _tokenizer_for(self, language: str | None):
        """The tokenizer whose prompt names ``language`` (the word timing's prompt; one per language)."""
        if language is None or not self.options.multilingual:
            return self.tokenizer
        if language not in self._tokenizers:
            self._tokenizers[language] = self._tokenizer_class(
                self.model.hf_tokenizer, True, task="transcribe", language=language
            )
        return self._tokenizers[language]

    def _no_speech(self, output: dict) -> bool:
        """openai-whisper's rule for a silent window: a likely no-speech token and a low log
        probability (the batched pipeline leaves it out; without it silence gets made-up words)."""
        threshold, logprob = self.options.no_speech_threshold, self.options.log_prob_threshold
        if threshold is None or output["no_speech_prob"] <= threshold:
            return False
        return logprob is None or output["avg_logprob"] <= logprob

    def _decode(self, audios: list[np.ndarray]) -> list[list[Word]]:
        from faster_whisper.audio import pad_or_trim

        model, tokenizer = self.model, self.tokenizer
        pieces, owners, starts = split_windows(audios)
        offsets = [start / SAMPLE_RATE for start in starts]
        # An utterance's second window starts at WINDOW_SAMPLES: one per utterance over 30 s (no key
        # when there is none: the stats list only what happened).
        long_form = starts.count(WINDOW_SAMPLES)
        if long_form:
            self.stats["long_form_utterances"] += long_form
        # As the batched pipeline prepares a chunk: features without the last frame, padded to 30 s.
        features = np.stack([pad_or_trim(model.feature_extractor(piece)[..., :-1]) for piece in pieces])
        encoder_output, outputs = self.pipeline.generate_segment_batched(features, tokenizer, self.options)
        if self.options.multilingual:
            # The detection generate_segment_batched made for each window's prompt (the same encoder
            # output, so the same result), kept: each utterance is reported, and timed, in its language.
            detected = [langs[0][0][2:-2] for langs in model.model.detect_language(encoder_output)]
            self._decoded_languages = utterance_languages(detected, owners, len(audios))
        else:
            self._decoded_languages = [self.language] * len(audios)
        segments, sizes = [], []
        for offset, piece, output in zip(offsets, pieces, outputs):
            if self._no_speech(output):
                output = dict(output, tokens=[])
                self.stats["no_speech_windows"] += 1
            duration = len(piece) / SAMPLE_RATE
            size = int(ceil(duration) * model.frames_per_second)
            parts, _, _ = model._split_segments_by_timestamps(
                tokenizer=tokenizer,
                tokens=output["tokens"],
                time_offset=offset,
                segment_size=size,
                segment_duration=duration,
                seek=0,
            )
            seek = int(offset * model.frames_per_second)
            segments.append([dict(part, seek=seek) for part in parts])
            sizes.append(size)
        words: list[list[Word]] = [[] for _ in audios]
        for k in range(len(audios)):
            # Chunks with text only: the aligner gets nothing to align from an empty one.
            rows = [
                i
                for i, owner in enumerate(owners)
                if owner == k and any(t < tokenizer.eot for part in segments[i] for t in part["tokens"])
            ]
            if not rows:
                continue
            mine = [segments[i] for i in rows]
            # Timing per utterance: faster-whisper carries "the last speech time" from one chunk
            # to the next, which must start at 0 for each utterance.
            encoded, keep = (
                (encoder_output, None) if len(rows) == len(pieces) else _rows(encoder_output, rows)
            )
            model.add_word_timestamps(
                mine,
                self._tokenizer_for(self._decoded_languages[k]),
                encoded,
                [sizes[i] for i in rows],
                self.options.prepend_punctuations,
                self.options.append_punctuations,
                0.0,
            )
            del keep
            for chunk in mine:
                words[k].extend(words_of(chunk))
        return words


class AlignerLanguageError(UserError, ValueError):
    """A language the model cannot transcribe (an English-only Whisper told another language)."""


def utterance_languages(window_languages: list[str], owners: list[int], count: int) -> list[str | None]:
    """Each utterance's language: its first 30 s window's (``owners``: the utterance of each window).

    >>> utterance_languages(["de", "en", "fr"], [0, 0, 1], 2)
    ['de', 'fr']
    """
    languages: list[str | None] = [None] * count
    for language, owner in zip(window_languages, owners):
        if languages[owner] is None:
            languages[owner] = language
    return languages


def _rows(storage, rows: list[int]):
    """``(view, memory)``: rows of a CTranslate2 ``StorageView`` (CPU or CUDA) as a new view,
    and the array it borrows (keep it alive while the view is used)."""
    import ctranslate2

    if storage.device == "cuda":
        import torch

        memory = torch.as_tensor(storage, device=f"cuda:{storage.device_index}")[rows].contiguous()
    else:
        memory = np.ascontiguousarray(np.asarray(storage)[rows])
    return ctranslate2.StorageView.from_array(memory), memory

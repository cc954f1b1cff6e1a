"""Offline forced alignment with pocketsphinx (its wheel ships a US-English model).

>>> normalize_transcript("IT'S A \\"Test\\", isn't it?")
["it's", 'a', 'test', "isn't", 'it']
>>> letter_to_sound("northanger")
'N AO R TH AE NG ER'
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

FRAME_RATE = 100  # pocketsphinx frames per second
_WIDE = {"beam": 1e-100, "wbeam": 1e-100, "pbeam": 1e-100}
_VARIANT = re.compile(r"\(\d+\)$")

# A rough letter-to-sound table (CMU phones): OOV words only need a plausible length and
# rough acoustics to keep their place between known words, not a dictionary entry.
_DIGRAPHS = {
    "tch": "CH",
    "sch": "S K",
    "th": "TH",
    "sh": "SH",
    "ch": "CH",
    "ph": "F",
    "ng": "NG",
    "ck": "K",
    "qu": "K W",
    "wh": "W",
    "gh": "G",
    "ee": "IY",
    "ea": "IY",
    "oo": "UW",
    "ou": "AW",
    "ow": "OW",
    "ai": "EY",
    "ay": "EY",
    "oi": "OY",
    "oy": "OY",
    "au": "AO",
    "aw": "AO",
    "er": "ER",
    "ar": "AA R",
    "or": "AO R",
}
_LETTERS = {
    "a": "AE",
    "b": "B",
    "c": "K",
    "d": "D",
    "e": "EH",
    "f": "F",
    "g": "G",
    "h": "HH",
    "i": "IH",
    "j": "JH",
    "k": "K",
    "l": "L",
    "m": "M",
    "n": "N",
    "o": "AA",
    "p": "P",
    "q": "K",
    "r": "R",
    "s": "S",
    "t": "T",
    "u": "AH",
    "v": "V",
    "w": "W",
    "x": "K S",
    "y": "IY",
    "z": "Z",
}


def normalize_transcript(text: str) -> list[str]:
    """Lower-case words, punctuation removed (inner apostrophes kept)."""
    words = re.sub(r"[^a-z0-9']+", " ", text.lower()).split()
    return [word.strip("'") for word in words if word.strip("'")]


def letter_to_sound(word: str) -> str | None:
    """A rough CMU-phone guess for an out-of-vocabulary word; None when it has no letters."""
    phones, k, word = [], 0, word.lower()
    while k < len(word):
        for size in (3, 2):
            piece = word[k : k + size]
            if len(piece) == size and piece in _DIGRAPHS:
                phones.append(_DIGRAPHS[piece])
                k += size
                break
        else:
            if word[k] in _LETTERS:
                phones.append(_LETTERS[word[k]])
            k += 1
    return " ".join(phones) or None


def _to_int16(audio: np.ndarray) -> bytes:
    audio = np.clip(np.asarray(audio, dtype=np.float32), -1.0, 1.0)
    return (audio * 32767.0).astype("<i2").tobytes()


class PocketsphinxAligner:
    """Forced alignment (or recognition) with pocketsphinx's bundled English model.

    >>> import soundfile, segreconcat_aug
    >>> from pathlib import Path
    >>> fixtures = Path(segreconcat_aug.__file__).parents[1] / "tests" / "fixtures" / "librispeech"
    >>> audio, _ = soundfile.read(fixtures / "26-495-0007.flac", dtype="float32")
    >>> words = PocketsphinxAligner().align(audio, "OR RATHER AT THE UPPER END OF DRURY LANE")
    >>> [w.word for w in words]
    ['or', 'rather', 'at', 'the', 'upper', 'end', 'of', 'drury', 'lane']
    """

    batch_size = 1

    def __init__(
        self,
        *,
        oov: str = "add",
        recognize_without_transcript: bool = False,
        wide_beam_retry: bool = True,
        model: str = "en-us",
        decoder_options: dict | None = None,
    ):
        if oov not in ("add", "skip"):
            raise ValueError(f"oov={oov!r}: expected 'add' or 'skip'")
        self.oov = oov
        self.recognize_without_transcript = recognize_without_transcript
        self.wide_beam_retry = wide_beam_retry
        self.name = f"pocketsphinx:{model}"
        self.language = "en"  # its acoustic model and dictionary are US English
        self.decoder_options = dict(decoder_options or {})
        self.stats: Counter = Counter()
        self._decoders: dict[str, object] = {}
        self._added: dict[str, str] = {}

    @property
    def needs_transcript(self) -> bool:
        return not self.recognize_without_transcript

    def _decoder(self, kind: str):
        """``align``, ``wide`` (alignment with wide beams) or ``recognize``, built once each."""
        if kind not in self._decoders:
            from pocketsphinx import Decoder

            # bestpath=True can lose the last word
            options = {"samprate": SAMPLE_RATE, "bestpath": False, "loglevel": "FATAL"}
            options.update(self.decoder_options)
            if kind == "wide":
                options.update(_WIDE)
            decoder = Decoder(**options)
            for word, phones in self._added.items():
                decoder.add_word(word, phones, True)
            self._decoders[kind] = decoder
        return self._decoders[kind]

    def _prepare_words(self, words: list[str]) -> list[str]:
        """Handle OOV words (add a guessed pronunciation or drop), counting each."""
        decoder = self._decoder("align")
        kept = []
        for word in words:
            if word in self._added or decoder.lookup_word(word) is not None:
                kept.append(word)
                continue
            phones = letter_to_sound(word) if self.oov == "add" else None
            if phones is None:
                self.stats["oov_skipped"] += 1
                logger.debug("pocketsphinx: skipping out-of-vocabulary word %r", word)
                continue
            self._added[word] = phones
            for existing in self._decoders.values():
                existing.add_word(word, phones, True)
            self.stats["oov_added"] += 1
            kept.append(word)
        return kept

    @staticmethod
    def _run(decoder, raw: bytes) -> list[Word]:
        decoder.start_utt()
        decoder.process_raw(raw, full_utt=True)
        decoder.end_utt()
        if decoder.hyp() is None:
            return []
        words = []
        for segment in decoder.seg():
            word = _VARIANT.sub("", segment.word)
            # Fillers: silence, sentence marks, noise ([NOISE], ++BREATH++).
            if word.startswith(("<", "[", "+")):
                continue
            words.append(Word(word, segment.start_frame / FRAME_RATE, (segment.end_frame + 1) / FRAME_RATE))
        return words

    def _force(self, kind: str, raw: bytes, words: list[str]) -> list[Word] | None:
        decoder = self._decoder(kind)
        try:
            decoder.set_align_text(" ".join(words))
            aligned = self._run(decoder, raw)
        except RuntimeError as err:
            logger.debug("pocketsphinx %s alignment failed: %s", kind, err)
            return None
        return aligned if [w.word for w in aligned] == words else None

    def align(self, audio, transcript: str | None = None) -> list[Word]:
        """Words of one utterance (16 kHz mono float32), forced to ``transcript`` when given;
        :class:`AlignmentFailed` for empty audio, no transcript (unless recognition is enabled), no
        alignable word, or an alignment that fails even with wide beams."""
        audio = np.asarray(audio, dtype=np.float32)
        if audio.ndim != 1 or len(audio) == 0:
            raise AlignmentFailed("empty audio")
        duration = len(audio) / SAMPLE_RATE
        raw = _to_int16(audio)
        words = normalize_transcript(transcript or "")
        if not words:
            if not self.recognize_without_transcript:
                raise AlignmentFailed("no transcript (enable recognition to align without one)")
            self.stats["recognized"] += 1
            return clean_words(self._run(self._decoder("recognize"), raw), duration, self.stats)
        words = self._prepare_words(words)
        if not words:
            raise AlignmentFailed("no transcript word is alignable (all out of vocabulary)")
        aligned = self._force("align", raw, words)
        if aligned is None and self.wide_beam_retry:
            self.stats["retried_wide_beam"] += 1
            aligned = self._force("wide", raw, words)
        if aligned is None:
            raise AlignmentFailed(f"pocketsphinx could not align the {len(words)}-word transcript")
        self.stats["aligned"] += 1
        return clean_words(aligned, duration, self.stats)

    def align_batch(self, audios, transcripts=None) -> list:
        """:meth:`align` for each utterance; an exception in place of a failed one."""
        transcripts = transcripts if transcripts is not None else [None] * len(audios)
        results = []
        for audio, transcript in zip(audios, transcripts):
            try:
                results.append(self.align(audio, transcript))
            except AlignmentFailed as err:
                results.append(err)
        return results

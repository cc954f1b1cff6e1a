"""How good an aligner's words are: word error rate against a transcript, timing against a reference
(for the real-weights tests and ``benchmarks/bench_real_whisper.py``). Numbers are not spelled out,
so Whisper's "1803" against LibriSpeech's "EIGHTEEN O THREE" counts as errors.

>>> from segreconcat_aug.align.cache import Word
>>> word_error_rate(["the cat sat"], [["the", "cat", "sat", "down"]])
0.3333333333333333
>>> ours = {"u": [Word("a", 0.0, 0.5), Word("b", 0.6, 1.0)]}
>>> theirs = {"u": [Word("a", 0.0, 0.5), Word("b", 0.62, 1.0)]}
>>> timing_agreement(ours, theirs)["max_difference"]
0.02
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from segreconcat_aug.align.aligners.common import normalize_word


def _tokens(text_or_words) -> list[str]:
    words = text_or_words.split() if isinstance(text_or_words, str) else list(text_or_words)
    return [token for token in (normalize_word(w) for w in words) if token]


def edit_distance(reference: Sequence[str], hypothesis: Sequence[str]) -> int:
    """Levenshtein distance between two word sequences (one row of the table at a time).

    >>> edit_distance(["a", "b", "c"], ["a", "x", "c", "d"])
    2
    """
    previous = list(range(len(hypothesis) + 1))
    for i, ref in enumerate(reference, 1):
        current = [i]
        for j, hyp in enumerate(hypothesis, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ref != hyp)))
        previous = current
    return previous[-1]


def word_error_rate(references, hypotheses) -> float:
    """Corpus WER: edit distances summed over utterances / reference words summed (one transcript
    string or word list per utterance)."""
    errors = words = 0
    for reference, hypothesis in zip(references, hypotheses, strict=True):
        ref, hyp = _tokens(reference), _tokens(hypothesis)
        errors += edit_distance(ref, hyp)
        words += len(ref)
    if words == 0:
        raise ValueError("the references have no words")
    return errors / words


def timing_agreement(ours: Mapping, reference: Mapping, tolerance: float = 0.01) -> dict:
    """Compare the word times of two aligners on the utterances both aligned (utterance id -> words)."""
    import numpy as np

    common = sorted(set(ours) & set(reference))
    same, starts, ends = [], [], []
    for utt in common:
        a, b = ours[utt], reference[utt]
        if _tokens(w.word for w in a) != _tokens(w.word for w in b):
            continue
        same.append(utt)
        kept_a = [w for w in a if normalize_word(w.word)]
        kept_b = [w for w in b if normalize_word(w.word)]
        starts += [x.start - y.start for x, y in zip(kept_a, kept_b)]
        ends += [x.end - y.end for x, y in zip(kept_a, kept_b)]
    starts, ends = np.asarray(starts, dtype=np.float64), np.asarray(ends, dtype=np.float64)
    worst = np.maximum(np.abs(starts), np.abs(ends))
    return {
        "utterances": len(common),
        "same_words": len(same),
        "words": len(starts),
        "within_tolerance": float(np.mean(worst <= tolerance + 1e-9)) if len(worst) else float("nan"),
        "max_difference": round(float(worst.max()), 6) if len(worst) else float("nan"),
        "median_start_shift": float(np.median(starts)) if len(starts) else float("nan"),
    }


def transcribe_words(model, audio, *, language: str | None = None) -> list:
    """faster-whisper's own sequential ``transcribe(word_timestamps=True)``: the reference for
    the batched aligner (:class:`segreconcat_aug.align.aligners.faster_whisper.FasterWhisperAligner`).
    """
    from segreconcat_aug.align.cache import Word

    segments, _ = model.transcribe(
        audio,
        language=language,
        beam_size=1,
        temperature=0.0,
        condition_on_previous_text=False,
        word_timestamps=True,
        vad_filter=False,
    )
    return [Word(w.word, float(w.start), float(w.end)) for segment in segments for w in segment.words or []]

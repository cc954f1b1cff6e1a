"""Score files, ``scores/<subset>.txt``: ``<enroll-spk> <test-utt> target|nontarget <score> [<test-spk>]``
per scored trial (the test speaker when known, for the speaker bootstrap)."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import numpy as np

from ..data.result_files import atomic_writer
from ..errors import UserError


class ScoreFileError(UserError, ValueError):
    """A score file that cannot be read back: a malformed line, or a score that is not a finite number."""


def write_scores(path, subset) -> Path:
    """Write a score file (float32 round-trip precision); the fifth column when
    ``subset.test_speakers`` knows every test speaker."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    speakers = getattr(subset, "test_speakers", None)
    if speakers is None or any(speaker is None for speaker in speakers):
        speakers = [None] * len(subset.targets)
    with atomic_writer(path) as handle:  # a reader never meets half a score file
        for enroll, test, target, score, speaker in zip(
            subset.enroll, subset.test, subset.targets, subset.scores, speakers
        ):
            tail = f" {speaker}" if speaker is not None else ""
            handle.write(f"{enroll} {test} {'target' if target else 'nontarget'} {float(score):.9g}{tail}\n")
    return path


class ScoreFile(NamedTuple):
    """A score file's columns; ``test_speakers`` is None for files without the fifth column."""

    enroll: list
    test: list
    targets: np.ndarray
    scores: np.ndarray
    test_speakers: list | None


def read_score_file(path) -> ScoreFile:
    """Read a score file with or without the test-speaker column; :class:`ScoreFileError` names file
    and line on a malformed line, mixed 4 and 5 columns, or a score that is not a finite number."""
    enroll, test, targets, scores, speakers = [], [], [], [], []
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            fields = line.split()
            if not fields:
                continue
            if len(fields) not in (4, 5) or fields[2] not in ("target", "nontarget"):
                raise ScoreFileError(
                    f"{path}:{number}: expected '<enroll> <test> target|nontarget <score> [<test-spk>]'"
                )
            if speakers and (len(fields) == 5) != (speakers[0] is not None):
                raise ScoreFileError(
                    f"{path}:{number}: {len(fields)} columns where line 1 has a different number"
                )
            try:
                score = float(fields[3])
            except ValueError:
                raise ScoreFileError(f"{path}:{number}: score {fields[3]!r} is not a number") from None
            if not np.isfinite(score):
                raise ScoreFileError(f"{path}:{number}: score {fields[3]!r} is not a finite number")
            enroll.append(fields[0])
            test.append(fields[1])
            targets.append(fields[2] == "target")
            scores.append(score)
            speakers.append(fields[4] if len(fields) == 5 else None)
    has_speakers = bool(speakers) and speakers[0] is not None
    return ScoreFile(
        enroll,
        test,
        np.array(targets, dtype=bool),
        np.array(scores, dtype=np.float32),
        speakers if has_speakers else None,
    )

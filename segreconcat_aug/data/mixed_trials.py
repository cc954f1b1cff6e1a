"""VPC 2026's pooled (mixed-gender) LibriSpeech trial list, built from VPAC 2024's female and male lists.

The rule is that of the VPC 2026 toolkit's ``scripts/mixed_trials_librispeech.py`` as fixed on
2026-09-01 (commit cc3c8a0; the June version swapped f and m, repeated pairs and drew unseeded):

1. every line of the female and the male list is kept;
2. cross-gender non-target trials are added: for each female trial utterance (the list's unique
   test utterances, sorted), ``k_f`` male enrolled speakers drawn without replacement by
   ``random.Random(seed).sample(sorted male speakers, min(k_f, count))``, where ``k_f`` is the
   mean number of non-target trials per female utterance, rounded (Python's ``round``); then the
   same for the male utterances with female speakers, from the same generator, continuing;
3. the trial lines are written in this order: male-enroll x female-trial, female-enroll x
   male-trial, the male list, the female list;
4. the member files (``spk2gender spk2utt wav.scp text utt2dur utt2spk``) are the female and male
   folders' lines, merged and sorted (stably) by their first column; a file neither folder has is
   written empty, as the toolkit's script does.

The enrolled speakers are the ``enrolls`` list's utterances' speakers (from the enrollment folder's
``utt2spk``; the toolkit's script cuts LibriSpeech ids at the first ``-``, the same speakers for
LibriSpeech), their genders from its ``spk2gender`` (either case). Blank lines are skipped (the
script fails on them) and a last line without its newline gets one.

Example
-------
>>> mean_nontargets({"u1": 2, "u2": 3})  # round(2.5) = 2: Python rounds halves to even
2
"""

from __future__ import annotations

import os
import random
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import UserError
from .kaldi import read_id_list, read_kaldi_map, read_trials

MIXED_SEED = 67  # the toolkit script's default --seed
MEMBER_FILES = ("spk2gender", "spk2utt", "wav.scp", "text", "utt2dur", "utt2spk")


class MixedTrialsError(UserError, ValueError):
    """A list or folder the mixed list is built from cannot be used; the message names it."""


@dataclass
class MixedTrials:
    """A pooled list: its trial lines (without newlines), member files' lines, and how it was drawn."""

    trials: list[str]
    members: dict[str, list[str]]
    k: dict[str, int]  # gender of the trial utterances -> cross-gender non-targets drawn per utterance
    cross: int  # cross-gender lines added
    counts: dict[str, int] = field(default_factory=dict)  # female / male list lines


def mean_nontargets(counts: dict[str, int]) -> int:
    """``round(mean)`` of the non-target counts per trial utterance (the script's ``k``)."""
    if not counts:
        raise MixedTrialsError("a trial list without trials has no mean number of non-targets")
    return round(sum(counts.values()) / len(counts))


def _enrolled_by_gender(enroll_folder: Path) -> dict[str, list[str]]:
    enrolls = read_id_list(enroll_folder / "enrolls")
    utt2spk = read_kaldi_map(enroll_folder / "utt2spk")
    genders = read_kaldi_map(enroll_folder / "spk2gender")
    speakers: dict[str, set[str]] = {"f": set(), "m": set()}
    for utt in enrolls:
        if utt not in utt2spk:
            raise MixedTrialsError(f"{enroll_folder / 'enrolls'}: {utt!r} has no speaker in utt2spk")
        speaker = utt2spk[utt]
        gender = genders.get(speaker, "").lower()
        if gender not in speakers:
            raise MixedTrialsError(
                f"{enroll_folder / 'spk2gender'}: speaker {speaker!r} needs gender f or m, got {gender or 'none'!r}"
            )
        speakers[gender].add(speaker)
    return {gender: sorted(found) for gender, found in speakers.items()}


def _member_lines(name: str, folders) -> list[str]:
    lines = []
    for folder in folders:
        path = Path(folder) / name
        if path.is_file():
            with open(path, encoding="utf-8") as handle:
                lines += [line if line.endswith("\n") else line + "\n" for line in handle if line.strip()]
    lines.sort(key=lambda line: line.split()[0])
    return lines


def mixed_trials(enroll_folder, female_folder, male_folder, seed: int = MIXED_SEED) -> MixedTrials:
    """Build the pooled list of one part (dev or test) by the 2026 rule (module docstring)."""
    enroll_folder, female_folder, male_folder = Path(enroll_folder), Path(female_folder), Path(male_folder)
    enrolled = _enrolled_by_gender(enroll_folder)
    lists = {"f": read_trials(female_folder / "trials"), "m": read_trials(male_folder / "trials")}
    rng = random.Random(seed)
    cross_lines, k = [], {}
    for gender, other in (("f", "m"), ("m", "f")):
        counts: dict[str, int] = {}
        for trial in lists[gender]:
            counts.setdefault(trial.test_utterance, 0)
            if not trial.target:
                counts[trial.test_utterance] += 1
        k[gender] = mean_nontargets(counts)
        pool = enrolled[other]
        for utterance in sorted(counts):
            for speaker in rng.sample(pool, min(k[gender], len(pool))):
                cross_lines.append(f"{speaker} {utterance} nontarget")

    def lines(trials):
        return [
            f"{t.enroll_speaker} {t.test_utterance} {'target' if t.target else 'nontarget'}" for t in trials
        ]

    return MixedTrials(
        trials=cross_lines + lines(lists["m"]) + lines(lists["f"]),
        members={name: _member_lines(name, (female_folder, male_folder)) for name in MEMBER_FILES},
        k=k,
        cross=len(cross_lines),
        counts={gender: len(found) for gender, found in lists.items()},
    )


def write_mixed_trials(result: MixedTrials, folder, overwrite: bool = False) -> Path:
    """Write ``trials`` and the member files into ``folder`` (complete or not at all).

    Raises
    ------
    MixedTrialsError
        When ``folder`` exists and ``overwrite`` is not set (nothing is replaced).
    """
    folder = Path(folder)
    if folder.exists() and not overwrite:
        raise MixedTrialsError(f"{folder} exists: not replaced (overwrite: True replaces it)")
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(staging, 0o777 & ~umask)  # a folder as mkdir makes it (mkdtemp's is private)
    try:
        for name, lines in result.members.items():
            (staging / name).write_text("".join(lines), encoding="utf-8")
        (staging / "trials").write_text("".join(f"{line}\n" for line in result.trials), encoding="utf-8")
        if folder.exists():
            shutil.rmtree(folder)
        os.replace(staging, folder)
    finally:
        if staging.exists():
            shutil.rmtree(staging)
    return folder

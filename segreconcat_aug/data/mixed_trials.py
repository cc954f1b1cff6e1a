"""VPC 2026's pooled (mixed-gender) LibriSpeech trial list, built from VPAC 2024's female and male lists.

>>> mean_nontargets({"u1": 2, "u2": 3})  # round(2.5) = 2: Python rounds halves to even
2
"""

from __future__ import annotations

import logging
import os
import random
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import UserError
from .kaldi import read_id_list, read_kaldi_map, read_trials

logger = logging.getLogger(__name__)

MIXED_SEED = 67  # the toolkit script's default --seed
MEMBER_FILES = ("spk2gender", "spk2utt", "wav.scp", "text", "utt2dur", "utt2spk")
#: Every file a pooled folder gets here (nothing else is ever in a folder this module wrote).
WRITTEN_FILES = ("trials", *MEMBER_FILES)
_STAGING = ".partial-"  # staging folders: .<folder name>.partial-<random>


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


def _relocated(line: str, source: Path, target: Path | None, root: Path | None) -> str:
    """A ``wav.scp`` line whose relative path resolves only from ``source``, rewritten to resolve from ``target``."""
    utt, _, value = line.rstrip("\n").partition(" ")
    value = value.strip()
    path = Path(value)
    if target is None or not value or value.endswith("|") or path.is_absolute():
        return line
    if root is not None and (root / path).exists():
        return line
    if not (source / path).exists():
        return line  # resolves nowhere: kept, so the reader names the path the list gives
    return f"{utt} {Path(os.path.relpath(source / path, target)).as_posix()}\n"


def _member_lines(name: str, folders, target: Path | None = None, root: Path | None = None) -> list[str]:
    lines = []
    for folder in folders:
        path = Path(folder) / name
        if path.is_file():
            with open(path, encoding="utf-8") as handle:
                found = [line if line.endswith("\n") else line + "\n" for line in handle if line.strip()]
            if name == "wav.scp":
                found = [_relocated(line, Path(folder), target, root) for line in found]
            lines += found
    lines.sort(key=lambda line: line.split()[0])
    return lines


def _check_list_genders(
    lists: dict, enrolled: dict[str, list[str]], enroll_folder: Path, paths: dict
) -> None:
    """Every speaker the female list enrolls is ``f`` in the enrollment's ``spk2gender``, the male list's ``m``."""
    gender_of = {speaker: gender for gender, speakers in enrolled.items() for speaker in speakers}
    for gender, trials in lists.items():
        for trial in trials:
            found = gender_of.get(trial.enroll_speaker)
            if found is not None and found != gender:
                raise MixedTrialsError(
                    f"{enroll_folder / 'spk2gender'}: speaker {trial.enroll_speaker!r} is {found!r} there, but "
                    f"the {'female' if gender == 'f' else 'male'} list enrolls it ({paths[gender]}:{trial.line}); "
                    "correct spk2gender or the list (the cross-gender draw needs each speaker's gender)"
                )


def mixed_trials(
    enroll_folder, female_folder, male_folder, seed: int = MIXED_SEED, *, target=None, root=None
) -> MixedTrials:
    """Build the pooled list of one part (dev or test) by the 2026 rule (module docstring)."""
    enroll_folder, female_folder, male_folder = Path(enroll_folder), Path(female_folder), Path(male_folder)
    target = None if target is None else Path(target)
    root = None if root is None else Path(root)
    enrolled = _enrolled_by_gender(enroll_folder)
    paths = {"f": female_folder / "trials", "m": male_folder / "trials"}
    lists = {gender: read_trials(path) for gender, path in paths.items()}
    _check_list_genders(lists, enrolled, enroll_folder, paths)
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
        members={
            name: _member_lines(name, (female_folder, male_folder), target, root) for name in MEMBER_FILES
        },
        k=k,
        cross=len(cross_lines),
        counts={gender: len(found) for gender, found in lists.items()},
    )


def _contents(result: MixedTrials) -> dict[str, str]:
    contents = {name: "".join(lines) for name, lines in result.members.items()}
    contents["trials"] = "".join(f"{line}\n" for line in result.trials)
    return contents


def _holds(folder: Path, contents: dict[str, str]) -> bool:
    """Whether ``folder`` holds exactly these files' bytes (other entries aside)."""
    for name, text in contents.items():
        path = folder / name
        if not path.is_file() or path.read_bytes() != text.encode("utf-8"):
            return False
    return True


def _remove_stale_staging(folder: Path) -> None:
    """Staging folders of ``folder`` left by a killed run (they hold only files written here)."""
    if not folder.parent.is_dir():
        return
    prefix = f".{folder.name}."  # this version's .<name>.partial-*, and earlier versions' .<name>.<random>
    for stale in folder.parent.iterdir():
        if not stale.name.startswith(prefix) or not stale.is_dir():
            continue
        if all(p.name in WRITTEN_FILES for p in stale.iterdir()):
            shutil.rmtree(stale, ignore_errors=True)
            logger.info("removed %s, left by an interrupted run", stale)


def write_all_mixed_trials(jobs, overwrite: bool = False) -> dict[Path, str]:
    """Write every ``(result, folder)`` of ``jobs``; returns each folder's outcome: ``written``, ``replaced``
    or ``unchanged`` (it held exactly these files already).
    """
    plans = []
    for result, folder in jobs:
        folder = Path(folder)
        contents = _contents(result)
        if folder.exists():
            if folder.is_dir() and _holds(folder, contents):
                plans.append((folder, contents, "unchanged"))
                continue
            if not overwrite:
                raise MixedTrialsError(f"{folder} exists: not replaced (--overwrite=True replaces it)")
            other = (
                sorted(p.name for p in folder.iterdir() if p.name not in WRITTEN_FILES)
                if folder.is_dir()
                else []
            )
            if not folder.is_dir() or other:
                held = (
                    f"holds {other[:3]}{' ...' if len(other) > 3 else ''}" if folder.is_dir() else "is a file"
                )
                raise MixedTrialsError(
                    f"{folder} {held}, which make_mixed_trials did not write: not replaced, even with "
                    "--overwrite=True (move it, or give --output_folder=<another folder>)"
                )
        plans.append((folder, contents, "replaced" if folder.exists() else "written"))
    staged = []
    try:
        for folder, contents, outcome in plans:
            _remove_stale_staging(folder)
            if outcome == "unchanged":
                continue
            try:
                folder.parent.mkdir(parents=True, exist_ok=True)
                staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}{_STAGING}", dir=folder.parent))
                staged.append((folder, staging))
                umask = os.umask(0)
                os.umask(umask)
                os.chmod(staging, 0o777 & ~umask)  # a folder as mkdir makes it (mkdtemp's is private)
                for name, text in contents.items():
                    (staging / name).write_text(text, encoding="utf-8")
            except OSError as err:
                raise MixedTrialsError(
                    f"{folder.parent}: cannot write there ({err.strerror or err}); give "
                    "--output_folder=<a folder you can write> (the lists are read from where they are)"
                ) from None
        for folder, staging in staged:
            if folder.exists():  # holds only files written here (checked above)
                old = folder.parent / f".{folder.name}{_STAGING}old-{os.getpid()}"
                shutil.rmtree(old, ignore_errors=True)
                os.replace(folder, old)  # a killed run leaves it as a staging folder: removed on the rerun
                os.replace(staging, folder)
                shutil.rmtree(old, ignore_errors=True)
            else:
                os.replace(staging, folder)
    finally:
        for _, staging in staged:
            if staging.exists():
                shutil.rmtree(staging, ignore_errors=True)
    return {folder: outcome for folder, _, outcome in plans}

"""Readers for Kaldi-style data folders as the VoicePrivacy Attacker Challenge ships them (the files:
docs/data.md). Every reader names the file and line of a malformed entry.

>>> import tempfile, pathlib
>>> folder = pathlib.Path(tempfile.mkdtemp())
>>> _ = (folder / "utt2spk").write_text("19-198-0001 19\\n26-495-0000 26\\n")
>>> read_kaldi_map(folder / "utt2spk")
{'19-198-0001': '19', '26-495-0000': '26'}
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from segreconcat_aug.errors import MissingInputError, UserError


class KaldiFormatError(UserError, ValueError):
    """A Kaldi-style list has a line the reader cannot accept."""


def _lines(path: Path):
    """Yield ``(line_number, stripped_line)`` for non-empty lines (a missing file named in one line)."""
    if not path.is_file():
        raise MissingInputError(f"{path}: no such file")
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            line = line.strip()
            if line:
                yield number, line


def read_kaldi_map(path, *, value_required: bool = True) -> dict[str, str]:
    """Read ``<key> <value ...>`` lines into a dict (value = rest of the line); a line without a value
    or a key seen twice is a :class:`KaldiFormatError` naming file and line."""
    path = Path(path)
    result: dict[str, str] = {}
    first_seen: dict[str, int] = {}
    for number, line in _lines(path):
        key, _, value = line.partition(" ")
        value = value.strip()
        if value_required and not value:
            raise KaldiFormatError(f"{path}:{number}: expected '<key> <value>', got {line!r}")
        if key in result:
            raise KaldiFormatError(f"{path}:{number}: key {key!r} already defined on line {first_seen[key]}")
        result[key] = value
        first_seen[key] = number
    return result


def read_id_list(path) -> list[str]:
    """Read one id per line (an ``enrolls`` file), rejecting duplicates."""
    return list(read_kaldi_map(path, value_required=False))


class PipeCommand(str):
    """A ``wav.scp`` entry that is a shell command ending in ``|`` (kept without the bar)."""


def read_wav_scp(
    path, *, root=None, allow_pipes: bool = False, pipes_key: str | None = "allow_pipes"
) -> dict[str, str]:
    """Read ``wav.scp`` and resolve relative paths."""
    path = Path(path)
    folder = path.parent
    entries = read_kaldi_map(path)
    resolved: dict[str, str] = {}
    for utt, value in entries.items():
        if value.endswith("|"):
            if not allow_pipes:
                fix = (
                    f"unless --{pipes_key}=True"
                    if pipes_key
                    else "here: decode the audio to files, list those"
                )
                raise KaldiFormatError(
                    f"{path}: entry {utt!r} is a shell pipe ({value!r}); pipes run arbitrary "
                    f"commands and are refused {fix}"
                )
            resolved[utt] = PipeCommand(value[:-1].strip())
            continue
        resolved[utt] = str(_resolve(value, root, folder))
    return resolved


def _resolve(value: str, root, folder: Path) -> Path:
    candidate = Path(value)
    if candidate.is_absolute():
        return candidate
    options = ([Path(root) / candidate] if root is not None else []) + [
        folder / candidate,
        Path(os.getcwd()) / candidate,
    ]
    for option in options:
        if option.exists():
            return option
    return options[0]


class Trial(NamedTuple):
    """One line of a ``trials`` file."""

    enroll_speaker: str
    test_utterance: str
    target: bool
    line: int


def read_trials(path) -> list[Trial]:
    """Read ``<enroll-spk> <test-utt> target|nontarget`` lines (:class:`KaldiFormatError` naming file
    and line on another shape or label)."""
    path = Path(path)
    trials = []
    for number, line in _lines(path):
        fields = line.split()
        if len(fields) != 3 or fields[2] not in ("target", "nontarget"):
            raise KaldiFormatError(
                f"{path}:{number}: expected '<enroll-spk> <test-utt> target|nontarget', got {line!r}"
            )
        trials.append(Trial(fields[0], fields[1], fields[2] == "target", number))
    return trials


@dataclass
class KaldiFolder:
    """The lists of one data folder; optional files are ``None`` when absent."""

    path: Path
    wav: dict[str, str]
    utt2spk: dict[str, str]
    text: dict[str, str] | None = None
    utt2dur: dict[str, float] | None = None
    spk2gender: dict[str, str] | None = None
    enrolls: list[str] | None = None
    trials: list[Trial] | None = None
    # What the folder lacked and was read from its original, as the VPC 2026 toolkit completes it
    # (file name -> where from; ``wav.scp``: the audio files found), empty when complete.
    completed: dict[str, str] = field(default_factory=dict)
    # With ``unmatched="skip"``: ids of wav.scp without a speaker (dropped from ``wav``) and ids of
    # utt2spk without a wav.scp entry.
    no_speaker: list[str] = field(default_factory=list)
    no_audio: list[str] = field(default_factory=list)

    @property
    def utterances(self) -> list[str]:
        """Utterance ids in ``wav.scp`` order."""
        return list(self.wav)


def wav_scp_from_audio(folder, original_wav: Path) -> dict[str, str]:
    """``wav.scp`` of an anonymized folder that holds only audio, as the VPC 2026 toolkit builds it: every
    utterance of ``original_wav`` (in its order) -> ``<folder>/**/<utt>.wav``; no ``.wav`` file, or
    none for some utterance, is a :class:`MissingInputError` (the toolkit stops there too).
    """
    folder = Path(folder)
    found = {}
    for path in sorted(folder.rglob("*.wav")):
        found.setdefault(path.stem, str(path))
    utterances = list(read_kaldi_map(original_wav))
    missing = [utt for utt in utterances if utt not in found]
    if not found or missing:
        what = "no .wav file" if not found else f"no <utt>.wav for {len(missing)} of {len(utterances)}"
        raise MissingInputError(
            f"{folder}: no wav.scp and {what} utterance(s) of {original_wav}"
            + (f" (first: {missing[:5]})" if found else "")
            + f"; the VPC 2026 toolkit expects the anonymized audio as {folder}/wav/<utt>.wav"
        )
    return {utt: found[utt] for utt in utterances}


def load_kaldi_folder(
    path,
    *,
    root=None,
    allow_pipes: bool = False,
    pipes_key: str | None = "allow_pipes",
    require_utt2spk: bool = True,
    original=None,
    unmatched: str = "error",
) -> KaldiFolder:
    """Load a Kaldi-style folder, checking that ``utt2spk`` covers ``wav.scp``.

    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (d / "wav.scp").write_text("u1 wav/u1.wav\\n")
    >>> _ = (d / "utt2spk").write_text("u1 s1\\n")
    >>> load_kaldi_folder(d).utt2spk
    {'u1': 's1'}
    """
    if unmatched not in ("error", "skip"):
        raise ValueError(f"unmatched: expected 'error' or 'skip', got {unmatched!r}")
    path = Path(path)
    if not path.is_dir():
        raise MissingInputError(f"{path}: data folder not found")
    original = Path(original) if original is not None and Path(original).is_dir() else None
    completed: dict[str, str] = {}

    def source(name: str) -> Path:
        if (path / name).is_file() or original is None or not (original / name).is_file():
            return path / name
        completed[name] = str(original / name)
        return original / name

    if not (path / "wav.scp").is_file() and original is not None and (original / "wav.scp").is_file():
        wav = wav_scp_from_audio(path, original / "wav.scp")
        completed["wav.scp"] = f"{len(wav)} .wav files of {path}, in the order of {original / 'wav.scp'}"
    else:
        wav = read_wav_scp(path / "wav.scp", root=root, allow_pipes=allow_pipes, pipes_key=pipes_key)
    if not wav:
        raise KaldiFormatError(f"{path / 'wav.scp'}: empty")
    utt2spk: dict[str, str] = {}
    no_speaker: list[str] = []
    no_audio: list[str] = []
    utt2spk_path = source("utt2spk")
    if utt2spk_path.is_file() or require_utt2spk:
        utt2spk = read_kaldi_map(utt2spk_path)
        if require_utt2spk and not utt2spk:
            raise KaldiFormatError(f"{utt2spk_path}: empty")
        missing = [utt for utt in wav if utt not in utt2spk]
        if require_utt2spk and missing and unmatched == "skip":
            no_speaker = missing
            wav = {utt: value for utt, value in wav.items() if utt in utt2spk}
            if not wav:
                raise KaldiFormatError(
                    f"{utt2spk_path}: none of the {len(missing)} utterances of {path / 'wav.scp'} has a "
                    f"speaker (first: {missing[:5]}): do the two files use the same ids?"
                )
        elif require_utt2spk and missing:
            raise KaldiFormatError(
                f"{utt2spk_path}: {len(missing)} utterance(s) of wav.scp have no speaker, "
                f"first: {missing[:5]}"
            )
        if unmatched == "skip":
            no_audio = [utt for utt in utt2spk if utt not in wav and utt not in no_speaker]
    folder = KaldiFolder(path=path, wav=wav, utt2spk=utt2spk, no_speaker=no_speaker, no_audio=no_audio)
    if source("text").is_file():
        folder.text = read_kaldi_map(source("text"), value_required=False)
    if (path / "utt2dur").is_file():
        folder.utt2dur = {}
        for utt, value in read_kaldi_map(path / "utt2dur").items():
            try:
                folder.utt2dur[utt] = float(value)
            except ValueError:
                raise KaldiFormatError(
                    f"{path / 'utt2dur'}: duration of {utt!r} is not a number: {value!r}"
                ) from None
    if source("spk2gender").is_file():
        folder.spk2gender = read_kaldi_map(source("spk2gender"))
    if source("enrolls").is_file():
        folder.enrolls = read_id_list(source("enrolls"))
        if not folder.enrolls:  # a list that enrolls nobody, not a folder without one
            raise KaldiFormatError(
                f"{source('enrolls')}: empty: list the enrollment utterances (ids of wav.scp), one per line, "
                "or remove the file to enroll every utterance of wav.scp"
            )
    if (path / "trials").is_file():
        folder.trials = read_trials(path / "trials")
    folder.completed = completed
    return folder


def group_by_speaker(utterances, utt2spk: dict[str, str]) -> dict[str, list[str]]:
    """``spk2utt`` of the given utterances, each speaker's list in the order given.

    >>> group_by_speaker(["u2", "u1", "v1"], {"u1": "a", "u2": "a", "v1": "b"})
    {'a': ['u2', 'u1'], 'b': ['v1']}
    """
    speakers: dict[str, list[str]] = {}
    for utt in utterances:
        speakers.setdefault(utt2spk[utt], []).append(utt)
    return speakers


def write_kaldi_map(path, mapping: dict, *, sort: bool = True) -> None:
    """Write ``<key> <value>`` lines (values joined by spaces when lists)."""
    keys = sorted(mapping) if sort else list(mapping)
    with open(path, "w", encoding="utf-8") as handle:
        for key in keys:
            value = mapping[key]
            if isinstance(value, (list, tuple)):
                value = " ".join(str(v) for v in value)
            handle.write(f"{key} {value}\n")

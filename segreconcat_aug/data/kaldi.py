"""Readers for Kaldi-style data folders as the VoicePrivacy Attacker Challenge ships them.

A folder holds ``wav.scp``, ``utt2spk`` and, depending on its role, ``text``,
``utt2dur``, ``spk2gender``, ``enrolls`` or ``trials`` (see ``docs/data.md``).
Every reader names the file and line of a malformed entry, so a bad line in a
104k-line list is found at once.

Example
-------
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
    """Yield ``(line_number, stripped_line)`` for non-empty lines."""
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            line = line.strip()
            if line:
                yield number, line


def read_kaldi_map(path, *, value_required: bool = True) -> dict[str, str]:
    """Read ``<key> <value ...>`` lines into a dict (value = rest of the line).

    Raises
    ------
    FileNotFoundError
        When the file does not exist.
    KaldiFormatError
        On a line without a value or a key seen twice, naming file and line.
    """
    path = Path(path)
    if not path.is_file():
        raise MissingInputError(f"{path}: no such file")
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
    path = Path(path)
    ids = list(read_kaldi_map(path, value_required=False))
    return ids


class PipeCommand(str):
    """A ``wav.scp`` entry that is a shell command ending in ``|`` (kept without the bar)."""


def read_wav_scp(path, *, root=None, allow_pipes: bool = False) -> dict[str, str]:
    """Read ``wav.scp`` and resolve relative paths.

    A relative path is tried against ``root`` (the challenge data root), then
    the folder holding ``wav.scp``, then the current directory; the first that
    exists wins, else the ``root`` (or folder) candidate is kept so that a
    later existence check names the path the user would expect.

    Shell pipes (``<utt> flac -c -d x.flac |``) are refused unless
    ``allow_pipes`` is set, in which case the value is a :class:`PipeCommand`.
    """
    path = Path(path)
    folder = path.parent
    entries = read_kaldi_map(path)
    resolved: dict[str, str] = {}
    for utt, value in entries.items():
        if value.endswith("|"):
            if not allow_pipes:
                raise KaldiFormatError(
                    f"{path}: entry {utt!r} is a shell pipe ({value!r}); pipes run arbitrary "
                    "commands and are refused unless allow_pipes is enabled"
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
    """Read ``<enroll-spk> <test-utt> target|nontarget`` lines.

    Raises
    ------
    KaldiFormatError
        On a line with another shape or label, naming file and line.
    """
    path = Path(path)
    if not path.is_file():
        raise MissingInputError(f"{path}: no such file")
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
    extra: dict = field(default_factory=dict)

    @property
    def utterances(self) -> list[str]:
        """Utterance ids in ``wav.scp`` order."""
        return list(self.wav)


def load_kaldi_folder(
    path, *, root=None, allow_pipes: bool = False, require_utt2spk: bool = True
) -> KaldiFolder:
    """Load a Kaldi-style folder, checking that ``utt2spk`` covers ``wav.scp``.

    Example
    -------
    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (d / "wav.scp").write_text("u1 wav/u1.wav\\n")
    >>> _ = (d / "utt2spk").write_text("u1 s1\\n")
    >>> load_kaldi_folder(d).utt2spk
    {'u1': 's1'}
    """
    path = Path(path)
    if not path.is_dir():
        raise MissingInputError(f"{path}: data folder not found")
    wav = read_wav_scp(path / "wav.scp", root=root, allow_pipes=allow_pipes)
    if not wav:
        raise KaldiFormatError(f"{path / 'wav.scp'}: empty")
    utt2spk: dict[str, str] = {}
    if (path / "utt2spk").is_file() or require_utt2spk:
        utt2spk = read_kaldi_map(path / "utt2spk")
        if require_utt2spk and not utt2spk:
            raise KaldiFormatError(f"{path / 'utt2spk'}: empty")
        missing = [utt for utt in wav if utt not in utt2spk]
        if require_utt2spk and missing:
            raise KaldiFormatError(
                f"{path / 'utt2spk'}: {len(missing)} utterance(s) of wav.scp have no speaker, "
                f"first: {missing[:5]}"
            )
    folder = KaldiFolder(path=path, wav=wav, utt2spk=utt2spk)
    if (path / "text").is_file():
        folder.text = read_kaldi_map(path / "text", value_required=False)
    if (path / "utt2dur").is_file():
        folder.utt2dur = {}
        for utt, value in read_kaldi_map(path / "utt2dur").items():
            try:
                folder.utt2dur[utt] = float(value)
            except ValueError:
                raise KaldiFormatError(
                    f"{path / 'utt2dur'}: duration of {utt!r} is not a number: {value!r}"
                ) from None
    if (path / "spk2gender").is_file():
        folder.spk2gender = read_kaldi_map(path / "spk2gender")
    if (path / "enrolls").is_file():
        folder.enrolls = read_id_list(path / "enrolls")
        if not folder.enrolls:  # a list that enrolls nobody, not a folder without one
            raise KaldiFormatError(
                f"{path / 'enrolls'}: empty: list the enrollment utterances (ids of wav.scp), one per line, "
                "or remove the file to enroll every utterance of wav.scp"
            )
    if (path / "trials").is_file():
        folder.trials = read_trials(path / "trials")
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

"""Anonymize a folder: a Kaldi-style folder (or a folder of audio) -> an anonymized copy in the challenge
layout, with any :class:`~segreconcat_aug.anonymizers.Anonymizer`; an interrupted run resumes.
"""

from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..data.audio import AudioReadError, audio_duration, read_audio, write_audio
from ..data.kaldi import (
    group_by_speaker,
    load_kaldi_folder,
    read_id_list,
    read_kaldi_map,
    read_trials,
    write_kaldi_map,
)
from ..errors import MissingInputError, UserError
from . import Anonymizer

logger = logging.getLogger(__name__)

AUDIO_EXTENSIONS = (".wav", ".flac", ".ogg")
# opus: Ogg/Opus, for speech at a few kB/s (the demo's original training speech).
AUDIO_FORMATS = {
    "wav": ("wav", "PCM_16"),
    "flac": ("flac", "PCM_16"),
    "ogg": ("ogg", "VORBIS"),
    "opus": ("ogg", "OPUS"),
}


@dataclass
class SourceFolder:
    """What an anonymization run reads: utterance -> audio source, and the lists known for it."""

    wav: dict[str, str]
    utt2spk: dict[str, str]
    text: dict[str, str] = field(default_factory=dict)
    spk2gender: dict[str, str] = field(default_factory=dict)
    copies: dict[str, Path] = field(default_factory=dict)  # list name -> file copied verbatim


def speaker_of(utt_id: str) -> str:
    """Speaker of an utterance id without ``utt2spk``: the LibriSpeech prefix before the first ``-``.

    >>> speaker_of("1272-128104-0000"), speaker_of("greeting")
    ('1272', 'greeting')
    """
    return utt_id.split("-", 1)[0]


class AnonymizeInputError(UserError, ValueError):
    """The folder to anonymize (or where to write it) cannot be used as given; the message names it."""


def read_source(path, *, root=None, allow_pipes: bool = False) -> SourceFolder:
    """Read a Kaldi-style folder (has ``wav.scp``) or scan a folder of audio files recursively (ids,
    speakers, transcripts and genders as docs/demo.md says); two audio files sharing a name are refused
    (the utterance id would be ambiguous)."""
    path = Path(path)
    if not path.is_dir():
        raise MissingInputError(f"{path}: input folder not found")
    if (path / "wav.scp").is_file():
        folder = load_kaldi_folder(path, root=root, allow_pipes=allow_pipes, require_utt2spk=False)
        utt2spk = folder.utt2spk or {utt: speaker_of(utt) for utt in folder.wav}
        missing = [utt for utt in folder.wav if utt not in utt2spk]
        if missing:
            raise AnonymizeInputError(
                f"{path / 'utt2spk'}: {len(missing)} utterance(s) have no speaker, first: {missing[:5]}"
            )
        copies = {name: path / name for name in ("enrolls", "trials") if (path / name).is_file()}
        return SourceFolder(folder.wav, utt2spk, folder.text or {}, folder.spk2gender or {}, copies)
    files = sorted(p for p in path.rglob("*") if p.suffix.lower() in AUDIO_EXTENSIONS and p.is_file())
    if not files:
        raise MissingInputError(f"{path}: no wav.scp and no audio files ({', '.join(AUDIO_EXTENSIONS)})")
    wav: dict[str, str] = {}
    for file in files:
        if file.stem in wav:
            raise AnonymizeInputError(
                f"{path}: two audio files give utterance id {file.stem!r}: {wav[file.stem]} and {file}"
            )
        wav[file.stem] = str(file)
    text: dict[str, str] = {}
    trans_files = sorted(path.rglob("*.trans.txt")) + ([path / "text"] if (path / "text").is_file() else [])
    for trans in trans_files:
        for utt, words in read_kaldi_map(trans, value_required=False).items():
            if utt in wav:
                text[utt] = words
    genders = read_kaldi_map(path / "spk2gender") if (path / "spk2gender").is_file() else {}
    if not genders and (path / "SPEAKERS.TXT").is_file():
        genders = read_librispeech_speakers(path / "SPEAKERS.TXT")
    return SourceFolder(wav, {utt: speaker_of(utt) for utt in wav}, text, genders)


def read_librispeech_speakers(path) -> dict[str, str]:
    """Speaker -> ``f``/``m`` from a LibriSpeech ``SPEAKERS.TXT`` (``id | SEX | subset | minutes | name``).

    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "SPEAKERS.TXT"
    >>> _ = p.write_text(";ID |SEX| SUBSET |MINUTES| NAME\\n14 | F | train-clean-360 | 25.03 | Kristin\\n")
    >>> read_librispeech_speakers(p)
    {'14': 'f'}
    """
    genders = {}
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip() or line.startswith(";"):
                continue
            fields = [item.strip() for item in line.split("|")]
            if len(fields) < 2 or fields[1].upper() not in ("F", "M"):
                raise AnonymizeInputError(f"{path}:{number}: expected 'id | F|M | ...', got {line.strip()!r}")
            genders[fields[0]] = fields[1].lower()
    return genders


@dataclass
class FolderReport:
    """What :func:`anonymize_folder` did."""

    output: Path
    written: int = 0
    skipped: int = 0  # already anonymized by an earlier (interrupted) run
    #: parameter name -> utterance -> value (the anonymizer's ``parameters``; McAdams: ``alpha``)
    parameters: dict[str, dict[str, float]] = field(default_factory=dict)


def _atomic_write_audio(
    target: Path, audio: np.ndarray, sample_rate: int, subtype: str, compression_level: float | None
) -> None:
    # Write beside the target, then rename: an interrupted run never leaves a half file under the real name.
    handle, temp = tempfile.mkstemp(dir=target.parent, prefix=".partial-", suffix=target.suffix)
    os.close(handle)
    try:
        write_audio(temp, audio, sample_rate, subtype=subtype, compression_level=compression_level)
        os.replace(temp, target)
    finally:
        if os.path.exists(temp):
            os.unlink(temp)


def anonymize_folder(
    source,
    output,
    anonymizer: Anonymizer,
    *,
    utterances: Iterable[str] | None = None,
    audio_format: str = "wav",
    compression_level: float | None = None,
    scp_root=None,
    root=None,
    allow_pipes: bool = False,
    extra_lists: dict[str, str] | None = None,
    progress: bool = True,
) -> FolderReport:
    """Write an anonymized copy of a folder in the challenge layout (the files and the options, which
    are ``hparams/anonymize.yaml``'s keys: docs/demo.md). Audio already written by an interrupted run
    is kept (files appear atomically); the lists are rewritten at the end of every run.
    """
    from tqdm import tqdm

    if audio_format not in AUDIO_FORMATS:
        raise ValueError(f"unknown audio_format {audio_format!r}; choose from {sorted(AUDIO_FORMATS)}")
    if not isinstance(source, SourceFolder):
        source_path = Path(source)
        if source_path.resolve() == Path(output).resolve():
            raise AnonymizeInputError(
                f"{output}: output folder is the input folder; refusing to overwrite the input: give another "
                "--output_folder"
            )
        source = read_source(source_path, root=root, allow_pipes=allow_pipes)
    output = Path(output)
    wav_dir = output / "wav"
    wav_dir.mkdir(parents=True, exist_ok=True)
    ext, subtype = AUDIO_FORMATS[audio_format]
    utts = list(source.wav) if utterances is None else list(utterances)
    unknown = [utt for utt in utts if utt not in source.wav]
    if unknown:
        raise KeyError(f"{len(unknown)} requested utterance(s) are not in the source, first: {unknown[:5]}")
    report = FolderReport(output)
    wav_scp, utt2dur = {}, {}
    label = getattr(anonymizer, "name", type(anonymizer).__name__)
    for utt in tqdm(utts, desc=f"{label} -> {output.name}", unit="utt", disable=not progress):
        target = wav_dir / f"{utt}.{ext}"
        for name, value in anonymizer.parameters(utt).items():
            report.parameters.setdefault(name, {})[utt] = value
        if target.is_file():
            report.skipped += 1
        else:
            try:
                audio = read_audio(source.wav[utt], sample_rate=anonymizer.sample_rate)
            except AudioReadError as err:
                raise AudioReadError(f"utterance {utt!r}: {err}") from err
            _atomic_write_audio(
                target, anonymizer(audio, utt), anonymizer.sample_rate, subtype, compression_level
            )
            report.written += 1
        relative = os.path.relpath(target, scp_root) if scp_root is not None else target.relative_to(output)
        wav_scp[utt] = Path(relative).as_posix()
        utt2dur[utt] = f"{audio_duration(target):.4f}"
    utt2spk = {utt: source.utt2spk[utt] for utt in utts}
    spk2utt = group_by_speaker(sorted(utt2spk), utt2spk)
    write_kaldi_map(output / "wav.scp", wav_scp)
    write_kaldi_map(output / "utt2spk", utt2spk)
    write_kaldi_map(output / "spk2utt", spk2utt)
    write_kaldi_map(output / "utt2dur", utt2dur)
    for name, values in report.parameters.items():
        write_kaldi_map(output / f"utt2{name}", {utt: f"{value:.6f}" for utt, value in values.items()})
    text = {utt: source.text[utt] for utt in utts if utt in source.text}
    if text:
        write_kaldi_map(output / "text", text)
    genders = {spk: source.spk2gender[spk] for spk in spk2utt if spk in source.spk2gender}
    if genders:
        write_kaldi_map(output / "spk2gender", genders)
    extra_lists = dict(extra_lists or {})
    for name, path in source.copies.items():
        if name not in extra_lists:
            extra_lists[name] = Path(path).read_text(encoding="utf-8")
    for name, content in extra_lists.items():
        (output / name).write_text(content, encoding="utf-8")
    _check_lists(output, set(utts))
    logger.info("%s: %d anonymized, %d kept from an earlier run", output, report.written, report.skipped)
    return report


def _check_lists(output: Path, utts: set[str]) -> None:
    """Enrolls and trials must name utterances of this folder (a wrong subset is caught here)."""
    if (output / "enrolls").is_file():
        missing = [utt for utt in read_id_list(output / "enrolls") if utt not in utts]
        if missing:
            raise AnonymizeInputError(
                f"{output / 'enrolls'}: {len(missing)} id(s) not in the folder, first: {missing[:5]}"
            )
    if (output / "trials").is_file():
        missing = [t.test_utterance for t in read_trials(output / "trials") if t.test_utterance not in utts]
        if missing:
            raise AnonymizeInputError(
                f"{output / 'trials'}: {len(missing)} test utterance(s) not in the folder, first: {missing[:5]}"
            )

"""A tiny VoicePrivacy-Attacker-Challenge layout built from the LibriSpeech fixtures.

``build_vpac_layout(root)`` writes, for each system name,
``<root>/<SYS>/data/<set>_<SYS>/`` with ``wav/*.wav``, ``wav.scp`` (paths
relative to ``root``, as the challenge ships them), ``utt2spk``, ``spk2utt``,
``spk2gender``, ``utt2dur``, ``text`` where known, ``enrolls`` and ``trials``.
The "anonymization" of each system is a different gain: enough for plumbing
tests, not a privacy claim.

Word alignments are synthetic (``aligner: "uniform"``): each transcript word gets
an equal share of the utterance; utterances without a transcript get a word
every 0.4 s. They exercise the recipe, not an aligner.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import numpy as np
import soundfile

from segreconcat_aug.align.cache import UtteranceAlignment, Word
from segreconcat_aug.data.kaldi import read_kaldi_map, write_kaldi_map

FIXTURES = Path(__file__).parent / "fixtures" / "librispeech"
TRAIN_SPEAKERS = ("19", "26", "27", "1998", "3331", "2414", "3005")
EVAL_SPEAKERS = {"f": ("1998", "3331"), "m": ("2414", "3005")}


def fixture_audio(utt: str) -> np.ndarray:
    """A LibriSpeech fixture utterance as float32 mono at 16 kHz (read_audio checks the rate)."""
    from segreconcat_aug.data.audio import read_audio

    return read_audio(FIXTURES / f"{utt}.flac")


def fixture_utterances() -> dict[str, Path]:
    """Utterance id -> flac path of every LibriSpeech fixture."""
    return {path.stem: path for path in sorted(FIXTURES.glob("*.flac"))}


def _speaker(utt: str) -> str:
    return utt.split("-")[0]


def _write_folder(folder: Path, root: Path, utts: list[str], gain: float, extra: dict | None = None):
    sources = fixture_utterances()
    texts = read_kaldi_map(FIXTURES / "text")
    genders = read_kaldi_map(FIXTURES / "spk2gender")
    (folder / "wav").mkdir(parents=True, exist_ok=True)
    wav_scp, utt2spk, utt2dur, text = {}, {}, {}, {}
    for utt in utts:
        audio, rate = soundfile.read(sources[utt], dtype="float32")
        target = folder / "wav" / f"{utt}.wav"
        soundfile.write(target, np.clip(audio * gain, -1, 1), rate, subtype="PCM_16")
        wav_scp[utt] = target.relative_to(root).as_posix()
        utt2spk[utt] = _speaker(utt)
        utt2dur[utt] = f"{len(audio) / rate:.3f}"
        if utt in texts:
            text[utt] = texts[utt]
    spk2utt = defaultdict(list)
    for utt, spk in utt2spk.items():
        spk2utt[spk].append(utt)
    write_kaldi_map(folder / "wav.scp", wav_scp)
    write_kaldi_map(folder / "utt2spk", utt2spk)
    write_kaldi_map(folder / "spk2utt", spk2utt)
    write_kaldi_map(folder / "utt2dur", utt2dur)
    write_kaldi_map(folder / "spk2gender", {spk: genders[spk] for spk in spk2utt})
    if text:
        write_kaldi_map(folder / "text", text)
    for name, content in (extra or {}).items():
        (folder / name).write_text(content)


def build_vpac_layout(root, systems=("B3", "T8-5"), write_alignments: bool = True) -> Path:
    """Write the layout under ``root``; returns ``root``.

    Alignments (when asked) go to ``<root>/alignments/<SYS>.jsonl``.
    """
    root = Path(root)
    by_speaker = defaultdict(list)
    for utt in fixture_utterances():
        by_speaker[_speaker(utt)].append(utt)
    train = [utt for spk in TRAIN_SPEAKERS for utt in by_speaker[spk]]
    for k, system in enumerate(systems):
        data = root / system / "data"
        gain = 0.9 - 0.1 * k
        _write_folder(data / f"train-clean-360_{system}", root, train, gain)
        for part in ("dev", "test"):
            # Enroll with each evaluation speaker's first utterance, test on the rest.
            enroll = [by_speaker[spk][0] for gender in "fm" for spk in EVAL_SPEAKERS[gender]]
            _write_folder(
                data / f"libri_{part}_enrolls_{system}",
                root,
                enroll,
                gain,
                {"enrolls": "\n".join(enroll) + "\n"},
            )
            for gender in "fm":
                tests = [utt for spk in EVAL_SPEAKERS[gender] for utt in by_speaker[spk][1:]]
                lines = [
                    f"{spk} {utt} {'target' if _speaker(utt) == spk else 'nontarget'}"
                    for spk in EVAL_SPEAKERS[gender]
                    for utt in tests
                ]
                _write_folder(
                    data / f"libri_{part}_trials_{gender}_{system}",
                    root,
                    tests,
                    gain,
                    {"trials": "\n".join(lines) + "\n"},
                )
        if write_alignments:
            write_uniform_alignments(
                data / f"train-clean-360_{system}", root / "alignments" / f"{system}.jsonl"
            )
    return root


def write_uniform_alignments(folder: Path, cache: Path) -> Path:
    """Synthetic word alignments for every utterance of a folder (see module doc)."""
    durations = {utt: float(d) for utt, d in read_kaldi_map(folder / "utt2dur").items()}
    texts = read_kaldi_map(folder / "text", value_required=False) if (folder / "text").exists() else {}
    lines = []
    for utt, duration in durations.items():
        words = texts.get(utt, "").lower().split() or ["w"] * max(1, int(duration / 0.4))
        step = duration / len(words)
        aligned = [Word(word, k * step, (k + 1) * step) for k, word in enumerate(words)]
        lines.append(UtteranceAlignment(utt, duration, aligned, "uniform").to_json() + "\n")
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text("".join(lines), encoding="utf-8")
    return cache


def kill_when_written(
    command: list[str], output: Path, lines: int = 3, cwd=None, timeout: float = 120.0
) -> None:
    """Run ``command`` and ``kill -9`` it once ``output`` holds ``lines`` complete lines.

    Fails the test if the run ends by itself first (too fast to be interrupted).
    """
    import os
    import signal
    import subprocess
    import time

    process = subprocess.Popen(command, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + timeout
    while time.time() < deadline and process.poll() is None:
        if output.exists() and output.read_bytes().count(b"\n") >= lines:
            break
        time.sleep(0.02)
    assert process.poll() is None, "the run ended before it could be killed"
    os.kill(process.pid, signal.SIGKILL)
    process.wait()

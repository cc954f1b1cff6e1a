"""Tiny data folders laid out as the VoicePrivacy Challenge 2026 toolkit writes them.

``build_track1_layout(root)``: LibriSpeech fixture audio in the Track 1 layout (two enrollment
utterances per evaluation speaker, the third one tested), every set under
``<root>/data/``: the originals (``libri_<part>_enrolls``, ``libri_<part>_trials_{f,m}`` and
``libri_<part>_trials_mixed`` built from them by the 2026 rule, ``train-clean-360``, audio under ``corpora/``, paths
relative to ``root``) and, per system, the anonymized copies ``<set>_<SYS>`` (a gain as the
"anonymization"; ``wav/*.wav`` in the folder, ``wav.scp`` relative to ``root``): ``train-clean-360``,
``libri_<part>_enrolls``, ``libri_<part>_trials_mixed`` WITHOUT ``trials`` (the toolkit reads the
original folder's). The original dev list also names one utterance that has no audio, which the
2026 protocol skips and counts. ``rate=22050`` writes the anonymized audio at that rate;
``strip_to_audio(root, SYS)`` then leaves only ``wav/*.wav`` in them, as the toolkit's nac and ssl
pipelines (B4, BM1) write them.

``build_track2_layout(root)``: the synthesized German fixture (``tests/fixtures/espeak_de``) as
Track 2's ``train_german_<SYS>`` and ``de_<part>_{enrolls,trials_mixed}[_<SYS>]``: MLS-style ids
(``spk_book_seq``), genders ``F``/``M``, audio under ``corpora/`` (originals and anonymized copies),
each ``trials_mixed`` list the full cross product of speakers and test utterances (both genders),
only in the original folders.

Alignments are the synthetic uniform ones of :mod:`vpac_fixture`, in ``<root>/alignments/<SYS>.jsonl``.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import numpy as np
import soundfile
from vpac_fixture import EVAL_SPEAKERS, FIXTURES, TRAIN_SPEAKERS, fixture_utterances, write_uniform_alignments

from segreconcat_aug.data.kaldi import read_kaldi_map, write_kaldi_map
from segreconcat_aug.data.mixed_trials import mixed_trials, write_all_mixed_trials

ESPEAK_DE = Path(__file__).parent / "fixtures" / "espeak_de"
TRACK2_TRAIN = ("1844", "2314", "5021", "6349")  # F, F, M, M
TRACK2_EVAL = ("3267", "4536", "7128", "8410")  # F, F, M, M
UNKNOWN_UTTERANCE = "1998-99999-0000"  # in the Track 1 original dev list, without audio: skipped


def write_folder(
    folder: Path, root: Path, audio: dict, speakers: dict, genders: dict, texts=None, extra=None
):
    """A Kaldi folder: ``audio`` utt -> path under ``root`` (written already), lists relative to ``root``."""
    folder.mkdir(parents=True, exist_ok=True)
    spk2utt = defaultdict(list)
    for utt in audio:
        spk2utt[speakers[utt]].append(utt)
    write_kaldi_map(
        folder / "wav.scp", {utt: Path(path).relative_to(root).as_posix() for utt, path in audio.items()}
    )
    write_kaldi_map(folder / "utt2spk", {utt: speakers[utt] for utt in audio})
    write_kaldi_map(folder / "spk2utt", spk2utt)
    write_kaldi_map(folder / "spk2gender", {spk: genders[spk] for spk in spk2utt})
    write_kaldi_map(
        folder / "utt2dur", {utt: f"{soundfile.info(path).duration:.3f}" for utt, path in audio.items()}
    )
    if texts:
        write_kaldi_map(folder / "text", {utt: texts[utt] for utt in audio if utt in texts})
    for name, content in (extra or {}).items():
        (folder / name).write_text(content)


def _copy(
    sources: dict, target_dir: Path, gain: float, suffix: str = ".wav", rate: int | None = None
) -> dict:
    """Each source scaled by ``gain`` into ``target_dir/<utt><suffix>`` (16-bit PCM; at ``rate`` if given)."""
    from math import gcd

    from scipy.signal import resample_poly

    target_dir.mkdir(parents=True, exist_ok=True)
    written = {}
    for utt, source in sources.items():
        audio, source_rate = soundfile.read(source, dtype="float32")
        if rate is not None and rate != source_rate:
            divisor = gcd(rate, source_rate)
            audio = resample_poly(audio, rate // divisor, source_rate // divisor).astype(np.float32)
        written[utt] = target_dir / f"{utt}{suffix}"
        soundfile.write(written[utt], np.clip(audio * gain, -1, 1), rate or source_rate, subtype="PCM_16")
    return written


def strip_to_audio(root, system: str) -> list[Path]:
    """Every anonymized folder of ``system`` as the toolkit's nac and ssl pipelines leave it: ``wav/*.wav``
    only (its lists removed); returns the folders."""
    folders = sorted((Path(root) / "data").glob(f"*_{system}"))
    for folder in folders:
        for path in folder.iterdir():
            if path.is_file():
                path.unlink()
    return folders


def _cross_product(speakers, utterances, speaker_of) -> str:
    lines = [
        f"{spk} {utt} {'target' if speaker_of[utt] == spk else 'nontarget'}"
        for spk in speakers
        for utt in utterances
    ]
    return "\n".join(lines) + "\n"


def build_track1_layout(root, systems=("B3",), rate: int | None = None) -> Path:
    """The Track 1 layout under ``root`` (module docstring); returns ``root``. ``rate``: the anonymized
    audio's sample rate (default: the fixtures', 16 kHz)."""
    root = Path(root)
    sources = fixture_utterances()
    speaker_of = {utt: utt.split("-")[0] for utt in sources}
    genders = read_kaldi_map(FIXTURES / "spk2gender")
    texts = read_kaldi_map(FIXTURES / "text")
    by_speaker = defaultdict(list)
    for utt in sources:
        by_speaker[speaker_of[utt]].append(utt)
    originals = _copy(sources, root / "corpora" / "LibriSpeech", 1.0, ".flac")
    data = root / "data"
    # Two enrollment utterances per speaker (so the mean of L2-normalized embeddings differs from the raw one).
    enroll = [u for gender in "fm" for spk in EVAL_SPEAKERS[gender] for u in by_speaker[spk][:2]]
    tests = {gender: [u for spk in EVAL_SPEAKERS[gender] for u in by_speaker[spk][2:]] for gender in "fm"}
    for part in ("dev", "test"):
        write_folder(
            data / f"libri_{part}_enrolls",
            root,
            {u: originals[u] for u in enroll},
            speaker_of,
            genders,
            texts,
            {"enrolls": "\n".join(enroll) + "\n"},
        )
        for gender in "fm":
            trials = _cross_product(EVAL_SPEAKERS[gender], tests[gender], speaker_of)
            write_folder(
                data / f"libri_{part}_trials_{gender}",
                root,
                {u: originals[u] for u in tests[gender]},
                speaker_of,
                genders,
                texts,
                {"trials": trials},
            )
        mixed = mixed_trials(
            data / f"libri_{part}_enrolls", data / f"libri_{part}_trials_f", data / f"libri_{part}_trials_m"
        )
        if part == "dev":
            mixed.trials.append(f"{EVAL_SPEAKERS['f'][0]} {UNKNOWN_UTTERANCE} nontarget")
        write_all_mixed_trials([(mixed, data / f"libri_{part}_trials_mixed")])
    train = [utt for spk in TRAIN_SPEAKERS for utt in by_speaker[spk]]
    write_folder(data / "train-clean-360", root, {u: originals[u] for u in train}, speaker_of, genders, texts)
    for k, system in enumerate(systems):
        gain = 0.9 - 0.1 * k
        sets = {
            "train-clean-360": (train, None),
            **{
                f"libri_{part}_enrolls": (enroll, {"enrolls": "\n".join(enroll) + "\n"})
                for part in ("dev", "test")
            },
            **{f"libri_{part}_trials_mixed": (tests["f"] + tests["m"], None) for part in ("dev", "test")},
        }
        for name, (utts, extra) in sets.items():
            folder = data / f"{name}_{system}"
            audio = _copy({u: sources[u] for u in utts}, folder / "wav", gain, rate=rate)
            write_folder(folder, root, audio, speaker_of, genders, texts, extra)
        write_uniform_alignments(data / f"train-clean-360_{system}", root / "alignments" / f"{system}.jsonl")
    return root


def espeak_utterances() -> tuple[dict, dict, dict, dict]:
    """The German fixture: utt -> ogg path, utt -> speaker (from ``speakers.tsv``), speaker -> F/M, texts."""
    table = [line.split("\t") for line in (ESPEAK_DE / "speakers.tsv").read_text().splitlines() if line]
    genders = {speaker: gender for speaker, gender, _ in table}
    sources = {path.stem: path for path in sorted(ESPEAK_DE.glob("*.ogg"))}
    speakers = {}
    for utt in sources:  # MLS ids are <speaker>_<book>_<sequence>; the lists give the speaker, not the id
        speakers[utt] = next(spk for spk in genders if utt.startswith(f"{spk}_"))
    return sources, speakers, genders, read_kaldi_map(ESPEAK_DE / "text")


def build_track2_layout(root, system: str = "BM1", language: str = "de") -> Path:
    """The Track 2 layout of one language under ``root`` (module docstring); returns ``root``."""
    from segreconcat_aug.data.protocols import TRACK2_LANGUAGES

    root = Path(root)
    sources, speaker_of, genders, texts = espeak_utterances()
    by_speaker = defaultdict(list)
    for utt in sources:
        by_speaker[speaker_of[utt]].append(utt)
    data, train_set = root / "data", TRACK2_LANGUAGES[language].train_set
    enroll = [by_speaker[spk][0] for spk in TRACK2_EVAL]
    tests = [u for spk in TRACK2_EVAL for u in by_speaker[spk][1:]]
    train = [u for spk in TRACK2_TRAIN for u in by_speaker[spk]]
    originals = _copy(sources, root / "corpora" / f"mls_{language}", 1.0)
    for part in ("dev", "test"):
        extra = {"enrolls": "\n".join(enroll) + "\n"}
        write_folder(
            data / f"{language}_{part}_enrolls",
            root,
            {u: originals[u] for u in enroll},
            speaker_of,
            genders,
            texts,
            extra,
        )
        trials = {"trials": _cross_product(TRACK2_EVAL, tests, speaker_of)}
        write_folder(
            data / f"{language}_{part}_trials_mixed",
            root,
            {u: originals[u] for u in tests},
            speaker_of,
            genders,
            texts,
            trials,
        )
    sets = {
        train_set: (train, None),
        **{
            f"{language}_{part}_enrolls": (enroll, {"enrolls": "\n".join(enroll) + "\n"})
            for part in ("dev", "test")
        },
        **{f"{language}_{part}_trials_mixed": (tests, None) for part in ("dev", "test")},
    }
    for name, (utts, extra) in sets.items():
        audio = _copy({u: sources[u] for u in utts}, root / "corpora" / system / name, 0.8)
        write_folder(data / f"{name}_{system}", root, audio, speaker_of, genders, texts, extra)
    write_uniform_alignments(data / f"{train_set}_{system}", root / "alignments" / f"{system}.jsonl")
    return root

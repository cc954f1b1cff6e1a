"""Training data of one challenge system: checked audio, a fixed dev split, CSV manifests.

:func:`prepare_vpac_training` reads the system's training set under its protocol:
``<root>/<SYS>/data/train-clean-360_<SYS>/`` (VPAC 2024), ``<root>/data/train-clean-360_<SYS>``
(VPC 2026 Track 1) or ``<root>/data/train_<language name>_<SYS>`` (Track 2; folder names
overridable, see :mod:`segreconcat_aug.data.vpac`; speakers always from ``utt2spk``) and writes to the
output folder:

``train.csv``
    One row per random crop (``ID`` = ``<utt>@<k>``, ``utt_id``, ``wav``,
    ``duration``, ``spk_id``), as :class:`segreconcat_aug.training.pipeline.TrainAudioPipeline`
    takes them. An utterance of ``d`` seconds gives ``int(f * d / sentence_len)``
    rows, ``f`` = 2 in ``concat`` mode (SegReConcat doubles the audio, the
    paper's "data volume doubles") and 1 otherwise.
    **Utterances shorter than one crop** (``f * d < sentence_len``) give no
    row: they are dropped from training, counted in ``prep_summary.json`` and
    logged, as in the VPC 2024 baseline recipe (``int(dur / 3)`` rows).
    **Silent chunks** (VPC 2024's ``amp_th``): the utterance is cut into fixed
    consecutive ``sentence_len`` chunks and each chunk whose mean absolute
    amplitude is below ``min_chunk_amplitude`` (5e-4) removes ``f`` rows, so an
    utterance gives ``int(f * (d - silent * sentence_len) / sentence_len)``
    rows: VPC's count of kept chunks when ``f`` = 1 (VPC too trains each kept
    chunk's row on a random crop of the whole utterance, ``random_chunk``).
``dev.csv``
    Held-out utterances of the *training* speakers (a ``dev_ratio`` share per
    speaker, 10 % as VPC 2024 holds out, at least one where the speaker has two
    or more utterances and one of them is at least a crop long), cut into FIXED
    consecutive chunks of ``sentence_len`` (``start``/``stop`` in samples; the
    tail shorter than a chunk is left out, and so are silent chunks, as in
    training), so the dev loss compares across epochs and runs.
    Dev audio is never augmented. Dev rows of a speaker left with no training
    row are dropped (its class would never be trained).
**A fraction of the training set** (``train_fraction`` < 1, for a learning curve): after the dev
    split, ``train_subsample: utterances`` keeps every speaker and ``ceil(f * n)`` of each speaker's
    ``n`` training utterances; ``train_subsample: speakers`` keeps ``ceil(f * S)`` of the ``S``
    speakers of each stratum (gender x whether the speaker holds dev utterances, so every fraction
    keeps a dev set and the gender balance) with all their utterances, and the dev rows of the
    speakers left out go with them. Each draw is a fixed seeded order (:func:`subsample_training`),
    so a smaller fraction's subset lies inside every larger one's.
``prep_summary.json``, ``prep_signature.json``
    Counts, and the signature of the inputs: a rerun with the same list files
    and parameters skips preparation.

Every audio file is checked before training (:mod:`segreconcat_aug.data.audio_check`:
decoded to the end by default, cached in ``audio_check.jsonl``); missing,
unreadable, truncated, NaN, silent, too-short files and files at another sample
rate are listed together in ONE :class:`AudioCheckError` (all of them in
``audio_problems.txt``), or, under ``bad_audio="skip"``, left out and counted.
Durations come from the headers, so a missing ``utt2dur`` costs nothing; a
present one is only cross-checked (mismatches are logged).

Example
-------
>>> augmented_factor("concat"), augmented_factor("rearranged"), augmented_factor("none")
(2, 1, 1)
>>> crop_rows(4.0, sentence_len=3.0, factor=2), crop_rows(4.0, sentence_len=3.0, factor=1)
(2, 1)
>>> dev_chunks(50000, chunk=16000)
[(0, 16000), (16000, 32000), (32000, 48000)]
>>> chunk_amplitudes(np.r_[np.zeros(16000), np.full(16000, 0.5)].astype(np.float32), chunk=16000).tolist()
[0.0, 0.5]
"""

from __future__ import annotations

import csv
import hashlib
import json
import logging
import math
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import soundfile
from tqdm import tqdm

from ..data.audio import SAMPLE_RATE
from ..data.audio_check import (
    BAD_AUDIO_POLICIES,
    check_audio_files,
    measure_file,
    problem_message,
    write_problem_list,
)
from ..data.kaldi import group_by_speaker
from ..data.protocols import get_protocol
from ..data.vpac import detect_layout, load_set_folder, training_folder
from ..errors import UserError, cite
from ..method.augment import MODES
from ..seeding import seeded_rng
from .pooled import pooled_systems

logger = logging.getLogger(__name__)

PREP_VERSION = 1  # bump when the manifest layout or split rule changes: old outputs get redone
TRAIN_CSV = "train.csv"
DEV_CSV = "dev.csv"
SUMMARY_FILE = "prep_summary.json"
SIGNATURE_FILE = "prep_signature.json"
PROBLEMS_FILE = "audio_problems.txt"
AUDIO_CHECK_CACHE = "audio_check.jsonl"
TRAIN_FIELDS = ("ID", "utt_id", "wav", "duration", "spk_id")
DEV_FIELDS = ("ID", "utt_id", "wav", "start", "stop", "duration", "spk_id")
#: VPC 2024's training data preparation (its libri_prepare.py): 10 % of the utterances held out for
#: dev (``split_ratio [90, 10]``) and 3 s chunks with mean |amplitude| under 5e-4 dropped (``amp_th``).
DEV_RATIO = 0.10
MIN_CHUNK_AMPLITUDE = 5e-4
_SPLIT_STREAM = 7  # dev draws stay independent of any other use of seeded_rng
_SUBSET_STREAM = 11  # so do the learning curve's subsets
TRAIN_SUBSAMPLES = ("utterances", "speakers")
_DURATION_TOLERANCE = 0.05  # seconds; utt2dur is rounded to ms, headers are exact


class DataPrepError(UserError, ValueError):
    """The training data of a system cannot be prepared."""


class AudioCheckError(DataPrepError):
    """Audio files failed the audio check: missing, unreadable, truncated, NaN, silent, ... (all listed)."""


def augmented_factor(mode: str) -> int:
    """How many times longer the training audio is after SegReConcat in ``mode``."""
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; choose from {MODES}")
    return 2 if mode == "concat" else 1


def crop_rows(duration: float, sentence_len: float, factor: int = 1) -> int:
    """Training rows of one utterance: ``int(factor * duration / sentence_len)``."""
    return int(factor * duration / sentence_len)


def dev_chunks(num_samples: int, chunk: int) -> list[tuple[int, int]]:
    """Consecutive ``[start, stop)`` chunks of ``chunk`` samples (the tail is left out)."""
    return [(k * chunk, (k + 1) * chunk) for k in range(num_samples // chunk)]


def chunk_amplitudes(audio: np.ndarray, chunk: int) -> np.ndarray:
    """Mean absolute amplitude of each of :func:`dev_chunks`' chunks (VPC 2024's chunk filter measure)."""
    spans = dev_chunks(len(audio), chunk)
    return np.array([np.abs(audio[a:b]).mean(dtype=np.float64) for a, b in spans], dtype=np.float64)


def silent_chunk_flags(
    wav: dict[str, str], chunk: int, threshold: float, *, workers: int = 8
) -> dict[str, np.ndarray]:
    """Utterance -> one bool per fixed chunk: True where the chunk's mean ``|x|`` is below ``threshold``.

    Decodes every file (threads: the work is mostly disk reads and decoding) with the full
    audio check's measurement (:func:`segreconcat_aug.data.audio_check.measure_file`), so both
    checks see the same amplitudes. Used when the audio check read only the headers.
    """

    def measure(utt):
        try:
            record = measure_file(str(wav[utt]), chunk=chunk)
        except (RuntimeError, OSError, soundfile.LibsndfileError) as err:
            raise AudioCheckError(f"{utt} {wav[utt]}: cannot read the samples ({err})") from None
        if record["read_error"] is not None:
            raise AudioCheckError(f"{utt} {wav[utt]}: cannot read the samples ({record['read_error']})")
        return utt, np.asarray(record["chunk_means"][str(chunk)]) < threshold

    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        results = pool.map(measure, list(wav), chunksize=16)
        return dict(tqdm(results, total=len(wav), desc="measuring chunk amplitudes", mininterval=2))


def _file_digest(path: Path) -> str | None:
    if not path.is_file():
        return None
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def input_signature(folder: Path, params: dict) -> dict:
    """What the manifests depend on: the list files' contents and the parameters."""
    lists = {name: _file_digest(folder / name) for name in ("wav.scp", "utt2spk", "utt2dur")}
    return {"version": PREP_VERSION, "folder": str(folder.resolve()), "lists": lists, "params": params}


def check_training_audio(
    wav: dict[str, str],
    sample_rate: int = SAMPLE_RATE,
    *,
    workers: int = 8,
    problems_file=None,
    mode: str = "header",
    bad_audio: str = "error",
    min_duration: float = 0.0,
    silence_db: float | None = None,
    cache=None,
    chunk: int | None = None,
) -> tuple[dict[str, int], dict[str, np.ndarray]]:
    """Check every file (:func:`segreconcat_aug.data.audio_check.check_audio_files`).

    Returns ``(frames, chunk_means)``: utterance -> samples, and (full check with
    ``chunk``) utterance -> mean ``|x|`` of each ``chunk``-sample chunk.
    ``mode`` ``"full"`` decodes each file (NaN samples, truncation, silence),
    ``"header"`` opens it. Files with a problem are listed in ``problems_file``;
    under ``bad_audio="skip"`` they are left out of the result (and logged),
    otherwise:

    Raises
    ------
    AudioCheckError
        Naming the files with a problem (the first 5 in the message, all in ``problems_file``).
    """
    if bad_audio not in BAD_AUDIO_POLICIES:
        raise ValueError(f"bad_audio: unknown policy {bad_audio!r}; choose from {BAD_AUDIO_POLICIES}")
    report = check_audio_files(
        wav,
        mode=mode,
        sample_rate=sample_rate,
        min_duration=min_duration,
        silence_db=silence_db,
        workers=workers,
        cache=cache,
        chunk=chunk if mode == "full" else None,
    )
    if not report.problems:
        return report.frames, report.chunk_means
    listed = write_problem_list(report.problems, problems_file) if problems_file is not None else None
    message = problem_message(report.problems, len(wav), "audio files", listed)
    if bad_audio == "error":
        # The list outlives a removed output folder (cli.run_main moves it beside and says where).
        raise cite(
            AudioCheckError(f"{message} (bad_audio: skip leaves them out of training instead)"), listed
        )
    logger.warning("%s\nbad_audio: skip -> these utterances are left out of training", message)
    bad = {problem.utt for problem in report.problems}
    return {utt: frames for utt, frames in report.frames.items() if utt not in bad}, report.chunk_means


def split_dev(
    utt2spk: dict[str, str],
    durations: dict[str, float],
    *,
    dev_ratio: float = DEV_RATIO,
    min_duration: float,
    seed: int,
) -> set[str]:
    """Hold out ``max(1, round(dev_ratio * n))`` utterances per speaker (seeded).

    A speaker keeps at least one training utterance, and only utterances of at
    least ``min_duration`` seconds (one dev chunk) are held out; a speaker with
    fewer candidates gives fewer (possibly none). Each speaker's draw depends on
    ``(seed, speaker)`` alone, so adding a speaker changes no other's split.

    >>> utt2spk = {f"a{k}": "a" for k in range(10)} | {"b0": "b"}  # b has one utterance: kept for training
    >>> durations = dict.fromkeys(utt2spk, 5.0)
    >>> sorted(split_dev(utt2spk, durations, dev_ratio=0.2, min_duration=3.0, seed=1))
    ['a4', 'a6']
    """
    if not 0 <= dev_ratio < 1:
        raise ValueError(f"dev_ratio must be in [0, 1), got {dev_ratio}")
    dev: set[str] = set()
    if dev_ratio == 0:
        return dev
    by_speaker = group_by_speaker(sorted(utt2spk), utt2spk)
    for spk, utts in sorted(by_speaker.items()):
        if len(utts) < 2:
            continue
        wanted = min(max(1, round(dev_ratio * len(utts))), len(utts) - 1)
        candidates = [utt for utt in utts if durations[utt] >= min_duration]
        if not candidates:
            continue
        rng = seeded_rng(seed, 0, spk, stream=_SPLIT_STREAM)
        picked = rng.choice(len(candidates), size=min(wanted, len(candidates)), replace=False)
        dev.update(candidates[k] for k in picked)
    return dev


def _kept(count: int, fraction: float) -> int:
    """``ceil(fraction * count)`` (at least 1 of a non-empty set), robust to ``0.1 * 30 = 3.0000000000000004``."""
    return min(count, max(1, math.ceil(round(fraction * count, 9)))) if count else 0


def subsample_training(
    utt2spk: dict[str, str],
    fraction: float,
    by: str = "utterances",
    *,
    seed: int,
    spk2gender: dict[str, str] | None = None,
    dev_speakers=(),
) -> set[str]:
    """The training utterances kept at ``fraction`` of the training set (``utt2spk``: the training ones).

    ``by="utterances"``: every speaker stays, with ``ceil(fraction * n)`` of its ``n`` utterances;
    ``by="speakers"``: ``ceil(fraction * S)`` of the ``S`` speakers of each stratum (gender from
    ``spk2gender``, and whether the speaker is in ``dev_speakers``) stay, with all their utterances.
    Each speaker's utterances, and each stratum's speakers, are taken in one order drawn from
    ``(seed, speaker)`` (``(seed, stratum)``) alone: the subsets of every fraction are nested, and
    the same on every run.

    >>> utt2spk = {f"{s}-{k}": s for s in "abcd" for k in range(4)}
    >>> half = subsample_training(utt2spk, 0.5, seed=1)
    >>> quarter = subsample_training(utt2spk, 0.25, seed=1)
    >>> len(half), len(quarter), quarter < half, {u[0] for u in quarter} == set("abcd")
    (8, 4, True, True)
    >>> sorted({u[0] for u in subsample_training(utt2spk, 0.5, "speakers", seed=1)})
    ['c', 'd']
    """
    if by not in TRAIN_SUBSAMPLES:
        raise ValueError(f"train_subsample: unknown {by!r}; choose from {TRAIN_SUBSAMPLES}")
    if not 0 < fraction <= 1:
        raise ValueError(f"train_fraction must be in (0, 1], got {fraction}")
    by_speaker = group_by_speaker(sorted(utt2spk), utt2spk)
    if fraction == 1:
        return set(utt2spk)
    if by == "utterances":
        kept = set()
        for spk, utts in sorted(by_speaker.items()):
            order = seeded_rng(seed, 0, spk, stream=_SUBSET_STREAM).permutation(len(utts))
            kept.update(utts[k] for k in order[: _kept(len(utts), fraction)])
        return kept
    genders = spk2gender or {}
    dev_speakers = set(dev_speakers)
    strata: dict[str, list[str]] = {}
    for spk in sorted(by_speaker):
        strata.setdefault(f"{genders.get(spk, '')}/{'dev' if spk in dev_speakers else 'train'}", []).append(
            spk
        )
    kept = set()
    for stratum, speakers in sorted(strata.items()):
        order = seeded_rng(seed, 0, f"speakers/{stratum}", stream=_SUBSET_STREAM).permutation(len(speakers))
        for k in order[: _kept(len(speakers), fraction)]:
            kept.update(by_speaker[speakers[k]])
    return kept


def _write_csv(path: Path, fields, rows) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(fields)
        writer.writerows(rows)
    os.replace(tmp, path)  # a killed run never leaves a half-written manifest under the real name


def prepare_vpac_training(
    data_folder,
    system: str,
    output_folder,
    *,
    folder_overrides: dict | None = None,
    mode: str = "concat",
    sentence_len: float = 3.0,
    dev_ratio: float = DEV_RATIO,
    min_chunk_amplitude: float | None = MIN_CHUNK_AMPLITUDE,
    seed: int = 1986,
    sample_rate: int = SAMPLE_RATE,
    check_workers: int = 8,
    check_audio: str = "full",
    bad_audio: str = "error",
    min_audio_duration: float = 0.0,
    silence_db: float | None = -60.0,
    audio_check_cache=None,
    protocol: str | None = None,
    language: str | None = None,
    train_fraction: float = 1.0,
    train_subsample: str = "utterances",
    dev_utterances: set[str] | None = None,
) -> dict:
    """Prepare one system's training data (call it under ``run_on_main``).

    Parameters
    ----------
    data_folder : path
        The challenge data root (``<root>/<SYS>/data/...``); relative ``wav.scp``
        paths are resolved against it.
    system : str
        e.g. ``"T8-5"``.
    output_folder : path
        Where the manifests go.
    folder_overrides : dict, optional
        ``{system: {set: folder name}}`` (see :func:`segreconcat_aug.data.vpac.system_folders`).
    mode : {"concat", "rearranged", "none"}
        The SegReConcat mode; ``concat`` doubles the training rows.
    sentence_len : float
        Crop and dev-chunk length in seconds.
    dev_ratio : float
        Share of each training speaker's utterances held out for dev (VPC 2024: 10 %).
    min_chunk_amplitude : float or None
        Fixed ``sentence_len`` chunks whose mean absolute amplitude is below it
        count as silent: no training row, no dev chunk (VPC 2024's ``amp_th``
        5e-4). ``None`` or 0 keeps every chunk (and reads no audio beyond headers).
    seed : int
        Fixes the dev split.
    sample_rate : int
    check_workers : int
        Threads checking the audio.
    check_audio : {"full", "header"}, bad_audio : {"error", "skip"}
        How deep the audio check goes, and what a file failing it does: stop here
        (naming every such file) or be left out of training (counted in the summary).
    min_audio_duration : float
        Seconds; shorter files fail the check.
    silence_db : float or None
        RMS level (dBFS) under which a file is silent (``full`` only).
    audio_check_cache : path, optional
        Measurements by file signature (default ``<output_folder>/audio_check.jsonl``):
        the check runs on every call, and a rerun only decodes files that changed.
    protocol, language : str, optional
        Whose training set (:mod:`segreconcat_aug.data.protocols`; default ``vpac2024``); a Track 2 language.
    train_fraction : float, train_subsample : {"utterances", "speakers"}
        Train on this share of the training utterances (after the dev split), subsampled per speaker or
        by speakers (:func:`subsample_training`, seeded by ``seed``; 1: all, the default).
    dev_utterances : set of str, optional
        The held-out utterance ids, given rather than drawn (:func:`prepare_pooled_training` gives every
        pooled system the same source utterances); those this set lacks go to training.

    Returns
    -------
    dict
        ``train`` and ``dev`` (manifest paths), ``summary`` (counts) and
        ``skipped`` (True when an earlier run with the same inputs was reused).
    """
    output = Path(output_folder)
    folder = training_folder(data_folder, system, folder_overrides, protocol=protocol, language=language)
    factor = augmented_factor(mode)
    if sentence_len <= 0:
        raise ValueError(f"sentence_len must be > 0 seconds, got {sentence_len}")
    if train_subsample not in TRAIN_SUBSAMPLES or not 0 < float(train_fraction) <= 1:
        raise ValueError(
            f"train_fraction {train_fraction!r} / train_subsample {train_subsample!r}: expected a fraction in "
            f"(0, 1] and one of {TRAIN_SUBSAMPLES}"
        )
    # The audio check runs every time, even when the manifests are reused: its cache makes
    # a rerun a stat per file, and a file changed since the last run is checked again.
    if min_chunk_amplitude is not None and not 0 <= float(min_chunk_amplitude) < 1:
        raise ValueError(f"min_chunk_amplitude must be in [0, 1) or null, got {min_chunk_amplitude}")
    min_chunk_amplitude = float(min_chunk_amplitude or 0.0)
    chunk = int(round(sentence_len * sample_rate))
    scheme = get_protocol(protocol)
    layout = detect_layout(data_folder, system, scheme.layout)
    kaldi = load_set_folder(folder, data_folder, scheme.train_set(language), layout)
    output.mkdir(parents=True, exist_ok=True)
    # The full check decodes every file anyway: it measures the chunk amplitudes in the same pass.
    frames, chunk_means = check_training_audio(
        kaldi.wav,
        sample_rate,
        workers=check_workers,
        problems_file=output / PROBLEMS_FILE,
        mode=check_audio,
        bad_audio=bad_audio,
        min_duration=min_audio_duration,
        silence_db=silence_db,
        cache=audio_check_cache or output / AUDIO_CHECK_CACHE,
        chunk=chunk if min_chunk_amplitude > 0 else None,
    )
    bad = sorted(set(kaldi.wav) - set(frames))
    params = {
        "data_folder": str(Path(data_folder).resolve()),
        "system": system,
        "factor": factor,
        "sentence_len": float(sentence_len),
        "dev_ratio": float(dev_ratio),
        "min_chunk_amplitude": min_chunk_amplitude,
        "seed": int(seed),
        "sample_rate": int(sample_rate),
        "bad_audio_left_out": hashlib.sha256("\n".join(bad).encode()).hexdigest() if bad else None,
    }
    if dev_utterances is not None:
        params["dev_utterances"] = hashlib.sha256("\n".join(sorted(dev_utterances)).encode()).hexdigest()
    if float(train_fraction) != 1:  # a full run's signature stays what it was before fractions existed
        params.update(train_fraction=float(train_fraction), train_subsample=train_subsample)
    signature = input_signature(folder, params)
    paths = {"train": output / TRAIN_CSV, "dev": output / DEV_CSV}
    signature_path = output / SIGNATURE_FILE
    if signature_path.is_file() and all(path.is_file() for path in paths.values()):
        try:
            previous = json.loads(signature_path.read_text(encoding="utf-8"))
        except json.JSONDecodeError:
            previous = None
        if previous == signature:
            summary = json.loads((output / SUMMARY_FILE).read_text(encoding="utf-8"))
            logger.info("Training data of %s already prepared in %s (same inputs): skipping", system, output)
            return {**paths, "summary": summary, "skipped": True}

    logger.info("Preparing training data of %s from %s", system, folder)
    if bad:
        kaldi.wav = {utt: path for utt, path in kaldi.wav.items() if utt in frames}
    durations = {utt: count / sample_rate for utt, count in frames.items()}
    if kaldi.utt2dur is not None:
        off = [u for u, d in durations.items() if abs(kaldi.utt2dur.get(u, d) - d) > _DURATION_TOLERANCE]
        if off:
            logger.warning(
                "%s: %d durations differ from the audio by more than %.2f s (audio used), first: %s",
                folder / "utt2dur",
                len(off),
                _DURATION_TOLERANCE,
                off[:5],
            )

    utt2spk = {utt: kaldi.utt2spk[utt] for utt in kaldi.wav}
    if dev_utterances is None:
        dev = split_dev(utt2spk, durations, dev_ratio=dev_ratio, min_duration=sentence_len, seed=seed)
    else:
        dev = set(dev_utterances) & set(utt2spk)
    kept = subsample_training(
        {utt: spk for utt, spk in utt2spk.items() if utt not in dev},
        float(train_fraction),
        train_subsample,
        seed=seed,
        spk2gender=kaldi.spk2gender,
        dev_speakers={utt2spk[utt] for utt in dev},
    )
    silent = {}
    if min_chunk_amplitude > 0 and check_audio == "full":
        silent = {utt: chunk_means[utt] < min_chunk_amplitude for utt in kaldi.wav}
    elif min_chunk_amplitude > 0:  # the header check decoded nothing: one decoding pass for the filter
        silent = silent_chunk_flags(kaldi.wav, chunk, min_chunk_amplitude, workers=check_workers)
    train_rows, short, all_silent, silent_train_chunks = [], [], [], 0
    for utt in kaldi.wav:
        if utt in dev or utt not in kept:
            continue
        quiet = int(silent[utt].sum()) if utt in silent else 0
        silent_train_chunks += quiet
        rows = crop_rows(durations[utt] - quiet * sentence_len, sentence_len, factor)
        if rows == 0:
            (all_silent if quiet else short).append(utt)
        for k in range(rows):
            train_rows.append((f"{utt}@{k}", utt, kaldi.wav[utt], f"{durations[utt]:.4f}", utt2spk[utt]))
    if not train_rows:
        raise DataPrepError(
            f"{folder}: no training rows: all {len(kaldi.wav)} utterances are shorter than one "
            f"{sentence_len} s crop (x{factor} in {mode} mode) or silent ({len(all_silent)} of them: "
            f"every chunk's mean |amplitude| is below min_chunk_amplitude={min_chunk_amplitude})"
        )
    train_speakers = {row[4] for row in train_rows}
    dev_rows, orphan_dev, silent_dev_chunks = [], [], 0
    for utt in sorted(dev):
        if utt2spk[utt] not in train_speakers:
            orphan_dev.append(utt)
            continue
        for k, (start, stop) in enumerate(dev_chunks(frames[utt], chunk)):
            if utt in silent and silent[utt][k]:
                silent_dev_chunks += 1
                continue
            dev_rows.append(
                (f"{utt}@{k}", utt, kaldi.wav[utt], start, stop, f"{sentence_len:.4f}", utt2spk[utt])
            )
    if short:
        logger.info(
            "%d of %d training utterances are shorter than one %.1f s crop (x%d) and give no row, first: %s",
            len(short),
            len(kaldi.wav) - len(dev),
            sentence_len,
            factor,
            short[:5],
        )
    if silent_train_chunks or silent_dev_chunks:
        logger.info(
            "%d training and %d dev chunks of %.1f s have a mean |amplitude| below %g: left out "
            "(%d utterances left with no row)",
            silent_train_chunks,
            silent_dev_chunks,
            sentence_len,
            min_chunk_amplitude,
            len(all_silent),
        )
    if not dev_rows:
        logger.warning(
            "%s: the dev set is empty (dev_ratio=%s); early stopping has no dev loss", folder, dev_ratio
        )

    summary = {
        "system": system,
        "folder": str(folder),
        "utterances": len(kaldi.wav),
        "speakers": len(set(utt2spk.values())),
        "train_speakers": len(train_speakers),
        "train_rows": len(train_rows),
        "train_hours": round(sum(durations[u] for u in kept) / 3600, 3),
        "train_utterances": len(kept),
        "train_fraction": float(train_fraction),
        "train_subsample": train_subsample,
        "short_utterances_dropped": len(short),
        "silent_train_chunks_dropped": silent_train_chunks,
        "silent_dev_chunks_dropped": silent_dev_chunks,
        "silent_utterances_dropped": len(all_silent),
        "dev_utterances": len(dev) - len(orphan_dev),
        "dev_utterances_dropped_no_train_speaker": len(orphan_dev),
        "dev_rows": len(dev_rows),
        "factor": factor,
        "bad_audio_left_out": len(bad),
    }
    signature_path.unlink(missing_ok=True)  # invalid until every file below is complete
    _write_csv(paths["train"], TRAIN_FIELDS, train_rows)
    _write_csv(paths["dev"], DEV_FIELDS, dev_rows)
    (output / SUMMARY_FILE).write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    signature_path.write_text(json.dumps(signature, indent=2) + "\n", encoding="utf-8")
    logger.info("Prepared %s: %s", system, summary)
    return {**paths, "summary": summary, "skipped": False}


POOLED_FOLDER = "pooled"
POOLED_TRAIN_FIELDS = (*TRAIN_FIELDS, "system")
POOLED_DEV_FIELDS = (*DEV_FIELDS, "system")


class PooledSystemsError(DataPrepError):
    """``train_systems`` names a system this data folder does not have."""


def _read_csv(path: Path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as fin:
        return list(csv.DictReader(fin))


def prepare_pooled_training(data_folder, systems: list[str], output_folder, **options) -> dict:
    """Pool several systems' anonymized training sets (``train_systems``) into one pair of manifests.

    The label is the source speaker: VPAC 2024's systems anonymize the same train-clean-360 speakers
    and utterances under the same ids. The dev split is drawn once, on the first system (the attacked
    one), by source utterance id, and the same utterances are held out of every system: no source
    utterance is in training for one system and in dev for another. Each system is prepared on its own
    in ``<output_folder>/pooled/<system>/`` (its audio check, silent chunks, crops); ``train.csv`` and
    ``dev.csv`` in ``output_folder`` join them with a ``system`` column and row ids ``<system>/<ID>``
    (``utt_id`` stays the source utterance id: the key is ``(system, utt_id)``).
    """
    output = Path(output_folder)
    for name in systems:  # every system's training folder, before anything is written
        try:
            training_folder(
                data_folder,
                name,
                options.get("folder_overrides"),
                protocol=options.get("protocol"),
                language=options.get("language"),
            )
        except UserError as exc:
            first_line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise PooledSystemsError(
                f"train_systems: system {name!r} has no training set: {first_line}"
            ) from exc
    first = prepare_vpac_training(data_folder, systems[0], output / POOLED_FOLDER / systems[0], **options)
    dev = {row["utt_id"] for row in _read_csv(first["dev"])}
    parts = {systems[0]: first}
    for name in systems[1:]:
        parts[name] = prepare_vpac_training(
            data_folder, name, output / POOLED_FOLDER / name, dev_utterances=dev, **options
        )
    train_rows, dev_rows = [], []
    for name, part in parts.items():
        for rows, path in ((train_rows, part["train"]), (dev_rows, part["dev"])):
            rows.extend({**row, "ID": f"{name}/{row['ID']}", "system": name} for row in _read_csv(path))
    paths = {"train": output / TRAIN_CSV, "dev": output / DEV_CSV}
    _write_csv(
        paths["train"], POOLED_TRAIN_FIELDS, [tuple(r[f] for f in POOLED_TRAIN_FIELDS) for r in train_rows]
    )
    _write_csv(paths["dev"], POOLED_DEV_FIELDS, [tuple(r[f] for f in POOLED_DEV_FIELDS) for r in dev_rows])
    summary = {
        "systems": list(parts),
        "per_system": {name: part["summary"] for name, part in parts.items()},
        "train_rows": len(train_rows),
        "dev_rows": len(dev_rows),
        "speakers": len({row["spk_id"] for row in train_rows}),
    }
    (output / SUMMARY_FILE).write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    logger.info(
        "Pooled training data of %s: %s", list(parts), {k: v for k, v in summary.items() if k != "per_system"}
    )
    return {**paths, "summary": summary, "skipped": all(part["skipped"] for part in parts.values())}


def prepare_from_hparams(hparams) -> dict:
    """:func:`prepare_vpac_training` with the training YAML's keys (the recipe runs it under ``run_on_main``);
    :func:`prepare_pooled_training` when ``train_systems`` lists systems."""
    if hparams.get("train_systems"):
        return prepare_pooled_training(
            hparams["data_folder"],
            pooled_systems(hparams["system"], hparams["train_systems"]),
            hparams["output_folder"],
            **_prep_options(hparams),
        )
    return prepare_vpac_training(
        hparams["data_folder"], hparams["system"], hparams["output_folder"], **_prep_options(hparams)
    )


def _prep_options(hparams) -> dict:
    return dict(
        folder_overrides=hparams["folder_overrides"],
        mode=hparams["mode"],
        sentence_len=hparams["sentence_len"],
        dev_ratio=hparams["dev_ratio"],
        min_chunk_amplitude=hparams["min_chunk_amplitude"],
        seed=hparams["seed"],
        sample_rate=hparams["sample_rate"],
        check_workers=hparams["check_workers"],
        check_audio=hparams.get("check_audio", "full"),
        bad_audio=hparams.get("bad_audio", "error"),
        min_audio_duration=hparams.get("min_audio_duration", 0.0),
        silence_db=hparams.get("silence_db", -60.0),
        audio_check_cache=hparams.get("audio_check_cache"),
        protocol=hparams.get("protocol"),
        language=hparams.get("language"),
        train_fraction=hparams.get("train_fraction", 1.0),
        train_subsample=hparams.get("train_subsample", "utterances"),
    )

"""Training data of one challenge system: checked audio, a fixed dev split, CSV manifests.

>>> [PrepOptions(mode=mode).factor for mode in ("concat", "rearranged", "none")]
[2, 1, 1]
>>> dev_chunks(50000, chunk=16000)
[(0, 16000), (16000, 32000), (32000, 48000)]
"""

from __future__ import annotations

import csv
import hashlib
import json
import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, fields
from pathlib import Path

import numpy as np
import soundfile
from tqdm import tqdm

from ..data.audio import SAMPLE_RATE, read_audio
from ..data.audio_check import (
    check_audio_files,
    measure_file,
    problem_message,
    write_problem_list,
)
from ..data.protocols import get_protocol
from ..data.result_files import atomic_writer, file_digest
from ..data.vpac import detect_layout, load_set_folder, training_folder
from ..errors import UserError, cite
from ..method.augment import MODES
from .pooled import pooled_systems
from .splits import DEV_RATIO, split_dev, subsample_training

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
#: VPC 2024's training data preparation (its libri_prepare.py): 3 s chunks with mean |amplitude| under
#: 5e-4 dropped (``amp_th``); its dev share is :data:`~segreconcat_aug.training.splits.DEV_RATIO`.
MIN_CHUNK_AMPLITUDE = 5e-4
_DURATION_TOLERANCE = 0.05  # seconds; utt2dur is rounded to ms, headers are exact


class DataPrepError(UserError, ValueError):
    """The training data of a system cannot be prepared."""


class AudioCheckError(DataPrepError):
    """Audio files failed the audio check: missing, unreadable, truncated, NaN, silent, ... (all listed)."""


def dev_chunks(num_samples: int, chunk: int) -> list[tuple[int, int]]:
    """Consecutive ``[start, stop)`` chunks of ``chunk`` samples (the tail is left out)."""
    return [(k * chunk, (k + 1) * chunk) for k in range(num_samples // chunk)]


def silent_chunk_flags(
    wav: dict[str, str], chunk: int, threshold: float, *, workers: int = 8
) -> dict[str, np.ndarray]:
    """Utterance -> one bool per fixed chunk: True where the chunk's mean ``|x|`` is below ``threshold``."""

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


def _write_csv(path: Path, fields, rows) -> None:
    with atomic_writer(path, newline="") as handle:  # a killed run leaves no half-written manifest
        writer = csv.writer(handle)
        writer.writerow(fields)
        writer.writerows(rows)


@dataclass(frozen=True)
class PrepOptions:
    """How one system's training data is prepared: the training YAML's keys of the same names, each
    explained there (hparams/ecapa_segreconcat.yaml); the defaults are VPC 2024's recipe's."""

    folder_overrides: dict | None = None
    mode: str = "concat"
    sentence_len: float = 3.0
    dev_ratio: float = DEV_RATIO
    min_chunk_amplitude: float | None = MIN_CHUNK_AMPLITUDE
    seed: int = 1986
    sample_rate: int = SAMPLE_RATE
    check_workers: int = 8
    check_audio: str = "full"
    bad_audio: str = "error"
    min_audio_duration: float = 0.0
    silence_db: float | None = -60.0
    audio_check_cache: str | None = None
    protocol: str | None = None
    language: str | None = None
    train_fraction: float = 1.0
    train_subsample: str = "utterances"

    @classmethod
    def from_hparams(cls, hparams) -> PrepOptions:
        """The options from a loaded training YAML (a key it lacks keeps its default)."""
        return cls(**{key.name: hparams[key.name] for key in fields(cls) if key.name in hparams})

    @property
    def factor(self) -> int:
        """How many times longer the training audio is after SegReConcat in ``mode``."""
        if self.mode not in MODES:
            raise ValueError(f"unknown mode {self.mode!r}; choose from {MODES}")
        return 2 if self.mode == "concat" else 1

    @property
    def amplitude_threshold(self) -> float:
        """``min_chunk_amplitude``, 0 when no chunk is filtered."""
        return float(self.min_chunk_amplitude or 0.0)

    @property
    def chunk(self) -> int:
        """``sentence_len`` in samples."""
        return int(round(self.sentence_len * self.sample_rate))

    def training_folder(self, data_folder, system: str) -> Path:
        """The system's training set folder under the protocol (:func:`segreconcat_aug.data.vpac.training_folder`)."""
        return training_folder(
            data_folder, system, self.folder_overrides, protocol=self.protocol, language=self.language
        )

    def signature(self, folder: Path, data_folder, system: str, bad: list[str], dev_utterances) -> dict:
        """What the manifests of ``folder`` depend on: the list files' contents and the parameters."""
        lists = {
            name: file_digest(folder / name).removeprefix("sha256:") if (folder / name).is_file() else None
            for name in ("wav.scp", "utt2spk", "utt2dur")
        }
        params = {
            "data_folder": str(Path(data_folder).resolve()),
            "system": system,
            "factor": self.factor,
            "sentence_len": float(self.sentence_len),
            "dev_ratio": float(self.dev_ratio),
            "min_chunk_amplitude": self.amplitude_threshold,
            "seed": int(self.seed),
            "sample_rate": int(self.sample_rate),
            "bad_audio_left_out": hashlib.sha256("\n".join(bad).encode()).hexdigest() if bad else None,
        }
        if dev_utterances is not None:
            params["dev_utterances"] = hashlib.sha256("\n".join(sorted(dev_utterances)).encode()).hexdigest()
        if float(self.train_fraction) != 1:  # a full run's signature names no fraction
            params.update(train_fraction=float(self.train_fraction), train_subsample=self.train_subsample)
        return {"version": PREP_VERSION, "folder": str(folder.resolve()), "lists": lists, "params": params}


def check_training_audio(wav: dict[str, str], options: PrepOptions, output: Path):
    """Check every file (:func:`segreconcat_aug.data.audio_check.check_audio_files`) as ``options`` say:
    ``check_audio: full`` decodes each file (NaN samples, truncation, silence), ``header`` opens it.

    Returns ``(frames, chunk_means, rates)``; under a protocol that resamples (VPC 2026), files at another
    rate pass and are measured resampled. Files with a problem are listed in ``<output>/audio_problems.txt``.
    """
    resample = get_protocol(options.protocol).convention("eval_resample")
    report = check_audio_files(
        wav,
        mode=options.check_audio,
        sample_rate=None if resample else options.sample_rate,
        min_duration=options.min_audio_duration,
        silence_db=options.silence_db,
        workers=options.check_workers,
        cache=options.audio_check_cache or output / AUDIO_CHECK_CACHE,
        chunk=options.chunk if options.check_audio == "full" and options.amplitude_threshold > 0 else None,
    )
    if not report.problems:
        return report.frames, report.chunk_means, report.rates
    listed = write_problem_list(report.problems, output / PROBLEMS_FILE)
    message = problem_message(report.problems, len(wav), "audio files", listed)
    if any(problem.kind == "sample_rate" for problem in report.problems):
        rate, protocol = options.sample_rate, get_protocol(options.protocol).name
        message += (
            f"; training under {protocol} reads audio at {rate} Hz only (the VPC 2026 protocols resample "
            f"it): resample those files to {rate} Hz (e.g. sox <in> -r {rate} <out>) and list them in wav.scp"
        )
    if options.bad_audio == "error":
        # The list outlives a removed output folder (cli.run_main moves it beside and says where).
        raise cite(
            AudioCheckError(f"{message} (bad_audio: skip leaves them out of training instead)"), listed
        )
    logger.warning("%s\nbad_audio: skip -> these utterances are left out of training", message)
    bad = {problem.utt for problem in report.problems}
    frames = {utt: frames for utt, frames in report.frames.items() if utt not in bad}
    return frames, report.chunk_means, report.rates


def _measure_at_training_rate(
    wav: dict[str, str], frames: dict, chunk_means: dict, rates: dict, options: PrepOptions
):
    """Frames and silent-chunk flags (empty when no chunk is filtered) of the audio the training reads.

    The full check measured both; files at another rate are measured on their resampled audio
    (:func:`~segreconcat_aug.data.audio.read_audio` with ``resample``), and after a header check the
    others' chunks take one decoding pass (:func:`silent_chunk_flags`)."""
    frames, chunk_means = dict(frames), dict(chunk_means)
    chunk, threshold = options.chunk, options.amplitude_threshold
    for utt in [utt for utt in frames if rates[utt] != options.sample_rate]:
        audio = read_audio(wav[utt], sample_rate=options.sample_rate, resample=True)
        frames[utt] = len(audio)
        if threshold > 0:
            whole = np.abs(audio[: len(audio) // chunk * chunk]).astype(np.float64)
            chunk_means[utt] = whole.reshape(-1, chunk).sum(axis=1) / chunk
    if threshold <= 0:
        return frames, {}
    silent = {utt: chunk_means[utt] < threshold for utt in wav if utt in chunk_means}
    if options.check_audio != "full":
        rest = {utt: path for utt, path in wav.items() if utt not in silent}
        silent.update(silent_chunk_flags(rest, chunk, threshold, workers=options.check_workers))
    return frames, silent


def skip(output: Path, signature: dict) -> bool:
    """Whether ``output`` holds both manifests, prepared from the inputs of ``signature``."""
    signature_path = output / SIGNATURE_FILE
    if not (signature_path.is_file() and all((output / name).is_file() for name in (TRAIN_CSV, DEV_CSV))):
        return False
    try:
        return json.loads(signature_path.read_text(encoding="utf-8")) == signature
    except json.JSONDecodeError:
        return False


def prepare_vpac_training(
    data_folder, system: str, output_folder, options: PrepOptions = PrepOptions(), dev_utterances=None
) -> dict:
    """Prepare one system's training data (call it under ``run_on_main``)."""
    output = Path(output_folder)
    folder = options.training_folder(data_folder, system)
    scheme = get_protocol(options.protocol)
    layout = detect_layout(data_folder, system, scheme.layout)
    # Training has no option that runs wav.scp pipes.
    kaldi = load_set_folder(folder, data_folder, scheme.train_set(options.language), layout, pipes_key=None)
    output.mkdir(parents=True, exist_ok=True)
    # The audio check runs every time, even when the manifests are reused: its cache makes a rerun a
    # stat per file, and a file changed since the last run is checked again. The full check decodes
    # every file anyway: it measures the chunk amplitudes in the same pass.
    frames, chunk_means, rates = check_training_audio(kaldi.wav, options, output)
    bad = sorted(set(kaldi.wav) - set(frames))
    signature = options.signature(folder, data_folder, system, bad, dev_utterances)
    paths = {"train": output / TRAIN_CSV, "dev": output / DEV_CSV}
    if skip(output, signature):
        summary = json.loads((output / SUMMARY_FILE).read_text(encoding="utf-8"))
        logger.info("Training data of %s already prepared in %s (same inputs): skipping", system, output)
        return {**paths, "summary": summary, "skipped": True}

    logger.info("Preparing training data of %s from %s", system, folder)
    kaldi.wav = {utt: path for utt, path in kaldi.wav.items() if utt in frames}
    frames, silent = _measure_at_training_rate(kaldi.wav, frames, chunk_means, rates, options)
    durations = _durations(frames, options.sample_rate, kaldi.utt2dur, folder / "utt2dur")
    utt2spk = {utt: kaldi.utt2spk[utt] for utt in kaldi.wav}
    dev, kept = _held_out_and_kept(utt2spk, kaldi.spk2gender, durations, options, dev_utterances)
    train = _train_rows(
        kaldi.wav, utt2spk, durations, [u for u in kaldi.wav if u not in dev and u in kept], silent, options
    )
    if not train.rows:
        raise DataPrepError(
            f"{folder}: no training rows: all {len(kaldi.wav)} utterances are shorter than one "
            f"{options.sentence_len} s crop (x{options.factor} in {options.mode} mode) or silent "
            f"({len(train.all_silent)} of them: every chunk's mean |amplitude| is below "
            f"min_chunk_amplitude={options.amplitude_threshold})"
        )
    train_speakers = {row[4] for row in train.rows}
    dev_rows, orphan_dev, silent_dev_chunks = _dev_rows(
        kaldi.wav, utt2spk, frames, dev, train_speakers, silent, options
    )
    _log_dropped(folder, train, dev_rows, silent_dev_chunks, len(kaldi.wav) - len(dev), options)
    summary = {
        "system": system,
        "folder": str(folder),
        "utterances": len(kaldi.wav),
        "speakers": len(set(utt2spk.values())),
        "train_speakers": len(train_speakers),
        "train_rows": len(train.rows),
        "train_hours": round(sum(durations[u] for u in kept) / 3600, 3),
        "train_utterances": len(kept),
        "train_fraction": float(options.train_fraction),
        "train_subsample": options.train_subsample,
        "short_utterances_dropped": len(train.short),
        "silent_train_chunks_dropped": train.silent_chunks,
        "silent_dev_chunks_dropped": silent_dev_chunks,
        "silent_utterances_dropped": len(train.all_silent),
        "dev_utterances": len(dev) - len(orphan_dev),
        "dev_utterances_dropped_no_train_speaker": len(orphan_dev),
        "dev_rows": len(dev_rows),
        "factor": options.factor,
        "bad_audio_left_out": len(bad),
    }
    signature_path = output / SIGNATURE_FILE
    signature_path.unlink(missing_ok=True)  # invalid until every file below is complete
    _write_csv(output / TRAIN_CSV, TRAIN_FIELDS, train.rows)
    _write_csv(output / DEV_CSV, DEV_FIELDS, dev_rows)
    (output / SUMMARY_FILE).write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    signature_path.write_text(json.dumps(signature, indent=2) + "\n", encoding="utf-8")
    logger.info("Prepared %s: %s", system, summary)
    return {**paths, "summary": summary, "skipped": False}


def _durations(frames: dict[str, int], sample_rate: int, utt2dur: dict | None, utt2dur_path: Path) -> dict:
    """Seconds per utterance from the headers; a ``utt2dur`` is only cross-checked (mismatches logged)."""
    durations = {utt: count / sample_rate for utt, count in frames.items()}
    if utt2dur is not None:
        off = [u for u, d in durations.items() if abs(utt2dur.get(u, d) - d) > _DURATION_TOLERANCE]
        if off:
            logger.warning(
                "%s: %d durations differ from the audio by more than %.2f s (audio used), first: %s",
                utt2dur_path,
                len(off),
                _DURATION_TOLERANCE,
                off[:5],
            )
    return durations


def _held_out_and_kept(utt2spk, spk2gender, durations, options: PrepOptions, dev_utterances):
    """The dev utterances (drawn, or ``dev_utterances`` given) and the training ones kept at ``train_fraction``."""
    if dev_utterances is None:
        dev = split_dev(
            utt2spk,
            durations,
            dev_ratio=options.dev_ratio,
            min_duration=options.sentence_len,
            seed=options.seed,
        )
    else:
        dev = set(dev_utterances) & set(utt2spk)
    kept = subsample_training(
        {utt: spk for utt, spk in utt2spk.items() if utt not in dev},
        float(options.train_fraction),
        options.train_subsample,
        seed=options.seed,
        spk2gender=spk2gender,
        dev_speakers={utt2spk[utt] for utt in dev},
    )
    return dev, kept


@dataclass
class _TrainRows:
    rows: list = field(default_factory=list)
    short: list = field(default_factory=list)  # shorter than one crop
    all_silent: list = field(default_factory=list)  # no crop left once the silent chunks are out
    silent_chunks: int = 0


def _train_rows(wav, utt2spk, durations, utts, silent, options: PrepOptions) -> _TrainRows:
    """The crops of the training utterances ``utts``: ``int(factor * seconds / sentence_len)`` each, the
    seconds of its silent chunks left out."""
    found = _TrainRows()
    for utt in utts:
        quiet = int(silent[utt].sum()) if utt in silent else 0
        found.silent_chunks += quiet
        rows = int(options.factor * (durations[utt] - quiet * options.sentence_len) / options.sentence_len)
        if rows == 0:
            (found.all_silent if quiet else found.short).append(utt)
        for k in range(rows):
            found.rows.append((f"{utt}@{k}", utt, wav[utt], f"{durations[utt]:.4f}", utt2spk[utt]))
    return found


def _dev_rows(wav, utt2spk, frames, dev, train_speakers, silent, options: PrepOptions):
    """The fixed chunks of the held-out utterances of training speakers; the others, and the silent chunks."""
    rows, orphans, silent_chunks = [], [], 0
    for utt in sorted(dev):
        if utt2spk[utt] not in train_speakers:
            orphans.append(utt)
            continue
        for k, (start, stop) in enumerate(dev_chunks(frames[utt], options.chunk)):
            if utt in silent and silent[utt][k]:
                silent_chunks += 1
                continue
            rows.append(
                (f"{utt}@{k}", utt, wav[utt], start, stop, f"{options.sentence_len:.4f}", utt2spk[utt])
            )
    return rows, orphans, silent_chunks


def _log_dropped(folder: Path, train: _TrainRows, dev_rows, silent_dev_chunks: int, training: int, options):
    if train.short:
        logger.info(
            "%d of %d training utterances are shorter than one %.1f s crop (x%d) and give no row, first: %s",
            len(train.short),
            training,
            options.sentence_len,
            options.factor,
            train.short[:5],
        )
    if train.silent_chunks or silent_dev_chunks:
        logger.info(
            "%d training and %d dev chunks of %.1f s have a mean |amplitude| below %g: left out "
            "(%d utterances left with no row)",
            train.silent_chunks,
            silent_dev_chunks,
            options.sentence_len,
            options.amplitude_threshold,
            len(train.all_silent),
        )
    if not dev_rows:
        logger.warning(
            "%s: the dev set is empty (dev_ratio=%s); early stopping has no dev loss",
            folder,
            options.dev_ratio,
        )


POOLED_FOLDER = "pooled"
POOLED_TRAIN_FIELDS = (*TRAIN_FIELDS, "system")
POOLED_DEV_FIELDS = (*DEV_FIELDS, "system")


class PooledSystemsError(DataPrepError):
    """``train_systems`` names a system this data folder does not have."""


def _read_csv(path: Path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as fin:
        return list(csv.DictReader(fin))


def prepare_pooled_training(
    data_folder, systems: list[str], output_folder, options: PrepOptions = PrepOptions()
) -> dict:
    """Pool several systems' anonymized training sets (``train_systems``) into one pair of manifests.

    The dev split is drawn once, on the first system, and held out of every system: no source
    utterance is in training for one system and in dev for another.
    """
    output = Path(output_folder)
    for name in systems:  # every system's training folder, before anything is written
        try:
            options.training_folder(data_folder, name)
        except UserError as exc:
            first_line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise PooledSystemsError(
                f"train_systems: system {name!r} has no training set: {first_line}"
            ) from exc
    first = prepare_vpac_training(data_folder, systems[0], output / POOLED_FOLDER / systems[0], options)
    dev = {row["utt_id"] for row in _read_csv(first["dev"])}
    parts = {systems[0]: first}
    for name in systems[1:]:
        parts[name] = prepare_vpac_training(
            data_folder, name, output / POOLED_FOLDER / name, options, dev_utterances=dev
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
    options = PrepOptions.from_hparams(hparams)
    if hparams.get("train_systems"):
        systems = pooled_systems(hparams["system"], hparams["train_systems"])
        return prepare_pooled_training(hparams["data_folder"], systems, hparams["output_folder"], options)
    return prepare_vpac_training(hparams["data_folder"], hparams["system"], hparams["output_folder"], options)

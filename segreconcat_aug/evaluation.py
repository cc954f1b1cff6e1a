"""Score a trained attacker exactly as the VoicePrivacy Attacker Challenge 2024 does.

Per system, for each of dev / test and female / male:

1. read the enrollment folder (speakers grouped by its ``utt2spk``, utterances
   from its ``enrolls`` list when present) and the trial list
   (``<enroll-spk> <test-utt> target|nontarget``);
2. embed every enrollment and trial utterance WHOLE with the trained model
   (Fbank -> sentence mean normalization -> ECAPA-TDNN), batched by similar
   duration and cached to disk, so rescoring is instant; each wave is first
   normalized as the challenge's extraction does (:func:`vpc_normalize_wave`:
   pyloudnorm to -30 LUFS, then division by the peak) and its leading and
   trailing zeros are trimmed (:func:`trim_zeros`);
3. enrollment model = mean of the speaker's raw embeddings; score = cosine
   similarity of enrollment model and test embedding;
4. EER (SpeechBrain's definition, :mod:`segreconcat_aug.metrics`) and
   normalized minDCF per subset; the table averages as the paper's Table 2.

Switches: ``eval_normalize_wave`` and ``eval_trim_zeros`` (both on, as the
challenge's extraction; off gives the raw waves), and score normalization,
off by default as the paper uses none (``s-norm`` or ``as-norm`` against a
cohort drawn from the system's training speakers).

:func:`evaluate_system` is the entry point used by ``recipes/evaluate.py`` and
by the training recipe's last stage.

Example
-------
>>> enroll, test = np.array([[1.0, 0.0], [0.0, 2.0]]), np.array([[3.0, 0.0], [1.0, 1.0]])
>>> [round(float(s), 4) for s in cosine_scores(enroll, test)]
[1.0, 0.7071]
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from speechbrain.utils.distributed import infer_device
from tqdm import tqdm

from .audio import SAMPLE_RATE, audio_duration, read_audio
from .audio_check import check_audio_files, file_signature, problem_message, write_problem_list
from .errors import UserError
from .kaldi import KaldiFolder, PipeCommand, group_by_speaker, load_kaldi_folder, read_trials
from .metrics import verification_metrics
from .report import table_averages, write_system_report
from .vpac import ENROLL_SETS, TRAIN_SET, TRIAL_SETS, system_folders

logger = logging.getLogger(__name__)

#: Subset names in the order of the paper's Table 2.
SUBSETS = ("dev_f", "dev_m", "test_f", "test_m")
SCORE_NORMS = (None, "s-norm", "as-norm")


class MissingExportError(UserError, FileNotFoundError):
    """No exported model where evaluation looks for one."""


class TrialListError(UserError, ValueError):
    """A trial list or enrollment folder cannot be scored as it is."""


class EmbeddingError(RuntimeError):
    """An utterance gave no usable (finite) embedding; the message names the utterance and its file."""


# ---------------------------------------------------------------------------------------------------
# Trials and enrollment
# ---------------------------------------------------------------------------------------------------


@dataclass
class Enrollment:
    """The enrollment utterances of one part (dev or test), grouped by speaker."""

    folder: Path
    wav: dict[str, str]
    speakers: dict[str, list[str]]
    utt2dur: dict[str, float] | None = None


@dataclass
class TrialList:
    """One subset's trials, checked against its enrollment and its folder's ``wav.scp``."""

    name: str
    path: Path
    enroll_speakers: list[str]
    test_utterances: list[str]
    targets: np.ndarray
    wav: dict[str, str]
    utt2dur: dict[str, float] | None = None
    skipped: int = 0
    # The utt2spk speaker of each test utterance (None where unknown), for the bootstrap.
    test_speakers: list | None = None

    def __len__(self) -> int:
        return len(self.targets)


def load_enrollment(folder: KaldiFolder) -> Enrollment:
    """Group the enrollment utterances of a folder by speaker (``utt2spk``).

    Utterances come from the ``enrolls`` list when the folder has one (every id
    must be in ``wav.scp``), else from ``wav.scp``.
    """
    if folder.enrolls is not None:
        unknown = [utt for utt in folder.enrolls if utt not in folder.wav]
        if unknown:
            raise TrialListError(
                f"{folder.path / 'enrolls'}: {len(unknown)} enrollment utterance(s) not in wav.scp, first: "
                f"{unknown[:5]}"
            )
        utterances = folder.enrolls
    else:
        utterances = folder.utterances
    if not utterances:
        raise TrialListError(f"{folder.path}: no enrollment utterances")
    return Enrollment(
        folder.path,
        {u: folder.wav[u] for u in utterances},
        group_by_speaker(utterances, folder.utt2spk),
        folder.utt2dur,
    )


def load_trial_list(
    name: str, folder: KaldiFolder, enrollment: Enrollment, skip_missing: bool = False
) -> TrialList:
    """Read and check ``<folder>/trials`` against ``enrollment`` and the folder's ``wav.scp``.

    Raises
    ------
    TrialListError
        On an empty list, a list with only targets or only non-targets, or (unless
        ``skip_missing``) a trial naming a speaker that is not enrolled or an
        utterance that is not in ``wav.scp``, naming file and line. Skipped trials
        are counted in ``TrialList.skipped`` and logged.
    """
    path = folder.path / "trials"
    # load_kaldi_folder parsed the file if there was one; read_trials says why there is none.
    trials = folder.trials if folder.trials is not None else read_trials(path)
    if not trials:
        raise TrialListError(f"{path}: no trials")
    keep = []
    skipped = 0
    for trial in trials:
        problem = None
        if trial.enroll_speaker not in enrollment.speakers:
            problem = (
                f"enrollment speaker {trial.enroll_speaker!r} has no utterance in {enrollment.folder} "
                f"(enrolled: {len(enrollment.speakers)} speakers)"
            )
        elif trial.test_utterance not in folder.wav:
            problem = f"test utterance {trial.test_utterance!r} is not in {folder.path / 'wav.scp'}"
        if problem is None:
            keep.append(trial)
        elif skip_missing:
            skipped += 1
        else:
            raise TrialListError(f"{path}:{trial.line}: {problem} (skip_missing_trials skips such trials)")
    if skipped:
        logger.warning(
            "%s: skipped %d of %d trials naming unknown speakers or utterances", path, skipped, len(trials)
        )
    if not keep:
        raise TrialListError(f"{path}: no trial left to score ({skipped} skipped)")
    targets = np.array([t.target for t in keep], dtype=bool)
    if targets.all() or not targets.any():
        kind = "target" if targets.all() else "non-target"
        raise TrialListError(
            f"{path}: all {len(keep)} trials are {kind} trials; the EER needs both targets and non-targets"
        )
    return TrialList(
        name=name,
        path=path,
        enroll_speakers=[t.enroll_speaker for t in keep],
        test_utterances=[t.test_utterance for t in keep],
        targets=targets,
        wav=folder.wav,
        utt2dur=folder.utt2dur,
        skipped=skipped,
        test_speakers=[folder.utt2spk.get(t.test_utterance) for t in keep],
    )


def load_system_trials(
    data_folder,
    system: str,
    folder_overrides: dict | None = None,
    subsets=SUBSETS,
    skip_missing: bool = False,
    allow_pipes: bool = False,
) -> tuple[dict[str, Enrollment], dict[str, TrialList]]:
    """Enrollments (by part) and trial lists (by subset name, e.g. ``dev_f``) of one system.

    Example
    -------
    >>> import tempfile, pathlib
    >>> root = pathlib.Path(tempfile.mkdtemp())
    >>> for name, extra in [("libri_dev_enrolls_S", {"enrolls": "a1\\n"}),
    ...                     ("libri_dev_trials_f_S", {"trials": "A t1 target\\nA t2 nontarget\\n"})]:
    ...     d = root / "S" / "data" / name; d.mkdir(parents=True)
    ...     utts = ["a1"] if "enrolls" in extra else ["t1", "t2"]
    ...     _ = (d / "wav.scp").write_text("".join(f"{u} {u}.wav\\n" for u in utts))
    ...     _ = (d / "utt2spk").write_text("".join(f"{u} {u[0].upper()}\\n" for u in utts))
    ...     for k, v in extra.items(): _ = (d / k).write_text(v)
    >>> enrollments, trials = load_system_trials(root, "S", subsets=["dev_f"])
    >>> enrollments["dev"].speakers, trials["dev_f"].targets.tolist()
    ({'A': ['a1']}, [True, False])
    """
    unknown = [s for s in subsets if s not in SUBSETS]
    if unknown:
        raise ValueError(f"unknown subset(s) {unknown}; subsets: {list(SUBSETS)}")
    parts = sorted({s.split("_")[0] for s in subsets}, key=["dev", "test"].index)
    sets = [ENROLL_SETS[p] for p in parts] + [TRIAL_SETS[tuple(s.split("_"))] for s in subsets]
    folders = system_folders(data_folder, system, folder_overrides, sets=sets)
    enrollments = {
        part: load_enrollment(
            load_kaldi_folder(folders[ENROLL_SETS[part]], root=data_folder, allow_pipes=allow_pipes)
        )
        for part in parts
    }
    trial_lists = {}
    for subset in subsets:
        part, gender = subset.split("_")
        folder = load_kaldi_folder(
            folders[TRIAL_SETS[(part, gender)]], root=data_folder, allow_pipes=allow_pipes
        )
        trial_lists[subset] = load_trial_list(subset, folder, enrollments[part], skip_missing=skip_missing)
    return enrollments, trial_lists


# ---------------------------------------------------------------------------------------------------
# Embeddings
# ---------------------------------------------------------------------------------------------------


#: The loudness VPC 2024's ``normalize_wave`` scales to before dividing by the peak.
TARGET_LUFS = -30.0


def loudness_block_size(duration: float) -> float:
    """pyloudnorm's gating block (seconds) as VPC 2024 sets it: 0.4 s, shorter for waves under 0.4 s.

    >>> loudness_block_size(3.0), loudness_block_size(0.3), round(loudness_block_size(0.05), 4)
    (0.4, 0.19999999999999998, 0.0499)
    """
    return 0.4 if duration >= 0.4 else min(duration - 0.0001, abs(duration - 0.1))


def vpc_normalize_wave(audio: np.ndarray, sample_rate: int = SAMPLE_RATE) -> tuple[np.ndarray, bool]:
    """VPC 2024's evaluation wave normalization (``evaluation/privacy/asv/utils.py: normalize_wave``).

    pyloudnorm measures the integrated loudness (block size :func:`loudness_block_size`),
    scales the wave to :data:`TARGET_LUFS`, then divides it by its peak, with the same
    numpy operations (float64 product and quotient, float32 result).

    Returns ``(wave, normalized)``. Where the loudness cannot be measured (every
    block below pyloudnorm's -70 LUFS gate, e.g. digital silence, so the gain
    would be infinite; or fewer samples than one block), the wave is returned
    unchanged with ``normalized`` False: what VPC's code means by its fallback
    (``except ZeroDivisionError: norm_wave = wave``), where the installed pyloudnorm
    would otherwise give NaN samples.

    >>> tone = 0.01 * np.sin(np.arange(16000) / 5.0).astype(np.float32)
    >>> wave, normalized = vpc_normalize_wave(tone)
    >>> normalized, round(float(np.abs(wave).max()), 6), wave.dtype
    (True, 1.0, dtype('float32'))
    >>> vpc_normalize_wave(np.zeros(8000, dtype=np.float32))[1]
    False
    """
    import warnings

    import pyloudnorm

    audio = np.asarray(audio, dtype=np.float32)
    duration = len(audio) / sample_rate
    block = loudness_block_size(duration)
    if len(audio) == 0 or block <= 0 or len(audio) < block * sample_rate:
        return audio, False
    meter = pyloudnorm.Meter(sample_rate, block_size=block)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # pyloudnorm warns of clipping; the peak division follows
        loudness = meter.integrated_loudness(audio)
        if not np.isfinite(loudness):
            return audio, False
        scaled = pyloudnorm.normalize.loudness(audio, loudness, TARGET_LUFS)
    peak = np.amax(np.abs(scaled))
    if not peak > 0 or not np.isfinite(peak):
        return audio, False
    return np.divide(scaled, peak).astype(np.float32), True


def trim_zeros(audio: np.ndarray) -> np.ndarray:
    """Drop leading and trailing exact zeros (VPC 2024's extractor: ``np.trim_zeros``).

    An all-zero wave is returned whole (trimming would leave nothing to embed).

    >>> trim_zeros(np.array([0, 0, 0.5, 0, -0.5, 0], dtype=np.float32)).tolist()
    [0.5, 0.0, -0.5]
    """
    trimmed = np.trim_zeros(audio)
    return trimmed if len(trimmed) else audio


def model_fingerprint(path, extra: dict | None = None) -> str:
    """A short hash of a checkpoint file's bytes and the extraction options (names the cache)."""
    digest = hashlib.sha1()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    digest.update(json.dumps(extra or {}, sort_keys=True).encode())
    return digest.hexdigest()[:16]


def source_signature(source) -> str:
    """What identifies an audio source's content for the embedding cache: size and mtime, or the pipe.

    >>> source_signature("/no/such/file")
    'missing'
    """
    if isinstance(source, PipeCommand):
        return f"pipe:{source}"
    signature = file_signature(source)
    return "missing" if signature is None else f"{signature[1]}:{signature[2]}"


class EmbeddingCache:
    """Embeddings of one folder, as ``shard-*.npz`` files (ids, file signatures, float32 matrix).

    Shards are written atomically while embedding runs, so an interrupted run
    resumes where it stopped. Each embedding is stored with its audio file's
    signature (:func:`source_signature`), so a file changed since is embedded
    again (a later shard's entry wins); a non-finite embedding is never stored,
    and one found in an older cache is not used.

    Example
    -------
    >>> import tempfile
    >>> cache = EmbeddingCache(tempfile.mkdtemp())
    >>> cache.add(["u1", "u2"], np.array([[1.0, 2.0], [np.nan, 0.0]]), ["10:1", "10:2"]); cache.flush()
    >>> again = EmbeddingCache(cache.folder); sorted(again.load()), again.signatures
    (['u1'], {'u1': '10:1'})
    """

    def __init__(self, folder):
        self.folder = Path(folder)
        self.signatures: dict[str, str] = {}
        self._pending_ids: list[str] = []
        self._pending_signatures: list[str] = []
        self._pending: list[np.ndarray] = []

    def load(self) -> dict[str, np.ndarray]:
        """Cached embeddings by id; ``self.signatures`` gets their files' signatures ("" if unknown)."""
        found: dict[str, np.ndarray] = {}
        for shard in sorted(self.folder.glob("shard-*.npz")):
            with np.load(shard) as data:
                ids = data["ids"].tolist()
                signatures = data["signatures"].tolist() if "signatures" in data else [""] * len(ids)
                for utt, signature, vector in zip(ids, signatures, data["embeddings"]):
                    if np.isfinite(vector).all():
                        found[utt], self.signatures[utt] = vector, signature
        return found

    def add(self, ids, embeddings: np.ndarray, signatures=None) -> None:
        """Queue embeddings (rows) of ``ids`` for the next shard; non-finite rows are left out."""
        embeddings = np.asarray(embeddings, dtype=np.float32)
        signatures = [""] * len(ids) if signatures is None else list(signatures)
        keep = np.isfinite(embeddings).all(axis=1)
        self._pending_ids.extend(utt for utt, ok in zip(ids, keep) if ok)
        self._pending_signatures.extend(sig for sig, ok in zip(signatures, keep) if ok)
        self._pending.append(embeddings[keep])

    def flush(self) -> None:
        if not self._pending_ids:
            self._pending = []
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        number = len(list(self.folder.glob("shard-*.npz")))
        target = self.folder / f"shard-{number:05d}.npz"
        partial = self.folder / f".partial-{number:05d}.npz"
        np.savez(
            partial,
            ids=np.array(self._pending_ids),
            signatures=np.array(self._pending_signatures),
            embeddings=np.concatenate(self._pending),
        )
        os.replace(partial, target)
        self._pending_ids, self._pending_signatures, self._pending = [], [], []


def duration_batches(durations: dict[str, float], batch_size: int, max_batch_seconds: float | None = None):
    """Utterance ids in batches of similar duration (sorted, longest first).

    A batch holds at most ``batch_size`` utterances and, when set, at most
    ``max_batch_seconds`` of padded audio (a longer single utterance still
    gets its own batch).

    >>> duration_batches({"a": 1.0, "b": 9.0, "c": 2.0, "d": 8.5}, batch_size=2)
    [['b', 'd'], ['c', 'a']]
    >>> duration_batches({"a": 1.0, "b": 9.0, "c": 2.0}, batch_size=8, max_batch_seconds=10)
    [['b'], ['c', 'a']]
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    order = sorted(durations, key=lambda utt: (-durations[utt], utt))
    batches, current = [], []
    for utt in order:
        # Sorted longest first, so the padded size of a batch is its first item's duration x its size.
        longest = durations[current[0]] if current else durations[utt]
        full = len(current) >= batch_size or (
            max_batch_seconds is not None and current and longest * (len(current) + 1) > max_batch_seconds
        )
        if full:
            batches.append(current)
            current = []
        current.append(utt)
    if current:
        batches.append(current)
    return batches


class EmbeddingExtractor:
    """Embeds whole utterances: Fbank -> sentence mean normalization -> embedding model.

    Parameters
    ----------
    compute_features, mean_var_norm, embedding_model : torch.nn.Module
        The training YAML's modules (the model already loaded with its weights).
    device : str
    batch_size : int
        Utterances per batch; batches group similar durations so padding stays small.
    max_batch_seconds : float or None
        Cap on padded seconds per batch (memory).
    normalize_wave : bool
        :func:`vpc_normalize_wave` each waveform first (VPC 2024's extraction does).
    trim_zeros : bool
        Then drop its leading and trailing zeros (:func:`trim_zeros`; VPC 2024 does).
    sample_rate : int
    allow_pipes : bool
        Accept ``wav.scp`` shell pipes.
    """

    def __init__(
        self,
        compute_features,
        mean_var_norm,
        embedding_model,
        device: str = "cpu",
        batch_size: int = 16,
        max_batch_seconds: float | None = 600.0,
        normalize_wave: bool = True,
        sample_rate: int = SAMPLE_RATE,
        save_every: int = 50,
        trim_zeros: bool = True,
    ):
        self.compute_features = compute_features.to(device).eval()
        self.mean_var_norm = mean_var_norm.to(device).eval()
        self.embedding_model = embedding_model.to(device).eval()
        self.device = device
        self.batch_size = int(batch_size)
        self.max_batch_seconds = max_batch_seconds
        self.normalize_wave = bool(normalize_wave)
        self.trim_zeros = bool(trim_zeros)
        self.not_normalized: list[str] = []  # sources whose loudness could not be measured
        self.sample_rate = int(sample_rate)
        self.save_every = int(save_every)

    def load_wave(self, source) -> np.ndarray:
        """The wave the model embeds: read, normalized and trimmed as the options say."""
        signal = read_audio(source, sample_rate=self.sample_rate)
        if self.normalize_wave:
            signal, normalized = vpc_normalize_wave(signal, self.sample_rate)
            if not normalized:
                self.not_normalized.append(str(source))
        if self.trim_zeros:
            signal = trim_zeros(signal)
        return signal

    @torch.no_grad()
    def embed_batch(self, sources: list) -> np.ndarray:
        """Embeddings (rows, float32) of a list of audio sources, zero-padded to the longest."""
        signals = [self.load_wave(source) for source in sources]
        longest = max(len(signal) for signal in signals)
        batch = torch.zeros(len(signals), longest)
        for row, signal in enumerate(signals):
            batch[row, : len(signal)] = torch.from_numpy(signal)
        lengths = torch.tensor([len(signal) / longest for signal in signals])
        batch, lengths = batch.to(self.device), lengths.to(self.device)
        feats = self.compute_features(batch)
        feats = self.mean_var_norm(feats, lengths)
        embeddings = self.embedding_model(feats, lengths)
        return embeddings.reshape(len(signals), -1).float().cpu().numpy()

    def embed(
        self,
        wav: dict[str, str],
        cache_folder,
        durations: dict[str, float] | None = None,
        desc: str = "embed",
    ) -> dict[str, np.ndarray]:
        """Embeddings of the utterances in ``wav`` (id -> source), read from / added to the cache.

        A cached embedding is used only if its file has not changed since (same
        size and modification time). A non-finite embedding is not cached: an
        :class:`EmbeddingError` names its utterances and files.
        """
        cache = EmbeddingCache(cache_folder)
        found = cache.load()
        signatures = {utt: source_signature(wav[utt]) for utt in wav}
        missing = [utt for utt in wav if utt not in found or cache.signatures.get(utt) != signatures[utt]]
        if missing:
            durations = durations or {}
            lengths = {
                utt: durations[utt] if utt in durations else audio_duration(wav[utt]) for utt in missing
            }
            batches = duration_batches(lengths, self.batch_size, self.max_batch_seconds)
            with tqdm(total=len(missing), desc=desc, unit="utt") as progress:
                for number, batch in enumerate(batches, start=1):
                    vectors = self.embed_batch([wav[utt] for utt in batch])
                    cache.add(batch, vectors, [signatures[utt] for utt in batch])
                    bad = [utt for utt, vector in zip(batch, vectors) if not np.isfinite(vector).all()]
                    if bad:
                        cache.flush()  # the finite ones are kept; the bad ones are embedded again next run
                        named = ", ".join(f"{utt} ({wav[utt]})" for utt in bad[:5])
                        raise EmbeddingError(
                            f"{len(bad)} utterance(s) gave a NaN or infinite embedding: {named}; check their "
                            "audio for NaN or infinite samples (check_audio: full finds them) or the model"
                        )
                    found.update(zip(batch, vectors))
                    progress.update(len(batch))
                    if number % self.save_every == 0:
                        cache.flush()
            cache.flush()
            if self.not_normalized:
                logger.warning(
                    "%s: %d wave(s) too quiet or too short for a loudness measure were embedded "
                    "unnormalized, first: %s",
                    desc,
                    len(self.not_normalized),
                    self.not_normalized[:3],
                )
                self.not_normalized = []
        return {utt: found[utt] for utt in wav}


# ---------------------------------------------------------------------------------------------------
# Scoring
# ---------------------------------------------------------------------------------------------------


def _unit_rows(matrix: np.ndarray) -> np.ndarray:
    matrix = np.asarray(matrix, dtype=np.float32)
    norms = np.linalg.norm(matrix, axis=-1, keepdims=True)
    return matrix / np.maximum(norms, np.float32(1e-12))


def cosine_scores(enroll: np.ndarray, test: np.ndarray) -> np.ndarray:
    """Row-wise cosine similarity of two ``(n, d)`` matrices, float32."""
    return np.einsum("ij,ij->i", _unit_rows(enroll), _unit_rows(test)).astype(np.float32)


def speaker_models(
    speakers: dict[str, list[str]], embeddings: dict[str, np.ndarray]
) -> dict[str, np.ndarray]:
    """Model per speaker (``speaker -> utterances``): the mean of the raw (not length-normalized) embeddings.

    The enrollment models, and the cohort's for score normalization.
    """
    return {
        spk: np.mean([embeddings[utt] for utt in utts], axis=0).astype(np.float32)
        for spk, utts in speakers.items()
    }


def normalize_scores(
    scores: np.ndarray,
    enroll_vectors: np.ndarray,
    test_vectors: np.ndarray,
    cohort: np.ndarray,
    method: str = "s-norm",
    top_k: int | None = None,
) -> np.ndarray:
    """Symmetric (``s-norm``) or adaptive symmetric (``as-norm``, top-``k`` cohort) score normalization.

    ``s = ((s - mu_e) / sd_e + (s - mu_t) / sd_t) / 2`` with the mean and
    standard deviation of each side's cosine scores against the cohort (its
    ``top_k`` highest for ``as-norm``).

    >>> rng = np.random.default_rng(0)
    >>> e, t, c = rng.normal(size=(3, 4)), rng.normal(size=(3, 4)), rng.normal(size=(20, 4))
    >>> normalize_scores(cosine_scores(e, t), e, t, c).shape
    (3,)
    """
    if method not in ("s-norm", "as-norm"):
        raise ValueError(f"unknown score normalization {method!r}; choose from {list(SCORE_NORMS)}")
    cohort_unit = _unit_rows(cohort)

    def stats(vectors):
        against = _unit_rows(vectors) @ cohort_unit.T
        if method == "as-norm":
            k = min(int(top_k or against.shape[1]), against.shape[1])
            against = -np.partition(-against, k - 1, axis=1)[:, :k]
        return against.mean(axis=1), np.maximum(against.std(axis=1), 1e-6)

    mean_e, std_e = stats(enroll_vectors)
    mean_t, std_t = stats(test_vectors)
    return (((scores - mean_e) / std_e + (scores - mean_t) / std_t) / 2).astype(np.float32)


@dataclass
class SubsetScores:
    """The scored trials of one subset."""

    name: str
    trials_file: Path
    enroll: list[str]
    test: list[str]
    targets: np.ndarray
    scores: np.ndarray
    skipped: int = 0
    test_speakers: list | None = None

    @property
    def target_scores(self) -> np.ndarray:
        return self.scores[self.targets]

    @property
    def nontarget_scores(self) -> np.ndarray:
        return self.scores[~self.targets]


@dataclass
class SystemResults:
    """Scores and metrics of one system (one trained model)."""

    system: str
    subsets: dict[str, SubsetScores]
    metrics: dict[str, dict] = field(default_factory=dict)
    options: dict = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def table_row(self) -> dict[str, float]:
        """EERs (%) in the paper's Table 2 columns (averages over the subsets present)."""
        return table_row({name: values["eer"] for name, values in self.metrics.items()})


def table_row(eers: dict[str, float]) -> dict[str, float]:
    """Table 2 columns from per-subset EERs: part averages and the average of the four subsets.

    >>> table_row({"dev_f": 30.0, "dev_m": 20.0, "test_f": 10.0, "test_m": 20.0})["avg"]
    20.0
    """
    return {column: float(value) for column, value in table_averages(eers).items()}


def score_trials(
    trials: TrialList,
    models: dict[str, np.ndarray],
    test_embeddings: dict[str, np.ndarray],
    cohort: np.ndarray | None = None,
    score_norm: str | None = None,
    cohort_top_k: int | None = None,
) -> SubsetScores:
    """Cosine score of every trial (enrollment model vs. test embedding), optionally normalized."""
    enroll = np.stack([models[spk] for spk in trials.enroll_speakers])
    test = np.stack([test_embeddings[utt] for utt in trials.test_utterances])
    scores = cosine_scores(enroll, test)
    if score_norm:
        if cohort is None:
            raise ValueError(f"score normalization {score_norm!r} needs a cohort")
        scores = normalize_scores(scores, enroll, test, cohort, score_norm, cohort_top_k)
    return SubsetScores(
        trials.name,
        trials.path,
        trials.enroll_speakers,
        trials.test_utterances,
        trials.targets,
        scores,
        trials.skipped,
        trials.test_speakers,
    )


def cohort_utterances(folder: KaldiFolder, per_speaker: int, seed: int) -> dict[str, list[str]]:
    """Up to ``per_speaker`` utterances of each speaker of a folder, drawn with ``seed``."""
    by_speaker = group_by_speaker(folder.utterances, folder.utt2spk)
    rng = np.random.default_rng(seed)
    chosen = {}
    for spk in sorted(by_speaker):
        utts = sorted(by_speaker[spk])
        if len(utts) > per_speaker:
            utts = sorted(rng.choice(utts, size=per_speaker, replace=False).tolist())
        chosen[spk] = utts
    return chosen


# ---------------------------------------------------------------------------------------------------
# The whole evaluation of one system
# ---------------------------------------------------------------------------------------------------

#: Evaluation keys of the training YAML, with their defaults (see docs/evaluation.md).
EVAL_DEFAULTS = {
    "eval_subsets": list(SUBSETS),
    "eval_batch_size": 16,
    "eval_max_batch_seconds": 600.0,
    "eval_normalize_wave": True,
    "eval_trim_zeros": True,
    "eval_score_norm": None,
    "eval_cohort_utts_per_speaker": 5,
    "eval_cohort_top_k": 200,
    "eval_skip_missing_trials": False,
    "eval_allow_pipes": False,
    "eval_p_targets": [0.01, 0.05],
    "eval_save_every": 50,
    "eval_det_plot": True,
    "eval_bootstrap_resamples": 1000,
    "eval_bootstrap_seed": 1986,
}


EVAL_SUBFOLDER = "eval"  # the default eval_folder: <output_folder>/eval


def evaluation_folder(hparams: dict) -> Path:
    """Where a run's evaluation goes: ``eval_folder``, else ``<output_folder>/eval``."""
    return Path(hparams.get("eval_folder") or Path(hparams["output_folder"]) / EVAL_SUBFOLDER)


def _option(hparams: dict, key: str):
    value = hparams.get(key)
    return EVAL_DEFAULTS[key] if value is None else value


def load_exported_model(hparams: dict, model_folder=None) -> Path:
    """Load ``embedding_model.ckpt`` of the export folder into ``hparams['embedding_model']``.

    The folder is ``model_folder``, else ``hparams['eval_model_folder']``, else
    ``hparams['export_folder']``, else ``<output_folder>/export``. Returns the
    checkpoint path.
    """
    folder = Path(
        model_folder
        or hparams.get("eval_model_folder")
        or hparams.get("export_folder")
        or Path(hparams["output_folder"]) / "export"
    )
    checkpoint = folder / "embedding_model.ckpt"
    if not checkpoint.is_file():
        raise MissingExportError(
            f"{checkpoint}: no exported model (recipes/train.py writes it when training ends; "
            "set eval_model_folder to evaluate another export)"
        )
    state = torch.load(checkpoint, map_location="cpu", weights_only=True)
    try:
        hparams["embedding_model"].load_state_dict(state)
    except RuntimeError as err:
        raise RuntimeError(
            f"{checkpoint}: does not fit the YAML's embedding_model (channels or lin_neurons differ?): {err}"
        ) from err
    return checkpoint


class EvaluationAudioError(TrialListError):
    """Enrollment or trial audio failed the audio check (unreadable, truncated, NaN, ...); all are named."""


def check_evaluation_audio(hparams: dict, enrollments: dict, trial_lists: dict, eval_folder) -> list[str]:
    """The audio check (:mod:`segreconcat_aug.audio_check`) of every enrollment and trial file scored.

    Unusable files (missing, unreadable, truncated, NaN samples, another rate) stop
    here, all named (and listed in ``<eval_folder>/audio_problems.txt``). Silent or
    too-short files are scored, and returned as warnings (count and first ids).
    """
    wav = {}
    for enrollment in enrollments.values():
        wav.update({f"{enrollment.folder.name}/{utt}": path for utt, path in enrollment.wav.items()})
    for trials in trial_lists.values():
        folder = trials.path.parent.name
        wav.update({f"{folder}/{utt}": trials.wav[utt] for utt in dict.fromkeys(trials.test_utterances)})
    report = check_audio_files(
        wav,
        mode=hparams.get("check_audio") or "full",
        sample_rate=hparams.get("sample_rate", SAMPLE_RATE),
        min_duration=float(hparams.get("min_audio_duration") or 0.0),
        silence_db=hparams.get("silence_db", -60.0),
        workers=int(hparams.get("check_workers") or 8),
        cache=hparams.get("audio_check_cache") or Path(eval_folder) / "audio_check.jsonl",
        desc="checking enrollment and trial audio",
    )
    if report.fatal:
        listed = write_problem_list(report.fatal, Path(eval_folder) / "audio_problems.txt")
        raise EvaluationAudioError(
            problem_message(report.fatal, len(wav), "enrollment and trial files", listed)
        )
    warnings = []
    for kind, words in (("silent", "silent"), ("too_short", "shorter than min_audio_duration")):
        utts = [problem.utt for problem in report.weak if problem.kind == kind]
        if utts:
            warnings.append(
                f"{len(utts)} enrollment/trial file(s) {words}, scored all the same; first: {utts[:5]}"
            )
    for warning in warnings:
        logger.warning("%s %s", hparams["system"], warning)
    return warnings


def evaluate_system(hparams: dict, run_opts: dict | None = None, write_report: bool = True) -> SystemResults:
    """Evaluate the exported model of a training run on its system's dev and test trials.

    Parameters
    ----------
    hparams : dict
        The loaded training YAML: ``data_folder``, ``system``, ``output_folder``,
        ``compute_features``, ``mean_var_norm``, ``embedding_model``, optional
        ``folder_overrides``, ``export_folder``, ``seed`` and the ``eval_*`` keys
        (:data:`EVAL_DEFAULTS`; ``eval_folder`` defaults to ``<output_folder>/eval``).
    run_opts : dict or None
        SpeechBrain run options (a dict or ``RunOptions``); ``device`` is used (default: the
        accelerator when there is one, else cpu).
    write_report : bool
        Write scores, ``results.csv``, ``results.md``, ``results.json`` and the DET
        figure to ``eval_folder`` (:func:`segreconcat_aug.report.write_system_report`).

    Returns
    -------
    SystemResults
    """
    run_opts = run_opts or {}
    # SpeechBrain leaves device unset unless given; it then means "the accelerator if there is one".
    device = run_opts.get("device") or infer_device()
    system = hparams["system"]
    data_folder = hparams["data_folder"]
    overrides = hparams.get("folder_overrides") or {}
    eval_folder = evaluation_folder(hparams)
    score_norm = _option(hparams, "eval_score_norm")
    if score_norm not in SCORE_NORMS:
        raise ValueError(f"eval_score_norm: unknown {score_norm!r}; choose from {list(SCORE_NORMS)}")
    allow_pipes = bool(_option(hparams, "eval_allow_pipes"))
    resamples = _option(hparams, "eval_bootstrap_resamples")
    if isinstance(resamples, bool) or not isinstance(resamples, int) or resamples < 0:
        raise ValueError(
            f"eval_bootstrap_resamples: expected an integer >= 0 (0: no intervals), got {resamples!r}"
        )

    enrollments, trial_lists = load_system_trials(
        data_folder,
        system,
        overrides,
        subsets=list(_option(hparams, "eval_subsets")),
        skip_missing=bool(_option(hparams, "eval_skip_missing_trials")),
        allow_pipes=allow_pipes,
    )
    audio_warnings = check_evaluation_audio(hparams, enrollments, trial_lists, eval_folder)
    checkpoint = load_exported_model(hparams)
    normalize_wave = bool(_option(hparams, "eval_normalize_wave"))
    trim = bool(_option(hparams, "eval_trim_zeros"))
    # The wave processing is part of the embedding cache's name: changing it re-embeds. (The
    # loudness normalization is named by its method, so caches of the earlier peak-only option
    # are not reused.)
    wave_options = {"normalize_wave": "vpc2024-pyloudnorm" if normalize_wave else False, "trim_zeros": trim}
    fingerprint = model_fingerprint(checkpoint, wave_options)
    cache_root = eval_folder / "embeddings" / fingerprint
    extractor = EmbeddingExtractor(
        hparams["compute_features"],
        hparams["mean_var_norm"],
        hparams["embedding_model"],
        device=device,
        batch_size=_option(hparams, "eval_batch_size"),
        max_batch_seconds=_option(hparams, "eval_max_batch_seconds"),
        normalize_wave=normalize_wave,
        sample_rate=hparams.get("sample_rate", SAMPLE_RATE),
        save_every=_option(hparams, "eval_save_every"),
        trim_zeros=trim,
    )

    models = {}
    for part, enrollment in enrollments.items():
        embeddings = extractor.embed(
            enrollment.wav,
            cache_root / enrollment.folder.name,
            enrollment.utt2dur,
            desc=f"{system} {part} enroll",
        )
        models[part] = speaker_models(enrollment.speakers, embeddings)

    cohort = None
    if score_norm:
        folder = system_folders(data_folder, system, overrides, sets=[TRAIN_SET])[TRAIN_SET]
        train = load_kaldi_folder(folder, root=data_folder, allow_pipes=allow_pipes)
        chosen = cohort_utterances(
            train, int(_option(hparams, "eval_cohort_utts_per_speaker")), hparams.get("seed", 0)
        )
        wav = {utt: train.wav[utt] for utts in chosen.values() for utt in utts}
        embeddings = extractor.embed(
            wav, cache_root / f"cohort-{train.path.name}", train.utt2dur, desc="cohort"
        )
        cohort = np.stack(list(speaker_models(chosen, embeddings).values()))

    results = SystemResults(
        system=system,
        subsets={},
        options={
            "model": str(checkpoint),
            "fingerprint": fingerprint,
            "normalize_wave": normalize_wave,
            "trim_zeros": trim,
            "score_norm": score_norm,
        },
        warnings=audio_warnings,
    )
    p_targets = tuple(_option(hparams, "eval_p_targets"))
    for name, trials in trial_lists.items():
        needed = {utt: trials.wav[utt] for utt in dict.fromkeys(trials.test_utterances)}
        test_embeddings = extractor.embed(
            needed, cache_root / trials.path.parent.name, trials.utt2dur, desc=f"{system} {name} trials"
        )
        scored = score_trials(
            trials,
            models[name.split("_")[0]],
            test_embeddings,
            cohort,
            score_norm,
            _option(hparams, "eval_cohort_top_k"),
        )
        results.subsets[name] = scored
        metrics = verification_metrics(scored.target_scores, scored.nontarget_scores, p_targets=p_targets)
        metrics["skipped_trials"] = scored.skipped
        results.metrics[name] = metrics
        logger.info("%s %s: EER %.2f %% (%d trials)", system, name, metrics["eer"], len(trials))
    if write_report:
        bootstrap = {"resamples": resamples, "seed": int(_option(hparams, "eval_bootstrap_seed"))}
        write_system_report(
            results, eval_folder, det_plot=bool(_option(hparams, "eval_det_plot")), bootstrap=bootstrap
        )
    return results

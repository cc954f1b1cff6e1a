"""Score a trained attacker exactly as the challenge of its protocol does (VPAC 2024 by default).

Per system, for each subset of the protocol (:mod:`segreconcat_aug.data.protocols`; VPAC 2024:
dev / test x female / male; VPC 2026: the pooled dev and test lists):

1. read the enrollment folder (speakers grouped by its ``utt2spk``, utterances
   from its ``enrolls`` list when present) and the trial list
   (``<enroll-spk> <test-utt> target|nontarget``);
2. embed every enrollment and trial utterance WHOLE with the trained model
   (Fbank -> sentence mean normalization -> ECAPA-TDNN), batched by similar
   duration and cached to disk, so rescoring is instant; each wave is first
   normalized as the challenge's extraction does (pyloudnorm to -30 LUFS, then
   division by the peak) and its leading and trailing zeros are trimmed
   (:mod:`segreconcat_aug.evaluation.embeddings`);
3. enrollment model = mean of the speaker's raw embeddings; score = cosine
   similarity of enrollment model and test embedding (:mod:`segreconcat_aug.evaluation.scoring`);
4. EER (SpeechBrain's definition, :mod:`segreconcat_aug.evaluation.metrics`) and
   normalized minDCF per subset; the table averages as the paper's Table 2
   (VPC 2026: the average of dev and test). A VPC 2026 pooled list also gets a
   row of its same-gender and one of its cross-gender trials (:func:`gender_rows`);
5. the privacy metrics of :mod:`segreconcat_aug.evaluation.privacy` (linkability, ZEBRA, Cllr,
   identification, pi_link, Singling Out, risk per speaker) from the same scores
   (``eval_privacy``, on by default).

Switches: ``eval_normalize_wave`` (the protocol's challenge normalization by
default: ``vpc2024`` or ``vpc2026``; False gives the raw waves), ``eval_trim_zeros``
(on, as both challenges' extraction), ``eval_enroll_mean`` (``raw``: the mean of raw
embeddings, what both challenges' code does for an ECAPA such as ours; ``l2``: of
L2-normalized ones, what VPC 2026's own WavLM+ECAPA attacker does),
``eval_skip_missing_trials`` (the protocol's: VPC 2026 skips and counts) and score
normalization, off by default as the paper uses none (``s-norm`` or ``as-norm``
against a cohort drawn from the system's training speakers).

:func:`evaluate_system` is the entry point used by ``recipes/evaluate.py`` and
by the training recipe's last stage; this module holds it, the trial lists it
reads and the result types it returns (:class:`SystemResults`).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from speechbrain.utils.distributed import infer_device

from ..data.audio import SAMPLE_RATE
from ..data.audio_check import check_audio_files, problem_message, write_problem_list
from ..data.convergence import model_convergence
from ..data.kaldi import KaldiFolder, Trial, group_by_speaker, read_trials
from ..data.protocols import GENDER_ROWS, get_protocol
from ..data.vpac import detect_layout, load_set_folder, original_folder, system_folders, training_folder
from ..errors import UserError, cite
from ..models.folder import (  # noqa: F401 (ecapa_sizes, load_exported_model and the errors: their 0.1.0 home)
    MODEL_SAVEDIR,
    ExportError,
    MissingExportError,
    ModelFolderError,
    ModelMismatchError,
    SpeakerModel,
    ecapa_sizes,
    load_exported_model,
    load_speaker_model,
    model_folder,
)
from .embeddings import BATCHINGS, WAVE_CACHE_NAMES, EmbeddingExtractor, model_fingerprint, wave_normalization
from .intervals import BOOTSTRAP_DEFAULTS, SUBSET_COLUMNS, subset_design, table_averages
from .metrics import verification_metrics
from .privacy import ListPrivacy, PrivacyOptions
from .scoring import (
    DEFAULT_TOP_K,
    ENROLL_MEANS,
    SCORE_NORMS,
    CohortTooSmallError,
    cohort_utterance_draw,
    cohort_utterances,
    cosine_scores,
    normalize_scores,
    speaker_models,
)
from .system_report import write_system_report

logger = logging.getLogger(__name__)

#: Subset names of VPAC 2024 (the default protocol) in the order of the paper's Table 2.
SUBSETS = SUBSET_COLUMNS


class TrialListError(UserError, ValueError):
    """A trial list or enrollment folder cannot be scored as it is."""


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
    spk2gender: dict[str, str] | None = None
    notes: list[str] = field(default_factory=list)  # what was skipped or completed, for the report


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
    folder: Path | None = None  # the folder of the test audio (path.parent unless trials came from elsewhere)
    spk2gender: dict[str, str] | None = None
    duplicates: int = 0  # lines repeating an earlier line's (speaker, utterance) pair
    notes: list[str] = field(default_factory=list)  # what was skipped, collapsed or completed, for the report

    def __len__(self) -> int:
        return len(self.targets)

    @property
    def audio_folder(self) -> Path:
        return self.folder or self.path.parent


def unmatched_notes(folder: KaldiFolder) -> list[str]:
    """What :func:`~segreconcat_aug.data.kaldi.load_kaldi_folder` skipped (``unmatched="skip"``), as report lines."""
    notes = []
    for ids, what in (
        (folder.no_audio, f"utterance(s) of utt2spk have no wav.scp entry ({folder.path})"),
        (folder.no_speaker, f"utterance(s) of wav.scp have no speaker in utt2spk ({folder.path})"),
    ):
        if ids:
            notes.append(f"{len(ids)} {what}: skipped, as the VPC 2026 toolkit does; first: {ids[:5]}")
    return notes


def load_enrollment(folder: KaldiFolder, skip_missing: bool = False) -> Enrollment:
    """Group the enrollment utterances of a folder by speaker (``utt2spk``).

    Utterances come from the ``enrolls`` list when the folder has one (every id
    must be in ``wav.scp``; with ``skip_missing``, an id without audio is skipped
    and counted), else from ``wav.scp``.
    """
    notes = unmatched_notes(folder)
    if folder.enrolls is not None:
        unknown = [utt for utt in folder.enrolls if utt not in folder.wav]
        if unknown and not skip_missing:
            raise TrialListError(
                f"{folder.path / 'enrolls'}: {len(unknown)} enrollment utterance(s) not in wav.scp, first: "
                f"{unknown[:5]}"
            )
        if unknown:
            notes.append(
                f"{len(unknown)} enrollment utterance(s) of {folder.path / 'enrolls'} have no audio: skipped; "
                f"first: {unknown[:5]}"
            )
        utterances = [utt for utt in folder.enrolls if utt in folder.wav]
    else:
        utterances = folder.utterances
    if not utterances:
        raise TrialListError(f"{folder.path}: no enrollment utterances")
    for note in notes:
        logger.warning("%s", note)
    return Enrollment(
        folder.path,
        {u: folder.wav[u] for u in utterances},
        group_by_speaker(utterances, folder.utt2spk),
        folder.utt2dur,
        folder.spk2gender,
        notes,
    )


def _label(target: bool) -> str:
    return "target" if target else "nontarget"


def _wav_id(utterance: str, wav: dict) -> str | None:
    """The ``wav.scp`` id of a trial's test utterance: itself, or itself with ``.wav`` added or removed
    (the VPC 2026 code's lookup, ``speaker_embeddings.py``: Track 2's cn ids are written both ways)."""
    if utterance in wav:
        return utterance
    other = utterance[:-4] if utterance.endswith(".wav") else f"{utterance}.wav"
    return other if other in wav else None


def load_trial_list(
    name: str,
    folder: KaldiFolder,
    enrollment: Enrollment,
    skip_missing: bool = False,
    trials_path=None,
    collapse_duplicates: bool = False,
) -> TrialList:
    """Read and check ``<folder>/trials`` against ``enrollment`` and the folder's ``wav.scp``.

    ``trials_path``: read the list from there instead (VPC 2026: the original folder's list).
    ``collapse_duplicates``: a line repeating an earlier line's ``(speaker, utterance)`` pair is
    scored once, as both VPC toolkits' score dictionaries do (counted in ``TrialList.duplicates``;
    the same pair labelled both ways is an error naming both lines). With ``skip_missing`` (the
    2026 code), a test utterance is also found under its id with ``.wav`` added or removed.

    Raises
    ------
    TrialListError
        On an empty list, a list with only targets or only non-targets, or (unless
        ``skip_missing``) a trial naming a speaker that is not enrolled or an
        utterance that is not in ``wav.scp``, naming file and line. Skipped trials
        are counted in ``TrialList.skipped`` and logged.
    """
    path = Path(trials_path) if trials_path is not None else folder.path / "trials"
    # load_kaldi_folder parsed the file if there was one; read_trials says why there is none.
    trials = folder.trials if folder.trials is not None and trials_path is None else read_trials(path)
    if not trials:
        raise TrialListError(f"{path}: no trials")
    keep = []
    skipped = 0
    renamed = 0
    for trial in trials:
        problem = None
        test = _wav_id(trial.test_utterance, folder.wav) if skip_missing else trial.test_utterance
        if trial.enroll_speaker not in enrollment.speakers:
            problem = (
                f"enrollment speaker {trial.enroll_speaker!r} has no utterance in {enrollment.folder} "
                f"(enrolled: {len(enrollment.speakers)} speakers)"
            )
        elif test not in folder.wav:
            problem = f"test utterance {trial.test_utterance!r} is not in {folder.path / 'wav.scp'}"
        if problem is None:
            if test != trial.test_utterance:
                renamed += 1
                trial = trial._replace(test_utterance=test)
            keep.append(trial)
        elif skip_missing:
            skipped += 1
        else:
            raise TrialListError(
                f"{path}:{trial.line}: {problem} (--eval_skip_missing_trials=True skips such trials, counted)"
            )
    notes = []
    if skipped:
        logger.warning(
            "%s: skipped %d of %d trials naming unknown speakers or utterances", path, skipped, len(trials)
        )
    if renamed:
        notes.append(
            f"{name}: {renamed} test utterance(s) of {path} found in wav.scp with '.wav' added or removed, "
            "as the VPC 2026 code looks them up"
        )
    first: dict[tuple[str, str], Trial] = {}
    unique = []
    for trial in keep:
        pair = (trial.enroll_speaker, trial.test_utterance)
        if pair not in first:
            first[pair] = trial
            unique.append(trial)
        elif first[pair].target != trial.target:
            raise TrialListError(
                f"{path}:{trial.line}: {pair[0]} {pair[1]} is a {_label(trial.target)} trial here and a "
                f"{_label(first[pair].target)} one on line {first[pair].line}: correct the list"
            )
    duplicates = len(keep) - len(unique)
    if duplicates:
        how = "scored once each, as the VPC code does" if collapse_duplicates else "each scored again"
        notes.append(
            f"{name}: {duplicates} line(s) of {path} repeat an earlier (speaker, utterance) pair: {how}"
        )
        if collapse_duplicates:
            keep = unique
    for note in notes:
        logger.warning("%s", note)
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
        folder=folder.path,
        spk2gender=folder.spk2gender,
        duplicates=duplicates,
        notes=[*unmatched_notes(folder), *notes],
    )


#: ``eval_trials_from``: whose ``trials`` a VPC 2026 trial set is scored with.
TRIALS_FROM = ("original", "anonymized")


def trials_file(folder: KaldiFolder, original: Path | None, trials_from: str) -> tuple[Path, list[str]]:
    """The ``trials`` file a trial set is scored with, and notes on the choice (for the report).

    ``original`` (the 2026 toolkit's ``evaluate_asv.py``): the original folder's list, else the
    anonymized folder's own where the original has none; ``anonymized``: the folder's own list, else
    the original's. A layout without original folders (VPAC 2024's) has only the folder's own list.
    """
    if trials_from not in TRIALS_FROM:
        raise ValueError(f"eval_trials_from: unknown {trials_from!r}; choose from {list(TRIALS_FROM)}")
    own = folder.path / "trials" if folder.trials is not None else None
    theirs = original / "trials" if original is not None and (original / "trials").is_file() else None
    if own is None and theirs is None:
        raise TrialListError(
            f"{folder.path / 'trials'}: no such file, nor {original / 'trials' if original else '-'} "
            "(the original folder's list, which the VPC 2026 toolkit reads)"
        )
    chosen = (theirs or own) if trials_from == "original" else (own or theirs)
    notes = []
    if original is not None and chosen != (theirs if trials_from == "original" else own):
        wanted = "original folder" if trials_from == "original" else "anonymized folder"
        notes.append(f"no trials in the {wanted} ({trials_from}): scored {chosen}")
    if own is not None and theirs is not None and own.read_bytes() != theirs.read_bytes():
        other = own if chosen == theirs else theirs
        flip = "anonymized" if chosen == theirs else "original"
        notes.append(
            f"{other} differs from {chosen}, which was scored (eval_trials_from: {flip} scores the other)"
        )
    return chosen, notes


def load_system_trials(
    data_folder,
    system: str,
    folder_overrides: dict | None = None,
    subsets=None,
    skip_missing: bool = False,
    allow_pipes: bool = False,
    *,
    protocol: str | None = None,
    language: str | None = None,
    layout: str | None = None,
    trials_from: str | None = None,
    collapse_duplicates: bool | None = None,
) -> tuple[dict[str, Enrollment], dict[str, TrialList]]:
    """Enrollments (by part) and trial lists (by subset name, e.g. ``dev_f``) of one system.

    ``protocol`` (default ``vpac2024``) names the sets and ``subsets`` (None: all of the
    protocol's); ``language`` is a Track 2 language; ``layout`` (None: the one the data folder
    holds, the protocol's own first) where the folders are (:func:`segreconcat_aug.data.vpac.system_folders`).
    In the 2026 layout, what an anonymized folder lacks is read from its original
    (:func:`segreconcat_aug.data.vpac.load_set_folder`), and ``trials_from`` (None: the protocol's
    ``eval_trials_from``) says whose ``trials`` are scored (:func:`trials_file`);
    ``collapse_duplicates`` (None: the protocol's ``eval_duplicate_trials``) as :func:`load_trial_list`.
    With ``skip_missing``, ids of ``utt2spk`` without audio and of ``wav.scp`` without a speaker are
    skipped and counted, as the 2026 code does, where they would be an error.

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
    scheme = get_protocol(protocol)
    trials_from = scheme.convention("eval_trials_from", trials_from)
    collapse = scheme.convention("eval_duplicate_trials", None) == "collapse"
    collapse = collapse if collapse_duplicates is None else bool(collapse_duplicates)
    subsets = list(scheme.subsets if subsets is None else subsets)
    unknown = [s for s in subsets if s not in scheme.subsets]
    if unknown:
        raise ValueError(f"unknown subset(s) {unknown}; subsets of {scheme.name}: {list(scheme.subsets)}")
    layout = detect_layout(data_folder, system, scheme.layout) if layout is None else layout
    parts = sorted({scheme.part(s) for s in subsets}, key=["dev", "test"].index)
    enroll_sets = {part: scheme.enroll_set(part, language) for part in parts}
    trial_sets = {subset: scheme.trial_set(subset, language) for subset in subsets}
    folders = system_folders(
        data_folder,
        system,
        folder_overrides,
        sets=[*enroll_sets.values(), *trial_sets.values()],
        layout=layout,
        known_sets=scheme.known_sets(),
    )
    options = {"allow_pipes": allow_pipes, "unmatched": "skip" if skip_missing else "error"}

    def completed(loaded: KaldiFolder) -> list[str]:
        return [f"{loaded.path.name}: {name} from {where}" for name, where in loaded.completed.items()]

    enrollments = {}
    for part, name in enroll_sets.items():
        loaded = load_set_folder(folders[name], data_folder, name, layout, **options)
        enrollments[part] = load_enrollment(loaded, skip_missing=skip_missing)
        enrollments[part].notes += completed(loaded)
    trial_lists = {}
    for subset, name in trial_sets.items():
        folder = load_set_folder(folders[name], data_folder, name, layout, **options)
        original = original_folder(data_folder, name, layout)
        original = original if original is not None and original.resolve() != folder.path.resolve() else None
        trials_path, notes = trials_file(folder, original, trials_from)
        logger.info("%s %s: scoring %s", system, subset, trials_path)
        trial_lists[subset] = load_trial_list(
            subset,
            folder,
            enrollments[scheme.part(subset)],
            skip_missing=skip_missing,
            trials_path=trials_path if trials_path != folder.path / "trials" else None,
            collapse_duplicates=collapse,
        )
        trial_lists[subset].notes += [f"{subset}: {note}" for note in notes] + completed(folder)
    return enrollments, trial_lists


# ---------------------------------------------------------------------------------------------------
# Scored trials and results
# ---------------------------------------------------------------------------------------------------


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


#: Per-subset counts of what a trial list held beyond its scores (a score file cannot give them back).
LIST_COUNTS = ("skipped_trials", "duplicate_trials")


@dataclass
class SystemResults:
    """Scores and metrics of one system (one trained model)."""

    system: str
    subsets: dict[str, SubsetScores]
    metrics: dict[str, dict] = field(default_factory=dict)
    options: dict = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    protocol: str = "vpac2024"
    language: str | None = None  # a VPC 2026 Track 2 attacker's language
    # The privacy metrics' settings when results.metrics holds them (add_privacy_metrics).
    privacy: PrivacyOptions | None = None

    def table_row(self) -> dict[str, float]:
        """EERs (%) in the protocol's table columns (averages over the subsets present)."""
        eers = {name: values["eer"] for name, values in self.metrics.items()}
        return table_row(eers, get_protocol(self.protocol).table)


def table_row(eers: dict[str, float], table=None) -> dict[str, float]:
    """Table columns from per-subset EERs (default: Table 2's part averages and the average of the four).

    >>> table_row({"dev_f": 30.0, "dev_m": 20.0, "test_f": 10.0, "test_m": 20.0})["avg"]
    20.0
    >>> table_row({"dev_mixed": 30.0, "test_mixed": 20.0}, get_protocol("vpc2026-track1").table)
    {'dev_mixed': 30.0, 'test_mixed': 20.0, 'avg': 25.0}
    """
    return {column: float(value) for column, value in table_averages(eers, table).items()}


def gender_rows(scored: SubsetScores, spk2gender: dict[str, str]) -> dict[str, SubsetScores]:
    """A pooled list's extra rows: its targets with only its same-gender, or only its cross-gender, non-targets.

    Rows are named ``<subset>_same`` and ``<subset>_cross`` (:data:`segreconcat_aug.data.protocols.GENDER_ROWS`);
    genders come from ``spk2gender`` (``f``/``m`` in either case). A non-target of a speaker without a
    gender is in neither row; a row without non-targets is left out.

    >>> s = SubsetScores("dev_mixed", Path("trials"), ["a", "a", "b"], ["u", "v", "u"],
    ...                  np.array([True, False, False]), np.array([0.9, 0.5, 0.1]), test_speakers=["a", "b", "a"])
    >>> rows = gender_rows(s, {"a": "F", "b": "M"})
    >>> list(rows), rows["dev_mixed_cross"].targets.tolist()
    (['dev_mixed_cross'], [True, False, False])
    """
    genders = {speaker: str(gender).lower() for speaker, gender in spk2gender.items()}
    enroll = [genders.get(speaker) for speaker in scored.enroll]
    test = [genders.get(speaker) for speaker in (scored.test_speakers or [None] * len(scored.enroll))]
    known = np.array([a is not None and b is not None for a, b in zip(enroll, test)], dtype=bool)
    same = known & np.array([a == b for a, b in zip(enroll, test)], dtype=bool)
    rows = {}
    for suffix, kind in zip(GENDER_ROWS, (same, known & ~same)):
        keep = scored.targets | kind
        if not (keep & ~scored.targets).any():
            continue
        name = f"{scored.name}_{suffix}"
        rows[name] = SubsetScores(
            name,
            scored.trials_file,
            [e for e, k in zip(scored.enroll, keep) if k],
            [t for t, k in zip(scored.test, keep) if k],
            scored.targets[keep],
            scored.scores[keep],
            0,
            None if scored.test_speakers is None else [t for t, k in zip(scored.test_speakers, keep) if k],
        )
    return rows


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


# ---------------------------------------------------------------------------------------------------
# The whole evaluation of one system
# ---------------------------------------------------------------------------------------------------

#: Evaluation keys of the training YAML, with their defaults (see docs/evaluation.md).
#: ``None``: the protocol's value (its subsets, or its convention: ``Protocol.conventions``).
EVAL_DEFAULTS = {
    "eval_subsets": None,
    "eval_batching": "exact",
    "eval_batch_size": 16,
    "eval_max_batch_seconds": 600.0,
    "eval_normalize_wave": None,
    "eval_resample": None,
    "eval_trials_from": None,
    "eval_duplicate_trials": None,
    "eval_trim_zeros": True,
    "eval_enroll_mean": None,
    "eval_score_norm": None,
    "eval_cohort_utts_per_speaker": 5,
    "eval_cohort_top_k": None,
    "eval_cohort_size": 40000,
    "eval_cohort_min_size": 3000,
    "eval_skip_missing_trials": None,
    "eval_allow_pipes": False,
    "eval_p_targets": [0.01, 0.05],
    "eval_save_every": 50,
    "eval_det_plot": True,
    "eval_bootstrap_resamples": BOOTSTRAP_DEFAULTS["resamples"],
    "eval_bootstrap_seed": BOOTSTRAP_DEFAULTS["seed"],
    "eval_privacy": True,
    "eval_privacy_top_k": PrivacyOptions.top_k,
    "eval_privacy_speaker_eer_threshold": PrivacyOptions.speaker_eer_threshold,
    "eval_privacy_worst_speakers": PrivacyOptions.worst_speakers,
    "eval_privacy_singling_out_folds": PrivacyOptions.singling_out_folds,
    "eval_privacy_seed": PrivacyOptions.seed,
}


def privacy_options(hparams: dict) -> PrivacyOptions | None:
    """The privacy metrics' settings from the ``eval_privacy*`` keys; None when ``eval_privacy`` is off."""
    if not _option(hparams, "eval_privacy"):
        return None
    return PrivacyOptions(
        top_k=int(_option(hparams, "eval_privacy_top_k")),
        speaker_eer_threshold=float(_option(hparams, "eval_privacy_speaker_eer_threshold")),
        worst_speakers=int(_option(hparams, "eval_privacy_worst_speakers")),
        singling_out_folds=int(_option(hparams, "eval_privacy_singling_out_folds")),
        seed=int(_option(hparams, "eval_privacy_seed")),
    )


def add_privacy_metrics(results: SystemResults, options: PrivacyOptions) -> SystemResults:
    """Add every subset's privacy metrics (:meth:`segreconcat_aug.evaluation.privacy.ListPrivacy.point`) to
    ``results.metrics`` and record ``options`` in ``results.privacy`` (the report's intervals use them)."""
    for name, subset in results.subsets.items():
        design, _ = subset_design(subset)
        results.metrics[name].update(ListPrivacy(subset, design, options).point())
    results.privacy = options
    return results


EVAL_SUBFOLDER = "eval"  # the default eval_folder: <output_folder>/eval


def evaluation_folder(hparams: dict) -> Path:
    """Where a run's evaluation goes: ``eval_folder``, else ``<output_folder>/eval``."""
    return Path(hparams.get("eval_folder") or Path(hparams["output_folder"]) / EVAL_SUBFOLDER)


class EvaluationFolderError(UserError, ValueError):
    """The evaluation folder holds another protocol's (or language's) results, which would be replaced."""


def check_evaluation_folder(hparams: dict) -> None:
    """Refuse an evaluation folder holding results of another protocol or language (they would be replaced).

    A rescoring under the same protocol (other options, a new model) replaces its results as before.
    """
    path = evaluation_folder(hparams) / "results.json"
    if not path.is_file():
        return
    try:
        saved = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return
    scheme = get_protocol(hparams.get("protocol"))
    there = (saved.get("protocol") or "vpac2024", saved.get("language"))
    now = (scheme.name, scheme.check_language(hparams.get("language")))
    if there != now:
        raise EvaluationFolderError(
            f"{path.parent} holds results of protocol {there[0]}{f' ({there[1]})' if there[1] else ''}; scoring "
            f"under {now[0]}{f' ({now[1]})' if now[1] else ''} would replace them: give another --eval_folder"
        )


def _option(hparams: dict, key: str):
    value = hparams.get(key)
    return EVAL_DEFAULTS[key] if value is None else value


def load_evaluation_model(hparams: dict, run_opts: dict | None = None, stated=()) -> SpeakerModel:
    """The model evaluation embeds with: the model folder (:func:`~..models.folder.model_folder`) loaded by
    :func:`~..models.folder.load_speaker_model`, SpeechBrain's files linked in ``<eval_folder>/model``.

    ``stated``: the YAML keys the user gave (overrides); a model key among them must be the folder's.
    """
    return load_speaker_model(
        model_folder(hparams),
        hparams,
        savedir=evaluation_folder(hparams) / MODEL_SAVEDIR,
        device=_device(run_opts),
        stated=stated,
    )


def _device(run_opts) -> str:
    # SpeechBrain leaves device unset unless given; it then means "the accelerator if there is one".
    return (run_opts or {}).get("device") or infer_device()


class EvaluationAudioError(TrialListError):
    """Enrollment or trial audio failed the audio check (unreadable, truncated, NaN, ...); all are named."""


def check_evaluation_audio(
    hparams: dict, enrollments: dict, trial_lists: dict, eval_folder, resample: bool = False
) -> list[str]:
    """The audio check (:mod:`segreconcat_aug.data.audio_check`) of every enrollment and trial file scored.

    Unusable files (missing, unreadable, truncated, NaN samples, another rate unless ``resample``) stop
    here, all named (and listed in ``<eval_folder>/audio_problems.txt``). Silent or
    too-short files are scored, and returned as warnings (count and first ids), as are the
    files that ``resample`` resamples (count per rate).
    """
    wav = {}
    for enrollment in enrollments.values():
        wav.update({f"{enrollment.folder.name}/{utt}": path for utt, path in enrollment.wav.items()})
    for trials in trial_lists.values():
        folder = trials.audio_folder.name
        wav.update({f"{folder}/{utt}": trials.wav[utt] for utt in dict.fromkeys(trials.test_utterances)})
    report = check_audio_files(
        wav,
        mode=hparams.get("check_audio") or "full",
        sample_rate=None if resample else hparams.get("sample_rate", SAMPLE_RATE),
        min_duration=float(hparams.get("min_audio_duration") or 0.0),
        silence_db=hparams.get("silence_db", -60.0),
        workers=int(hparams.get("check_workers") or 8),
        cache=hparams.get("audio_check_cache") or Path(eval_folder) / "audio_check.jsonl",
        desc="checking enrollment and trial audio",
    )
    if report.fatal:
        listed = write_problem_list(report.fatal, Path(eval_folder) / "audio_problems.txt")
        message = problem_message(report.fatal, len(wav), "enrollment and trial files", listed)
        raise cite(EvaluationAudioError(message), listed)  # the list outlives a removed eval folder
    warnings = []
    for kind, words in (("silent", "silent"), ("too_short", "shorter than min_audio_duration")):
        utts = [problem.utt for problem in report.weak if problem.kind == kind]
        if utts:
            warnings.append(
                f"{len(utts)} enrollment/trial file(s) {words}, scored all the same; first: {utts[:5]}"
            )
    target = int(hparams.get("sample_rate", SAMPLE_RATE))
    rates: dict[int, int] = {}
    for rate in report.rates.values():
        if rate != target:
            rates[rate] = rates.get(rate, 0) + 1
    if rates:
        found = ", ".join(f"{count} at {rate} Hz" for rate, count in sorted(rates.items()))
        warnings.append(
            f"enrollment/trial files resampled to {target} Hz after the wave normalization, as the VPC "
            f"2026 toolkit does: {found}"
        )
    for warning in warnings:
        logger.warning("%s %s", hparams["system"], warning)
    return warnings


def evaluate_system(
    hparams: dict, run_opts: dict | None = None, write_report: bool = True, model: SpeakerModel | None = None
) -> SystemResults:
    """Evaluate the exported model of a training run on its system's dev and test trials.

    Parameters
    ----------
    hparams : dict
        The loaded training YAML: ``data_folder``, ``system``, ``output_folder``, optional
        ``folder_overrides``, ``export_folder`` / ``eval_model_folder`` (the model folder; its
        ``hyperparams.yaml`` decides the model, else the YAML's ``compute_features``,
        ``mean_var_norm`` and ``embedding_model`` get its ``embedding_model.ckpt``), ``seed`` and
        the ``eval_*`` keys (:data:`EVAL_DEFAULTS`; ``eval_folder`` defaults to ``<output_folder>/eval``).
    run_opts : dict or None
        SpeechBrain run options (a dict or ``RunOptions``); ``device`` is used (default: the
        accelerator when there is one, else cpu).
    write_report : bool
        Write scores, ``results.csv``, ``results.md``, ``results.json`` and the DET
        figure to ``eval_folder`` (:func:`segreconcat_aug.evaluation.system_report.write_system_report`).
    model : SpeakerModel or None
        The model to embed with (:func:`load_evaluation_model`, which is called when None).

    Returns
    -------
    SystemResults
    """
    device = _device(run_opts)
    system = hparams["system"]
    data_folder = hparams["data_folder"]
    overrides = hparams.get("folder_overrides") or {}
    scheme = get_protocol(hparams.get("protocol"))
    language = scheme.check_language(hparams.get("language"))
    eval_folder = evaluation_folder(hparams)
    score_norm = _option(hparams, "eval_score_norm")
    if score_norm not in SCORE_NORMS:
        raise ValueError(f"eval_score_norm: unknown {score_norm!r}; choose from {list(SCORE_NORMS)}")
    enroll_mean = scheme.convention("eval_enroll_mean", hparams.get("eval_enroll_mean"))
    if enroll_mean not in ENROLL_MEANS:
        raise ValueError(f"eval_enroll_mean: unknown {enroll_mean!r}; choose from {list(ENROLL_MEANS)}")
    allow_pipes = bool(_option(hparams, "eval_allow_pipes"))
    resamples = _option(hparams, "eval_bootstrap_resamples")
    if isinstance(resamples, bool) or not isinstance(resamples, int) or resamples < 0:
        raise ValueError(
            f"eval_bootstrap_resamples: expected an integer >= 0 (0: no intervals), got {resamples!r}"
        )
    check_evaluation_folder(hparams)
    layout = detect_layout(data_folder, system, scheme.layout)
    skip_missing = bool(
        scheme.convention("eval_skip_missing_trials", hparams.get("eval_skip_missing_trials"))
    )
    trials_from = scheme.convention("eval_trials_from", hparams.get("eval_trials_from"))
    duplicate_trials = scheme.convention("eval_duplicate_trials", hparams.get("eval_duplicate_trials"))
    resample = bool(scheme.convention("eval_resample", hparams.get("eval_resample")))
    batching = _option(hparams, "eval_batching")
    if batching not in BATCHINGS:
        raise ValueError(f"eval_batching: unknown {batching!r}; choose from {list(BATCHINGS)}")

    enrollments, trial_lists = load_system_trials(
        data_folder,
        system,
        overrides,
        subsets=hparams.get("eval_subsets") or None,
        skip_missing=skip_missing,
        allow_pipes=allow_pipes,
        protocol=scheme.name,
        language=language,
        layout=layout,
        trials_from=trials_from,
        collapse_duplicates=duplicate_trials == "collapse",
    )
    notes = list(
        dict.fromkeys(
            note for loaded in (*enrollments.values(), *trial_lists.values()) for note in loaded.notes
        )
    )
    audio_warnings = check_evaluation_audio(hparams, enrollments, trial_lists, eval_folder, resample=resample)
    model = model or load_evaluation_model(hparams, {"device": device})
    normalize_wave = wave_normalization(
        scheme.convention("eval_normalize_wave", hparams.get("eval_normalize_wave"))
    )
    trim = bool(_option(hparams, "eval_trim_zeros"))
    # The wave processing is part of the embedding cache's name: changing it re-embeds. (The
    # loudness normalization is named by its method, so caches of the earlier peak-only option
    # are not reused.)
    wave_options = {"normalize_wave": WAVE_CACHE_NAMES.get(normalize_wave, False), "trim_zeros": trim}
    # Padded batches give other embeddings than one utterance at a time: never one cache for both.
    wave_options["batching"] = (
        f"padded-{_option(hparams, 'eval_batch_size')}-{_option(hparams, 'eval_max_batch_seconds')}"
        if batching == "padded"
        else "exact"
    )
    fingerprint = model_fingerprint(model.checkpoint, {**wave_options, **model.cache_options()})
    cache_root = eval_folder / "embeddings" / fingerprint
    extractor = EmbeddingExtractor(
        model.compute_features,
        model.mean_var_norm,
        model.embedding_model,
        device=device,
        batch_size=_option(hparams, "eval_batch_size"),
        max_batch_seconds=_option(hparams, "eval_max_batch_seconds"),
        normalize_wave=normalize_wave,
        sample_rate=hparams.get("sample_rate", SAMPLE_RATE),
        save_every=_option(hparams, "eval_save_every"),
        trim_zeros=trim,
        resample=resample,
        padded=batching == "padded",
    )

    if score_norm:  # the cohort is drawn (and a too small one refused) before anything is embedded
        folder = training_folder(data_folder, system, overrides, protocol=scheme.name, language=language)
        train = load_set_folder(
            folder, data_folder, scheme.train_set(language), layout, allow_pipes=allow_pipes
        )
        seed = hparams.get("seed", 0)
        if score_norm == "as-norm-voxattack":
            # VoxATtack's cohort: training utterances themselves, not speaker means
            drawn = cohort_utterance_draw(train, int(_option(hparams, "eval_cohort_size")), seed)
            min_size = int(_option(hparams, "eval_cohort_min_size"))
            if len(drawn) < min_size:
                raise CohortTooSmallError(
                    f"eval_cohort_min_size: {system}'s training set gives a cohort of {len(drawn)} "
                    f"utterances, fewer than {min_size}; lower eval_cohort_min_size"
                )
        else:
            chosen = cohort_utterances(train, int(_option(hparams, "eval_cohort_utts_per_speaker")), seed)

    models = {}
    for part, enrollment in enrollments.items():
        embeddings = extractor.embed(
            enrollment.wav,
            cache_root / enrollment.folder.name,
            enrollment.utt2dur,
            desc=f"{system} {part} enroll",
        )
        models[part] = speaker_models(enrollment.speakers, embeddings, mean=enroll_mean)

    cohort = None
    if score_norm == "as-norm-voxattack":
        embeddings = extractor.embed(
            {utt: train.wav[utt] for utt in drawn},
            cache_root / f"cohort-{train.path.name}",
            train.utt2dur,
            desc="cohort",
        )
        cohort = np.stack([embeddings[utt] for utt in drawn])
    elif score_norm:
        wav = {utt: train.wav[utt] for utts in chosen.values() for utt in utts}
        embeddings = extractor.embed(
            wav, cache_root / f"cohort-{train.path.name}", train.utt2dur, desc="cohort"
        )
        cohort = np.stack(list(speaker_models(chosen, embeddings, mean=enroll_mean).values()))
    cohort_top_k = _option(hparams, "eval_cohort_top_k")
    if score_norm and cohort_top_k is None:
        cohort_top_k = DEFAULT_TOP_K.get(score_norm)

    options = {
        "protocol": scheme.name,
        **({"language": language} if language else {}),
        "layout": layout,
        "model": str(model.checkpoint),
        "model_loader": model.loader,
        "fingerprint": fingerprint,
        "normalize_wave": normalize_wave or False,
        "trim_zeros": trim,
        "enroll_mean": enroll_mean,
        "score_norm": score_norm,
        **({"cohort_top_k": cohort_top_k, "cohort_size": len(cohort)} if score_norm else {}),
        "skip_missing_trials": skip_missing,
        "trials_from": trials_from,
        "duplicate_trials": duplicate_trials,
        "resample": resample,
        "batching": batching,
        "trial_lists": {name: str(trials.path) for name, trials in trial_lists.items()},
    }
    results = SystemResults(
        system=system,
        subsets={},
        options=options,
        warnings=[*notes, *audio_warnings],
        protocol=scheme.name,
        language=language,
    )
    p_targets = tuple(_option(hparams, "eval_p_targets"))
    for name, trials in trial_lists.items():
        needed = {utt: trials.wav[utt] for utt in dict.fromkeys(trials.test_utterances)}
        test_embeddings = extractor.embed(
            needed, cache_root / trials.audio_folder.name, trials.utt2dur, desc=f"{system} {name} trials"
        )
        scored = score_trials(
            trials,
            models[scheme.part(name)],
            test_embeddings,
            cohort,
            score_norm,
            cohort_top_k,
        )
        rows = {name: scored}
        if scheme.gender_rows:
            genders = {**(enrollments[scheme.part(name)].spk2gender or {}), **(trials.spk2gender or {})}
            if genders:
                rows.update(gender_rows(scored, genders))
            else:
                results.warnings.append(f"{name}: no spk2gender, so no same-gender / cross-gender rows")
        for row, subset in rows.items():
            results.subsets[row] = subset
            metrics = verification_metrics(subset.target_scores, subset.nontarget_scores, p_targets=p_targets)
            metrics["skipped_trials"] = subset.skipped
            metrics["duplicate_trials"] = trials.duplicates if row == name else 0
            results.metrics[row] = metrics
            logger.info("%s %s: EER %.2f %% (%d trials)", system, row, metrics["eer"], len(subset.targets))
        if scored.skipped:
            results.warnings.append(
                f"{name}: {scored.skipped} of {scored.skipped + len(scored.targets)} trials skipped (an "
                f"enrollment speaker without utterances or a test utterance not in wav.scp; {trials.path})"
            )
    privacy = privacy_options(hparams)
    if privacy is not None:
        add_privacy_metrics(results, privacy)
    if write_report:
        bootstrap = {"resamples": resamples, "seed": int(_option(hparams, "eval_bootstrap_seed"))}
        # The flags of the model's own training run (None for a model from elsewhere), in the report.
        convergence = model_convergence(
            model.folder, hparams.get("output_folder"), hparams.get("export_folder")
        )
        write_system_report(
            results,
            eval_folder,
            det_plot=bool(_option(hparams, "eval_det_plot")),
            bootstrap=bootstrap,
            convergence=convergence,
        )
    return results

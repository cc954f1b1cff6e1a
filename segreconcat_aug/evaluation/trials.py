"""The trial lists of one system, read and checked against each folder's ``wav.scp``, and their scores."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from itertools import compress
from pathlib import Path

import numpy as np

from ..data.kaldi import KaldiFolder, Trial, group_by_speaker, read_trials
from ..data.protocols import GENDER_ROWS, get_protocol
from ..data.vpac import detect_layout, load_set_folder, original_folder, system_folders
from ..errors import UserError
from .intervals import table_averages
from .privacy import PrivacyOptions
from .scoring import cosine_scores, max_cosine_scores, normalize_scores

logger = logging.getLogger(__name__)


class TrialListError(UserError, ValueError):
    """A trial list or enrollment folder cannot be scored as it is."""


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
    return [
        f"{len(ids)} {what}: skipped, as the VPC 2026 toolkit does; first: {ids[:5]}"
        for ids, what in (
            (folder.no_audio, f"utterance(s) of utt2spk have no wav.scp entry ({folder.path})"),
            (folder.no_speaker, f"utterance(s) of wav.scp have no speaker in utt2spk ({folder.path})"),
        )
        if ids
    ]


def load_enrollment(folder: KaldiFolder, skip_missing: bool = False) -> Enrollment:
    """A folder's enrollment utterances (its ``enrolls`` list, else ``wav.scp``) grouped by speaker;
    ``skip_missing``: an ``enrolls`` id without audio is skipped and counted, not an error."""
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
    path: Path,
    *,
    skip_missing: bool,
    collapse_duplicates: bool,
) -> TrialList:
    """Read and check the trials file ``path`` (:func:`trials_file`) against ``enrollment`` and ``wav.scp``.

    ``collapse_duplicates``: a repeated ``(speaker, utterance)`` pair is scored once, as both VPC
    toolkits' score dictionaries do. ``skip_missing`` (the 2026 code): trials naming an unknown
    speaker or utterance are skipped and counted, and a test id is also found with ``.wav`` added or removed.
    """
    # load_kaldi_folder parsed the folder's own list already.
    trials = folder.trials if path == folder.path / "trials" else read_trials(path)
    if not trials:
        raise TrialListError(f"{path}: no trials")
    keep = []
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
        elif not skip_missing:
            raise TrialListError(
                f"{path}:{trial.line}: {problem} (--eval_skip_missing_trials=True skips such trials, counted)"
            )
    skipped = len(trials) - len(keep)
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
    first: dict[tuple[str, str], Trial] = {}  # each pair's first line, in the list's order
    for trial in keep:
        earlier = first.setdefault((trial.enroll_speaker, trial.test_utterance), trial)
        if earlier.target != trial.target:
            raise TrialListError(
                f"{path}:{trial.line}: {trial.enroll_speaker} {trial.test_utterance} is a {_label(trial.target)} "
                f"trial here and a {_label(earlier.target)} one on line {earlier.line}: correct the list"
            )
    duplicates = len(keep) - len(first)
    if duplicates:
        how = "scored once each, as the VPC code does" if collapse_duplicates else "each scored again"
        notes.append(
            f"{name}: {duplicates} line(s) of {path} repeat an earlier (speaker, utterance) pair: {how}"
        )
        if collapse_duplicates:
            keep = list(first.values())
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
    """The ``trials`` file a trial set is scored with (``trials_from``'s folder first, else the other),
    and notes on the choice for the report."""
    own = folder.path / "trials" if folder.trials is not None else None
    theirs = original / "trials" if original is not None and (original / "trials").is_file() else None
    if own is None and theirs is None:
        raise TrialListError(
            f"{folder.path / 'trials'}: no such file, nor {original / 'trials' if original else '-'} "
            "(the original folder's list, which the VPC 2026 toolkit reads)"
        )
    wanted, flip = ("original", "anonymized") if trials_from == "original" else ("anonymized", "original")
    preferred, other = (theirs, own) if trials_from == "original" else (own, theirs)
    if preferred is None:
        notes = [f"no trials in the {wanted} folder ({trials_from}): scored {other}"] if original else []
        return other, notes
    if other is not None and other.read_bytes() != preferred.read_bytes():
        return preferred, [
            f"{other} differs from {preferred}, which was scored (eval_trials_from: {flip} scores the other)"
        ]
    return preferred, []


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
    """Enrollments (by part) and trial lists (by subset name, e.g. ``dev_f``) of one system, as its
    ``protocol`` names them; ``None`` options take the protocol's conventions and the data folder's layout.

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
    options = {
        "allow_pipes": allow_pipes,
        "pipes_key": "eval_allow_pipes",
        "unmatched": "skip" if skip_missing else "error",
    }

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
            trials_path,
            skip_missing=skip_missing,
            collapse_duplicates=collapse,
        )
        trial_lists[subset].notes += [f"{subset}: {note}" for note in notes] + completed(folder)
    return enrollments, trial_lists


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
        """EERs (%) in the protocol's table columns (averages over the subsets present).

        >>> metrics = {"dev_mixed": {"eer": 30.0}, "test_mixed": {"eer": 20.0}}
        >>> SystemResults("S", {}, metrics, protocol="vpc2026-track1").table_row()
        {'dev_mixed': 30.0, 'test_mixed': 20.0, 'avg': 25.0}
        """
        eers = {name: values["eer"] for name, values in self.metrics.items()}
        found = table_averages(eers, get_protocol(self.protocol).table)
        return {column: float(value) for column, value in found.items()}


def gender_rows(scored: SubsetScores, spk2gender: dict[str, str]) -> dict[str, SubsetScores]:
    """A pooled list's extra rows ``<subset>_same`` / ``<subset>_cross``: its targets with only its
    same-gender, or only its cross-gender, non-targets (an unknown gender in neither; empty rows left out).

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
            list(compress(scored.enroll, keep)),
            list(compress(scored.test, keep)),
            scored.targets[keep],
            scored.scores[keep],
            0,
            None if scored.test_speakers is None else list(compress(scored.test_speakers, keep)),
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
    test = np.stack([test_embeddings[utt] for utt in trials.test_utterances])
    if np.ndim(next(iter(models.values()))) == 2:  # each speaker's utterances: eval_enroll_scoring max
        scores = max_cosine_scores([models[spk] for spk in trials.enroll_speakers], test)
    else:
        enroll = np.stack([models[spk] for spk in trials.enroll_speakers])
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

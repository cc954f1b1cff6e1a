"""Score a trained attacker exactly as the VoicePrivacy Attacker Challenge 2024 does.

Per system, for each of dev / test and female / male:

1. read the enrollment folder (speakers grouped by its ``utt2spk``, utterances
   from its ``enrolls`` list when present) and the trial list
   (``<enroll-spk> <test-utt> target|nontarget``);
2. embed every enrollment and trial utterance WHOLE with the trained model
   (Fbank -> sentence mean normalization -> ECAPA-TDNN), batched by similar
   duration and cached to disk, so rescoring is instant; each wave is first
   normalized as the challenge's extraction does (pyloudnorm to -30 LUFS, then
   division by the peak) and its leading and trailing zeros are trimmed
   (:mod:`segreconcat_aug.embeddings`);
3. enrollment model = mean of the speaker's raw embeddings; score = cosine
   similarity of enrollment model and test embedding (:mod:`segreconcat_aug.scoring`);
4. EER (SpeechBrain's definition, :mod:`segreconcat_aug.metrics`) and
   normalized minDCF per subset; the table averages as the paper's Table 2.

Switches: ``eval_normalize_wave`` and ``eval_trim_zeros`` (both on, as the
challenge's extraction; off gives the raw waves), and score normalization,
off by default as the paper uses none (``s-norm`` or ``as-norm`` against a
cohort drawn from the system's training speakers).

:func:`evaluate_system` is the entry point used by ``recipes/evaluate.py`` and
by the training recipe's last stage; this module holds it, the trial lists it
reads and the result types it returns (:class:`SystemResults`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from speechbrain.utils.distributed import infer_device

from .audio import SAMPLE_RATE
from .audio_check import check_audio_files, problem_message, write_problem_list
from .embeddings import EmbeddingExtractor, model_fingerprint
from .errors import UserError, cite
from .kaldi import KaldiFolder, group_by_speaker, load_kaldi_folder, read_trials
from .metrics import verification_metrics
from .report import BOOTSTRAP_DEFAULTS, SUBSET_COLUMNS, table_averages, write_system_report
from .scoring import SCORE_NORMS, cohort_utterances, cosine_scores, normalize_scores, speaker_models
from .vpac import ENROLL_SETS, TRAIN_SET, TRIAL_SETS, system_folders

logger = logging.getLogger(__name__)

#: Subset names in the order of the paper's Table 2.
SUBSETS = SUBSET_COLUMNS


class MissingExportError(UserError, FileNotFoundError):
    """No exported model where evaluation looks for one."""


class TrialListError(UserError, ValueError):
    """A trial list or enrollment folder cannot be scored as it is."""


class ExportError(UserError, RuntimeError):
    """The exported model cannot be loaded: a damaged file, or another model size than the YAML's."""


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
    "eval_bootstrap_resamples": BOOTSTRAP_DEFAULTS["resamples"],
    "eval_bootstrap_seed": BOOTSTRAP_DEFAULTS["seed"],
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
    try:
        state = torch.load(checkpoint, map_location="cpu", weights_only=True)
    except Exception as err:  # torch raises RuntimeError, KeyError, EOFError... for a damaged file
        reason = " ".join(str(err).split())[:120]
        raise ExportError(
            f"{checkpoint}: cannot be read, the file is damaged or cut ({type(err).__name__}: {reason}); "
            "rerun recipes/train.py with the training's options to export the best checkpoint again"
        ) from None
    model = hparams["embedding_model"]
    try:
        model.load_state_dict(state)
    except RuntimeError as err:
        theirs, ours = ecapa_sizes(state), ecapa_sizes(model.state_dict())
        if theirs != ours:
            sizes = f"the export has {_sizes_text(theirs)}, the YAML's embedding_model {_sizes_text(ours)}"
        else:
            sizes = " ".join(str(err).split())[:200]
        raise ExportError(
            f"{checkpoint}: does not fit: {sizes}; give the training's values (its train_hyperparams.yaml "
            "beside the export lists them)"
        ) from None
    return checkpoint


def ecapa_sizes(state: dict) -> dict:
    """``channels``, ``attention_channels`` and ``lin_neurons`` of an ECAPA-TDNN state dict (what is found).

    >>> from speechbrain.lobes.models.ECAPA_TDNN import ECAPA_TDNN
    >>> model = ECAPA_TDNN(80, channels=[16, 16, 16, 16, 48], attention_channels=8, lin_neurons=16)
    >>> ecapa_sizes(model.state_dict())
    {'channels': [16, 16, 16, 16, 48], 'attention_channels': 8, 'lin_neurons': 16}
    """
    channels = []
    while True:
        layer = len(channels)
        key = "blocks.0.conv.conv.weight" if layer == 0 else f"blocks.{layer}.tdnn2.conv.conv.weight"
        if key not in state:
            break
        channels.append(int(state[key].shape[0]))
    sizes = {"channels": channels}
    for name, key in (
        ("channels", "mfa.conv.conv.weight"),
        ("attention_channels", "asp.tdnn.conv.conv.weight"),
        ("lin_neurons", "fc.conv.weight"),
    ):
        if key in state:
            value = int(state[key].shape[0])
            sizes[name] = [*channels, value] if name == "channels" else value
    return sizes


def _sizes_text(sizes: dict) -> str:
    return ", ".join(f"{name}={value}" for name, value in sizes.items())


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
        message = problem_message(report.fatal, len(wav), "enrollment and trial files", listed)
        raise cite(EvaluationAudioError(message), listed)  # the list outlives a removed eval folder
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

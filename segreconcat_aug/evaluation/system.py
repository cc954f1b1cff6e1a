"""Score a trained attacker exactly as the challenge of its protocol does (VPAC 2024 by default).

Per system and subset: enrollment models and test embeddings of whole utterances, cosine scores,
EER and minDCF, the table averages and the privacy metrics (docs/evaluation.md). Its options are
an evaluation YAML's keys (hparams/evaluate.yaml), checked once by :func:`load_evaluation_hparams`.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from pathlib import Path
from typing import Annotated, Literal

import numpy as np
from hyperpyyaml import load_hyperpyyaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from speechbrain.utils.distributed import if_main_process, infer_device, main_process_only

from ..data.audio import SAMPLE_RATE
from ..data.audio_check import check_audio_files, problem_message, write_problem_list
from ..data.convergence import model_convergence
from ..data.hparams_text import BASE_KEY, hparams_text
from ..data.protocols import ALL_SUBSETS, get_protocol
from ..data.vpac import detect_layout, load_set_folder, training_folder
from ..errors import MissingInputError, OptionError, UserError, cite, option_error
from ..models.folder import MODEL_SAVEDIR, SpeakerModel, load_speaker_model, model_folder
from .calibration import CALIBRATIONS, calibrate, check_calibration_set, trial_features
from .embeddings import (
    BATCHINGS,
    WAVE_CACHE_NAMES,
    WAVE_NORMALIZATIONS,
    EmbeddingExtractor,
    model_fingerprint,
    wave_normalization,
)
from .intervals import subset_design
from .metrics import verification_metrics
from .privacy import ListPrivacy, PrivacyOptions
from .scoring import (
    ENROLL_MEANS,
    ENROLL_SCORINGS,
    SCORE_NORMS,
    CohortTooSmallError,
    cohort_utterance_draw,
    cohort_utterances,
    speaker_models,
    used_top_k,
)
from .system_report import write_system_report
from .trials import TRIALS_FROM, SystemResults, TrialListError, gender_rows, load_system_trials, score_trials

logger = logging.getLogger(__name__)

#: The training YAML's key naming its evaluation YAML (hparams/evaluate.yaml), relative to its own folder.
EVAL_HPARAMS_KEY = "eval_hparams"
DEFAULT_EVAL_HPARAMS = Path(__file__).resolve().parents[2] / "hparams" / "evaluate.yaml"

# The wing may not import options.py (tests/test_import_graph.py), hence its own few types.
Count = Annotated[int, Field(ge=1)]
Natural = Annotated[int, Field(ge=0)]
Seed = Annotated[int, Field(ge=0, le=2**32 - 1)]  # numpy's global seed range


class EvaluationOptions(BaseModel):
    """What each key of an evaluation YAML may hold; their defaults and meaning: hparams/evaluate.yaml."""

    model_config = ConfigDict(extra="forbid", strict=True)

    eval_folder: str | None
    eval_model_folder: str | None
    eval_subsets: Annotated[list[Literal[ALL_SUBSETS]], Field(min_length=1)] | None
    eval_batching: Literal[BATCHINGS]
    eval_batch_size: Count
    eval_max_batch_seconds: Annotated[float, Field(gt=0)] | None
    eval_normalize_wave: bool | Literal[WAVE_NORMALIZATIONS] | None
    eval_resample: bool | None
    eval_trim_zeros: bool
    eval_enroll_mean: Literal[ENROLL_MEANS] | None
    eval_enroll_scoring: Literal[ENROLL_SCORINGS]
    eval_calibration: Literal[CALIBRATIONS]
    eval_score_norm: Literal[SCORE_NORMS[1:]] | None
    eval_cohort_utts_per_speaker: Count
    eval_cohort_top_k: Count | None
    eval_cohort_size: Count
    eval_cohort_min_size: Natural
    eval_skip_missing_trials: bool | None
    eval_trials_from: Literal[TRIALS_FROM] | None
    eval_duplicate_trials: Literal["collapse", "keep"] | None
    eval_allow_pipes: bool
    eval_p_targets: Annotated[list[Annotated[float, Field(gt=0, lt=1)]], Field(min_length=1)]
    eval_save_every: Count
    eval_det_plot: bool
    eval_bootstrap_resamples: Natural
    eval_bootstrap_seed: Seed
    eval_privacy: bool
    eval_privacy_top_k: Count
    eval_privacy_speaker_eer_threshold: Annotated[float, Field(gt=0, le=100)]
    eval_privacy_worst_speakers: Natural
    eval_privacy_singling_out_folds: Count
    eval_privacy_seed: Natural


#: The evaluation's keys (an override of one goes to the evaluation YAML).
EVAL_KEYS = tuple(EvaluationOptions.model_fields)


def evaluation_hparams_file(training_file, values) -> Path:
    """The evaluation YAML a training YAML (``values``) names in ``eval_hparams``: beside it, else in the
    checkout's hparams/. An evaluation key in the training YAML is refused: the evaluation YAML is its one place."""
    stray = [key for key in values if key in EVAL_KEYS]
    if stray:
        raise OptionError(
            f"{training_file}: {', '.join(stray)}: the evaluation's keys are in hparams/evaluate.yaml (the "
            f"file eval_hparams names): remove them here, and set them there or as --{stray[0]}=... on the command line"
        )
    name = values.get(EVAL_HPARAMS_KEY) or DEFAULT_EVAL_HPARAMS.name
    path = Path(training_file).parent / name
    shipped = DEFAULT_EVAL_HPARAMS.parent / name
    return path if path.is_file() or not shipped.is_file() else shipped


def load_evaluation_hparams(path, overrides=None) -> dict:
    """The values of an evaluation YAML (composed over its ``base_hparams`` file as a training YAML is:
    :func:`hparams_text`), then ``overrides``, checked against :class:`EvaluationOptions` (an
    :class:`~..errors.OptionError` names every bad one), as given."""
    file = Path(path)
    if not file.is_file():
        raise MissingInputError(
            f"{file}: no such evaluation YAML (eval_hparams names it; hparams/evaluate.yaml)"
        )
    try:
        text = hparams_text(file)
    except FileNotFoundError as error:
        raise MissingInputError(
            f"{error.filename}: no such evaluation YAML ({BASE_KEY} of {file} names it)"
        ) from None
    values = {**dict(load_hyperpyyaml(text) or {}), **dict(overrides or {})}
    try:
        EvaluationOptions.model_validate(values)
    except ValidationError as error:
        raise option_error(error, values) from None
    if values["eval_enroll_scoring"] == "max" and values["eval_score_norm"]:
        raise OptionError(
            f"{path}: eval_enroll_scoring: max scores each enrollment utterance, which eval_score_norm "
            f"({values['eval_score_norm']}) does not normalize: set one of them back (mean, or null)"
        )
    folder = values["eval_folder"]
    if folder and Path(folder).exists() and not Path(folder).is_dir():
        raise OptionError(f"option eval_folder: {folder!r} is a file, not a folder: give a folder path")
    return values


def privacy_options(hparams: dict) -> PrivacyOptions | None:
    """The privacy metrics' settings from the ``eval_privacy*`` keys; None when ``eval_privacy`` is off."""
    if not hparams["eval_privacy"]:
        return None
    return PrivacyOptions(
        top_k=int(hparams["eval_privacy_top_k"]),
        speaker_eer_threshold=float(hparams["eval_privacy_speaker_eer_threshold"]),
        worst_speakers=int(hparams["eval_privacy_worst_speakers"]),
        singling_out_folds=int(hparams["eval_privacy_singling_out_folds"]),
        seed=int(hparams["eval_privacy_seed"]),
    )


def add_privacy_metrics(results: SystemResults, options: PrivacyOptions) -> SystemResults:
    """Add every subset's privacy metrics (:meth:`segreconcat_aug.evaluation.privacy.ListPrivacy.point`) to
    ``results.metrics`` and record ``options`` in ``results.privacy`` (the report's intervals use them)."""
    for name, subset in results.subsets.items():
        design, _ = subset_design(subset)
        found = ListPrivacy(subset, design, options).point()
        found["undefined_because"] = {
            **results.metrics[name].get("undefined_because", {}),
            **found["undefined_because"],
        }
        results.metrics[name].update(found)
    results.privacy = options
    return results


EVAL_SUBFOLDER = "eval"  # the default eval_folder: <output_folder>/eval


def evaluation_folder(hparams: dict) -> Path:
    """Where a run's evaluation goes: ``eval_folder``, else ``<output_folder>/eval``."""
    return Path(hparams.get("eval_folder") or Path(hparams["output_folder"]) / EVAL_SUBFOLDER)


class EvaluationFolderError(UserError, ValueError):
    """The evaluation folder holds another protocol's (or language's) results, which would be replaced."""


def check_evaluation_folder(hparams: dict) -> None:
    """Refuse an evaluation folder holding results of another protocol or language (they would be replaced)."""
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


def load_evaluation_model(hparams: dict, run_opts: dict | None = None, stated=()) -> SpeakerModel:
    """The model folder's speaker model, SpeechBrain's files linked in ``<eval_folder>/model``
    (``stated``: the keys the user gave; a model key among them must be the folder's)."""
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
    """The audio check of every enrollment and trial file scored: unusable files stop here, all named
    (and listed in ``<eval_folder>/audio_problems.txt``); silent, too short or resampled ones are warnings."""
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
    rates = Counter(rate for rate in report.rates.values() if rate != target)
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
) -> SystemResults | None:
    """Evaluate the model folder of a training run on its system's dev and test trials.

    ``hparams``: the loaded training and evaluation YAMLs; ``run_opts``: SpeechBrain's (its ``device``,
    default the accelerator if any); ``write_report``: the scores and results files in ``eval_folder``;
    ``model``: the model to embed with (default :func:`load_evaluation_model`'s). Called by every rank of
    a torchrun job (its process group initialized), the ranks share the embedding extraction and rank 0
    alone checks the audio, scores and writes; the other ranks return None.
    """
    device = _device(run_opts)
    system = hparams["system"]
    data_folder = hparams["data_folder"]
    overrides = hparams.get("folder_overrides") or {}
    scheme = get_protocol(hparams.get("protocol"))
    language = scheme.check_language(hparams.get("language"))
    eval_folder = evaluation_folder(hparams)

    def convention(key):  # the option as given, else the protocol's
        return scheme.convention(key, hparams.get(key))

    score_norm = hparams["eval_score_norm"]
    enroll_mean = convention("eval_enroll_mean")
    allow_pipes = bool(hparams["eval_allow_pipes"])
    check_evaluation_folder(hparams)
    layout = detect_layout(data_folder, system, scheme.layout)
    skip_missing = bool(convention("eval_skip_missing_trials"))
    trials_from = convention("eval_trials_from")
    duplicate_trials = convention("eval_duplicate_trials")
    resample = bool(convention("eval_resample"))
    batching = hparams["eval_batching"]

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
    notes = dict.fromkeys(  # each once, in order
        note for loaded in (*enrollments.values(), *trial_lists.values()) for note in loaded.notes
    )
    cohort_top_k = None
    if score_norm:  # the cohort is drawn (and a too small one refused) before anything is written
        folder = training_folder(data_folder, system, overrides, protocol=scheme.name, language=language)
        train = load_set_folder(
            folder,
            data_folder,
            scheme.train_set(language),
            layout,
            allow_pipes=allow_pipes,
            pipes_key="eval_allow_pipes",
        )
        seed = hparams.get("seed", 0)
        if score_norm == "as-norm-voxattack":
            # VoxATtack's cohort: training utterances themselves, not speaker means
            drawn = cohort_utterance_draw(train, int(hparams["eval_cohort_size"]), seed)
            min_size = int(hparams["eval_cohort_min_size"])
            if len(drawn) < min_size:
                raise CohortTooSmallError(
                    f"eval_cohort_min_size: {system}'s training set gives a cohort of {len(drawn)} "
                    f"utterances, fewer than {min_size}; lower eval_cohort_min_size"
                )
            size = len(drawn)
        else:  # one model per speaker, of the utterances drawn
            chosen = cohort_utterances(train, int(hparams["eval_cohort_utts_per_speaker"]), seed)
            drawn = [utt for utts in chosen.values() for utt in utts]
            size = len(chosen)
        asked = hparams["eval_cohort_top_k"]
        cohort_top_k = used_top_k(score_norm, size, asked, f"{system}'s training set ({folder})")
        if asked and cohort_top_k != asked:  # the cohort is smaller: the k used is what is recorded
            logger.info("eval_cohort_top_k: %d asked, %d used (the cohort's size)", asked, cohort_top_k)

    calibration = hparams["eval_calibration"]
    if calibration == "qmf":
        check_calibration_set(trial_lists)
    # Rank 0 checks (its cache and problem list are files of eval_folder); the other ranks get its warnings.
    audio_warnings = main_process_only(check_evaluation_audio)(
        hparams, enrollments, trial_lists, eval_folder, resample=resample
    )
    model = model or load_evaluation_model(hparams, {"device": device})
    normalize_wave = wave_normalization(convention("eval_normalize_wave"))
    trim = bool(hparams["eval_trim_zeros"])
    # The wave processing is part of the embedding cache's name: changing it re-embeds.
    wave_options = {"normalize_wave": WAVE_CACHE_NAMES.get(normalize_wave, False), "trim_zeros": trim}
    # Padded batches give other embeddings than one utterance at a time: never one cache for both.
    wave_options["batching"] = (
        f"padded-{hparams['eval_batch_size']}-{hparams['eval_max_batch_seconds']}"
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
        batch_size=hparams["eval_batch_size"],
        max_batch_seconds=hparams["eval_max_batch_seconds"],
        normalize_wave=normalize_wave,
        sample_rate=hparams.get("sample_rate", SAMPLE_RATE),
        save_every=hparams["eval_save_every"],
        trim_zeros=trim,
        resample=resample,
        padded=batching == "padded",
    )

    models, enroll_embeddings = {}, {}
    for part, enrollment in enrollments.items():
        embeddings = extractor.embed(
            enrollment.wav,
            cache_root / enrollment.folder.name,
            enrollment.utt2dur,
            desc=f"{system} {part} enroll",
        )
        enroll_embeddings[part] = embeddings
        if hparams["eval_enroll_scoring"] == "max":  # each speaker's utterances, scored one by one
            models[part] = {
                s: np.stack([embeddings[u] for u in utts]) for s, utts in enrollment.speakers.items()
            }
        else:
            models[part] = speaker_models(enrollment.speakers, embeddings, mean=enroll_mean)

    cohort = None
    if score_norm:
        embeddings = extractor.embed(
            {utt: train.wav[utt] for utt in drawn},
            cache_root / f"cohort-{train.path.name}",
            train.utt2dur,
            desc="cohort",
        )
        if score_norm == "as-norm-voxattack":
            cohort = np.stack([embeddings[utt] for utt in drawn])
        else:
            cohort = np.stack(list(speaker_models(chosen, embeddings, mean=enroll_mean).values()))

    test_embeddings = {
        name: extractor.embed(
            {utt: trials.wav[utt] for utt in dict.fromkeys(trials.test_utterances)},
            cache_root / trials.audio_folder.name,
            trials.utt2dur,
            desc=f"{system} {name} trials",
        )
        for name, trials in trial_lists.items()
    }
    if not if_main_process():  # the embeddings are shared: scoring is rank 0's
        return None

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
        **({"enroll_scoring": "max"} if hparams["eval_enroll_scoring"] == "max" else {}),
        **({"calibration": calibration} if calibration != "none" else {}),
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
    p_targets = tuple(hparams["eval_p_targets"])
    qmf_lists = {}
    for name, trials in trial_lists.items():
        part = scheme.part(name)
        scored = score_trials(
            trials,
            models[part],
            test_embeddings[name],
            cohort,
            score_norm,
            cohort_top_k,
        )
        rows = {name: scored}
        if calibration == "qmf":
            features = trial_features(
                trials,
                scored.scores,
                enrollments[part],
                enroll_embeddings[part],
                test_embeddings[name],
                enroll_mean,
            )
            qmf_lists[name] = (features, scored.targets, scored.enroll)
        if scheme.gender_rows:
            genders = {**(enrollments[part].spk2gender or {}), **(trials.spk2gender or {})}
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
    for name, found in calibrate(qmf_lists).items() if qmf_lists else ():
        results.metrics[name].update(found)
    privacy = privacy_options(hparams)
    if privacy is not None:
        add_privacy_metrics(results, privacy)
    if write_report:
        bootstrap = {
            "resamples": hparams["eval_bootstrap_resamples"],
            "seed": int(hparams["eval_bootstrap_seed"]),
        }
        # The flags of the model's own training run (None for a model from elsewhere), in the report.
        convergence = model_convergence(
            model.folder, hparams.get("output_folder"), hparams.get("export_folder")
        )
        write_system_report(
            results,
            eval_folder,
            det_plot=bool(hparams["eval_det_plot"]),
            bootstrap=bootstrap,
            convergence=convergence,
        )
    return results

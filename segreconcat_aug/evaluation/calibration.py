"""QMF calibration (``eval_calibration: qmf``): a logistic regression (scikit-learn) on the score and
quality measures, trained on the dev lists and applied to the test lists; dev's own numbers are
cross-validated by enrollment speaker (docs/evaluation.md).

The quality measures are DAST's (``inference/dast_inference.py``, ``build_qmf_feature``) less its SNRs,
which nothing here measures: log enrollment and test durations and both embeddings' L2 norms.
"""

from __future__ import annotations

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GroupKFold
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from ..data.audio import audio_duration
from ..errors import UserError
from .metrics import eer
from .privacy import CalibrationMetrics, cllr
from .scoring import speaker_models

CALIBRATIONS = ("none", "qmf")
QMF_FEATURES = ("score", "log_enroll_duration", "log_test_duration", "enroll_norm", "test_norm")
#: The smallest dev set calibrated: trials of each class, and enrollment speakers (the folds).
MIN_TRIALS, FOLDS = 20, 5


class CalibrationSetTooSmallError(UserError, ValueError):
    """The dev lists are too small (or absent) to fit the QMF calibration."""


def check_calibration_set(trial_lists: dict) -> None:
    """Refuse, before anything is embedded, dev lists too small to fit and cross-validate the calibration."""
    dev = [trials for name, trials in trial_lists.items() if name.startswith("dev")]
    targets = sum(int(np.sum(trials.targets)) for trials in dev)
    nontargets = sum(int(np.sum(~np.asarray(trials.targets))) for trials in dev)
    speakers = len({spk for trials in dev for spk in trials.enroll_speakers})
    if targets < MIN_TRIALS or nontargets < MIN_TRIALS or speakers < FOLDS:
        raise CalibrationSetTooSmallError(
            f"eval_calibration: qmf is fitted on the dev lists, which hold {targets} target and {nontargets} "
            f"non-target trials of {speakers} enrollment speakers (it needs {MIN_TRIALS}, {MIN_TRIALS} and "
            f"{FOLDS}): score the dev lists too (eval_subsets), or set eval_calibration: none"
        )


def quality_features(scores, enroll_models, test_vectors, enroll_seconds, test_seconds) -> np.ndarray:
    """``(trials, 5)``: :data:`QMF_FEATURES` of each trial (durations in seconds, floored at 10 ms as DAST)."""
    return np.column_stack(
        [
            np.asarray(scores, dtype=np.float64),
            np.log(np.maximum(enroll_seconds, 0.01)),
            np.log(np.maximum(test_seconds, 0.01)),
            np.linalg.norm(enroll_models, axis=1),
            np.linalg.norm(test_vectors, axis=1),
        ]
    )


def _seconds(utts, wav: dict, utt2dur: dict | None) -> np.ndarray:
    """Durations of ``utts`` (a test utterance is in many trials: each header is read once)."""
    known = utt2dur or {}
    seconds = {u: known[u] if u in known else audio_duration(wav[u]) for u in dict.fromkeys(utts)}
    return np.array([seconds[u] for u in utts])


def trial_features(trials, scores, enrollment, enroll_embeddings, test_embeddings, mean="raw") -> np.ndarray:
    """:func:`quality_features` of a scored list; the enrollment side: the speaker model (``mean``) and
    the total duration of the speaker's enrollment utterances."""
    models = speaker_models(enrollment.speakers, enroll_embeddings, mean=mean)
    speakers = trials.enroll_speakers
    spoken = {
        spk: float(_seconds(utts, enrollment.wav, enrollment.utt2dur).sum())
        for spk, utts in enrollment.speakers.items()
    }
    return quality_features(
        scores,
        np.stack([models[spk] for spk in speakers]),
        np.stack([test_embeddings[utt] for utt in trials.test_utterances]),
        np.array([spoken[spk] for spk in speakers]),
        _seconds(trials.test_utterances, trials.wav, trials.utt2dur),
    )


def fit_qmf(features: np.ndarray, targets: np.ndarray):
    """The QMF model: standardized features, then scikit-learn's logistic regression (its defaults)."""
    return make_pipeline(StandardScaler(), LogisticRegression()).fit(
        features, np.asarray(targets, dtype=bool)
    )


def qmf_llr(model, features: np.ndarray, train_targets: np.ndarray) -> np.ndarray:
    """Calibrated log-likelihood ratios (natural log): the model's log posterior odds less its training prior's."""
    prior = float(np.mean(train_targets))
    return model.decision_function(features) - np.log(prior / (1 - prior))


def cross_validated_llr(features, targets, speakers) -> np.ndarray:
    """Each dev trial's LLR from a model fitted without its enrollment speaker (:data:`FOLDS` folds)."""
    targets = np.asarray(targets, dtype=bool)
    llr = np.empty(len(targets))
    for train, held in GroupKFold(n_splits=FOLDS).split(features, targets, groups=speakers):
        model = fit_qmf(features[train], targets[train])
        llr[held] = qmf_llr(model, features[held], targets[train])
    return llr


def calibrated_metrics(llr: np.ndarray, targets: np.ndarray) -> dict:
    """Cllr and minCllr (bits) and EER (%) of calibrated LLRs, under ``qmf_`` keys."""
    targets = np.asarray(targets, dtype=bool)
    tar, non = llr[targets], llr[~targets]
    return {
        "qmf_cllr": cllr(tar, non),
        "qmf_min_cllr": CalibrationMetrics(llr, targets).point["min_cllr"],
        "qmf_eer": 100.0 * eer(tar, non).eer,
    }


def calibrate(lists: dict[str, tuple[np.ndarray, np.ndarray, list]]) -> dict[str, dict]:
    """``name -> (features, targets, enrollment speakers)`` of the scored lists -> ``name ->``
    :func:`calibrated_metrics`: dev lists cross-validated within dev, the others from the model of all dev."""
    dev = [name for name in lists if name.startswith("dev")]
    features = np.concatenate([lists[name][0] for name in dev])
    targets = np.concatenate([lists[name][1] for name in dev])
    speakers = np.concatenate([np.asarray(lists[name][2], dtype=object) for name in dev])
    dev_llr = np.split(
        cross_validated_llr(features, targets, speakers), np.cumsum([len(lists[n][1]) for n in dev])[:-1]
    )
    model = fit_qmf(features, targets)
    found = {name: calibrated_metrics(llr, lists[name][1]) for name, llr in zip(dev, dev_llr)}
    for name, (test_features, test_targets, _) in lists.items():
        if name not in found:
            found[name] = calibrated_metrics(qmf_llr(model, test_features, targets), test_targets)
    return found

"""All privacy metrics of one scored trial list: :class:`ListPrivacy` (point values with the reasons
a value is undefined, and every resample's values for the intervals)."""

from __future__ import annotations

import numpy as np

from ..bootstrap import TrialDesign
from .calibration import CalibrationMetrics
from .cllr import _cllr_terms, _weighted_cllr, cllr
from .identification import Identification
from .linkability import _linkability_undefined, _SortedTrials, linkability, linkability_bins
from .pi_link import pi_link_sweep
from .settings import PrivacyOptions
from .singling_out import SinglingOut
from .speaker_risk import SpeakerRisk
from .structure import list_structure
from .zebra import zebra_tag

#: Scalar metrics with a speaker-bootstrap interval (the names of :meth:`ListPrivacy.resampled`).
INTERVAL_METRICS = (
    "linkability",
    "zebra_dece_bits",
    "zebra_max_abs_log10_lr",
    "cllr",
    "min_cllr",
    "rocch_eer",
    "rank1",
    "top5",
    "pi_link",
    "singling_out",
    "per_speaker_eer_share_below",
)


#: The metrics of PAV-calibrated scores (minCllr, ROCCH-EER, ZEBRA), and ZEBRA's tag of its worst case.
PAV_METRICS = ("zebra_dece_bits", "zebra_max_abs_log10_lr", "zebra_tag", "min_cllr", "rocch_eer")
#: Metrics whose value on equal scores comes from how ties are broken, not from the scores: on a list whose
#: scores are all the same they are undefined (ZEBRA's D_ECE, 0 bits there, is not: it pools ties).
TIE_ORDER_METRICS = ("linkability", "zebra_max_abs_log10_lr", "zebra_tag", "min_cllr", "rocch_eer", "pi_link")


def topk_key(top_k: int) -> str:
    """The results key of the top-k rate: ``top5`` by default."""
    return f"top{int(top_k)}"


def interval_names(options: PrivacyOptions) -> list[str]:
    """:data:`INTERVAL_METRICS` with the top-k key of ``options``."""
    return [topk_key(options.top_k) if name == "top5" else name for name in INTERVAL_METRICS]


class ListPrivacy:
    """All privacy metrics of one scored trial list: point values, and resampled ones for intervals."""

    def __init__(self, subset, design: TrialDesign, options: PrivacyOptions | None = None, scores=None):
        self.options = options or PrivacyOptions()
        self.subset, self.design = subset, design
        self.scores = np.asarray(subset.scores if scores is None else scores)
        self.targets = np.asarray(subset.targets, dtype=bool)
        self.sorted = _SortedTrials(self.scores, self.targets)
        self.calibration = CalibrationMetrics(self.scores, self.targets)
        self.cllr_terms = _cllr_terms(self.scores, self.targets)
        self.structure = list_structure(subset.enroll, subset.test, self.targets, self.scores, design)
        self.identification = Identification(self.structure)
        self.singling = SinglingOut(self.structure, self.options)
        self.speaker_risk = SpeakerRisk(self.scores, self.targets, design)

    def problems(self) -> dict[str, str]:
        """Metric -> why it is undefined on this list (for points and intervals alike)."""
        n_target, n_nontarget = int(self.targets.sum()), int((~self.targets).sum())
        if not n_target or not n_nontarget:
            reason = (
                f"{n_target} target and {n_nontarget} non-target trial(s): every metric needs both "
                "(the reference code stops with an error on such a list)"
            )
            return {name: reason for name in (*interval_names(self.options), "zebra_tag")}
        problems = {}
        if n_target == 1 and n_nontarget == 1:
            reason = (
                "1 target and 1 non-target trial: too few for PAV calibration (the reference code's PAV "
                "raises on a list of two trials)"
            )
            problems.update(dict.fromkeys(PAV_METRICS, reason))
        elif np.all(self.scores == self.scores[0]):
            found = self.calibration.point
            reason = (
                f"every score is the same ({float(self.scores[0]):g}): the scores carry no information (a model "
                "that learned nothing). The reference code breaks the ties (non-targets before targets) and "
                f"would report minCllr {found['min_cllr']:.3f}, ROCCH-EER {found['rocch_eer']:.2f} % and ZEBRA "
                f"tag {zebra_tag(found['zebra_max_abs_log10_lr'])}, as if the list were perfectly separable; "
                "legal_eval's pi_link counts the ties for the attacker"
            )
            problems.update(dict.fromkeys(TIE_ORDER_METRICS, reason))
        if not np.isfinite(self.cllr_terms).all():
            worst = self.scores[~np.isfinite(self.cllr_terms)][0]
            problems["cllr"] = (
                f"a score of {float(worst):g} taken as a log-likelihood ratio gives its trial a posterior of 0: "
                "Cllr is infinite (VPC's cllr returns inf); the raw scores are not calibrated LLRs, see min_cllr"
            )
        if linkability_bins(n_target) < 2 and "linkability" not in problems:
            problems["linkability"] = _linkability_undefined(n_target, linkability_bins(n_target))
        if not len(self.identification.columns):
            for name in ("rank1", topk_key(self.options.top_k), "pi_link"):
                problems[name] = "no test utterance has a target trial"
        elif self.identification.candidates.max() <= self.options.top_k:
            problems[topk_key(self.options.top_k)] = (
                f"every utterance has at most {int(self.identification.candidates.max())} candidate speakers: "
                f"top-{self.options.top_k} identification is 100 % by construction"
            )
        if not self.structure.complete and "pi_link" not in problems:
            problems["pi_link"] = "the list is not a full cross of enrolled speakers and test utterances"
        if self.singling.problem:
            problems["singling_out"] = self.singling.problem
        if not self.speaker_risk.speakers:
            problems["per_speaker_eer_share_below"] = (
                "no enrolled speaker has both target and non-target trials"
            )
        return problems

    def point(self) -> dict:
        """Every metric's point value (None where undefined, the reason in ``undefined_because``)."""
        o, problems = self.options, self.problems()
        tar, non = self.scores[self.targets], self.scores[~self.targets]
        link = linkability(tar, non)
        ones = np.ones((1, len(self.design.speakers)), dtype=np.int64)
        calibrated = self.calibration.point
        per_speaker = self.speaker_risk.per_speaker()
        worst = sorted(per_speaker.items(), key=lambda item: (item[1], item[0]))[: o.worst_speakers]
        values = {
            "linkability": link.value,
            "linkability_local": {
                "bin_centers": link.bin_centers.tolist(),
                "D": link.local.tolist(),
                "bin_edges": link.bin_edges.tolist(),
            },
            "zebra_dece_bits": calibrated["zebra_dece_bits"],
            "zebra_max_abs_log10_lr": calibrated["zebra_max_abs_log10_lr"],
            "zebra_tag": zebra_tag(calibrated["zebra_max_abs_log10_lr"]),
            "cllr": cllr(tar, non),
            "min_cllr": calibrated["min_cllr"],
            "rocch_eer": calibrated["rocch_eer"],
            "rank1": None,
            topk_key(o.top_k): None,
            "pi_link": None,
            "pi_link_sweep": {},
            "singling_out": None,
            "singling_out_sweep": {},
            "per_speaker_eer": per_speaker,
            "per_speaker_eer_threshold": float(o.speaker_eer_threshold),
            "per_speaker_eer_share_below": None,
            "per_speaker_eer_median": float(np.median(self.speaker_risk.eers)) if per_speaker else None,
            "per_speaker_eer_worst": [[speaker, value] for speaker, value in worst],
        }
        if len(self.identification.columns):
            values["rank1"] = float(self.identification.rates(ones, 1)[0])
            values[topk_key(o.top_k)] = float(self.identification.rates(ones, o.top_k)[0])
        if "pi_link" not in problems:
            values["pi_link_sweep"] = pi_link_sweep(self.structure, o.population_sizes)
            values["pi_link"] = values["pi_link_sweep"].get(len(self.structure.enrolled))
        if "singling_out" not in problems:
            values["singling_out_sweep"] = self.singling.sweep(o.population_sizes)
            values["singling_out"] = values["singling_out_sweep"].get(self.singling.n_dataset)
        if per_speaker:
            weights = np.ones((1, len(self.speaker_risk.speakers)))
            share = self.speaker_risk.share_below(
                self.speaker_risk.eers[None, :], weights, o.speaker_eer_threshold
            )
            values["per_speaker_eer_share_below"] = float(share[0])
        for name in problems:
            if name in values:
                values[name] = None
        for name, value in values.items():  # JSON has no NaN or infinity: null, with the reason
            if isinstance(value, float) and not np.isfinite(value):
                values[name] = None
                problems.setdefault(name, f"not a finite number ({value})")
        values["undefined_because"] = {**problems, **self.structure.notes}
        return values

    def resampled(self, weights, names=None) -> dict[str, np.ndarray]:
        """Every interval metric (or only ``names``) of every resample under the list's
        :class:`~segreconcat_aug.evaluation.bootstrap.SpeakerWeights`: ``name -> (resamples,)``, NaN where undefined."""
        o = self.options
        names = list(interval_names(o) if names is None else names)
        unknown = sorted(set(names) - set(interval_names(o)))
        if unknown:
            raise ValueError(f"no interval for {unknown}; metrics with one: {interval_names(o)}")
        counts, resamples = weights.unit_counts, weights.resamples
        out = {name: np.full(resamples, np.nan) for name in names}
        wanted = set(names)
        calibrated = wanted & {"min_cllr", "rocch_eer", "zebra_dece_bits", "zebra_max_abs_log10_lr"}
        if wanted & {"cllr", "linkability"} or calibrated:
            step = max(1, 2_000_000 // max(1, len(self.scores)))
            for start in range(0, resamples, step):
                stop = min(start + step, resamples)
                w = weights.chunk(start, stop)
                if "cllr" in wanted:
                    out["cllr"][start:stop] = _weighted_cllr(self.cllr_terms, self.targets, w)
                if calibrated:
                    for name, values in self.calibration(w).items():
                        if name in wanted:
                            out[name][start:stop] = values
                if "linkability" in wanted:
                    out["linkability"][start:stop] = self.sorted.linkability(w)
        top = topk_key(o.top_k)
        if len(self.identification.columns):
            if "rank1" in wanted:
                out["rank1"] = self.identification.rates(counts, 1)
            if top in wanted:
                out[top] = self.identification.rates(counts, o.top_k)
            if "pi_link" in wanted and self.structure.complete:
                out["pi_link"] = self.identification.rates(counts, 1, strict=True) / 100.0
        if "singling_out" in wanted and self.singling.problem is None:
            out["singling_out"] = self.singling.full_population(counts)
        if "per_speaker_eer_share_below" in wanted and self.speaker_risk.speakers:
            eers = self.speaker_risk.resampled(counts)
            speaker_weights = counts[:, self.speaker_risk.speakers].astype(np.float64)
            out["per_speaker_eer_share_below"] = self.speaker_risk.share_below(
                eers, speaker_weights, o.speaker_eer_threshold
            )
        if len(self.scores) and np.all(self.scores == self.scores[0]):  # so is every resample's list
            for name in set(TIE_ORDER_METRICS) & wanted:
                out[name][:] = np.nan
        return out

"""Privacy metrics beyond the EER, from the scored trials of one list, each equal to the field's reference code.

An EER says how well an attacker verifies identities on average; an anonymizer is judged by how much
identity survives anywhere in its output. This package computes, from the same scored trials as the EER
(a :class:`segreconcat_aug.evaluation.system.SubsetScores` and the speaker units of its
:class:`~segreconcat_aug.evaluation.bootstrap.TrialDesign`), one module per metric family, in the
shape of the reference code each equals:

====================== ==============================================================================
module                 metric (reference)
====================== ==============================================================================
:mod:`.linkability`    linkability ``D<->sys`` (VPC 2024 ``metrics/linkability.py``)
:mod:`.pav`            PAV calibration in the references' tie order (VPC 2024 ``metrics/helpers.py``:
                       ``optimal_llr``; ZEBRA's ``pavx``)
:mod:`.cllr`           Cllr, minCllr, ROCCH-EER (VPC 2024 ``metrics/cllr.py``)
:mod:`.zebra`          ZEBRA's D_ECE, worst case and tag (``zebra.py``, ``plo_plots.py``)
:mod:`.calibration`    minCllr, ROCCH-EER and ZEBRA of many resamples on shared PAV fits
:mod:`.structure`      a crossed list's score matrix (read by the next three)
:mod:`.identification` closed-set rank-1 and top-k (ours)
:mod:`.pi_link`        Linkability pi_link (``legal_eval/metrics/linkability.py``, called)
:mod:`.singling_out`   Singling Out (``legal_eval/metrics/singling_out.py``, called)
:mod:`.speaker_risk`   the EER of each enrolled speaker (VoxATtack's analysis notebook)
:mod:`.list_privacy`   :class:`ListPrivacy`: every metric of one list, points and resamples
:mod:`.settings`       :class:`PrivacyOptions`, the population sweep
====================== ==============================================================================

- **linkability** ``D<->sys`` (Gomez-Barrero et al. 2017 as VoicePrivacy 2024 adapts it): normalized
  histograms of the target and non-target scores over ``min(int(n_target / 10), 100)`` equal bins,
  the local ``D(s)`` and its integral weighted by the target density; undefined below 20 target trials.
- **ZEBRA** (Nautsch et al. 2020): the expected disclosure ``D_ECE`` in bits from the PAV-calibrated
  LLRs and the worst case ``max |log10 LR|`` from the Laplace-smoothed ones, with its tag ``0`` ... ``F``.
- **Cllr, minCllr, ROCCH-EER** as VoicePrivacy 2024 ``metrics/cllr.py`` computes them (ROCCH-EER in %).
- **closed-set identification**: rank-1 and top-k (%) of each test utterance that has a target trial;
- **Linkability pi_link and Singling Out** of Vauquier et al. 2025 with their population sweeps, through
  their reference package ``voice-anonymization-legal-eval`` (``legal_eval``);
- **risk per speaker**: the EER of each enrolled speaker, the share of speakers below a threshold and
  the worst speakers.

Every PAV-based metric adds the references' ``1e-6 * position / N`` to the calibrated LLRs (their
"monotonicity epsilon"), so the values are theirs to rounding, not just to the epsilon.

Intervals: :meth:`ListPrivacy.resampled` computes every scalar metric under the speaker-bootstrap weights
of :mod:`segreconcat_aug.evaluation.bootstrap` (a target trial of speaker ``k`` counts ``w_k`` times, a
non-target trial ``w_e * w_s`` times), which is the metric of the resample's repeated trial list
(checked against that loop in the tests); the PAV metrics run on runs of equal labels in score order,
the position epsilon in closed form per run.

Every public name is importable from this package, as from the single module it was before 0.2
(``from segreconcat_aug.evaluation.privacy import ListPrivacy``). The functions ``linkability``,
``cllr`` and ``zebra`` share their names with their modules: the package's attribute is the function;
import a module's other names from the module itself (``from segreconcat_aug.evaluation.privacy.zebra
import ZEBRA_ZERO``).

Example
-------
>>> tar, non = [0.9, 0.8, 0.4], [0.5, 0.3, 0.2, 0.1]
>>> round(min_cllr(tar, non), 4), round(rocch_eer(tar, non), 4)  # PAV pools 0.4 (target) with 0.5
(0.2874, 0.1429)
>>> zebra(tar, non).tag
'A'
"""

from __future__ import annotations

from .calibration import CalibrationMetrics
from .cllr import cllr, min_cllr, rocch_eer
from .identification import Identification
from .linkability import LINKABILITY_MIN_TARGETS, Linkability, linkability, linkability_bins
from .list_privacy import INTERVAL_METRICS, ListPrivacy, interval_names, topk_key
from .pav import MONOTONICITY_EPSILON
from .pi_link import pi_link_sweep
from .settings import PrivacyOptions, population_sizes, saved_options
from .singling_out import SinglingOut
from .speaker_risk import SpeakerRisk
from .structure import ListStructure, list_structure
from .zebra import ZEBRA_TAGS, ZEBRA_ZERO, Zebra, zebra, zebra_tag

__all__ = [
    "INTERVAL_METRICS",
    "LINKABILITY_MIN_TARGETS",
    "MONOTONICITY_EPSILON",
    "ZEBRA_TAGS",
    "ZEBRA_ZERO",
    "CalibrationMetrics",
    "Identification",
    "Linkability",
    "ListPrivacy",
    "ListStructure",
    "PrivacyOptions",
    "SinglingOut",
    "SpeakerRisk",
    "Zebra",
    "cllr",
    "interval_names",
    "linkability",
    "linkability_bins",
    "list_structure",
    "min_cllr",
    "pi_link_sweep",
    "population_sizes",
    "rocch_eer",
    "saved_options",
    "topk_key",
    "zebra",
    "zebra_tag",
]

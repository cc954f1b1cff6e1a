"""Privacy metrics beyond the EER, from the scored trials of one list, each equal to the field's
reference code (definitions and sources: docs/evaluation-reference.md; the modules: docs/design.md).

Every PAV-based metric adds the references' ``1e-6 * position / N`` to the calibrated LLRs (their
"monotonicity epsilon"), so the values are theirs to rounding, not just to the epsilon. Intervals:
:meth:`ListPrivacy.resampled`, under the speaker-bootstrap weights of :mod:`..bootstrap`.

The functions ``linkability``, ``cllr`` and ``zebra`` share their names with their modules: the
package's attribute is the function; import a module's other names from the module itself.

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

"""Privacy metrics beyond the EER, from the scored trials of one list, each equal to the field's
reference code (definitions and sources: docs/evaluation-reference.md; the modules: docs/design.md).

Every PAV-based metric adds the references' ``1e-6 * position / N`` to the calibrated LLRs (their
"monotonicity epsilon"), so the values are theirs to rounding, not just to the epsilon. Intervals:
:meth:`ListPrivacy.resampled`, under the speaker-bootstrap weights of :mod:`..bootstrap`.

The functions ``linkability`` and ``cllr`` share their names with their modules: the package's
attribute is the function; import a module's other names from the module itself. minCllr, ROCCH-EER
and ZEBRA of a list: :class:`CalibrationMetrics` (its ``point``, or any resamples' trial weights).

>>> found = CalibrationMetrics([0.9, 0.8, 0.4, 0.5, 0.3, 0.2, 0.1], [1, 1, 1, 0, 0, 0, 0]).point
>>> round(found["min_cllr"], 4), round(found["rocch_eer"], 2), zebra_tag(found["zebra_max_abs_log10_lr"])
(0.2874, 14.29, 'A')
"""

from __future__ import annotations

from .calibration import CalibrationMetrics
from .cllr import cllr
from .identification import Identification
from .linkability import LINKABILITY_MIN_TARGETS, Linkability, linkability, linkability_bins
from .list_privacy import INTERVAL_METRICS, ListPrivacy, interval_names, topk_key
from .pav import MONOTONICITY_EPSILON
from .pi_link import pi_link_sweep
from .settings import PrivacyOptions, population_sizes, saved_options
from .singling_out import SinglingOut
from .speaker_risk import SpeakerRisk
from .structure import ListStructure, list_structure
from .zebra import ZEBRA_TAGS, ZEBRA_ZERO, zebra_tag

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
    "cllr",
    "interval_names",
    "linkability",
    "linkability_bins",
    "list_structure",
    "pi_link_sweep",
    "population_sizes",
    "saved_options",
    "topk_key",
    "zebra_tag",
]

"""The privacy metrics' settings (the YAML's ``eval_privacy_*`` keys) and the population sweep of
pi_link and Singling Out (``legal_eval``'s sweeps)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PrivacyOptions:
    """Settings of the metrics that have any (the YAML's ``eval_privacy_*`` keys, docs/evaluation.md)."""

    top_k: int = 5
    speaker_eer_threshold: float = 10.0  # %: "share of speakers below"
    worst_speakers: int = 5
    singling_out_folds: int = 10  # legal_eval's default cross-validation folds
    singling_out_runs: int = 5  # legal_eval's default draws per population size
    max_calibration: int = 9  # legal_eval's M: calibration conversations per speaker
    seed: int = 0  # legal_eval's seed (conversation splits, population draws)
    population_sizes: tuple | None = None  # None: population_sizes(n)


def population_sizes(maximum: int, start: int = 2) -> list[int]:
    """The population sweep: 2, 5, 10, 20, 50, ... below ``maximum``, then ``maximum``.

    >>> population_sizes(15), population_sizes(2)
    ([2, 5, 10, 15], [2])
    """
    sizes, decade = [], 1
    while decade <= maximum:
        sizes += [s * decade for s in (1, 2, 5) if start <= s * decade < maximum]
        decade *= 10
    return sorted(set(sizes)) + ([maximum] if maximum >= start else [])


def saved_options(saved: dict | None) -> PrivacyOptions:
    """The :class:`PrivacyOptions` an evaluation recorded (``privacy_options`` in ``results.json``);
    keys this version does not know are left out.

    >>> saved_options({"top_k": 3, "population_sizes": [2, 5], "future_key": 1}).population_sizes
    (2, 5)
    """
    known = set(PrivacyOptions.__dataclass_fields__)
    values = {key: value for key, value in (saved or {}).items() if key in known}
    if values.get("population_sizes") is not None:
        values["population_sizes"] = tuple(values["population_sizes"])
    return PrivacyOptions(**values)

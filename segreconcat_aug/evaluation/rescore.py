"""Rescoring an evaluation folder from its score files, with the settings the evaluation recorded
(docs/evaluation.md): unchanged score files give the report they came from."""

from __future__ import annotations

from pathlib import Path

from .metrics import verification_metrics
from .privacy import saved_options
from .score_files import read_score_file
from .system import add_privacy_metrics
from .system_report import read_results, write_system_report
from .trials import LIST_COUNTS, SubsetScores, SystemResults


def rescore_folder(folder) -> dict[str, Path]:
    """Write ``folder``'s report again from its score files; the written paths by kind."""
    folder = Path(folder)
    saved = read_results(folder)
    first = next(iter(saved.get("subsets", {}).values()), {})
    p_targets = tuple(  # the minDCF targets the evaluation had (min_dcf_<p>; min_dcf_<p>_ci: its interval)
        float(key[len("min_dcf_") :])
        for key in first
        if key.startswith("min_dcf_") and not key.endswith("_ci")
    )
    subsets, metrics = {}, {}
    for name, relative in saved.get("scores", {}).items():
        found = read_score_file(folder / relative)
        recorded = saved["subsets"].get(name) or {}
        skipped = int(recorded.get("skipped_trials", 0))
        subsets[name] = SubsetScores(
            name,
            Path(relative),
            found.enroll,
            found.test,
            found.targets,
            found.scores,
            skipped,
            found.test_speakers,
        )
        metrics[name] = verification_metrics(
            found.scores[found.targets], found.scores[~found.targets], p_targets=p_targets
        )
        # What the lists held beyond their scores (trials skipped, repeats collapsed): as recorded.
        metrics[name].update({key: int(recorded.get(key, 0)) for key in LIST_COUNTS})
    results = SystemResults(
        system=saved["system"],
        subsets=subsets,
        metrics=metrics,
        options=saved.get("options") or {},
        warnings=list(saved.get("warnings") or []),
        protocol=saved.get("protocol") or "vpac2024",
        language=saved.get("language"),
    )
    if saved.get("privacy_options") is not None:
        add_privacy_metrics(results, saved_options(saved["privacy_options"]))
    bootstrap = saved.get("bootstrap") or {"resamples": 0}
    return write_system_report(
        results,
        folder,
        det_plot=(folder / "det.png").is_file(),
        bootstrap={"resamples": int(bootstrap["resamples"]), "seed": int(bootstrap.get("seed", 0))},
        convergence=saved.get("convergence"),  # the model's training, as the evaluation found it
    )

"""A training run's convergence flags, from its ``epochs.jsonl``: what says its EER may overstate privacy
(this project's own checks; docs/evaluation.md#convergence-flags). The training writes them beside its
export (:data:`CONVERGENCE_FILE`), the evaluation's report reads them back (:func:`model_convergence`)."""

from __future__ import annotations

import json
import math
from pathlib import Path

EPOCHS_LOG = "epochs.jsonl"  # one JSON line per finished epoch, exact values (train_log.txt rounds)
CONVERGENCE_FILE = "convergence.json"
#: The flags, in the order reports list them: name -> what it says in a word.
FLAGS = {
    "best_epoch_last": "best epoch is the last",
    "dev_loss_falling": "dev loss still falling",
    "train_dev_gap": "train/dev gap",
    "augmentation_fallback": "augmentation fell back",
}
#: SegReConcat's counts of a training row passed through unaugmented (``method.augment.COUNT_KEYS``
#: besides ``augmented``; a test holds the two lists equal), and what each means.
FALLBACK_REASONS = {
    "missing_alignment": "no alignment",
    "few_segments": "fewer than 2 segments",
    "no_segments": "no segment",
    "missing_order": "no precomputed order",
}


def read_epochs(folder) -> list[dict]:
    """The epochs of ``<folder>/epochs.jsonl`` in order (none when it is missing)."""
    path = Path(folder) / EPOCHS_LOG
    records = {}
    for line in path.read_text(encoding="utf-8").splitlines() if path.is_file() else []:
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut short by a killed run
        if isinstance(record, dict) and "epoch" in record:
            records[int(record["epoch"])] = record  # an epoch run again after a resume: its last line
    return [records[epoch] for epoch in sorted(records)]


def loss_trend(values) -> float | None:
    """A loss's change per epoch, ``exp(b) - 1`` with ``b`` the least-squares slope of its log (a geometric
    rate, above -1)."""
    values = [float(v) for v in values]
    if len(values) < 2:
        return None
    positive = min(values) > 0
    ys = [math.log(v) for v in values] if positive else values
    mean_x, mean_y = (len(ys) - 1) / 2, sum(ys) / len(ys)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in enumerate(ys)) / sum(
        (x - mean_x) ** 2 for x in range(len(ys))
    )
    if positive:
        return math.expm1(slope)
    mean = sum(values) / len(values)
    return slope / abs(mean) if mean else slope


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def convergence(
    epochs: list[dict], *, limit=None, window=3, min_drop=0.01, max_gap=0.5, max_fallback=0.01
) -> dict:
    """The convergence numbers and flags of a run's epochs (:func:`read_epochs`)."""
    settings = {"window": window, "min_drop": min_drop, "max_gap": max_gap, "max_fallback": max_fallback}
    found = {"epochs": len(epochs), "limit": limit, "settings": settings, "flags": []}
    scored = [e for e in epochs if _finite((e.get("valid") or {}).get("loss"))]
    if not scored:
        return {**found, "problem": "no epoch with a dev loss"}
    # The first of equal losses, as the checkpointer keeps.
    best = min(scored, key=lambda e: e["valid"]["loss"])
    last, best_epoch, dev_loss = epochs[-1]["epoch"], best["epoch"], best["valid"]["loss"]
    recent = scored[-int(window) :]
    slope = loss_trend([e["valid"]["loss"] for e in recent])
    train_loss = (best.get("train") or {}).get("loss")
    gap = dev_loss - train_loss if _finite(train_loss) else None
    relative_gap = gap / abs(train_loss) if gap is not None and train_loss else None
    # SegReConcat's coverage: the last epoch that ran whole (a resumed one counts only its resumed part).
    counted = [e for e in epochs if "augmented" in (e.get("train") or {})]
    coverage = None
    if counted:
        covered = ([e for e in counted if "covers" not in e["train"]] or counted)[-1]
        reasons = {key: int(covered["train"][key]) for key in FALLBACK_REASONS if covered["train"].get(key)}
        augmented, fell_back = int(covered["train"]["augmented"]), sum(reasons.values())
        rows = augmented + fell_back
        coverage = {
            "epoch": covered["epoch"],
            "rows": rows,
            "augmented": augmented,
            "fell_back": fell_back,
            "share_fell_back": fell_back / rows if rows else 0.0,
            "reasons": reasons,
        }
    found.update(
        {
            "last_epoch": last,
            "best_epoch": best_epoch,
            "best_dev_loss": dev_loss,
            "stopped_early": bool(epochs[-1].get("should_stop")),
            "dev_loss_slope": slope,
            "slope_window": len(recent) if slope is not None else None,
            "train_loss_at_best": train_loss,
            "dev_loss_at_best": dev_loss,
            "train_dev_gap": gap,
            "relative_gap": relative_gap,
            "coverage": coverage,
        }
    )
    texts = {}
    if best_epoch == last and not found["stopped_early"]:
        at_limit = " (the epoch limit)" if limit == last else ""
        texts["best_epoch_last"] = (
            f"the lowest dev loss is at epoch {best_epoch} of {last}{at_limit} and early stopping never "
            "triggered, so more epochs would likely have lowered it"
        )
    if slope is not None and slope < -min_drop:
        texts["dev_loss_falling"] = (
            f"{100 * slope:+.1f} % per epoch over the last {len(recent)} epochs "
            f"(a flag below {-100 * min_drop:g} %)"
        )
    if relative_gap is not None and relative_gap > max_gap:
        texts["train_dev_gap"] = (
            f"at the best epoch the dev loss ({dev_loss:.3f}) is {100 * relative_gap:.0f} % above the "
            f"training loss ({train_loss:.3f}) (a flag above {100 * max_gap:g} %)"
        )
    if coverage and coverage["rows"] and coverage["share_fell_back"] > max_fallback:
        reasons = ", ".join(f"{FALLBACK_REASONS[k]} {n}" for k, n in coverage["reasons"].items())
        texts["augmentation_fallback"] = (
            f"{coverage['fell_back']} of {coverage['rows']} training rows "
            f"({100 * coverage['share_fell_back']:.1f} %) of epoch {coverage['epoch']} were not augmented as "
            f"asked ({reasons}; a flag above {100 * max_fallback:g} %)"
        )
    found["flags"] = [{"name": name, "text": f"{FLAGS[name]}: {text}"} for name, text in texts.items()]
    return found


def run_convergence(folder, limit: int | None = None) -> dict | None:
    """:func:`convergence` of the run in ``folder`` (its ``epochs.jsonl``); None when it has none."""
    epochs = read_epochs(folder)
    if not epochs:
        return None
    return {"source": str(Path(folder) / EPOCHS_LOG), **convergence(epochs, limit=limit)}


def model_convergence(model_folder, run_folder=None, export_folder=None) -> dict | None:
    """The convergence of the run that made the model in ``model_folder``; None: unknown. The file beside
    the model first; the run's own file or ``epochs.jsonl`` only when the model is that run's export."""
    model_folder = Path(model_folder)
    own_export = (
        None not in (run_folder, export_folder) and Path(export_folder).resolve() == model_folder.resolve()
    )
    for folder in [model_folder, run_folder] if own_export else [model_folder]:
        try:
            return json.loads((Path(folder) / CONVERGENCE_FILE).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            continue
    return run_convergence(run_folder) if own_export else None

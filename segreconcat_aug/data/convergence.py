"""A training run's convergence, read back from its ``epochs.jsonl``: flags that say an EER may overstate privacy.

A high EER reads as "the anonymizer protects"; it can also mean "the attacker has not learned
enough". :func:`convergence` looks at the epochs a run recorded (``recipes/train.py`` writes one
line per epoch, :data:`EPOCHS_LOG`) and raises these flags (:data:`FLAGS`), each **this project's
own check**, not the detection method of Panariello et al. (Interspeech 2025; docs/evaluation.md
says what was and was not found of theirs):

``best_epoch_last``
    The lowest dev loss (the epoch of the exported model) is at the last epoch and early stopping
    never triggered: training ended at its epoch limit while the model was still improving. A
    one-epoch run always raises it; a run that early stopping ended never does.
``dev_loss_falling``
    The dev loss was still falling at the end: its rate of change per epoch over the last ``window``
    epochs (default 3; all of them when fewer, undefined with one), ``exp(b) - 1`` with ``b`` the
    least-squares slope of the log dev loss against the epoch (:func:`loss_trend`), is below
    ``-min_drop`` (default 0.01: falling by more than 1 % per epoch).
``train_dev_gap``
    At the best epoch the dev loss is more than ``max_gap`` (default 0.5: 50 %) above the training
    loss: the attacker fits its training crops much better than held-out utterances of the same
    speakers, so it will likely generalize worse still to unseen speakers.
``augmentation_fallback``
    More than ``max_fallback`` (default 0.01: 1 %) of the last full epoch's training rows were not
    augmented as asked (SegReConcat's counts: no alignment, too few segments, no order) but passed
    through unchanged.

The trend, the gap and the coverage are reported whether or not they raise a flag. Only the core
of the package is imported beyond ``data`` (this wing): the training writes the result at its end (:data:`CONVERGENCE_FILE`,
in the output folder and beside the exported model) and the evaluation reads it back for its report.

>>> epochs = [{"epoch": 1, "train": {"loss": 9.0}, "valid": {"loss": 8.0}, "should_stop": False}]
>>> [flag["name"] for flag in convergence(epochs)["flags"]]
['best_epoch_last']
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from .result_files import json_text, write_text

EPOCHS_LOG = "epochs.jsonl"  # one JSON line per finished epoch, exact values (train_log.txt rounds)
CONVERGENCE_FILE = "convergence.json"
CONVERGENCE_DEFAULTS = {"window": 3, "min_drop": 0.01, "max_gap": 0.5, "max_fallback": 0.01}
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
    """The epoch records of ``<folder>/epochs.jsonl``, one per epoch (a repeated epoch: its last line).

    A line cut short by a killed run is left out. Missing file: ``[]``.
    """
    path = Path(folder) / EPOCHS_LOG
    if not path.is_file():
        return []
    records = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(record, dict) and "epoch" in record:
            records[int(record["epoch"])] = record
    return [records[epoch] for epoch in sorted(records)]


def _slope(values) -> float:
    n = len(values)
    mean_x, mean_y = (n - 1) / 2, sum(values) / n
    return sum((x - mean_x) * (y - mean_y) for x, y in enumerate(values)) / sum(
        (x - mean_x) ** 2 for x in range(n)
    )


def loss_trend(values) -> float | None:
    """The relative change per epoch of a loss: ``exp(b) - 1``, ``b`` the least-squares slope of its log
    against the epoch (None: fewer than 2 values). A geometric rate: -0.5 halves the loss each epoch,
    and it never goes below -1 however fast the loss falls. Losses of 0 or less (never a cross-entropy)
    fall back to the plain slope divided by the mean.

    >>> loss_trend([4.0, 2.0, 1.0]), loss_trend([2.0, 2.0])
    (-0.5, 0.0)
    >>> loss_trend([2.0]) is None
    True
    """
    values = [float(v) for v in values]
    if len(values) < 2:
        return None
    if min(values) > 0:
        return math.expm1(_slope([math.log(v) for v in values]))
    mean = sum(values) / len(values)
    return _slope(values) / abs(mean) if mean else _slope(values)


def coverage(epochs: list[dict]) -> dict | None:
    """How many training rows of the last full epoch SegReConcat augmented, and how many fell back (why).

    None for a run without augmentation (its epochs carry no ``augmented`` count). An epoch resumed
    mid-way counts only its resumed part (``covers``): the last epoch that ran whole is used when there is one.

    >>> coverage([{"epoch": 1, "train": {"augmented": 95, "missing_alignment": 5}}])
    {'epoch': 1, 'rows': 100, 'augmented': 95, 'fell_back': 5, 'share_fell_back': 0.05, 'reasons': {'missing_alignment': 5}}
    """
    counted = [e for e in epochs if "augmented" in (e.get("train") or {})]
    if not counted:
        return None
    whole = [e for e in counted if "covers" not in e["train"]]
    record = (whole or counted)[-1]
    train = record["train"]
    reasons = {key: int(train[key]) for key in FALLBACK_REASONS if train.get(key)}
    augmented, fell_back = int(train["augmented"]), sum(reasons.values())
    rows = augmented + fell_back
    return {
        "epoch": record["epoch"],
        "rows": rows,
        "augmented": augmented,
        "fell_back": fell_back,
        "share_fell_back": fell_back / rows if rows else 0.0,
        "reasons": reasons,
    }


def convergence(epochs: list[dict], *, limit: int | None = None, **settings) -> dict:
    """The convergence numbers and flags of a run's epoch records (:func:`read_epochs`).

    Parameters
    ----------
    epochs : list of dict
        ``epochs.jsonl`` records: ``epoch``, ``train`` (``loss`` and SegReConcat's counts),
        ``valid`` (``loss``), ``should_stop`` (the early stopper's decision after the epoch).
    limit : int, optional
        The run's epoch limit (``number_of_epochs``), to say when the last epoch was the limit.
    **settings
        ``window``, ``min_drop``, ``max_gap``, ``max_fallback`` (:data:`CONVERGENCE_DEFAULTS`).

    Returns
    -------
    dict
        ``epochs``, ``limit``, ``best_epoch`` (lowest dev loss, the exported model's), ``best_dev_loss``,
        ``stopped_early``, ``dev_loss_slope`` (:func:`loss_trend`: relative change per epoch) and ``slope_window``,
        ``train_loss_at_best``, ``dev_loss_at_best``, ``train_dev_gap`` and ``relative_gap``,
        ``coverage`` (:func:`coverage`), ``settings`` and ``flags`` (a list of ``{"name", "text"}``).

    Examples
    --------
    >>> record = lambda e, dev, stop=False: {"epoch": e, "train": {"loss": 2.0}, "valid": {"loss": dev},
    ...                                      "should_stop": stop}
    >>> stopped = convergence([record(1, 3.0), record(2, 2.5), record(3, 2.6), record(4, 2.7, True)])
    >>> stopped["best_epoch"], stopped["stopped_early"], [f["name"] for f in stopped["flags"]]
    (2, True, [])
    >>> falling = convergence([record(1, 3.0), record(2, 2.5), record(3, 2.0)], limit=3)
    >>> [f["name"] for f in falling["flags"]]
    ['best_epoch_last', 'dev_loss_falling']
    >>> falling["flags"][1]["text"]
    'dev loss still falling: -18.4 % per epoch over the last 3 epochs (a flag below -1 %)'
    """
    unknown = sorted(set(settings) - set(CONVERGENCE_DEFAULTS))
    if unknown:
        raise TypeError(f"unknown convergence settings {unknown}; known: {list(CONVERGENCE_DEFAULTS)}")
    settings = {**CONVERGENCE_DEFAULTS, **settings}
    scored = [e for e in epochs if _finite((e.get("valid") or {}).get("loss"))]
    result = {"epochs": len(epochs), "limit": limit, "settings": settings, "flags": []}
    if not scored:
        result["problem"] = "no epoch with a dev loss"
        return result
    best = min(
        scored, key=lambda e: e["valid"]["loss"]
    )  # the first of equal losses, as the checkpointer keeps
    last = epochs[-1]
    window = scored[-int(settings["window"]) :]
    slope = loss_trend([e["valid"]["loss"] for e in window])
    train_loss = (best.get("train") or {}).get("loss")
    dev_loss = best["valid"]["loss"]
    gap = dev_loss - train_loss if _finite(train_loss) else None
    relative_gap = gap / abs(train_loss) if gap is not None and train_loss else None
    result.update(
        {
            "last_epoch": last["epoch"],
            "best_epoch": best["epoch"],
            "best_dev_loss": dev_loss,
            "stopped_early": bool(last.get("should_stop")),
            "dev_loss_slope": slope,
            "slope_window": len(window) if slope is not None else None,
            "train_loss_at_best": train_loss,
            "dev_loss_at_best": dev_loss,
            "train_dev_gap": gap,
            "relative_gap": relative_gap,
            "coverage": coverage(epochs),
        }
    )
    result["flags"] = _flags(result, settings)
    return result


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _flags(found: dict, settings: dict) -> list[dict]:
    flags = []
    last, best = found["last_epoch"], found["best_epoch"]
    if best == last and not found["stopped_early"]:
        at_limit = " (the epoch limit)" if found["limit"] == last else ""
        flags.append(
            {
                "name": "best_epoch_last",
                "text": f"best epoch is the last: the lowest dev loss is at epoch {best} of {last}{at_limit} and "
                "early stopping never triggered, so more epochs would likely have lowered it",
            }
        )
    slope = found["dev_loss_slope"]
    if slope is not None and slope < -settings["min_drop"]:
        flags.append(
            {
                "name": "dev_loss_falling",
                "text": f"dev loss still falling: {100 * slope:+.1f} % per epoch over the last "
                f"{found['slope_window']} epochs (a flag below {-100 * settings['min_drop']:g} %)",
            }
        )
    relative = found["relative_gap"]
    if relative is not None and relative > settings["max_gap"]:
        flags.append(
            {
                "name": "train_dev_gap",
                "text": f"train/dev gap: at the best epoch the dev loss ({found['dev_loss_at_best']:.3f}) is "
                f"{100 * relative:.0f} % above the training loss ({found['train_loss_at_best']:.3f}) "
                f"(a flag above {100 * settings['max_gap']:g} %)",
            }
        )
    covered = found["coverage"]
    if covered and covered["rows"] and covered["share_fell_back"] > settings["max_fallback"]:
        reasons = ", ".join(f"{FALLBACK_REASONS[k]} {n}" for k, n in covered["reasons"].items())
        flags.append(
            {
                "name": "augmentation_fallback",
                "text": f"augmentation fell back: {covered['fell_back']} of {covered['rows']} training rows "
                f"({100 * covered['share_fell_back']:.1f} %) of epoch {covered['epoch']} were not augmented as "
                f"asked ({reasons}; a flag above {100 * settings['max_fallback']:g} %)",
            }
        )
    return flags


def run_convergence(folder, limit: int | None = None, **settings) -> dict | None:
    """:func:`convergence` of the run in ``folder`` (its ``epochs.jsonl``); None when it has none."""
    epochs = read_epochs(folder)
    if not epochs:
        return None
    return {"source": str(Path(folder) / EPOCHS_LOG), **convergence(epochs, limit=limit, **settings)}


def write_convergence(found: dict, *folders) -> list[Path]:
    """Write ``found`` as :data:`CONVERGENCE_FILE` into each of ``folders`` (those that exist), whole or
    not at all, as strict JSON (a NaN loss is ``null``: :mod:`segreconcat_aug.data.result_files`)."""
    text = json_text(found, indent=2) + "\n"
    return [
        write_text(Path(folder) / CONVERGENCE_FILE, text)
        for folder in folders
        if folder is not None and Path(folder).is_dir()
    ]


def model_convergence(model_folder, run_folder=None, export_folder=None) -> dict | None:
    """The convergence of the training run that made the model in ``model_folder``, or None when unknown.

    Its :data:`CONVERGENCE_FILE` (written beside the exported model at the end of training), else,
    when ``model_folder`` is the run's own export (``export_folder`` of ``run_folder``), the run's file
    or its ``epochs.jsonl`` (a run trained before the file existed). A model from elsewhere (a
    pretrained folder, another toolkit's) has none.
    """
    model_folder = Path(model_folder)
    candidates = [model_folder / CONVERGENCE_FILE]
    own_export = (
        run_folder is not None
        and export_folder is not None
        and Path(export_folder).resolve() == model_folder.resolve()
    )
    if own_export:
        candidates.append(Path(run_folder) / CONVERGENCE_FILE)
    for path in candidates:
        if path.is_file():
            try:
                return json.loads(path.read_text(encoding="utf-8"))
            except json.JSONDecodeError:
                continue
    return run_convergence(run_folder) if own_export else None


def flag_names(found: dict | None) -> list[str]:
    """The names of the flags ``found`` raises (none for None).

    >>> flag_names({"flags": [{"name": "best_epoch_last", "text": "..."}]}), flag_names(None)
    (['best_epoch_last'], [])
    """
    return [flag["name"] for flag in (found or {}).get("flags") or []]

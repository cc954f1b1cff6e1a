"""Console scripts: each runs a recipe of the source checkout with the same arguments.

``segreconcat-train hparams/ecapa_segreconcat.yaml --system=T8-5`` is
``python recipes/train.py hparams/ecapa_segreconcat.yaml --system=T8-5``, from any
directory. The recipes and YAML files live in the repository (SpeechBrain style),
so the scripts need the editable install of the README (``pip install -e .``).

>>> sorted(RECIPES)[:3]
['align', 'anonymize', 'demo']
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RECIPES = {
    "align": "align.py",
    "anonymize": "anonymize.py",
    "demo": "run_demo.py",
    "evaluate": "evaluate.py",
    "grid": "run_grid.py",
    "orders": "compute_orders.py",
    "train": "train.py",
}


def load_recipe_hparams(argv=None, *, configure_logging: bool = True):
    """The start of every recipe: ``hparams.yaml --key=value ...`` -> its loaded hyperparameters.

    Returns ``(hparams_file, run_opts, overrides, hparams)`` as SpeechBrain's
    ``parse_arguments`` and ``load_hyperpyyaml`` give them, every option value checked
    (:func:`segreconcat_aug.options.validate_hparams_file`, before loading); ``argv`` defaults to this
    process's arguments. Logging goes to the console at INFO unless told otherwise
    (a recipe that creates a SpeechBrain experiment folder lets that configure it).
    """
    import logging

    import speechbrain as sb
    from hyperpyyaml import load_hyperpyyaml

    from .options import validate_hparams_file

    hparams_file, run_opts, overrides = sb.parse_arguments(sys.argv[1:] if argv is None else list(argv))
    validate_hparams_file(hparams_file, overrides)  # every option value, before anything is written
    with open(hparams_file, encoding="utf-8") as handle:
        hparams = load_hyperpyyaml(handle, overrides)
    if configure_logging:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s: %(message)s")
    return hparams_file, run_opts, overrides, hparams


def run_recipe(name: str, argv: list[str] | None = None) -> None:
    """Run ``recipes/<file>`` as ``__main__`` with ``argv`` (default: this process's arguments)."""
    script = REPO / "recipes" / RECIPES[name]
    if not script.is_file():
        raise SystemExit(
            f"segreconcat-{name}: {script} not found; the console scripts run the recipes of a source "
            "checkout: clone the repository and install it with `pip install -e .`"
        )
    sys.argv = [str(script), *(sys.argv[1:] if argv is None else argv)]
    sys.path.insert(0, str(script.parent))
    runpy.run_path(str(script), run_name="__main__")


def _entry(name: str):
    def main() -> None:
        run_recipe(name)

    main.__name__ = f"{name}_main"
    main.__doc__ = f"Console script ``segreconcat-{name}``: runs ``recipes/{RECIPES[name]}``."
    return main


align = _entry("align")
anonymize = _entry("anonymize")
demo = _entry("demo")
evaluate = _entry("evaluate")
grid = _entry("grid")
orders = _entry("orders")
train = _entry("train")

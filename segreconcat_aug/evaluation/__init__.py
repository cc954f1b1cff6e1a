"""Evaluation: embeddings, trial scoring, EER/minDCF and the privacy metrics, speaker-bootstrap
intervals (:mod:`.bootstrap`, applied to a table by :mod:`.intervals`), the system runner
(:mod:`.system`) and the reports: score files (:mod:`.score_files`), one system's results
(:mod:`.system_report`), figures (:mod:`.figures`), published numbers (:mod:`.references`),
comparisons across runs (:mod:`.comparison`) and the grid's tables (:mod:`.tables`).

May import the core (``errors``, ``seeding``), ``data`` and ``models`` (the speaker-model folder it
embeds with, :mod:`segreconcat_aug.models.folder`); nothing of the method, alignment or training, so
an anonymizer is scored the same whatever attacker produced the model.

The system runner's names (``evaluate_system``, ``SubsetScores``, ...) are also importable from
here, as they were from the 0.1.0 module ``segreconcat_aug.evaluation``; they load on first use,
so importing a light module of this wing (``metrics``) does not load the runner.
"""

from __future__ import annotations

import importlib


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    system = importlib.import_module(".system", __name__)
    try:
        return getattr(system, name)
    except AttributeError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None

"""Evaluation: embeddings, trial scoring, EER/minDCF and the privacy metrics, speaker-bootstrap
intervals (:mod:`.bootstrap`, applied to a table by :mod:`.intervals`), the trial lists (:mod:`.trials`),
the system runner (:mod:`.system`) and the reports: score files (:mod:`.score_files`), one system's
results (:mod:`.system_report`), figures (:mod:`.figures`), published numbers (:mod:`.references`),
comparisons across runs (:mod:`.comparison`) and the grid's tables (:mod:`.tables`).

May import the core (``errors``, ``seeding``), ``data`` and ``models`` (the speaker-model folder it
embeds with, :mod:`segreconcat_aug.models.folder`); nothing of the method, alignment or training, so
an anonymizer is scored the same whatever attacker produced the model.
"""

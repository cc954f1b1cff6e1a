"""Training the attacker: one system's data preparation (:mod:`.data_prep`), manifests shared by
forked workers (:mod:`.manifest`), SpeechBrain's audio pipelines (:mod:`.pipeline`) and what the
training recipe does around its Brain.

May import the core, ``data``, ``align`` and ``method``; never ``evaluation``.
"""

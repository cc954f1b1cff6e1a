"""Embedding models and speaker-model folders, which training and evaluation share.

:mod:`.folder` reads any SpeechBrain speaker-model folder for evaluation (``EncoderClassifier``
through its ``hyperparams.yaml``, its checks and one-line mismatches); :mod:`.export` writes the
trained attacker as such a folder; :mod:`.pretrained` reads a folder for fine-tuning
(``init_from``) and holds the training's model to it; :mod:`.registry` keeps the model families
(:mod:`.ecapa`: SpeechBrain's ECAPA-TDNN), each reading its own folders.

May import the core (``errors``, ``seeding``) and ``data``; training and evaluation import this
wing, never the other way round, so the model a folder holds is read one way for both.
"""

"""Embedding models and speaker-model folders, which training and evaluation share (docs/design.md).

Training and evaluation import this wing, never the other way round, so a folder is read one way for both.
"""

"""SegReConcat: word-level segment rearrangement and concatenation for attacking voice anonymization.

The method reads top to bottom in :mod:`segreconcat_aug.augment`
(alignment -> segments -> order -> concatenation).
"""

from .alignment import AlignmentIndex, UtteranceAlignment, Word, load_alignments
from .augment import SegReConcat
from .strategies import STRATEGIES, get_strategy, register_strategy

__version__ = "0.1.0"

__all__ = [
    "AlignmentIndex",
    "SegReConcat",
    "STRATEGIES",
    "UtteranceAlignment",
    "Word",
    "get_strategy",
    "load_alignments",
    "register_strategy",
]

"""SegReConcat: word-level segment rearrangement and concatenation for attacking voice anonymization.

The method reads top to bottom in :mod:`segreconcat_aug.method.augment`
(alignment -> segments -> order -> concatenation). The package is in wings, one per stage
(docs/design.md): ``data`` (challenge folders, audio, protocols), ``align`` (word alignment),
``method`` (segments, orders, the augmentation), ``training``, ``evaluation`` and
``anonymizers``; ``errors``, ``seeding``, ``options``, ``cli`` and ``grid`` (the grid of
attackers, which runs the recipes) sit at the top.
"""

from .align.cache import AlignmentIndex, UtteranceAlignment, Word, load_alignments
from .method.augment import SegReConcat
from .method.strategies import STRATEGIES, get_strategy, register_strategy

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

"""SegReConcat: word-level segment rearrangement and concatenation for attacking voice anonymization.

The method reads top to bottom in :mod:`segreconcat_aug.method.augment`
(alignment -> segments -> order -> concatenation). The package is in wings, one per stage
(docs/design.md): ``data`` (challenge folders, audio, protocols), ``align`` (word alignment),
``method`` (segments, orders, the augmentation), ``training``, ``evaluation`` and
``anonymizers``; ``errors``, ``seeding``, ``options``, ``cli`` and ``grid`` (the grid of
attackers, which runs the recipes) sit at the top.
"""

from . import _moved

_moved.install()  # the module paths of 0.1.0 (segreconcat_aug.augment, ...) keep importing

from .align.cache import AlignmentIndex, UtteranceAlignment, Word, load_alignments  # noqa: E402
from .method.augment import SegReConcat  # noqa: E402
from .method.strategies import STRATEGIES, get_strategy, register_strategy  # noqa: E402

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

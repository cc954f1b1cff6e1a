"""Who trains and who is held out: the seeded dev split per speaker and the training set's nested fractions.

Every draw is keyed by ``(seed, speaker)`` (or ``(seed, stratum)``) alone: adding a speaker changes no
other speaker's split, and a smaller fraction's subset lies inside every larger one's.
"""

from __future__ import annotations

import math

from ..data.kaldi import group_by_speaker
from ..seeding import seeded_rng

#: VPC 2024's training data preparation (its libri_prepare.py): 10 % of the utterances held out for dev
#: (``split_ratio [90, 10]``).
DEV_RATIO = 0.10
_SPLIT_STREAM = 7  # dev draws stay independent of any other use of seeded_rng
_SUBSET_STREAM = 11  # so do the learning curve's subsets
TRAIN_SUBSAMPLES = ("utterances", "speakers")


def split_dev(
    utt2spk: dict[str, str],
    durations: dict[str, float],
    *,
    dev_ratio: float = DEV_RATIO,
    min_duration: float,
    seed: int,
) -> set[str]:
    """Hold out ``max(1, round(dev_ratio * n))`` utterances per speaker (seeded).

    >>> utt2spk = {f"a{k}": "a" for k in range(10)} | {"b0": "b"}  # b has one utterance: kept for training
    >>> durations = dict.fromkeys(utt2spk, 5.0)
    >>> sorted(split_dev(utt2spk, durations, dev_ratio=0.2, min_duration=3.0, seed=1))
    ['a4', 'a6']
    """
    if not 0 <= dev_ratio < 1:
        raise ValueError(f"dev_ratio must be in [0, 1), got {dev_ratio}")
    dev: set[str] = set()
    if dev_ratio == 0:
        return dev
    by_speaker = group_by_speaker(sorted(utt2spk), utt2spk)
    for spk, utts in sorted(by_speaker.items()):
        if len(utts) < 2:
            continue
        wanted = min(max(1, round(dev_ratio * len(utts))), len(utts) - 1)
        candidates = [utt for utt in utts if durations[utt] >= min_duration]
        if not candidates:
            continue
        rng = seeded_rng(seed, 0, spk, stream=_SPLIT_STREAM)
        picked = rng.choice(len(candidates), size=min(wanted, len(candidates)), replace=False)
        dev.update(candidates[k] for k in picked)
    return dev


def _kept(count: int, fraction: float) -> int:
    """``ceil(fraction * count)`` (at least 1 of a non-empty set), robust to ``0.1 * 30 = 3.0000000000000004``."""
    return min(count, max(1, math.ceil(round(fraction * count, 9)))) if count else 0


def subsample_training(
    utt2spk: dict[str, str],
    fraction: float,
    by: str = "utterances",
    *,
    seed: int,
    spk2gender: dict[str, str] | None = None,
    dev_speakers=(),
) -> set[str]:
    """The training utterances kept at ``fraction`` of the training set (``utt2spk``: the training ones).

    >>> utt2spk = {f"{s}-{k}": s for s in "abcd" for k in range(4)}
    >>> half = subsample_training(utt2spk, 0.5, seed=1)
    >>> quarter = subsample_training(utt2spk, 0.25, seed=1)
    >>> len(half), len(quarter), quarter < half, {u[0] for u in quarter} == set("abcd")
    (8, 4, True, True)
    >>> sorted({u[0] for u in subsample_training(utt2spk, 0.5, "speakers", seed=1)})
    ['c', 'd']
    """
    if by not in TRAIN_SUBSAMPLES:
        raise ValueError(f"train_subsample: unknown {by!r}; choose from {TRAIN_SUBSAMPLES}")
    if not 0 < fraction <= 1:
        raise ValueError(f"train_fraction must be in (0, 1], got {fraction}")
    by_speaker = group_by_speaker(sorted(utt2spk), utt2spk)
    if fraction == 1:
        return set(utt2spk)
    if by == "utterances":
        kept = set()
        for spk, utts in sorted(by_speaker.items()):
            order = seeded_rng(seed, 0, spk, stream=_SUBSET_STREAM).permutation(len(utts))
            kept.update(utts[k] for k in order[: _kept(len(utts), fraction)])
        return kept
    genders = spk2gender or {}
    dev_speakers = set(dev_speakers)
    strata: dict[str, list[str]] = {}
    for spk in sorted(by_speaker):
        strata.setdefault(f"{genders.get(spk, '')}/{'dev' if spk in dev_speakers else 'train'}", []).append(
            spk
        )
    kept = set()
    for stratum, speakers in sorted(strata.items()):
        order = seeded_rng(seed, 0, f"speakers/{stratum}", stream=_SUBSET_STREAM).permutation(len(speakers))
        for k in order[: _kept(len(speakers), fraction)]:
            kept.update(by_speaker[speakers[k]])
    return kept

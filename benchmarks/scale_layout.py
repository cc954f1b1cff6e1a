"""A challenge-size training set built by reference from the bundled demo audio (for the scale benchmarks).

:func:`build_scale_layout` writes ``<root>/SCALE/data/train-clean-360_SCALE/``
with ``wav.scp`` (absolute paths of the demo's 338 training files, used again
and again: no audio is copied), ``utt2spk`` and ``spk2utt`` for the challenge's
104,014 utterances of 921 speakers, and ``<root>/alignments/SCALE.jsonl``: each
utterance gets the demo's real (pocketsphinx) alignment of the file it points at.
The demo's mean utterance length (12.5 s) is the challenge's (12.3 s), so the
rows, words and bytes per utterance are the real ones.
"""

from __future__ import annotations

import json
from pathlib import Path

from segreconcat_aug.data.kaldi import read_wav_scp

REPO = Path(__file__).resolve().parents[1]
DEMO_DATA = REPO / "demo" / "data"
DEMO_TRAIN = DEMO_DATA / "MCADAMS" / "data" / "train-clean-360_MCADAMS"
DEMO_ALIGNMENTS = DEMO_DATA / "alignments" / "MCADAMS.jsonl"
SYSTEM = "SCALE"
CHALLENGE_UTTERANCES = 104_014  # VPAC 2024 train-clean-360, per system
CHALLENGE_SPEAKERS = 921


def build_scale_layout(
    root, utterances: int = CHALLENGE_UTTERANCES, speakers: int = CHALLENGE_SPEAKERS
) -> tuple[Path, Path]:
    """Write the layout under ``root``; returns ``(data folder, alignment cache)``.

    Utterance ``k`` belongs to speaker ``k % speakers`` and points at demo file
    ``k % 338``; its alignment line is that file's with the id replaced.
    """
    root = Path(root)
    sources = read_wav_scp(DEMO_TRAIN / "wav.scp", root=DEMO_DATA)
    lines = {}
    with open(DEMO_ALIGNMENTS, encoding="utf-8") as handle:
        for line in handle:
            lines[json.loads(line)["id"]] = line.rstrip("\n")
    source_ids = [utt for utt in sources if utt in lines]
    resolved = {utt: Path(sources[utt]).resolve() for utt in source_ids}
    folder = root / SYSTEM / "data" / f"train-clean-360_{SYSTEM}"
    folder.mkdir(parents=True, exist_ok=True)
    cache = root / "alignments" / f"{SYSTEM}.jsonl"
    cache.parent.mkdir(parents=True, exist_ok=True)
    by_utt = {}
    for k in range(utterances):
        by_utt[f"{k % speakers:04d}-{k // speakers:05d}"] = (
            f"{k % speakers:04d}",
            source_ids[k % len(source_ids)],
        )
    ordered = sorted(by_utt)
    with (
        open(folder / "wav.scp", "w", encoding="utf-8") as wav,
        open(folder / "utt2spk", "w", encoding="utf-8") as utt2spk,
        open(cache, "w", encoding="utf-8") as alignments,
    ):
        for utt in ordered:
            spk, source = by_utt[utt]
            wav.write(f"{utt} {resolved[source]}\n")
            utt2spk.write(f"{utt} {spk}\n")
            line = lines[source]
            # The id is the first key of every line the writer makes: swap it textually.
            alignments.write('{"id": ' + json.dumps(utt) + line[line.index(",") :] + "\n")
    by_speaker: dict[str, list[str]] = {}
    for utt in ordered:
        by_speaker.setdefault(by_utt[utt][0], []).append(utt)
    with open(folder / "spk2utt", "w", encoding="utf-8") as spk2utt:
        for spk, utts in sorted(by_speaker.items()):
            spk2utt.write(f"{spk} {' '.join(utts)}\n")
    return folder, cache

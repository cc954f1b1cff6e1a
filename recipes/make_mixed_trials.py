#!/usr/bin/env python3
"""Build VPC 2026-style pooled trial lists (``libri_<part>_trials_mixed``) from VPAC 2024's f and m lists.

Usage::

    python recipes/make_mixed_trials.py hparams/mixed_trials.yaml --data_folder=<VPAC root> --system=B3
    python recipes/make_mixed_trials.py hparams/mixed_trials.yaml --data_folder=<2026 root>

Each part's ``libri_<part>_trials_mixed`` is built by the 2026 rule (:mod:`segreconcat_aug.data.mixed_trials`),
beside its inputs or under ``output_folder``; nothing is written before every input is checked.
"""

from __future__ import annotations

import logging
from pathlib import Path

from segreconcat_aug.cli import load_recipe_hparams, run_main
from segreconcat_aug.data.mixed_trials import MixedTrialsError, mixed_trials, write_all_mixed_trials
from segreconcat_aug.data.protocols import PARTS
from segreconcat_aug.data.vpac import detect_layout, system_folders
from segreconcat_aug.options import MixedTrialsOptions

logger = logging.getLogger("make_mixed_trials")
SETS = {"enroll": "libri_{part}_enrolls", "f": "libri_{part}_trials_f", "m": "libri_{part}_trials_m"}


def part_folders(hparams, part: str) -> tuple[dict[str, Path], Path]:
    """The input folders of one part (enroll, f, m) and the mixed folder to write."""
    root, system = Path(hparams["data_folder"]), hparams.get("system")
    names = {role: name.format(part=part) for role, name in SETS.items()}
    mixed = f"libri_{part}_trials_mixed"
    if system:
        layout = detect_layout(root, system, "vpac2024")
        folders = system_folders(
            root, system, sets=list(names.values()), layout=layout, known_sets=names.values()
        )
        inputs = {role: folders[name] for role, name in names.items()}
        mixed = f"{mixed}_{system}"
    else:
        inputs = {role: root / "data" / name for role, name in names.items()}
        missing = [str(path) for path in inputs.values() if not path.is_dir()]
        if missing:
            raise MixedTrialsError(
                f"no folder {missing[0]}: without --system the original lists of the VPC 2026 layout "
                "(<root>/data/libri_<part>_trials_f, ...) are read; give --system=<SYS> for a system's lists"
            )
    target_root = Path(hparams["output_folder"]) if hparams.get("output_folder") else inputs["f"].parent
    return inputs, target_root / mixed


def main(argv=None):
    _, _, _, hparams = load_recipe_hparams(argv, MixedTrialsOptions)
    parts = list(hparams["parts"])
    unknown = [part for part in parts if part not in PARTS]
    if unknown:
        raise MixedTrialsError(f"parts: {unknown} are not parts; parts: {list(PARTS)}")
    jobs = []
    for part in parts:  # every input read and checked before anything is written
        inputs, target = part_folders(hparams, part)
        result = mixed_trials(
            inputs["enroll"],
            inputs["f"],
            inputs["m"],
            seed=hparams["seed"],
            target=target,
            root=hparams["data_folder"],
        )
        jobs.append((part, target, result))
    outcomes = write_all_mixed_trials([(result, target) for _, target, result in jobs], hparams["overwrite"])
    for part, target, result in jobs:
        if outcomes[target] == "unchanged":
            logger.info("%s: %s already holds this list (left as it is)", part, target)
            continue
        logger.info(
            "%s: %d f + %d m trials, %d cross-gender non-targets added (k: %d per female, %d per male utterance) -> %s",
            part,
            result.counts["f"],
            result.counts["m"],
            result.cross,
            result.k["f"],
            result.k["m"],
            target,
        )
    return [target for _, target, _ in jobs]


if __name__ == "__main__":
    run_main(main)

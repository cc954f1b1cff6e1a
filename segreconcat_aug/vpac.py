"""Where the VoicePrivacy Attacker Challenge 2024 data of a system lives.

The challenge ships, per anonymization system ``SYS``, folders
``<root>/<SYS>/data/<set>_<SYS>/`` for the sets in :data:`VPAC_SETS`.
The distributed data has quirks (B4's training folder is
``libri360_anon_B4``; one system reuses another's trial lists), so every
folder can be overridden from YAML::

    folder_overrides:
        B4:
            train-clean-360: libri360_anon_B4        # relative to <root>/B4/data/
            libri_dev_trials_f: /abs/path/to/folder  # or absolute

Example
-------
>>> import tempfile, pathlib
>>> root = pathlib.Path(tempfile.mkdtemp())
>>> (root / "B4" / "data" / "libri360_anon_B4").mkdir(parents=True)
>>> folders = system_folders(root, "B4", {"B4": {"train-clean-360": "libri360_anon_B4"}}, sets=["train-clean-360"])
>>> folders["train-clean-360"].name
'libri360_anon_B4'
"""

from __future__ import annotations

from pathlib import Path

from segreconcat_aug.errors import UserError

VPAC_SYSTEMS = ("B3", "B4", "B5", "T8-5", "T10-2", "T12-5", "T25-1")
TRAIN_SET = "train-clean-360"
ENROLL_SETS = {"dev": "libri_dev_enrolls", "test": "libri_test_enrolls"}
TRIAL_SETS = {
    ("dev", "f"): "libri_dev_trials_f",
    ("dev", "m"): "libri_dev_trials_m",
    ("test", "f"): "libri_test_trials_f",
    ("test", "m"): "libri_test_trials_m",
}
VPAC_SETS = (TRAIN_SET, *ENROLL_SETS.values(), *TRIAL_SETS.values())


class VPACLayoutError(UserError, FileNotFoundError):
    """A system or one of its folders is not where the configuration says."""


def system_folders(
    data_folder, system: str, overrides: dict | None = None, sets=VPAC_SETS
) -> dict[str, Path]:
    """The folder of each set of ``system``, checked to exist.

    Raises
    ------
    VPACLayoutError
        Naming the system (and the systems that do exist) or the missing folder
        and how to override its name.
    """
    root = Path(data_folder)
    system_root = root / system
    if not system_root.is_dir():
        present = sorted(p.name for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
        raise VPACLayoutError(
            f"system {system!r} not found: no folder {system_root} "
            f"(systems present under {root}: {present or 'none'}; challenge systems: {list(VPAC_SYSTEMS)})"
        )
    mapping = (overrides or {}).get(system, {}) or {}
    unknown = set(mapping) - set(VPAC_SETS)
    if unknown:
        raise VPACLayoutError(
            f"folder_overrides for {system}: unknown set(s) {sorted(unknown)}; sets: {list(VPAC_SETS)}"
        )
    folders = {}
    for set_name in sets:
        name = mapping.get(set_name, f"{set_name}_{system}")
        folder = Path(name) if Path(name).is_absolute() else system_root / "data" / name
        if not folder.is_dir():
            raise VPACLayoutError(
                f"system {system}: folder for {set_name!r} not found at {folder}; "
                f"set folder_overrides: {{{system}: {{{set_name}: <folder name>}}}} if it has another name"
            )
        folders[set_name] = folder
    return folders

"""The grid file (``hparams/grid.yaml``), checked before anything runs, and what it asks to run: cells
(unit, configuration), runs (cell, seed) and their folders. Writes nothing.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import ruamel.yaml
from hyperpyyaml import load_hyperpyyaml

from ..cli import checkout_path
from ..data.hparams_text import hparams_text
from ..data.protocols import get_protocol
from ..data.vpac import VPACLayoutError, detect_layout, system_folders, training_folder
from ..errors import MissingInputError, OptionError
from ..options import GridOptions, validate_hparams_file
from .learning_curve import check_learning_curve, curve_configurations, curve_enabled

logger = logging.getLogger(__name__)


def load_grid(path, overrides=None) -> dict:
    """The grid YAML, with command-line overrides: its values checked (:class:`~segreconcat_aug.options.GridOptions`),
    then how they fit together."""
    validate_hparams_file(path, overrides, GridOptions, source=str(path))
    with open(path, encoding="utf-8") as fin:
        grid = load_hyperpyyaml(fin, overrides or {})
    configs = grid["configurations"]
    named = [grid["comparison"]["baseline"], *grid["comparison"].get("compared", [])]
    named += grid.get("ablation", {}).get("configurations", []) if grid.get("ablation") else []
    unknown = sorted({name for name in named if name not in configs})
    if unknown:
        raise OptionError(f"{path}: configuration(s) {unknown} are used but not defined under configurations")
    for name, spec in configs.items():
        source = (spec or {}).get("model_of")
        if source is not None and (source not in configs or (configs[source] or {}).get("model_of")):
            raise OptionError(
                f"{path}: configurations.{name}.model_of must name a configuration that trains its own model, "
                f"got {source!r}"
            )
    seeded = any(run_seeds(grid, name) != [None] for name in configs)
    if seeded and "seed" in (grid.get("extra_overrides") or {}):
        raise OptionError(f"{path}: extra_overrides sets seed while seeds lists them; keep one of the two")
    protocol = get_protocol(grid.get("protocol"))
    languages = grid.get("languages")
    if languages is not None:
        if protocol.languages is None:
            raise OptionError(
                f"{path}: languages is for vpc2026-track2; protocol {protocol.name} has none (null)"
            )
        for language in languages:
            protocol.check_language(language)
    check_learning_curve(grid, path)
    if curve_enabled(grid):  # each curve point is a configuration of its own (learning_curve.py)
        grid["configurations"] = {**configs, **curve_configurations(grid)}
    return grid


def run_environment(grid, base=None) -> dict:
    """The environment of a run's processes: ``base`` (``os.environ``) plus the grid's ``environment`` for what it lacks."""
    base = dict(os.environ if base is None else base)
    for name, value in (grid.get("environment") or {}).items():
        base.setdefault(name, str(value))
    return base


def run_seeds(grid, config: str) -> list:
    """The training seeds of a configuration: its own ``seeds``, else the grid's; ``[None]``: one default run."""
    seeds = (grid["configurations"][config] or {}).get("seeds")
    seeds = grid.get("seeds") if seeds is None else seeds
    return list(seeds) if seeds else [None]


def grid_languages(grid) -> list[str]:
    """The attackers' languages under vpc2026-track2 (``languages``, else the scored four); [] otherwise."""
    protocol = get_protocol(grid.get("protocol"))
    if protocol.languages is None:
        return []
    return list(grid.get("languages") or protocol.scored_languages)


def grid_units(grid) -> list[str]:
    """What a cell is run for: each system, or under vpc2026-track2 each ``<system>/<language>``."""
    languages = grid_languages(grid)
    if not languages:
        return list(grid["systems"])
    return [f"{system}/{language}" for system in grid["systems"] for language in languages]


def split_unit(unit: str) -> tuple[str, str | None]:
    """``"BM1/de"`` -> ``("BM1", "de")``; a plain system -> ``(system, None)``."""
    system, _, language = unit.partition("/")
    return system, language or None


def grid_ablation(grid) -> dict | None:
    """The grid's ``ablation`` (Table 1), or None: none asked, or a VPC 2026 grid without its system."""
    ablation = grid.get("ablation")
    units = grid_units(grid)
    if ablation and get_protocol(grid.get("protocol")).name != "vpac2024" and ablation["system"] not in units:
        logger.warning(
            "ablation system %s is not among this grid's systems (%s): no Table 1", ablation["system"], units
        )
        return None
    return ablation if ablation and ablation.get("configurations") else None  # none: no Table 1


def grid_cells(grid) -> list[tuple[str, str]]:
    """The (unit, configuration) pairs to run: Table 2's for every unit (:func:`grid_units`), then Table 1's."""
    comparison = [grid["comparison"]["baseline"], *grid["comparison"].get("compared", [])]
    cells = [(unit, config) for unit in grid_units(grid) for config in comparison]
    ablation = grid_ablation(grid)
    if ablation:
        cells += [(ablation["system"], config) for config in ablation["configurations"]]
    if curve_enabled(grid):  # each unit's curve rows at each fraction below 1 (100 %: the rows' own cells)
        cells += [(unit, name) for unit in grid_units(grid) for name in curve_configurations(grid)]
    return list(dict.fromkeys(cells))


def grid_runs(grid) -> list[tuple[str, str, int | None]]:
    """Every (system, configuration, seed) to run; seed None: the training YAML's own seed."""
    return [(system, config, seed) for system, config in grid_cells(grid) for seed in run_seeds(grid, config)]


def cell_folder(grid, system: str, config: str, seed: int | None = None) -> Path:
    """Where a run trains and evaluates: ``<output_folder>/<unit>/<configuration>[/seed<N>]``."""
    folder = Path(grid["output_folder"]) / system / config
    return folder if seed is None else folder / f"seed{seed}"


def _folder_overrides(grid) -> dict:
    """The runs' ``folder_overrides``: the training YAML's, unless ``extra_overrides`` gives its own."""
    extra = grid.get("extra_overrides") or {}
    if isinstance(extra, dict) and "folder_overrides" in extra:
        return extra["folder_overrides"] or {}
    path = Path(checkout_path(grid["train_hparams"]))
    if not path.is_file():
        return {}
    document = ruamel.yaml.YAML().load(hparams_text(path)) or {}
    return document.get("folder_overrides") or {}


def check_grid_data(grid) -> None:
    """Every unit of the grid's cells has its training, enrollment and trial folders, before any cell runs."""
    if not any("{data_folder}" in str(grid.get(key) or "") for key in ("train_command", "eval_command")):
        return
    protocol = get_protocol(grid.get("protocol"))
    overrides = _folder_overrides(grid)
    units = list(dict.fromkeys(unit for unit, _ in grid_cells(grid)))
    missing = []
    for unit in units:
        system, language = split_unit(unit)
        try:
            training_folder(grid["data_folder"], system, overrides, protocol=protocol.name, language=language)
            system_folders(
                grid["data_folder"],
                system,
                overrides,
                sets=protocol.sets(language)[1:],  # the enrollment and trial sets
                layout=detect_layout(grid["data_folder"], system, protocol.layout),
                known_sets=protocol.known_sets(),
            )
        except VPACLayoutError as error:
            missing.append(f"{unit}: {error}")
    if missing:
        raise MissingInputError(
            f"{grid['data_folder']}: {len(missing)} of {len(units)} unit(s) of this grid have no data, so no cell "
            f"was run (fix the data, or leave those units out of systems/languages): {' | '.join(missing)}"
        )

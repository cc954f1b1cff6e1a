"""Run the field's reference code for the privacy metrics on score files; print JSON (values and CPU times).

The VoicePrivacy Challenge 2024 metrics (``evaluation/privacy/asv/metrics/``: ``linkability.py``,
``cllr.py``, ``helpers.py``, ``utils/plo_plots.py``) and ZEBRA (``Voice-Privacy-Challenge/zebra``:
``plo_plots.py``, ``performance.py``) are not on PyPI, and their licences keep their code out of
this repository. This script imports them from checkouts the user supplies and calls them
unchanged; it is how the reference values in ``tests/fixtures/privacy/reference_values.json`` were
recorded and how ``benchmarks/bench_eer.py --part privacy`` times the references.

Run it with an interpreter that has what that code imports at module level: numpy < 2.0 (ZEBRA
imports ``numpy.infty``; VPC's linkability calls ``np.trapz``, removed in numpy 2.4), scipy,
pandas and matplotlib. seaborn and tikzplotlib are used only for their figures: when they are
missing, empty stand-in modules are registered so the imports succeed (no figure is drawn here).

Usage::

    python benchmarks/privacy_reference.py --vpc <VPC-2024 checkout> --zebra <zebra checkout> \\
        --repeat 1 a.txt b.npz ...

Score inputs: this project's score files (``<enroll> <test> target|nontarget <score> [<spk>]``) or
``.npz`` files with ``scores`` and ``targets`` arrays.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import sys
import time
import types
from pathlib import Path

import numpy as np


def load_scores(path: Path):
    """``(target scores, non-target scores)`` as float64 arrays, in file order."""
    if path.suffix == ".npz":
        with np.load(path) as data:
            scores, targets = data["scores"].astype(np.float64), data["targets"].astype(bool)
    else:
        rows = [line.split() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        scores = np.array([float(np.float32(row[3])) for row in rows])
        targets = np.array([row[2] == "target" for row in rows])
    return scores[targets], scores[~targets]


def _stand_ins():
    for name in ("seaborn", "tikzplotlib"):
        try:
            importlib.import_module(name)
        except ImportError:
            module = types.ModuleType(name)
            module.save = lambda *args, **kwargs: None  # tikzplotlib.save, never called here
            sys.modules[name] = module


def load_references(vpc: Path, zebra: Path):
    """The reference modules: VPC's metrics package (as ``vpc_metrics``) and ZEBRA's ``plo_plots``."""
    _stand_ins()
    import matplotlib

    matplotlib.use("Agg")
    metrics_dir = vpc / "evaluation" / "privacy" / "asv" / "metrics"
    spec = importlib.util.spec_from_file_location(
        "vpc_metrics", metrics_dir / "__init__.py", submodule_search_locations=[str(metrics_dir)]
    )
    package = importlib.util.module_from_spec(spec)
    sys.modules["vpc_metrics"] = package
    spec.loader.exec_module(package)
    modules = {
        name: importlib.import_module(f"vpc_metrics.{name}")
        for name in ("linkability", "cllr", "helpers", "utils.plo_plots")
    }
    sys.path.insert(0, str(zebra))
    modules["zebra_plo_plots"] = importlib.import_module("plo_plots")
    modules["zebra_zebra"] = importlib.import_module("zebra")
    return modules


def timed(fn, repeat):
    start = time.process_time()
    for _ in range(repeat):
        result = fn()
    return result, (time.process_time() - start) / repeat


def zebra_values(plot_class, tar, non, tags, ranges):
    """ZEBRA as ``zebra_framework`` computes it: D_ECE, max |log10 LR| (Laplace LLRs) and the tag."""
    plot = plot_class()
    plot.set_system(tar, non)
    dece = plot.get_delta_ECE()
    max_abs = np.abs(np.hstack((plot.classA_llr_laplace, plot.classB_llr_laplace))).max() / np.log(10)
    tag = list(tags.keys())[np.argwhere((ranges < max_abs).sum(1) == 1).squeeze()]
    return {"dece_bits": float(dece), "max_abs_log10_lr": float(max_abs), "tag": str(tag)}


def reference_values(modules, tar, non, repeat=1) -> dict:
    out, seconds = {}, {}
    link = modules["linkability"]
    (dsys, d_local, centers, edges), seconds["linkability"] = timed(
        lambda: link.linkability(tar, non, omega=1), repeat
    )
    out["linkability"] = {
        "value": float(dsys),
        "D": d_local.tolist(),
        "bin_centers": centers.tolist(),
        "bin_edges": edges.tolist(),
    }
    cllr = modules["cllr"]
    out["cllr"], seconds["cllr"] = timed(lambda: float(cllr.cllr(tar, non)), repeat)
    (cmin, eer), seconds["min_cllr_rocch_eer"] = timed(
        lambda: cllr.min_cllr(tar, non, compute_eer=True), repeat
    )
    out["min_cllr"], out["rocch_eer"] = float(cmin), float(eer)
    zebra = modules["zebra_zebra"]
    out["zebra"], seconds["zebra"] = timed(
        lambda: zebra_values(
            modules["zebra_plo_plots"].PriorLogOddsPlots, tar, non, zebra.categorical_tags, zebra.cat_ranges
        ),
        repeat,
    )
    out["zebra_vpc_port"], seconds["zebra_vpc_port"] = timed(
        lambda: zebra_values(
            modules["utils.plo_plots"].PriorLogOddsPlots, tar, non, zebra.categorical_tags, zebra.cat_ranges
        ),
        repeat,
    )
    out["cpu_seconds"] = seconds
    out["target_trials"], out["nontarget_trials"] = int(tar.size), int(non.size)
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--vpc", type=Path, required=True, help="checkout of Voice-Privacy-Challenge-2024")
    parser.add_argument("--zebra", type=Path, required=True, help="checkout of Voice-Privacy-Challenge/zebra")
    parser.add_argument("--repeat", type=int, default=1, help="calls per metric, for the CPU times")
    parser.add_argument("scores", nargs="+", type=Path)
    args = parser.parse_args(argv)
    modules = load_references(args.vpc, args.zebra)
    results = {
        "numpy": np.__version__,
        "sets": {
            str(path): reference_values(modules, *load_scores(path), args.repeat) for path in args.scores
        },
    }
    json.dump(results, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()

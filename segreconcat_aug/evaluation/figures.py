"""Figures: DET curves, forest plots of EERs with their intervals, the privacy figure (risk per speaker
and linkability) and learning curves. matplotlib loads on first use.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import numpy as np

from ..data.result_files import atomic_writer


def privacy_panel(values: dict, target_scores, nontarget_scores) -> dict:
    """What :func:`plot_privacy` draws for one subset: its privacy values (``results.json``'s subset
    entry) and its target and non-target scores."""
    return {
        "per_speaker_eer": values.get("per_speaker_eer") or {},
        "worst": values.get("per_speaker_eer_worst") or [],
        "threshold": values.get("per_speaker_eer_threshold"),
        "linkability": values.get("linkability"),
        "local": values.get("linkability_local") or {},
        "reason": (values.get("undefined_because") or {}).get("linkability"),
        "target_scores": np.asarray(target_scores, dtype=np.float64),
        "nontarget_scores": np.asarray(nontarget_scores, dtype=np.float64),
    }


def privacy_panels(results) -> dict:
    """:func:`privacy_panel` of every subset of an evaluated system."""
    return {
        name: privacy_panel(results.metrics[name], subset.target_scores, subset.nontarget_scores)
        for name, subset in results.subsets.items()
        if name in results.metrics
    }


@contextlib.contextmanager
def _figure(path, title: str | None = None, dpi: int = 100, **subplots):
    """``(fig, axes)`` of pyplot's ``subplots`` without a display; on leaving, the figure is written
    whole to ``path`` (its folder made), and closed in any case."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig, axes = plt.subplots(**subplots)
    try:
        yield fig, axes
        if title:
            fig.suptitle(title)
        fig.tight_layout()
        with atomic_writer(path, "wb") as handle:  # a full disk leaves no cut PNG behind
            fig.savefig(handle, format="png", dpi=dpi)
    finally:
        plt.close(fig)


def _density(ax, scores, **style):
    """A Gaussian kernel density (Scott's bandwidth, 3 bandwidths beyond the data, as seaborn's kdeplot)."""
    from scipy.stats import gaussian_kde

    if len(scores) < 2 or np.ptp(scores) == 0:
        return 0.0
    kde = gaussian_kde(scores)
    width = 3 * np.sqrt(kde.covariance[0, 0])
    grid = np.linspace(scores.min() - width, scores.max() + width, 200)
    density = kde(grid)
    ax.plot(grid, density, **style)
    return float(density.max())


def plot_privacy(runs: dict, path, title: str | None = None) -> Path:
    """Risk per speaker and linkability: one column per subset.

    ``runs``: run label -> subset -> panel (:func:`privacy_panels`). Top row: the EER of every enrolled
    speaker, one strip per run, the threshold dashed and the lowest EERs labelled. Below, one row per
    run: the target and non-target score densities and the local linkability ``D(s)`` on the right
    axis, titled with ``D<->sys``, as VPC 2024's ``draw_linkability_scores`` draws them.
    """
    subsets = list(dict.fromkeys(name for panels in runs.values() for name in panels))
    labels = list(runs)
    colors = ["#e66101", "#fdb863", "#b2abd2", "#5e3c99"]  # VPC's colour-blind friendly palette
    rng = np.random.default_rng(0)  # the strip's vertical jitter only
    with _figure(
        path,
        title,
        dpi=90,
        nrows=1 + len(labels),
        ncols=max(1, len(subsets)),
        figsize=(4.6 * max(1, len(subsets)), 3.4 * (1 + len(labels))),
        squeeze=False,
    ) as (_, axes):
        for j, name in enumerate(subsets):
            ax = axes[0, j]
            for y, label in enumerate(labels):
                panel = runs[label].get(name)
                if not panel:
                    continue
                speakers = list(panel["per_speaker_eer"])
                eers = np.array([panel["per_speaker_eer"][speaker] for speaker in speakers], dtype=np.float64)
                heights = y + rng.uniform(-0.2, 0.2, len(eers))
                ax.scatter(eers, heights, s=14, color=colors[3], alpha=0.8)
                where = dict(zip(speakers, heights))
                for speaker, value in panel["worst"]:
                    ax.annotate(
                        str(speaker),
                        (value, where.get(speaker, y)),
                        xytext=(3, 3),
                        textcoords="offset points",
                        fontsize="x-small",
                    )
                if panel["threshold"] is not None:
                    ax.axvline(panel["threshold"], color="0.5", linestyle="--", linewidth=0.8)
            ax.set_yticks(range(len(labels)), labels, fontsize="small")
            ax.set_ylim(-0.6, len(labels) - 0.4)
            ax.set_xlim(-2, 62)
            ax.set_xlabel("EER per enrolled speaker (%)")
            ax.set_title(f"{name}: risk per speaker")
            ax.grid(True, axis="x", alpha=0.3)
            for i, label in enumerate(labels, start=1):
                ax = axes[i, j]
                panel = runs[label].get(name)
                if not panel:
                    ax.set_axis_off()
                    continue
                styles = (
                    ("target_scores", colors[2], "--", "Same Speaker"),
                    ("nontarget_scores", colors[0], ":", "Not Same Speaker"),
                )
                peak = max(
                    _density(ax, panel[key], color=color, linewidth=2, linestyle=style, label=text)
                    for key, color, style, text in styles
                )
                ax.set_ylim(0, max(peak, 1e-9) * 1.05)
                ax.set_xlabel("Score")
                ax.set_ylabel("Probability Density")
                local = panel["local"]
                if panel["linkability"] is not None and local.get("D"):
                    twin = ax.twinx()
                    centers, d_local = np.asarray(local["bin_centers"]), np.asarray(local["D"])
                    twin.plot(centers, d_local, color=colors[3], linewidth=2, label="D(s)")
                    below = np.flatnonzero(d_local <= 0)
                    if below.size:
                        ax.axvline(centers[below[0]], color="k", linestyle="--", linewidth=0.8)
                    twin.set_ylim(0, 1.1)
                    twin.set_ylabel("D(s)")
                    ax.set_title(f"{label} {name}: D<->sys = {panel['linkability']:.2f}", fontsize="medium")
                else:
                    why = (panel["reason"] or "").split(":")[0]
                    ax.set_title(f"{label} {name}: D<->sys undefined\n({why})", fontsize="small")
                ax.legend(loc="upper left", fontsize="x-small")
    return Path(path)


_DET_TICKS = (0.001, 0.01, 0.05, 0.2, 0.4, 0.6, 0.8, 0.95, 0.99)
_DET_LIMIT = 1e-3


def _draw_det(ax, curves: dict, title: str) -> None:
    from scipy.stats import norm

    for label, (far, frr) in curves.items():
        far = np.clip(np.asarray(far, float), _DET_LIMIT, 1 - _DET_LIMIT)
        frr = np.clip(np.asarray(frr, float), _DET_LIMIT, 1 - _DET_LIMIT)
        ax.plot(norm.ppf(far), norm.ppf(frr), label=label)
    ticks = norm.ppf(_DET_TICKS)
    labels = [f"{100 * t:g}" for t in _DET_TICKS]
    ax.set_xticks(ticks, labels)
    ax.set_yticks(ticks, labels)
    bound = norm.ppf([_DET_LIMIT, 1 - _DET_LIMIT])
    ax.set_xlim(*bound)
    ax.set_ylim(*bound)
    ax.plot(bound, bound, color="0.7", linewidth=0.8, linestyle=":")
    ax.set_xlabel("False acceptance rate (%)")
    ax.set_ylabel("False rejection rate (%)")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    if curves:
        ax.legend(loc="upper right", fontsize="small")


def plot_det_panels(panels: dict, path, title: str | None = None) -> Path:
    """DET figures (probit axes, in %) side by side: ``panels`` maps a panel title to its curves
    (label -> ``(far, frr)``)."""
    columns = 2 if len(panels) == 4 else len(panels)  # dev/test x f/m as a 2 x 2 grid
    rows = -(-len(panels) // columns)
    size = {"figsize": (5.5 * columns, 5.5 * rows), "squeeze": False}
    with _figure(path, title, nrows=rows, ncols=columns, **size) as (_, axes):
        for ax, (panel, curves) in zip(axes.ravel(), panels.items()):
            _draw_det(ax, curves, panel)
    return Path(path)


def plot_forest(rows: list, path, title: str = "EER (%) with 95 % CI") -> Path:
    """A forest plot: one line per ``(label, point, low, high)`` (low/high None: the point alone, marked)."""
    with _figure(path, figsize=(8, 0.8 + 0.32 * len(rows))) as (_, ax):
        for y, (_label, point, low, high) in enumerate(reversed(rows)):
            if low is None:
                ax.plot([point], [y], marker="x", color="tab:red")
            else:
                ax.plot([low, high], [y, y], color="tab:blue", linewidth=1.5)
                ax.plot([point], [y], marker="o", color="tab:blue", markersize=4)
        ax.set_yticks(range(len(rows)), [label for label, *_ in reversed(rows)], fontsize="small")
        ax.set_xlabel("EER (%): dot = estimate, bar = 95 % CI, x = no interval")
        ax.set_title(title)
        ax.grid(True, axis="x", alpha=0.3)
    return Path(path)


def plot_learning_curve(lines: dict, path, title: str = "EER (%) against training hours") -> Path:
    """A learning curve: per entry of ``lines`` (label -> ``[(hours, eer, low, high), ...]``) the EER
    against the training hours, log x, with the 95 % interval as error bars (None bounds: the point alone)."""
    with _figure(path, figsize=(7, 4.5)) as (_, ax):
        for label, points in lines.items():
            points = sorted(points)
            if not points:
                continue
            hours = [p[0] for p in points]
            eers = [p[1] for p in points]
            below = [p[1] - p[2] if p[2] is not None else 0.0 for p in points]
            above = [p[3] - p[1] if p[3] is not None else 0.0 for p in points]
            ax.errorbar(hours, eers, yerr=[below, above], marker="o", capsize=3, label=label)
        ax.set_xscale("log")
        from matplotlib.ticker import FuncFormatter

        plain = FuncFormatter(lambda value, _: f"{value:g}")
        ax.xaxis.set_major_formatter(plain)
        ax.xaxis.set_minor_formatter(plain)
        ax.set_xlabel("training data (hours, log scale)")
        ax.set_ylabel("average EER (%): dot = estimate, bar = 95 % CI")
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
        if lines:
            ax.legend(fontsize="small")
    return Path(path)

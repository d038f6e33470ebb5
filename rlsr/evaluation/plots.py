"""Risk-coverage and confidence-density figures (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from rlsr import metrics as M
from rlsr.evaluation.gap import PAPER_KDE_BANDWIDTH, gaussian_kde, kde_grid
from rlsr.evaluation.summary import scorer_arrays

__all__ = [
    "curve_on_grid",
    "curve_steps",
    "plot_dataset_risk_coverage",
    "plot_overlay_grid",
    "plot_confidence_densities",
]

COVERAGE_GRID = np.linspace(0.01, 1.0, 100)


def _pyplot():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _panels(plt, n: int, max_cols: int, size: tuple[float, float]):
    """A figure of ``n`` panels, at most ``max_cols`` per row; returns (fig, the n axes in order)."""
    cols = min(max_cols, n)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(size[0] * cols, size[1] * rows), squeeze=False)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    return fig, list(axes.flat)[:n]


def _save(plt, fig, path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return Path(path)


def curve_on_grid(confidence, correct, grid: np.ndarray = COVERAGE_GRID) -> np.ndarray:
    """Risk at each coverage of ``grid``: the risk of the smallest curve point covering it
    (``rlsr.metrics.risk_coverage_curve``; tied samples enter together). Used to average seeds."""
    curve = M.risk_coverage_curve(confidence, correct)
    idx = np.searchsorted(curve.coverage, grid - 1e-12, side="left")
    return curve.risk[np.minimum(idx, len(curve.risk) - 1)]


def curve_steps(curve: M.RiskCoverageCurve) -> tuple[np.ndarray, np.ndarray]:
    """(x, y) for ``plt.step(x, y, where="pre")``: the risk of each tie group drawn over the
    coverage span it adds, ``(previous coverage, its coverage]``, starting at coverage 0.

    Drawing the raw points with ``where="post"`` leaves the first span empty and gives the last
    point no width, so a single tie group (e.g. every confidence missing) draws nothing.
    """
    x = np.concatenate([[0.0], curve.coverage])
    y = np.concatenate([curve.risk[:1], curve.risk])
    return x, y


def plot_dataset_risk_coverage(
    records: Sequence[dict], scorers: Sequence[str], path, title: str = ""
) -> Path:
    """One dataset, one curve per confidence scorer (missing confidence = 0.0)."""

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(4.5, 3.5))
    for scorer in scorers:
        conf, ok, _ = scorer_arrays(records, scorer)
        x, y = curve_steps(M.risk_coverage_curve(conf, ok))
        ax.step(
            x,
            y,
            where="pre",
            label=f"{scorer} (AURC {M.aurc(conf, ok):.3f})",
        )
    ax.set(xlabel="coverage", ylabel="risk (error rate)", xlim=(0, 1), ylim=(0, 1), title=title)
    ax.legend(fontsize=7)
    return _save(plt, fig, path)


def plot_overlay_grid(
    curves: Mapping[str, Mapping[str, np.ndarray]], path, grid: np.ndarray = COVERAGE_GRID
) -> Path:
    """``curves[dataset][method]`` = risk on ``grid`` (mean over seeds): one panel per dataset,
    one line per method (paper Fig. 5-7 layout)."""
    plt = _pyplot()
    names = list(curves)
    if not names:
        raise ValueError("no curves to plot.")
    fig, axes = _panels(plt, len(names), 4, (4, 3.2))
    for ax, name in zip(axes, names, strict=True):
        for method, risk in curves[name].items():
            ax.plot(grid, risk, label=method)
        ax.set(title=name, xlabel="coverage", ylabel="risk", xlim=(0, 1), ylim=(0, 1))
        ax.legend(fontsize=7)
    return _save(plt, fig, path)


def plot_confidence_densities(
    panels: Mapping[str, Mapping[str, tuple[np.ndarray, np.ndarray]]],
    path,
    bandwidth: float = PAPER_KDE_BANDWIDTH,
) -> Path:
    """Paper Fig. 3 (Sec. C.7): ``panels[title][method] = (confidence, correct)``, one panel per
    title, per method a solid density of its correct and a dotted density of its incorrect
    answers (``rlsr.evaluation.gap.gaussian_kde``, bandwidth ``bandwidth`` in confidence units),
    the gap Δc = mean(c | correct) − mean(c | incorrect) of those samples in the legend. A class
    without samples draws no curve. The grid spans [−3h, 1 + 3h]; outside [0, 1] is shaded."""
    plt = _pyplot()
    names = list(panels)
    if not names:
        raise ValueError("no confidence samples to plot.")
    grid = kde_grid(bandwidth)
    fig, axes = _panels(plt, len(names), 3, (4.8, 3.4))
    for ax, name in zip(axes, names, strict=True):
        for i, (method, (conf, ok)) in enumerate(panels[name].items()):
            conf, ok = np.asarray(conf, dtype=np.float64), np.asarray(ok, dtype=bool)
            color = f"C{i % 10}"
            gap = M.confidence_gap(conf, ok) if conf.size else math.nan
            for mask, style, kind in ((ok, "-", "correct"), (~ok, ":", "incorrect")):
                if not mask.any():
                    continue
                label = f"{method} {kind} (n={int(mask.sum())})"
                if kind == "correct":
                    label += f", Δc = {gap:.2f}"
                ax.plot(grid, gaussian_kde(conf[mask], grid, bandwidth), style, color=color,
                        label=label)  # fmt: skip
        ax.axvspan(grid[0], 0.0, color="0.92", lw=0)
        ax.axvspan(1.0, grid[-1], color="0.92", lw=0)
        ax.set(title=name, xlabel="confidence", ylabel="density", xlim=(grid[0], grid[-1]))
        ax.legend(fontsize=7)
    return _save(plt, fig, path)

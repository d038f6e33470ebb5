"""Risk-coverage, confidence-density and reliability figures (matplotlib, Agg backend: no
display needed)."""

from __future__ import annotations

import math
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np

from rlsr.evaluation.reports.gap import PAPER_KDE_BANDWIDTH, gaussian_kde, kde_grid
from rlsr.evaluation.run.summary import scorer_arrays
from rlsr.metrics import selective as M

__all__ = [
    "curve_on_grid",
    "curve_steps",
    "plot_dataset_risk_coverage",
    "plot_overlay_grid",
    "plot_confidence_densities",
    "ReliabilityPanel",
    "reliability_panel",
    "plot_reliability_diagrams",
    "pyplot",
    "save",
]

COVERAGE_GRID = np.linspace(0.01, 1.0, 100)


def pyplot():
    """matplotlib.pyplot on the Agg backend (imported only when a figure is drawn)."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _panels(plt, n: int, max_cols: int, size: tuple[float, float]):
    """A figure of ``n`` panels, at most ``max_cols`` per row; returns (fig, the n axes in
    order)."""
    cols = min(max_cols, n)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(size[0] * cols, size[1] * rows), squeeze=False)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    return fig, list(axes.flat)[:n]


def save(plt, fig, path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return Path(path)


def curve_on_grid(confidence, correct, grid: np.ndarray = COVERAGE_GRID) -> np.ndarray:
    """Risk at each coverage of ``grid``: the risk of the smallest curve point covering it
    (``rlsr.metrics.selective.risk_coverage_curve``; tied samples enter together)."""
    curve = M.risk_coverage_curve(confidence, correct)
    idx = np.searchsorted(curve.coverage, grid - 1e-12, side="left")
    return curve.risk[np.minimum(idx, len(curve.risk) - 1)]


def curve_steps(curve: M.RiskCoverageCurve) -> tuple[np.ndarray, np.ndarray]:
    """(x, y) for ``plt.step(x, y, where="pre")``: the risk of each tie group drawn over the
    coverage span it adds, starting at coverage 0 (so a single tie group still draws a line)."""
    x = np.concatenate([[0.0], curve.coverage])
    y = np.concatenate([curve.risk[:1], curve.risk])
    return x, y


def plot_dataset_risk_coverage(
    records: Sequence[dict], scorers: Sequence[str], path, title: str = ""
) -> Path:
    """One dataset, one curve per confidence scorer (missing confidence = 0.0)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(4.5, 3.5))
    for scorer in scorers:
        conf, ok, _ = scorer_arrays(records, scorer)
        x, y = curve_steps(M.risk_coverage_curve(conf, ok))
        ax.step(x, y, where="pre", label=f"{scorer} (AURC {M.aurc(conf, ok):.3f})")
    ax.set(xlabel="coverage", ylabel="risk (error rate)", xlim=(0, 1), ylim=(0, 1), title=title)
    ax.legend(fontsize=7)
    return save(plt, fig, path)


def plot_overlay_grid(
    curves: Mapping[str, Mapping[str, np.ndarray]], path, grid: np.ndarray = COVERAGE_GRID
) -> Path:
    """``curves[dataset][method]`` = risk on ``grid`` (mean over seeds): one panel per dataset,
    one line per method (paper Fig. 5-7 layout)."""
    plt = pyplot()
    names = list(curves)
    if not names:
        raise ValueError("no curves to plot.")
    fig, axes = _panels(plt, len(names), 4, (4, 3.2))
    for ax, name in zip(axes, names, strict=True):
        for method, risk in curves[name].items():
            ax.plot(grid, risk, label=method)
        ax.set(title=name, xlabel="coverage", ylabel="risk", xlim=(0, 1), ylim=(0, 1))
        ax.legend(fontsize=7)
    return save(plt, fig, path)


def plot_confidence_densities(
    panels: Mapping[str, Mapping[str, tuple[np.ndarray, np.ndarray]]],
    path,
    bandwidth: float = PAPER_KDE_BANDWIDTH,
) -> Path:
    """Paper Fig. 3 (Sec. C.7): ``panels[title][method] = (confidence, correct)``, one panel per
    title, per method a solid density of its correct and a dotted density of its incorrect
    answers (``gap.gaussian_kde``), Δc = mean(c | correct) − mean(c | incorrect) in the legend;
    outside [0, 1] is shaded."""
    plt = pyplot()
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
    return save(plt, fig, path)


class ReliabilityPanel(NamedTuple):
    """What one reliability-diagram panel draws: ``M.reliability_bins`` and the ECE of the same
    samples (``M.ece``: sum_B |B|/n |acc_B - conf_B| over these bins)."""

    title: str
    bins: M.ReliabilityBins
    ece: float


def reliability_panel(title: str, confidence, correct, n_bins: int = 10) -> ReliabilityPanel:
    """The panel of one run on one dataset, binned as ``M.ece`` bins."""
    bins = M.reliability_bins(confidence, correct, n_bins)
    return ReliabilityPanel(title, bins, M.ece(confidence, correct, n_bins))


_RELIABILITY_KEY = (
    "bars: accuracy of the samples in each confidence bin (10 equal-width bins, those of ECE) · "
    "dots: their mean confidence · red: |accuracy − mean confidence|, weighted by the bin's "
    "share it sums to ECE · dashed: perfect calibration · grey: samples per bin"
)


def _draw_reliability(ax, count_ax, panel: ReliabilityPanel) -> None:
    b = panel.bins
    edges = np.clip(b.edges, 0.0, 1.0)  # the outer edges are -inf / +inf
    left, width = edges[:-1], np.diff(edges)
    filled = b.count > 0
    acc, conf = b.accuracy, b.mean_confidence
    ax.plot([0, 1], [0, 1], ls="--", color="0.5", lw=1)
    ax.bar(left[filled], acc[filled], width=width[filled], align="edge", color="C0", alpha=0.35,
           edgecolor="C0")  # fmt: skip
    # The gap each bin adds to ECE: from its mean confidence on the diagonal to its accuracy.
    ax.vlines(conf[filled], conf[filled], acc[filled], color="C3", lw=2,
              label=f"ECE = {panel.ece:.3f}")  # fmt: skip
    ax.plot(conf[filled], acc[filled], "o", color="C0", ms=3)
    ax.set(title=panel.title, ylabel="accuracy", xlim=(0, 1), ylim=(0, 1))
    ax.legend(fontsize=8, loc="best", handlelength=1.0, framealpha=0.85)
    count_ax.bar(left[filled], b.count[filled], width=width[filled], align="edge", color="0.6",
                 edgecolor="0.3")  # fmt: skip
    for x, w, k in zip(left[filled], width[filled], b.count[filled], strict=True):
        count_ax.annotate(str(int(k)), (x + w / 2, k), ha="center", va="bottom", fontsize=6,
                          xytext=(0, 1), textcoords="offset points")  # fmt: skip
    count_ax.set(xlabel="confidence", ylabel="count", xlim=(0, 1))


def plot_reliability_diagrams(
    panels: Mapping[str, Mapping[str, tuple[np.ndarray, np.ndarray]]], path, n_bins: int = 10
) -> list[list[ReliabilityPanel]]:
    """Reliability diagrams (Guo et al. 2017, arXiv:1706.04599, Fig. 1): ``panels[row][run] =
    (confidence, correct)``, one row per dataset, one column per run, each panel the accuracy of
    every non-empty bin of ``M.ece`` (bars), its mean confidence (dot) with its gap to the
    diagonal (red), the ECE in the legend and the bin counts under it. Returns the panels."""
    plt = pyplot()
    rows = list(panels)
    if not rows:
        raise ValueError("no confidence samples to plot.")
    cols = max(len(panels[r]) for r in rows)
    # Fixed layout in inches (a layout engine costs seconds per dozen panels): per panel a
    # title strip, the diagram, the count strip right under it, then the x tick labels.
    width, height, left, right, top, plot, counts = 3.3, 3.9, 0.6, 0.15, 0.35, 2.3, 0.65
    fig_w = width * cols
    # The key, once above all panels: at 7.5 pt about 16 characters fit an inch, a line 0.14 in.
    key = textwrap.fill(_RELIABILITY_KEY, width=int(16 * fig_w))
    caption = 0.12 + 0.14 * (key.count("\n") + 1)
    fig_h = height * len(rows) + caption
    fig = plt.figure(figsize=(fig_w, fig_h))
    fig.text(0.5, 1 - 0.06 / fig_h, key, ha="center", va="top", fontsize=7.5)

    def rect(i: int, j: int, y_from_top: float, h: float) -> list[float]:
        x0 = j * width + left
        y0 = fig_h - (caption + i * height + y_from_top + h)
        return [x0 / fig_w, y0 / fig_h, (width - left - right) / fig_w, h / fig_h]

    drawn = []
    for i, row in enumerate(rows):
        count_axes, row_panels = [], []
        for j, (run, (conf, ok)) in enumerate(panels[row].items()):
            ax = fig.add_axes(rect(i, j, top, plot))
            count_ax = fig.add_axes(rect(i, j, top + plot, counts), sharex=ax)
            panel = reliability_panel(f"{row}: {run}", conf, ok, n_bins)
            _draw_reliability(ax, count_ax, panel)
            ax.tick_params(labelbottom=False)
            count_axes.append(count_ax)
            row_panels.append(panel)
        top_count = max(int(p.bins.count.max()) for p in row_panels)
        for count_ax in count_axes:
            count_ax.set_ylim(0, 1.3 * top_count)  # room for the count labels
        drawn.append(row_panels)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return drawn

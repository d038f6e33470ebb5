"""``rlsr report --curves``: held-out AURC, accuracy and ECE against the optimizer step, for one
or more runs (``RUN_DIR/eval/step-N/<dataset>/metrics.json``, ``read_history``), in one PNG (a
row of panels per dataset, the best step by AURC marked) and a CSV. For each run and dataset it
names the best and the final step, each with its AURC and the weights that hold it (a
``checkpoint-N``, or the final adapter when training ended there).
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Sequence
from pathlib import Path

from rlsr.evaluation.heldout.history import TRACKED_METRICS, read_history
from rlsr.evaluation.reports.plots import pyplot, save
from rlsr.run.run_layout import (
    EVAL_DIR,
    FINAL_WEIGHT_FILES,
    METRICS_FILE,
    STEP_PREFIX,
    checkpoint_dir,
    checkpoint_folders,
)

__all__ = ["CURVE_METRICS", "MIN_Y_SPAN", "best_steps", "curve_rows", "y_limits", "write_curves"]

CURVE_METRICS = ("aurc", "accuracy", "ece")
# The smallest y-range of a panel (the metrics are fractions in [0, 1]): on 100 held-out
# questions one answer moves accuracy by 0.01, a twentieth of the axis rather than all of it.
MIN_Y_SPAN = 0.2


def _label(run: Path, runs: Sequence[Path]) -> str:
    """The run's folder name, or its path when two runs share a name."""
    names = [r.name for r in runs]
    return run.name if names.count(run.name) == 1 else str(run)


def curve_rows(run_dirs: Sequence[str | Path]) -> list[dict]:
    """One row per (run, dataset, step) with every tracked metric, failed steps left out;
    refuses a run without held-out evaluations."""
    runs = [Path(r) for r in run_dirs]
    rows = []
    for run in runs:
        history = [h for h in read_history(run) if "failed" not in h]
        if not history:
            raise ValueError(
                f"{run}: no held-out evaluation (no {run / EVAL_DIR}/{STEP_PREFIX}N/<dataset>/"
                f"{METRICS_FILE}); train with heldout.every > 0 (docs/heldout.md, 'Watch a run')."
            )
        rows += [{"run": _label(run, runs), "run_dir": str(run), **h} for h in history]
    return rows


def _ended_at(run_dir: str | Path) -> int | None:
    """The optimizer step training ended at, as the newest checkpoint's ``trainer_state.json``
    records it (its ``global_step`` once it reached ``max_steps``); None when no checkpoint says."""
    folders = checkpoint_folders(run_dir)
    state_path = folders[-1][1] / "trainer_state.json" if folders else None
    if state_path is None or not state_path.is_file():
        return None
    state = json.loads(state_path.read_text())
    step, end = int(state.get("global_step", 0)), int(state.get("max_steps", 0) or 0)
    return step if end and step >= end else None


def _final_adapter(run_dir: str | Path, step: int) -> str | None:
    """``RUN_DIR`` when it holds the final adapter (or model) and training ended at ``step``."""
    saved = any((Path(run_dir) / name).is_file() for name in FINAL_WEIGHT_FILES)
    return str(run_dir) if saved and _ended_at(run_dir) == step else None


def best_steps(rows: list[dict]) -> list[dict]:
    """Per (run, dataset): the step with the lowest AURC (the earliest on a tie) and its
    checkpoint (None when none was saved); the final (last evaluated) step, its AURC, its
    checkpoint and ``final_adapter`` (``RUN_DIR`` when training ended there, else None)."""
    best: dict[tuple[str, str], dict] = {}
    final: dict[tuple[str, str], dict] = {}
    for row in rows:
        key = (row["run"], row["dataset"])
        if key not in best or row["aurc"] < best[key]["aurc"]:
            best[key] = row
        if key not in final or row["step"] > final[key]["step"]:
            final[key] = row

    def saved(row: dict) -> str | None:
        folder = checkpoint_dir(row["run_dir"], row["step"])
        return str(folder) if folder.is_dir() else None

    return [
        {
            "run": run,
            "dataset": dataset,
            "step": row["step"],
            "aurc": row["aurc"],
            "checkpoint": saved(row),
            "final_step": last["step"],
            "final_aurc": last["aurc"],
            "final_checkpoint": saved(last),
            "final_adapter": _final_adapter(last["run_dir"], last["step"]),
        }
        for (run, dataset), row in best.items()
        for last in [final[run, dataset]]
    ]


def y_limits(values: Sequence[float], min_span: float = MIN_Y_SPAN) -> tuple[float, float]:
    """The y-range of a panel of fractions: the values' range padded by 5 %, widened around its
    middle to at least ``min_span`` (a one-question change does not fill the axis), moved
    inside [0, 1]; no finite value: (0, 1)."""
    finite = [float(v) for v in values if v is not None and math.isfinite(v)]
    if not finite:
        return 0.0, 1.0
    lo, hi = min(finite), max(finite)
    pad = 0.05 * (hi - lo)
    lo, hi = lo - pad, hi + pad
    if hi - lo < min_span:
        middle = (lo + hi) / 2
        lo, hi = middle - min_span / 2, middle + min_span / 2
    if lo < 0.0:
        lo, hi = 0.0, min(1.0, hi - lo)
    if hi > 1.0:
        lo, hi = max(0.0, lo - (hi - 1.0)), 1.0
    return lo, hi


def _figure(rows: list[dict], best: list[dict]):
    """The curves' figure: one row of panels per dataset, one column per metric."""
    plt = pyplot()
    datasets = list(dict.fromkeys(r["dataset"] for r in rows))
    runs = list(dict.fromkeys(r["run"] for r in rows))
    fig, axes = plt.subplots(
        len(datasets), len(CURVE_METRICS), figsize=(4.2 * len(CURVE_METRICS), 3.2 * len(datasets)),
        squeeze=False,
    )  # fmt: skip
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, dataset in enumerate(datasets):
        for j, metric in enumerate(CURVE_METRICS):
            ax = axes[i][j]
            ax.set_ylim(*y_limits([r[metric] for r in rows if r["dataset"] == dataset]))
            for k, run in enumerate(runs):
                pts = sorted(
                    (r["step"], r[metric])
                    for r in rows
                    if r["run"] == run and r["dataset"] == dataset
                )
                if not pts:
                    continue
                color = colors[k % len(colors)]
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", ms=3,
                        color=color, label=run)  # fmt: skip
                if metric == "aurc":
                    b = next(b for b in best if b["run"] == run and b["dataset"] == dataset)
                    ax.scatter([b["step"]], [b["aurc"]], s=120, marker="*", color=color,
                               zorder=3, edgecolors="black")  # fmt: skip
            ax.set_title(
                f"{dataset}: held-out {metric}" + (" (* best)" if metric == "aurc" else "")
            )
            ax.set_xlabel("optimizer step")
            ax.grid(alpha=0.3)
            if i == 0 and j == 0:
                ax.legend(fontsize=8)
    return fig


def _weights(checkpoint: str | None, final_adapter: str | None) -> str:
    """Where a step's weights are, for the printed lines."""
    if checkpoint and final_adapter:
        return f"{checkpoint} (= the final adapter in {final_adapter})"
    if final_adapter:
        return f"the final adapter in {final_adapter}"
    return checkpoint or "no checkpoint was saved at that step (grpo.save_steps)"


def _aurc(value: float) -> str:
    return "nan" if math.isnan(value) else f"{value:.4f}"


def write_curves(run_dirs: Sequence[str | Path], output: str | Path) -> dict:
    """``OUTPUT_curves.png`` and ``OUTPUT_curves.csv`` for ``run_dirs``; returns
    ``{"png", "csv", "best", "text"}`` (``text``: the lines ``rlsr report --curves`` prints)."""
    rows = curve_rows(run_dirs)
    best = best_steps(rows)
    prefix = Path(output)
    prefix.parent.mkdir(parents=True, exist_ok=True)
    png = prefix.with_name(prefix.name + "_curves.png")
    csv_path = prefix.with_name(prefix.name + "_curves.csv")
    fields = ["run", "dataset", "step", "n", *[name for name, _ in TRACKED_METRICS], "seconds"]
    with csv_path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=fields, extrasaction="ignore")
        writer.writeheader()
        for row in sorted(rows, key=lambda r: (r["run"], r["dataset"], r["step"])):
            writer.writerow(row)
    save(pyplot(), _figure(rows, best), png)
    lines = []
    for b in best:
        at_best = b["final_adapter"] if b["step"] == b["final_step"] else None
        lines.append(
            f"{b['run']} {b['dataset']}: best  AURC {_aurc(b['aurc'])} at step {b['step']}: "
            f"{_weights(b['checkpoint'], at_best)}"
        )
        lines.append(
            f"{b['run']} {b['dataset']}: final AURC {_aurc(b['final_aurc'])} at step "
            f"{b['final_step']}: {_weights(b['final_checkpoint'], b['final_adapter'])}"
        )
    lines += [f"curves: {png}", f"table: {csv_path}"]
    return {"png": png, "csv": csv_path, "best": best, "text": "\n".join(lines)}

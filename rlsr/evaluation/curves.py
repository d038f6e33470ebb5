"""``rlsr report --curves``: held-out metrics against the optimizer step, for one or more runs.

Reads what the in-training evaluator wrote (``RUN_DIR/eval/step-N/<dataset>/metrics.json``,
``rlsr.evaluation.history.read_history``) and draws, per dataset, held-out AURC, accuracy
and ECE against the step for every run in one PNG (one row of panels per dataset), with the
best step by AURC marked; the same numbers go to a CSV. For each run and dataset it names the
best step and the checkpoint that holds it (``RUN_DIR/checkpoint-N``, when one was saved at that
step).
"""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from pathlib import Path

from rlsr.evaluation.history import TRACKED_METRICS, read_history
from rlsr.evaluation.layout import EVAL_DIR, METRICS_FILE, STEP_PREFIX, checkpoint_dir

__all__ = ["CURVE_METRICS", "best_steps", "curve_rows", "write_curves"]

CURVE_METRICS = ("aurc", "accuracy", "ece")


def _label(run: Path, runs: Sequence[Path]) -> str:
    """The run's folder name, or its path when two runs share a name."""
    names = [r.name for r in runs]
    return run.name if names.count(run.name) == 1 else str(run)


def curve_rows(run_dirs: Sequence[str | Path]) -> list[dict]:
    """One row per (run, dataset, step) with every tracked metric; failed steps are left out.
    Raises ``ValueError`` naming a run without held-out evaluations."""
    runs = [Path(r) for r in run_dirs]
    rows = []
    for run in runs:
        history = [h for h in read_history(run) if "failed" not in h]
        if not history:
            raise ValueError(
                f"{run}: no held-out evaluation (no {run / EVAL_DIR}/{STEP_PREFIX}N/<dataset>/"
                f"{METRICS_FILE}); "
                "train with eval.every > 0 (docs/training.md, 'Watch a run')."
            )
        rows += [{"run": _label(run, runs), "run_dir": str(run), **h} for h in history]
    return rows


def best_steps(rows: list[dict]) -> list[dict]:
    """Per (run, dataset): the step with the lowest AURC (the earliest on a tie) and the
    checkpoint folder of that step, or None when none was saved there."""
    best: dict[tuple[str, str], dict] = {}
    for row in rows:
        key = (row["run"], row["dataset"])
        if key not in best or row["aurc"] < best[key]["aurc"]:
            best[key] = row
    out = []
    for (run, dataset), row in best.items():
        checkpoint = checkpoint_dir(row["run_dir"], row["step"])
        out.append(
            {
                "run": run,
                "dataset": dataset,
                "step": row["step"],
                "aurc": row["aurc"],
                "checkpoint": str(checkpoint) if checkpoint.is_dir() else None,
            }
        )
    return out


def _plot(rows: list[dict], best: list[dict], path: Path) -> None:
    import matplotlib  # heavy optional dependency: only when curves are drawn

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

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
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


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
    _plot(rows, best, png)
    lines = []
    for b in best:
        where = b["checkpoint"] or "no checkpoint was saved at that step (grpo.save_steps)"
        aurc = "nan" if math.isnan(b["aurc"]) else f"{b['aurc']:.4f}"
        lines.append(f"{b['run']} {b['dataset']}: best AURC {aurc} at step {b['step']}: {where}")
    lines += [f"curves: {png}", f"table: {csv_path}"]
    return {"png": png, "csv": csv_path, "best": best, "text": "\n".join(lines)}

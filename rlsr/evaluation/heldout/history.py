"""What the held-out evaluator wrote, read back without a model (``rlsr report`` imports it):
``eval/step-N/<dataset>/metrics.json`` (``step-N/failed.json`` for a failed step) and
``eval/history.jsonl``, one line per step and dataset rebuilt from the step folders."""

from __future__ import annotations

import json
import os
from pathlib import Path

from rlsr.run.run_layout import EVAL_DIR, FAILED_FILE, HISTORY_FILE, METRICS_FILE, step_folders

__all__ = ["TRACKED_METRICS", "tracker_scalars", "read_history", "write_history"]

# Per dataset, the scalars sent to the trackers: (name in the log, where in metrics.json).
TRACKED_METRICS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("aurc", ("primary", "aurc")),
    ("accuracy", ("accuracy",)),
    ("ece", ("primary", "ece")),
    ("acc@10", ("primary", "acc@10")),
    ("acc@25", ("primary", "acc@25")),
    ("acc@50", ("primary", "acc@50")),
    ("confidence_gap", ("primary", "confidence_gap")),
    ("format_rate", ("format_ok_rate",)),
)


def _metric(metrics: dict, path: tuple[str, ...]):
    node = metrics
    for key in path:
        node = node["scorers"][metrics["primary_scorer"]] if key == "primary" else node[key]
    return node


def tracker_scalars(job: str, metrics: dict, seconds: float) -> dict[str, float]:
    """``{"eval/<job>/<metric>": value}`` for ``TRACKED_METRICS`` plus the wall time; undefined
    (None, e.g. the confidence gap without a wrong answer) is NaN."""
    out = {}
    for name, path in TRACKED_METRICS:
        value = _metric(metrics, path)
        out[f"eval/{job}/{name}"] = float("nan") if value is None else float(value)
    out[f"eval/{job}/seconds"] = float(seconds)
    return out


def read_history(output_dir: str | os.PathLike) -> list[dict]:
    """One row per finished (step, dataset), from the step folders (so a resumed run has no
    duplicate and no gap): step, dataset, n, the tracked metrics, the primary scorer's
    missing_confidence, seconds; a failed step gives one row with ``failed`` (the reason)."""
    rows = []
    for step, folder in step_folders(output_dir):
        failed = folder / FAILED_FILE
        if failed.is_file():
            rows.append({"step": step, "failed": json.loads(failed.read_text())["error"]})
            continue
        for metrics_path in sorted(folder.glob(f"*/{METRICS_FILE}")):
            metrics = json.loads(metrics_path.read_text())
            row = {"step": step, "dataset": metrics_path.parent.name, "n": metrics["n"]}
            row.update({name: _metric(metrics, path) for name, path in TRACKED_METRICS})
            primary = metrics["scorers"][metrics["primary_scorer"]]
            row["missing_confidence"] = primary.get("missing_confidence")
            row["seconds"] = metrics.get("in_training", {}).get("seconds")
            rows.append(row)
    return rows


def write_history(output_dir: str | os.PathLike) -> Path:
    """Rewrite ``OUTPUT_DIR/eval/history.jsonl`` from the step folders (atomic replace)."""
    path = Path(output_dir) / EVAL_DIR / HISTORY_FILE
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in read_history(output_dir)))
    os.replace(tmp, path)
    return path

"""Every training pool on disk: ``OUTPUT_DIR/pools/step-N.jsonl``, written and read back.

``pool_log.every`` (docs/training.md, "Every pool on disk", lists the row fields): ``step-N``
holds the pool generated after N optimizer steps, which step N + 1 trains on, one JSON object
per completion in TRL's global row order (``group = index // G``). The main process writes
``step-N.jsonl.tmp`` and renames it, so a killed job never leaves a half-written step; a process
that starts training at step S first removes the files of steps >= S (the killed attempt's), so
each step is on disk once. ``rlsr report --pools`` reads them back (``write_pool_summary``).
"""

from __future__ import annotations

import csv
import json
import math
import os
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from rlsr.method.pool import ROW_FIELDS, Pool, PoolObserver, pool_statistics
from rlsr.run.run_layout import EVAL_DIR, POOL_SUFFIX, POOLS_DIR, STEP_PREFIX, pool_path, pool_steps

__all__ = [
    "HISTOGRAM_BINS",
    "PoolLogObserver",
    "PoolLogWriter",
    "pool_rows",
    "read_pool",
    "summarise_pool",
    "pool_summary_rows",
    "write_pool_summary",
]

_TMP = ".tmp"  # step-N.jsonl.tmp: a pool file being written, renamed onto step-N.jsonl
# Confidence histogram of ``summarise_pool``: 10 equal-width bins on [0, 1] (the last one closed).
HISTOGRAM_BINS = 10
# What a pool's summary shares with the trainer's ``rlsr/*`` logs (``pool_statistics``).
SHARED_STATISTICS = ("accuracy", "format_rate", "confidence_parsed_rate", "mean_confidence", "aurc")


def _json_float(value) -> float | None:
    value = float(value)
    return None if math.isnan(value) else value


def pool_rows(
    *,
    step: int,
    num_generations: int,
    prompt_ids: Sequence,
    golds: Sequence,
    texts: Sequence[str],
    answers: Sequence[str | None],
    confidence: np.ndarray,
    correct: np.ndarray,
    status: Sequence[str],
    format_ok: np.ndarray,
    credited_correct: np.ndarray,
    next_heldout_step: int | None,
    columns: np.ndarray,
    names: Sequence[str],
    weights: Sequence[float],
    advantages: np.ndarray,
    max_chars: int | None,
) -> list[dict]:
    """The rows of one pool from the gathered arrays in TRL's row order. ``columns``: the
    unweighted reward columns ``(n, len(names))``; ``reward`` is ``columns @ weights`` (TRL's
    total)."""
    n = len(texts)
    cols = np.asarray(columns, dtype=np.float32)
    lengths = {
        "prompt_ids": len(prompt_ids), "golds": len(golds), "answers": len(answers),
        "confidence": len(confidence), "correct": len(correct), "status": len(status),
        "format_ok": len(format_ok), "credited_correct": len(credited_correct),
        "columns": cols.shape[0], "advantages": len(advantages),
    }  # fmt: skip
    wrong = {k: v for k, v in lengths.items() if v != n}
    if wrong or cols.shape[1:] != (len(names),) or len(weights) != len(names):
        raise ValueError(
            f"pool_rows: every input needs one entry per completion ({n}) and one column per "
            f"name {list(names)}; got {wrong or {'columns': cols.shape, 'weights': len(weights)}}."
        )
    total = cols.astype(np.float64) @ np.asarray(weights, dtype=np.float64)
    rows = []
    for i in range(n):
        text = texts[i]
        rows.append(
            {
                "step": int(step),
                "next_heldout_step": None if next_heldout_step is None else int(next_heldout_step),
                "index": i,
                "group": i // num_generations,
                "prompt_id": prompt_ids[i],
                "gold": golds[i],
                "completion": text if max_chars is None else text[:max_chars],
                "completion_chars": len(text),
                "answer": answers[i],
                "confidence": _json_float(confidence[i]),
                "correct": bool(correct[i]),
                "status": status[i],
                "format_ok": bool(format_ok[i]),
                "credited_correct": bool(credited_correct[i]),
                "rewards": {name: float(cols[i, k]) for k, name in enumerate(names)},
                "reward": float(total[i]),
                "advantage": float(advantages[i]),
            }
        )
    return rows


class PoolLogWriter:
    """Writes ``OUTPUT_DIR/pools/step-N.jsonl`` for the steps ``N % every == 0``. ``heldout_due``:
    the held-out evaluator's schedule (``HeldOutEvaluator.due``), set when the run has one."""

    def __init__(
        self,
        output_dir: str | os.PathLike,
        every: int,
        max_chars: int | None = None,
        heldout_due: Callable[[int, int], bool] | None = None,
    ):
        if not isinstance(every, int) or every < 1:
            raise ValueError(f"every must be a positive integer (steps); got {every!r}.")
        self.folder = Path(output_dir) / POOLS_DIR
        self.output_dir = Path(output_dir)
        self.every = every
        self.max_chars = max_chars
        self.heldout_due = heldout_due

    def next_heldout(self, step: int, max_steps: int | None) -> int | None:
        """The first held-out step K > ``step`` (up to ``max_steps``): the first to see the update
        this pool trains. None without held-out evaluation or when none is left."""
        if self.heldout_due is None or not max_steps or max_steps < 1:
            return None
        due = (k for k in range(step + 1, max_steps + 1) if self.heldout_due(k, max_steps))
        return next(due, None)

    def due(self, step: int) -> bool:
        """Whether the pool generated at ``step`` (optimizer steps done) is written."""
        return step % self.every == 0

    def begin(self, step: int) -> list[Path]:
        """Remove the files of steps >= ``step`` and leftover temporary files (a killed attempt's);
        returns what it removed."""
        removed = []
        if not self.folder.is_dir():
            return removed
        for path in self.folder.glob(f"{STEP_PREFIX}*{POOL_SUFFIX}{_TMP}"):
            path.unlink(missing_ok=True)
            removed.append(path)
        for old in pool_steps(self.output_dir):
            if old >= step:
                path = pool_path(self.output_dir, old)
                path.unlink(missing_ok=True)
                removed.append(path)
        return removed

    def write(self, step: int, rows: Sequence[dict]) -> Path:
        """Write one pool to a temporary file, fsync it, rename it onto ``step-N.jsonl``."""
        self.folder.mkdir(parents=True, exist_ok=True)
        path = pool_path(self.output_dir, step)
        tmp = path.with_name(path.name + _TMP)
        with tmp.open("w", encoding="utf-8") as fh:
            for row in rows:
                fh.write(json.dumps(row, ensure_ascii=False) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        return path


class PoolLogObserver(PoolObserver):
    """The pool files as a pool observer: on a process's first training pool the main process
    calls ``writer.begin``; pools of the writer's steps are written once TRL has their
    advantages. ``method``: the bound method whose columns and weights the rows record."""

    def __init__(self, writer: PoolLogWriter, method):
        self.writer = writer
        self.method = method
        self._begun = False

    def needs_rows(self, pool: Pool) -> bool:
        return pool.mode == "train" and self.writer.due(pool.global_step)

    needs_advantages = needs_rows

    def observe(self, pool: Pool) -> None:
        if pool.mode == "train" and not self._begun:
            self._begun = True  # first training pool of this process: the step it starts at
            if pool.process_index == 0:
                self.writer.begin(pool.global_step)

    def observe_advantages(self, pool: Pool, advantages: np.ndarray) -> None:
        if pool.process_index != 0:  # the main process writes
            return
        columns = self.method.columns
        rows = pool_rows(
            step=pool.global_step,
            num_generations=pool.num_generations,
            **{name: pool.rows[name] for name in ROW_FIELDS},
            confidence=pool.confidence,
            correct=pool.correct,
            format_ok=pool.format_ok,
            credited_correct=self.method.credited_correct(pool.correct, pool.format_ok),
            next_heldout_step=self.writer.next_heldout(pool.global_step, pool.max_steps),
            columns=np.asarray(pool.rewards, dtype=np.float32),
            names=[name for name, _ in columns],
            weights=[w for _, w in columns],
            advantages=advantages,
            max_chars=self.writer.max_chars,
        )
        self.writer.write(rows[0]["step"], rows)


def read_pool(path: str | os.PathLike) -> list[dict]:
    """The rows of one pool file."""
    with Path(path).open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def summarise_pool(rows: Sequence[dict], bins: int = HISTOGRAM_BINS) -> dict:
    """One pool's summary (docs/training.md, ``rlsr report --pools``): accuracy as verified and as
    credited (None in files without ``credited_correct``), format and parsed rates, AURC (as
    the trainer's ``rlsr/*``: a missing confidence ranked 0), mean reward and |advantage|, and
    the parsed confidences of right and wrong answers in ``bins`` equal-width bins of [0, 1]."""
    if not rows:
        raise ValueError("summarise_pool: the pool has no rows.")
    correct = np.array([bool(r["correct"]) for r in rows])
    raw = np.array([np.nan if r["confidence"] is None else r["confidence"] for r in rows], float)
    stats = pool_statistics(correct, raw, np.array([bool(r["format_ok"]) for r in rows]), 0)
    parsed = ~np.isnan(raw)
    # Bin k holds k/bins <= c < (k+1)/bins (1.0 in the last): floor(c * bins), so a stated 0.7
    # is in [0.7, 0.8) (np.histogram's float edge 0.7000000000000001 would put it below).
    index = np.minimum(np.floor(np.where(parsed, raw, 0.0) * bins), bins - 1).astype(int)
    hist_right = np.bincount(index[parsed & correct], minlength=bins)
    hist_wrong = np.bincount(index[parsed & ~correct], minlength=bins)
    credited = [r["credited_correct"] for r in rows if "credited_correct" in r]
    return {
        "step": int(rows[0]["step"]),
        "next_heldout_step": rows[0].get("next_heldout_step"),
        "n": len(rows),
        **{k: stats[f"rlsr/{k}"] for k in SHARED_STATISTICS},
        "credited_accuracy": float(np.mean(credited)) if len(credited) == len(rows) else None,
        "mean_reward": float(np.mean([r["reward"] for r in rows])),
        "mean_abs_advantage": float(np.mean([abs(r["advantage"]) for r in rows])),
        "hist_right": hist_right.tolist(),
        "hist_wrong": hist_wrong.tolist(),
        "missing_right": int((~parsed & correct).sum()),
        "missing_wrong": int((~parsed & ~correct).sum()),
    }


def pool_summary_rows(run_dirs: Sequence[str | os.PathLike]) -> list[dict]:
    """``summarise_pool`` of every pool file of every run, with ``run`` (the folder)."""
    out = []
    for run in map(Path, run_dirs):
        steps = pool_steps(run)
        if not steps:
            raise ValueError(
                f"{run}: no pool files ({run}/{POOLS_DIR}/{STEP_PREFIX}N{POOL_SUFFIX}); train with "
                "pool_log.every > 0 (docs/training.md, 'Every pool on disk')."
            )
        for step in steps:
            out.append({"run": str(run), **summarise_pool(read_pool(pool_path(run, step)))})
    return out


def _bar(counts: Sequence[int], total: int) -> str:
    blocks = " ▁▂▃▄▅▆▇█"
    return "".join(blocks[min(8, math.ceil(8 * c / total))] if total else " " for c in counts)


def write_pool_summary(run_dirs: Sequence[str | os.PathLike], output: str | os.PathLike) -> dict:
    """``PREFIX_pools.csv`` (one row per run and step) and the text ``rlsr report --pools``
    prints; returns ``{"csv", "rows", "text"}``."""
    rows = pool_summary_rows(run_dirs)
    prefix = Path(output)
    prefix.parent.mkdir(parents=True, exist_ok=True)
    csv_path = prefix.with_name(prefix.name + "_pools.csv")
    edges = np.linspace(0.0, 1.0, HISTOGRAM_BINS + 1)
    labels = [f"{a:.1f}-{b:.1f}" for a, b in zip(edges[:-1], edges[1:], strict=True)]
    scalars = ["run", "step", "next_heldout_step", "n", "accuracy", "credited_accuracy",
               "format_rate", "confidence_parsed_rate",
               "mean_confidence", "aurc", "mean_reward", "mean_abs_advantage",
               "missing_right", "missing_wrong"]  # fmt: skip
    fields = scalars + [f"right_{x}" for x in labels] + [f"wrong_{x}" for x in labels]
    with csv_path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=fields)
        writer.writeheader()
        for row in rows:
            flat = {k: row[k] for k in scalars}
            flat.update({f"right_{x}": c for x, c in zip(labels, row["hist_right"], strict=True)})
            flat.update({f"wrong_{x}": c for x, c in zip(labels, row["hist_wrong"], strict=True)})
            writer.writerow(flat)
    lines = []
    for run in dict.fromkeys(r["run"] for r in rows):
        lines.append(
            f"{run}/{POOLS_DIR}: pool {STEP_PREFIX}N trains optimizer step N+1; next-eval: the "
            f"held-out step ({EVAL_DIR}/{STEP_PREFIX}K) that first sees its update; acc: the "
            "verifier's verdicts, "
            "credited: the reward's (correct & format_ok under method.correct_requires_format); "
            f"confidence 0 -> 1 in {HISTOGRAM_BINS} bins"
        )
        lines.append(
            "  step next-eval     n    acc credited  format    AURC  right answers  wrong answers"
        )
        for r in (r for r in rows if r["run"] == run):
            nxt = "-" if r["next_heldout_step"] is None else str(r["next_heldout_step"])
            cred = "-" if r["credited_accuracy"] is None else f"{r['credited_accuracy']:.3f}"
            lines.append(
                f"  {r['step']:>4} {nxt:>9} {r['n']:>5} {r['accuracy']:6.3f} {cred:>8} "
                f"{r['format_rate']:7.3f} {r['aurc']:7.4f}  |{_bar(r['hist_right'], r['n'])}|   "
                f"|{_bar(r['hist_wrong'], r['n'])}|"
            )
    lines.append(f"table: {csv_path}")
    return {"csv": csv_path, "rows": rows, "text": "\n".join(lines)}

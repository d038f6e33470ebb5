#!/usr/bin/env python
"""Re-read recipe=tiny runs of tools/tiny/seeds.py with other confidence scorers.

    python tools/tiny/reread.py --runs-dir /tmp/tiny-item5 --dispatch default
    python tools/tiny/reread.py --runs-dir /tmp/tiny-item5 --dispatch avx2 --scorers expected,verbalized

For every finished run of one dispatch (``RUNS/<arm>-<dispatch>-seed<S>/wall.json``), evaluates
the start model (step 0, once per dispatch) and the last ``checkpoint-N`` the run kept (every
one with ``--all-checkpoints``) with
``rlsr evaluate --scorers SCORERS`` on the held-out split the run itself evaluated (greedy,
``--max-new-tokens`` 32 as the recipe, ``--bootstrap 0``), under the same
``ATEN_CPU_CAPABILITY`` as the run (the process re-executes itself with it), into
``RUNS/reread/<run>/step-N/`` (``RUNS/reread/start-<dispatch>/`` for step 0); a finished
evaluation is reused. Then, per run, step and scorer: AURC, error rate, ranking gain (error rate -
AURC) and the mean confidence per kind of question (listed fact / ``Facts: none.``), and per
scorer the number of runs whose last step's ranking gain is >= ``--threshold``; written to
``RUNS/reread/table-<dispatch>.json`` and ``.md``. The verbalized reading of each step must equal
the run's own held-out history (the same greedy answers): a difference is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from rlsr.data.tiny_models import shipped_model_path  # noqa: E402
from rlsr.evaluation.heldout.history import read_history  # noqa: E402
from rlsr.metrics.selective import ranking_gain_from_aurc  # noqa: E402
from rlsr.run.run_layout import CHECKPOINT_PREFIX, METRICS_FILE, SAMPLES_FILE, STEP_PREFIX  # noqa: E402
from tools.tiny.seeds import DISPATCHES, RECIPES  # noqa: E402

DATASET = RECIPES["tiny"]["dataset"]
KINDS = RECIPES["tiny"]["kinds"]
KIND_OF = RECIPES["tiny"]["kind_of"]


def _evaluate(out: Path, adapter: Path | None, scorers: str) -> Path:
    """``rlsr evaluate`` of the tiny start model (+ ``adapter``) into ``out``; its samples file."""
    from rlsr.cli import main as rlsr_main

    samples = out / DATASET / SAMPLES_FILE
    if (out / DATASET / METRICS_FILE).is_file():
        return samples
    argv = ["evaluate", "--model", str(shipped_model_path("tiny-missing-warm")),
            "--tasks", DATASET, "--max-new-tokens", "32", "--scorers", scorers,
            "--bootstrap", "0", "--no-progress", "--output-dir", str(out)]  # fmt: skip
    if adapter is not None:
        argv += ["--adapter", str(adapter)]
    if rlsr_main(argv) != 0:
        raise SystemExit(f"rlsr evaluate {' '.join(argv)} failed")
    return samples


def read_step(samples: Path, scorers: list[str]) -> dict:
    """Per scorer: AURC, error rate, ranking gain and mean confidence per kind; for verbalized
    also the distinct confidences per kind (a constant greedy confidence ranks nothing)."""
    from rlsr.evaluation.run.samples_io import read_samples
    from rlsr.evaluation.run.summary import scorer_arrays
    from rlsr.metrics.selective import aurc

    rows = read_samples(samples)
    out = {}
    for name in scorers:
        conf, ok, missing = scorer_arrays(rows, name)
        error = 1.0 - float(ok.mean())
        value = aurc(conf, ok)
        by_kind = {
            kind: [c for c, r in zip(conf, rows, strict=True) if KIND_OF(r["question"]) == kind]
            for kind in KINDS
        }
        out[name] = {
            "aurc": value, "error": error, "gain": ranking_gain_from_aurc(value, error),
            "missing": missing,
            "mean_by_kind": {k: sum(v) / len(v) for k, v in by_kind.items() if v},
            "distinct": len({round(float(c), 9) for c in conf}),
        }  # fmt: skip
        if name == "verbalized":
            out[name]["values_by_kind"] = {
                k: sorted({float(c) for c in v}) for k, v in by_kind.items()
            }
    return out


def _checkpoints(run: Path) -> list[tuple[int, Path]]:
    found = [
        (int(p.name.split("-")[1]), p) for p in run.glob(f"{CHECKPOINT_PREFIX}*") if p.is_dir()
    ]
    return sorted(found)


def markdown(rows: list[dict], scorers: list[str], dispatch: str, threshold: float) -> str:
    lines = [f"**Ranking gain by reading** (dispatch {dispatch}; held-out {DATASET} test, greedy "
             f"answers; runs with last-step gain >= {threshold:g})", "",
             "| reading | runs | gain >= threshold at last step | mean gain step 0 | "
             "mean gain last step |", "| --- | --- | --- | --- | --- |"]  # fmt: skip
    for name in scorers:
        last = [r["steps"][-1]["scorers"][name]["gain"] for r in rows]
        start = rows[0]["steps"][0]["scorers"][name]["gain"] if rows else float("nan")
        hit = sum(g >= threshold for g in last)
        mean = sum(last) / len(last) if last else float("nan")
        lines.append(f"| {name} | {len(rows)} | {hit} | {start:+.3f} | {mean:+.3f} |")
    lines += ["", "**Per run** (ranking gain per step; last step's mean confidence per kind)", "",
              "| run | " + " | ".join(f"{s} gain by step" for s in scorers)
              + " | " + " | ".join(f"{s} listed / missing (last)" for s in scorers) + " |",
              "| --- |" + " --- |" * (2 * len(scorers))]  # fmt: skip
    for r in rows:
        gains = [" -> ".join(f"{st['scorers'][s]['gain']:+.3f}" for st in r["steps"])
                 for s in scorers]  # fmt: skip
        means = []
        for s in scorers:
            m = r["steps"][-1]["scorers"][s]["mean_by_kind"]
            means.append(" / ".join(f"{m.get(k, float('nan')):.3f}" for k in KINDS))
        lines.append(f"| {r['run']} | " + " | ".join(gains + means) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs-dir", required=True, help="tools/tiny/seeds.py's --output-dir")
    p.add_argument("--dispatch", default="default", choices=sorted(DISPATCHES))
    p.add_argument("--scorers", default="expected,verbalized")
    p.add_argument("--threshold", type=float, default=0.10)
    p.add_argument("--all-checkpoints", action="store_true", help="not only the last one")
    args = p.parse_args(argv)
    want = DISPATCHES[args.dispatch]
    if os.environ.get("ATEN_CPU_CAPABILITY") != want:  # set before torch loads: re-execute
        env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
        env.pop("ATEN_CPU_CAPABILITY", None)
        if want is not None:
            env["ATEN_CPU_CAPABILITY"] = want
        os.execve(sys.executable, [sys.executable, __file__, *sys.argv[1:]], env)
    runs_dir = Path(args.runs_dir).absolute()
    scorers = [s for s in args.scorers.split(",") if s]
    runs = sorted(
        (d for d in runs_dir.glob(f"*-{args.dispatch}-seed*") if (d / "wall.json").is_file()),
        key=lambda d: int(d.name.rsplit("seed", 1)[1]),
    )
    if not runs:
        raise SystemExit(f"--runs-dir {runs_dir}: no finished {args.dispatch} run in it.")
    out = runs_dir / "reread"
    start = read_step(_evaluate(out / f"start-{args.dispatch}", None, ",".join(scorers)), scorers)
    rows = []
    for run in runs:
        history = {h["step"]: h for h in read_history(run) if "failed" not in h}
        steps = [{"step": 0, "scorers": start}]
        kept = _checkpoints(run)
        for step, ckpt in kept if args.all_checkpoints else kept[-1:]:
            samples = _evaluate(out / run.name / f"{STEP_PREFIX}{step}", ckpt, ",".join(scorers))
            steps.append({"step": step, "scorers": read_step(samples, scorers)})
        for entry in steps:
            step, read = entry["step"], entry["scorers"]
            if step in history and "verbalized" in read:
                if abs(history[step]["aurc"] - read["verbalized"]["aurc"]) > 1e-9:
                    print(f"{run.name} step {step}: verbalized AURC {read['verbalized']['aurc']}"
                          f" differs from its held-out history {history[step]['aurc']}")  # fmt: skip
        rows.append({"run": run.name, "steps": steps})
    text = markdown(rows, scorers, args.dispatch, args.threshold)
    (out / f"table-{args.dispatch}.json").write_text(json.dumps(rows, indent=1))
    (out / f"table-{args.dispatch}.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

#!/usr/bin/env python
"""README command 1 over seeds and CPU dispatches: does `train.py recipe=tiny` learn to rank?

    python scripts/tiny_seeds.py                                # 10 seeds x 2 dispatches + control
    python scripts/tiny_seeds.py --seeds 0,1 --dispatches default --control-seeds ""
    python scripts/tiny_seeds.py --dispatches scalar --control-seeds ""   # portable kernels

Each run is the real command 1 (``train.py recipe=tiny seed=S``, one process, OMP_NUM_THREADS=1
so two runs share a 2-core machine), under the default ATen CPU dispatch and under
``ATEN_CPU_CAPABILITY=avx2`` (another machine's float rounding; ``--dispatches`` also takes
``scalar``, the portable kernels, which differ from the default even on an AVX2-only CPU); the control runs
``method=rlvr`` on the same recipe (its reward never looks at the confidence). From each run's
held-out history (``eval/``, greedy, 100 prompts) it reads the AURC at the first and last
evaluated step, the error rate, the ranking gain (error rate - AURC,
``rlsr.metrics.ranking_gain_from_aurc``) and the format rate, and checks issue 35's bar:

* RLSR: last ranking gain >= 0.10, first |gain| <= 0.01, AURC at least 0.10 below the first
  step's, format rate >= 0.95;
* RLVR control: last ranking gain <= 0.03.

Writes ``OUT/table.md`` (the docs' table) and ``OUT/table.json``; a run folder holding a finished
history is reused when the command is re-run. Exit 1 when a run misses the bar.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from rlsr.evaluation.history import read_history  # noqa: E402
from rlsr.metrics import ranking_gain_from_aurc  # noqa: E402

# Dispatch name -> ATEN_CPU_CAPABILITY ("default": unset, the best kernels this CPU has; on a CPU
# without AVX-512 that is AVX2 itself, so "scalar", PyTorch's portable kernels, is the one that
# surely rounds differently there).
DISPATCHES = {"default": None, "avx2": "avx2", "avx512": "avx512", "scalar": "default"}
MIN_GAIN = 0.10
MAX_FIRST_GAIN = 0.01
MIN_AURC_DROP = 0.10
MIN_FORMAT = 0.95
MAX_CONTROL_GAIN = 0.03


def _run(method: str, seed: int, dispatch: str, out: Path) -> dict:
    folder = out / f"{method}-{dispatch}-seed{seed}"
    done = folder / "wall.json"
    if not done.is_file():
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
        env.pop("ATEN_CPU_CAPABILITY", None)
        if dispatch != "default":
            env["ATEN_CPU_CAPABILITY"] = DISPATCHES[dispatch]
        cmd = [sys.executable, str(REPO / "train.py"), "recipe=tiny", f"method={method}",
               f"seed={seed}", f"output_dir={folder}", "resume=never", "grpo.disable_tqdm=true"]  # fmt: skip
        folder.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        with open(folder.with_suffix(".log"), "w") as log:
            rc = subprocess.run(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
        seconds = time.perf_counter() - t0
        if rc.returncode != 0:
            return {"method": method, "seed": seed, "dispatch": dispatch, "error": rc.returncode,
                    "log": str(folder.with_suffix(".log"))}  # fmt: skip
        done.write_text(json.dumps({"seconds": seconds, "load": os.getloadavg()}))
    wall = json.loads(done.read_text())
    history = sorted(
        (h for h in read_history(folder) if "failed" not in h), key=lambda h: h["step"]
    )
    first, last = history[0], history[-1]
    row = {"method": method, "seed": seed, "dispatch": dispatch,
           "first_step": first["step"], "last_step": last["step"],
           "aurc_first": first["aurc"], "aurc_last": last["aurc"],
           "error_first": 1 - first["accuracy"], "error_last": 1 - last["accuracy"],
           "gain_first": ranking_gain_from_aurc(first["aurc"], 1 - first["accuracy"]),
           "gain_last": ranking_gain_from_aurc(last["aurc"], 1 - last["accuracy"]),
           "format_last": last["format_rate"], "seconds": wall["seconds"],
           "load_1min_at_end": wall["load"][0]}  # fmt: skip
    row["passed"] = _passes(row)
    return row


def _passes(row: dict) -> bool:
    if row["method"] == "rlvr":
        return row["gain_last"] <= MAX_CONTROL_GAIN
    return (
        row["gain_last"] >= MIN_GAIN
        and abs(row["gain_first"]) <= MAX_FIRST_GAIN
        and row["aurc_first"] - row["aurc_last"] >= MIN_AURC_DROP
        and row["format_last"] >= MIN_FORMAT
    )


def _signed(value: float) -> str:
    """``value`` as +0.123; float noise around 0 (-1e-16) prints +0.000."""
    return f"{round(value, 3) + 0.0:+.3f}"


def table_markdown(rows: list[dict]) -> str:
    head = ("| method | seed | dispatch | AURC first -> last | error rate first -> last | "
            "ranking gain first -> last | format | wall s | load | pass |")  # fmt: skip
    lines = [head, "| --- " * 10 + "|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['method']} | {r['seed']} | {r['dispatch']} | failed: {r['log']} "
                         "| | | | | | no |")  # fmt: skip
            continue
        lines.append(
            f"| {r['method']} | {r['seed']} | {r['dispatch']} | {r['aurc_first']:.3f} -> "
            f"{r['aurc_last']:.3f} | {r['error_first']:.2f} -> {r['error_last']:.2f} | "
            f"{_signed(r['gain_first'])} -> {_signed(r['gain_last'])} | {r['format_last']:.2f} | "
            f"{r['seconds']:.0f} | {r['load_1min_at_end']:.1f} | "
            f"{'yes' if r['passed'] else 'NO'} |"
        )
    ok = [r for r in rows if r.get("passed")]
    lines.append("")
    lines.append(f"{len(ok)} of {len(rows)} runs pass (steps {rows[0].get('first_step')} -> "
                 f"{rows[0].get('last_step')}).")  # fmt: skip
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", default="0,1,2,3,4,5,6,7,8,9")
    p.add_argument("--dispatches", default="default,avx2", help=f"comma list of {list(DISPATCHES)}")
    p.add_argument("--control-seeds", default="0,1,2", help="method=rlvr seeds ('' for none)")
    p.add_argument("--jobs", type=int, default=2, help="runs at once (each on one thread)")
    p.add_argument("--output-dir", default="tiny_runs")
    args = p.parse_args(argv)
    out = Path(args.output_dir).absolute()
    unknown = set(args.dispatches.split(",")) - set(DISPATCHES)
    if unknown:
        p.error(f"--dispatches: unknown {sorted(unknown)}; known: {list(DISPATCHES)}")
    seeds = [int(s) for s in args.seeds.split(",") if s]
    jobs = [("rlsr", s, d) for s in seeds for d in args.dispatches.split(",")]
    jobs += [("rlvr", int(s), "default") for s in args.control_seeds.split(",") if s]
    with ThreadPoolExecutor(args.jobs) as pool:
        rows = list(pool.map(lambda job: _run(*job, out), jobs))
    out.mkdir(parents=True, exist_ok=True)
    (out / "table.json").write_text(json.dumps(rows, indent=1))
    text = table_markdown(rows)
    (out / "table.md").write_text(text)
    print(text)
    return 0 if all(r.get("passed") for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())

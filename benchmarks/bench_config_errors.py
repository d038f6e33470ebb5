"""Benchmark how long ``train.py`` takes to refuse a bad config (target: <= 2 s, median of 5).

Three refusals, each run ``--repeats`` times as a fresh ``python train.py`` process, beside
baselines measured in the same run: the bare interpreter (``python -c pass``), importing the
trainer's heavy packages as they are imported to train (``from trl import GRPOConfig`` pulls
torch, transformers and TRL's trainer stack), and a Hydra composition of ``recipe=tiny``
alone. Each refusal must exit 2 with one ``config error:`` line; the medians are printed as a
markdown table (append it to benchmarks/RESULTS.md with the machine, date and load).
``--before DIR`` also times the same refusals with another checkout's ``train.py`` and package
(e.g. ``git worktree add /tmp/before <commit>``), in the same run.

Usage: ``.venv/bin/python benchmarks/bench_config_errors.py [--repeats 5] [--before DIR]``.
"""

from __future__ import annotations

import argparse
import itertools
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REFUSALS = {
    "typo (grpo.learning_rat=1)": ["recipe=tiny", "grpo.learning_rat=1"],
    "unknown recipe (recipe=nope)": ["recipe=nope"],
    "bad heldout.variants (heldout.variants=5)": ["recipe=tiny", "heldout.variants=5"],
}
BASELINES = {
    "python -c pass": "pass",
    "compose_tree([recipe=tiny]) (Hydra + rlsr.config)": (
        "from rlsr.config.compose import compose_tree; compose_tree(['recipe=tiny'])"
    ),
    "from trl import GRPOConfig (torch, transformers, TRL)": "from trl import GRPOConfig",
}


def _timed(cmd: list[str], env: dict, cwd: Path) -> tuple[float, subprocess.CompletedProcess]:
    start = time.perf_counter()
    proc = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True)
    return time.perf_counter() - start, proc


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--before", type=Path, help="another checkout to time the refusals of")
    args = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    env.update(HF_HUB_OFFLINE="1", PYTHONPATH=str(ROOT))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for label, code in BASELINES.items():
            seconds = [
                _timed([sys.executable, "-c", code], env, ROOT)[0] for _ in range(args.repeats)
            ]
            rows.append((label, seconds, ""))
        checkouts = [("", ROOT)] + ([("before: ", args.before.resolve())] if args.before else [])
        for (prefix, root), (label, overrides) in itertools.product(checkouts, REFUSALS.items()):
            label = prefix + label
            seconds, said = [], ""
            for i in range(args.repeats):
                cmd = [sys.executable, str(root / "train.py"), *overrides, f"output_dir={tmp}/{i}"]
                wall, proc = _timed(cmd, {**env, "PYTHONPATH": str(root)}, root)
                lines = proc.stderr.strip().splitlines()
                if (
                    proc.returncode != 2
                    or len(lines) != 1
                    or not lines[0].startswith("config error:")
                ):
                    sys.exit(f"{label}: expected exit 2 and one config error line; got "
                             f"{proc.returncode}: {proc.stderr[-500:]}")  # fmt: skip
                seconds.append(wall)
                said = lines[0]
            rows.append((label, seconds, said))
    load = os.getloadavg()
    print(
        f"## Config errors before the heavy imports (`benchmarks/bench_config_errors.py`, {date.today()})\n"
    )
    print(f"Machine: {os.cpu_count()} CPUs ({platform.processor() or platform.machine()}), "
          f"load average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} (1/5/15 min) after the run; "
          f"median of {args.repeats} fresh processes each.\n")  # fmt: skip
    print("| command | median | min-max | message |")
    print("| --- | --- | --- | --- |")
    for label, seconds, said in rows:
        message = f"`{said[:70]}...`" if said else "(baseline)"
        print(f"| {label} | {statistics.median(seconds):.2f} s | "
              f"{min(seconds):.2f}-{max(seconds):.2f} s | {message} |")  # fmt: skip


if __name__ == "__main__":
    main()

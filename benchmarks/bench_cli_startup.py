"""Benchmark how long the ``rlsr`` command takes to answer before any work (target: <= 0.3x the
time of ``import torch, transformers``, medians of the same run).

Each case is a fresh ``python -m rlsr.cli ...`` process, run ``--repeats`` times interleaved with
the baselines: ``rlsr --help``, every command's ``--help`` (the commands are read from
``rlsr.cli.COMMANDS``), and an argument error (``rlsr evaluate --nope``, exit 2); the baselines
are the bare interpreter (``python -c pass``) and ``python -c "import torch, transformers"``.
Prints a markdown table of medians and each case's ratio to the torch + transformers import
(append it to benchmarks/RESULTS.md with the machine, date and load). ``--before DIR`` also times
the same cases with another checkout's package (e.g. ``git worktree add /tmp/before <commit>``),
in the same run.

Usage: ``.venv/bin/python benchmarks/bench_cli_startup.py [--repeats 7] [--before DIR]``.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEAVY = "import torch, transformers"
BASELINES = {"python -c pass": ["-c", "pass"], f'python -c "{HEAVY}"': ["-c", HEAVY]}


def _cases(env: dict) -> dict[str, tuple[list[str], int]]:
    """Each case's ``rlsr`` arguments and expected exit; the commands are this checkout's."""
    names = subprocess.run(
        [sys.executable, "-c", "from rlsr.cli import COMMANDS; print(*COMMANDS)"],
        env=env, cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    return {
        "rlsr --help": (["--help"], 0),
        **{f"rlsr {name} --help": ([name, "--help"], 0) for name in names},
        "rlsr evaluate --nope (argument error)": (["evaluate", "--nope"], 2),
    }


def _timed(argv: list[str], env: dict, expect: int | None, cwd: Path) -> float:
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, *argv], env=env, cwd=cwd, capture_output=True)
    wall = time.perf_counter() - start
    if expect is not None and proc.returncode != expect:
        sys.exit(f"{argv}: expected exit {expect}, got {proc.returncode}: {proc.stderr[-400:]}")
    return wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--before", type=Path, help="another checkout to time the same cases of")
    args = parser.parse_args()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    checkouts = [("", ROOT)] + ([("before: ", args.before.resolve())] if args.before else [])
    jobs = [(label, argv, None, env, ROOT) for label, argv in BASELINES.items()]
    cases = _cases(env)
    for prefix, root in checkouts:
        for label, (argv, expect) in cases.items():
            # run from the checkout: `python -m` puts the working folder first on sys.path
            jobs.append((prefix + label, ["-m", "rlsr.cli", *argv], expect,
                         {**env, "PYTHONPATH": str(root)}, root))  # fmt: skip
    seconds: dict[str, list[float]] = {label: [] for label, *_ in jobs}
    for _ in range(args.repeats):  # interleaved, so a burst of load hits every case alike
        for label, argv, expect, job_env, cwd in jobs:
            seconds[label].append(_timed(argv, job_env, expect, cwd))
    heavy = statistics.median(seconds[f'python -c "{HEAVY}"'])
    load = os.getloadavg()
    print(f"## `rlsr` start-up: help and argument errors (`benchmarks/bench_cli_startup.py`, "
          f"{date.today()})\n")  # fmt: skip
    print(f"Machine: {os.cpu_count()} CPUs ({platform.processor() or platform.machine()}), "
          f"load average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} (1/5/15 min) after the run; "
          f"median of {args.repeats} fresh processes each.\n")  # fmt: skip
    print(f"| command | median | min-max | / `{HEAVY}` |")
    print("| --- | --- | --- | --- |")
    for label, values in seconds.items():
        median = statistics.median(values)
        print(f"| {label} | {median:.2f} s | {min(values):.2f}-{max(values):.2f} s | "
              f"{median / heavy:.2f}x |")  # fmt: skip


if __name__ == "__main__":
    main()

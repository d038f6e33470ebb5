"""Benchmark ``marginal_aurc_rewards`` against ``lifted_aurc_rewards`` on the same pools.

Baseline measured in the same run: the released lifted-AURC reward on the same pool (one sort
plus tie averaging). Pools of 1,536 (one paper step), 2,048 and 100,000 completions with
confidences on the 0.01 grid (many ties), 5 % missing, half right.

Usage: ``.venv/bin/python benchmarks/bench_marginal.py``; prints a markdown table (append it to
benchmarks/RESULTS.md).
"""

from __future__ import annotations

import platform
import time

import numpy as np

from rlsr.equations.rewards import lifted_aurc_rewards, marginal_aurc_rewards


def median_ms(fn, repeats: int) -> float:
    runs = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - start)
    return 1000 * float(np.median(runs))


def main() -> int:
    rng = np.random.default_rng(0)
    print(f"Machine: {platform.machine()}, {platform.processor() or 'cpu'}, numpy {np.__version__}")
    print()
    print("| pool n | lifted_aurc_rewards (ms) | marginal_aurc_rewards (ms) | ratio |")
    print("| ---: | ---: | ---: | ---: |")
    for n, repeats in ((1536, 200), (2048, 200), (100_000, 10)):
        conf = np.round(rng.random(n), 2)
        conf[rng.random(n) < 0.05] = np.nan
        correct = rng.random(n) < 0.5
        lifted = median_ms(lambda c=correct, f=conf: lifted_aurc_rewards(c, f), repeats)
        marginal = median_ms(lambda c=correct, f=conf: marginal_aurc_rewards(c, f), repeats)
        print(f"| {n:,} | {lifted:.3f} | {marginal:.3f} | {marginal / lifted:.1f}x |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

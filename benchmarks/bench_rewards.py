"""Benchmark the reward path: parse + exact match + lifted-AURC rank, and math-verify.

Every row is printed beside a baseline measured in the same run:
* reward path for pools of 1,536 (one paper step) and 100,000 completions vs a plain
  ``np.argsort`` of the pool's confidences;
* math-verify on 1,536 answers: the serial ``math_equal`` loop (baseline) vs ``MathVerifier`` with
  N worker processes (warm; start-up reported separately), on unique answers and on a GRPO-like
  pool (48 prompts x 32 rollouts, repeated answers verified once).

Usage: ``.venv/bin/python benchmarks/bench_rewards.py [--workers 2] [--quick]``. Prints a
markdown section to stdout (append it to benchmarks/RESULTS.md).
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import numpy as np

from rlsr.core.parsing import parse_response
from rlsr.equations.rewards import lifted_aurc_rewards
from rlsr.verifiers import MathVerifier, exact_match, math_equal

WORDS = ["Paris", "the Beatles", "Lyon", "1912", "Marie Curie", "Nile", "an apple", "Mount Everest"]


def synthetic_completions(n: int, rng: np.random.Generator) -> tuple[list[str], list[str]]:
    """n completions in the paper's format (5% malformed) and their gold answers."""
    answers = rng.choice(WORDS, size=n)
    golds = rng.choice(WORDS, size=n)
    confidences = rng.random(n)
    texts = []
    for i in range(n):
        think = "Let me reason about the question step by step. " * 8
        text = (
            f"<think>{think}</think>\n<answer>{answers[i]}</answer>\n"
            f"<analysis>The passage could be ambiguous.</analysis>\n"
            f"<confidence>{confidences[i]:.2f}</confidence>"
        )
        if i % 20 == 0:
            text = text.replace("</analysis>", "")  # malformed
        texts.append(text)
    return texts, list(golds)


def reward_path(texts: list[str], golds: list[str]) -> np.ndarray:
    parsed = [parse_response(t) for t in texts]
    correct = np.array([exact_match(p.answer, g) for p, g in zip(parsed, golds, strict=True)])
    confidence = np.array([np.nan if p.confidence is None else p.confidence for p in parsed])
    return lifted_aurc_rewards(correct, confidence)


def median_time(fn, repeats: int) -> float:
    """Median wall time; the CPU time of the median run goes to CPU_TIMES (contention check)."""
    runs = []
    for _ in range(repeats):
        start, cpu = time.perf_counter(), time.process_time()
        fn()
        runs.append((time.perf_counter() - start, time.process_time() - cpu))
    runs.sort()
    wall, cpu = runs[len(runs) // 2]
    CPU_TIMES[wall] = cpu
    return wall


CPU_TIMES: dict[float, float] = {}


def math_pool(n: int, rng: np.random.Generator, grpo_like: bool) -> tuple[list[str], list[str]]:
    """Math answers in the forms a policy writes (fractions, decimals, LaTeX) and their golds."""
    preds, golds = [], []
    for i in range(n):
        a, b = (int(x) for x in rng.integers(1, 500, size=2))
        if grpo_like:  # 32 rollouts per prompt reuse a handful of answers
            a, b = i // 32 + 1, int(rng.integers(1, 4))
        form = i % 4
        pred = [f"{a}/{b}", f"\\frac{{{a}}}{{{b}}}", f"{a / b:.6f}", f"$\\frac{{{a}}}{{{b}}}$"][
            form
        ]
        preds.append(pred)
        golds.append(f"\\frac{{{a}}}{{{b + (i % 3 == 0)}}}")
    return preds, golds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="fewer repeats, smaller math pool")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    rows: list[tuple[str, float, str, float]] = []

    for n, repeats in ((1536, 3 if args.quick else 15), (100_000, 1 if args.quick else 3)):
        texts, golds = synthetic_completions(n, rng)
        confidence = rng.random(n)
        baseline = median_time(lambda c=confidence: np.argsort(c, kind="stable"), repeats * 5)
        parse_t = median_time(lambda t=texts: [parse_response(x) for x in t], repeats)
        full_t = median_time(lambda t=texts, g=golds: reward_path(t, g), repeats)
        parsed = [parse_response(x) for x in texts]
        correct = np.array([exact_match(p.answer, g) for p, g in zip(parsed, golds, strict=True)])
        conf = np.array([np.nan if p.confidence is None else p.confidence for p in parsed])
        rank_t = median_time(lambda ok=correct, c=conf: lifted_aurc_rewards(ok, c), repeats)
        label = f"np.argsort (n={n:,})"
        rows += [
            (f"parse_response x {n:,}", parse_t, label, baseline),
            (f"lifted_aurc_rewards (n={n:,})", rank_t, label, baseline),
            (f"parse + exact match + rank (n={n:,})", full_t, label, baseline),
        ]

    math_n = 384 if args.quick else 1536
    for grpo_like in (False, True):
        preds, golds = math_pool(math_n, rng, grpo_like)
        kind = "GRPO-like, repeated answers" if grpo_like else "unique answers"
        start = time.perf_counter()
        serial_correct = [math_equal(p, g) for p, g in zip(preds, golds, strict=True)]
        serial_t = time.perf_counter() - start
        with MathVerifier(num_workers=args.workers, timeout_s=5) as verifier:
            start = time.perf_counter()
            verifier.verify_batch(preds[:4], golds[:4])  # start the workers
            startup_t = time.perf_counter() - start
            start = time.perf_counter()
            result = verifier.verify_batch(preds, golds)
            pool_t = time.perf_counter() - start
        assert result.correct.tolist() == serial_correct, "pool and serial disagree"
        baseline = f"serial math_equal loop ({kind})"
        rows.append(
            (
                f"MathVerifier {args.workers} workers, warm (n={math_n:,}, {kind})",
                pool_t,
                baseline,
                serial_t,
            )
        )
        rows.append(
            (
                f"  worker start-up (first call, {args.workers} workers)",
                startup_t,
                baseline,
                serial_t,
            )
        )

    print(f"## bench_rewards.py ({time.strftime('%Y-%m-%d')})\n")
    print(
        f"Machine: {os.cpu_count()}-core CPU shared with other jobs, Python {platform.python_version()}; "
        "median of repeats; ratio = time / baseline.\n"
    )
    print("| measurement | wall (ms) | CPU (ms) | baseline | baseline (ms) | ratio |")
    print("| --- | ---: | ---: | --- | ---: | ---: |")
    for name, t, base_name, base_t in rows:
        cpu = f"{CPU_TIMES[t] * 1e3:.2f}" if t in CPU_TIMES else "n/a"
        print(
            f"| {name} | {t * 1e3:.2f} | {cpu} | {base_name} | {base_t * 1e3:.2f} | "
            f"{t / base_t:.1f}x |"
        )
    print(
        "\nCPU = this process only (workers excluded); wall > CPU means the shared machine was "
        "busy. Parallel math speed-ups need idle cores; this machine had none."
    )


if __name__ == "__main__":
    main()

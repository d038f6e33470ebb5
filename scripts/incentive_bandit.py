#!/usr/bin/env python
"""What each pooled reward teaches a single completion: a confidence bandit (docs/training.md).

Items come in types with a fixed chance p of being answered right. A policy picks one of 11
verbalized confidences 0.0, 0.1, ..., 1.0 per type (a softmax per type), and is trained by
REINFORCE with GRPO's group-mean baseline (``scale_rewards: none``): every step draws B item
types, G completions each, one pool of N = B x G; every reward below is computed over the whole
pool with ``rlsr.rewards``, as the trainer does. Then, on held-out draws, AURC of the greedy
confidences (ties averaged) against two references: ranking by p (the oracle) and the best
two-level ranking (1 if p > 1/2 else 0: what a threshold rule can express).

Rewards: ``lifted`` (RLSR's released reward, lambda = 1), ``plain`` (lambda = 0), ``brier``
(RLCR's 1 - (correct - c)^2 plus correctness), ``marginal`` (ours: ``marginal_aurc_rewards``),
``lifted+brier``. It also prints each reward's best response per p against a pool of others
that already rank by p (exact in the completion's own verdict, Monte Carlo over the others).

    python scripts/incentive_bandit.py                      # every task, 3 seeds
    python scripts/incentive_bandit.py --tasks tiers --seeds 3 --std-norm
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rlsr import rewards as R  # noqa: E402

LEVELS = np.round(np.linspace(0.0, 1.0, 11), 1)
TASKS = {
    "wide": np.round(np.linspace(0.05, 0.95, 10), 2),  # p on both sides of 1/2
    "tiers": np.array([0.6, 0.7, 0.8, 0.9, 1.0]),  # every p above 1/2 (the toy's tiers)
    "fine": np.array([0.80, 0.84, 0.88, 0.92, 0.96]),  # finer than the 0.1 confidence grid
}


def pool_rewards(name: str, correct: np.ndarray, conf: np.ndarray) -> np.ndarray:
    if name == "lifted":
        return R.lifted_aurc_rewards(correct, conf)
    if name == "plain":
        return R.lifted_aurc_rewards(correct, conf, correct_scale=0.0)
    if name == "brier":
        return R.correctness_reward(correct) + R.brier_reward(correct, conf)
    if name == "marginal":
        return R.marginal_aurc_rewards(correct, conf)
    if name == "lifted+brier":
        return R.lifted_aurc_rewards(correct, conf) + R.brier_reward(correct, conf)
    raise ValueError(f"unknown reward {name!r}")


REWARDS = ("lifted", "plain", "brier", "marginal", "lifted+brier")


def heldout_aurc(conf: np.ndarray, error: np.ndarray) -> float:
    """AURC with ties averaged over orderings: mean(alpha * error) (rlsr.rewards.rank_weights)."""
    return float(np.mean(R.rank_weights(conf) * error))


def train(reward: str, p: np.ndarray, args, seed: int, std_norm: bool) -> np.ndarray:
    """REINFORCE on softmax logits (types x levels); returns the trained logits."""
    rng = np.random.default_rng(seed)
    logits = np.zeros((len(p), len(LEVELS)))
    B, G = args.pool // args.group, args.group
    for _ in range(args.steps):
        types = np.repeat(rng.integers(0, len(p), B), G)
        probs = np.exp(logits[types] - logits[types].max(axis=1, keepdims=True))
        probs /= probs.sum(axis=1, keepdims=True)
        level = (probs.cumsum(axis=1) > rng.random((len(types), 1))).argmax(axis=1)
        correct = rng.random(len(types)) < p[types]
        r = pool_rewards(reward, correct, LEVELS[level]).reshape(B, G)
        adv = r - r.mean(axis=1, keepdims=True)
        if std_norm:  # TRL scale_rewards=group
            adv = adv / (r.std(axis=1, ddof=1, keepdims=True) + 1e-4)
        grad = -probs
        grad[np.arange(len(types)), level] += 1.0
        update = np.zeros_like(logits)
        np.add.at(update, types, grad * adv.reshape(-1, 1))
        logits += args.lr * update / len(types)
    return logits


def evaluate(logits: np.ndarray, p: np.ndarray, rng, n: int = 20000) -> dict[str, float]:
    types = rng.integers(0, len(p), n)
    error = (rng.random(n) >= p[types]).astype(float)
    greedy = LEVELS[logits.argmax(axis=1)]
    return {
        "aurc": heldout_aurc(greedy[types], error),
        "oracle": heldout_aurc(p[types], error),
        "two_level": heldout_aurc((p[types] > 0.5).astype(float), error),
        "greedy": greedy,
    }


def best_response(reward: str, p: np.ndarray, rng, pools: int = 100, pool: int = 64) -> list:
    """Per p: the level maximising (``any`` when all are equal) the expected reward of one completion inserted into a pool
    of ``pool - 1`` others whose confidence is their p rounded to the grid (they rank by p)."""
    out = []
    for p_self in p:
        totals = np.zeros(len(LEVELS))
        for _ in range(pools):
            types = rng.integers(0, len(p), pool - 1)
            conf = np.round(p[types], 1)
            correct = rng.random(pool - 1) < p[types]
            for k, level in enumerate(LEVELS):
                c = np.append(conf, level)
                right = pool_rewards(reward, np.append(correct, True), c)[-1]
                wrong = pool_rewards(reward, np.append(correct, False), c)[-1]
                totals[k] += p_self * right + (1 - p_self) * wrong
        best = np.flatnonzero(totals >= totals.max() - 1e-9 * pools)
        out.append("any" if len(best) == len(LEVELS) else f"{LEVELS[best[0]]:.1f}")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", default=",".join(TASKS))
    ap.add_argument("--rewards", default=",".join(REWARDS))
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--pool", type=int, default=256, help="N = B x G completions per step")
    ap.add_argument("--group", type=int, default=8, help="G completions per item")
    ap.add_argument("--lr", type=float, default=20.0)
    ap.add_argument("--std-norm", action="store_true", help="also train with scale_rewards=group")
    args = ap.parse_args(argv)
    print(f"pool N={args.pool} (G={args.group}), {args.steps} steps, lr {args.lr}, "
          f"{args.seeds} seeds; held-out AURC mean +- std (lower is better)\n")  # fmt: skip
    for task in args.tasks.split(","):
        p = TASKS[task]
        print(f"### task {task}: p = {', '.join(f'{x:g}' for x in p)}\n")
        print("| reward | scaling | held-out AURC | oracle | two-level | best response per p | "
              "greedy confidence per p (seed 0) |")  # fmt: skip
        print("| --- | --- | ---: | ---: | ---: | --- | --- |")
        for reward in args.rewards.split(","):
            for std_norm in (False, True) if args.std_norm else (False,):
                runs = []
                for seed in range(args.seeds):
                    logits = train(reward, p, args, seed, std_norm)
                    runs.append(evaluate(logits, p, np.random.default_rng(1000 + seed)))
                aurc = np.array([r["aurc"] for r in runs])
                br = best_response(reward, p, np.random.default_rng(7))
                print(f"| {reward} | {'group std' if std_norm else 'none'} | "
                      f"{aurc.mean():.3f} +- {aurc.std():.3f} | "
                      f"{np.mean([r['oracle'] for r in runs]):.3f} | "
                      f"{np.mean([r['two_level'] for r in runs]):.3f} | "
                      f"{' '.join(br)} | "
                      f"{' '.join(f'{x:.1f}' for x in runs[0]['greedy'])} |")  # fmt: skip
        print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

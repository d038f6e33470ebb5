#!/usr/bin/env python
"""What each pooled reward teaches a single completion: a confidence bandit (docs/methods.md).

Items come in types with a fixed chance p of being answered right. A policy picks one of 11
verbalized confidences 0.0, 0.1, ..., 1.0 per type (a softmax per type), and is trained by
REINFORCE with GRPO's group-mean baseline (``scale_rewards: none``): every step draws B item
types, G completions each, one pool of N = B x G; every reward below is computed over the whole
pool with ``rlsr.equations.rewards``, as the trainer does. Then, on held-out draws, AURC of the greedy
confidences (ties averaged) against two references: ranking by p (the oracle) and the best
two-level ranking (1 if p > 1/2 else 0: what a threshold rule can express).

Rewards: ``lifted`` (RLSR's released reward, lambda = 1), ``plain`` (lambda = 0), ``brier``
(RLCR's 1 - (correct - c)^2 plus correctness), ``marginal`` (ours: ``marginal_aurc_rewards``),
``lifted+brier``. It also prints each reward's best response per p: the set of confidences that
maximise the expected GRPO advantage (with the run's scaling) of one completion against a pool
of others that already rank by p (``best_response``). ``--check`` asserts what
docs/methods.md claims of those best responses (``check_claims``; run by
tests/test_rewards.py) and exits 1 when a claim fails.

    python scripts/incentive_bandit.py                      # every task, 3 seeds
    python scripts/incentive_bandit.py --tasks tiers --seeds 3 --std-norm
    python scripts/incentive_bandit.py --check              # ~15 s
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rlsr.equations import rewards as R  # noqa: E402

LEVELS = np.round(np.linspace(0.0, 1.0, 11), 1)
TASKS = {
    "wide": np.round(np.linspace(0.05, 0.95, 10), 2),  # p on both sides of 1/2
    "tiers": np.array([0.6, 0.7, 0.8, 0.9, 1.0]),  # every p above 1/2 (the toy's tiers)
    "fine": np.array([0.80, 0.84, 0.88, 0.92, 0.96]),  # finer than the 0.1 confidence grid
    # recipe=tiny-candidates's tiers (1, 2, 4 candidates listed, none: tools.tiny.data): two on
    # each side of 1/2, so the threshold rule ties each pair that calibration separates.
    "candidates": np.array([1.0, 0.7, 0.3, 0.125]),
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
    """AURC with ties averaged over orderings: mean(alpha * error) (rlsr.equations.rewards.rank_weights)."""
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


def best_response(
    reward: str,
    p: np.ndarray,
    rng,
    *,
    std_norm: bool,
    group: int = 8,
    pools: int = 200,
    pool: int = 64,
) -> list[np.ndarray]:
    """Per p: the set of levels that maximise the expected GRPO *advantage* of one completion.

    The completion (right with probability p) sits in a group of ``group`` completions of its own
    item type, whose other members answer at their type's p rounded to the grid, in a pool of
    ``pool`` completions whose other items are drawn at random and also answer at their p rounded
    to the grid (the pool already ranks by p). Its advantage is its reward minus its group's mean
    (divided by the group's std + 1e-4 with ``std_norm``, as ``train`` does): the quantity the
    update follows, so the group mates' rewards, which move with its rank, count too. Exact in
    the completion's own verdict, Monte Carlo over everyone else with the same draws for every
    level (common random numbers). The set holds every level whose expected advantage is within
    two paired standard errors of the best one's (levels that buy the same place, e.g. all
    levels below everyone, tie exactly)."""
    out = []
    for p_self in p:
        adv = np.zeros((pools, len(LEVELS)))
        for t in range(pools):
            types = rng.integers(0, len(p), pool - group)
            p_rest = np.concatenate((np.full(group - 1, p_self), p[types]))
            conf = np.round(p_rest, 1)
            correct = rng.random(pool - 1) < p_rest
            for k, level in enumerate(LEVELS):
                c = np.append(conf, level)
                e = 0.0
                for own, weight in ((True, p_self), (False, 1.0 - p_self)):
                    r = pool_rewards(reward, np.append(correct, own), c)
                    g = r[-group:]  # the completion's group: its G - 1 mates and itself
                    a = r[-1] - g.mean()
                    if std_norm:
                        a /= g.std(ddof=1) + 1e-4
                    e += weight * a
                adv[t, k] = e
        mean = adv.mean(axis=0)
        best = int(np.argmax(mean))
        diff = adv[:, best : best + 1] - adv
        se = diff.std(axis=0, ddof=1) / np.sqrt(pools)
        out.append(LEVELS[(mean >= mean[best] - 1e-12) | (diff.mean(axis=0) <= 2 * se)])
    return out


def format_set(levels: np.ndarray) -> str:
    """``1.0`` for one level, ``{0.0-0.6}`` for a run of the grid, else ``{0.2,0.5}``."""
    if len(levels) == 1:
        return f"{levels[0]:.1f}"
    if len(levels) == len(LEVELS):
        return "any"
    idx = np.round(levels * 10).astype(int)
    if np.all(np.diff(idx) == 1):
        return f"{{{levels[0]:.1f}-{levels[-1]:.1f}}}"
    return "{" + ",".join(f"{x:.1f}" for x in levels) + "}"


def check_claims(rng_seed: int = 7) -> list[str]:
    """What docs/methods.md ("What each reward teaches") claims of each best response, asserted
    on the bandit's own exact-in-own-verdict computation. Returns the failed claims (empty: all
    hold). Claims:
      lifted (lambda = 1), no std scaling: a threshold at 1/(1 + lambda) = 1/2 (top above it,
        bottom below it, never both);
      plain (lambda = 0): the bottom for every p < 1;
      marginal, no std scaling: the set never moves down as p grows, and it orders (the lowest
        p's set lies strictly below the highest p's);
      marginal with group std scaling (what it really does on tiers): every p's best response
        lies in the top two levels {0.9, 1.0}, so the scaled update pushes every tier to the
        top instead of ordering them (the std depends on the completion's own verdict and rank);
      on recipe=tiny-candidates's tiers (p = 1, 0.7, 0.3, 0.125), no std scaling: lifted's best
        response is the top for the two tiers above 1/2 and the bottom for the two below (each
        pair tied), brier's is one level per tier, strictly increasing in p (they differ).
    """
    failed = []
    wide, tiers = TASKS["wide"], TASKS["tiers"]

    def br(reward, p, std_norm=False):
        return best_response(reward, p, np.random.default_rng(rng_seed), std_norm=std_norm)

    for p_self, levels in zip(wide, br("lifted", wide), strict=True):
        top, bottom = 1.0 in levels, 0.0 in levels
        if (p_self > 0.5 and not (top and not bottom)) or (
            p_self < 0.5 and not (bottom and not top)
        ):
            failed.append(f"lifted: p={p_self:g} best {format_set(levels)}, want threshold at 1/2")
    for p_self, levels in zip(wide, br("plain", wide), strict=True):
        if 0.0 not in levels:
            failed.append(f"plain: p={p_self:g} best {format_set(levels)}, want the bottom")
    for task, p in (("wide", wide), ("tiers", tiers)):
        sets = br("marginal", p)
        lo = [levels.min() for levels in sets]
        hi = [levels.max() for levels in sets]
        if np.any(np.diff(lo) < 0) or np.any(np.diff(hi) < 0) or not hi[0] < lo[-1]:
            failed.append(
                f"marginal on {task}: best responses {' '.join(map(format_set, sets))} are not "
                "monotone in p or do not order"
            )
    candidates = TASKS["candidates"]
    lifted_sets = br("lifted", candidates)
    if not all(
        levels.tolist() == ([1.0] if p_self > 0.5 else [0.0])
        for p_self, levels in zip(candidates, lifted_sets, strict=True)
    ):
        failed.append(
            f"lifted on candidates: best responses {' '.join(map(format_set, lifted_sets))}; want "
            "1.0 1.0 0.0 0.0 (a threshold at 1/2)"
        )
    brier_sets = br("brier", candidates)
    if not all(len(levels) == 1 for levels in brier_sets) or np.any(
        np.diff([levels[0] for levels in brier_sets]) >= 0
    ):
        failed.append(
            f"brier on candidates: best responses {' '.join(map(format_set, brier_sets))}; want one "
            "level per tier, decreasing with p's order 1, 0.7, 0.3, 0.125"
        )
    sets = br("marginal", tiers, std_norm=True)
    if not all(levels.min() >= 0.9 for levels in sets):
        failed.append(
            f"marginal, group std, tiers: {' '.join(map(format_set, sets))}; every best response "
            "was expected in {0.9, 1.0}"
        )
    return failed


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
    ap.add_argument(
        "--check", action="store_true",
        help="assert the best-response claims of docs/methods.md and exit 1 if one fails",
    )  # fmt: skip
    args = ap.parse_args(argv)
    if args.check:
        failed = check_claims()
        for line in failed:
            print(f"FAIL {line}")
        print("all best-response claims hold" if not failed else f"{len(failed)} claim(s) failed")
        return 1 if failed else 0
    print(f"pool N={args.pool} (G={args.group}), {args.steps} steps, lr {args.lr}, "
          f"{args.seeds} seeds; held-out AURC mean +- std (lower is better)\n")  # fmt: skip
    for task in args.tasks.split(","):
        p = TASKS[task]
        print(f"### task {task}: p = {', '.join(f'{x:g}' for x in p)}\n")
        print("| reward | scaling | held-out AURC | oracle | two-level | best response per p (advantage) | "
              "greedy confidence per p (seed 0) |")  # fmt: skip
        print("| --- | --- | ---: | ---: | ---: | --- | --- |")
        for reward in args.rewards.split(","):
            for std_norm in (False, True) if args.std_norm else (False,):
                runs = []
                for seed in range(args.seeds):
                    logits = train(reward, p, args, seed, std_norm)
                    runs.append(evaluate(logits, p, np.random.default_rng(1000 + seed)))
                aurc = np.array([r["aurc"] for r in runs])
                br = best_response(reward, p, np.random.default_rng(7), std_norm=std_norm)
                print(f"| {reward} | {'group std' if std_norm else 'none'} | "
                      f"{aurc.mean():.3f} +- {aurc.std():.3f} | "
                      f"{np.mean([r['oracle'] for r in runs]):.3f} | "
                      f"{np.mean([r['two_level'] for r in runs]):.3f} | "
                      f"{' '.join(map(format_set, br))} | "
                      f"{' '.join(f'{x:.1f}' for x in runs[0]['greedy'])} |")  # fmt: skip
        print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

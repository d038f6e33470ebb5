"""Time every metric in rlsr.metrics.selective at n = 10^6 beside one stable np.argsort of the same array.

The rank metrics are sort-bound: the floor is one stable argsort of the confidences. Target:
each metric within 3x of that argsort (measured in the same run, best of ``--repeats``).

    .venv/bin/python benchmarks/bench_metrics.py [--n 1000000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from rlsr.metrics import selective as M


def best_time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    n, r = args.n, args.repeats
    rng = np.random.default_rng(0)
    continuous = rng.random(n)
    verbalised = np.round(continuous, 2)  # 101 distinct values: large tie groups
    correct = rng.random(n) < continuous
    answered = rng.random(n) < 0.8
    answerable = rng.random(n) < 0.5
    costs = rng.gamma(2.0, 1.5, n)
    probs = rng.dirichlet(np.ones(5), n)
    ll = np.log(probs)
    gold = rng.integers(0, 4, n)
    scaler = M.temperature_scale(verbalised, correct)

    for label, conf in (
        ("continuous (all distinct)", continuous),
        ("verbalised (2 dp)", verbalised),
    ):
        base = best_time(lambda conf=conf: np.argsort(conf, kind="stable"), r)
        cases = {  # each takes the confidence array
            "aurc": lambda conf: M.aurc(conf, correct),
            "excess_aurc": lambda conf: M.excess_aurc(conf, correct),
            "normalized_excess_aurc": lambda conf: M.normalized_excess_aurc(conf, correct),
            "augrc": lambda conf: M.augrc(conf, correct),
            "risk_coverage_curve": lambda conf: M.risk_coverage_curve(conf, correct),
            "accuracy_at_coverage(0.1)": lambda conf: M.accuracy_at_coverage(conf, correct, 0.1),
            "ece": lambda conf: M.ece(conf, correct),
            "ece(equal_mass)": lambda conf: M.ece(conf, correct, binning="equal_mass"),
            "brier": lambda conf: M.brier(conf, correct),
            "auroc": lambda conf: M.auroc(conf, correct),
            "confidence_gap": lambda conf: M.confidence_gap(conf, correct),
            "select_threshold(plain)": lambda conf: M.select_threshold(conf, correct, 0.75),
            "select_threshold(clopper_pearson)": lambda conf: M.select_threshold(
                conf, correct, 0.75, method="clopper_pearson"
            ),
            "apply_threshold": lambda conf: M.apply_threshold(conf, correct, 0.8),
            "apply_temperature": lambda conf: scaler(conf),
            "temperature_scale (fit, iterative)": lambda conf: M.temperature_scale(conf, correct),
            "utility_auc": lambda conf: M.utility_auc(conf, answered, correct, answerable, costs),
        }
        print(f"\n## {label}, n = {n:,}: stable argsort {base * 1e3:.1f} ms (best of {r})")
        print(f"{'metric':38s} {'ms':>9s} {'x argsort':>10s}")
        for name, fn in cases.items():
            t = best_time(lambda fn=fn, conf=conf: fn(conf), r)
            flag = "" if t <= 3 * base else "  > 3x"
            print(f"{name:38s} {t * 1e3:9.1f} {t / base:10.2f}{flag}")

    base = best_time(lambda: np.argsort(continuous, kind="stable"), r)
    t_ll = best_time(lambda: M.dcs_from_log_likelihoods(ll, gold, 4), r)
    pc, pw, pk = M.dcs_from_log_likelihoods(ll, gold, 4)
    t_dcs = best_time(lambda: M.dcs(pc, pw, pk), r)
    print(f"\n## DCS, n = {n:,} x 5 options (no sort involved; ratio vs the same argsort)")
    print(f"{'dcs_from_log_likelihoods':38s} {t_ll * 1e3:9.1f} {t_ll / base:10.2f}")
    print(f"{'dcs':38s} {t_dcs * 1e3:9.1f} {t_dcs / base:10.2f}")


if __name__ == "__main__":
    main()

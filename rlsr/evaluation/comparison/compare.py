"""``rlsr compare``: methods across training seeds, with confidence intervals over seeds
(docs/compare.md).

For every held-out dataset, at the first and the last step that every run evaluated, each
run's AURC, ranking gain (error rate - AURC), ECE and accuracy are recomputed from its
``samples.jsonl`` (the primary scorer's confidence, missing = 0.0, as in ``metrics.json``). Per
method: each seed's value, their mean and interval over seeds (``seed_statistics``). Per pair A,
B: the paired difference A - B on shared seeds, its interval, the exact paired permutation test,
its Holm-adjusted p-value and the verdict. Runs are found and checked by ``compare_runs``.
"""

from __future__ import annotations

import itertools
import json
import math
import os
from pathlib import Path

import numpy as np

from rlsr.evaluation.comparison import seed_statistics as S
from rlsr.evaluation.comparison.compare_runs import (
    CONFIG_FILE,
    Evaluation,
    Run,
    check_comparable,
    find_runs,
)
from rlsr.evaluation.comparison.compare_settings import (
    COMPARE_JSON,
    COMPARE_MD,
    COMPARE_PNG,
    Statistics,
)
from rlsr.evaluation.reports.plots import pyplot
from rlsr.evaluation.run.samples_io import json_safe
from rlsr.metrics import selective as M
from rlsr.run.run_layout import SAMPLES_FILE

__all__ = [
    "COMPARE_JSON",
    "COMPARE_MD",
    "COMPARE_PNG",
    "METRICS",
    "MIN_SEEDS",
    "SCHEMA_VERSION",
    "VALUE_BOUNDS",
    "Statistics",
    "add_verdicts",
    "check_margin",
    "paired_differences",
    "paired_summary",
    "seed_summary",
    "compare_runs",
    "render_markdown",
    "write_comparison",
]

SCHEMA_VERSION = 2
MIN_SEEDS = 3  # fewer seeds per method: said in the output (the CI of 2 seeds is barely one)
# (key, heading, better): the columns of every table
METRICS = (
    ("aurc", "AURC", "lower"),
    ("ranking_gain", "ranking gain", "higher"),
    ("ece", "ECE", "lower"),
    ("accuracy", "accuracy", "higher"),
)
# training config keys expected to differ between the runs of one method
_PER_RUN_KEYS = {"seed", "output_dir"}
# how a run was continued, not a choice about the arm: left out of the arms' comparison
_HOW_RUN_KEYS = {"resume"}
# the range each metric's value can take (a difference: [lo - hi, hi - lo]), for the interval of
# seeds without spread and the check of --margin
VALUE_BOUNDS = {
    "aurc": (0.0, 1.0),
    # error rate - AURC: with j correct of n, the best order gives (j/n)(H_n - H_j) <= (j/n)
    # ln(n/j) <= 1/e, the worst -(m/n)(H_n - H_m) >= -1/e (m wrong); ties average orders
    "ranking_gain": (-1.0 / math.e, 1.0 / math.e),
    "ece": (0.0, 1.0),
    "accuracy": (0.0, 1.0),
    "aurc_drop": (-1.0, 1.0),
}


def check_margin(margin: float | None, keys) -> None:
    """Refuse a margin that is not a positive number below the range of every compared metric."""
    if margin is None:
        return
    width = min(VALUE_BOUNDS[k][1] - VALUE_BOUNDS[k][0] for k in keys)
    if not (math.isfinite(margin) and 0.0 < margin < width):
        raise ValueError(
            f"--margin {margin}: the margin of equivalence is a positive difference in the "
            f"metric's units, below {width:.3f} (the narrowest range of the metrics compared); "
            "e.g. --margin 0.02 says 'equivalent' only when the whole interval lies within "
            "±0.02."
        )


def _bounds(key: str, difference: bool) -> tuple[float, float]:
    lo, hi = VALUE_BOUNDS.get(key, (-1.0, 1.0))
    return (lo - hi, hi - lo) if difference else (lo, hi)


def _metrics_of(conf: np.ndarray, ok: np.ndarray) -> dict[str, float]:
    """The four ``METRICS`` of one set of answers (or a resample of its questions)."""
    aurc = M.aurc(conf, ok)
    accuracy = float(np.mean(ok))
    return {
        "aurc": aurc,
        "ranking_gain": M.ranking_gain_from_aurc(aurc, 1.0 - accuracy),
        "ece": M.ece(conf, ok),
        "accuracy": accuracy,
    }


def _evaluation_metrics(evaluation: Evaluation) -> dict[str, float]:
    return _metrics_of(evaluation.confidence, evaluation.correct)


def seed_summary(
    per_seed: dict[int, dict[str, float]],
    stats: Statistics = Statistics(),
    keys=None,
    *,
    difference: bool = False,
    draws: dict[str, np.ndarray] | None = None,
) -> dict:
    """``{"seeds": {seed: {metric: v}}, "mean": {metric: v}, "ci95": {metric: [lo, hi]},
    "n": {metric: seeds used}, "excluded": {metric: [seeds]}}`` of one method (or, with
    ``difference``, one paired difference) over seeds. Per metric in ``keys`` (default:
    ``METRICS``), NaN seeds left out: ``seed_statistics.seed_interval``, or with ``draws`` (per
    metric: resamples x seeds, in sorted order) ``resampled_seed_interval``."""
    keys = [k for k, _, _ in METRICS] if keys is None else list(keys)
    seeds = sorted(per_seed)
    out = {"seeds": {str(s): per_seed[s] for s in seeds}, "mean": {}, "ci95": {}, "n": {}}
    out["excluded"] = {}
    for key in keys:
        used = [i for i, s in enumerate(seeds) if not math.isnan(per_seed[s][key])]
        values = [per_seed[seeds[i]][key] for i in used]
        bounds = _bounds(key, difference)
        est = S.seed_interval(values, bounds, stats.level)
        if draws is not None and len(used) >= 2:
            est = S.resampled_seed_interval(
                draws[key][:, used], values, bounds, stats.seed, stats.level
            )
        out["mean"][key] = est.estimate
        out["ci95"][key] = [est.low, est.high]
        out["n"][key] = len(used)
        if len(used) < len(seeds):
            out["excluded"][key] = [s for i, s in enumerate(seeds) if i not in used]
    return out


def paired_summary(
    diffs: dict[int, dict[str, float]],
    stats: Statistics = Statistics(),
    keys=None,
    draws: dict[str, np.ndarray] | None = None,
) -> dict:
    """``seed_summary`` of the paired differences A - B (``paired_differences``) plus, per
    metric, the exact paired permutation test (``p_value``, ``test``, ``n_zero``)."""
    keys = [k for k, _, _ in METRICS] if keys is None else list(keys)
    out = seed_summary(diffs, stats, keys, difference=True, draws=draws)
    out["p_value"], out["n_zero"], out["test"] = {}, {}, {}
    for key in keys:
        values = [v[key] for v in diffs.values() if not math.isnan(v[key])]
        test = S.paired_permutation_test(values, seed=stats.seed)
        out["p_value"][key] = test.p_value if values else math.nan
        out["n_zero"][key] = test.n_zero
        out["test"][key] = S.PERMUTATION_TEST + ("" if test.exact else ", Monte Carlo")
    return out


def add_verdicts(entries: list[tuple[str, str, dict]], metrics, margin: float | None) -> int:
    """Holm-adjust the p-values of every test with at least 2 seeds among ``entries`` (A, B,
    ``paired_summary``) x ``metrics`` (key, heading, better), and write each pair's
    ``p_adjusted`` and ``verdict``; returns the family's size."""
    family = [
        (entry, key) for _, _, entry in entries for key, _, _ in metrics if entry["n"][key] >= 2
    ]
    adjusted = S.holm([entry["p_value"][key] for entry, key in family])
    for (entry, key), p in zip(family, adjusted, strict=True):
        entry.setdefault("p_adjusted", {})[key] = p
    for a, b, entry in entries:
        entry.setdefault("p_adjusted", {})
        entry["verdict"] = {}
        for key, _, better in metrics:
            entry["p_adjusted"].setdefault(key, math.nan)
            interval = S.Interval(entry["mean"][key], *entry["ci95"][key])
            entry["verdict"][key] = (
                S.verdict(interval, entry["p_adjusted"][key], better, a, b, margin)
                if entry["n"][key] > 0
                else "n/a (no seed)"
            )
        entry["family_size"] = len(family)
    return len(family)


def paired_differences(
    a: dict[int, dict[str, float]], b: dict[int, dict[str, float]], keys=None
) -> dict[int, dict[str, float]]:
    """Per seed both hold, ``a[seed][k] - b[seed][k]`` for every k in ``keys`` (default:
    ``METRICS``)."""
    keys = [k for k, _, _ in METRICS] if keys is None else list(keys)
    return {s: {k: a[s][k] - b[s][k] for k in keys} for s in sorted(set(a) & set(b))}


def _flatten(config: dict, prefix: str = "") -> dict[str, object]:
    out = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_flatten(value, name + "."))
        else:
            out[name] = value
    return out


def _config_differences(runs: list[Run]) -> list[str]:
    """Dotted training-config keys (seed and output_dir left out) whose values differ between
    the runs of one method: noted, not refused (the reader judges them)."""
    flat = [_flatten(r.config) for r in runs]
    keys = sorted(set().union(*flat) - _PER_RUN_KEYS)
    missing = object()
    return [k for k in keys if len({json.dumps(f.get(k, missing), default=str) for f in flat}) > 1]


def _curve(runs: list[Run], dataset: str) -> list[dict]:
    """Ranking gain against step for one method: mean, lowest and highest over seeds."""
    steps = sorted(set.intersection(*(set(r.steps(dataset)) for r in runs)))
    points = []
    for step in steps:
        gains = [_evaluation_metrics(r.at(dataset, step))["ranking_gain"] for r in runs]
        points.append(
            {"step": step, "mean": float(np.mean(gains)), "min": min(gains), "max": max(gains)}
        )
    return points


def _question_draws(runs: list[Run], dataset: str, step: int, stats: Statistics):
    """Per (method, seed), per metric: the values on ``stats.n_resamples`` resamples of the
    question clusters (distinct question texts), one resample for every run (matched by id)."""
    ref = runs[0].at(dataset, step)
    ids = sorted(ref.ids)
    prompt_of = dict(zip(ref.ids, ref.prompts, strict=True))
    draws = S.cluster_draws([prompt_of[i] for i in ids], stats.n_resamples, stats.seed)
    out = {}
    for r in runs:
        e = r.at(dataset, step)
        position = {q: k for k, q in enumerate(e.ids)}
        order = np.array([position[q] for q in ids])
        conf, ok = e.confidence[order], e.correct[order]
        rows = [_metrics_of(conf[d], ok[d]) for d in draws]
        out[(r.method, r.seed)] = {k: np.array([row[k] for row in rows]) for k in rows[0]}
    return out


def _stacked(draws, method: str, seeds, key: str) -> np.ndarray:
    return np.stack([draws[(method, s)][key] for s in seeds], axis=1)


def _nan_notes(dataset: str, step: int, what: str, summary: dict, path_of) -> list[str]:
    """One caveat per metric with seeds left out for a NaN value, naming the runs."""
    notes = []
    for key, seeds in summary.get("excluded", {}).items():
        runs = "; ".join(f"seed {s}: {path_of(s)}" for s in seeds)
        notes.append(
            f"{dataset} step {step}: {what}: {key} is NaN for {len(seeds)} seed(s) ({runs}); "
            f"left out, {summary['n'][key]} of {len(summary['seeds'])} seeds used."
        )
    return notes


def _dataset_block(
    runs: list[Run], dataset: str, methods: list[str], pairs, stats: Statistics
) -> tuple[dict, list[str]]:
    shared = sorted(set.intersection(*(set(r.steps(dataset)) for r in runs)))
    if not shared:
        steps = "; ".join(f"{r.path}: {r.steps(dataset)}" for r in runs)
        raise ValueError(
            f"no step of {dataset} was evaluated by every run ({steps}); compare runs evaluated "
            "at a common step."
        )
    first, last = shared[0], shared[-1]
    notes = []
    beyond = [r for r in runs if r.steps(dataset)[-1] > last]
    if beyond:
        notes.append(
            f"{dataset}: compared at step {last}, the last step every run evaluated; "
            + ", ".join(f"{r.path} reached step {r.steps(dataset)[-1]}" for r in beyond)
        )
    values = {  # (method, seed) -> {step: metrics}
        (r.method, r.seed): {s: _evaluation_metrics(r.at(dataset, s)) for s in (first, last)}
        for r in runs
    }
    draws = {
        step: _question_draws(runs, dataset, step, stats) if stats.questions else None
        for step in (first, last)
    }
    path = {(r.method, r.seed): r.path for r in runs}
    keys = [k for k, _, _ in METRICS]

    def summary(method, seeds, step):
        d = draws[step]
        stacked = None if d is None else {k: _stacked(d, method, seeds, k) for k in keys}
        out = seed_summary({s: values[(method, s)][step] for s in seeds}, stats, draws=stacked)
        notes.extend(_nan_notes(dataset, step, method, out, lambda s: path[(method, s)]))
        return {"step": step, **out}

    block: dict = {"first_step": first, "last_step": last, "methods": {}, "pairs": []}
    for method in methods:
        mine = [r for r in runs if r.method == method]
        seeds = sorted(r.seed for r in mine)
        at_last = mine[0].at(dataset, last)
        block["methods"][method] = {
            **summary(method, seeds, last),
            "first": summary(method, seeds, first),
            "n_questions": len(at_last.correct),
            "n_clusters": len(set(at_last.prompts)),
            "runs": {str(r.seed): str(r.path) for r in mine},
            "curve": _curve(mine, dataset),
        }
    for a, b in pairs:
        seeds_a = {r.seed for r in runs if r.method == a}
        shared_seeds = sorted(seeds_a & {r.seed for r in runs if r.method == b})
        pair = {"a": a, "b": b, "difference": f"{a} - {b}", "shared_seeds": shared_seeds}
        if not shared_seeds:
            notes.append(f"{dataset}: {a} and {b} share no seed; no paired difference.")
            block["pairs"].append(pair)
            continue
        for label, step in (("last", last), ("first", first)):
            diffs = paired_differences(
                {s: values[(a, s)][step] for s in shared_seeds},
                {s: values[(b, s)][step] for s in shared_seeds},
            )
            d = draws[step]
            stacked = (
                None
                if d is None
                else {
                    k: _stacked(d, a, shared_seeds, k) - _stacked(d, b, shared_seeds, k)
                    for k in keys
                }
            )
            pair[label] = {"step": step, **paired_summary(diffs, stats, draws=stacked)}
            culprit = {s: f"{path[(a, s)]} or {path[(b, s)]}" for s in shared_seeds}
            notes.extend(_nan_notes(dataset, step, f"{a} - {b}", pair[label], culprit.__getitem__))
        block["pairs"].append(pair)
    return block, notes


def _arm_differences(runs: list[Run], methods: list[str]) -> list[str]:
    """Config keys outside the ``method`` section (seed, output_dir, resume left out) on which the
    arms differ, with every arm's values: choices assumed made alike for every arm."""
    flat = {m: [_flatten(r.config) for r in runs if r.method == m] for m in methods}
    keys = sorted(set().union(*(f.keys() for fs in flat.values() for f in fs)) - _PER_RUN_KEYS)

    def shown(f: dict, key: str) -> str:
        return json.dumps(f[key], default=str) if key in f else "unset"

    out = []
    for key in keys:
        if key.startswith("method.") or key in _HOW_RUN_KEYS:
            continue
        per_arm = {m: sorted({shown(f, key) for f in fs}) for m, fs in flat.items()}
        if len({tuple(v) for v in per_arm.values()}) > 1:
            values = "; ".join(f"{m}: {', '.join(vs)}" for m, vs in per_arm.items())
            out.append(f"{key} ({values})")
    return out


def compare_runs(
    paths: list[str],
    *,
    use: str | None = None,
    reference: str | None = None,
    stats: Statistics = Statistics(),
) -> dict:
    """The ``compare.json`` object of the runs under ``paths``. ``use``: which evaluations
    (``find_runs``). Pairs: ``reference - M`` for every other method M, else every ``A - B`` with
    A before B by name."""
    check_margin(stats.margin, [k for k, _, _ in METRICS])
    runs, notes = find_runs(paths, use)
    check_comparable(runs)
    methods = sorted({r.method for r in runs})
    if reference is not None and reference not in methods:
        raise ValueError(
            f"--reference {reference!r}: no such method among the runs ({', '.join(methods)})."
        )
    pairs = (
        list(itertools.combinations(methods, 2))
        if reference is None
        else [(reference, m) for m in methods if m != reference]
    )
    for method in methods:
        seeds = sorted(r.seed for r in runs if r.method == method)
        if len(seeds) < MIN_SEEDS:
            ci = (
                "not defined"
                if len(seeds) == 1
                else "wide (a t-interval of 2 seeds: mean ± 12.7 s / √2)"
            )
            notes.append(
                f"{method} has {len(seeds)} seed{'s' if len(seeds) != 1 else ''} "
                f"({', '.join(map(str, seeds))}), fewer than {MIN_SEEDS}: its CI is {ci}; "
                "train more seeds."
            )
        differing = _config_differences([r for r in runs if r.method == method])
        if differing:
            notes.append(
                f"the runs of {method} differ in their recorded config ({CONFIG_FILE}) beyond "
                f"the seed: {', '.join(differing[:8])}"
                + (f" and {len(differing) - 8} more" if len(differing) > 8 else "")
            )
    arm_differences = _arm_differences(runs, methods)
    if arm_differences:
        notes.append(
            f"the arms differ in recorded settings ({CONFIG_FILE}) outside their method section: "
            + "; ".join(arm_differences[:8])
            + (f"; and {len(arm_differences) - 8} more" if len(arm_differences) > 8 else "")
            + ". The verdicts assume every such setting was chosen for each arm by the same "
            "procedure on validation data; check that it was."
        )
    datasets = {}
    for dataset in runs[0].datasets():
        datasets[dataset], more = _dataset_block(runs, dataset, methods, pairs, stats)
        notes += more
    for label in ("last", "first"):
        add_verdicts(
            [
                (p["a"], p["b"], p[label])
                for block in datasets.values()
                for p in block["pairs"]
                if label in p
            ],
            METRICS,
            stats.margin,
        )
    # after the other checks, so a refusal of mixed runs is not hidden behind this one
    seed_counts = {m: sum(r.method == m for r in runs) for m in methods}
    if max(seed_counts.values()) < 2:
        raise ValueError(
            "every method has one seed ("
            + ", ".join(f"{r.method}: seed {r.seed} in {r.path}" for r in runs)
            + "): a comparison across seeds needs at least 2 per method (3 for a CI worth the "
            "name); train the same recipe with more seeds (seed=N) and pass those runs too."
        )
    return {
        "schema_version": SCHEMA_VERSION,
        "evaluations": runs[0].kind,
        "statistics": {
            "metrics": f"recomputed from each evaluation's {SAMPLES_FILE} with rlsr.metrics.selective "
            "(aurc, ece; ranking_gain = error rate - AURC, ranking_gain_from_aurc; accuracy = "
            "mean correctness), the primary scorer's confidence, missing = 0.0",
            "ci95": "t-interval of the mean over seeds, mean +- t(n-1, 0.975) s / sqrt(n); "
            "seeds without spread: the Clopper-Pearson bound over the metric's range; where "
            "some but not all seeds are exactly 0, widened to hold the zero-split interval "
            "(Clopper-Pearson share of nonzero seeds x t-interval of the nonzero values); null "
            "with one seed"
            + (
                "; standard error from resampling seeds and question clusters (distinct "
                "question texts), sd of the resampled means x sqrt(n / (n - 1))"
                if stats.questions
                else ""
            ),
            "resample_questions": stats.questions,
            "n_resamples": stats.n_resamples if stats.questions else None,
            "seed": stats.seed,
            "level": stats.level,
            "pairs": "paired difference A - B per shared seed, then its mean and interval; "
            f"{S.PERMUTATION_TEST}, two-sided, zeros left out",
            "adjustment": "Holm over every (dataset, pair, metric) test at the same step "
            "(last, first)",
            "verdict": "'A better': the interval excludes 0 and Holm-adjusted p < 0.05; "
            "'equivalent within +-margin': the interval lies inside [-margin, margin]; "
            "'inconclusive' otherwise; 'n/a (one seed)' without an interval",
            "margin": stats.margin,
            "band": "compare.png: mean over seeds, band from the lowest to the highest seed",
        },
        "methods": methods,
        "protocol": {d: runs[0].at(d, datasets[d]["last_step"]).protocol for d in datasets},
        "datasets": datasets,
        "notes": notes,
    }


# --------------------------------------------------------------------------- rendering


def _num(value) -> str:
    """4 decimals; float noise of a zero (-1e-17) prints 0.0000, undefined prints n/a."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    return f"{round(value, 4) + 0.0:.4f}"


def _cell(summary: dict, key: str) -> str:
    lo, hi = summary["ci95"][key]
    ci = f" [{_num(lo)}, {_num(hi)}]" if _num(lo) != "n/a" else " [n/a]"
    return f"{_num(summary['mean'][key])}{ci}"


def _table(header: list[str], rows) -> list[str]:
    """A markdown table's lines and a blank line after it."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(map(str, row)) + " |" for row in rows] + [""]


def render_markdown(result: dict) -> str:
    """compare.md: per dataset, the methods at the last and first step, every seed's values,
    and the paired differences."""
    stats = result["statistics"]
    heads = [f"{h} ({'↓' if b == 'lower' else '↑'})" for _, h, b in METRICS]
    lines = [
        "# rlsr compare",
        "",
        f"Methods: {', '.join(result['methods'])}. Every value is recomputed from the "
        f"evaluation's {SAMPLES_FILE} (rlsr.metrics.selective). Cells: mean over seeds [95 % CI: "
        "t-interval of the mean over seeds, widened where some seeds are exactly 0"
        + (
            ", standard error also resampling question clusters"
            if stats["resample_questions"]
            else ""
        )
        + "]; [n/a]: one seed has no interval. Paired differences: exact paired permutation "
        "test (zeros left out), p Holm-adjusted over every pair and metric at that step; "
        "verdict 'better' only when the interval excludes 0 and the adjusted p < 0.05, "
        + (
            f"'equivalent within ±{stats['margin']:g}' when the interval lies inside the margin, "
            if stats["margin"] is not None
            else "never 'equivalent' (no --margin), "
        )
        + "else 'inconclusive'. Ranking gain = error rate − AURC "
        '(0: the confidence does not rank). docs/compare.md, "Compare methods across seeds".',
        "",
    ]
    if result["notes"]:
        lines += ["**Notes**", ""] + [f"- {n}" for n in result["notes"]] + [""]
    keys = [k for k, _, _ in METRICS]
    for dataset, block in result["datasets"].items():
        lines += [f"## {dataset}", ""]
        methods = block["methods"]
        for label in ("last", "first"):
            at = {m: e if label == "last" else e["first"] for m, e in methods.items()}
            lines += [f"### Methods at step {block[label + '_step']} ({label} evaluated step)", ""]
            lines += _table(
                ["method", "seeds", *heads],
                ([m, len(e["seeds"]), *(_cell(e, k) for k in keys)] for m, e in at.items()),
            )
        lines += ["### Every seed", ""]
        lines += _table(
            ["method", "seed", "step", *(h for _, h, _ in METRICS), "run"],
            (
                [m, seed, e["step"], *(_num(values[k]) for k in keys), entry["runs"][seed]]
                for m, entry in methods.items()
                for e in (entry["first"], entry)
                for seed, values in e["seeds"].items()
            ),
        )
        if block["pairs"]:
            tested = [
                (p, p[label]) for p in block["pairs"] for label in ("last", "first") if label in p
            ]
            lines += [
                f"### Paired differences A − B on shared seeds, step {block['last_step']} "
                f"(first: step {block['first_step']})",
                "",
            ]
            lines += _table(
                ["A − B", "shared seeds", "step", *heads],
                (
                    [
                        f"{p['a']} − {p['b']}",
                        ", ".join(map(str, p["shared_seeds"])) or "none",
                        e["step"],
                        *(_cell(e, k) for k in keys),
                    ]
                    for p, e in tested
                ),
            )
            lines += ["### Tests and verdicts", ""]
            lines += _table(
                [
                    "A − B",
                    "step",
                    "metric",
                    "seeds",
                    "zeros",
                    "mean [95 % CI]",
                    "p (exact)",
                    "p (Holm)",
                    "verdict",
                ],
                (
                    [
                        f"{p['a']} − {p['b']}",
                        e["step"],
                        head,
                        e["n"][k],
                        e["n_zero"][k],
                        _cell(e, k),
                        _num(e["p_value"][k]),
                        _num(e["p_adjusted"][k]),
                        e["verdict"][k],
                    ]
                    for p, e in tested
                    for k, head, _ in METRICS
                ),
            )
    return "\n".join(lines)


def _plot(result: dict, path: Path) -> None:
    from matplotlib.ticker import MaxNLocator

    plt = pyplot()

    datasets = list(result["datasets"])
    fig, axes = plt.subplots(1, len(datasets), figsize=(5.0 * len(datasets), 3.6), squeeze=False)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, dataset in zip(axes[0], datasets, strict=True):
        span = [0.0, 0.0]  # the y range: 0 and every band, padded (float noise stays flat)
        for k, (method, entry) in enumerate(result["datasets"][dataset]["methods"].items()):
            curve = entry["curve"]
            steps = [p["step"] for p in curve]
            span = [
                min(span[0], *(p["min"] for p in curve)),
                max(span[1], *(p["max"] for p in curve)),
            ]
            color = colors[k % len(colors)]
            n = len(entry["seeds"])
            label = f"{method} ({n} seed{'s' if n != 1 else ''})"
            ax.plot(steps, [p["mean"] for p in curve], marker="o", ms=3, color=color, label=label)
            ax.fill_between(steps, [p["min"] for p in curve], [p["max"] for p in curve],
                            color=color, alpha=0.2, linewidth=0)  # fmt: skip
        ax.axhline(0.0, color="black", lw=0.6)
        ax.set_ylim(span[0] - 0.02, span[1] + 0.02)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_title(f"{dataset}: held-out ranking gain")
        ax.set_xlabel("optimizer step")
        ax.set_ylabel("error rate − AURC (band: min–max over seeds)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120, format="png")
    plt.close(fig)


def write_comparison(result: dict, output_dir: str | os.PathLike) -> list[Path]:
    """Write compare.png, compare.md and compare.json into ``output_dir``: each to a temporary
    name, renamed into place once all three are rendered (a failure leaves none)."""
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    targets = [out / COMPARE_PNG, out / COMPARE_MD, out / COMPARE_JSON]  # JSON last
    temps = [t.with_name(f".{t.name}.tmp-{os.getpid()}") for t in targets]
    try:
        _plot(result, temps[0])
        temps[1].write_text(render_markdown(result) + "\n")
        temps[2].write_text(json.dumps(json_safe(result), indent=2) + "\n")
        for temp, target in zip(temps, targets, strict=True):
            os.replace(temp, target)
    finally:
        for temp in temps:
            temp.unlink(missing_ok=True)
    return targets

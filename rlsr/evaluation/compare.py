"""``rlsr compare``: methods across training seeds, with confidence intervals over seeds.

For every held-out dataset, at the first and the last step that every run evaluated, each
run's AURC, ranking gain (error rate - AURC), ECE and accuracy are recomputed from its
``samples.jsonl`` with ``rlsr.metrics`` (the primary scorer's confidence, a missing one counting
as 0.0, as in ``metrics.json``). Per method: the value of each seed, their mean and a 95 %
percentile bootstrap CI of the mean over seeds (``rlsr.metrics.bootstrap_mean_ci``, seeded).
Per pair of methods A, B: the paired difference A - B on the seeds both have, its mean and CI.

Writes ``OUT/compare.json``, ``OUT/compare.md`` and ``OUT/compare.png`` (ranking gain against
step, per method: the mean over seeds and a band from the lowest to the highest seed), each
rendered to a temporary file first and renamed into place at the end, so a refused or failed
comparison leaves no file that looks complete. Runs are found and checked by
``rlsr.evaluation.compare_runs`` (same datasets, protocol and data version, one run per
method and seed).
"""

from __future__ import annotations

import itertools
import json
import math
import os
from pathlib import Path

import numpy as np

from rlsr import metrics as M
from rlsr.evaluation.compare_runs import CONFIG_FILE, Evaluation, Run, check_comparable, find_runs
from rlsr.evaluation.compare_settings import COMPARE_JSON, COMPARE_MD, COMPARE_PNG, Bootstrap
from rlsr.evaluation.samples_io import json_safe
from rlsr.run_layout import SAMPLES_FILE

__all__ = [
    "COMPARE_JSON",
    "COMPARE_MD",
    "COMPARE_PNG",
    "METRICS",
    "MIN_SEEDS",
    "SCHEMA_VERSION",
    "Bootstrap",
    "evaluation_metrics",
    "paired_differences",
    "seed_summary",
    "compare_runs",
    "render_markdown",
    "write_comparison",
]

SCHEMA_VERSION = 1
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


def evaluation_metrics(evaluation: Evaluation) -> dict[str, float]:
    """AURC, ranking gain, ECE and accuracy of one evaluation, from its samples.jsonl
    (``rlsr.metrics``; the confidence of its primary scorer, missing = 0.0, read by
    ``rlsr.evaluation.summary.scorer_arrays`` as for metrics.json)."""
    conf, ok = evaluation.confidence, evaluation.correct
    aurc = M.aurc(conf, ok)
    accuracy = float(np.mean(ok))
    return {
        "aurc": aurc,
        "ranking_gain": M.ranking_gain_from_aurc(aurc, 1.0 - accuracy),
        "ece": M.ece(conf, ok),
        "accuracy": accuracy,
    }


def seed_summary(
    per_seed: dict[int, dict[str, float]], boot: Bootstrap = Bootstrap(), keys=None
) -> dict:
    """``{"seeds": {seed: {metric: v}}, "mean": {metric: v}, "ci95": {metric: [lo, hi]}}`` of one
    method (or one paired difference) over seeds: per metric in ``keys`` (default: the keys of
    ``METRICS``), the mean of the seeds' values and its percentile bootstrap CI
    (``rlsr.metrics.bootstrap_mean_ci`` with ``boot``'s settings; NaN bounds for one seed)."""
    keys = [k for k, _, _ in METRICS] if keys is None else list(keys)
    out = {"seeds": {str(s): per_seed[s] for s in sorted(per_seed)}, "mean": {}, "ci95": {}}
    for key in keys:
        est = M.bootstrap_mean_ci(
            [per_seed[s][key] for s in sorted(per_seed)],
            n_resamples=boot.n_resamples,
            alpha=1 - boot.level,
            seed=boot.seed,
        )
        out["mean"][key] = est.estimate
        out["ci95"][key] = [est.low, est.high]
    return out


def paired_differences(
    a: dict[int, dict[str, float]], b: dict[int, dict[str, float]], keys=None
) -> dict[int, dict[str, float]]:
    """Per seed that both ``a`` and ``b`` hold, ``a[seed][k] - b[seed][k]`` for every metric k
    in ``keys`` (default: the keys of ``METRICS``): the per-seed values whose ``seed_summary``
    is the paired difference A - B."""
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
    """Recorded training-config keys (dotted) whose values differ between the runs of one
    method, seed and output_dir left out: said in the output, not refused (a changed
    logging or save setting is harmless; a changed learning rate is for the reader to judge)."""
    flat = [_flatten(r.config) for r in runs]
    keys = sorted(set().union(*flat) - _PER_RUN_KEYS)
    missing = object()
    return [k for k in keys if len({json.dumps(f.get(k, missing), default=str) for f in flat}) > 1]


def _curve(runs: list[Run], dataset: str) -> list[dict]:
    """Ranking gain against step for one method: at every step each of its seeds evaluated, the
    mean, lowest and highest over seeds."""
    steps = sorted(set.intersection(*(set(r.steps(dataset)) for r in runs)))
    points = []
    for step in steps:
        gains = [evaluation_metrics(r.at(dataset, step))["ranking_gain"] for r in runs]
        points.append(
            {"step": step, "mean": float(np.mean(gains)), "min": min(gains), "max": max(gains)}
        )
    return points


def _dataset_block(
    runs: list[Run], dataset: str, methods: list[str], pairs, boot: Bootstrap
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
        (r.method, r.seed): {s: evaluation_metrics(r.at(dataset, s)) for s in (first, last)}
        for r in runs
    }
    block: dict = {"first_step": first, "last_step": last, "methods": {}, "pairs": []}
    for method in methods:
        mine = [r for r in runs if r.method == method]
        entry = {"step": last}
        entry.update(seed_summary({r.seed: values[(method, r.seed)][last] for r in mine}, boot))
        entry["first"] = {"step": first}
        entry["first"].update(
            seed_summary({r.seed: values[(method, r.seed)][first] for r in mine}, boot)
        )
        entry["n_questions"] = len(mine[0].at(dataset, last).correct)
        entry["runs"] = {str(r.seed): str(r.path) for r in mine}
        entry["curve"] = _curve(mine, dataset)
        block["methods"][method] = entry
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
            pair[label] = {"step": step, **seed_summary(diffs, boot)}
        block["pairs"].append(pair)
    return block, notes


def compare_runs(
    paths: list[str],
    *,
    use: str | None = None,
    reference: str | None = None,
    bootstrap: Bootstrap = Bootstrap(),
) -> dict:
    """The ``compare.json`` object of the runs under ``paths`` (docs/evaluation.md, "Compare
    methods across seeds"). ``use``: which evaluations (``find_runs``). Pairs: ``reference - M``
    for every other method M when ``reference`` is given, else every pair ``A - B`` with A
    before B by name."""
    runs, notes = find_runs(paths, use)
    check_comparable(runs)
    methods = sorted({r.method for r in runs})
    if reference is not None and reference not in methods:
        raise ValueError(
            f"--reference {reference!r}: no such method among the runs ({', '.join(methods)})."
        )
    if reference is not None:
        pairs = [(reference, m) for m in methods if m != reference]
    else:
        pairs = list(itertools.combinations(methods, 2))
    for method in methods:
        seeds = sorted(r.seed for r in runs if r.method == method)
        if len(seeds) < MIN_SEEDS:
            notes.append(
                f"{method} has {len(seeds)} seed{'s' if len(seeds) != 1 else ''} "
                f"({', '.join(map(str, seeds))}), fewer than {MIN_SEEDS}: its CI is "
                + ("not defined" if len(seeds) == 1 else "the range of its 2 seeds")
                + "; train more seeds."
            )
        differing = _config_differences([r for r in runs if r.method == method])
        if differing:
            notes.append(
                f"the runs of {method} differ in their recorded config ({CONFIG_FILE}) beyond "
                f"the seed: {', '.join(differing[:8])}"
                + (f" and {len(differing) - 8} more" if len(differing) > 8 else "")
            )
    datasets = {}
    for dataset in runs[0].datasets():
        datasets[dataset], more = _dataset_block(runs, dataset, methods, pairs, bootstrap)
        notes += more
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
            "metrics": f"recomputed from each evaluation's {SAMPLES_FILE} with rlsr.metrics "
            "(aurc, ece; ranking_gain = error rate - AURC, ranking_gain_from_aurc; accuracy = "
            "mean correctness), the primary scorer's confidence, missing = 0.0",
            "ci95": "percentile bootstrap of the mean over seeds (rlsr.metrics.bootstrap_mean_ci)"
            "; null with one seed",
            "n_resamples": bootstrap.n_resamples,
            "seed": bootstrap.seed,
            "level": bootstrap.level,
            "pairs": "paired difference A - B per shared seed, then its mean and CI",
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


def render_markdown(result: dict) -> str:
    """compare.md: per dataset, the methods at the last and first step (mean [95 % CI]), every
    seed's values, and the paired differences."""
    stats = result["statistics"]
    heads = " | ".join(f"{h} ({'↓' if b == 'lower' else '↑'})" for _, h, b in METRICS)
    lines = [
        "# rlsr compare",
        "",
        f"Methods: {', '.join(result['methods'])}. Every value is recomputed from the "
        f"evaluation's {SAMPLES_FILE} (rlsr.metrics). Cells: mean over seeds [95 % CI: "
        f"percentile bootstrap of the mean over seeds, {stats['n_resamples']} resamples, seed "
        f"{stats['seed']}]; [n/a]: one seed has no interval. Ranking gain = error rate − AURC "
        '(0: the confidence does not rank). docs/evaluation.md, "Compare methods across seeds".',
        "",
    ]
    if result["notes"]:
        lines += ["**Notes**", ""] + [f"- {n}" for n in result["notes"]] + [""]
    for dataset, block in result["datasets"].items():
        lines += [f"## {dataset}", ""]
        for label, step_key in (("last", "last_step"), ("first", "first_step")):
            step = block[step_key]
            lines += [f"### Methods at step {step} ({label} evaluated step)", "",
                      f"| method | seeds | {heads} |",
                      "|---|---|" + "---|" * len(METRICS)]  # fmt: skip
            for method, entry in block["methods"].items():
                summary = entry if label == "last" else entry["first"]
                cells = " | ".join(_cell(summary, k) for k, _, _ in METRICS)
                lines.append(f"| {method} | {len(summary['seeds'])} | {cells} |")
            lines.append("")
        lines += ["### Every seed", "",
                  f"| method | seed | step | {' | '.join(h for _, h, _ in METRICS)} | run |",
                  "|---|---|---|" + "---|" * len(METRICS) + "---|"]  # fmt: skip
        for method, entry in block["methods"].items():
            for summary in (entry["first"], entry):
                for seed, values in summary["seeds"].items():
                    cells = " | ".join(_num(values[k]) for k, _, _ in METRICS)
                    lines.append(
                        f"| {method} | {seed} | {summary['step']} | {cells} | "
                        f"{entry['runs'][seed]} |"
                    )
        lines.append("")
        if block["pairs"]:
            lines += [f"### Paired differences A − B on shared seeds, step {block['last_step']} "
                      f"(first: step {block['first_step']})", "",
                      f"| A − B | shared seeds | step | {heads} |",
                      "|---|---|---|" + "---|" * len(METRICS)]  # fmt: skip
            for pair in block["pairs"]:
                seeds = ", ".join(map(str, pair["shared_seeds"])) or "none"
                for label in ("last", "first"):
                    if label not in pair:
                        continue
                    cells = " | ".join(_cell(pair[label], k) for k, _, _ in METRICS)
                    lines.append(
                        f"| {pair['a']} − {pair['b']} | {seeds} | {pair[label]['step']} | {cells} |"
                    )
            lines.append("")
    return "\n".join(lines)


def _plot(result: dict, path: Path) -> None:
    import matplotlib  # heavy optional dependency: only when the figure is drawn

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

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
    """Write compare.json, compare.md and compare.png into ``output_dir``: each to a temporary
    name beside its target, renamed into place only once all three are rendered."""
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

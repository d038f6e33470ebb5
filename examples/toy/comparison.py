"""The toy reproduction's comparison over seeds: mean and 95 % CI per row, RLSR - each arm.

Per row (BASE and every arm) and seed, from the held-out evaluation the summary already reads
(``examples.toy.repro.row_metrics``): the AURC, the ranking gain (error rate - AURC,
``rlsr.metrics.selective.ranking_gain_from_aurc``) and the AURC drop (BASE's AURC - the row's, same seed;
BASE's own is 0). Over seeds: the mean and 95 % t-interval of each, and per arm the paired
difference RLSR - arm on the seeds both hold, with its interval, exact paired permutation test,
Holm-adjusted p-value and verdict. The statistics are those of ``rlsr compare``
(``rlsr.evaluation.comparison.compare.seed_summary`` / ``paired_summary`` / ``add_verdicts``). The toy's evaluation folders cannot go to ``rlsr compare`` itself: every
seed generates its own held-out questions (``rlsr compare`` refuses to pool runs evaluated on
different questions), BASE is the warm-up model, not a ``train.py`` run, and an arm saves no
``checkpoint-N`` (``rlsr compare`` refuses an evaluated run whose step it cannot read).
"""

from __future__ import annotations

import math

from rlsr.evaluation.comparison.compare import (
    Statistics,
    add_verdicts,
    check_margin,
    paired_differences,
    paired_summary,
    seed_summary,
)
from rlsr.metrics.selective import ranking_gain_from_aurc

__all__ = [
    "KEYS",
    "REFERENCE",
    "VERDICT_KEYS",
    "per_seed_values",
    "comparison",
    "comparison_markdown",
]

# (key, heading, better) of the comparison's columns
KEYS = (
    ("aurc", "AURC", "lower"),
    ("ranking_gain", "ranking gain", "higher"),
    ("aurc_drop", "AURC drop", "higher"),
)
# the verdicts printed (AURC's paired difference is AURC drop's with the sign flipped: one test)
VERDICT_KEYS = tuple(k for k in KEYS if k[0] != "aurc")
REFERENCE = "rlsr"  # the row every other arm is compared with
BASE = "base"
STATISTICS = Statistics()  # rlsr compare's defaults: 95 %, no margin, seeds only


def per_seed_values(seeds, rows, results) -> dict[str, dict[int, dict[str, float]]]:
    """``{row: {seed: {"aurc", "ranking_gain", "aurc_drop"}}}`` from ``results[row][metric]``
    (one value per seed, in the order of ``seeds``, as ``examples.toy.repro.run`` collects them)."""
    base = results[BASE]["aurc"]
    out: dict[str, dict[int, dict[str, float]]] = {}
    for row in rows:
        aurcs, accuracies = results[row]["aurc"], results[row]["accuracy"]
        if not (len(aurcs) == len(accuracies) == len(base) == len(seeds)):
            raise ValueError(
                f"results[{row!r}] holds {len(aurcs)} AURCs and {len(accuracies)} accuracies for "
                f"{len(seeds)} seeds (BASE: {len(base)}); every row needs one value per seed."
            )
        out[row] = {
            seed: {
                "aurc": aurcs[i],
                "ranking_gain": ranking_gain_from_aurc(aurcs[i], 1.0 - accuracies[i]),
                "aurc_drop": base[i] - aurcs[i],
            }
            for i, seed in enumerate(seeds)
        }
    return out


def comparison(seeds, rows, results, stats: Statistics = STATISTICS, reference=REFERENCE) -> dict:
    """The comparison object of ``summary.json``: ``statistics`` (what the intervals and tests
    are), ``rows`` (per row ``rlsr.evaluation.comparison.compare.seed_summary`` of its per-seed values) and
    ``pairs`` (per arm other than BASE and ``reference``: the paired difference ``reference -
    arm`` on their shared seeds, ``paired_summary`` of it, and per ranking gain and AURC drop the
    Holm-adjusted p-value over all pairs and the verdict, ``add_verdicts``; empty without a
    ``reference`` row). A NaN value leaves its seed out of that metric (``excluded``)."""
    keys = [k for k, _, _ in KEYS]
    check_margin(stats.margin, keys)
    values = per_seed_values(seeds, rows, results)
    pairs = []
    if reference in rows:
        for other in rows:
            if other in (BASE, reference):
                continue
            diffs = paired_differences(values[reference], values[other], keys)
            pairs.append(
                {
                    "a": reference,
                    "b": other,
                    "difference": f"{reference} - {other}",
                    "shared_seeds": sorted(diffs),
                    **paired_summary(diffs, stats, keys),
                }
            )
        names = [(reference.upper(), p["b"].upper(), p) for p in pairs]
        add_verdicts(names, VERDICT_KEYS, stats.margin)
    rows_out = {row: seed_summary(values[row], stats, keys) for row in rows}
    if BASE in rows_out:  # BASE's AURC drop is 0 by definition, not an estimate
        rows_out[BASE]["ci95"]["aurc_drop"] = [0.0, 0.0]
    return {
        "statistics": {
            "metrics": "held-out AURC of the row's scorer; ranking_gain = error rate - AURC; "
            "aurc_drop = BASE's AURC - the row's, same seed",
            "ci95": "t-interval of the mean over seeds, widened where some seeds are exactly 0 "
            "(rlsr.evaluation.comparison.seed_statistics.seed_interval, as rlsr compare); null with one seed",
            "level": stats.level,
            "pairs": f"paired difference {reference} - arm per shared seed, then its mean, "
            "interval and exact paired permutation test (zeros left out)",
            "adjustment": "Holm over every (arm, ranking_gain / aurc_drop) test",
            "margin": stats.margin,
        },
        "rows": rows_out,
        "pairs": pairs,
    }


def _num(value, signed: bool = False) -> str:
    if value is None or math.isnan(value):
        return "n/a"
    value = round(value, 3) + 0.0  # -0.0004 prints 0.000, not -0.000
    return f"{value:+.3f}" if signed else f"{value:.3f}"


def _p(value) -> str:
    return "n/a" if value is None or math.isnan(value) else f"{value:.3f}"


def _cell(summary: dict, key: str, signed: bool) -> str:
    low, high = summary["ci95"][key]
    return f"{_num(summary['mean'][key], signed)} [{_num(low, signed)}, {_num(high, signed)}]"


def comparison_markdown(comp: dict) -> list[str]:
    """The comparison's lines of ``summary.md``: per row mean [95 % CI] of AURC, ranking gain
    and AURC drop; per arm the paired difference RLSR - arm with its CI and what the CI says;
    every seed's values."""
    stats = comp["statistics"]
    heads = " | ".join(f"{h} ({'↓' if b == 'lower' else '↑'})" for _, h, b in KEYS)
    lines = [
        "Mean over seeds [95 % CI: t-interval of the mean over seeds, as `rlsr compare`]. Ranking "
        "gain = error rate − AURC (0: the confidence does not rank); AURC drop = BASE's AURC − "
        "the row's, same seed.",
        "",
        f"| row | seeds | {heads} |",
        "| --- | --- |" + " --- |" * len(KEYS),
    ]
    for row, summary in comp["rows"].items():
        cells = " | ".join(_cell(summary, k, k != "aurc") for k, _, _ in KEYS)
        lines.append(f"| {row.upper()} | {len(summary['seeds'])} | {cells} |")
    if comp["pairs"]:
        lines += [
            "",
            "Paired difference RLSR − arm on the seeds both hold, mean [95 % CI]; p: exact "
            "paired permutation test (zeros left out), Holm-adjusted over every arm and both "
            'verdict columns; verdict "better" only when the CI excludes 0 and p < 0.05, '
            + (
                f'"equivalent within ±{stats["margin"]:g}" when the CI lies inside the margin, '
                if stats.get("margin") is not None
                else ""
            )
            + '"inconclusive" otherwise, "n/a" with one seed.',
            "",
            f"| RLSR − arm | seeds | {heads} | p, ranking gain | verdict, ranking gain "
            "| p, AURC drop | verdict, AURC drop |",
            "| --- | --- |" + " --- |" * (len(KEYS) + 4),
        ]
        for pair in comp["pairs"]:
            cells = " | ".join(_cell(pair, k, True) for k, _, _ in KEYS)
            said = " | ".join(
                f"{_p(pair['p_adjusted'][k])} | {pair['verdict'][k]}" for k, _, _ in VERDICT_KEYS
            )
            lines.append(
                f"| RLSR − {pair['b'].upper()} | {len(pair['shared_seeds'])} | {cells} | {said} |"
            )
    lines += [""]
    for key, head, _ in KEYS:
        lines.append(
            f"Per-seed {head}: "
            + "; ".join(
                f"{row.upper()} "
                + ", ".join(_num(v[key], key != "aurc") for v in summary["seeds"].values())
                for row, summary in comp["rows"].items()
            )
        )
        lines.append("")
    return lines

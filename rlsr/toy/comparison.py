"""The toy reproduction's comparison over seeds: mean and 95 % CI per row, RLSR - each arm.

Per row (BASE and every arm) and seed, from the held-out evaluation the summary already reads
(``rlsr.toy.repro.row_metrics``): the AURC, the ranking gain (error rate - AURC,
``rlsr.metrics.ranking_gain_from_aurc``) and the AURC drop (BASE's AURC - the row's, same seed;
BASE's own is 0). Over seeds: the mean and 95 % percentile bootstrap CI of each, and per arm the
paired difference RLSR - arm on the seeds both hold, with its CI. The statistics are those of
``rlsr compare`` (``rlsr.evaluation.compare.seed_summary`` / ``paired_differences``, same
bootstrap settings). The toy's evaluation folders cannot go to ``rlsr compare`` itself: every
seed generates its own held-out questions (``rlsr compare`` refuses to pool runs evaluated on
different questions), BASE is the warm-up model, not a ``train.py`` run, and an arm saves no
``checkpoint-N`` (``rlsr compare`` refuses an evaluated run whose step it cannot read).
"""

from __future__ import annotations

import math

from rlsr.evaluation.compare import Bootstrap, paired_differences, seed_summary
from rlsr.metrics import ranking_gain_from_aurc

__all__ = ["KEYS", "REFERENCE", "per_seed_values", "comparison", "verdict", "comparison_markdown"]

# (key, heading, better) of the comparison's columns
KEYS = (
    ("aurc", "AURC", "lower"),
    ("ranking_gain", "ranking gain", "higher"),
    ("aurc_drop", "AURC drop", "higher"),
)
FLOAT_NOISE = 1e-9  # |difference| below this is float rounding, not a difference
REFERENCE = "rlsr"  # the row every other arm is compared with
BASE = "base"
BOOTSTRAP = Bootstrap()  # rlsr compare's settings: 10,000 resamples, seed 0, 95 %


def per_seed_values(seeds, rows, results) -> dict[str, dict[int, dict[str, float]]]:
    """``{row: {seed: {"aurc", "ranking_gain", "aurc_drop"}}}`` from ``results[row][metric]``
    (one value per seed, in the order of ``seeds``, as ``rlsr.toy.repro.run`` collects them)."""
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


def comparison(seeds, rows, results, boot: Bootstrap = BOOTSTRAP, reference=REFERENCE) -> dict:
    """The comparison object of ``summary.json``: ``statistics`` (what the CIs are), ``rows``
    (per row ``rlsr.evaluation.compare.seed_summary`` of its per-seed values) and ``pairs``
    (per arm other than BASE and ``reference``: the paired difference ``reference - arm`` on
    their shared seeds, its per-seed values, mean and CI; empty without a ``reference`` row)."""
    keys = [k for k, _, _ in KEYS]
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
                    **seed_summary(diffs, boot, keys),
                }
            )
    return {
        "statistics": {
            "metrics": "held-out AURC of the row's scorer; ranking_gain = error rate - AURC; "
            "aurc_drop = BASE's AURC - the row's, same seed",
            "ci95": "percentile bootstrap of the mean over seeds (rlsr.metrics.bootstrap_mean_ci, "
            "as rlsr compare); null with one seed",
            "n_resamples": boot.n_resamples,
            "seed": boot.seed,
            "level": boot.level,
            "pairs": f"paired difference {reference} - arm per shared seed, then its mean and CI",
        },
        "rows": {row: seed_summary(values[row], boot, keys) for row in rows},
        "pairs": pairs,
    }


def verdict(ci: list[float], better: str) -> str:
    """What a paired difference RLSR - arm says, read from its CI alone: "no difference" when
    the CI covers 0, else which one is better by this metric; "n/a (one seed)" when the CI is
    undefined (one shared seed has no spread: nothing is said either way). A bound within
    ``FLOAT_NOISE`` of 0 counts as 0 (two equal AURCs computed in another order can differ by
    1e-17)."""
    low, high = ci
    if any(v is None or math.isnan(v) for v in (low, high)):
        return "n/a (one seed)"
    if low <= FLOAT_NOISE and high >= -FLOAT_NOISE:
        return "no difference"
    rlsr_better = (low > 0.0) == (better == "higher")
    return "RLSR better" if rlsr_better else "RLSR worse"


def _num(value, signed: bool = False) -> str:
    if value is None or math.isnan(value):
        return "n/a"
    value = round(value, 3) + 0.0  # -0.0004 prints 0.000, not -0.000
    return f"{value:+.3f}" if signed else f"{value:.3f}"


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
        f"Mean over seeds [95 % CI: percentile bootstrap of the mean over seeds, "
        f"{stats['n_resamples']} resamples, seed {stats['seed']}, as `rlsr compare`]. Ranking "
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
            "Paired difference RLSR − arm on the seeds both hold, mean [95 % CI]; the verdict "
            'reads the CI only ("no difference": it covers 0; "n/a": one seed, no CI).',
            "",
            f"| RLSR − arm | seeds | {heads} | verdict, ranking gain | verdict, AURC drop |",
            "| --- | --- |" + " --- |" * (len(KEYS) + 2),
        ]
        for pair in comp["pairs"]:
            cells = " | ".join(_cell(pair, k, True) for k, _, _ in KEYS)
            said = " | ".join(
                verdict(pair["ci95"][k], better) for k, _, better in KEYS if k != "aurc"
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

"""The toy summary's comparison over seeds (examples/toy/comparison.py), on hand-made per-seed
results: no training, no evaluation."""

from __future__ import annotations

import argparse
import math

import numpy as np
import pytest

from examples.toy import repro
from examples.toy.comparison import comparison, comparison_markdown, per_seed_values
from rlsr.evaluation.comparison.compare import Statistics

SEEDS = [3, 5, 7, 9]
# RLVR's AURC swings from seed to seed (it is each seed's error rate: no ranking); RLSR is 0.04-0.06
# below it on every seed, RLCR equal to RLSR up to +- 0.01 of either sign. Paired by seed,
# RLSR - RLVR is below 0 with a narrow CI, while the two rows' own CIs overlap.
AURC = {
    "base": [0.45, 0.50, 0.40, 0.48],
    "rlvr": [0.60, 0.10, 0.55, 0.15],
    "rlsr": [0.56, 0.04, 0.49, 0.11],
    "rlcr": [0.55, 0.05, 0.50, 0.10],
}
ACCURACY = {
    "base": [0.55, 0.50, 0.60, 0.52],
    "rlvr": [0.40, 0.90, 0.45, 0.85],
    "rlsr": [0.40, 0.90, 0.45, 0.85],
    "rlcr": [0.40, 0.90, 0.45, 0.85],
}
ROWS = ["base", "rlvr", "rlcr", "rlsr"]


def _results() -> dict:
    return {r: {"aurc": list(AURC[r]), "accuracy": list(ACCURACY[r])} for r in ROWS}


def test_per_seed_values_are_aurc_error_rate_minus_aurc_and_base_minus_row():
    """Each seed's ranking gain is (1 - accuracy) - AURC of that row and seed, and its AURC drop
    BASE's AURC of the same seed minus the row's; catches a gain computed from accuracy instead
    of the error rate, or a drop taken against another seed's BASE (or the BASE mean)."""
    values = per_seed_values(SEEDS, ROWS, _results())
    assert list(values["rlsr"]) == SEEDS
    for row in ROWS:
        for i, seed in enumerate(SEEDS):
            got = values[row][seed]
            assert got["aurc"] == AURC[row][i]
            assert got["ranking_gain"] == pytest.approx((1 - ACCURACY[row][i]) - AURC[row][i])
            assert got["aurc_drop"] == pytest.approx(AURC["base"][i] - AURC[row][i])
    assert all(v["aurc_drop"] == 0.0 for v in values["base"].values())


def test_rows_get_the_mean_and_the_t_interval_of_rlsr_compare():
    """Each row's mean and CI are the t-interval of its per-seed values, mean ± t_{3, 0.975} s / 2
    (t quantile from a printed table, cut to the metric's range; equal seeds the bound of seeds
    without spread; BASE's AURC drop, 0 by definition, [0, 0]); catches a CI over the wrong values (e.g. AURC where the gain is
    asked) or a statistic other than `rlsr compare`'s."""
    comp = comparison(SEEDS, ROWS, _results())
    assert list(comp["rows"]) == ROWS
    values = per_seed_values(SEEDS, ROWS, _results())
    for row in ROWS:
        for key in ("aurc", "ranking_gain", "aurc_drop"):
            x = np.array([values[row][s][key] for s in SEEDS])
            assert comp["rows"][row]["mean"][key] == pytest.approx(x.mean())
            if row == "base" and key == "aurc_drop":  # 0 by definition
                assert comp["rows"][row]["ci95"][key] == [0.0, 0.0]
                continue
            ranges = {"aurc": (0, 1), "ranking_gain": (-1 / math.e, 1 / math.e)}
            lo, hi = ranges.get(key, (-1, 1))
            if np.ptp(x) < 1e-9:  # no spread (float noise of equal values aside)
                q = 1 - 0.025 ** (1 / 4)  # Clopper-Pearson over the range [lo, hi]
                expect = [x[0] - q * (x[0] - lo), x[0] + q * (hi - x[0])]
            else:
                half = 3.182446305284263 * x.std(ddof=1) / 2
                expect = [max(x.mean() - half, lo), min(x.mean() + half, hi)]
            assert comp["rows"][row]["ci95"][key] == pytest.approx(expect)
    assert comp["statistics"]["level"] == 0.95 and comp["statistics"]["margin"] is None


def test_pairs_are_rlsr_minus_each_arm_paired_by_seed():
    """One pair per arm other than BASE and RLSR, RLSR - arm, from per-seed differences on the
    same seed: RLSR - RLVR's AURC CI lies wholly below 0 (paired) although the two rows' own CIs
    overlap; RLSR - RLCR covers 0. Catches unpaired differences, a reversed sign, pairs against
    BASE, or a missing arm."""
    comp = comparison(SEEDS, ROWS, _results())
    pairs = {p["b"]: p for p in comp["pairs"]}
    assert list(pairs) == ["rlvr", "rlcr"]
    vs_rlvr, vs_rlcr = pairs["rlvr"], pairs["rlcr"]
    assert vs_rlvr["difference"] == "rlsr - rlvr" and vs_rlvr["shared_seeds"] == SEEDS
    diffs = [a - b for a, b in zip(AURC["rlsr"], AURC["rlvr"], strict=True)]
    assert vs_rlvr["mean"]["aurc"] == pytest.approx(np.mean(diffs))
    assert vs_rlvr["ci95"]["aurc"][1] < 0  # paired: RLSR's AURC below RLVR's on every seed
    assert vs_rlvr["ci95"]["ranking_gain"][0] > 0  # same accuracy: the gain is the AURC's mirror
    assert vs_rlvr["mean"]["aurc_drop"] == pytest.approx(-np.mean(diffs))
    own = comp["rows"]
    assert own["rlsr"]["ci95"]["aurc"][1] > own["rlvr"]["ci95"]["aurc"][0]  # unpaired: overlap
    lo, hi = vs_rlcr["ci95"]["ranking_gain"]
    assert lo < 0 < hi
    assert comparison(SEEDS, ["base", "rlvr"], _results())["pairs"] == []  # no RLSR row


def test_a_seed_missing_from_a_row_is_refused_not_misaligned():
    """Per-seed lists must have one value per seed; catches silently pairing seed i of one row
    with seed i+1 of another when a row lost a value."""
    results = _results()
    results["rlcr"]["aurc"].pop()
    with pytest.raises(ValueError, match=r"results\['rlcr'\] holds 3 AURCs .* for 4 seeds"):
        comparison(SEEDS, ROWS, results)


def test_verdicts_need_the_exact_test_and_a_margin():
    """With 4 seeds the paired permutation test cannot reach p < 0.05 (its smallest p is 2/16),
    so RLSR - RLVR is "inconclusive" although its interval excludes 0; with 8 seeds on which
    RLSR's AURC is lower, p = 2/256 stays below 0.05 after Holm over the 4 tests and the verdict
    is "RLSR better". A margin turns RLSR - RLCR (differences ±0.01) into "equivalent within
    ±0.05"; a negative margin is refused. Catches a
    verdict read from the interval alone, or "equivalent" said without a margin."""
    comp = comparison(SEEDS, ROWS, _results())
    pairs = {p["b"]: p for p in comp["pairs"]}
    assert pairs["rlvr"]["ci95"]["aurc_drop"][0] > 0
    assert pairs["rlvr"]["p_value"]["aurc_drop"] == pytest.approx(2 / 16)
    assert pairs["rlvr"]["verdict"] == {"ranking_gain": "inconclusive", "aurc_drop": "inconclusive"}
    assert pairs["rlcr"]["verdict"]["aurc_drop"] == "inconclusive"
    wide = comparison(SEEDS, ROWS, _results(), Statistics(margin=0.05))
    assert {p["b"]: p for p in wide["pairs"]}["rlcr"]["verdict"]["aurc_drop"] == (
        "equivalent within ±0.05"
    )
    seeds = SEEDS + [11, 13, 15, 17]
    results = _results()
    for row, extra in (("base", 0.5), ("rlvr", 0.3), ("rlsr", 0.25), ("rlcr", 0.26)):
        results[row]["aurc"] += [extra, extra + 0.01, extra - 0.01, extra]
        results[row]["accuracy"] += [0.5] * 4
    eight = {p["b"]: p for p in comparison(seeds, ROWS, results)["pairs"]}
    # 8 of 8 seeds with RLSR's AURC lower: p = 2/256, Holm over 4 tests keeps it below 0.05
    assert eight["rlvr"]["p_value"]["aurc_drop"] == pytest.approx(2 / 256)
    assert eight["rlvr"]["p_adjusted"]["aurc_drop"] < 0.05
    assert eight["rlvr"]["verdict"]["aurc_drop"] == "RLSR better"
    with pytest.raises(ValueError, match="--margin -0.1"):
        comparison(SEEDS, ROWS, _results(), Statistics(margin=-0.1))


def test_a_nan_seed_is_left_out_and_listed():
    """A NaN AURC of one seed leaves that seed out of the row's and the pair's statistics
    (listed under ``excluded``, ``n`` counts the rest), never a NaN mean or verdict."""
    results = _results()
    results["rlcr"]["aurc"][1] = math.nan
    comp = comparison(SEEDS, ROWS, results)
    row = comp["rows"]["rlcr"]
    assert row["excluded"]["aurc"] == [5] and row["n"]["aurc"] == 3
    assert row["mean"]["aurc"] == pytest.approx(np.mean([0.55, 0.50, 0.10]))
    pair = {p["b"]: p for p in comp["pairs"]}["rlcr"]
    assert pair["excluded"]["aurc_drop"] == [5] and pair["n"]["aurc_drop"] == 3
    assert not math.isnan(pair["p_value"]["aurc_drop"])
    assert pair["verdict"]["aurc_drop"] == "inconclusive"


def test_markdown_lists_rows_pairs_verdicts_and_every_seed():
    """summary.md's comparison: one line per row with mean [CI] of AURC, gain and drop, one per
    pair with its verdicts, and the per-seed values in seed order; catches a table that drops a
    row or pair or prints values other than the comparison's."""
    comp = comparison(SEEDS, ROWS, _results())
    lines = comparison_markdown(comp)
    row = next(x for x in lines if x.startswith("| RLSR | "))
    m, ci = comp["rows"]["rlsr"]["mean"], comp["rows"]["rlsr"]["ci95"]
    assert row.startswith(
        f"| RLSR | 4 | {m['aurc']:.3f} [{ci['aurc'][0]:.3f}, {ci['aurc'][1]:.3f}]"
    )
    pair = next(x for x in lines if x.startswith("| RLSR − RLVR | "))
    rlvr = comp["pairs"][0]
    assert pair.endswith(
        f"| {rlvr['p_adjusted']['ranking_gain']:.3f} | inconclusive "
        f"| {rlvr['p_adjusted']['aurc_drop']:.3f} | inconclusive |"
    )
    assert (
        "Per-seed AURC: BASE 0.450, 0.500, 0.400, 0.480; RLVR 0.600, 0.100, 0.550, 0.150; "
        "RLCR 0.550, 0.050, 0.500, 0.100; RLSR 0.560, 0.040, 0.490, 0.110" in lines
    )
    assert any(
        x.startswith("Per-seed AURC drop: BASE +0.000, +0.000, +0.000, +0.000;") for x in lines
    )


def test_summary_md_opens_with_the_comparison():
    """examples/toy/toy_repro.py's summary.md carries the comparison before the mean ± std table;
    catches a summary that computes it but never prints it."""
    args = argparse.Namespace(
        variant="easy", steps=300, prompts_per_step=16, generations=8, learning_rate=3e-4
    )
    results = {r: {m: [0.5] * 4 for m in repro.METRICS} for r in ROWS}
    for r in ROWS:
        results[r].update({"aurc": list(AURC[r]), "accuracy": list(ACCURACY[r])})
    text = repro.summary_markdown(
        args, SEEDS, ROWS, results, oracle=[0.1] * 4, timings={}, total=1.0, load=(0, 0, 0)
    )
    lines = text.splitlines()
    pair = next(i for i, x in enumerate(lines) if x.startswith("| RLSR − RLCR | 4 |"))
    assert pair < lines.index("Every metric, mean ± std over seeds (std 0 for one seed):")

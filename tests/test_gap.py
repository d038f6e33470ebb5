"""Paper Tab. 2 (controlled confidence gap), Fig. 3 (confidence densities) and Tab. 5 (seeds) in
``rlsr report``: the pure functions against hand-computed values and brute force, then the
report over fixture evaluation directories written in the ``rlsr evaluate`` layout."""

from __future__ import annotations

import csv
import json
import math
import random

import numpy as np
import pytest

from rlsr.cli import main as rlsr_main
from rlsr.evaluation.reports import gap as G
from rlsr.evaluation.reports import report
from rlsr.evaluation.run.summary import compute_metrics

# --------------------------------------------------------------------------- Tab. 2 equation


def test_controlled_gap_hand_computed():
    # Question:      q0   q1   q2   q3   q4
    # A correct:      1    1    0    0    1     B correct: 1 0 0 0 1
    # S+ = {q0, q4} (both right), S- = {q2, q3} (both wrong), q1 is mixed.
    conf = {"A": [0.9, 0.2, 0.3, 0.5, 0.7], "B": [0.6, 0.6, 0.2, 0.4, 0.9]}
    ok = {"A": [1, 1, 0, 0, 1], "B": [1, 0, 0, 0, 1]}
    g = G.controlled_confidence_gap(conf, ok)
    assert (g.n_correct, g.n_incorrect, g.n_questions) == (2, 2, 5)
    np.testing.assert_allclose(g.mean_correct, [0.8, 0.75])  # (0.9+0.7)/2, (0.6+0.9)/2
    np.testing.assert_allclose(g.mean_incorrect, [0.4, 0.3])  # (0.3+0.5)/2, (0.2+0.4)/2
    np.testing.assert_allclose(g.gap, [0.4, 0.45])
    # Uncontrolled, A's gap would be mean(0.9, 0.2, 0.7) - 0.4 = 0.2: q1 must be left out.


def test_controlled_gap_empty_subset_is_nan_and_bad_input_raises():
    g = G.controlled_confidence_gap({"A": [0.5, 0.6]}, {"A": [1, 1]})
    assert g.n_incorrect == 0 and math.isnan(g.mean_incorrect[0]) and math.isnan(g.gap[0])
    assert g.mean_correct[0] == pytest.approx(0.55)
    with pytest.raises(ValueError, match="same questions"):
        G.controlled_confidence_gap({"A": [0.5], "B": [0.5, 0.6]}, {"A": [1], "B": [1, 0]})
    with pytest.raises(ValueError, match="0/1"):
        G.controlled_confidence_gap({"A": [0.5]}, {"A": [0.5]})
    with pytest.raises(ValueError, match="finite"):
        G.controlled_confidence_gap({"A": [math.nan]}, {"A": [1]})


@pytest.mark.parametrize("seed", range(5))
def test_controlled_gap_matches_brute_force_with_several_runs(seed):
    """Per-question loops over every sample (methods with 1, 2 and 3 runs)."""
    rng = np.random.default_rng(seed)
    Q = 40
    runs = {"rlvr": 1, "rlcr": 2, "rlsr": 3}
    conf = {m: rng.choice([0.1, 0.5, 0.9, 1.0], size=(r, Q)) for m, r in runs.items()}
    # Correctness correlated across methods, so S+ and S- are not empty.
    base = rng.random(Q)
    ok = {m: (rng.random((r, Q)) * 0.3 + base > 0.6) for m, r in runs.items()}
    g = G.controlled_confidence_gap(conf, ok)
    right = [q for q in range(Q) if all(ok[m][r][q] for m in runs for r in range(runs[m]))]
    wrong = [q for q in range(Q) if all(not ok[m][r][q] for m in runs for r in range(runs[m]))]
    assert (g.n_correct, g.n_incorrect) == (len(right), len(wrong))
    assert right and wrong
    for i, m in enumerate(g.methods):
        hi = sum(sum(conf[m][r][q] for r in range(runs[m])) / runs[m] for q in right) / len(right)
        lo = sum(sum(conf[m][r][q] for r in range(runs[m])) / runs[m] for q in wrong) / len(wrong)
        assert g.mean_correct[i] == pytest.approx(hi)
        assert g.gap[i] == pytest.approx(hi - lo)


def test_one_method_one_run_reduces_to_the_plain_gap():
    conf, ok = [0.2, 0.9, 0.4, 0.8], [0, 1, 0, 1]
    g = G.controlled_confidence_gap({"m": conf}, {"m": ok})
    assert g.gap[0] == pytest.approx((0.9 + 0.8) / 2 - (0.2 + 0.4) / 2)


def test_align_runs_joins_by_question_and_counts_dropped():
    a0 = {("d", "1"): (0.9, True), ("d", "2"): (0.1, False), ("d", "3"): (0.5, True)}
    a1 = {("d", "3"): (0.4, True), ("d", "1"): (0.8, True)}  # other order, q2 missing
    b0 = {("d", "1"): (0.7, True), ("d", "3"): (0.2, False), ("e", "1"): (0.3, True)}
    al = G.align_runs({"A": [a0, a1], "B": [b0]})
    assert al.keys == [("d", "1"), ("d", "3")]
    assert al.n_dropped == 2  # ("d", "2") and ("e", "1")
    np.testing.assert_array_equal(al.confidence["A"], [[0.9, 0.5], [0.8, 0.4]])
    np.testing.assert_array_equal(al.correct["B"], [[True, False]])


# --------------------------------------------------------------------------- Fig. 3 KDE


def test_kde_matches_a_brute_force_kernel_sum_and_integrates_to_one():
    values = [0.0, 0.3, 0.3, 0.85, 1.0]
    grid = np.linspace(-1.0, 2.0, 3001)
    h = 0.15
    dens = G.gaussian_kde(values, grid, h)
    for x in (-0.2, 0.0, 0.3, 0.61, 1.0, 1.4):
        brute = sum(
            math.exp(-0.5 * ((x - c) / h) ** 2) / (h * math.sqrt(2 * math.pi)) for c in values
        ) / len(values)
        assert G.gaussian_kde(values, [x], h)[0] == pytest.approx(brute, rel=1e-12)
    assert np.trapezoid(dens, grid) == pytest.approx(1.0, abs=1e-6)
    # The plotting grid [-3h, 1 + 3h] keeps >= 99.7 % of the mass of confidences in [0, 1].
    pgrid = G.kde_grid(h)
    assert np.trapezoid(G.gaussian_kde(values, pgrid, h), pgrid) > 0.997


def test_kde_bandwidth_is_absolute_not_scipys_factor():
    """SciPy's bw_method multiplies the data std; the paper's 0.15 is the kernel std itself.
    Also crosses the 4,096-value chunk boundary."""
    from scipy.stats import gaussian_kde as scipy_kde

    rng = np.random.default_rng(0)
    values = rng.beta(5, 2, size=5000)
    grid = np.linspace(-0.3, 1.3, 50)
    ours = G.gaussian_kde(values, grid, 0.15)
    same = scipy_kde(values, bw_method=0.15 / values.std(ddof=1))(grid)
    np.testing.assert_allclose(ours, same, rtol=1e-9)
    factor = scipy_kde(values, bw_method=0.15)(grid)  # kernel std 0.15 * std: far narrower
    assert np.max(np.abs(factor - ours)) > 0.1
    with pytest.raises(ValueError, match="bandwidth"):
        G.gaussian_kde(values, grid, 0.0)


# --------------------------------------------------------------------------- report fixtures


def _write_run(root, name, dataset, rows, aurc=None):
    """An `rlsr evaluate` dataset folder: samples.jsonl + metrics.json computed from it."""
    d = root / name / dataset
    d.mkdir(parents=True, exist_ok=True)
    records = [
        {"id": qid, "dataset": dataset, "correct": ok, "confidence": c, "answer": "x",
         "scores": {"verbalized": c}, "format_ok": True, "fallbacks": []}
        for qid, c, ok in rows
    ]  # fmt: skip
    with open(d / "samples.jsonl", "w") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in records)
    metrics = compute_metrics(records, n_resamples=0)
    if aurc is not None:
        metrics["scorers"]["verbalized"]["aurc"] = aurc
    (d / "metrics.json").write_text(json.dumps(metrics))
    return root / name


def test_report_tab2_and_fig3(tmp_path):
    # hotpot_modified: q1 right for all, q2 wrong for all, q3 mixed, q4 only in rlsr-seed0.
    _write_run(tmp_path, "rlvr", "hotpot_modified",
               [("q1", 1.0, True), ("q2", 1.0, False), ("q3", 1.0, True)])  # fmt: skip
    _write_run(tmp_path, "rlsr-seed0", "hotpot_modified",
               [("q1", 0.9, True), ("q2", 0.3, False), ("q3", 0.8, False), ("q4", 0.5, True)])  # fmt: skip
    _write_run(tmp_path, "rlsr-seed1", "hotpot_modified",
               [("q3", 0.6, True), ("q1", 0.7, True), ("q2", 0.5, False)])  # fmt: skip
    # hotpot_vanilla: a second ID dataset; its q1 is another question than hotpot_modified's q1.
    _write_run(tmp_path, "rlvr", "hotpot_vanilla", [("q1", 0.5, False)])
    _write_run(tmp_path, "rlsr-seed0", "hotpot_vanilla", [("q1", 0.1, False)])
    _write_run(tmp_path, "rlsr-seed1", "hotpot_vanilla", [("q1", 0.3, False)])
    dirs = [str(tmp_path / n) for n in ("rlvr", "rlsr-seed0", "rlsr-seed1")]
    out = tmp_path / "rep"
    # --bootstrap 0: the calibration section's CIs are tests/test_report_reliability.py's
    assert rlsr_main(["report", *dirs, "--family", "hotpot", "--bootstrap", "0",
                      "--output-dir", str(out)]) == 0  # fmt: skip
    md = (out / "report.md").read_text()
    # All (ID only, pooled): S+ = {hm/q1}, S- = {hm/q2, hv/q1}; shared 4 questions, hm/q4 dropped.
    # rlsr E[c|correct] = (0.9 + 0.7)/2 = 0.8; E[c|incorrect] = mean(0.3, 0.5, 0.1, 0.3) = 0.3.
    assert "| All | rlsr | 1 | 2 | 4 | 1 | 0.800 | 0.300 | 0.500 |" in md
    assert "| All | rlvr | 1 | 2 | 4 | 1 | 1.000 | 0.750 | 0.250 |" in md
    assert "| hotpot_vanilla | rlsr | 0 | 1 | 1 | 0 | – | 0.200 | – |" in md
    rows = list(csv.DictReader(open(out / "report.csv")))
    row = next(r for r in rows if r["metric"] == "controlled_gap" and r["method"] == "rlsr"
               and r["scope"] == "All")  # fmt: skip
    assert float(row["mean"]) == pytest.approx(0.5)
    # Fig. 3: all samples pooled over runs, not the controlled subset.
    # rlsr on hotpot_modified: correct 0.9, 0.5, 0.6, 0.7 -> 0.675; wrong 0.3, 0.8, 0.5 -> 0.533
    assert "| hotpot_modified | rlsr | 4 | 3 | 0.675 | 0.533 | 0.142 |" in md
    png = out / "report_confidence_density.png"
    assert png.stat().st_size > 1000 and png.read_bytes()[:4] == b"\x89PNG"
    assert "![confidence densities](report_confidence_density.png)" in md

    # --gap-methods restricts the methods that must agree: rlsr alone keeps hm/q3 out only
    # where its own runs disagree (q3: wrong in seed0, right in seed1).
    assert rlsr_main(["report", *dirs, "--gap-methods", "rlsr", "--bootstrap", "0",
                      "--output-dir", str(out)]) == 0  # fmt: skip
    md = (out / "report.md").read_text()
    assert "| hotpot_modified | rlsr | 1 | 1 | 3 | 1 | 0.800 | 0.400 | 0.400 |" in md
    assert "| hotpot_modified | rlvr | 1 |" not in md
    assert rlsr_main(["report", *dirs, "--gap-methods", "rlsx", "--output-dir", str(out)]) == 2


def test_report_rejects_a_question_twice_in_one_run(tmp_path):
    _write_run(tmp_path, "m", "tiny", [("q1", 0.9, True), ("q1", 0.3, False)])
    with pytest.raises(ValueError, match="appears twice"):
        report.build_report([str(tmp_path / "m")], tmp_path / "r")


# --------------------------------------------------------------------------- Tab. 5 seeds


def test_tab5_five_seeds_at_t03_aggregate_to_mean_std(tmp_path):
    """Directories named as docs/evaluation.md's Tab. 5 commands write them."""
    ids, oods = ("hotpot_modified", "hotpot_vanilla"), ("trivia", "gsm8k")
    rng = random.Random(0)
    aurc = {}
    dirs = []
    for method in ("rlvr", "rlsr", "rlsr-plain-aurc"):
        for s in range(5):
            name = f"{method}-t0.3-seed{s}"
            for d in ids + oods:
                aurc[name, d] = round(rng.uniform(0.3, 0.6), 4)
                _write_run(tmp_path, name, d, [("q1", 0.9, True), ("q2", 0.2, False)],
                           aurc=aurc[name, d])  # fmt: skip
            dirs.append(str(tmp_path / name))
    assert report.method_from_dirname(dirs[-1]) == "rlsr-plain-aurc-t0.3"
    assert rlsr_main(["report", *dirs, "--family", "hotpot", "--bootstrap", "0",
                      "--output-dir", str(tmp_path / "t5")]) == 0  # fmt: skip
    md = (tmp_path / "t5" / "report.md").read_text()
    assert "rlsr-t0.3 (5 runs)" in md and "rlsr-plain-aurc-t0.3 (5 runs)" in md
    rows = list(csv.DictReader(open(tmp_path / "t5" / "report.csv")))
    for method in ("rlvr-t0.3", "rlsr-t0.3", "rlsr-plain-aurc-t0.3"):
        line = next(x for x in md.splitlines() if x.startswith(f"| {method} | "))
        for scope, members in (("ID", ids), ("OOD", oods)):
            per_seed = [np.mean([aurc[f"{method}-seed{s}", d] for d in members]) for s in range(5)]
            mean, std = float(np.mean(per_seed)), float(np.std(per_seed, ddof=1))
            row = next(r for r in rows if r["method"] == method and r["scope"] == scope
                       and r["dataset"] == "" and r["metric"] == "aurc")  # fmt: skip
            assert float(row["mean"]) == pytest.approx(mean)
            assert float(row["std"]) == pytest.approx(std)
            assert row["runs"] == "5"
            assert f"{mean:.3f} ± {std:.3f}" in line

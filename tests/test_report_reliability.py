"""``rlsr report``'s calibration section and reliability diagrams over fixture evaluation folders
written in the ``rlsr evaluate`` layout (samples.jsonl + the metrics.json computed from it)."""

from __future__ import annotations

import csv
import json
import math

import numpy as np
import pytest

from rlsr.cli import main as rlsr_main
from rlsr.evaluation.reports import report
from rlsr.evaluation.reports.plots import plot_reliability_diagrams
from rlsr.evaluation.reports.reliability import (
    calibration_metrics,
    calibration_rows,
    reliability_panels,
)
from rlsr.evaluation.run.summary import compute_metrics, scorer_arrays
from rlsr.metrics import selective as M


def _write_run(root, name, dataset, rows):
    """An `rlsr evaluate` dataset folder; a confidence of None is a response without one."""
    d = root / name / dataset
    d.mkdir(parents=True)
    records = [
        {"id": f"q{i}", "dataset": dataset, "correct": ok, "answer": "x", "format_ok": True,
         "fallbacks": [], "scores": {"verbalized": c}}
        for i, (c, ok) in enumerate(rows)
    ]  # fmt: skip
    (d / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (d / "metrics.json").write_text(json.dumps(compute_metrics(records, n_resamples=0)))
    return records


# Ties (0.9 x 4, 0.3 x 3), 0.3 on the float bin edge, a missing confidence (-> 0.0), 1.0.
RLSR = [(0.9, True), (0.9, True), (0.9, False), (0.9, True), (0.3, False), (0.3, True),
        (0.3, False), (None, False), (1.0, True), (0.55, True)]  # fmt: skip
RLCR = [(1.0, True), (1.0, False), (1.0, False), (0.8, True), (0.8, False), (0.2, False),
        (0.2, True), (0.6, True)]  # fmt: skip


def test_report_calibration_section_csv_and_reliability_diagram(tmp_path, capsys):
    """Per run: ECE, equal-mass ECE, MCE, RMS-CE, coverage at the --target-risks and risk at the
    --target-coverages, in report.md (estimate [CI]) and report.csv (mean, ci_low, ci_high),
    equal to rlsr.metrics.selective on the run's samples; the reliability PNG is written and each panel's
    count-weighted bin gaps sum to the ECE of the run's metrics.json. Bad targets are one-line
    errors that write nothing."""
    samples = {
        "rlsr-seed0": _write_run(tmp_path, "rlsr-seed0", "hotpot_modified", RLSR),
        "rlcr-seed0": _write_run(tmp_path, "rlcr-seed0", "hotpot_modified", RLCR),
    }
    dirs = [str(tmp_path / name) for name in samples]
    out = tmp_path / "rep"
    args = ["report", *dirs, "--target-risks", "0.25,0", "--target-coverages", "0.5"]
    assert rlsr_main([*args, "--bootstrap", "40", "--output-dir", str(out)]) == 0
    md = (out / "report.md").read_text()
    assert "## Calibration and selective risk (per run)" in md
    assert "![reliability diagrams](report_reliability.png)" in md
    png = out / "report_reliability.png"
    assert png.stat().st_size > 1000 and png.read_bytes()[:4] == b"\x89PNG"
    rows = [r for r in csv.DictReader(open(out / "report.csv")) if r["run"]]
    expected_fns = {
        "ece": M.ece,
        "ece_equal_mass": M.equal_mass_ece,
        "mce": M.max_calibration_error,
        "rms_calibration_error": M.rms_calibration_error,
        "coverage_at_risk_0.25": lambda c, o: M.coverage_at_risk(c, o, 0.25),
        "coverage_at_risk_0": lambda c, o: M.coverage_at_risk(c, o, 0.0),
        "risk_at_coverage_0.5": lambda c, o: M.risk_at_coverage(c, o, 0.5),
    }
    for name, records in samples.items():
        conf, ok, _ = scorer_arrays(records, "verbalized")
        mine = {r["metric"]: r for r in rows if r["run"] == name}
        assert list(mine) == list(expected_fns)
        for key, fn in expected_fns.items():
            assert float(mine[key]["mean"]) == pytest.approx(fn(conf, ok), abs=1e-12)
            assert float(mine[key]["ci_low"]) <= float(mine[key]["ci_high"])
        line = next(x for x in md.splitlines() if f"| {name} | {len(records)} |" in x)
        assert line.count("[") == len(expected_fns)  # every value with its CI
        saved = json.loads((tmp_path / name / "hotpot_modified" / "metrics.json").read_text())
        assert float(mine["ece"]["mean"]) == pytest.approx(saved["scorers"]["verbalized"]["ece"])
    # rlsr's ECE by hand: [0.9, inf) holds 0.9 x 4 and 1.0 (4 right, |4 - 4.6|), [0.5, 0.6) 0.55
    # (right, 0.45), [0.2, 0.3) 0.3 x 3 (1 right, 0.1), the bottom bin the missing one (0.0,
    # wrong, 0): (0.6 + 0.45 + 0.1) / 10.
    assert "| hotpot_modified | rlsr | rlsr-seed0 | 10 | 0.115 [" in md

    rows_data = report.report_rows(dirs, bootstrap=0)
    plain = report.render_markdown(rows_data, "a.png", "b.png", "c.png")
    assert "estimate (no CIs: --bootstrap 0)" in plain
    assert "| hotpot_modified | rlsr | rlsr-seed0 | 10 | 0.115 | " in plain
    drawn = plot_reliability_diagrams(
        reliability_panels(rows_data.runs, rows_data.datasets), tmp_path / "r.png"
    )
    assert [p.title for p in drawn[0]] == [
        "hotpot_modified: rlsr (rlsr-seed0)",
        "hotpot_modified: rlcr (rlcr-seed0)",
    ]
    for panel, records in zip(drawn[0], samples.values(), strict=True):
        b = panel.bins
        filled = b.count > 0
        weighted = np.sum(b.count[filled] / b.n * np.abs(b.accuracy - b.mean_confidence)[filled])
        saved = compute_metrics(records, n_resamples=0)["scorers"]["verbalized"]["ece"]
        assert b.n == len(records)
        assert weighted == pytest.approx(panel.ece, abs=1e-12)
        assert panel.ece == pytest.approx(saved, abs=1e-12)

    capsys.readouterr()
    bad = tmp_path / "bad"
    assert rlsr_main([*args[:2], dirs[1], "--target-risks", "0.1,x", "--output-dir", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rlsr: error: --target-risks 0.1,x: 'x' is not a number in [0, 1]")
    assert err.count("\n") == 1 and not bad.exists()
    assert rlsr_main([*args, "--target-coverages", "0", "--output-dir", str(bad)]) == 2
    assert "--target-coverages 0: '0' is not a number in (0, 1]" in capsys.readouterr().err
    assert not bad.exists()


def test_calibration_rows_are_nan_without_samples_left():
    """A run whose arrays are empty (no parsed confidence kept) gets NaN estimates and bounds,
    rendered as the report's no-value mark, instead of an error. The run is a stand-in: today
    every sample keeps a confidence (a missing one counts 0.0), so no real folder gives this."""

    class Empty:
        path = type("P", (), {"name": "m-seed0"})()
        metrics = {"d": {}}

        def samples(self, dataset):
            return [{}]

        def scores(self, dataset):
            return np.zeros(0), np.zeros(0, dtype=bool), []

    metrics = calibration_metrics((0.1,), (0.5,))
    (row,) = calibration_rows({"m": [Empty()]}, ["d"], metrics, n_resamples=10)
    assert row.n == 0 and len(row.values) == len(metrics.columns) == 6
    assert all(math.isnan(v.estimate) and math.isnan(v.low) for v in row.values)
    assert report._ci_text(row.values[0]) == report._num(math.nan)

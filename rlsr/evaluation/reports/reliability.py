"""``rlsr report``'s calibration and selective-risk section: per run and dataset, ECE, equal-mass
ECE, MCE, RMS calibration error, coverage at target risks and risk at target coverages, each
with a percentile bootstrap CI over the run's samples, and the reliability diagram's panels
(docs/metrics.md, docs/evaluation.md). Confidences: the primary scorer's, missing = 0.0, as in
``metrics.json``."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from rlsr.core.metric_inputs import check_fraction
from rlsr.evaluation.reports.report_settings import DEFAULT_TARGET_COVERAGES, DEFAULT_TARGET_RISKS
from rlsr.metrics import selective as M

__all__ = [
    "DEFAULT_TARGET_RISKS",
    "DEFAULT_TARGET_COVERAGES",
    "CalibrationMetric",
    "CalibrationMetrics",
    "CalibrationRow",
    "calibration_metrics",
    "calibration_rows",
    "reliability_panels",
    "parse_targets",
    "scored_runs",
]


@dataclass(frozen=True)
class CalibrationMetric:
    key: str  # the CSV's metric name
    label: str  # the markdown column


@dataclass(frozen=True)
class CalibrationMetrics:
    """The section's metrics in column order, and ``values``: all of them on one set of
    samples."""

    target_risks: tuple[float, ...] = DEFAULT_TARGET_RISKS
    target_coverages: tuple[float, ...] = DEFAULT_TARGET_COVERAGES

    @property
    def columns(self) -> list[CalibrationMetric]:
        return [
            CalibrationMetric("ece", "ECE↓"),
            CalibrationMetric("ece_equal_mass", "ECE equal-mass↓"),
            CalibrationMetric("mce", "MCE↓"),
            CalibrationMetric("rms_calibration_error", "RMS-CE↓"),
            *[CalibrationMetric(f"coverage_at_risk_{r:g}", f"Cov@risk≤{r:g}↑")
              for r in self.target_risks],
            *[CalibrationMetric(f"risk_at_coverage_{c:g}", f"Risk@cov{c:g}↓")
              for c in self.target_coverages],
        ]  # fmt: skip

    def values(self, conf: np.ndarray, ok: np.ndarray) -> list[float]:
        """``M.ece``, ``M.equal_mass_ece``, ``M.max_calibration_error``,
        ``M.rms_calibration_error``, ``M.coverage_at_risk`` per target risk and
        ``M.risk_at_coverage`` per target coverage (10 bins), of at least one sample."""
        width = M.reliability_bins(conf, ok)
        mass = M.reliability_bins(conf, ok, binning="equal_mass")
        sets = M.threshold_candidates(conf, ok)
        return [
            width.ece(),
            mass.ece(),
            width.mce(),
            width.rms(),
            *[sets.coverage_at_risk(r) for r in self.target_risks],
            *[sets.risk_at_coverage(c) for c in self.target_coverages],
        ]


def calibration_metrics(
    target_risks: Sequence[float] = DEFAULT_TARGET_RISKS,
    target_coverages: Sequence[float] = DEFAULT_TARGET_COVERAGES,
) -> CalibrationMetrics:
    """The section's metrics; each target is checked (risks in [0, 1], coverages in (0, 1])."""
    risks = tuple(check_fraction(r, "target risk", open_left=False) for r in target_risks)
    coverages = tuple(check_fraction(c, "target coverage") for c in target_coverages)
    return CalibrationMetrics(risks, coverages)


@dataclass(frozen=True)
class CalibrationRow:
    """One run on one dataset: ``values[k]`` is the k-th column's (estimate, low, high)."""

    dataset: str
    method: str
    run: str  # the run folder's name
    n: int
    values: tuple[M.BootstrapCI, ...]


def _estimates(
    metrics: CalibrationMetrics, conf, ok, n_resamples: int, seed: int
) -> tuple[M.BootstrapCI, ...]:
    if conf.shape[0] == 0:
        return tuple(M.BootstrapCI(math.nan, math.nan, math.nan) for _ in metrics.columns)
    if n_resamples < 1:
        return tuple(M.BootstrapCI(v, math.nan, math.nan) for v in metrics.values(conf, ok))
    cis = M.bootstrap_cis(metrics.values, conf, ok, n_resamples=n_resamples, seed=seed)
    return tuple(cis)


def scored_runs(runs: Mapping[str, Sequence], datasets: Sequence[str]):
    """(dataset, method, run, confidence, correct) of every ``report.Run`` of ``runs[method]``
    with samples, dataset by dataset, method by method."""
    for d in datasets:
        for method, rs in runs.items():
            for r in rs:
                if d in r.metrics and r.samples(d):
                    conf, ok, _ = r.scores(d)
                    yield d, method, r, conf, ok


def calibration_rows(
    runs: Mapping[str, Sequence],
    datasets: Sequence[str],
    metrics: CalibrationMetrics,
    *,
    n_resamples: int = 1000,
    seed: int = 0,
) -> list[CalibrationRow]:
    """Per run with samples: every metric with its 95 % percentile bootstrap CI over the run's
    samples (``rlsr.metrics.selective.bootstrap_cis``; 0 resamples: no bounds)."""
    return [
        CalibrationRow(
            d,
            method,
            r.path.name,
            int(conf.shape[0]),
            _estimates(metrics, conf, ok, n_resamples, seed),
        )
        for d, method, r, conf, ok in scored_runs(runs, datasets)
    ]


def reliability_panels(runs: Mapping[str, Sequence], datasets: Sequence[str]) -> dict:
    """``panels[dataset][title] = (confidence, correct)``, one per run with samples; the title is
    the method, with the run folder's name when it differs."""
    panels: dict[str, dict[str, tuple[np.ndarray, np.ndarray]]] = {}
    for d, method, r, conf, ok in scored_runs(runs, datasets):
        title = method if r.path.name == method else f"{method} ({r.path.name})"
        panels.setdefault(d, {})[title] = (conf, ok)
    return panels


def parse_targets(text: str, flag: str, *, open_left: bool) -> tuple[float, ...]:
    """``"0.1,0.25"`` -> (0.1, 0.25); each in (0, 1] (``open_left``) or [0, 1]."""
    values = []
    for part in text.split(","):
        part = part.strip()
        interval = "(0, 1]" if open_left else "[0, 1]"
        try:
            values.append(check_fraction(part, flag, open_left=open_left))
        except ValueError:
            raise ValueError(
                f"{flag} {text}: {part!r} is not a number in {interval}; give a comma list such "
                f"as {flag} 0.1,0.25."
            ) from None
    return tuple(dict.fromkeys(values))

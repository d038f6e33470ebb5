"""MCE, RMS calibration error, equal-mass ECE, the reliability bins, coverage at risk and risk at
coverage (rlsr.metrics.calibration, rlsr.metrics.thresholds): each against a brute force written from its
definition in docs/metrics.md, over every small input with ties."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest

from rlsr.metrics import selective as M

# 0.3 sits just below the float edge linspace(0, 1, 11)[3] = 0.30000000000000004, 0.35 shares its
# bin, 0.0 and 1.0 are the outer values: every bin-edge case and ties at every level.
LEVELS = (0.0, 0.3, 0.35, 0.9, 1.0)


def small_cases(max_n: int = 3):
    """Every (confidence, correct) with n <= max_n samples, confidences from LEVELS."""
    for n in range(1, max_n + 1):
        for conf in itertools.product(LEVELS, repeat=n):
            for ok in itertools.product((False, True), repeat=n):
                yield list(conf), list(ok)


def brute_bins(conf, ok, edges):
    """(count, mean confidence, accuracy) of each bin [edges[b], edges[b+1]), one loop per bin."""
    out = []
    for lo, hi in itertools.pairwise(edges):
        members = [i for i, c in enumerate(conf) if lo <= c < hi]
        if members:
            mean_c = sum(conf[i] for i in members) / len(members)
            acc = sum(ok[i] for i in members) / len(members)
            out.append((len(members), mean_c, acc))
        else:
            out.append((0, math.nan, math.nan))
    return out


def width_edges(n_bins):
    edges = list(np.linspace(0.0, 1.0, n_bins + 1))
    return [-math.inf, *edges[1:-1], math.inf]


def mass_edges(conf, n_bins):
    """Inner edges at the k/n_bins quantiles: linear interpolation between order statistics
    x_(floor h), x_(floor h + 1) with h = (n - 1) k / n_bins (numpy's default method)."""
    xs = sorted(conf)
    inner = []
    for k in range(1, n_bins):
        h = (len(xs) - 1) * k / n_bins
        lo = math.floor(h)
        hi = min(lo + 1, len(xs) - 1)
        inner.append(xs[lo] + (h - lo) * (xs[hi] - xs[lo]))
    return [-math.inf, *inner, math.inf]


def brute_calibration(conf, ok, edges):
    """(ECE, MCE, RMS) from the bins: sum |B|/n |gap|, max |gap|, sqrt(sum |B|/n gap^2)."""
    n = len(conf)
    filled = [(k, c, a) for k, c, a in brute_bins(conf, ok, edges) if k]
    ece = sum(k / n * abs(a - c) for k, c, a in filled)
    mce = max(abs(a - c) for _, c, a in filled)
    rms = math.sqrt(sum(k / n * (a - c) ** 2 for k, c, a in filled))
    return ece, mce, rms


def test_calibration_errors_match_brute_force_on_every_small_case():
    """ECE, MCE, RMS (equal-width and equal-mass bins) and the reliability bins equal the
    per-bin loop for every input of up to 3 samples over LEVELS, ties included."""
    for conf, ok in small_cases():
        for n_bins in (1, 4, 10):
            ece, mce, rms = brute_calibration(conf, ok, width_edges(n_bins))
            assert M.ece(conf, ok, n_bins) == pytest.approx(ece, abs=1e-12)
            assert M.max_calibration_error(conf, ok, n_bins) == pytest.approx(mce, abs=1e-12)
            assert M.rms_calibration_error(conf, ok, n_bins) == pytest.approx(rms, abs=1e-12)
            bins = M.reliability_bins(conf, ok, n_bins)
            expected = brute_bins(conf, ok, width_edges(n_bins))
            assert bins.count.tolist() == [k for k, _, _ in expected]
            np.testing.assert_allclose(bins.mean_confidence, [c for _, c, _ in expected])
            np.testing.assert_allclose(bins.accuracy, [a for _, _, a in expected])
            ece_m, mce_m, rms_m = brute_calibration(conf, ok, mass_edges(conf, n_bins))
            assert M.equal_mass_ece(conf, ok, n_bins) == pytest.approx(ece_m, abs=1e-12)
            kw = {"binning": "equal_mass"}
            assert M.max_calibration_error(conf, ok, n_bins, **kw) == pytest.approx(
                mce_m, abs=1e-12
            )
            assert M.rms_calibration_error(conf, ok, n_bins, **kw) == pytest.approx(
                rms_m, abs=1e-12
            )


def test_calibration_errors_on_larger_tied_inputs_and_their_order():
    """Confidences rounded to 0.1 (many ties, many on bin edges): brute force agrees, and
    ECE <= RMS <= MCE as the l1 / l2 / max norms of the same per-bin gaps."""
    rng = np.random.default_rng(3)
    for _ in range(20):
        conf = np.round(rng.random(40), 1).tolist()
        ok = (rng.random(40) < 0.6).tolist()
        for edges, kw in ((width_edges(10), {}), (mass_edges(conf, 10), {"binning": "equal_mass"})):
            ece, mce, rms = brute_calibration(conf, ok, edges)
            assert M.ece(conf, ok, **kw) == pytest.approx(ece, abs=1e-12)
            assert M.max_calibration_error(conf, ok, **kw) == pytest.approx(mce, abs=1e-12)
            assert M.rms_calibration_error(conf, ok, **kw) == pytest.approx(rms, abs=1e-12)
            assert ece <= rms + 1e-12 and rms <= mce + 1e-12


def brute_selections(conf, ok):
    """Every set a threshold can select: {i : conf_i >= t} for t in the distinct confidences
    and t = +inf (nothing), as (size, errors)."""
    out = []
    for t in sorted(set(conf)) + [math.inf]:
        chosen = [i for i, c in enumerate(conf) if c >= t]
        out.append((len(chosen), sum(not ok[i] for i in chosen)))
    return out


def test_coverage_at_risk_and_risk_at_coverage_match_brute_force():
    """Coverage at risk r = max |S|/n over threshold sets S with errors/|S| <= r (the empty set
    qualifies: 0 when none does); risk at coverage c = errors/|S| of the smallest threshold set
    with |S| >= ceil(c n). Exact fractions; every input of up to 3 samples, ties included."""
    risks = ("0", "0.25", "0.5", "0.6", "1")
    coverages = ("0.1", "0.25", "0.5", "0.7", "1")
    for conf, ok in small_cases():
        n = len(conf)
        sets = brute_selections(conf, ok)
        for r in risks:
            best = max(Fraction(k, n) for k, e in sets if k == 0 or Fraction(e, k) <= Fraction(r))
            assert M.coverage_at_risk(conf, ok, float(r)) == pytest.approx(float(best), abs=1e-12)
        for c in coverages:
            m = max(1, math.ceil(Fraction(c) * n))
            k, e = min((k, e) for k, e in sets if k >= m)
            assert M.risk_at_coverage(conf, ok, float(c)) == pytest.approx(e / k, abs=1e-12)


def test_threshold_metrics_keep_tied_samples_together():
    """A threshold cannot split a tie: at coverage 0.5 of four samples tied at 0.8 (two right)
    below one right answer at 0.9, the whole tie is selected (risk 2/5), where Acc@50 averages
    the tie at the cut (1 - Acc@50 = 1/3). No threshold reaches risk 0.1 once the 0.9 answer is
    wrong: coverage 0, not NaN."""
    conf = [0.9, 0.8, 0.8, 0.8, 0.8, 0.1]
    ok = [1, 1, 1, 0, 0, 1]
    assert M.risk_at_coverage(conf, ok, 0.5) == pytest.approx(2 / 5)
    assert 1 - M.accuracy_at_coverage(conf, ok, 0.5) == pytest.approx(1 / 3)
    assert M.coverage_at_risk(conf, ok, 0.1) == pytest.approx(1 / 6)
    assert M.coverage_at_risk(conf, [0, 1, 1, 0, 0, 1], 0.1) == 0.0


def test_new_metrics_are_nan_on_zero_samples_and_name_bad_input():
    """Zero samples give NaN (a report can print n/a); bad input is a ValueError naming it."""
    for fn in (M.equal_mass_ece, M.max_calibration_error, M.rms_calibration_error):
        assert math.isnan(fn([], []))
    assert math.isnan(M.coverage_at_risk([], [], 0.1))
    assert math.isnan(M.risk_at_coverage([], [], 0.5))
    with pytest.raises(ValueError, match="one value per sample"):
        M.max_calibration_error([], [True])
    with pytest.raises(ValueError, match=r"confidence must lie in \[0, 1\]"):
        M.rms_calibration_error([1.5], [True])
    with pytest.raises(ValueError, match="target_risk"):
        M.coverage_at_risk([0.5], [True], 1.5)
    with pytest.raises(ValueError, match="target_coverage"):
        M.risk_at_coverage([0.5], [True], 0.0)


def test_bootstrap_cis_draws_the_resamples_of_bootstrap_ci():
    """Several metrics bootstrapped at once get exactly the CIs of bootstrap_ci metric by metric
    (same seed, same resamples), NaN resamples dropped per metric."""
    rng = np.random.default_rng(5)
    conf = np.round(rng.random(30), 1)
    ok = rng.random(30) < conf
    fns = (M.max_calibration_error, M.auroc, lambda c, o: M.risk_at_coverage(c, o, 0.5))
    together = M.bootstrap_cis(lambda c, o: [f(c, o) for f in fns], conf, ok, 30, seed=2)
    assert together == [M.bootstrap_ci(f, conf, ok, 30, seed=2) for f in fns]
    (all_nan,) = M.bootstrap_cis(lambda c, o: [M.auroc(c, o)], conf, np.ones(30, bool), 5)
    assert math.isnan(all_nan.estimate) and math.isnan(all_nan.low)

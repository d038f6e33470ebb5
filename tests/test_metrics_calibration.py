"""ECE, Brier, AUROC, confidence gap and temperature scaling (rlsr.metrics.selective / rlsr.metrics.calibration)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from rlsr.metrics import selective as metrics


def explicit_ece(conf, correct, edges):
    """ECE with explicit left-inclusive bins [edges[b], edges[b+1])."""
    conf, correct = np.asarray(conf, float), np.asarray(correct, float)
    total = 0.0
    for lo, hi in itertools.pairwise(edges):
        mask = (conf >= lo) & (conf < hi)
        if mask.any():
            total += mask.mean() * abs(correct[mask].mean() - conf[mask].mean())
    return total


def test_ece_binning_is_left_inclusive_with_infinite_outer_edges():
    # 0.1 shares the bin [0.1, 0.2) with 0.15 (a right-inclusive binning would give 0.525).
    assert metrics.ece([0.1, 0.15], [1, 0]) == pytest.approx(0.375)
    # 1.0 belongs to the top bin [0.9, inf), 0.0 to the bottom bin (-inf, 0.1).
    assert metrics.ece([1.0, 0.95], [1, 0]) == pytest.approx(abs(0.5 - 0.975))
    assert metrics.ece([0.0, 0.05], [0, 1]) == pytest.approx(abs(0.5 - 0.025))


def test_ece_bins_use_float_linspace_edges_like_rlcr():
    # linspace(0, 1, 11)[3] = 0.30000000000000004 > 0.3, so 0.3 shares the bin [0.2, 0.3) with
    # 0.25 (RLCR's get_ece gives the same); exact decimal edges would give (0.7 + 0.25) / 2.
    assert metrics.ece([0.3, 0.25], [1, 0]) == pytest.approx(abs(0.5 - 0.275))
    assert metrics.ece([0.6, 0.55], [1, 0]) == pytest.approx(abs(0.5 - 0.575))
    assert metrics.ece([0.4, 0.45], [1, 0]) == pytest.approx(abs(0.5 - 0.425))  # 0.4 is exact


def test_ece_matches_explicit_binning():
    rng = np.random.default_rng(0)
    conf = np.round(rng.random(1000), 1)  # lands exactly on edges often
    correct = rng.random(1000) < conf
    edges = np.linspace(0, 1, 11)
    edges[0], edges[-1] = -np.inf, np.inf
    assert metrics.ece(conf, correct) == pytest.approx(explicit_ece(conf, correct, edges))
    edges15 = np.linspace(0, 1, 16)
    edges15[0], edges15[-1] = -np.inf, np.inf
    assert metrics.ece(conf, correct, n_bins=15) == pytest.approx(
        explicit_ece(conf, correct, edges15)
    )


def test_ece_equal_mass():
    rng = np.random.default_rng(1)
    conf = rng.random(100)
    correct = rng.random(100) < 0.5
    order = np.argsort(conf)
    expected = sum(
        0.1 * abs(correct[chunk].mean() - conf[chunk].mean()) for chunk in np.split(order, 10)
    )
    assert metrics.ece(conf, correct, binning="equal_mass") == pytest.approx(expected)
    # Tied confidences share a bin, so the value does not depend on sample order.
    tied = np.round(conf, 1)
    perm = rng.permutation(100)
    assert metrics.ece(tied, correct, binning="equal_mass") == pytest.approx(
        metrics.ece(tied[perm], correct[perm], binning="equal_mass")
    )
    with pytest.raises(ValueError, match="binning"):
        metrics.ece(conf, correct, binning="weird")


def test_ece_calibrated_vs_overconfident():
    rng = np.random.default_rng(2)
    conf = rng.random(50_000)
    correct = rng.random(50_000) < conf
    assert metrics.ece(conf, correct) < 0.02
    assert metrics.ece(np.ones(50_000), correct) == pytest.approx(1 - correct.mean())


def test_brier():
    assert metrics.brier([1.0, 0.0, 0.5], [1, 1, 0]) == pytest.approx((0 + 1 + 0.25) / 3)
    with pytest.raises(ValueError, match="confidence must lie in"):
        metrics.brier([1.2], [1])


def test_auroc_matches_pairwise_count_with_ties():
    rng = np.random.default_rng(4)
    for _ in range(20):
        n = int(rng.integers(2, 30))
        conf = rng.integers(0, 4, n) / 3
        correct = rng.random(n) < 0.5
        pos, neg = conf[correct], conf[~correct]
        if len(pos) == 0 or len(neg) == 0:
            assert math.isnan(metrics.auroc(conf, correct))
            continue
        diff = pos[:, None] - neg[None, :]
        expected = np.mean((diff > 0) + 0.5 * (diff == 0))
        assert metrics.auroc(conf, correct) == pytest.approx(expected)


def test_confidence_gap_table2_style():
    # RLSR Tab. 2, RLSR row: E[c|correct] = 0.89, E[c|incorrect] = 0.52, gap 0.37.
    conf = [0.88, 0.90, 0.50, 0.54]
    correct = [1, 1, 0, 0]
    assert metrics.confidence_gap(conf, correct) == pytest.approx(0.37)
    assert math.isnan(metrics.confidence_gap([0.3, 0.4], [1, 1]))
    assert math.isnan(metrics.auroc([0.3, 0.4], [0, 0]))


def test_temperature_scaling_recovers_temperature_and_keeps_ranking_metrics():
    rng = np.random.default_rng(6)
    n = 20_000
    z = rng.normal(0, 1.5, n)
    correct = rng.random(n) < 1 / (1 + np.exp(-z))
    overconfident = 1 / (1 + np.exp(-3 * z))  # true temperature 3
    scaler = metrics.temperature_scale(overconfident, correct)
    assert scaler.temperature == pytest.approx(3.0, rel=0.05)
    assert scaler.nll_after < scaler.nll_before
    overconfident[:200] = 1.0  # verbalised 1.0s: the fit stays finite, T grows to damp them
    scaler = metrics.temperature_scale(overconfident, correct)
    assert 3.0 < scaler.temperature < 100.0
    calibrated = scaler(overconfident)
    # Sec. C.6.5: monotone, so ranking metrics are unchanged while ECE drops.
    assert metrics.aurc(calibrated, correct) == metrics.aurc(overconfident, correct)
    np.testing.assert_array_equal(
        metrics.accuracy_at_coverage(calibrated, correct, [0.1, 0.25, 0.5]),
        metrics.accuracy_at_coverage(overconfident, correct, [0.1, 0.25, 0.5]),
    )
    assert metrics.ece(calibrated, correct) < 0.5 * metrics.ece(overconfident, correct)
    # Ties and order are preserved exactly.
    np.testing.assert_array_equal(
        np.argsort(calibrated, kind="stable")[200:], np.argsort(overconfident, kind="stable")[200:]
    )
    with pytest.raises(ValueError, match="temperature"):
        metrics.apply_temperature([0.5], 0.0)

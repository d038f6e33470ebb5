"""Risk-coverage metrics (rlsr.metrics.selective): brute force over tie orderings, invariances, seeds' numbers."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from rlsr.equations.rewards import lifted_aurc_rewards, rank_weights
from rlsr.metrics import selective as metrics


def tie_orderings(confidence):
    """Every order of the samples by confidence descending, ties in every possible order."""
    conf = np.asarray(confidence, dtype=float)
    groups = [np.flatnonzero(conf == v).tolist() for v in sorted(set(conf.tolist()), reverse=True)]
    for parts in itertools.product(*(itertools.permutations(g) for g in groups)):
        yield [i for part in parts for i in part]


def brute_aurc(confidence, correct):
    err = 1 - np.asarray(correct, dtype=float)
    values = []
    for order in tie_orderings(confidence):
        cum = np.cumsum(err[order])
        values.append(np.mean(cum / np.arange(1, len(order) + 1)))
    return float(np.mean(values))


def brute_augrc(confidence, correct):
    err = 1 - np.asarray(correct, dtype=float)
    n = len(err)
    return float(np.mean([np.mean(np.cumsum(err[o]) / n) for o in tie_orderings(confidence)]))


def brute_accuracy_at(confidence, correct, m):
    ok = np.asarray(correct, dtype=float)
    return float(np.mean([ok[o[:m]].mean() for o in tie_orderings(confidence)]))


def small_cases(count=40, max_n=7, seed=1):
    rng = np.random.default_rng(seed)
    for _ in range(count):
        n = int(rng.integers(1, max_n + 1))
        levels = rng.choice([2, 3, n + 1])  # few levels -> many ties; n+1 -> mostly distinct
        conf = rng.integers(0, levels, size=n) / levels
        correct = rng.random(n) < rng.random()
        yield conf, correct


@pytest.mark.parametrize("case", list(small_cases()), ids=lambda c: f"n{len(c[0])}")
def test_rank_metrics_match_brute_force_over_tie_orderings(case):
    conf, correct = case
    n = len(conf)
    assert metrics.aurc(conf, correct) == pytest.approx(brute_aurc(conf, correct), abs=1e-12)
    assert metrics.augrc(conf, correct) == pytest.approx(brute_augrc(conf, correct), abs=1e-12)
    for c in (0.1, 0.25, 0.5, 0.7, 1.0):
        m = max(1, math.ceil(round(c * n, 9)))
        assert metrics.accuracy_at_coverage(conf, correct, c) == pytest.approx(
            brute_accuracy_at(conf, correct, m), abs=1e-12
        )


def expected_curve_aurc(confidence, correct):
    """(1/n) sum_k E[R_k] straight from the curve, ties in expectation: k cutting a tie group of
    size g with e errors after j members contributes j * e / g expected errors (no alpha used)."""
    conf = np.asarray(confidence, dtype=float)
    err = ~np.asarray(correct, dtype=bool)
    n, total, errors_before = len(conf), 0.0, 0
    for value in sorted(set(conf.tolist()), reverse=True):
        group = conf == value
        g, e = int(group.sum()), int(err[group].sum())
        done = n - int((conf < value).sum()) - g  # samples strictly more confident
        for j in range(1, g + 1):
            total += (errors_before + j * e / g) / (done + j)
        errors_before += e
    return total / n


def test_aurc_is_the_rank_weight_identity_of_the_reward():
    rng = np.random.default_rng(0)
    for conf in (rng.random(500), rng.integers(0, 5, 500) / 4):
        correct = rng.random(500) < 0.6
        alpha = rank_weights(conf)
        # Independent of rank_weights (which aurc itself uses): the curve's mean risk.
        expected = expected_curve_aurc(conf, correct)
        assert metrics.aurc(conf, correct) == pytest.approx(expected, abs=1e-12)
        assert np.mean(alpha * ~correct) == pytest.approx(expected, abs=1e-12)
        # The lifted reward is +-alpha, so its wrong-sample part is -n * AURC.
        lifted = lifted_aurc_rewards(correct, conf)
        assert -lifted[~correct].sum() / 500 == pytest.approx(metrics.aurc(conf, correct))


def test_acc_at_coverage_float_noise_and_sequences():
    conf = np.linspace(1, 0, 30)
    correct = np.array([True] * 3 + [False] * 27)
    # 0.1 * 30 = 3.0000000000000004 must select 3 samples, not 4.
    assert metrics.accuracy_at_coverage(conf, correct, 0.1) == 1.0
    out = metrics.accuracy_at_coverage(conf, correct, [0.1, 0.2])
    np.testing.assert_allclose(out, [1.0, 0.5])
    assert metrics.coverage_count(0.1, 30) == 3
    assert metrics.coverage_count(1e-9, 30) == 1


def test_risk_coverage_curve_one_point_per_distinct_threshold():
    conf = [0.9, 0.5, 0.5, 0.9, 0.1]
    correct = [1, 0, 1, 0, 0]
    curve = metrics.risk_coverage_curve(conf, correct)
    np.testing.assert_allclose(curve.thresholds, [0.9, 0.5, 0.1])
    np.testing.assert_allclose(curve.coverage, [0.4, 0.8, 1.0])
    np.testing.assert_allclose(curve.risk, [0.5, 0.5, 0.6])
    coverage, risk, thresholds = curve  # unpacks as a tuple
    assert len(coverage) == len(risk) == len(thresholds) == 3


def test_oracle_excess_and_normalized():
    correct = np.array([1, 1, 0, 1, 0, 0, 1], dtype=bool)
    perfect = correct.astype(float)
    assert metrics.aurc(perfect, correct) == pytest.approx(metrics.oracle_aurc(correct))
    assert metrics.excess_aurc(perfect, correct) == pytest.approx(0.0, abs=1e-15)
    assert metrics.normalized_excess_aurc(perfect, correct) == pytest.approx(0.0, abs=1e-15)
    # Brute-force oracle: best AURC over all orderings.
    best = min(
        np.mean(np.cumsum(~correct[list(p)]) / np.arange(1, 8))
        for p in itertools.permutations(range(7))
    )
    assert metrics.oracle_aurc(correct) == pytest.approx(best)
    # All tied = random ranking: AURC = error rate, normalised E-AURC = 1.
    tied = np.full(7, 0.5)
    assert metrics.aurc(tied, correct) == pytest.approx(3 / 7)
    assert metrics.normalized_excess_aurc(tied, correct) == pytest.approx(1.0)
    reversed_ = 1.0 - perfect
    assert metrics.normalized_excess_aurc(reversed_, correct) > 1.0


def test_oracle_aurc_large_n_limit():
    n, err = 200_000, 0.3
    correct = np.arange(n) >= int(err * n)
    limit = err + (1 - err) * math.log(1 - err)
    assert metrics.oracle_aurc(correct) == pytest.approx(limit, abs=1e-4)
    assert metrics.aurc(correct.astype(float), correct) == pytest.approx(limit, abs=1e-4)


def test_theoretical_weight_curve():
    """RLSR Sec. 2.2 / Fig. 3: alpha at normalised rank beta = r/N tends to -log(1 - beta)."""
    n = 100_000
    alpha = rank_weights(np.arange(n, dtype=float))  # ascending rank r = index + 1
    beta = np.array([0.1, 0.5, 0.9, 0.99])
    r = (beta * n).astype(int)
    np.testing.assert_allclose(alpha[r - 1], -np.log(1 - beta), atol=1e-3)


def test_permutation_and_monotone_invariance():
    rng = np.random.default_rng(3)
    conf = rng.integers(0, 20, 300) / 19
    correct = rng.random(300) < conf
    perm = rng.permutation(300)
    transformed = np.exp(5 * conf) - 3.0  # strictly increasing
    for fn in (metrics.aurc, metrics.augrc, metrics.excess_aurc, metrics.auroc):
        base = fn(conf, correct)
        assert fn(conf[perm], correct[perm]) == pytest.approx(base, abs=1e-12)
        assert fn(transformed, correct) == pytest.approx(base, abs=1e-12)
    acc = metrics.accuracy_at_coverage(conf, correct, [0.1, 0.25, 0.5])
    np.testing.assert_allclose(
        metrics.accuracy_at_coverage(transformed, correct, [0.1, 0.25, 0.5]), acc
    )
    np.testing.assert_allclose(
        metrics.risk_coverage_curve(transformed, correct).risk,
        metrics.risk_coverage_curve(conf, correct).risk,
    )


def test_edge_cases_single_all_correct_all_wrong():
    assert metrics.aurc([0.3], [True]) == 0.0
    assert metrics.aurc([0.3], [False]) == 1.0
    assert metrics.accuracy_at_coverage([0.3], [1], 0.1) == 1.0
    assert math.isnan(metrics.normalized_excess_aurc([0.3], [1]))
    assert metrics.aurc([0.1, 0.9, 0.5], [1, 1, 1]) == 0.0
    assert metrics.aurc([0.1, 0.9, 0.5], [0, 0, 0]) == pytest.approx(1.0)
    assert metrics.augrc([0.1, 0.9, 0.5], [0, 0, 0]) == pytest.approx(2 / 3)  # (1/3+2/3+1)/3
    assert metrics.excess_aurc([0.1, 0.9, 0.5], [0, 0, 0]) == pytest.approx(0.0, abs=1e-15)


@pytest.mark.parametrize(
    ("conf", "correct", "match"),
    [
        ([0.1, 0.2], [1], "correct has 1"),
        ([0.1, float("nan")], [1, 0], "confidence must be finite"),
        ([[0.1, 0.2]], [[1, 0]], "confidence must be 1-D"),
        ([0.1, 0.2], [1, 0.5], "correct must hold booleans or 0/1"),
        ([0.1, 0.2], [1, float("nan")], "correct"),
        ([], [], "empty"),
        (["a", "b"], [1, 0], "confidence must be a sequence of numbers"),
    ],
)
def test_bad_inputs_name_the_argument(conf, correct, match):
    with pytest.raises(ValueError, match=match):
        metrics.aurc(conf, correct)


@pytest.mark.parametrize("coverage", [0.0, -0.1, 1.5, float("nan")])
def test_bad_coverage(coverage):
    with pytest.raises(ValueError, match="coverage"):
        metrics.accuracy_at_coverage([0.1, 0.2], [1, 0], coverage)


def test_bootstrap_ci_and_seed_stats():
    rng = np.random.default_rng(5)
    conf = rng.random(400)
    correct = rng.random(400) < conf
    ci = metrics.bootstrap_ci(metrics.aurc, conf, correct, n_resamples=200, seed=1)
    assert ci.low < ci.estimate < ci.high
    assert ci == metrics.bootstrap_ci(metrics.aurc, conf, correct, n_resamples=200, seed=1)
    wide = metrics.bootstrap_ci(metrics.aurc, conf[:50], correct[:50], n_resamples=200, seed=1)
    assert wide.high - wide.low > ci.high - ci.low
    # AUROC is NaN on single-class resamples; those are dropped, not propagated.
    few = metrics.bootstrap_ci(metrics.auroc, [0.2, 0.9, 0.8], [0, 1, 1], n_resamples=100)
    assert 0.0 <= few.low <= few.high <= 1.0
    with pytest.raises(ValueError, match="alpha"):
        metrics.bootstrap_ci(metrics.aurc, conf, correct, alpha=1.5)

    stats = metrics.mean_std_over_seeds([0.478, 0.470, 0.485, 0.480, 0.477])
    assert stats.mean == pytest.approx(0.478)
    assert stats.std == pytest.approx(np.std([0.478, 0.470, 0.485, 0.480, 0.477], ddof=1))
    assert stats.n == 5
    assert math.isnan(metrics.mean_std_over_seeds([0.5]).std)


@pytest.mark.parametrize("case", list(small_cases(count=20, seed=7)), ids=lambda c: f"n{len(c[0])}")
def test_ranking_gain_is_the_aurc_a_constant_confidence_loses(case):
    """Ranking gain = error rate - AURC: brute force over tie orderings, with the error rate
    itself brute-forced as the AURC of the same answers at one constant confidence."""
    conf, correct = case
    constant = brute_aurc(np.zeros(len(conf)), correct)
    assert constant == pytest.approx(1 - np.mean(correct), abs=1e-12)
    expected = constant - brute_aurc(conf, correct)
    assert metrics.ranking_gain(conf, correct) == pytest.approx(expected, abs=1e-12)
    aurc = metrics.aurc(conf, correct)
    assert metrics.ranking_gain_from_aurc(aurc, 1 - np.mean(correct)) == pytest.approx(expected)


def test_ranking_gain_signs_and_bounds():
    correct = [True, False, True, False]
    assert metrics.ranking_gain([0.5] * 4, correct) == pytest.approx(0, abs=1e-12)  # no ranking
    best = metrics.ranking_gain([0.9, 0.1, 0.8, 0.2], correct)
    assert best == pytest.approx(0.5 - metrics.oracle_aurc(correct)) and best > 0
    assert metrics.ranking_gain([0.1, 0.9, 0.2, 0.8], correct) < 0  # wrong answers first

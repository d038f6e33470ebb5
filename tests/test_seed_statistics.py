"""rlsr.evaluation.comparison.seed_statistics: each function against brute force or hand-computed values,
and the coverage of the 95 % t-interval on simulated seeds (docs/compare.md, "Intervals,
tests and verdicts")."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy.stats import beta

from rlsr.evaluation.comparison import seed_statistics as S
from rlsr.evaluation.comparison.compare_settings import Statistics

# t_{df, 0.975} from a printed table (Student's t, two-sided 95 %)
T_TABLE = {1: 12.706204736174707, 4: 2.7764451051977987, 10: 2.2281388519649385,
           19: 2.0930240544083096}  # fmt: skip


@pytest.mark.parametrize("n", [2, 5, 11, 20])
def test_t_interval_is_mean_plus_minus_t_quantile_times_standard_error(n):
    """x̄ ± t_{n-1, 0.975} s / √n with the table's quantile; catches a z quantile, ddof = 0 or a
    percentile interval."""
    x = np.random.default_rng(n).normal(0.1, 0.2, n)
    est = S.t_interval(x, (-1, 1))
    half = T_TABLE[n - 1] * x.std(ddof=1) / math.sqrt(n)
    assert est == pytest.approx((x.mean(), x.mean() - half, x.mean() + half), rel=1e-9)


def test_t_interval_of_no_spread_and_one_seed():
    """Equal seeds get the Clopper-Pearson bound over the value range, not zero width (5 equal
    differences in [-1, 1]: 0 ± 0.5218); float noise counts as equal; one seed has NaN bounds."""
    est = S.t_interval([0.0] * 5, (-1.0, 1.0))
    q = 1 - 0.025 ** (1 / 5)
    assert q == pytest.approx(0.52182, abs=1e-5)
    assert est == pytest.approx((0.0, -q, q))
    noisy = S.t_interval([0.3, 0.3 + 1e-17, 0.3 - 1e-17], (0.0, 1.0))
    q3 = 1 - 0.025 ** (1 / 3)
    assert noisy[1:] == pytest.approx((0.3 - q3 * 0.3, 0.3 + q3 * 0.7))
    one = S.t_interval([0.4], (0.0, 1.0))
    assert one.estimate == 0.4 and math.isnan(one.low) and math.isnan(one.high)
    with pytest.raises(ValueError, match="finite"):
        S.t_interval([0.1, math.nan], (0.0, 1.0))


def _permutation_p_by_enumeration(d) -> float:
    """Every sign pattern of every difference (zeros included: flipping 0 changes nothing)."""
    observed = abs(sum(d))
    sums = [abs(sum(s * v for s, v in zip(signs, d, strict=True)))
            for signs in itertools.product((1, -1), repeat=len(d))]  # fmt: skip
    return sum(x >= observed - 1e-9 for x in sums) / len(sums)


@pytest.mark.parametrize(
    "d",
    [
        [0.1, 0.2, -0.05, 0.3, 0.0, 0.0, 0.15],
        [0.0] * 8 + [0.06, 0.11, 0.27],  # 8 of 11 exactly 0
        [0.1, -0.1, 0.1, -0.1, 0.2, 0.0],  # tied magnitudes, sums equal to the observed
        [0.1 + 0.2, 0.3, -0.3, 0.1, 0.2],  # 0.1 + 0.2 != 0.3 in floats: counted as equal
    ],
)
def test_permutation_test_equals_brute_force_enumeration(d):
    """The exact p equals the enumeration of all 2^n sign patterns of all n differences: leaving
    zeros out does not change it, and sums equal up to float rounding count as extreme."""
    test = S.paired_permutation_test(d)
    assert test.exact and test.p_value == pytest.approx(_permutation_p_by_enumeration(d))
    assert test.n_zero == sum(abs(v) <= 1e-9 for v in d)


def test_permutation_test_with_equal_magnitudes_is_the_exact_sign_test():
    """Equal magnitudes: p = 2 P(Bin(m, 1/2) <= min(k+, k-)) (hand values); the issue's 4
    positive of 4 nonzero with 7 zeros gives 0.125; all zeros give 1; 5 seeds never reach 0.05."""
    assert S.paired_permutation_test([0.1] * 4 + [0.0] * 7).p_value == pytest.approx(0.125)
    assert S.paired_permutation_test([0.1] * 3 + [0.0] * 8).p_value == pytest.approx(0.25)
    # 9 positive, 2 negative: 2 * (1 + 11 + 55) / 2048
    d = [0.05] * 9 + [-0.05] * 2
    assert S.paired_permutation_test(d).p_value == pytest.approx(2 * 67 / 2048)
    assert S.paired_permutation_test([0.0] * 6) == (1.0, 0, 6, True)
    assert S.paired_permutation_test([0.2, 0.1, 0.3, 0.25, 0.4]).p_value == pytest.approx(2 / 32)


def test_permutation_test_beyond_exact_is_monte_carlo_and_close():
    """More than 20 nonzero differences: Monte Carlo (seeded, (1 + hits) / (1 + draws)), close
    to the exact sign-test value for equal magnitudes (16 of 22 positive: 0.0524)."""
    d = [0.1] * 16 + [-0.1] * 6
    exact = 2 * sum(math.comb(22, k) for k in range(7)) / 2**22
    test = S.paired_permutation_test(d, n_monte_carlo=200_000, seed=1)
    assert not test.exact and test.p_value == pytest.approx(exact, abs=0.002)


def test_holm_equals_its_definition_by_brute_force():
    """Adjusted p_(i) = max_{j<=i} min(1, (m-j+1) p_(j)), in input order, ties included."""
    p = [0.01, 0.04, 0.03, 0.005, 0.04, 0.5]
    order = sorted(range(len(p)), key=lambda i: p[i])
    expect = [0.0] * len(p)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(p) - rank) * p[i]))
        expect[i] = running
    assert S.holm(p) == pytest.approx(expect)
    assert S.holm([0.01, 0.04, 0.03, 0.005, 0.04, 0.5])[3] == pytest.approx(0.03)
    assert S.holm([]) == []


@pytest.mark.parametrize(
    ("low", "high", "p", "better", "margin", "said"),
    [
        (0.01, 0.05, 0.01, "higher", None, "A better"),
        (0.01, 0.05, 0.01, "lower", None, "B better"),
        (-0.05, -0.01, 0.01, "lower", None, "A better"),
        (0.01, 0.05, 0.06, "higher", None, "inconclusive"),  # the test disagrees
        (-0.01, 0.05, 0.001, "higher", None, "inconclusive"),  # the interval holds 0
        (1e-17, 0.05, 0.001, "higher", None, "inconclusive"),  # float noise of 0
        (-0.01, 0.01, 1.0, "higher", None, "inconclusive"),  # no margin: never equivalent
        (-0.01, 0.01, 1.0, "higher", 0.02, "equivalent within ±0.02"),
        (-0.01, 0.03, 1.0, "higher", 0.02, "inconclusive"),  # sticks out of the margin
        (0.005, 0.01, 0.001, "higher", 0.02, "A better, within ±0.02"),
        (math.nan, math.nan, math.nan, "higher", 0.02, "n/a (one seed)"),
    ],
)
def test_verdict_rule(low, high, p, better, margin, said):
    """ "better" needs both the interval off 0 and adjusted p < 0.05; "equivalent" needs a
    margin and the whole interval inside it; the metric's direction decides who is better."""
    assert S.verdict(S.Interval(0.0, low, high), p, better, "A", "B", margin) == said


def test_cluster_draws_move_repeated_prompts_together():
    """A resample draws clusters with replacement and keeps every member of a drawn cluster."""
    clusters = ["a", "a", "a", "b", "c", "c"]
    draws = S.cluster_draws(clusters, 200, seed=0)
    labels = np.array(clusters)
    for d in draws:
        counts = {c: int(np.sum(labels[d] == c)) for c in "abc"}
        assert counts["a"] % 3 == 0 and counts["c"] % 2 == 0
        assert counts["a"] // 3 + counts["b"] + counts["c"] // 2 == 3  # 3 clusters drawn
    assert S.cluster_draws(clusters, 5, seed=0)[0].tolist() == draws[0].tolist()  # seeded


def test_resampled_t_interval_without_question_noise_is_the_t_interval():
    """When resampling questions changes nothing, the hierarchical interval's standard error is
    the seeds' s / √n (the √(n/(n-1)) factor), within the bootstrap's noise."""
    x = np.array([0.1, 0.3, 0.25, 0.05, 0.2, 0.4, 0.15])
    per_draw = np.tile(x, (20_000, 1))
    got = S.resampled_t_interval(per_draw, x.mean(), (-1, 1), seed=0)
    want = S.t_interval(x, (-1, 1))
    assert got.high - got.low == pytest.approx(want.high - want.low, rel=0.02)
    # question noise shared by every seed widens it
    shift = np.random.default_rng(1).normal(0, 0.1, (20_000, 1))
    wider = S.resampled_t_interval(per_draw + shift, x.mean(), (-1, 1), seed=0)
    assert wider.high - wider.low > 1.5 * (want.high - want.low)


def test_zero_split_interval_equals_its_formula_by_hand():
    """8 zeros and 3 positive differences (0.06, 0.11, 0.27): q in the Clopper-Pearson interval
    of 3/11 (Beta quantiles), ν in the t-interval of the three (t_{2, 0.975} = 4.3027), the
    interval the extreme products; the reported interval holds both it and the t-interval.
    One nonzero value: ν over the whole range. No zero or all zero: no split (NaN)."""
    d = np.array([0.0] * 8 + [0.06, 0.11, 0.27])
    q_low, q_high = beta.ppf(0.025, 3, 9), beta.ppf(0.975, 4, 8)
    y = d[8:]
    half = 4.302652729749464 * y.std(ddof=1) / math.sqrt(3)
    nu = (y.mean() - half, y.mean() + half)
    products = [q * v for q in (q_low, q_high) for v in nu]
    low, high = S.zero_split_intervals(d[None, :], (-1.0, 1.0))
    assert (low[0], high[0]) == pytest.approx((min(products), max(products)))
    est = S.seed_interval(d, (-1.0, 1.0))
    t = S.t_interval(d, (-1.0, 1.0))
    assert est.low == pytest.approx(min(t.low, low[0])) and est.high == pytest.approx(high[0])
    assert est.high > 2 * t.high  # three nonzero seeds of 11 say little about their size
    one = np.array([0.0] * 4 + [0.2])
    q1 = beta.ppf(0.975, 2, 4)
    nu1 = (0.2 - 0.975 * 1.2, 0.2 + 0.975 * 0.8)
    low, high = S.zero_split_intervals(one[None, :], (-1.0, 1.0))
    assert (low[0], high[0]) == pytest.approx((q1 * nu1[0], q1 * nu1[1]))
    low, high = S.zero_split_intervals(np.array([[0.0] * 4, [0.1, 0.2, 0.3, 0.4]]), (-1, 1))
    assert np.isnan(low).all() and np.isnan(high).all()


# Synthetic paired differences with a known mean: (name, draw(rng, shape), true mean).
_TIES_POP = np.array([0.0] * 8 + [-0.1, -0.1, 0.1])  # 8 of 11 exactly 0
_ONE_SIDED = np.array([0.0] * 8 + [0.06, 0.11, 0.27])  # 8 of 11 exactly 0, the rest positive
SCENARIOS = [
    ("normal", lambda r, sh: r.normal(0.03, 0.05, sh), 0.03),
    ("8 of 11 exactly 0", lambda r, sh: r.choice(_TIES_POP, sh), _TIES_POP.mean()),
    ("8 of 11 exactly 0, rest positive", lambda r, sh: r.choice(_ONE_SIDED, sh),
     _ONE_SIDED.mean()),
    ("73 % exactly 0, else exponential",
     lambda r, sh: np.where(r.random(sh) < 0.73, 0.0, r.exponential(0.1, sh)), 0.27 * 0.1),
    ("73 % exactly 0, else normal",
     lambda r, sh: np.where(r.random(sh) < 0.73, 0.0, r.normal(0.02, 0.1, sh)), 0.27 * 0.02),
    ("discrete, skewed (Poisson, 0.01 steps)",
     lambda r, sh: 0.01 * (r.poisson(2, sh) - 1), 0.01),
    ("continuous, skewed (gamma, shape 8)", lambda r, sh: r.gamma(8, 0.01, sh), 0.08),
]  # fmt: skip


@pytest.mark.parametrize("name, draw, mean", SCENARIOS, ids=[s[0] for s in SCENARIOS])
def test_interval_covers_the_true_difference_at_5_11_and_20_seeds(name, draw, mean):
    """20,000 simulated sets of n paired seeds per n (fixed seed): the 95 % interval rlsr
    compare reports (``seed_intervals``) holds the true mean difference in at least 93 % of them
    at n = 5, 11 and 20 (binomial sd of the estimate 0.0016). The percentile bootstrap fails
    this (0.82 at n = 5 on the normal case), the plain t-interval on the tie-heavy one-sided
    cases (0.83 at n = 11)."""
    rng = np.random.default_rng(20)
    for n in (5, 11, 20):
        _, low, high = S.seed_intervals(draw(rng, (20_000, n)), (-1.0, 1.0))
        coverage = float(np.mean((low <= mean) & (mean <= high)))
        assert coverage >= 0.93, (name, n, coverage)


def test_compare_statistics_level_is_the_intervals_level():
    """``rlsr compare``'s default level (declared in the light compare_settings, so the flags
    load no scipy) is the level the intervals use."""
    assert Statistics().level == S.LEVEL

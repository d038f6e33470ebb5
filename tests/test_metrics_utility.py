"""UtilityAUC (UtilityBench, arXiv 2610.25924, Eq. 1-3, App. B) and DCS (Definition 1 of "Measuring
Language Model Hallucinations Through Distributional Correctness")."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from rlsr.metrics import selective as metrics
from rlsr.metrics.utility import response_utilities

# --------------------------------------------------------------------------- UtilityAUC


def utilities_by_hand(answered, correct, answerable, costs, c_r):
    """Eq. 1 case by case, and the abstention utility of Eq. 11."""
    v, b = [], []
    for d, c, a, cost in zip(answered, correct, answerable, costs, strict=True):
        b.append(1.0 if not a else -c_r)
        if d and a and c:
            v.append(1.0)
        elif d:
            v.append(-cost)  # wrong answer, or any answer to an unanswerable query
        else:
            v.append(b[-1])
    return np.array(v), np.array(b)


def trapezoid_area(gains_ordered, b):
    """Eq. 2 / 35 directly: U_0 = mean abstention utility, U_k = U_0 + (first k gains) / n,
    area = trapezoid over coverage k/n. Independent of the rank-weight form (Lemma 1)."""
    n = len(b)
    u = [np.mean(b)]
    for k in range(1, n + 1):
        u.append(u[0] + np.sum(gains_ordered[:k]) / n)
    return sum((u[k - 1] + u[k]) / (2 * n) for k in range(1, n + 1))


def brute_utility_area(scores, v, b):
    """Mean trapezoid area over every ordering of tied scores."""
    areas = []
    scores = np.asarray(scores, float)
    groups = [np.flatnonzero(scores == s) for s in sorted(set(scores.tolist()), reverse=True)]
    for parts in itertools.product(*(itertools.permutations(g) for g in groups)):
        order = [i for part in parts for i in part]
        areas.append(trapezoid_area((v - b)[order], b))
    return float(np.mean(areas))


def random_utility_case(rng, n):
    answerable = rng.random(n) < 0.6
    answered = rng.random(n) < 0.7
    correct = rng.random(n) < 0.5
    costs = rng.choice([0.5, 1.0, 2.0, 3.0, 7.5], size=n)
    scores = rng.integers(0, 3, size=n) / 2
    return scores, answered, correct, answerable, costs


def test_response_utilities_eq1():
    answered = [1, 1, 0, 0, 1, 1]
    correct = [1, 0, 0, 0, 1, 0]
    answerable = [1, 1, 0, 1, 0, 0]
    costs = [3.0, 3.0, 4.0, 5.0, 6.0, 7.0]
    v, b = response_utilities(answered, correct, answerable, costs, refusal_cost=2.0)
    np.testing.assert_allclose(v, [1, -3, 1, -2, -6, -7])
    np.testing.assert_allclose(b, [-2, -2, 1, -2, 1, 1])


@pytest.mark.parametrize("seed", range(30))
def test_utility_area_matches_brute_force_over_tie_orderings(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 8))
    scores, answered, correct, answerable, costs = random_utility_case(rng, n)
    c_r = float(rng.choice([0.0, 2.0, 4.0]))
    v, b = utilities_by_hand(answered, correct, answerable, costs, c_r)
    details = metrics.utility_auc_details(scores, answered, correct, answerable, costs, c_r)
    assert details.area == pytest.approx(brute_utility_area(scores, v, b), abs=1e-12)
    assert details.full_coverage_utility == pytest.approx(v.mean())
    assert 0.0 <= details.utility_auc <= 1.0


@pytest.mark.parametrize("seed", range(8))
def test_extrema_are_sharp_over_all_outcomes_and_orderings(seed):
    """App. B Eq. 18: A+ / A- are the max / min of the area over feasible outcomes x orderings."""
    rng = np.random.default_rng(100 + seed)
    n = int(rng.integers(1, 5))
    answerable = rng.random(n) < 0.6
    costs = rng.choice([0.5, 1.0, 2.0, 3.0], size=n)  # below, at and above C_R
    c_r = 2.0
    b = np.where(answerable, -c_r, 1.0)
    feasible = [
        [1.0, -cost, -c_r] if a else [1.0, -cost] for a, cost in zip(answerable, costs, strict=True)
    ]
    areas = [
        trapezoid_area((np.array(v) - b)[list(order)], b)
        for v in itertools.product(*feasible)
        for order in itertools.permutations(range(n))
    ]
    details = metrics.utility_auc_details(
        np.zeros(n), np.ones(n), np.ones(n), answerable, costs, c_r
    )
    assert details.area_max == pytest.approx(max(areas), abs=1e-12)
    assert details.area_min == pytest.approx(min(areas), abs=1e-12)
    assert details.area_min < details.area_max


def test_best_and_worst_systems_score_one_and_zero():
    answerable = np.array([1, 1, 0, 0, 1], dtype=bool)
    costs = np.array([1.0, 5.0, 2.0, 3.0, 0.5])
    # Best: answer every answerable query correctly, refuse every unanswerable one, and score
    # the answerable ones first (they carry the gains 1 + C_R).
    best = metrics.utility_auc(answerable.astype(float), answerable, np.ones(5), answerable, costs)
    assert best == pytest.approx(1.0)
    # Worst: answer everything wrongly except where refusing costs more (C_R > L_i), and put the
    # largest losses first.
    answered = ~(answerable & (costs < 2.0))
    v, b = utilities_by_hand(answered, np.zeros(5), answerable, costs, 2.0)
    worst = metrics.utility_auc(-(v - b), answered, np.zeros(5), answerable, costs)
    assert worst == pytest.approx(0.0, abs=1e-12)


def test_utility_auc_sees_costs_and_order_that_accuracy_misses():
    """Theorem 1(i): same accuracy, different error costs -> different UtilityAUC."""
    answered = np.ones(4, dtype=bool)
    correct = np.array([1, 1, 0, 0], dtype=bool)
    answerable = np.ones(4, dtype=bool)
    scores = np.array([0.9, 0.8, 0.7, 0.6])
    cheap = metrics.utility_auc(scores, answered, correct, answerable, [1, 1, 1, 1])
    costly = metrics.utility_auc(scores, answered, correct, answerable, [1, 1, 9, 9])
    assert cheap != costly
    # Putting a costly error first is worse than putting it last.
    early = metrics.utility_auc(scores[::-1], answered, correct, answerable, [1, 1, 9, 9])
    assert early < costly
    # Permuting samples together with their scores changes nothing.
    perm = [2, 0, 3, 1]
    assert metrics.utility_auc(
        scores[perm], answered[perm], correct[perm], answerable[perm], np.array([1, 1, 9, 9])[perm]
    ) == pytest.approx(costly)


def test_utility_auc_validation():
    with pytest.raises(ValueError, match="costs must be >= 0"):
        metrics.utility_auc([1], [1], [1], [1], [-1.0])
    with pytest.raises(ValueError, match="refusal_cost"):
        metrics.utility_auc([1], [1], [1], [1], [1.0], refusal_cost=-1)
    with pytest.raises(ValueError, match="answerable has 1"):
        metrics.utility_auc([1, 0], [1, 0], [1, 0], [1], [1.0, 1.0])
    with pytest.raises(ValueError, match="scores must be finite"):
        metrics.utility_auc([np.nan], [1], [1], [1], [1.0])


# --------------------------------------------------------------------------- DCS


@pytest.mark.parametrize(
    ("dist", "expected"),
    [
        # the DCS paper's Sec. 3 worked examples; options (A, B, C, D, IDK), C correct.
        ((0.31, 0.27, 0.40, 0.01, 0.01), -0.1881),  # error-hedging
        ((0.15, 0.05, 0.40, 0.01, 0.39), +0.1159),  # abstention-hedging
        ((0.25, 0.24, 0.26, 0.24, 0.01), -0.4653),  # lucky
        ((0.01, 0.01, 0.96, 0.01, 0.01), +0.9207),  # confident knowledge
    ],
)
def test_dcs_seed_examples(dist, expected):
    p_c, p_idk = dist[2], dist[4]
    p_w = dist[0] + dist[1] + dist[3]
    assert metrics.dcs(p_c, p_w, p_idk) == pytest.approx(expected, abs=5e-5)
    # Same number from per-option log-likelihoods (unnormalised: softmax must renormalise).
    ll = np.log(dist) + 3.7
    pc2, pw2, pk2 = metrics.dcs_from_log_likelihoods(ll, correct_index=2, idk_index=4)
    assert metrics.dcs(pc2, pw2, pk2) == pytest.approx(expected, abs=5e-5)


def test_dcs_vectorised_bounds_and_idk_factor():
    rng = np.random.default_rng(0)
    probs = rng.dirichlet(np.ones(5), size=1000)
    ll = np.log(probs)
    correct_index = rng.integers(0, 4, 1000)
    pc, pw, pk = metrics.dcs_from_log_likelihoods(ll, correct_index, 4)
    scores = metrics.dcs(pc, pw, pk)
    assert scores.shape == (1000,)
    assert np.all((-1 <= scores) & (scores <= 1))
    np.testing.assert_allclose(pc, probs[np.arange(1000), correct_index])
    np.testing.assert_allclose(scores, (pc - pw) * (1 - pk))  # the (1 - p_idk) factor is kept
    assert metrics.dcs(0.0, 0.0, 1.0) == 0.0
    assert metrics.dcs(0.5, 0.2, 0.3, l_c=2.0, l_w=1.0) == pytest.approx((1.0 - 0.2) * 0.7)


@pytest.mark.parametrize(
    ("args", "kwargs", "match"),
    [
        ((0.5, 0.2, 0.3), {"l_c": 1.0, "l_w": 2.0}, "l_c >= l_w"),
        ((0.5, 0.2, 0.3), {"l_w": -1.0}, "l_c >= l_w >= 0"),
        ((0.7, 0.5, 0.1), {}, "must be <= 1"),
        ((-0.1, 0.5, 0.1), {}, "p_correct must lie in"),
        ((0.1, np.nan, 0.1), {}, "p_wrong must be finite"),
        (([0.1, 0.2], [0.1, 0.2, 0.3], 0.1), {}, "same length"),
    ],
)
def test_dcs_validation(args, kwargs, match):
    with pytest.raises(ValueError, match=match):
        metrics.dcs(*args, **kwargs)


def test_dcs_from_log_likelihoods_validation():
    with pytest.raises(ValueError, match="must differ"):
        metrics.dcs_from_log_likelihoods([0.0, 0.0, 0.0], 1, 1)
    with pytest.raises(ValueError, match="idk_index"):
        metrics.dcs_from_log_likelihoods([0.0, 0.0, 0.0], 1, 3)
    with pytest.raises(ValueError, match="NaN"):
        metrics.dcs_from_log_likelihoods([0.0, np.nan, 0.0], 0, 2)
    # -inf is a legitimate zero-probability option.
    pc, pw, pk = metrics.dcs_from_log_likelihoods([0.0, -np.inf, 0.0], 0, 2)
    assert (pc, pw, pk) == pytest.approx((0.5, 0.0, 0.5))

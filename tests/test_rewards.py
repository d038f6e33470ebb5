"""The reward core: the AURC identity, ties, the theoretical weight curve, and sign sanity."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from rlsr.core.ranking import tie_averaged_weights
from rlsr.equations.rewards import (
    brier_reward,
    confidence_for_ranking,
    correctness_reward,
    format_reward,
    lifted_aurc_rewards,
    marginal_aurc_rewards,
    partial_rank_weights,
    rank_weights,
)


def aurc_from_curve(confidence, error, order):
    """AURC = mean_k R_k for one explicit ordering (most confident first), straight from the
    risk-coverage curve: R_k = error rate of the first k samples of ``order``."""
    e = np.asarray(error, dtype=float)[list(order)]
    return float(np.mean(np.cumsum(e) / np.arange(1, len(e) + 1)))


def partial_aurc_from_curve(error, order, m):
    e = np.asarray(error, dtype=float)[list(order)]
    return float(np.mean((np.cumsum(e) / np.arange(1, len(e) + 1))[:m]))


def orderings_respecting_confidence(confidence):
    """Every ordering of samples that sorts confidence descending (all tie permutations)."""
    n = len(confidence)
    for perm in itertools.permutations(range(n)):
        if all(confidence[perm[i]] >= confidence[perm[i + 1]] for i in range(n - 1)):
            yield perm


def test_rank_weights_closed_form_without_ties():
    c = np.array([0.9, 0.1, 0.5, 0.7])  # ascending ranks r = 4, 1, 2, 3
    h = [0.0, 1.0, 1.5, 1.5 + 1 / 3, 1.5 + 1 / 3 + 0.25]
    expected = [h[4] - h[0], h[4] - h[3], h[4] - h[2], h[4] - h[1]]
    np.testing.assert_allclose(rank_weights(c), expected, rtol=0, atol=1e-15)
    assert rank_weights(c).sum() == pytest.approx(4.0)


@pytest.mark.parametrize("seed", range(20))
def test_identity_mean_alpha_error_equals_aurc_random(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 300))
    conf = rng.random(n)  # continuous: no ties almost surely
    err = rng.integers(0, 2, n)
    order = np.argsort(-conf)
    assert np.mean(rank_weights(conf) * err) == pytest.approx(
        aurc_from_curve(conf, err, order), abs=1e-12
    )


def test_identity_with_ties_equals_average_over_every_tie_ordering():
    rng = np.random.default_rng(1)
    checked = 0
    for n in range(1, 8):
        for _ in range(25 if n < 7 else 6):
            conf = rng.integers(0, 3, n) / 2.0  # many ties
            err = rng.integers(0, 2, n)
            brute = np.mean(
                [aurc_from_curve(conf, err, o) for o in orderings_respecting_confidence(conf)]
            )
            assert np.mean(rank_weights(conf) * err) == pytest.approx(brute, abs=1e-12)
            checked += 1
    assert checked > 100


def test_all_tied_pool_gives_every_sample_weight_one():
    np.testing.assert_allclose(rank_weights(np.full(9, 0.5)), np.ones(9))


def test_permutation_invariance():
    rng = np.random.default_rng(2)
    conf = rng.integers(0, 5, 50) / 4
    perm = rng.permutation(50)
    np.testing.assert_allclose(rank_weights(conf)[perm], rank_weights(conf[perm]))


def test_monotone_transform_leaves_weights_unchanged():
    rng = np.random.default_rng(3)
    conf = rng.integers(1, 10, 40) / 10
    np.testing.assert_allclose(rank_weights(conf), rank_weights(np.sqrt(conf) * 3 - 1))


def test_weights_converge_to_minus_log_one_minus_beta():
    """Paper Fig. 3 (right): alpha at normalised rank beta = r/n tends to -log(1 - beta)."""
    n = 200_000
    alpha = rank_weights(np.arange(n, dtype=float))  # ascending confidence: r_i = i + 1
    for beta in (0.1, 0.25, 0.5, 0.75, 0.9, 0.99):
        r = int(beta * n)
        assert alpha[r - 1] == pytest.approx(-math.log(1 - beta), abs=1e-3)


def test_confident_errors_penalised_more_than_uncertain_ones():
    """Sec. 2.2: a confident error costs more than an uncertain one; a confident correct answer
    earns more than a lucky guess."""
    conf = np.array([0.95, 0.9, 0.2, 0.1])
    correct = np.array([False, True, True, False])
    r = lifted_aurc_rewards(correct, conf)
    assert r[0] < r[3] < 0  # confident error is the worst
    assert r[1] > r[2] > 0  # confident correct beats the lucky low-confidence guess
    # RLVR would give both correct answers the same reward.
    assert correctness_reward(correct)[1] == correctness_reward(correct)[2]


def test_lifted_rewards_sign_and_options():
    conf = np.array([0.9, 0.5, 0.1])
    alpha = rank_weights(conf)
    np.testing.assert_allclose(
        lifted_aurc_rewards([1, 0, 1], conf), [alpha[0], -alpha[1], alpha[2]]
    )
    np.testing.assert_allclose(
        lifted_aurc_rewards([1, 0, 1], conf, correct_scale=0.5),
        [0.5 * alpha[0], -alpha[1], 0.5 * alpha[2]],
    )
    capped = lifted_aurc_rewards([0, 0, 0], conf, weight_cap=1.0)
    assert capped.min() == -1.0 and np.all(capped >= -1.0)


def test_missing_confidence_ranks_as_zero_tied_with_explicit_zero():
    conf = np.array([np.nan, 0.0, 0.6])
    assert list(confidence_for_ranking(conf)) == [0.0, 0.0, 0.6]
    r = lifted_aurc_rewards([False, False, False], conf)
    assert r[0] == r[1]  # a missing confidence never ranks above a parsed one
    assert r[0] > r[2]
    assert list(confidence_for_ranking([None, 0.3])) == [0.0, 0.3]


@pytest.mark.parametrize("max_coverage", [0.1, 0.25, 0.5, 0.75, 1.0])
def test_partial_aurc_identity_with_ties(max_coverage):
    rng = np.random.default_rng(4)
    for n in range(1, 8):
        for _ in range(10):
            conf = rng.integers(0, 3, n) / 2.0
            err = rng.integers(0, 2, n)
            m = min(n, max(1, math.ceil(round(max_coverage * n, 9))))
            brute = np.mean(
                [partial_aurc_from_curve(err, o, m) for o in orderings_respecting_confidence(conf)]
            )
            w = partial_rank_weights(conf, max_coverage)
            assert np.sum(w * err) / m == pytest.approx(brute, abs=1e-12)
            assert w.sum() == pytest.approx(m)


def test_partial_with_full_coverage_is_rank_weights():
    conf = np.random.default_rng(5).random(30)
    np.testing.assert_allclose(partial_rank_weights(conf, 1.0), rank_weights(conf))
    r = lifted_aurc_rewards(np.ones(30, bool), conf, max_coverage=0.2)
    assert np.count_nonzero(r) == 6  # only the 6 most confident carry the rank signal


def test_tie_averaged_weights_matches_brute_force_expectation():
    rng = np.random.default_rng(6)
    for n in range(1, 7):
        conf = rng.integers(0, 2, n).astype(float)
        pos_w = rng.random(n)
        orders = list(orderings_respecting_confidence(conf))
        brute = np.zeros(n)
        for o in orders:
            for p, i in enumerate(o):
                brute[i] += pos_w[p] / len(orders)
        np.testing.assert_allclose(tie_averaged_weights(conf, pos_w), brute, atol=1e-12)


def test_brier_correctness_format():
    np.testing.assert_allclose(brier_reward([1, 0], [0.8, 0.8]), [1 - 0.04, 1 - 0.64])
    assert list(brier_reward([1, 1], [np.nan, 0.5], format_ok=[True, False])) == [0.0, 0.0]
    assert list(format_reward([True, False])) == [1.0, 0.0]
    assert list(correctness_reward(np.array([1, 0]))) == [1.0, 0.0]


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: rank_weights([[0.1, 0.2]]), "1-D"),
        (lambda: rank_weights([0.1, float("nan")]), "NaN"),
        (lambda: lifted_aurc_rewards([1, 0], [0.5]), "one value per completion"),
        (lambda: lifted_aurc_rewards([1], [1.5]), r"\[0, 1\]"),
        (lambda: lifted_aurc_rewards([2], [0.5]), "correct"),
        (lambda: lifted_aurc_rewards([1], [0.5], max_coverage=0.0), "max_coverage"),
        (lambda: lifted_aurc_rewards([1], [0.5], weight_cap=-1), "weight_cap"),
        # Refused, not accepted silently (c > 1 read as 1, NaN giving NaN rewards, an unparsed
        # percentage 85 giving a Brier reward of 1 - 84^2).
        (lambda: lifted_aurc_rewards([1], [0.5], max_coverage=1.5), "max_coverage"),
        (lambda: lifted_aurc_rewards([1], [0.5], weight_cap=float("nan")), "weight_cap"),
        (lambda: lifted_aurc_rewards([1], [0.5], correct_scale=float("nan")), "correct_scale"),
        (lambda: brier_reward([1], [85.0]), r"\[0, 1\]"),
        (lambda: brier_reward([1], [-0.1]), r"\[0, 1\]"),
    ],
)
def test_bad_input_gives_clear_errors(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_empty_and_singleton_pools():
    assert rank_weights([]).shape == (0,)
    assert rank_weights([0.3]).tolist() == [1.0]
    assert lifted_aurc_rewards([False], [0.3]).tolist() == [-1.0]


# --------------------------------------------------------------------------- marginal credit


def _pooled_lifted_total(correct, confidence, lam, cap, max_coverage) -> float:
    """T = sum of lifted rewards, from the definition: every ordering of the tied completions
    (most confident first), the position weights H_m - H_{p-1} (0 past m = ceil(c n)) capped per
    position, averaged over the orderings per completion, then signed (+lambda / -1)."""
    n = len(confidence)
    m = n if max_coverage == 1.0 else min(n, max(1, math.ceil(round(max_coverage * n, 9))))
    h = [sum(1.0 / k for k in range(1, j + 1)) for j in range(n + 1)]
    w = [h[m] - h[p - 1] if p <= m else 0.0 for p in range(1, n + 1)]
    w = [x if cap is None else min(x, cap) for x in w]
    orders = list(orderings_respecting_confidence(confidence))
    alpha = [0.0] * n
    for order in orders:
        for pos, i in enumerate(order):
            alpha[i] += w[pos] / len(orders)
    total = 0.0
    for i in range(n):
        a = alpha[i]
        total += lam * a if correct[i] else -a
    return total


def _brute_marginal(correct, confidence, lam=1.0, cap=None, max_coverage=1.0):
    """D_j = T(pool) - T(pool with j alone below everyone); a missing confidence ranks as 0."""
    conf = [0.0 if c != c else float(c) for c in confidence]
    base = _pooled_lifted_total(correct, conf, lam, cap, max_coverage)
    out = []
    for j in range(len(conf)):
        moved = [-1.0 if k == j else c for k, c in enumerate(conf)]
        out.append(base - _pooled_lifted_total(correct, moved, lam, cap, max_coverage))
    return np.array(out)


@pytest.mark.parametrize(
    "lam,cap,max_coverage",
    [(1.0, None, 1.0), (0.0, None, 1.0), (1.5, 1.0, 1.0), (1.0, None, 0.5), (2.0, 0.8, 0.4)],
)
def test_marginal_credit_equals_moving_each_completion_below_everyone(lam, cap, max_coverage):
    """Every pool of up to 4 completions over confidences {missing, 0, 0.5, 1} (ties, NaN tied
    with an explicit 0) and every verdict pattern, against the definition by brute force."""
    values = [np.nan, 0.0, 0.5, 1.0]
    checked = 0
    for n in range(1, 5):
        for conf in itertools.product(values, repeat=n):
            for correct in itertools.product([False, True], repeat=n):
                got = marginal_aurc_rewards(
                    list(correct), list(conf), correct_scale=lam, weight_cap=cap,
                    max_coverage=max_coverage,
                )  # fmt: skip
                want = _brute_marginal(correct, conf, lam, cap, max_coverage)
                np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)
            checked += 1
    assert checked == 4 + 16 + 64 + 256


def test_marginal_credit_is_lambda_free_up_to_scale_without_a_cap():
    """Without a cap sum_i alpha_i is the same for every order, so D(lambda) = (1+lambda) D(0):
    lifted and plain AURC teach the same thing under marginal credit."""
    rng = np.random.default_rng(3)
    for _ in range(50):
        n = int(rng.integers(2, 40))
        conf = rng.choice([np.nan, 0.0, 0.3, 0.5, 0.7, 1.0], size=n)
        correct = rng.random(n) < 0.5
        plain = marginal_aurc_rewards(correct, conf, correct_scale=0.0)
        for lam in (0.5, 1.0, 3.0):
            np.testing.assert_allclose(
                marginal_aurc_rewards(correct, conf, correct_scale=lam), (1 + lam) * plain,
                atol=1e-12,
            )  # fmt: skip


def _expected_reward_by_slot(reward, p_self, others_p, others_conf, lam=1.0):
    """E[reward of one completion] for each confidence slot it may take among ``others``
    (between consecutive distinct confidences), exact over every verdict of the pool."""
    n = len(others_p) + 1
    slots = (
        [1.0] + [(a + b) / 2 for a, b in zip(others_conf, others_conf[1:], strict=False)] + [0.0]
    )
    out = []
    for slot in slots:
        conf = [slot, *others_conf]
        e = 0.0
        for verdict in itertools.product([False, True], repeat=n):
            prob = 1.0
            for v, p in zip(verdict, [p_self, *others_p], strict=True):
                prob *= p if v else 1 - p
            e += prob * reward(list(verdict), conf, correct_scale=lam)[0]
        out.append(e)
    return np.array(out)


def test_marginal_best_response_orders_by_p_where_lifted_is_a_threshold():
    """The incentive (docs/methods.md): four other completions right with p = 0.9, 0.7, 0.4,
    0.2 sit at confidences 0.8 > 0.6 > 0.4 > 0.2 (already ordered by p). A completion right
    with p slots in where its marginal credit is largest: just below exactly those with a
    larger p. Its lifted reward instead goes to the top when p > 1/(1+lambda), else the
    bottom."""
    others_p = [0.9, 0.7, 0.4, 0.2]
    others_conf = [0.8, 0.6, 0.4, 0.2]
    for p_self, slot in [(0.95, 0), (0.8, 1), (0.55, 2), (0.3, 3), (0.1, 4)]:
        marginal = _expected_reward_by_slot(marginal_aurc_rewards, p_self, others_p, others_conf)
        assert int(np.argmax(marginal)) == slot, (p_self, marginal)
        lifted = _expected_reward_by_slot(lifted_aurc_rewards, p_self, others_p, others_conf)
        assert int(np.argmax(lifted)) == (0 if p_self > 0.5 else 4), (p_self, lifted)
    # lambda = 0 (plain AURC): the lifted best response is the bottom for every p < 1
    plain = _expected_reward_by_slot(lifted_aurc_rewards, 0.95, others_p, others_conf, lam=0.0)
    assert int(np.argmax(plain)) == 4


def _expected_credit(reward, p_all, conf, lam, cap, max_coverage=1.0):
    """E[reward of completion 0], exact over every verdict (completion i right w.p. p_all[i])."""
    e = 0.0
    for verdict in itertools.product([False, True], repeat=len(p_all)):
        prob = math.prod(p if v else 1 - p for v, p in zip(verdict, p_all, strict=True))
        r = reward(
            list(verdict), conf, correct_scale=lam, weight_cap=cap, max_coverage=max_coverage
        )
        e += prob * r[0]
    return e


def _placements(others_conf):
    """Every place a completion can take among others at distinct confidences ``others_conf``
    (descending): strictly above, tied with each, strictly between, strictly below. Returns
    ``(confidence, is_strict, slot)``; ``slot`` counts the others strictly above it."""
    out = [(1.0, True, 0)]
    for k, c in enumerate(others_conf):
        out.append((c, False, None))
        below = others_conf[k + 1] if k + 1 < len(others_conf) else -0.5
        out.append(((c + below) / 2 if k + 1 < len(others_conf) else -0.5, True, k + 1))
    # "below everyone" at -0.5 is outside [0, 1]: shift every confidence into range
    return [((c + 0.5) / 1.5, strict, slot) for c, strict, slot in out]


def test_weight_cap_counterexample_a_tie_no_longer_beats_the_strict_order():
    """The weight cap is applied per position before the tie average. Others right with
    p = confidence = 0.7, 0.8, 0.9; the completion right with p = 0.95; lambda = 1;
    weight_cap = 1.5. Exact over the 16 verdicts, the tie is the mean of the two strict
    placements it stands for (0.358 and 0.317), 0.3375. Catches capping after the tie average,
    which pays 0.358 strictly above everyone and 0.692 tied with the 0.9 completion (a tie
    beating the strict order)."""
    p_all = [0.95, 0.9, 0.8, 0.7]
    others = [0.9, 0.8, 0.7]
    above = _expected_credit(marginal_aurc_rewards, p_all, [1.0, *others], 1.0, 1.5)
    tied = _expected_credit(marginal_aurc_rewards, p_all, [0.9, *others], 1.0, 1.5)
    between = _expected_credit(marginal_aurc_rewards, p_all, [0.85, *others], 1.0, 1.5)
    assert above == pytest.approx(0.358333, abs=1e-6)
    assert between == pytest.approx(0.316667, abs=1e-6)
    assert tied == pytest.approx((above + between) / 2, abs=1e-12)
    # The same numbers from the definition (brute-force orderings, cap per position).
    for c, want in [(1.0, above), (0.9, tied), (0.85, between)]:
        got = _expected_credit(
            lambda v, cf, **kw: _brute_marginal(
                v, cf, kw["correct_scale"], kw["weight_cap"], kw["max_coverage"]
            ),
            p_all, [c, *others], 1.0, 1.5,
        )  # fmt: skip
        assert got == pytest.approx(want, abs=1e-12)
    # Pooled total: four sure-right completions sorted vs all tied.
    sorted_total = lifted_aurc_rewards([1] * 4, [0.9, 0.8, 0.7, 0.6], weight_cap=1.5).sum()
    tied_total = lifted_aurc_rewards([1] * 4, [0.5] * 4, weight_cap=1.5).sum()
    assert sorted_total == pytest.approx(1.5 + 13 / 12 + 7 / 12 + 1 / 4)
    assert tied_total == pytest.approx(sorted_total, abs=1e-12)


@pytest.mark.parametrize("cap,max_coverage", [(None, 1.0), (1.5, 1.0), (0.6, 1.0), (1.0, 0.5)])
def test_marginal_best_response_no_tie_beats_strict_and_monotone_in_p(cap, max_coverage):
    """Exhaustive on small pools: 1-3 others with reliabilities from {0.1, 0.4, 0.6, 0.9} at
    confidences ordered by their reliability, every placement of the completion (strict or tied),
    its reliability p on a grid. (a) No tie earns more than the best strict placement (a tie is
    the mean of the strict placements it stands for). (b) The best strict placements form a set
    that never moves down as p grows (Topkis: increasing differences in (confidence, p)).
    (c) Without a cap and at full coverage, the best response is unique: strictly above exactly
    the others with a smaller reliability; with a cap or partial coverage, that placement is
    still among the best (the rearrangement inequality: capped weights still never increase
    down the ranking)."""
    grid = [0.05, 0.25, 0.5, 0.65, 0.85, 0.99]
    checked = 0
    for k in range(1, 4):
        for others_p in itertools.combinations([0.9, 0.6, 0.4, 0.1], k):
            others_conf = [0.8 - 0.2 * i for i in range(k)]  # distinct, ordered like others_p
            places = _placements(others_conf)
            prev_lo = prev_hi = -1
            for p in grid:
                p_all = [p, *others_p]
                credit = {}
                for c, strict, slot in places:
                    conf = [c, *[(x + 0.5) / 1.5 for x in others_conf]]
                    credit[(c, strict, slot)] = _expected_credit(
                        marginal_aurc_rewards, p_all, conf, 1.0, cap, max_coverage
                    )
                best_strict = max(v for (_, s, _), v in credit.items() if s)
                best_tie = max((v for (_, s, _), v in credit.items() if not s), default=-np.inf)
                assert best_tie <= best_strict + 1e-12, (others_p, p, credit)
                best = [slot for (_, s, slot), v in credit.items() if s and v >= best_strict - 1e-9]
                lo, hi = min(best), max(best)
                # slot counts others above it: a higher p never moves the best set down
                if prev_lo >= 0:
                    assert lo <= prev_lo and hi <= prev_hi, (others_p, p, best)
                prev_lo, prev_hi = lo, hi
                by_p = sum(1 for q in others_p if q > p)  # strictly above those with smaller p
                assert by_p in best, (others_p, p, best)
                if cap is None and max_coverage == 1.0:
                    assert best == [by_p], (others_p, p, best)
                checked += 1
    assert checked == 6 * (4 + 6 + 4)


def test_weight_cap_pooled_total_never_rewards_collapsing_confidences():
    """Expected pooled total E[T] over every weak order (ties allowed) of up to 4 completions with
    reliabilities p: with the cap per position, no confidence assignment beats sorting by p."""
    for cap in [None, 1.5, 0.8]:
        for p_all in [(0.95, 0.9, 0.8, 0.7), (0.9, 0.6, 0.3), (0.99, 0.99, 0.5, 0.2)]:
            n = len(p_all)
            totals = {}
            for conf in itertools.product([0.2, 0.4, 0.6, 0.8], repeat=n):
                e = 0.0
                for verdict in itertools.product([False, True], repeat=n):
                    prob = math.prod(q if v else 1 - q for v, q in zip(verdict, p_all, strict=True))
                    e += prob * lifted_aurc_rewards(list(verdict), list(conf), weight_cap=cap).sum()
                totals[conf] = e
            sorted_by_p = (0.8, 0.6, 0.4, 0.2)[:n]  # p_all is non-increasing
            assert max(totals.values()) <= totals[sorted_by_p] + 1e-12, (cap, p_all)


def test_group_mean_cancels_a_completions_own_marginal_credit():
    """docs/methods.md, "Why group std scaling breaks it": with D_k = T - T_-k, the advantage
    with the group mean is adv_j = -(1 - 1/G) T_-j + (1/G) sum_{k != j in j's group} T_-k, T_-k
    the pooled total with k moved alone below everyone (brute force over orderings)."""
    rng = np.random.default_rng(3)
    for lam, cap in [(1.0, None), (0.5, 1.2)]:
        for _ in range(20):
            G, n_groups = 3, 2
            n = G * n_groups
            conf = list(rng.choice([0.1, 0.3, 0.5, 0.7, 0.9], size=n))  # ties included
            correct = list(rng.random(n) < 0.6)
            d = marginal_aurc_rewards(correct, conf, correct_scale=lam, weight_cap=cap)
            moved = [
                _pooled_lifted_total(
                    correct, [-1.0 if k == j else c for k, c in enumerate(conf)], lam, cap, 1.0
                )
                for j in range(n)
            ]
            for g in range(n_groups):
                idx = range(g * G, (g + 1) * G)
                mean = np.mean([d[k] for k in idx])
                for j in idx:
                    want = -(1 - 1 / G) * moved[j] + sum(moved[k] for k in idx if k != j) / G
                    assert d[j] - mean == pytest.approx(want, abs=1e-12)


def test_marginal_credit_bad_input_names_the_field():
    with pytest.raises(ValueError, match="weight_cap"):
        marginal_aurc_rewards([True], [0.5], weight_cap=0.0)
    with pytest.raises(ValueError, match="max_coverage"):
        marginal_aurc_rewards([True], [0.5], max_coverage=0.0)
    with pytest.raises(ValueError, match="one value per completion"):
        marginal_aurc_rewards([True, False], [0.5])
    assert marginal_aurc_rewards([], []).shape == (0,)
    # one completion: moving it below everyone changes nothing
    assert marginal_aurc_rewards([True], [0.9]).tolist() == [0.0]

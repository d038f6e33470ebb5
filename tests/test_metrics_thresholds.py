"""Deployment thresholds (RLSR Sec. C.6.3, Tab. 3) and the risk-controlled variant."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import binom

from rlsr.metrics import selective as metrics
from rlsr.metrics.thresholds import clopper_pearson_upper, default_min_selected


def test_plain_rule_is_the_smallest_threshold_meeting_the_target():
    conf = [0.95, 0.9, 0.8, 0.8, 0.7, 0.6, 0.5]
    correct = [1, 0, 1, 1, 0, 1, 0]
    # acc at thresholds 0.95, 0.9, 0.8, 0.7, 0.6, 0.5: 1, 1/2, 3/4, 3/5, 4/6, 4/7.
    sel = metrics.select_threshold(conf, correct, 0.65)
    assert sel.feasible and sel.threshold == 0.6
    assert sel.coverage == pytest.approx(6 / 7) and sel.accuracy == pytest.approx(4 / 6)
    assert sel.n_selected == 6
    # A failing higher threshold (0.9: 50%) does not stop the plain rule; 0.7 (60%) is skipped.
    assert metrics.select_threshold(conf, correct, 0.75).threshold == 0.8
    assert metrics.select_threshold(conf, correct, 1.0).threshold == 0.95
    out = metrics.apply_threshold(conf, correct, sel)
    assert (out.coverage, out.accuracy, out.n_selected) == (sel.coverage, sel.accuracy, 6)
    assert metrics.apply_threshold(conf, correct, 0.8).accuracy == pytest.approx(3 / 4)


def test_infeasible_target_abstains_everywhere():
    sel = metrics.select_threshold([0.9, 0.8], [0, 0], 0.5)
    assert not sel.feasible and sel.threshold == math.inf
    out = metrics.apply_threshold([0.9, 0.8], [1, 1], sel)
    assert out.coverage == 0.0 and out.n_selected == 0 and math.isnan(out.accuracy)
    guarded = metrics.select_threshold([0.9, 0.8], [1, 1], 0.9, method="clopper_pearson")
    assert not guarded.feasible  # two samples can never certify 90% at delta = 0.1


def test_clopper_pearson_upper_bound_definition():
    # The upper bound U solves P(Binom(n, U) <= k) = delta.
    for k, n in [(0, 10), (3, 20), (17, 40)]:
        u = float(clopper_pearson_upper(k, n, 0.05))
        assert binom.cdf(k, n, u) == pytest.approx(0.05, abs=1e-9)
    assert float(clopper_pearson_upper(5, 5, 0.05)) == 1.0
    assert float(clopper_pearson_upper(0, 10, 0.1)) == pytest.approx(1 - 0.1 ** (1 / 10))


def test_guarded_threshold_is_never_looser_than_plain_on_monotone_data():
    conf = np.linspace(1, 0, 2000)
    correct = np.random.default_rng(0).random(2000) < 0.3 + 0.6 * conf
    plain = metrics.select_threshold(conf, correct, 0.75)
    guarded = metrics.select_threshold(conf, correct, 0.75, method="clopper_pearson", delta=0.1)
    assert guarded.feasible and guarded.threshold >= plain.threshold
    assert guarded.risk_upper_bound <= 0.25 and guarded.delta == 0.1


def test_guarded_threshold_holds_target_at_promised_rate_plain_does_not():
    """Simulation: s ~ U(0, 1), P(correct | s) = 0.3 + 0.6 s, so the population selective accuracy
    of {s >= t} is 0.6 + 0.3 t and the target 75% holds iff t >= 0.5 (paper's MedQA-like setup:
    full accuracy ~60%, validation n = 1272)."""
    rng = np.random.default_rng(2026)
    trials, n, target, delta = 300, 1272, 0.75, 0.1
    plain_miss = guarded_miss = guarded_feasible = 0
    coverages = []
    for _ in range(trials):
        s = rng.random(n)
        correct = rng.random(n) < 0.3 + 0.6 * s
        plain = metrics.select_threshold(s, correct, target)
        guarded = metrics.select_threshold(
            s, correct, target, method="clopper_pearson", delta=delta
        )
        plain_miss += 0.6 + 0.3 * plain.threshold < target
        if guarded.feasible:
            guarded_feasible += 1
            guarded_miss += 0.6 + 0.3 * guarded.threshold < target
            coverages.append(1 - guarded.threshold)
    slack = 3 * math.sqrt(delta * (1 - delta) / trials)
    assert guarded_miss / trials <= delta + slack
    assert plain_miss / trials > 0.3  # the paper's rule overshoots often (RLCR: 81.0% -> 72.2%)
    # The guard is not vacuous: it almost always certifies a useful threshold.
    assert guarded_feasible / trials > 0.9
    assert np.median(coverages) > 0.3  # the oracle threshold 0.5 has coverage 0.5


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"target_accuracy": 1.5}, "target_accuracy"),
        ({"target_accuracy": 0.5, "method": "bonferroni"}, "method"),
        ({"target_accuracy": 0.5, "method": "clopper_pearson", "delta": 0.0}, "delta"),
    ],
)
def test_bad_threshold_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        metrics.select_threshold([0.2, 0.3], [1, 0], **kwargs)
    with pytest.raises(ValueError, match="val_correct"):
        metrics.select_threshold([0.2, 0.3], [1, 2], 0.5)


def test_guarded_threshold_with_target_zero_accepts_everything():
    # With max_risk = 1 an all-wrong top group is accepted: its Clopper-Pearson bound, 1, is
    # within the budget (the binomial-cdf duality alone would reject it: cdf(m; m, 1) = 1 > delta).
    conf, correct = [0.9, 0.8, 0.7], [0, 0, 1]
    guarded = metrics.select_threshold(conf, correct, 0.0, method="clopper_pearson", min_selected=1)
    plain = metrics.select_threshold(conf, correct, 0.0)
    assert guarded.feasible and guarded.threshold == plain.threshold == 0.7
    assert guarded.n_selected == 3 and guarded.risk_upper_bound <= 1.0


def test_guarded_threshold_on_a_small_clean_validation_set():
    # With n below the power-based start (64 for 75% at delta 0.1), 50 all-correct samples are
    # feasible; a default start of n + 1 would declare them infeasible (abstain everywhere).
    sel = metrics.select_threshold([0.5] * 50, [1] * 50, 0.75, method="clopper_pearson")
    assert sel.feasible and sel.n_selected == 50 and sel.risk_upper_bound <= 0.25
    # The fallback start is where zero errors first certify: (0.75)^m <= 0.1 from m = 9 on.
    assert default_min_selected(0.75, 0.1, 50) == 9
    assert default_min_selected(0.75, 0.1, 8) == 9  # 8 samples can never certify: n + 1
    assert default_min_selected(0.75, 0.1, 1272) == 64  # large n: unchanged power rule

"""Deployment thresholds for selective prediction (RLSR Sec. 4.2, C.6.3; re-exported by ``rlsr.metrics.selective``).

``select_threshold`` picks tau on validation data, ``apply_threshold`` reports what tau does on
test data (paper Tab. 3: Val./Test coverage and accuracy of {s >= tau}).

Two methods:

* ``"plain"`` — the paper's rule, tau = min{t : acc({s >= t}) >= target} on validation data.
  It picks the threshold whose *observed* accuracy just clears the target, so on new data it
  misses the target about half the time or more (RLCR in Tab. 3: 81.0% val -> 72.2% test).
* ``"clopper_pearson"`` — risk-controlled: accept tau only if the one-sided Clopper-Pearson
  upper bound (level 1 - delta) on the selective error rate of {s >= tau} is <= 1 - target,
  testing thresholds by fixed-sequence testing from the most conservative (highest) one down
  and stopping at the first failure. Under the usual i.i.d. assumption, the selective accuracy
  on new data at the returned tau is >= target with probability >= 1 - delta (no multiplicity
  correction is needed because the tests are run in a fixed order and stop at the first
  non-rejection). Tested on simulated data in tests/test_metrics_thresholds.py.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
from scipy.stats import beta as beta_dist
from scipy.stats import binom

from rlsr.core.metric_inputs import bool_array, check_fraction, check_same_length, scores_array
from rlsr.core.ranking import coverage_count, descending_order

__all__ = [
    "THRESHOLD_METHODS",
    "ThresholdSelection",
    "ThresholdOutcome",
    "clopper_pearson_upper",
    "clopper_pearson_interval",
    "default_min_selected",
    "select_threshold",
    "apply_threshold",
    "ThresholdCandidates",
    "threshold_candidates",
    "coverage_at_risk",
    "risk_at_coverage",
]

THRESHOLD_METHODS = ("plain", "clopper_pearson")


@dataclass(frozen=True)
class ThresholdSelection:
    """The chosen tau and what it does on the validation data.

    If no threshold meets the target (``feasible`` is False) ``threshold`` is +inf: applying it
    selects nothing, i.e. the safe deployment abstains everywhere.
    """

    threshold: float
    coverage: float  # fraction of validation samples with confidence >= threshold
    accuracy: float  # accuracy on them (NaN if none)
    n_selected: int
    feasible: bool
    target_accuracy: float
    method: str
    delta: float | None  # failure probability of the risk-controlled method, None for "plain"
    risk_upper_bound: float  # Clopper-Pearson bound on selective error at tau (NaN for "plain")


@dataclass(frozen=True)
class ThresholdOutcome:
    coverage: float
    accuracy: float  # NaN when nothing is selected
    n_selected: int


def clopper_pearson_upper(errors, n, delta: float) -> np.ndarray:
    """One-sided (1 - delta) Clopper-Pearson upper bound on an error rate: Beta(1-delta; k+1, n-k).

    The exact binomial bound of Clopper & Pearson (1934): the U with P(Binom(n, U) <= k) = delta.

    Equals 1 when k = n. ``errors`` and ``n`` broadcast; n must be >= 1.
    """
    k = np.asarray(errors, dtype=np.float64)
    m = np.asarray(n, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        bound = beta_dist.ppf(1.0 - delta, k + 1.0, np.maximum(m - k, 1e-300))
    return np.where(k >= m, 1.0, bound)


def clopper_pearson_interval(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """Two-sided exact (Clopper & Pearson 1934) interval for a binomial proportion k / n.

    With a = (1 - level) / 2: lower = Beta(a; k, n - k + 1) (0 when k = 0), the L with
    P(Binom(n, L) >= k) = a; upper = Beta(1 - a; k + 1, n - k) (1 when k = n), the U with
    P(Binom(n, U) <= k) = a. ``rlsr serve-report`` puts the realised coverage of a deployment in
    this interval. n must be >= 1.
    """
    if n < 1 or not 0 <= k <= n:
        raise ValueError(f"need 0 <= k <= n and n >= 1; got k={k}, n={n}.")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1); got {level!r}.")
    a = (1.0 - level) / 2.0
    lower = 0.0 if k == 0 else float(beta_dist.ppf(a, k, n - k + 1))
    upper = 1.0 if k == n else float(beta_dist.ppf(1.0 - a, k + 1, n - k))
    return lower, upper


@functools.lru_cache(maxsize=256)
def default_min_selected(target_accuracy: float, delta: float, n: int, power: float = 0.9) -> int:
    """Where fixed-sequence testing starts: the smallest m at which the Clopper-Pearson test
    certifies, with probability >= ``power``, a set whose true error rate is half the budget,
    (1 - target) / 2. Smaller sets are skipped: the top few samples almost never certify the
    target, and one chance failure there would end the whole sequence (75% target, delta 0.1:
    m = 64). If no m <= n reaches that power (a small validation set), the start is the smallest
    m at which a set with zero errors could be certified at all, so a small but clean validation
    set is not declared infeasible outright; n + 1 (nothing testable) only if even n cannot be.
    Depends only on (target, delta, n), never on the outcomes.
    """
    max_risk = 1.0 - target_accuracy
    if max_risk <= 0.0:
        return 1  # nothing can be certified; the first test fails anyway
    if max_risk >= 1.0:
        return 1
    # Search in doubling blocks: the answer is usually small, n may be 10^6.
    low = 1
    first_certifiable = n + 1
    while low <= n:
        m = np.arange(low, min(n, 2 * low + 1023) + 1)
        # Duality: the CP upper bound at k errors is <= max_risk iff
        # P(Binom(m, max_risk) <= k) <= delta; k_max is the largest such k (-1 if none).
        k = binom.ppf(delta, m, max_risk)
        k_max = np.where(binom.cdf(k, m, max_risk) <= delta, k, k - 1)
        pass_prob = np.where(k_max >= 0, binom.cdf(k_max, m, max_risk / 2.0), 0.0)
        ok = np.flatnonzero(pass_prob >= power)
        if ok.size:
            return int(m[ok[0]])
        certifiable = np.flatnonzero(k_max >= 0)
        if certifiable.size and first_certifiable > n:
            first_certifiable = int(m[certifiable[0]])
        low = int(m[-1]) + 1
    return first_certifiable


def _passes_fixed_sequence(errors: np.ndarray, counts: np.ndarray, max_risk: float, delta: float):
    """Number of leading candidates whose CP bound is <= max_risk (fixed-sequence testing).

    Uses the duality CP_upper(k, m) <= max_risk  <=>  P(Binom(m, max_risk) <= k) <= delta, and
    evaluates in doubling blocks so that the scan stops soon after the first failure.
    """
    total = errors.shape[0]
    if max_risk >= 1.0:
        return total  # target 0: every bound is <= 1 (the duality fails at k = m, where cdf = 1)
    start, block = 0, 256
    while start < total:
        stop = min(total, start + block)
        ok = binom.cdf(errors[start:stop], counts[start:stop], max_risk) <= delta
        if not ok.all():
            return start + int(np.argmin(ok))
        start, block = stop, 2 * block
    return total


class ThresholdCandidates(NamedTuple):
    """Every selection a threshold can make: for each distinct confidence t, descending, the set
    {s >= t}. Tied samples are selected together, so a threshold never splits a tie."""

    thresholds: np.ndarray  # the distinct confidences, descending
    selected: np.ndarray  # |{s >= t}| (int)
    n_correct: np.ndarray  # correct samples in {s >= t} (int)

    def coverage_at_risk(self, target_risk: float) -> float:
        """``coverage_at_risk`` of these samples (``target_risk`` already checked)."""
        g = _plain_index(self.n_correct / self.selected, 1.0 - target_risk)
        return 0.0 if g is None else float(self.selected[g] / self.selected[-1])

    def risk_at_coverage(self, target_coverage: float) -> float:
        """``risk_at_coverage`` of these samples (``target_coverage`` already checked)."""
        m = coverage_count(target_coverage, int(self.selected[-1]))
        g = int(np.searchsorted(self.selected, m, side="left"))
        return float((self.selected[g] - self.n_correct[g]) / self.selected[g])


def threshold_candidates(confidence, correct) -> ThresholdCandidates:
    """The ``ThresholdCandidates`` of one set of samples (at least one): one sort, O(n log n)."""
    conf = scores_array(confidence, "confidence")
    ok = bool_array(correct, "correct")
    check_same_length(confidence=conf, correct=ok)
    return _candidates(conf, ok)


def _candidates(conf: np.ndarray, ok: np.ndarray) -> ThresholdCandidates:
    order, starts = descending_order(conf)
    ends = np.append(starts[1:], conf.shape[0])  # one past the last member of each tie group
    return ThresholdCandidates(conf[order][starts], ends, np.cumsum(ok[order])[ends - 1])


def _plain_index(accuracy: np.ndarray, target: float) -> int | None:
    """The paper's rule (Sec. C.6.3): the last (lowest-threshold, largest) candidate whose
    observed accuracy reaches ``target``; None when none does."""
    meets = np.flatnonzero(accuracy >= target - 1e-12)
    return int(meets[-1]) if meets.size else None


def _infeasible(target: float, method: str, delta: float | None) -> ThresholdSelection:
    return ThresholdSelection(math.inf, 0.0, math.nan, 0, False, target, method, delta, math.nan)


def select_threshold(
    val_confidence,
    val_correct,
    target_accuracy: float,
    *,
    method: str = "plain",
    delta: float = 0.1,
    min_selected: int | None = None,
) -> ThresholdSelection:
    """Choose tau on validation data so that {confidence >= tau} reaches ``target_accuracy``.

    Candidates are the distinct validation confidences (tied samples are selected together).

    ``method="plain"`` (RLSR Sec. C.6.3): tau = min{t : acc({s >= t}) >= target}, i.e. the lowest
    candidate whose observed accuracy reaches the target (largest coverage), even if some higher
    candidate falls short.

    ``method="clopper_pearson"``: candidates are visited from the highest down, skipping those
    selecting fewer than ``min_selected`` samples (default ``default_min_selected``: 64 for a 75%
    target at delta = 0.1); each is accepted while the (1 - delta) Clopper-Pearson upper bound on
    its selective error is <= 1 - target, and the sequence stops at the first rejection. tau is
    the last accepted candidate.
    """
    conf = scores_array(val_confidence, "val_confidence")
    ok = bool_array(val_correct, "val_correct")
    n = check_same_length(val_confidence=conf, val_correct=ok)
    target = check_fraction(target_accuracy, "target_accuracy", open_left=False)
    if method not in THRESHOLD_METHODS:
        raise ValueError(f"method must be one of {THRESHOLD_METHODS}; got {method!r}.")

    thresholds, ends, n_correct = _candidates(conf, ok)
    accuracy = n_correct / ends

    if method == "plain":
        g = _plain_index(accuracy, target)
        if g is None:
            return _infeasible(target, method, None)
        return ThresholdSelection(
            float(thresholds[g]), float(ends[g] / n), float(accuracy[g]), int(ends[g]), True,
            target, method, None, math.nan,
        )  # fmt: skip

    if not (0.0 < delta < 1.0):
        raise ValueError(f"delta must be in (0, 1); got {delta!r}.")
    max_risk = 1.0 - target
    if min_selected is None:
        min_selected = default_min_selected(target, delta, n)
    testable = np.flatnonzero(ends >= max(1, int(min_selected)))
    errors = ends - n_correct
    n_passed = _passes_fixed_sequence(errors[testable], ends[testable], max_risk, delta)
    if n_passed == 0:
        return _infeasible(target, method, delta)
    g = testable[n_passed - 1]
    bound = float(clopper_pearson_upper(errors[g], ends[g], delta))
    return ThresholdSelection(
        float(thresholds[g]), float(ends[g] / n), float(accuracy[g]), int(ends[g]), True,
        target, method, float(delta), bound,
    )  # fmt: skip


def apply_threshold(confidence, correct, threshold) -> ThresholdOutcome:
    """Coverage and accuracy of {confidence >= threshold} (RLSR Tab. 3 "Test Cov./Acc.").

    ``threshold`` is a float or a ``ThresholdSelection``. Accuracy is NaN if nothing is selected.
    """
    conf = scores_array(confidence, "confidence")
    ok = bool_array(correct, "correct")
    n = check_same_length(confidence=conf, correct=ok)
    tau = float(getattr(threshold, "threshold", threshold))
    if math.isnan(tau):
        raise ValueError("threshold is NaN; pass a number or a ThresholdSelection.")
    selected = conf >= tau
    k = int(np.count_nonzero(selected))
    accuracy = float(np.count_nonzero(ok & selected) / k) if k else math.nan
    return ThresholdOutcome(k / n, accuracy, k)


def coverage_at_risk(confidence, correct, target_risk: float) -> float:
    """Coverage at risk r: the largest coverage |{s >= t}| / n over thresholds t whose selective
    risk (error rate on {s >= t}) is <= r (Geifman & El-Yaniv 2017, "Selective Classification for
    Deep Neural Networks", arXiv:1705.08500, Sec. 3).

    The candidates and rule of ``select_threshold(..., 1 - r, method="plain")`` (the same code):
    t ranges over the distinct confidences, tied samples are selected together, and a lower t
    that meets the risk wins even if a higher one does not. When no t meets it, the answer is
    0.0, the coverage of abstaining everywhere (threshold +inf). NaN for zero samples.
    """
    conf = scores_array(confidence, "confidence", allow_empty=True)
    ok = bool_array(correct, "correct")
    n = check_same_length(confidence=conf, correct=ok)
    risk = check_fraction(target_risk, "target_risk", open_left=False)
    if n == 0:
        return math.nan
    return _candidates(conf, ok).coverage_at_risk(risk)


def risk_at_coverage(confidence, correct, target_coverage: float) -> float:
    """Risk at coverage c: the error rate of {s >= t} for the highest threshold t that selects
    at least m = ceil(c * n) samples (``coverage_count``, at least 1), i.e. the smallest
    threshold selection covering c (Geifman & El-Yaniv 2017, arXiv:1705.08500, Sec. 3).

    A threshold never splits tied confidences, so when a tie group straddles the m-th position
    the whole group is selected and the coverage reached exceeds c; ``1 - accuracy_at_coverage``
    instead takes exactly m samples with the tie at the cut averaged. NaN for zero samples.
    """
    conf = scores_array(confidence, "confidence", allow_empty=True)
    ok = bool_array(correct, "correct")
    n = check_same_length(confidence=conf, correct=ok)
    coverage = check_fraction(target_coverage, "target_coverage")
    if n == 0:
        return math.nan
    return _candidates(conf, ok).risk_at_coverage(coverage)

"""Selective-prediction metrics: exact under ties, vectorised (one sort per call), pure numpy.

Argument order everywhere: ``(confidence, correct, ...)``. ``confidence`` is any finite score
where higher means "more likely right" (rank-based metrics only use its order; ECE, Brier and
temperature scaling need values in [0, 1]); ``correct`` is booleans or 0/1.

Ties. Every rank-based metric here is defined as its expectation over all orderings of samples
with tied confidence. That equals giving each member of a tie group the mean of the position
weights the group occupies, which ``rlsr.core.ranking.tie_averaged_weights`` computes; AURC uses
``rlsr.equations.rewards.rank_weights`` itself, so the training reward and the evaluation metric are one
implementation (AURC = (1/n) sum_i alpha_i * error_i; docs/metrics.md).

This module holds the risk-coverage metrics and the statistics helpers; calibration metrics
live in ``rlsr.metrics.calibration``, thresholds in ``rlsr.metrics.thresholds``, UtilityAUC and DCS in
``rlsr.metrics.utility``. Every public name is re-exported here. See docs/metrics.md.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import NamedTuple

import numpy as np

from rlsr.core.metric_inputs import bool_array, check_same_length, scores_array
from rlsr.core.ranking import (
    coverage_count,
    descending_order,
    harmonic_numbers,
    tie_averaged_weights,
)
from rlsr.equations.rewards import rank_weights
from rlsr.metrics import calibration
from rlsr.metrics.calibration import (  # noqa: F401 - re-exported: calibration.__all__
    ReliabilityBins,
    TemperatureScaler,
    apply_temperature,
    auroc,
    brier,
    confidence_gap,
    ece,
    equal_mass_ece,
    max_calibration_error,
    reliability_bins,
    rms_calibration_error,
    temperature_scale,
)
from rlsr.metrics.thresholds import (
    ThresholdCandidates,
    ThresholdOutcome,
    ThresholdSelection,
    apply_threshold,
    coverage_at_risk,
    risk_at_coverage,
    select_threshold,
    threshold_candidates,
)
from rlsr.metrics.utility import (
    UtilityAUCResult,
    dcs,
    dcs_from_log_likelihoods,
    utility_auc,
    utility_auc_details,
)

__all__ = [
    "aurc",
    "oracle_aurc",
    "excess_aurc",
    "normalized_excess_aurc",
    "ranking_gain",
    "ranking_gain_from_aurc",
    "augrc",
    "RiskCoverageCurve",
    "risk_coverage_curve",
    "accuracy_at_coverage",
    "coverage_count",
    *calibration.__all__,
    "ThresholdSelection",
    "ThresholdOutcome",
    "select_threshold",
    "apply_threshold",
    "coverage_at_risk",
    "risk_at_coverage",
    "ThresholdCandidates",
    "threshold_candidates",
    "UtilityAUCResult",
    "utility_auc",
    "utility_auc_details",
    "dcs",
    "dcs_from_log_likelihoods",
    "BootstrapCI",
    "bootstrap_ci",
    "bootstrap_cis",
    "bootstrap_mean_ci",
    "MeanStd",
    "mean_std_over_seeds",
]


def _inputs(confidence, correct) -> tuple[np.ndarray, np.ndarray]:
    conf = scores_array(confidence, "confidence")
    ok = bool_array(correct, "correct")
    check_same_length(confidence=conf, correct=ok)
    return conf, ok


# --------------------------------------------------------------------------- AURC family


def aurc(confidence, correct) -> float:
    """Area under the risk-coverage curve, discrete right-endpoint form (RLSR Sec. 2.1; docs/metrics.md).

    AURC = (1/n) * sum_{k=1..n} R_k, R_k = error rate of the k most confident samples.
    Exchanging the sums gives AURC = (1/n) * sum_i alpha_i * error_i with alpha_i = H_n - H_{n-r_i}
    (``rlsr.equations.rewards.rank_weights``, r_i the ascending rank); this function computes exactly that,
    so ties count as the expectation over orderings of tied samples. Lower is better; the value
    of a random ranking equals the error rate, the oracle value is ``oracle_aurc``.
    """
    conf, ok = _inputs(confidence, correct)
    alpha = rank_weights(conf)
    return float(np.dot(alpha, ~ok) / conf.shape[0])


def oracle_aurc(correct) -> float:
    """AURC of the oracle ranking that puts every correct sample first (Geifman et al. 2019).

    With n samples, c correct: R_k = max(0, k - c) / k, so
    AURC* = (1/n) * [(n - c) - c * (H_n - H_c)]. For large n with error rate e this tends to
    e + (1 - e) * ln(1 - e).
    """
    ok = bool_array(correct, "correct")
    n = ok.shape[0]
    if n == 0:
        raise ValueError("correct is empty; metrics need at least one sample.")
    c = int(np.count_nonzero(ok))
    h = harmonic_numbers(n)
    return float(((n - c) - c * (h[n] - h[c])) / n)


def excess_aurc(confidence, correct) -> float:
    """E-AURC = AURC - oracle AURC (Geifman et al. 2019; UtilityBench App. C.2.4 "eAURC").

    0 for a perfect ranking; the part of AURC due to ranking rather than to the error rate.
    """
    conf, ok = _inputs(confidence, correct)
    return aurc(conf, ok) - oracle_aurc(ok)


def normalized_excess_aurc(confidence, correct) -> float:
    """Normalised E-AURC = (AURC - AURC_oracle) / (AURC_random - AURC_oracle).

    AURC_random = error rate (the expected AURC of a uniformly random ranking, equivalently AURC
    with all confidences tied). 0 = oracle ranking, 1 = no better than random, > 1 = worse than
    random. Returns NaN when every sample is correct or every sample is wrong: then every
    ranking has the same AURC and the ratio is 0/0.
    """
    conf, ok = _inputs(confidence, correct)
    random_aurc = 1.0 - float(np.mean(ok))
    best = oracle_aurc(ok)
    if random_aurc - best <= 0.0:
        return math.nan
    return (aurc(conf, ok) - best) / (random_aurc - best)


def ranking_gain_from_aurc(aurc_value: float, error_rate: float) -> float:
    """Ranking gain = error rate - AURC, of one set of answers (the number ``train.py``'s run
    summary and ``tools/tiny/seeds.py`` report per held-out step).

    The error rate is the AURC of the same answers at one constant confidence (``aurc`` counts
    ties as the expectation over their orderings, RLSR Sec. 2.1, so every coverage has the
    overall error rate): the gain is how much AURC the confidence's *ranking* removes, 0 for a
    confidence that does not rank, negative for one that ranks wrong answers first; at most
    error rate - oracle AURC. It separates learning to rank from a changed accuracy, which
    moves AURC too.
    """
    return float(error_rate) - float(aurc_value)


def ranking_gain(confidence, correct) -> float:
    """``ranking_gain_from_aurc(aurc(confidence, correct), mean(not correct))``."""
    conf, ok = _inputs(confidence, correct)
    return ranking_gain_from_aurc(aurc(conf, ok), float(np.mean(~ok)))


def augrc(confidence, correct) -> float:
    """Area under the generalised risk-coverage curve (Traub et al., NeurIPS 2024).

    Generalised risk at coverage k/n is the joint rate (errors among the k most confident) / n;
    AUGRC = (1/n) * sum_{k=1..n} (errors in top k) / n, the same right-endpoint rule as ``aurc``.
    Position p (1 = most confident) enters n - p + 1 of the partial sums, so
    AUGRC = sum_i w_i * error_i with w_p = (n - p + 1) / n^2, ties averaged. (Traub et al.'s
    trapezoid rule would use (n - p + 1/2) / n^2; the two differ by error_rate / (2n).)
    """
    conf, ok = _inputs(confidence, correct)
    n = conf.shape[0]
    position_weights = np.arange(n, 0, -1, dtype=np.float64) / (float(n) * n)
    return float(np.dot(tie_averaged_weights(conf, position_weights), ~ok))


class RiskCoverageCurve(NamedTuple):
    """One point per distinct confidence value, in order of increasing coverage."""

    coverage: np.ndarray  # fraction of samples with confidence >= threshold
    risk: np.ndarray  # error rate among them
    thresholds: np.ndarray  # the confidence value of that point (descending)


def risk_coverage_curve(confidence, correct) -> RiskCoverageCurve:
    """Risk-coverage curve for plots (RLSR Sec. 2.1, C.5.2): selecting {confidence >= t} for
    every distinct value t; point = (|{s >= t}| / n, error rate on {s >= t}).

    Tied samples enter together, so each point is well defined (no arbitrary order inside a
    tie). The last point has coverage 1 and risk = overall error rate. O(n log n).
    """
    conf, ok = _inputs(confidence, correct)
    n = conf.shape[0]
    order, starts = descending_order(conf)
    ends = np.append(starts[1:], n)  # one past the last member of each tie group
    cum_errors = np.cumsum(~ok[order])
    return RiskCoverageCurve(
        coverage=ends / n,
        risk=cum_errors[ends - 1] / ends,
        thresholds=conf[order][starts],
    )


def accuracy_at_coverage(confidence, correct, coverage):
    """Acc@c: accuracy of the m = ceil(c * n) most confident samples (RLSR Sec. 4.1, C.5.2, Tab. 1).

    Samples tied at the cut count with their group's mean correctness (the expectation over
    orderings of the tie), via position weights 1 for p <= m and 0 after, tie-averaged.
    ``coverage`` is a float in (0, 1] (returns a float) or a sequence (returns an array).
    The paper reports c = 0.10, 0.25, 0.50.
    """
    conf, ok = _inputs(confidence, correct)
    n = conf.shape[0]
    scalar = np.ndim(coverage) == 0
    levels = [coverage] if scalar else list(coverage)
    out = np.empty(len(levels), dtype=np.float64)
    for j, c in enumerate(levels):
        m = coverage_count(c, n)
        position_weights = np.zeros(n, dtype=np.float64)
        position_weights[:m] = 1.0
        out[j] = np.dot(tie_averaged_weights(conf, position_weights), ok) / m
    return float(out[0]) if scalar else out


# --------------------------------------------------------------------------- statistics


class BootstrapCI(NamedTuple):
    estimate: float  # the metric on the full sample
    low: float
    high: float


def bootstrap_ci(
    metric_fn: Callable[[np.ndarray, np.ndarray], float],
    confidence,
    correct,
    n_resamples: int = 1000,
    alpha: float = 0.05,
    seed: int = 0,
) -> BootstrapCI:
    """Percentile bootstrap CI of ``metric_fn(confidence, correct)`` over samples (Efron &
    Tibshirani 1993; a statistics helper, not a paper definition).

    Draws ``n_resamples`` resamples of size n with replacement (numpy ``default_rng(seed)``) and
    returns the (alpha/2, 1 - alpha/2) percentiles of the resampled metric. Resamples where the
    metric is NaN (e.g. AUROC with one class) are dropped; if all are NaN the bounds are NaN.
    Cost: n_resamples metric calls (the loop is over resamples, never over samples).
    """
    (ci,) = bootstrap_cis(
        lambda c, o: (metric_fn(c, o),), confidence, correct, n_resamples, alpha, seed
    )
    return ci


def bootstrap_cis(
    metrics_fn: Callable[[np.ndarray, np.ndarray], Sequence[float]],
    confidence,
    correct,
    n_resamples: int = 1000,
    alpha: float = 0.05,
    seed: int = 0,
) -> list[BootstrapCI]:
    """``bootstrap_ci`` of several metrics at once: ``metrics_fn`` returns one value per metric,
    and every metric sees the same resamples (the ones ``bootstrap_ci`` with this seed draws), so
    metrics that share work (one binning, one sort) compute it once per resample. NaN values are
    dropped per metric."""
    conf, ok = _inputs(confidence, correct)
    if int(n_resamples) < 1:
        raise ValueError(f"n_resamples must be >= 1; got {n_resamples}.")
    if not (0.0 < alpha < 1.0):
        raise ValueError(f"alpha must be in (0, 1); got {alpha}.")
    n = conf.shape[0]
    rng = np.random.default_rng(seed)
    estimates = [float(v) for v in metrics_fn(conf, ok)]
    values = np.empty((int(n_resamples), len(estimates)), dtype=np.float64)
    for b in range(int(n_resamples)):
        idx = rng.integers(0, n, size=n)
        values[b] = metrics_fn(conf[idx], ok[idx])
    out = []
    for estimate, column in zip(estimates, values.T, strict=True):
        column = column[~np.isnan(column)]
        if column.size == 0:
            out.append(BootstrapCI(estimate, math.nan, math.nan))
            continue
        low, high = np.percentile(column, [100 * alpha / 2, 100 * (1 - alpha / 2)])
        out.append(BootstrapCI(estimate, float(low), float(high)))
    return out


def bootstrap_mean_ci(
    values, n_resamples: int = 10_000, alpha: float = 0.05, seed: int = 0
) -> BootstrapCI:
    """Percentile bootstrap CI of the mean of ``values``: one number per training seed (a
    metric of one method), or per shared seed the paired difference of two methods
    (``rlsr compare``; a statistics helper, not a paper definition).

    With k values x_1..x_k: draws ``n_resamples`` index vectors of size k with replacement
    (numpy ``default_rng(seed).integers(0, k, (n_resamples, k))``, so the same seed gives the
    same bounds), takes each resample's mean, and returns the (alpha/2, 1 - alpha/2)
    percentiles of those means (numpy's linear interpolation) beside the plain mean. Fewer than
    2 values have no spread to resample: the bounds are NaN, not a zero-width interval.
    """
    arr = scores_array(list(values), "values")
    if int(n_resamples) < 1:
        raise ValueError(f"n_resamples must be >= 1; got {n_resamples}.")
    if not (0.0 < alpha < 1.0):
        raise ValueError(f"alpha must be in (0, 1); got {alpha}.")
    k = arr.shape[0]
    estimate = float(np.mean(arr))
    if k < 2:
        return BootstrapCI(estimate, math.nan, math.nan)
    idx = np.random.default_rng(seed).integers(0, k, size=(int(n_resamples), k))
    means = arr[idx].mean(axis=1)
    low, high = np.percentile(means, [100 * alpha / 2, 100 * (1 - alpha / 2)])
    return BootstrapCI(estimate, float(low), float(high))


class MeanStd(NamedTuple):
    mean: float
    std: float  # sample standard deviation (ddof = 1); NaN for a single seed
    n: int


def mean_std_over_seeds(values: Iterable[float]) -> MeanStd:
    """Mean and sample std (ddof = 1) of one metric over seeds (RLSR Tab. 5: 5 seeds, "mean ± std")."""
    arr = scores_array(list(values), "values")
    std = float(np.std(arr, ddof=1)) if arr.size > 1 else math.nan
    return MeanStd(float(np.mean(arr)), std, int(arr.size))

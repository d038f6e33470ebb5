"""Statistics over training seeds: intervals, the exact paired test and the verdict of ``rlsr
compare`` and the toy's comparison (docs/compare.md, "Intervals, tests and verdicts")."""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from scipy.stats import beta as beta_dist
from scipy.stats import t as student_t

__all__ = [
    "ALPHA",
    "EXACT_UP_TO",
    "FLOAT_NOISE",
    "LEVEL",
    "Interval",
    "PairedTest",
    "holm",
    "cluster_draws",
    "no_spread_interval",
    "paired_permutation_test",
    "resampled_seed_interval",
    "resampled_t_interval",
    "seed_interval",
    "seed_intervals",
    "t_interval",
    "t_intervals",
    "zero_split_intervals",
    "verdict",
]

LEVEL = 0.95  # the intervals' coverage
ALPHA = 0.05  # the test's level after the Holm adjustment
FLOAT_NOISE = 1e-9  # |value| below this is float rounding (two equal AURCs summed in another order)
EXACT_UP_TO = 20  # nonzero differences enumerated exactly (2^20 sign patterns); beyond: Monte Carlo
PERMUTATION_TEST = "exact paired permutation test (sign flips of the nonzero differences)"


class Interval(NamedTuple):
    estimate: float  # the mean over seeds
    low: float  # NaN with fewer than 2 seeds
    high: float


class PairedTest(NamedTuple):
    p_value: float  # two-sided; 1.0 when every difference is 0
    n_nonzero: int  # differences that enter the test
    n_zero: int  # differences exactly 0 (within FLOAT_NOISE): they carry no sign
    exact: bool  # all 2^n_nonzero sign patterns enumerated (else Monte Carlo)


def _finite(values) -> np.ndarray:
    arr = np.asarray(list(values), dtype=float)
    if arr.ndim != 1 or not np.all(np.isfinite(arr)):
        raise ValueError(f"values must be finite numbers; got {arr.tolist()}.")
    return arr


def no_spread_interval(value: float, n: int, bounds: tuple[float, float], level: float = LEVEL):
    """The interval of a mean when all ``n`` seeds gave the same ``value`` (a t-interval would
    have zero width). If P(X != value) = q, all n seeds agree with probability (1 - q)^n; the
    Clopper-Pearson bound for 0 disagreements in n is q_u = 1 - ((1 - level) / 2)^(1/n), and X
    lies in ``bounds`` = [lo, hi], so the mean lies in [value - q_u (value - lo), value + q_u
    (hi - value)] (Clopper & Pearson 1934). 5 equal seeds in [-1, 1]: value +- 0.52."""
    lo, hi = bounds
    q_u = 1.0 - ((1.0 - level) / 2.0) ** (1.0 / n)
    return Interval(value, value - q_u * (value - lo), value + q_u * (hi - value))


def t_intervals(samples, bounds: tuple[float, float], level: float = LEVEL):
    """``t_interval`` of every row of ``samples`` (rows x n seeds, n >= 2): arrays (mean, low,
    high)."""
    x = np.asarray(samples, dtype=float)
    n = x.shape[1]
    mean = x.mean(axis=1)
    half = float(student_t.ppf((1 + level) / 2, n - 1)) * x.std(axis=1, ddof=1) / math.sqrt(n)
    flat = np.all(np.abs(x - mean[:, None]) <= FLOAT_NOISE, axis=1)
    _, flat_low, flat_high = no_spread_interval(mean, n, bounds, level)
    return mean, np.where(flat, flat_low, mean - half), np.where(flat, flat_high, mean + half)


def t_interval(values, bounds: tuple[float, float], level: float = LEVEL) -> Interval:
    """Student-t interval of the mean over seeds: x̄ ± t_{n-1, (1+level)/2} · s / √n, s the
    sample standard deviation (ddof = 1). Exact for normal values; at 5-20 seeds it keeps its
    coverage on discrete, tie-heavy and moderately skewed metric differences where the
    percentile bootstrap of the mean (close to x̄ ± z · s · √((n-1)/n) / √n) is too narrow; it
    undercovers strongly skewed ones (docs/compare.md). Fewer than 2 values: NaN bounds; values
    within ``FLOAT_NOISE`` of their mean: ``no_spread_interval`` over ``bounds``."""
    arr = _finite(values)
    n = arr.shape[0]
    if n == 0:
        return Interval(math.nan, math.nan, math.nan)
    if n < 2:
        return Interval(float(arr[0]), math.nan, math.nan)
    mean, low, high = t_intervals(arr[None, :], bounds, level)
    return Interval(float(mean[0]), float(low[0]), float(high[0]))


def zero_split_intervals(samples, bounds: tuple[float, float], level: float = LEVEL):
    """The interval of a mean when some seeds are exactly 0 (two arms that ended in the same place),
    per row of ``samples`` (rows x n seeds): arrays (low, high), NaN for rows without both zero and
    nonzero values. Write X = 1{X != 0} · X: with q = P(X != 0) and ν = E[X | X != 0], the mean is q
    ν. With k of the n seeds nonzero (0 < k < n): q lies in the Clopper-Pearson interval of k / n
    and ν in the t-interval of the k nonzero values cut to ``bounds`` (``t_intervals``; one value or
    no spread: ``no_spread_interval`` over ``bounds``), each at ``level``; the mean lies between the
    smallest and largest of the four products of their ends (docs/compare.md)."""
    x = np.asarray(samples, dtype=float)
    rows, n = x.shape
    nonzero = np.abs(x) > FLOAT_NOISE
    k = nonzero.sum(axis=1)
    split = (k > 0) & (k < n)
    low, high = np.full(rows, math.nan), np.full(rows, math.nan)
    tail = (1.0 - level) / 2.0
    lo, hi = bounds
    for size in np.unique(k[split]):  # rows with the same k share the quantiles
        at = np.flatnonzero(split & (k == size))
        values = x[at][nonzero[at]].reshape(at.shape[0], int(size))
        q_low = float(beta_dist.ppf(tail, size, n - size + 1))
        q_high = float(beta_dist.ppf(1.0 - tail, size + 1, n - size))
        nu = values.mean(axis=1)
        if size >= 2:
            _, nu_low, nu_high = t_intervals(values, bounds, level)
            nu_low, nu_high = np.maximum(nu_low, lo), np.minimum(nu_high, hi)  # ν is in bounds
        else:
            q_u = 1.0 - tail  # no_spread_interval of one value
            nu_low, nu_high = nu - q_u * (nu - lo), nu + q_u * (hi - nu)
        corners = np.stack(
            [q_low * nu_low, q_low * nu_high, q_high * nu_low, q_high * nu_high], axis=1
        )
        low[at], high[at] = corners.min(axis=1), corners.max(axis=1)
    return low, high


def _widened(samples, low, high, bounds: tuple[float, float], level: float):
    """(low, high) widened to also hold ``zero_split_intervals`` of ``samples`` where some but
    not all seeds are exactly 0, then cut to ``bounds``."""
    z_low, z_high = zero_split_intervals(samples, bounds, level)
    split = ~np.isnan(z_low)
    low = np.where(split, np.minimum(low, z_low), low)
    high = np.where(split, np.maximum(high, z_high), high)
    return np.maximum(low, bounds[0]), np.minimum(high, bounds[1])


def seed_intervals(samples, bounds: tuple[float, float], level: float = LEVEL):
    """The interval over seeds that ``rlsr compare`` reports, per row of ``samples`` (rows x n
    seeds, n >= 2): arrays (mean, low, high), ``t_intervals`` ``_widened``."""
    mean, low, high = t_intervals(samples, bounds, level)
    return mean, *_widened(samples, low, high, bounds, level)


def seed_interval(values, bounds: tuple[float, float], level: float = LEVEL) -> Interval:
    """``seed_intervals`` of one set of seeds; NaN bounds for fewer than 2."""
    arr = _finite(values)
    if arr.shape[0] < 2:
        return t_interval(arr, bounds, level)
    mean, low, high = seed_intervals(arr[None, :], bounds, level)
    return Interval(float(mean[0]), float(low[0]), float(high[0]))


def cluster_draws(clusters, n_resamples: int, seed: int) -> list[np.ndarray]:
    """Question indices of ``n_resamples`` resamples of question clusters (``clusters``: per
    question, its label): as many clusters as there are, drawn with replacement, each with all
    its questions."""
    labels = np.asarray(clusters)
    _, inverse = np.unique(labels, return_inverse=True)
    members = [np.flatnonzero(inverse == c) for c in range(int(inverse.max()) + 1)]
    picks = np.random.default_rng(seed).integers(0, len(members), (int(n_resamples), len(members)))
    return [np.concatenate([members[c] for c in row]) for row in picks]


def resampled_t_interval(
    per_draw, estimate: float, bounds: tuple[float, float], seed: int, level: float = LEVEL
) -> Interval:
    """The t-interval with a standard error that also carries question sampling. ``per_draw``:
    (resamples, n seeds), every seed's value on each resample of the questions
    (``cluster_draws``, shared by every seed and method). Each resample also draws n seeds with
    replacement; SE = sd over resamples of that mean · √(n / (n - 1)) (so the seed part equals
    s / √n); interval = ``estimate`` ± t_{n-1} · SE. No spread: ``no_spread_interval``."""
    arr = np.asarray(per_draw, dtype=float)
    n_draws, n = arr.shape
    if n < 2:
        return Interval(estimate, math.nan, math.nan)
    seeds = np.random.default_rng(seed).integers(0, n, (n_draws, n))
    means = np.take_along_axis(arr, seeds, axis=1).mean(axis=1)
    se = float(means.std(ddof=1)) * math.sqrt(n / (n - 1)) if n_draws > 1 else 0.0
    if se <= FLOAT_NOISE:
        return no_spread_interval(estimate, n, bounds, level)
    half = float(student_t.ppf((1 + level) / 2, n - 1)) * se
    return Interval(estimate, estimate - half, estimate + half)


def resampled_seed_interval(
    per_draw, values, bounds: tuple[float, float], seed: int, level: float = LEVEL
) -> Interval:
    """What ``rlsr compare --resample-questions`` reports: ``resampled_t_interval`` around the
    mean of ``values`` (the seeds' values on all questions), ``_widened``."""
    arr = _finite(values)
    out = resampled_t_interval(per_draw, float(arr.mean()), bounds, seed, level)
    if arr.shape[0] < 2:
        return out
    low, high = _widened(arr[None, :], out.low, out.high, bounds, level)
    return Interval(out.estimate, float(low[0]), float(high[0]))


def _subset_sums(values: np.ndarray) -> np.ndarray:
    """Σ ε_i v_i for every sign pattern ε ∈ {-1, +1}^m (2^m sums)."""
    sums = np.zeros(1)
    for v in values:
        sums = np.concatenate([sums + v, sums - v])
    return sums


def paired_permutation_test(differences, n_monte_carlo: int = 200_000, seed: int = 0) -> PairedTest:
    """Two-sided paired permutation test of "A and B are exchangeable within a seed" (Fisher 1935,
    The Design of Experiments, Sec. 21): swapping the two arms of a seed flips the sign of its
    difference, so under the null every sign pattern of the differences is equally likely:
    p = #{patterns ε : |Σ ε_i d_i| >= |Σ d_i|} / #patterns, equal sums within ``FLOAT_NOISE``
    counting as >=. A difference within ``FLOAT_NOISE`` of 0 has no sign to flip and is left out
    (``n_zero``); none left: p = 1. Exact enumeration of all 2^m patterns for m <= ``EXACT_UP_TO``
    nonzero differences; beyond, ``n_monte_carlo`` seeded random patterns, p = (1 + hits) / (1 +
    draws). With equal magnitudes it is the exact sign test; its smallest p is 2 / 2^m (m = 5:
    0.0625, so 5 seeds never reach p < 0.05)."""
    d = _finite(differences)
    nonzero = d[np.abs(d) > FLOAT_NOISE]
    m, n_zero = int(nonzero.shape[0]), int(d.shape[0] - nonzero.shape[0])
    if m == 0:
        return PairedTest(1.0, 0, n_zero, True)
    observed = abs(float(nonzero.sum()))
    if m <= EXACT_UP_TO:
        sums = _subset_sums(nonzero)
        hits = int(np.count_nonzero(np.abs(sums) >= observed - FLOAT_NOISE))
        return PairedTest(hits / sums.shape[0], m, n_zero, True)
    rng = np.random.default_rng(seed)
    hits = 0
    for start in range(0, n_monte_carlo, 10_000):
        signs = rng.choice((-1.0, 1.0), size=(min(10_000, n_monte_carlo - start), m))
        hits += int(np.count_nonzero(np.abs(signs @ nonzero) >= observed - FLOAT_NOISE))
    return PairedTest((1 + hits) / (1 + n_monte_carlo), m, n_zero, False)


def holm(p_values) -> list[float]:
    """Holm's step-down adjustment of m p-values (Holm 1979, "A simple sequentially rejective
    multiple test procedure"): sorted ascending p_(1) <= ... <= p_(m), adjusted p_(i) =
    max_{j <= i} min(1, (m - j + 1) p_(j)), returned in the input order. Rejecting where the
    adjusted p < α keeps the chance of any false "better" among the m at most α."""
    p = np.asarray(list(p_values), dtype=float)
    order = np.argsort(p, kind="stable")
    m = p.shape[0]
    scaled = np.minimum(1.0, (m - np.arange(m)) * p[order])
    adjusted = np.empty(m)
    adjusted[order] = np.maximum.accumulate(scaled)
    return adjusted.tolist()


def verdict(
    interval: Interval,
    p_adjusted: float,
    better: str,
    a: str,
    b: str,
    margin: float | None = None,
    alpha: float = ALPHA,
) -> str:
    """What the paired difference A - B says about one metric (``better``: "higher" or
    "lower"). "A better" / "B better": the interval excludes 0 (a bound within ``FLOAT_NOISE``
    counts as 0) and adjusted p < ``alpha`` (", within ±δ" when it also lies inside the margin);
    "equivalent within ±δ": the interval lies inside [-δ, δ] (``margin`` δ; None: never);
    "inconclusive" otherwise; "n/a (one seed)" without an interval."""
    low, high = interval.low, interval.high
    if any(v is None or math.isnan(v) for v in (low, high)):
        return "n/a (one seed)"
    inside = margin is not None and -margin <= low and high <= margin
    within = f"within ±{margin:g}" if margin is not None else ""
    if (low > FLOAT_NOISE or high < -FLOAT_NOISE) and p_adjusted < alpha:
        winner = a if (low > 0) == (better == "higher") else b
        return f"{winner} better" + (f", {within}" if inside else "")
    if inside:
        return f"equivalent {within}"
    return "inconclusive"

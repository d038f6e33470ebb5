"""Per-completion rewards of RLSR and its baselines (pure numpy, no torch).

Definitions follow the RLSR paper ("Aligning Language Models with Selective Prediction",
arXiv 2607.03528, Sec. 2.2 and C.4.2); the equations and derivations are in docs/methods.md:

* ``rank_weights``: alpha_i = H_n - H_{n - r_i}, r_i the ascending confidence rank in the pool.
  AURC = (1/n) * sum_i alpha_i * error_i exactly, so alpha_i is sample i's share of AURC.
* ``lifted_aurc_rewards``: +alpha_i if correct, -alpha_i if wrong (the "lifted" AURC of Sec. 2.2).
* ``marginal_aurc_rewards``: ours, not the paper's: each completion's marginal (difference)
  credit for the pooled lifted AURC (docs/methods.md, "What each reward teaches").
* ``correctness_reward`` (RLVR), ``brier_reward`` (RLCR's calibration term), ``format_reward``.

Missing confidences. A completion whose confidence could not be parsed (NaN here) is ranked
as confidence 0.0, i.e. tied with explicit zeros at the bottom of the pool
(``confidence_for_ranking``). It is never ranked above a parsed confidence, so omitting the
confidence tag cannot buy a mid-pool rank. The bottom rank is still the cheapest place for a
wrong answer (lifted-AURC penalty 1/n there, up to H_n at the top), so a broken format pays
less than a confident error unless format_weight >= method_weight * (H_n - 1/n); at the
released 0.5 / 0.5 it does not for any pool of 3 or more (docs/results.md, "Why seed 42 failed").
"""

from __future__ import annotations

import math

import numpy as np

from rlsr.core.ranking import (
    as_float_array,
    descending_order,
    harmonic_numbers,
    tie_averaged_weights,
)

__all__ = [
    "MISSING_CONFIDENCE_RANK_VALUE",
    "confidence_for_ranking",
    "rank_weights",
    "partial_rank_weights",
    "lifted_aurc_rewards",
    "marginal_aurc_rewards",
    "correctness_reward",
    "brier_reward",
    "format_reward",
]

MISSING_CONFIDENCE_RANK_VALUE = 0.0
"""Confidence used to rank a completion whose confidence is missing (NaN)."""


def confidence_for_ranking(confidence) -> np.ndarray:
    """Map missing (NaN / None) confidences to ``MISSING_CONFIDENCE_RANK_VALUE``.

    Values must otherwise lie in [0, 1]; anything else raises a ValueError naming the sample.
    """
    conf = np.array(
        [np.nan if c is None else c for c in confidence]
        if not isinstance(confidence, np.ndarray)
        else confidence,
        dtype=np.float64,
    )
    if conf.ndim != 1:
        raise ValueError(f"confidence must be 1-D; got shape {conf.shape}.")
    conf = np.where(np.isnan(conf), MISSING_CONFIDENCE_RANK_VALUE, conf)
    bad = np.flatnonzero((conf < 0.0) | (conf > 1.0) | ~np.isfinite(conf))
    if bad.size:
        raise ValueError(
            f"confidence must lie in [0, 1] (or be NaN for 'missing'); sample {bad[0]} is "
            f"{conf[bad[0]]!r}. Parse confidences with rlsr.core.parsing.parse_confidence."
        )
    return conf


def _aurc_position_weights(n: int, m: int, cap: float | None = None) -> np.ndarray:
    """Weight of descending position p (1-based) in sum_{k=1..m} R_k: H_m - H_{p-1} for p <= m,
    0 past m, then ``min(., cap)`` per position when a cap is given (``lifted_aurc_rewards``)."""
    h = harmonic_numbers(n)
    w = np.zeros(n, dtype=np.float64)
    w[:m] = h[m] - h[:m]
    if cap is not None:
        np.minimum(w, cap, out=w)
    return w


def _check_weight_cap(weight_cap) -> None:
    if weight_cap is not None and not weight_cap > 0:  # also rejects NaN
        raise ValueError(f"weight_cap must be > 0 or None; got {weight_cap}.")


def rank_weights(confidence) -> np.ndarray:
    """AURC rank weights alpha_i = H_n - H_{n - r_i} (RLSR paper Sec. 2.2, Fig. 3).

    r_i is the ascending rank of sample i's confidence in the pool (r = 1 least confident,
    r = n most confident), H_k the k-th harmonic number. Tied confidences receive the mean
    alpha of the ranks they jointly occupy, i.e. the expectation over orderings of the tie.

    Identity (tested): AURC = (1/n) * sum_k R_k = (1/n) * sum_i alpha_i * error_i, where R_k is
    the error rate of the k most confident samples. sum_i alpha_i = n, alpha in [1/n, H_n].
    For large n, alpha at normalised rank beta = r/n approaches -log(1 - beta).

    Args:
        confidence: shape (n,), finite. NaN is rejected here; use ``confidence_for_ranking``.

    Returns:
        alpha, shape (n,), in input order. O(n log n).
    """
    conf = as_float_array(confidence, "confidence")
    n = conf.shape[0]
    # Descending position p = n - r + 1, so H_n - H_{n-r} = H_n - H_{p-1}.
    return tie_averaged_weights(conf, _aurc_position_weights(n, n))


def partial_rank_weights(confidence, max_coverage: float) -> np.ndarray:
    """Rank weights of the partial AURC over coverage (0, c], c = ``max_coverage``.

    Partial AURC_c = (1/m) * sum_{k=1..m} R_k with m = ceil(c * n) (at least 1). By the same
    exchange of sums as for AURC, sample at descending position p contributes
    w_p = H_m - H_{p-1} if p <= m else 0, so partial AURC_c = (1/m) * sum_i w_i * error_i, ties
    averaged as in ``rank_weights``. With c = 1 this is exactly ``rank_weights``. The weights sum
    to m; samples outside the most confident m get weight 0 (no reward signal from the rank term).
    This concentrates the reward on the low-coverage regime named as a limitation in RLSR Sec. 5.
    """
    if not (0.0 < max_coverage <= 1.0) or math.isnan(max_coverage):
        raise ValueError(f"max_coverage must be in (0, 1]; got {max_coverage!r}.")
    conf = as_float_array(confidence, "confidence")
    n = conf.shape[0]
    return tie_averaged_weights(conf, _aurc_position_weights(n, _coverage_count(n, max_coverage)))


def _as_bool_array(values, name: str) -> np.ndarray:
    arr = np.asarray(values)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D (one value per completion); got shape {arr.shape}.")
    if arr.dtype != bool:
        if arr.size and not np.all(np.isin(arr, (0, 1))):
            raise ValueError(f"{name} must be booleans or 0/1; got values outside {{0, 1}}.")
        arr = arr.astype(bool)
    return arr


def lifted_aurc_rewards(
    correct,
    confidence,
    *,
    correct_scale: float = 1.0,
    weight_cap: float | None = None,
    max_coverage: float = 1.0,
) -> np.ndarray:
    """Lifted-AURC reward of RLSR (paper Sec. 2.2): +alpha_i if correct else -alpha_i.

    alpha are the pooled rank weights (``rank_weights``; ``partial_rank_weights`` when
    ``max_coverage < 1``). Missing confidences (NaN) rank as 0 (module docstring).

    Args:
        correct: shape (n,) booleans, the verifier's verdict per completion.
        confidence: shape (n,) in [0, 1] or NaN for missing.
        correct_scale: lambda, multiplies the reward of correct completions (paper authors'
            code exposes it; 1.0 is the paper's setting).
        weight_cap: if set, each *position's* weight is clipped to at most this value, and then
            tie groups average the clipped weights: alpha_i = mean over the positions of i's tie
            group of min(H_m - H_{p-1}, cap). This bounds the reward of the most confident
            completion (alpha_max = H_n uncapped) and keeps the tie rule of every rank quantity
            in rlsr (the expectation over orderings of the tie, rlsr.core.ranking). Clipping *after*
            tie-averaging is not an expectation over orderings: it
            creates weight at the cap's boundary, so that collapsing confidences into a tie could
            raise the pooled total (four sure-right completions: 3.42 sorted, 4.00 tied at cap
            1.5, n = 4) and beat the order by p (docs/methods.md, "What each reward teaches").
        max_coverage: c in (0, 1]; c < 1 gives the lifted *partial* AURC over coverage (0, c].
    """
    ok, conf, w = _pool_settings(correct, confidence, correct_scale, weight_cap, max_coverage)
    alpha = tie_averaged_weights(conf, w)
    return np.where(ok, correct_scale * alpha, -alpha)


def _pool_settings(correct, confidence, correct_scale, weight_cap, max_coverage):
    """Checked ``(correct, ranking confidence, position weights)`` of a pool: the arguments of
    ``lifted_aurc_rewards`` and ``marginal_aurc_rewards`` checked, and the (capped) weight of
    each descending position (``_aurc_position_weights``)."""
    ok = _as_bool_array(correct, "correct")
    conf = confidence_for_ranking(confidence)
    if ok.shape != conf.shape:
        raise ValueError(
            f"correct has {ok.shape[0]} entries but confidence has {conf.shape[0]}; "
            "pass one value per completion."
        )
    if not correct_scale >= 0:  # also rejects NaN
        raise ValueError(f"correct_scale must be >= 0; got {correct_scale}.")
    if not 0.0 < max_coverage <= 1.0:  # also rejects NaN
        raise ValueError(f"max_coverage must be in (0, 1]; got {max_coverage!r}.")
    _check_weight_cap(weight_cap)
    n = conf.shape[0]
    return ok, conf, _aurc_position_weights(n, _coverage_count(n, max_coverage), weight_cap)


def _coverage_count(n: int, max_coverage: float) -> int:
    """m = ceil(c * n), at least 1 (``partial_rank_weights``); n when c = 1."""
    if max_coverage == 1.0 or n == 0:
        return n
    # Guard against float noise such as 0.1 * 30 = 3.0000000000000004 -> 4.
    return min(n, max(1, math.ceil(round(max_coverage * n, 9))))


def marginal_aurc_rewards(
    correct,
    confidence,
    *,
    correct_scale: float = 1.0,
    weight_cap: float | None = None,
    max_coverage: float = 1.0,
) -> np.ndarray:
    """Marginal (difference) credit of each completion for the pooled lifted AURC (ours).

    D_j = T(pool) - T(pool with j moved alone below everyone), T = sum_i lifted_i, where lifted
    is ``lifted_aurc_rewards`` with the same ``correct_scale`` (lambda), ``weight_cap`` and
    ``max_coverage``. "Moved alone below everyone": j takes descending position n by itself,
    strictly below every other completion, a missing (NaN) confidence included; the others keep
    their order and ties, those below j's old place move up one position, and j's old tie group
    loses j. A missing confidence ranks as 0 (module docstring), so D of a missing-confidence
    completion is only its share of the bottom tie group.

    Closed form, O(n log n). Let s_i = lambda if i is correct else -1, w_p the position weights
    (H_m - H_{p-1} for p <= m = ceil(c n), else 0, then min(., cap) per position), and for a run
    of positions [a, b] v(a, b) = mean(w_a..w_b) (the tie average, as in the lifted reward).
    For j in tie group G = [a, b] (S_G = sum of s over G) with groups G' = [a', b'] below it:

        D_j = v(a, b) S_G - v(a, b-1) (S_G - s_j) - v(n, n) s_j
              + sum_{G' below G} S_G' (v(a', b') - v(a'-1, b'-1))

    (v(a, a-1) S = 0 for a group of one). Why it teaches the order by p where the lifted reward
    teaches a threshold (best response, monotone in p for any pool, cap and ties):
    docs/methods.md, "What each reward teaches a single completion".

    Args and conventions as ``lifted_aurc_rewards``. Returns D, shape (n,), in input order.
    """
    ok, conf, w = _pool_settings(correct, confidence, correct_scale, weight_cap, max_coverage)
    n = conf.shape[0]
    if n == 0:
        return np.zeros(0, dtype=np.float64)
    prefix = np.concatenate(([0.0], np.cumsum(w)))  # prefix[k] = w_1 + ... + w_k

    def v(a, b):  # mean (capped) weight of 1-based positions a..b (arrays; b >= a)
        return (prefix[b] - prefix[a - 1]) / (b - a + 1)

    s = np.where(ok, float(correct_scale), -1.0)
    order, starts = descending_order(conf)
    sizes = np.diff(np.append(starts, n))
    a = starts + 1  # 1-based first position of each group
    b = starts + sizes
    s_group = np.add.reduceat(s[order], starts)
    # A group below j moves up one position when j leaves: [a-1, b-1]. The top group never
    # moves (nothing above it leaves), so its first entry is unused.
    shift = np.zeros(len(starts))
    below = a > 1
    shift[below] = s_group[below] * (v(a[below], b[below]) - v(a[below] - 1, b[below] - 1))
    after = np.concatenate((np.cumsum(shift[::-1])[::-1][1:], [0.0]))  # sum over groups below
    g = np.repeat(np.arange(len(starts)), sizes)  # group index of each sorted position
    sj = s[order]
    rest = np.where(sizes[g] > 1, v(a[g], np.maximum(b[g] - 1, a[g])) * (s_group[g] - sj), 0.0)
    d_sorted = v(a[g], b[g]) * s_group[g] - rest - v(n, n) * sj + after[g]
    out = np.empty(n, dtype=np.float64)
    out[order] = d_sorted
    return out


def correctness_reward(correct) -> np.ndarray:
    """RLVR reward: 1.0 if correct else 0.0 (RLSR paper Sec. 2.1, C.4.2)."""
    return _as_bool_array(correct, "correct").astype(np.float64)


def brier_reward(correct, confidence, format_ok=None) -> np.ndarray:
    """RLCR's calibration term: 1 - (correct - confidence)^2 (Damani et al.; RLSR Sec. 2.1).

    0.0 where the confidence is missing (NaN) or ``format_ok`` is False, as in RLCR.
    RLCR's full reward is ``correctness_reward + brier_reward``.
    """
    ok = _as_bool_array(correct, "correct").astype(np.float64)
    conf = as_float_array(
        [np.nan if c is None else c for c in confidence]
        if not isinstance(confidence, np.ndarray)
        else confidence,
        "confidence",
    )
    if ok.shape != conf.shape:
        raise ValueError(f"correct has {ok.shape[0]} entries but confidence has {conf.shape[0]}.")
    out_of_range = np.flatnonzero(~np.isnan(conf) & ~((conf >= 0.0) & (conf <= 1.0)))
    if out_of_range.size:
        i = out_of_range[0]
        raise ValueError(
            f"confidence must lie in [0, 1] (or be NaN for 'missing'); sample {i} is "
            f"{conf[i]!r}. Parse confidences with rlsr.core.parsing.parse_confidence."
        )
    valid = ~np.isnan(conf)
    if format_ok is not None:
        valid &= _as_bool_array(format_ok, "format_ok")
    score = 1.0 - (ok - np.nan_to_num(conf)) ** 2
    return np.where(valid, score, 0.0)


def format_reward(format_ok) -> np.ndarray:
    """1.0 when the completion follows the tag format (rlsr.core.parsing), else 0.0 (Sec. C.4.2)."""
    return _as_bool_array(format_ok, "format_ok").astype(np.float64)

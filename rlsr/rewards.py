"""Per-completion rewards of RLSR and its baselines (pure numpy, no torch).

Definitions follow the RLSR paper (seeds/003, Sec. 2.2 and C.4.2) and ``shared/DESIGN.md``:

* ``rank_weights``: alpha_i = H_n - H_{n - r_i}, r_i the ascending confidence rank in the pool.
  AURC = (1/n) * sum_i alpha_i * error_i exactly, so alpha_i is sample i's share of AURC.
* ``lifted_aurc_rewards``: +alpha_i if correct, -alpha_i if wrong (the "lifted" AURC of Sec. 2.2).
* ``correctness_reward`` (RLVR), ``brier_reward`` (RLCR's calibration term), ``format_reward``.

Missing confidences. A completion whose confidence could not be parsed (NaN here) is ranked
as confidence 0.0, i.e. tied with explicit zeros at the bottom of the pool
(``confidence_for_ranking``). It is never ranked above a parsed confidence, so omitting the
confidence tag cannot buy a small penalty for a confident error; the format reward already
charges it for the missing tag.
"""

from __future__ import annotations

import math

import numpy as np

from rlsr.ranking import as_float_array, harmonic_numbers, tie_averaged_weights

__all__ = [
    "MISSING_CONFIDENCE_RANK_VALUE",
    "confidence_for_ranking",
    "rank_weights",
    "partial_rank_weights",
    "lifted_aurc_rewards",
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
            f"{conf[bad[0]]!r}. Parse confidences with rlsr.parsing.parse_confidence."
        )
    return conf


def _aurc_position_weights(n: int, m: int) -> np.ndarray:
    """Weight of descending position p (1-based) in sum_{k=1..m} R_k: H_m - H_{p-1} for p <= m."""
    h = harmonic_numbers(n)
    w = np.zeros(n, dtype=np.float64)
    w[:m] = h[m] - h[:m]
    return w


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
    # Guard against float noise such as 0.1 * 30 = 3.0000000000000004 -> 4.
    m = min(n, max(1, math.ceil(round(max_coverage * n, 9)))) if n else 0
    return tie_averaged_weights(conf, _aurc_position_weights(n, m))


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
        weight_cap: if set, alpha is clipped to at most this value before the sign is applied
            (bounds the reward of the single most confident completion, alpha_max = H_n).
        max_coverage: c in (0, 1]; c < 1 gives the lifted *partial* AURC over coverage (0, c].
    """
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
    if max_coverage == 1.0:
        alpha = rank_weights(conf)
    else:
        alpha = partial_rank_weights(conf, max_coverage)
    if weight_cap is not None:
        if not weight_cap > 0:  # also rejects NaN
            raise ValueError(f"weight_cap must be > 0 or None; got {weight_cap}.")
        alpha = np.minimum(alpha, weight_cap)
    return np.where(ok, correct_scale * alpha, -alpha)


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
            f"{conf[i]!r}. Parse confidences with rlsr.parsing.parse_confidence."
        )
    valid = ~np.isnan(conf)
    if format_ok is not None:
        valid &= _as_bool_array(format_ok, "format_ok")
    score = 1.0 - (ok - np.nan_to_num(conf)) ** 2
    return np.where(valid, score, 0.0)


def format_reward(format_ok) -> np.ndarray:
    """1.0 when the completion follows the tag format (rlsr.parsing), else 0.0 (Sec. C.4.2)."""
    return _as_bool_array(format_ok, "format_ok").astype(np.float64)

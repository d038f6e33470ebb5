"""Confidence ranking with exact tie handling: the one implementation shared by rewards and metrics.

Every rank-based quantity in rlsr (the lifted-AURC reward, AURC, Acc@c, UtilityAUC) has the
form ``sum_i w(p_i) * x_i`` where ``p_i`` is sample i's position when the pool is sorted by
confidence *descending* (p = 1 is the most confident) and ``w`` is a weight per position.
Under ties the order inside a tie group is arbitrary; we define every such quantity as its
expectation over all orderings of tied samples, which is the same as giving each member of a
tie group the mean of the position weights its group occupies. ``tie_averaged_weights`` does
exactly that in O(n log n) with one stable sort and ``np.add.reduceat``.
"""

from __future__ import annotations

import math

import numpy as np

from rlsr.core.metric_inputs import check_fraction

__all__ = [
    "as_float_array",
    "harmonic_numbers",
    "tie_averaged_weights",
    "descending_order",
    "coverage_count",
]


def as_float_array(values, name: str) -> np.ndarray:
    """Return ``values`` as a 1-D float64 array or raise a ValueError naming ``name``."""
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D (one value per sample); got shape {arr.shape}.")
    return arr


def harmonic_numbers(n: int) -> np.ndarray:
    """``H[k] = 1 + 1/2 + ... + 1/k`` for k = 0..n (``H[0] = 0``)."""
    h = np.zeros(n + 1, dtype=np.float64)
    if n > 0:
        np.cumsum(1.0 / np.arange(1, n + 1, dtype=np.float64), out=h[1:])
    return h


def descending_order(confidence: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(order, starts)``: the stable order by confidence descending and the indices into
    ``order`` where a new tie group begins."""
    n = confidence.shape[0]
    order = np.argsort(-confidence, kind="stable")
    sorted_conf = confidence[order]
    if n == 0:
        return order, np.zeros(0, dtype=np.intp)
    boundaries = np.flatnonzero(sorted_conf[1:] != sorted_conf[:-1]) + 1
    starts = np.concatenate(([0], boundaries)).astype(np.intp)
    return order, starts


def tie_averaged_weights(confidence, position_weights) -> np.ndarray:
    """Per-sample weights, in input order: ``position_weights[p-1]`` for the sample at
    descending position p, averaged within each group of tied confidences, so that
    ``sum(result * x)`` is the expectation of ``sum_p position_weights[p-1] * x[sample at p]``
    over all orderings of tied samples."""
    conf = as_float_array(confidence, "confidence")
    w = as_float_array(position_weights, "position_weights")
    if w.shape != conf.shape:
        raise ValueError(
            f"position_weights has {w.shape[0]} entries but confidence has {conf.shape[0]}."
        )
    if not np.all(np.isfinite(conf)):
        raise ValueError(
            "confidence contains NaN or inf; map missing confidences first "
            "(rlsr.equations.rewards.confidence_for_ranking) or drop those samples."
        )
    n = conf.shape[0]
    out = np.empty(n, dtype=np.float64)
    if n == 0:
        return out
    order, starts = descending_order(conf)
    sizes = np.diff(np.append(starts, n))
    group_mean = np.add.reduceat(w, starts) / sizes
    out[order] = np.repeat(group_mean, sizes)
    return out


def coverage_count(coverage: float, n: int) -> int:
    """m = ceil(c * n), at least 1: the sample count behind Acc@c (RLSR Sec. C.5.2; docs/metrics.md).

    Guards float noise (0.1 * 30 = 3.0000000000000004 -> 3) by rounding c * n to 9 decimals
    before the ceiling; exact for every decimal c and n up to ~10^7 (tested against fractions).
    """
    c = check_fraction(coverage, "coverage")
    return min(n, max(1, math.ceil(round(c * n, 9))))

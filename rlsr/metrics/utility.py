"""UtilityAUC and DCS; re-exported by ``rlsr.metrics.selective``.

UtilityAUC ("UtilityBench: Measuring Language Model Utility When Errors Have Different Costs",
arXiv 2610.25924), Sec. 2-3 and Appendix B. Each sample i has answerability a_i, the model's
action d_i (answer / refuse), correctness c_i and a consequence cost L_i. Response utility (Eq. 1):

    v_i = +1     answered, answerable, correct
          -L_i   answered, wrong — and any answer to an unanswerable query (Eq. 33: g = -1 - L_i)
          +1     refused an unanswerable query
          -C_R   refused an answerable query              (C_R = 2 in the paper)

The k highest-scoring responses are kept and the rest replaced by abstentions with utility
b_i = (1 - a_i) - a_i C_R (Eq. 11). With gains g_i = v_i - b_i and B = mean(b), the trapezoid
area under U(k/n) is (Eq. 13, Lemma 1)

    A = B + sum_j w_j g_{pi_j},   w_j = (n - j + 1/2) / n^2,  pi = scores descending,

ties averaged over orderings. Normalisation (Eq. 3) uses the sharp extrema over all outcomes
and orderings (Eq. 15-17): g+_i = 1 - b_i sorted descending, g-_i = v-_i - b_i sorted ascending,
v-_i = -max(L_i, C_R) if answerable else -L_i. UtilityAUC = (A - A-) / (A+ - A-) in [0, 1].

DCS ("Measuring Language Model Hallucinations Through Distributional
Correctness"), Definition 1: (l_c p_c - l_w P_W)(1 - p_idk).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rlsr.core.metric_inputs import bool_array, check_same_length, scores_array
from rlsr.core.ranking import tie_averaged_weights

__all__ = [
    "UtilityAUCResult",
    "response_utilities",
    "trapezoid_position_weights",
    "utility_auc",
    "utility_auc_details",
    "dcs",
    "dcs_from_log_likelihoods",
]


@dataclass(frozen=True)
class UtilityAUCResult:
    utility_auc: float  # normalised, (area - area_min) / (area_max - area_min), in [0, 1]
    area: float  # raw A (Eq. 2 / 13), mean utility averaged over coverage
    area_max: float  # A+ (Eq. 17)
    area_min: float  # A- (Eq. 17)
    full_coverage_utility: float  # U(1): mean utility of all responses as given


def response_utilities(answered, correct, answerable, costs, refusal_cost: float = 2.0):
    """Eq. 1 and Eq. 11: (v, b) = response utility and abstention utility per sample.

    ``correct`` is only read where the sample was answered and is answerable.
    """
    d = bool_array(answered, "answered")
    c = bool_array(correct, "correct")
    a = bool_array(answerable, "answerable")
    cost = scores_array(costs, "costs")
    check_same_length(answered=d, correct=c, answerable=a, costs=cost)
    if np.any(cost < 0):
        raise ValueError(f"costs must be >= 0 (L_i > 0 in UtilityBench); got min {cost.min()!r}.")
    if not (refusal_cost >= 0 and np.isfinite(refusal_cost)):
        raise ValueError(f"refusal_cost (C_R) must be a finite number >= 0; got {refusal_cost!r}.")
    b = np.where(a, -float(refusal_cost), 1.0)
    answered_value = np.where(a & c, 1.0, -cost)
    v = np.where(d, answered_value, b)
    return v, b


def trapezoid_position_weights(n: int) -> np.ndarray:
    """w_j = (n - j + 1/2) / n^2 for descending positions j = 1..n (UtilityBench Eq. 13, Lemma 1)."""
    j = np.arange(1, n + 1, dtype=np.float64)
    return (n - j + 0.5) / (float(n) * n)


def utility_auc_details(
    scores, answered, correct, answerable, costs, refusal_cost: float = 2.0
) -> UtilityAUCResult:
    """UtilityAUC with its raw area and the sharp extrema (UtilityBench Eq. 1-3, 11-17).

    Args:
        scores: shape (n,), any finite values; higher = delivered earlier. The paper's default
            is the binary action score 1{answered} (then all answers tie, all refusals tie).
        answered: d_i = answer (True) / refuse (False).
        correct: c_i for answered answerable samples (ignored elsewhere).
        answerable: a_i.
        costs: L_i >= 0, the consequence cost of a wrong answer.
        refusal_cost: C_R >= 0, the price of refusing an answerable query (paper: 2).
    """
    s = scores_array(scores, "scores")
    v, b = response_utilities(answered, correct, answerable, costs, refusal_cost)
    n = check_same_length(scores=s, answered=v)
    w = trapezoid_position_weights(n)
    base = float(b.mean())
    area = base + float(np.dot(tie_averaged_weights(s, w), v - b))

    a = bool_array(answerable, "answerable")
    cost = np.asarray(costs, dtype=np.float64)
    v_min = np.where(a, -np.maximum(cost, refusal_cost), -cost)
    gain_max = np.sort(1.0 - b)[::-1]  # best outcome for every sample, largest gains first
    gain_min = np.sort(v_min - b)  # worst outcome, largest losses first
    area_max = base + float(np.dot(w, gain_max))
    area_min = base + float(np.dot(w, gain_min))
    # area_max > area_min always: v+ = 1 > 0 >= v- for every sample and all w_j > 0.
    normalised = (area - area_min) / (area_max - area_min)
    return UtilityAUCResult(
        utility_auc=float(np.clip(normalised, 0.0, 1.0)),
        area=area,
        area_max=area_max,
        area_min=area_min,
        full_coverage_utility=float(v.mean()),
    )


def utility_auc(scores, answered, correct, answerable, costs, refusal_cost: float = 2.0) -> float:
    """Normalised UtilityAUC in [0, 1] (UtilityBench Eq. 3); see ``utility_auc_details``."""
    return utility_auc_details(
        scores, answered, correct, answerable, costs, refusal_cost
    ).utility_auc


# --------------------------------------------------------------------------- DCS

_PROB_TOL = 1e-9


def _prob(values, name: str) -> np.ndarray:
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim > 1:
        raise ValueError(f"{name} must be a scalar or 1-D; got shape {arr.shape}.")
    if np.any(~np.isfinite(arr)):
        raise ValueError(f"{name} must be finite probabilities; got NaN or inf.")
    if np.any((arr < -_PROB_TOL) | (arr > 1 + _PROB_TOL)):
        raise ValueError(f"{name} must lie in [0, 1]; got values in [{arr.min()}, {arr.max()}].")
    return np.clip(arr, 0.0, 1.0)


def dcs(p_correct, p_wrong, p_idk, l_c: float = 1.0, l_w: float = 1.0):
    """Distributional Correctness Score per sample: (l_c p_c - l_w P_W) * (1 - p_idk).

    Seed 002, Definition 1. p_c = probability of the correct answer, P_W = total probability of
    the incorrect answers, p_idk = probability of "I don't know"; p_c + P_W + p_idk <= 1 (mass
    outside the answer set is allowed). Requires l_c >= l_w >= 0. With l_c = l_w = 1 the score lies
    in [-1, 1]. Scalars in -> float out; arrays in -> array out (average it for a benchmark score).
    """
    if not (l_c >= l_w >= 0.0) or not np.isfinite(l_c):
        raise ValueError(f"loadings must satisfy l_c >= l_w >= 0; got l_c={l_c!r}, l_w={l_w!r}.")
    pc, pw, pk = _prob(p_correct, "p_correct"), _prob(p_wrong, "p_wrong"), _prob(p_idk, "p_idk")
    try:
        pc, pw, pk = np.broadcast_arrays(pc, pw, pk)
    except ValueError as exc:
        raise ValueError(
            f"p_correct, p_wrong and p_idk must have the same length; got shapes "
            f"{np.shape(p_correct)}, {np.shape(p_wrong)}, {np.shape(p_idk)}."
        ) from exc
    total = pc + pw + pk
    if np.any(total > 1.0 + 1e-6):
        i = int(np.argmax(total))
        raise ValueError(
            f"p_correct + p_wrong + p_idk must be <= 1; sample {i} sums to {float(total.flat[i])}."
        )
    score = (l_c * pc - l_w * pw) * (1.0 - pk)
    return float(score) if score.ndim == 0 else score


def dcs_from_log_likelihoods(log_likelihoods, correct_index, idk_index):
    """(p_c, P_W, p_idk) from per-option log-likelihoods via a softmax over the options.

    Seed 002 Sec. 4: log-likelihoods of every answer option and of an IDK option are computed
    and normalised over the option set. ``log_likelihoods`` has shape (k,) or (n, k); -inf is
    allowed (probability 0) but not NaN or +inf. ``correct_index`` / ``idk_index`` are ints or
    shape-(n,) integer arrays and must differ. P_W = 1 - p_c - p_idk (all other options).
    """
    ll = np.asarray(log_likelihoods, dtype=np.float64)
    single = ll.ndim == 1
    if single:
        ll = ll[None, :]
    if ll.ndim != 2 or ll.shape[1] < 2:
        raise ValueError(
            f"log_likelihoods must have shape (k,) or (n, k) with k >= 2 options; got {ll.shape}."
        )
    if np.any(np.isnan(ll)) or np.any(ll == np.inf):
        raise ValueError("log_likelihoods must not contain NaN or +inf.")
    if np.any(np.all(ll == -np.inf, axis=1)):
        raise ValueError("log_likelihoods has a row where every option is -inf (no probability).")
    n, k = ll.shape
    ci = np.broadcast_to(np.asarray(correct_index), (n,))
    ki = np.broadcast_to(np.asarray(idk_index), (n,))
    for name, idx in (("correct_index", ci), ("idk_index", ki)):
        if idx.dtype.kind not in "iu" or np.any((idx < 0) | (idx >= k)):
            raise ValueError(f"{name} must be integer option indices in [0, {k}); got {idx!r}.")
    if np.any(ci == ki):
        raise ValueError("correct_index and idk_index must differ (IDK is never the answer).")
    shifted = ll - ll.max(axis=1, keepdims=True)
    probs = np.exp(shifted)
    probs /= probs.sum(axis=1, keepdims=True)
    rows = np.arange(n)
    p_c = probs[rows, ci]
    p_idk = probs[rows, ki]
    p_w = np.clip(1.0 - p_c - p_idk, 0.0, 1.0)
    if single:
        return float(p_c[0]), float(p_w[0]), float(p_idk[0])
    return p_c, p_w, p_idk

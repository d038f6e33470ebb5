"""Confidence scorers compared on the same responses (RLSR paper Sec. D.3-D.4, Tab. 6-7).

* ``verbalized`` (VC): the number in ``<confidence>`` (after the Sec. C.3 fallback if needed).
* ``logprob``: length-normalised log-probability of the answer span,
  ``mean_t log p(a_t | prompt, response before the answer, a_<t)``, reported as the confidence
  ``exp(mean)`` in (0, 1] (the geometric-mean token probability; a monotone map, so AURC and
  Acc@c do not depend on the choice).
* ``consistency`` (SC): draw K more responses at temperature T (paper: K = 8, T = 0.7) and use
  the fraction whose extracted answer agrees with the evaluated answer:
  ``SC = (1/K) * sum_k 1[norm(a_k) == norm(a)]``.

Everything here is a pure function; ``rlsr.evaluation.runner`` calls the backend.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

__all__ = [
    "SCORERS",
    "check_scorers",
    "length_normalized_logprob",
    "logprob_confidence",
    "answer_span",
    "self_consistency",
]

SCORERS = ("verbalized", "logprob", "consistency")


def check_scorers(names: Sequence[str]) -> tuple[str, ...]:
    """Validate scorer names; ``verbalized`` is always included and first (the primary scorer)."""
    unknown = [n for n in names if n not in SCORERS]
    if unknown:
        raise ValueError(f"unknown scorer(s) {unknown}; choose from {SCORERS}.")
    return ("verbalized",) + tuple(n for n in dict.fromkeys(names) if n != "verbalized")


def length_normalized_logprob(token_logprobs: Sequence[float]) -> float:
    """(1/T) * sum_t log p(a_t | ...) over the T answer tokens; NaN for an empty span."""
    if len(token_logprobs) == 0:
        return math.nan
    return float(sum(token_logprobs) / len(token_logprobs))


def logprob_confidence(token_logprobs: Sequence[float]) -> float | None:
    """exp(length-normalised log-prob) in (0, 1]; None when there is no answer span to score."""
    mean = length_normalized_logprob(token_logprobs)
    return None if math.isnan(mean) else math.exp(mean)


def answer_span(generated: str, answer: str | None) -> tuple[str, str] | None:
    """Split ``generated`` into (text before the answer, answer text) at the LAST occurrence.

    The answer is scored in the context the model produced it in. ``None`` when there is no
    answer or it does not occur verbatim (then the log-prob scorer has no value).
    """
    if not answer:
        return None
    start = generated.rfind(answer)
    if start < 0:
        return None
    return generated[:start], answer


def self_consistency(
    reference: str | None,
    samples: Sequence[str | None],
    normalize: Callable[[str], str] = lambda s: " ".join(s.lower().split()),
) -> float | None:
    """Fraction of ``samples`` whose normalised answer equals the normalised ``reference``.

    Samples without an answer count as disagreeing. ``None`` when there is no reference answer
    or no sample (nothing to agree with).
    """
    if reference is None or len(samples) == 0:
        return None
    ref = normalize(reference)
    agree = sum(1 for s in samples if s is not None and normalize(s) == ref)
    return agree / len(samples)

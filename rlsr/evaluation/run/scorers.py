"""Confidence scorers compared on the same responses (RLSR paper Sec. D.3-D.4, Tab. 6-7).

* ``verbalized`` (VC): the number in ``<confidence>`` (after the Sec. C.3 fallback if needed).
* ``logprob``: length-normalised log-probability of the answer span,
  ``mean_t log p(a_t | prompt, response before the answer, a_<t)``, reported as the confidence
  ``exp(mean)`` in (0, 1] (the geometric-mean token probability; a monotone map, so AURC and
  Acc@c do not depend on the choice). Defined once in ``rlsr.equations.logprob``, which RLSR's training
  ranking with ``method.confidence=logprob`` uses too (re-exported here).
* ``expected``: the policy's expected verbalized confidence, ``E[c] = sum_l P(l) * l`` with
  ``P(l)`` its probability of writing level ``l`` (then ``</confidence>``) after the response's
  last ``<confidence>`` tag, normalised over ``rlsr.equations.logprob.EXPECTED_LEVELS`` (0.0, 0.1, ..., 1.0).
  Greedy decoding writes only the argmax level; where the policy still spreads its mass (a
  near-tie between levels), this reads its lean. Defined in ``rlsr.equations.logprob``
  (``expected_confidence``; re-exported here).
* ``consistency`` (SC): draw K more responses at temperature T (paper: K = 8, T = 0.7) and use
  the fraction whose extracted answer agrees with the evaluated answer:
  ``SC = (1/K) * sum_k 1[norm(a_k) == norm(a)]``.

Everything here is a pure function; ``rlsr.evaluation.run.runner`` calls the backend.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from rlsr.equations.logprob import (
    EXPECTED_LEVELS,
    answer_span,
    expected_confidence,
    length_normalized_logprob,
    logprob_confidence,
)
from rlsr.run.eval_protocol import RESPONSE_FORMATS, SCORERS, check_scorers

__all__ = [
    "SCORERS",
    "RESPONSE_FORMATS",
    "check_scorers",
    "length_normalized_logprob",
    "logprob_confidence",
    "answer_span",
    "EXPECTED_LEVELS",
    "expected_confidence",
    "self_consistency",
]


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

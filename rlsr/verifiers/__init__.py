"""Correctness verifiers, one module each (exact_match, math, mcq, llm_judge, plugin; ``workers``:
the time-limited worker processes of math and plugins; ``budget``: a training pool's no-verdict
budget; ``base``: results, status codes, input checks) and their registry. Every verifier has
``verify_batch(predictions, golds, *, questions=None, options=None) -> VerificationResult`` and
``close()``. A new verifier is one module plus one line in ``VERIFIERS``
(docs/parsing_verifiers.md).
"""

from __future__ import annotations

from rlsr.verifiers.base import VerificationResult
from rlsr.verifiers.exact_match import ExactMatchVerifier, exact_match, normalize_answer
from rlsr.verifiers.llm_judge import LLMJudgeVerifier, parse_judgement, quote_answer
from rlsr.verifiers.math import MathVerifier, math_equal
from rlsr.verifiers.mcq import MCQVerifier, extract_choice_letter, mcq_match
from rlsr.verifiers.plugin import PluginVerifier, is_plugin_name, load_plugin

__all__ = [
    "VerificationResult",
    "normalize_answer",
    "exact_match",
    "math_equal",
    "extract_choice_letter",
    "mcq_match",
    "ExactMatchVerifier",
    "MathVerifier",
    "MCQVerifier",
    "LLMJudgeVerifier",
    "parse_judgement",
    "quote_answer",
    "get_verifier",
    "VERIFIERS",
    "PluginVerifier",
    "is_plugin_name",
    "load_plugin",
]

VERIFIERS = {
    "exact_match": ExactMatchVerifier,
    "math": MathVerifier,
    "mcq": MCQVerifier,
    "llm_judge": LLMJudgeVerifier,
}


def get_verifier(name: str, **kwargs):
    """The verifier called ``name`` (a ``VERIFIERS`` key or a plugin), ``kwargs`` to its
    constructor."""
    if is_plugin_name(name):
        return PluginVerifier(name, **kwargs)
    try:
        cls = VERIFIERS[name]
    except KeyError:
        raise ValueError(
            f"unknown verifier {name!r}; choose one of {sorted(VERIFIERS)} or a plugin "
            "'package.module:function' (docs/tasks.md)."
        ) from None
    return cls(**kwargs)

"""Correctness verifiers, one module each, and their registry.

- ``exact_match``: SQuAD-normalised exact match (HotPotQA);
- ``math``: math-verify in worker processes with a per-item time limit (Big-Math,
  MATH-500, GSM8K);
- ``mcq``: multiple choice with the answer-letter fallbacks of paper Sec. C.6.1 (MedQA,
  CommonsenseQA, GPQA);
- ``llm_judge``: the LLM-judge interface with the paper's judge prompt (TriviaQA, SimpleQA);
- ``plugin``: a user's ``"package.module:function"`` in the same worker processes
  (docs/tasks.md);
- ``workers``: the worker processes with the per-item time limit that math and plugins share;
- ``budget``: how many of a training pool's rollouts may go without a verdict before the run
  stops (``check_pool_verdicts``);
- ``base``: ``VerificationResult``, the per-item status codes and the shared input checks.

Every verifier has ``verify_batch(predictions, golds, *, questions=None, options=None)
-> VerificationResult`` and ``close()``; ``get_verifier(name, **kwargs)`` builds one by name.
A new verifier is one module plus one line in ``VERIFIERS`` (docs/parsing_verifiers.md).
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
    """Build the verifier called ``name`` ("exact_match", "math", "mcq", "llm_judge", or a
    plugin ``"package.module:function"``).

    kwargs go to its constructor: exact_match(strict), math(the fields of
    ``rlsr.verifiers.workers.WorkerSettings``), llm_judge(judge_fn, max_answer_chars), a plugin
    (max_failed_fraction and the fields of ``WorkerSettings``).
    """
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

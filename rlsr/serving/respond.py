"""One ``rlsr serve`` request end to end: render, generate, Sec. C.3 fallbacks, decide. The
steps are the evaluator's (``rlsr.evaluation.run.runner``: ``build_prompt`` + the chat template,
``rlsr.generation.fallbacks``), one request at a time on an async engine, so concurrent requests
reach the engine together and are batched there.
"""

from __future__ import annotations

import logging

from rlsr.data.formatting import build_prompt
from rlsr.generation.backends import EngineRejected, Sampling, render_chat
from rlsr.generation.fallbacks import (
    add_answer_fallback,
    add_confidence_fallback,
    answer_fallback_context,
    confidence_fallback_context,
    response_item,
)
from rlsr.serving.engine import Engine
from rlsr.serving.policy import ServeSettings, decide, selection_score

__all__ = ["render_question", "answer_or_abstain"]

logger = logging.getLogger("rlsr.serve")


def render_question(tokenizer, question: str, system_prompt: str) -> str:
    """The prompt text the evaluator would build for ``question`` under ``system_prompt``."""
    return render_chat(tokenizer, build_prompt(question, system_prompt))


async def answer_or_abstain(engine: Engine, question: str, settings: ServeSettings) -> dict:
    """Generate, apply the fallbacks, decide. Returns the runner's item plus ``score``,
    ``decision``, ``prompt_tokens`` and ``completion_tokens`` (every generation call: the usage
    of the engine, fallback contexts included) and ``fallback_error`` (None, or why a fallback
    could not run: its context did not fit the engine; the decision is then taken on what was
    generated, so a missing answer abstains)."""
    prompt = await engine.tokenizer_thread.run(
        render_question, engine.tokenizer, question, settings.system_prompt
    )  # off the event loop: a long question renders while the server answers others
    sampling = Sampling(settings.max_new_tokens, settings.sampling_temperature, settings.top_p)
    first = await engine.complete(prompt, sampling)
    item = response_item(prompt, first.text, first.finish_reason, first.completion_tokens)
    prompt_tokens, completion_tokens = first.prompt_tokens, first.completion_tokens
    item["fallback_error"] = None
    if settings.fallbacks:
        greedy = Sampling(settings.fallback_max_new_tokens, 0.0)
        for context_of, add in (
            (answer_fallback_context, add_answer_fallback),
            (confidence_fallback_context, add_confidence_fallback),
        ):
            context = context_of(item)
            if context is None:
                continue
            try:
                more = await engine.complete(prompt + context, greedy)
            except EngineRejected as err:  # e.g. prompt + response + suffix > the context
                item["fallback_error"] = str(err)
                logger.warning("fallback skipped, deciding on what was generated: %s", err)
                break
            add(item, context, more.text)
            prompt_tokens += more.prompt_tokens
            completion_tokens += more.completion_tokens
    score = selection_score(item["confidence"], settings.calibration_temperature)
    item.update(
        score=score,
        decision=decide(score, settings.tau, item["answer"]),
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
    )
    return item

"""The Sec. C.3 fallback steps, shared by ``rlsr evaluate`` (``rlsr.evaluation.run.runner``) and
``rlsr serve`` (``rlsr.serving.respond``): the record of one response, and for a response without
an answer (or a confidence) the text to continue after and how the continuation is read.

No ``<answer>`` -> continue ``response + ANSWER_FALLBACK_SUFFIX``; still no confidence -> continue
``generated + CONFIDENCE_FALLBACK_SUFFIX`` (each at most once per sample). The drivers decide
when and how to generate (a batch, a stream, one request); these functions only build contexts
and read continuations, so both applications record a sample identically.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from rlsr.core.parsing import ParsedResponse, parse_confidence, parse_plain_response, parse_response
from rlsr.core.prompts import ANSWER_FALLBACK_SUFFIX, CONFIDENCE_FALLBACK_SUFFIX

__all__ = [
    "append_text",
    "fallback_answer",
    "fallback_confidence",
    "read_response",
    "response_item",
    "answer_fallback_context",
    "add_answer_fallback",
    "confidence_fallback_context",
    "add_confidence_fallback",
]


def append_text(text: str, suffix: str) -> str:
    """``text`` + separator + ``suffix``: one space unless ``text`` is empty or ends in whitespace."""
    if not text or text[-1].isspace():
        return text + suffix
    return text + " " + suffix


_FIRST_NUMBER = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*%?", re.ASCII)


def fallback_answer(continuation: str) -> str | None:
    """Answer from the text generated after ``ANSWER_FALLBACK_SUFFIX``: an ``<answer>`` block if
    present, else the first line, stripped of surrounding punctuation and tags."""
    parsed = parse_response(continuation)
    if parsed.answer is not None:
        return parsed.answer
    line = continuation.strip().split("\n", 1)[0]
    line = re.sub(r"</?[A-Za-z]+>", " ", line)
    line = line.strip().strip(":").strip().rstrip(".").strip()
    return line or None


def fallback_confidence(continuation: str) -> float | None:
    """Confidence from the text generated after ``CONFIDENCE_FALLBACK_SUFFIX``: a
    ``<confidence>`` block if present, else the first number in it (``parse_confidence`` rules)."""
    parsed = parse_response(continuation)
    if parsed.confidence is not None:
        return parsed.confidence
    match = _FIRST_NUMBER.search(continuation[:200])
    return None if match is None else parse_confidence(match.group(0))


def read_response(text: str, response_format: str = "tags") -> ParsedResponse:
    """Answer, confidence and format verdict of one response in ``response_format``."""
    return parse_plain_response(text) if response_format == "plain" else parse_response(text)


def response_item(
    prompt_text: str,
    text: str,
    finish_reason: str,
    num_tokens: int,
    response_format: str = "tags",
    token_ids: Sequence[int] | None = None,
) -> dict:
    """The record of one generated response before any fallback: its parse and bookkeeping
    (with ``token_ids``, the generated ids too: ``EvalSettings.keep_token_ids``)."""
    parsed = read_response(text, response_format)
    extra = {} if token_ids is None else {"response_token_ids": list(token_ids)}
    return {
        **extra,
        "prompt_text": prompt_text,
        "response": text,
        "finish_reason": finish_reason,
        "num_tokens": num_tokens,
        "answer": parsed.answer,
        "answer_start": parsed.answer_start,  # offset in "generated" (the log-prob span)
        "confidence": parsed.confidence,
        "format_ok": parsed.format_ok,
        "fallbacks": [],
        "fallback_text": {},
        "generated": text,  # the response plus any fallback text, in order
    }


def answer_fallback_context(item: dict) -> str | None:
    """Sec. C.3: the text to continue after (response + ``ANSWER_FALLBACK_SUFFIX``) when the item
    has no answer, else None. The model continues ``item["prompt_text"] + context``."""
    if item["answer"] is not None:
        return None
    return append_text(item["generated"], ANSWER_FALLBACK_SUFFIX)


def add_answer_fallback(item: dict, context: str, text: str) -> None:
    """Record the continuation ``text`` of ``answer_fallback_context``: answer (and a confidence,
    if the continuation holds a ``<confidence>`` block). The answer's span for the log-prob scorer
    is its first occurrence in the continuation."""
    item["fallbacks"].append("answer")
    item["fallback_text"]["answer"] = text
    item["answer"] = fallback_answer(text)
    item["generated"] = context + text
    found = -1 if item["answer"] is None else item["generated"].find(item["answer"], len(context))
    item["answer_start"] = found if found >= 0 else None
    if item["confidence"] is None:
        item["confidence"] = parse_response(text).confidence


def confidence_fallback_context(item: dict) -> str | None:
    """Sec. C.3: the text to continue after (generated + ``CONFIDENCE_FALLBACK_SUFFIX``) when the
    item still has no confidence, else None."""
    if item["confidence"] is not None:
        return None
    return append_text(item["generated"], CONFIDENCE_FALLBACK_SUFFIX)


def add_confidence_fallback(item: dict, context: str, text: str) -> None:
    """Record the continuation ``text`` of ``confidence_fallback_context``."""
    item["fallbacks"].append("confidence")
    item["fallback_text"]["confidence"] = text
    item["confidence"] = fallback_confidence(text)
    item["generated"] = context + text

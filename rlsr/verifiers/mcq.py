"""Multiple-choice verifier (MedQA, CommonsenseQA, GPQA; answer-letter fallbacks of RLSR Sec. C.6.1)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable

from rlsr.verifiers.base import _check_lengths, match_verdicts
from rlsr.verifiers.exact_match import normalize_answer

_LETTER_ONLY = re.compile(r"\(?([A-Za-z])\s*[).:]?\)?\Z")
_LETTER_PREFIX = re.compile(r"\(?([A-Za-z])\s*[).:]\s*(\S.*)\Z", re.DOTALL)
_ANSWER_IS = re.compile(
    r"(?:the\s+)?(?:correct\s+|final\s+|best\s+)?(?:answer|option|choice)\s*(?:is|:)\s*:?\s*",
    re.IGNORECASE,
)


def _option_map(options) -> dict[str, str]:
    """Options as {LETTER: text}: a dict, a JSON str of a dict or list, or a list (A, B, C, …)."""
    if isinstance(options, str):
        try:
            options = json.loads(options)
        except json.JSONDecodeError as exc:
            raise ValueError(
                f"options must be a dict, a list or a JSON string of one; got {options[:80]!r}."
            ) from exc
    if isinstance(options, dict):
        mapping = {str(k).strip().upper(): str(v) for k, v in options.items()}
    elif isinstance(options, Iterable):
        mapping = {chr(ord("A") + i): str(v) for i, v in enumerate(options)}
    else:
        raise ValueError(f"options must be a dict, a list or a JSON string; got {type(options)}.")
    if not mapping or not all(len(k) == 1 and k.isalpha() for k in mapping):
        raise ValueError(f"options must be keyed by single letters (A, B, …); got {list(mapping)}.")
    return mapping


def _choice_from(text: str, mapping: dict[str, str]) -> str | None:
    text = text.strip().strip("*_`\"'").strip()
    if not text:
        return None
    match = _LETTER_ONLY.match(text)
    if match and match.group(1).upper() in mapping:
        return match.group(1).upper()
    match = _LETTER_PREFIX.match(text)
    if match and match.group(1).upper() in mapping:
        return match.group(1).upper()
    normalized = normalize_answer(text)
    hits = [k for k, v in mapping.items() if normalized and normalize_answer(v) == normalized]
    return hits[0] if len(hits) == 1 else None


def extract_choice_letter(answer: str | None, options) -> str | None:
    """The option letter an answer picks, or None (paper Sec. C.6.1 fallbacks, in order).

    1. direct letter: "C", "(C)", "C.", "c)"; 2. letter prefix: "D. Nitrofurantoin", "(D) …";
    3. "The answer is …" / "Answer: …" prefix, then 1, 2 and 4 on the rest;
    4. option text without letter: the SQuAD-normalised answer equals exactly one option's text.
    Letters must be among ``options`` (dict {letter: text}, list, or JSON str of either).
    """
    if answer is None:
        return None
    mapping = _option_map(options)
    answer = answer[:4096]  # bounded work on runaway answers
    letter = _choice_from(answer, mapping)
    if letter is not None:
        return letter
    match = _ANSWER_IS.search(answer)
    if match:
        return _choice_from(answer[match.end() :].rstrip(" ."), mapping)
    return None


def mcq_match(answer: str | None, gold: str, options) -> bool:
    """True iff the answer picks the gold option (gold: a letter, or an option's text)."""
    picked = extract_choice_letter(answer, options)
    return picked is not None and picked == extract_choice_letter(gold, options)


class MCQVerifier:
    """Multiple choice: letter of the answer (Sec. C.6.1 fallbacks) == gold letter."""

    name = "mcq"

    def verify_batch(self, predictions, golds, *, questions=None, options=None):
        _check_lengths(predictions, golds, options=options)
        if options is None:
            raise ValueError("the mcq verifier needs options=[per-item options (dict/list/JSON)].")
        return match_verdicts(
            predictions, golds, lambda p, gs, o: any(mcq_match(p, g, o) for g in gs), options
        )

    def close(self) -> None:
        pass

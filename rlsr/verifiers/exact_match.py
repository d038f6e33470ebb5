"""Exact-match verifier (HotPotQA; SQuAD normalisation, RLSR Sec. C.2)."""

from __future__ import annotations

import functools
import re
import string

from rlsr.verifiers.base import _check_lengths, _gold_list, match_verdicts

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)


_CACHED_NORMALIZE_CHARS = 512
"""Only answers up to this length are cached, so runaway answers cannot pin memory in the cache."""


def _normalize(text: str) -> str:
    text = text.lower().translate(_PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


_normalize_cached = functools.lru_cache(maxsize=1 << 16)(_normalize)


def normalize_answer(text: str) -> str:
    """SQuAD v1.1 normalisation: lowercase, drop ASCII punctuation, drop articles a/an/the,
    collapse whitespace (in that order, as the official SQuAD/HotPotQA evaluation script and
    RLCR's reward; used by the Exact-Match verifier of RLSR Sec. C.2).

    Cached for short strings: a GRPO pool repeats each gold G times and many predictions."""
    if len(text) > _CACHED_NORMALIZE_CHARS:
        return _normalize(text)
    return _normalize_cached(text)


def exact_match(prediction: str | None, gold_or_golds, strict: bool = False) -> bool:
    """True iff the prediction equals any accepted gold (Exact-Match verifier, RLSR Sec. C.2).

    strict=False: equal after ``normalize_answer`` (an answer that normalises to "" never
    matches). strict=True: equal after ``str.strip()`` only. A None prediction is False.
    """
    if prediction is None:
        return False
    golds = _gold_list(gold_or_golds)
    if strict:
        pred = prediction.strip()
        return bool(pred) and any(pred == g.strip() for g in golds)
    pred = normalize_answer(prediction)
    return bool(pred) and any(pred == normalize_answer(g) for g in golds)


class ExactMatchVerifier:
    """HotPotQA's verifier: SQuAD-normalised exact match (``strict=True`` for raw equality)."""

    name = "exact_match"

    def __init__(self, strict: bool = False):
        self.strict = strict

    def verify_batch(self, predictions, golds, *, questions=None, options=None):
        _check_lengths(predictions, golds)
        return match_verdicts(predictions, golds, lambda p, gs: exact_match(p, gs, self.strict))

    def close(self) -> None:
        pass

"""Math verifier (Big-Math, MATH-500, GSM8K): math-verify in worker processes with a per-item
time limit; a timeout, a crash or a parse failure counts as incorrect and is counted in
``VerificationResult.timeouts`` / ``.errors`` (docs/parsing_verifiers.md)."""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Sequence

from rlsr.verifiers.base import (
    CORRECT,
    ERROR,
    INCORRECT,
    MISSING,
    TIMEOUT,
    VerificationResult,
    _answered,
    _check_lengths,
    _gold_list,
)
from rlsr.verifiers.workers import ItemTimeout, VerifierWorkers, serve_chunks, time_limit

logger = logging.getLogger(__name__)


_DELIMITERS = ("$", "\\boxed", "\\(", "\\[")


def _math_candidates(text: str) -> list[str]:
    """Strings to hand to math_verify.parse, most faithful first.

    Answers that already carry a delimiter ($…$, \\boxed{}, \\(…\\), \\[…\\]) are parsed as they
    are first. A bare answer is first read as one LaTeX expression ("$…$", so "2^{10}", "\\frac12"
    and "\\sqrt 2" are not cut to their first number), then as \\boxed{…}, then as free text.
    """
    text = text.strip()
    wrapped = [f"${text}$", f"\\boxed{{{text}}}", text]
    if any(d in text for d in _DELIMITERS):
        return [text, *wrapped[:2]]  # e.g. "\\$12" (an escaped dollar) fails as it is
    return wrapped


def _parse_math(text: str) -> tuple[list, bool]:
    """(math_verify.parse result, whether it holds a sympy object).

    math-verify falls back to the raw string when nothing parses ("first_match" mode); such a
    result can still match an identical string, but a mismatch then counts as a parse failure.
    """
    from math_verify import parse

    fallback: list = []
    for candidate in _math_candidates(text):
        parsed = parse(candidate, parsing_timeout=None)
        if any(not isinstance(p, str) for p in parsed):
            return parsed, True
        fallback = fallback or parsed
    return fallback, False


def _math_status(prediction: str, golds: Sequence[str], gold_cache: dict | None = None) -> str:
    """CORRECT / INCORRECT / ERROR (prediction or every gold unparseable); no time limit here."""
    from math_verify import verify

    parsed_pred, pred_ok = _parse_math(prediction)
    any_gold_ok = False
    for gold in golds:
        if gold_cache is not None and gold in gold_cache:
            parsed_gold, gold_ok = gold_cache[gold]
        else:
            parsed_gold, gold_ok = _parse_math(gold)
            if gold_cache is not None:
                if len(gold_cache) > 4096:
                    gold_cache.clear()
                gold_cache[gold] = (parsed_gold, gold_ok)
        any_gold_ok |= gold_ok
        if parsed_gold and parsed_pred and verify(parsed_gold, parsed_pred, timeout_seconds=None):
            return CORRECT
    return INCORRECT if pred_ok and any_gold_ok else ERROR


def _math_item(
    prediction: str, golds: Sequence[str], timeout_s: float | None, gold_cache=None
) -> str:
    """One item under a time limit; any failure is a status, never an exception."""
    try:
        with time_limit(timeout_s):
            return _math_status(prediction, golds, gold_cache)
    except ItemTimeout:
        return TIMEOUT
    except Exception:  # noqa: BLE001 - any sympy / math-verify failure is an unverifiable item
        logger.debug("math verification failed", exc_info=True)
        return ERROR


def math_equal(prediction: str | None, gold, timeout_s: float | None = None) -> bool:
    """math-verify equivalence of ``prediction`` and a gold (str or list of accepted str);
    the Math-Verify verifier of RLSR Sec. C.2 (Math-500, GSM8K, Big-Math).

    Runs in-process. ``timeout_s`` applies only in the main thread (SIGALRM); for untrusted batches
    use ``MathVerifier``, whose worker processes enforce limits everywhere.
    """
    if prediction is None:
        return False
    return _math_item(prediction, _gold_list(gold), timeout_s) == CORRECT


# Test-only hooks (honoured only with MathVerifier(_test_hooks=True)): simulate a worker stuck in
# C code that SIGALRM cannot interrupt, and a worker that dies.
_HOOK_HANG = "\x00rlsr-test-hang\x00"
_HOOK_CRASH = "\x00rlsr-test-crash\x00"


def _math_worker_main(conn, test_hooks: bool) -> None:
    """Worker process: receive chunks [(key, prediction, golds)], send (key, status) per item."""
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    import math_verify  # noqa: F401 - import before announcing readiness

    gold_cache: dict = {}

    def status_of(item, timeout_s):
        _, prediction, golds = item
        if test_hooks and prediction == _HOOK_HANG:
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
            while True:
                time.sleep(3600)
        if test_hooks and prediction == _HOOK_CRASH:
            os._exit(3)
        return _math_item(prediction, golds, timeout_s, gold_cache)

    conn.send(("ready", os.getpid()))
    serve_chunks(conn, status_of)


class MathVerifier(VerifierWorkers):
    """math-verify in worker processes (``rlsr.verifiers.workers``), ``timeout_s`` per item
    (parse prediction + golds + compare). Identical (prediction, golds) pairs are verified once
    per batch (GRPO groups repeat answers)."""

    name = "math"
    preload = ("rlsr.verifiers.math", "math_verify")
    startup_hint = " check that `import math_verify` works;"

    def __init__(self, *, _test_hooks: bool = False, **workers) -> None:
        super().__init__(_math_worker_main, (_test_hooks,), **workers)

    def verify_batch(self, predictions, golds, *, questions=None, options=None):
        n = _check_lengths(predictions, golds)
        tasks: dict[tuple, list[int]] = {}
        status: list[str] = [MISSING] * n
        for i, (prediction, gold) in enumerate(zip(predictions, golds, strict=True)):
            gold_tuple = tuple(_gold_list(gold, i))
            if _answered(prediction, i):
                tasks.setdefault((prediction, gold_tuple), []).append(i)
        keyed = [(k, pred, gold) for k, (pred, gold) in enumerate(tasks)]
        if self.settings.num_workers == 0:
            results = {k: _math_item(p, g, self.settings.timeout_s) for k, p, g in keyed}
        else:
            results = self._run_workers(keyed)
        for k, indices in enumerate(tasks.values()):
            for i in indices:
                status[i] = results[k]
        return VerificationResult.from_status(status)

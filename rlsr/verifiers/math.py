"""Math verifier (Big-Math, MATH-500, GSM8K): math-verify in a pool of worker processes.

The pool applies a per-item time limit, so one pathological LaTeX string costs at most its limit
and never stalls or crashes a training step: a timeout, a crash or a parse failure counts as
incorrect and is counted in ``VerificationResult.timeouts`` / ``.errors``
(docs/parsing_verifiers.md).
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import threading
import time
from collections import deque
from collections.abc import Sequence
from contextlib import contextmanager
from multiprocessing.connection import wait as wait_for_connections

from rlsr.verifiers.base import (
    CORRECT,
    ERROR,
    INCORRECT,
    MISSING,
    TIMEOUT,
    VerificationResult,
    _check_lengths,
    _gold_list,
)

logger = logging.getLogger(__name__)


class _ItemTimeout(BaseException):
    """Raised by our SIGALRM handler; BaseException so math-verify's `except Exception` passes it."""


def _raise_item_timeout(signum, frame):
    raise _ItemTimeout()


@contextmanager
def _time_limit(seconds: float | None):
    """Interrupt the block after ``seconds`` with _ItemTimeout (SIGALRM; main thread only).

    Elsewhere (non-main thread, no SIGALRM) the block runs without a limit.
    """
    usable = (
        seconds is not None
        and seconds > 0
        and hasattr(signal, "setitimer")
        and threading.current_thread() is threading.main_thread()
    )
    if not usable:
        yield
        return
    previous = signal.signal(signal.SIGALRM, _raise_item_timeout)
    outer_delay, outer_interval = signal.setitimer(signal.ITIMER_REAL, seconds)
    started = time.monotonic()
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, signal.SIG_DFL if previous is None else previous)
        if outer_delay > 0:  # re-arm a caller's timer (e.g. pytest-timeout) with what was left
            remaining = max(outer_delay - (time.monotonic() - started), 1e-3)
            signal.setitimer(signal.ITIMER_REAL, remaining, outer_interval)


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
        with _time_limit(timeout_s):
            return _math_status(prediction, golds, gold_cache)
    except _ItemTimeout:
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
    conn.send(("ready", os.getpid()))
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError, KeyboardInterrupt):
            return
        if message is None:
            return
        chunk, timeout_s = message
        for key, prediction, golds in chunk:
            if test_hooks and prediction == _HOOK_HANG:
                signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
                while True:
                    time.sleep(3600)
            if test_hooks and prediction == _HOOK_CRASH:
                os._exit(3)
            conn.send((key, _math_item(prediction, golds, timeout_s, gold_cache)))


class _Worker:
    def __init__(self, context, test_hooks: bool):
        parent_conn, child_conn = context.Pipe(duplex=True)
        self.process = context.Process(
            target=_math_worker_main, args=(child_conn, test_hooks), daemon=True
        )
        self.process.start()
        child_conn.close()
        self.conn = parent_conn
        self.ready = False
        self.inflight: deque = deque()
        self.last_progress = time.monotonic()

    def kill(self) -> None:
        try:
            self.process.kill()
            self.process.join(timeout=5)
        except Exception:  # noqa: BLE001 - already gone
            pass
        self.conn.close()

    def stop(self) -> None:
        try:
            self.conn.send(None)
        except (OSError, ValueError):
            pass
        self.process.join(timeout=2)
        if self.process.is_alive():
            self.kill()
        else:
            self.conn.close()


class MathVerifier:
    """math-verify over a pool of worker processes with a per-item time limit.

    ``timeout_s``: time limit per item (parse prediction + golds + compare), enforced inside the
    worker by SIGALRM. A worker that does not report within ``timeout_s + grace_s`` (stuck in C
    code that signals cannot interrupt) is killed and restarted; its item counts as a timeout.
    A worker that dies marks its current item as an error and is restarted. Identical
    (prediction, golds) pairs are verified once per batch (GRPO groups repeat answers).

    ``num_workers=0`` verifies serially in this process (time limit only in the main thread).
    Workers start lazily on the first batch and persist across calls; call ``close()`` or use the
    verifier as a context manager. Start method: 'forkserver' (safe with torch's threads loaded).
    """

    name = "math"

    def __init__(
        self,
        num_workers: int | None = None,
        timeout_s: float = 5.0,
        grace_s: float = 2.0,
        chunk_size: int = 16,
        start_method: str = "forkserver",
        startup_timeout_s: float = 120.0,
        _test_hooks: bool = False,
    ):
        if num_workers is None:
            num_workers = min(4, os.cpu_count() or 1)
        if num_workers < 0:
            raise ValueError(f"num_workers must be >= 0 (0 = serial); got {num_workers}.")
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0 seconds; got {timeout_s}.")
        if chunk_size < 1:
            raise ValueError(f"chunk_size must be >= 1; got {chunk_size}.")
        self.num_workers = num_workers
        self.timeout_s = float(timeout_s)
        self.grace_s = float(grace_s)
        self.chunk_size = chunk_size
        self.start_method = start_method
        self.startup_timeout_s = startup_timeout_s
        self._test_hooks = _test_hooks
        self._workers: list[_Worker] = []
        self._context = None
        self._startup_failures = 0
        self.restarts = 0
        """Workers killed or lost and replaced since construction (a health metric)."""

    # -- lifecycle --
    def _start_workers(self) -> None:
        if self._context is None:
            self._context = multiprocessing.get_context(self.start_method)
            if self.start_method == "forkserver":
                self._context.set_forkserver_preload(["rlsr.verifiers.math", "math_verify"])
        while len(self._workers) < self.num_workers:
            self._workers.append(_Worker(self._context, self._test_hooks))

    def _replace(self, index: int) -> None:
        self._workers[index].kill()
        self._workers[index] = _Worker(self._context, self._test_hooks)
        self.restarts += 1

    def close(self) -> None:
        """Stop the worker processes (idempotent; the next batch starts new ones)."""
        workers, self._workers = self._workers, []
        for worker in workers:
            worker.stop()

    def __enter__(self) -> MathVerifier:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    # -- verification --
    def verify_batch(self, predictions, golds, *, questions=None, options=None):
        n = _check_lengths(predictions, golds)
        tasks: dict[tuple, list[int]] = {}
        status: list[str] = [MISSING] * n
        for i, (prediction, gold) in enumerate(zip(predictions, golds, strict=True)):
            gold_tuple = tuple(_gold_list(gold, i))
            if prediction is None:
                continue
            if not isinstance(prediction, str):
                raise ValueError(f"predictions[{i}] must be a str or None; got {prediction!r}.")
            tasks.setdefault((prediction, gold_tuple), []).append(i)
        keyed = [(k, pred, gold) for k, (pred, gold) in enumerate(tasks)]
        if self.num_workers == 0:
            results = {k: _math_item(p, g, self.timeout_s) for k, p, g in keyed}
        else:
            results = self._run_pool(keyed)
        for k, indices in enumerate(tasks.values()):
            for i in indices:
                status[i] = results[k]
        return VerificationResult.from_status(status)

    def _run_pool(self, keyed: list) -> dict[int, str]:
        self._start_workers()
        pending = deque(keyed)
        results: dict[int, str] = {}
        item_deadline = self.timeout_s + self.grace_s
        started = time.monotonic()
        while pending or any(w.inflight for w in self._workers):
            now = time.monotonic()
            for index, w in enumerate(self._workers):
                if w.ready and not w.inflight and pending:
                    if not w.process.is_alive():
                        # Died while idle (e.g. OOM-killed between batches): no item of ours was
                        # on it, so restart it instead of blaming the next item sent to it.
                        code = w.process.exitcode
                        logger.warning("idle math worker died (exit code %s); restarting it", code)
                        self._replace(index)
                        continue
                    chunk = [pending.popleft() for _ in range(min(self.chunk_size, len(pending)))]
                    w.inflight.extend(chunk)
                    w.last_progress = now
                    try:
                        w.conn.send((chunk, self.timeout_s))
                    except (OSError, ValueError):
                        pass  # detected as a dead worker below
            waits = [w.last_progress + item_deadline - now for w in self._workers if w.inflight]
            timeout = max(0.0, min(waits)) if waits else 0.5
            ready = wait_for_connections([w.conn for w in self._workers], timeout=timeout)
            for index, w in enumerate(self._workers):
                if w.conn in ready:
                    self._drain(index, results, pending)
            now = time.monotonic()
            for index, w in enumerate(self._workers):
                if w.inflight and now - w.last_progress > item_deadline:
                    key = w.inflight.popleft()[0]
                    results[key] = TIMEOUT
                    logger.warning(
                        "math worker exceeded %.1fs on one item; restarting it", item_deadline
                    )
                    pending.extendleft(reversed(w.inflight))
                    w.inflight.clear()
                    self._replace(index)
            if not any(w.ready for w in self._workers) and now - started > self.startup_timeout_s:
                raise RuntimeError(
                    f"no math-verify worker started within {self.startup_timeout_s:.0f}s; "
                    "use MathVerifier(num_workers=0) to verify in-process."
                )
        return results

    def _drain(self, index: int, results: dict, pending: deque) -> None:
        w = self._workers[index]
        try:
            while w.conn.poll():
                message = w.conn.recv()
                if message[0] == "ready":
                    w.ready = True
                    continue
                key, item_status = message
                if w.inflight and w.inflight[0][0] == key:
                    w.inflight.popleft()
                results[key] = item_status
                w.last_progress = time.monotonic()
        except (EOFError, OSError):
            if not w.ready:
                self._startup_failures += 1
                if self._startup_failures > 3:
                    raise RuntimeError(
                        f"math-verify workers keep dying at start-up (exit code "
                        f"{w.process.exitcode}); check that `import math_verify` works and that "
                        "the main script guards its code with `if __name__ == '__main__':` "
                        "(worker start-up re-imports it), or use MathVerifier(num_workers=0)."
                    ) from None
            # The worker died: its current item is an error; the rest of its chunk goes back.
            if w.inflight:
                results[w.inflight.popleft()[0]] = ERROR
                pending.extendleft(reversed(w.inflight))
                w.inflight.clear()
            w.process.join(timeout=1)
            logger.warning("math worker died (exit code %s); restarting it", w.process.exitcode)
            self._replace(index)

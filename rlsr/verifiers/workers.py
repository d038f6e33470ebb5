"""Worker processes that verify items under a per-item time limit, shared by the math verifier
and verifier plugins. A worker runs ``target(conn, *args)``: it sends ``("ready", pid)`` once,
then one ``(key, status)`` message per item of each chunk ``[(key, *item)]`` it receives.
``VerifierWorkers`` counts an item whose worker stays silent past ``timeout_s + grace_s`` (stuck
in C code that SIGALRM cannot interrupt) as ``timeout`` and restarts that worker, and the current
item of a worker that dies as ``error``; the rest of its chunk is re-queued. So one bad item costs
at most its time limit plus the grace, and never stalls the caller.
"""

from __future__ import annotations

import inspect
import logging
import multiprocessing
import os
import signal
import threading
import time
from collections import deque
from contextlib import contextmanager
from dataclasses import dataclass, fields
from multiprocessing.connection import wait as wait_for_connections

from rlsr.verifiers.base import ERROR, TIMEOUT

__all__ = [
    "EXECUTION_OPTIONS",
    "ItemTimeout",
    "time_limit",
    "VerifierWorkers",
    "WorkerSettings",
    "verifier_options",
    "serve_chunks",
]


@dataclass(frozen=True)
class WorkerSettings:
    """How a verifier's workers run its items: every verifier with workers takes these fields as
    keyword options (``**workers``). ``num_workers``: None = min(4, CPUs), 0 = serially in this
    process (the time limit then only in the main thread); ``grace_s``: how much longer than
    ``timeout_s`` a worker may stay silent before it is killed; 'forkserver' is safe with torch's
    threads loaded; ``startup_timeout_s``: how long the first worker may take to start."""

    num_workers: int | None = None
    timeout_s: float = 5.0
    grace_s: float = 2.0
    chunk_size: int = 16
    start_method: str = "forkserver"
    startup_timeout_s: float = 120.0

    def __post_init__(self) -> None:
        workers = self.num_workers
        if workers is None:
            workers = min(4, os.cpu_count() or 1)
        if not isinstance(workers, int) or workers < 0:
            raise ValueError(f"num_workers must be >= 0 (0 = serial); got {workers}.")
        if not (isinstance(self.timeout_s, int | float) and self.timeout_s > 0):
            raise ValueError(f"timeout_s must be > 0 seconds; got {self.timeout_s}.")
        if not isinstance(self.chunk_size, int) or self.chunk_size < 1:
            raise ValueError(f"chunk_size must be >= 1; got {self.chunk_size}.")
        object.__setattr__(self, "num_workers", workers)
        object.__setattr__(self, "timeout_s", float(self.timeout_s))
        object.__setattr__(self, "grace_s", float(self.grace_s))


# Options of a verifier with workers that say how items are run, never what a verdict is: a resumed run
# may change them (rlsr.data.tasks.version_records leaves them out of what a resume compares).
EXECUTION_OPTIONS = (*(f.name for f in fields(WorkerSettings)), "max_failed_fraction")


def verifier_options(cls: type) -> list[str]:
    """The options a task file may give verifier class ``cls``: its constructor's parameters but
    those rlsr fills in (``spec``, ``judge_fn``, ``_*``), ``**workers`` as ``WorkerSettings``'."""
    names = []
    for name, p in list(inspect.signature(cls.__init__).parameters.items())[1:]:
        if p.kind is inspect.Parameter.VAR_KEYWORD:
            names += [f.name for f in fields(WorkerSettings)]
        elif name not in ("spec", "judge_fn") and not name.startswith("_"):
            names.append(name)
    return names


logger = logging.getLogger(__name__)


class ItemTimeout(BaseException):
    """SIGALRM's; a BaseException so a verifier's own ``except Exception`` lets it pass."""


def _raise_item_timeout(signum, frame):
    raise ItemTimeout()


@contextmanager
def time_limit(seconds: float | None):
    """Interrupt the block after ``seconds`` with ``ItemTimeout`` (SIGALRM: in the main thread
    only; elsewhere the block runs without a limit)."""
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


def serve_chunks(conn, status_of) -> None:
    """A worker's loop: for each ``(chunk, timeout_s)`` received until ``None``, send ``(key,
    status)`` or ``(key, status, problem)`` per item, from ``status_of(item, timeout_s)``."""
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError, KeyboardInterrupt):
            return
        if message is None:
            return
        chunk, timeout_s = message
        for item in chunk:
            out = status_of(item, timeout_s)
            conn.send((item[0], *out) if isinstance(out, tuple) else (item[0], out))


class _Worker:
    def __init__(self, context, target, args: tuple):
        parent_conn, child_conn = context.Pipe(duplex=True)
        self.process = context.Process(target=target, args=(child_conn, *args), daemon=True)
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


class VerifierWorkers:
    """Base of the verifiers whose items run in worker processes ``target(conn, *args)``
    (module docstring); ``**workers``: the fields of ``WorkerSettings``. A subclass sets
    ``name``, ``preload`` (modules the forkserver imports once) and ``startup_hint`` (what to
    check when workers die at start-up). Workers start on the first batch and persist; call
    ``close()`` or use the verifier as a context manager."""

    name = "workers"
    preload: tuple[str, ...] = ()
    startup_hint = ""

    def __init__(self, target, args: tuple = (), **workers) -> None:
        self.settings = WorkerSettings(**workers)
        self._target, self._args = target, args
        self._workers: list[_Worker] = []
        self._context = None
        self._startup_failures = 0
        self.restarts = 0  # workers killed or lost and replaced (a health metric)

    # -- lifecycle --
    def _new_worker(self) -> _Worker:
        return _Worker(self._context, self._target, self._args)

    def _start_workers(self) -> None:
        if self._context is None:
            self._context = multiprocessing.get_context(self.settings.start_method)
            if self.settings.start_method == "forkserver" and self.preload:
                self._context.set_forkserver_preload(list(self.preload))
        while len(self._workers) < self.settings.num_workers:
            self._workers.append(self._new_worker())

    def _replace(self, index: int) -> None:
        self._workers[index].kill()
        self._workers[index] = self._new_worker()
        self.restarts += 1

    def close(self) -> None:
        """Stop the worker processes (idempotent; the next batch starts new ones)."""
        workers, self._workers = self._workers, []
        for worker in workers:
            worker.stop()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    # -- dispatch --
    def _run_workers(self, keyed: list, problems: dict | None = None) -> dict[int, str]:
        """``{key: status}`` for items ``[(key, *item)]``, verified by the workers; ``problems``
        (when given) gets ``{key: what went wrong}`` for items without a verdict."""
        settings = self.settings
        problems = {} if problems is None else problems
        self._start_workers()
        pending = deque(keyed)
        results: dict[int, str] = {}
        item_deadline = settings.timeout_s + settings.grace_s
        started = time.monotonic()
        while pending or any(w.inflight for w in self._workers):
            now = time.monotonic()
            for index, w in enumerate(self._workers):
                if w.ready and not w.inflight and pending:
                    if not w.process.is_alive():
                        # Died while idle (e.g. OOM-killed between batches): no item of ours was
                        # on it, so restart it instead of blaming the next item sent to it.
                        logger.warning(
                            "idle %s worker died (exit code %s); restarting it",
                            self.name,
                            w.process.exitcode,
                        )
                        self._replace(index)
                        continue
                    chunk = [
                        pending.popleft() for _ in range(min(settings.chunk_size, len(pending)))
                    ]
                    w.inflight.extend(chunk)
                    w.last_progress = now
                    try:
                        w.conn.send((chunk, settings.timeout_s))
                    except (OSError, ValueError):
                        pass  # detected as a dead worker below
            waits = [w.last_progress + item_deadline - now for w in self._workers if w.inflight]
            timeout = max(0.0, min(waits)) if waits else 0.5
            ready = wait_for_connections([w.conn for w in self._workers], timeout=timeout)
            for index, w in enumerate(self._workers):
                if w.conn in ready:
                    self._drain(index, results, pending, problems)
            now = time.monotonic()
            for index, w in enumerate(self._workers):
                if w.inflight and now - w.last_progress > item_deadline:
                    problem = (
                        f"no verdict within {item_deadline:g} s (timeout_s "
                        f"{settings.timeout_s:g} + grace_s {settings.grace_s:g}); its "
                        "worker was killed"
                    )
                    self._lose(index, TIMEOUT, problem, results, pending, problems)
            if (
                not any(w.ready for w in self._workers)
                and now - started > settings.startup_timeout_s
            ):
                raise RuntimeError(
                    f"no {self.name} worker started within {settings.startup_timeout_s:.0f}s; "
                    f"use num_workers=0 to verify in-process.{self.startup_hint}"
                )
        return results

    def _drain(self, index: int, results: dict, pending: deque, problems: dict) -> None:
        w = self._workers[index]
        try:
            while w.conn.poll():
                message = w.conn.recv()
                if message[0] == "ready":
                    w.ready = True
                    continue
                key, item_status = message[0], message[1]
                if w.inflight and w.inflight[0][0] == key:
                    w.inflight.popleft()
                results[key] = item_status
                if len(message) > 2:
                    problems[key] = message[2]
                w.last_progress = time.monotonic()
        except (EOFError, OSError):
            if not w.ready:
                self._startup_failures += 1
                if self._startup_failures > 3:
                    raise RuntimeError(
                        f"{self.name} workers keep dying at start-up (exit code "
                        f"{w.process.exitcode});{self.startup_hint} check that the main script "
                        "guards its code with `if __name__ == '__main__':` (worker start-up "
                        "re-imports it), or use num_workers=0."
                    ) from None
            w.process.join(timeout=1)
            problem = f"its worker process died (exit code {w.process.exitcode}) on this item"
            self._lose(index, ERROR, problem, results, pending, problems)

    def _lose(self, index, status, problem, results, pending, problems) -> None:
        """Worker ``index`` is killed or died: its current item gets ``status`` and ``problem``,
        the rest of its chunk goes back to ``pending``, and a new worker takes its place."""
        w = self._workers[index]
        if w.inflight:
            key = w.inflight.popleft()[0]
            results[key], problems[key] = status, problem
            pending.extendleft(reversed(w.inflight))
            w.inflight.clear()
        logger.warning("%s worker: %s; restarting it", self.name, problem)
        self._replace(index)

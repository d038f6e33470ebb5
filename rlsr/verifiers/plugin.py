"""Verifier plugins: a user's own correctness check, named ``"package.module:function"``.

The contract (docs/tasks.md, "Verifier plugins")::

    def verify(predictions: list[str], golds: list[str], *, questions=None, options=None)
        -> list[bool | None]

``predictions``: extracted answers (the ``<answer>`` block, never None: a missing answer is
"missing" without a call); ``golds``: the task's answer column; ``questions``: the question
texts; ``options``: ``{letter: text}`` per item for multiple-choice tasks, else None. It returns
one value per item: True (correct), False (wrong) or None (could not judge).

``PluginVerifier`` runs it in worker processes (``rlsr.verifiers.workers``, as the math
verifier), **one item per call**, each under ``timeout_s``: a call that sleeps past the limit
counts as ``timeout``, one that raises (also ``sys.exit`` / ``os._exit``) or returns anything but
a one-element list of bool / None counts as ``error``, None counts as ``unjudged``; each is
scored as incorrect, with what went wrong in ``VerificationResult.problems``. When more than
``max_failed_fraction`` (default 5 %) of a run's items (``rlsr evaluate``: of a dataset; training:
of one step's pool) get no verdict, the run stops naming the plugin and the first failing item
(``rlsr.evaluation.run.runner``, ``rlsr.verifiers.budget``). What must hold:

* the module imports by its dotted name in a fresh process: it is on ``sys.path`` (installed, in
  the working directory, or on ``PYTHONPATH``); the ``sys.path`` of the process that builds the
  verifier is handed to the workers, so a folder added there at run time also works;
* ``function`` is a module-level callable (workers look it up by name; nothing is pickled but
  the items, which are str, list and dict, and the returned bool / None).
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import sys
from collections.abc import Callable
from contextlib import contextmanager

import numpy as np

from rlsr.core.plugins import load_named
from rlsr.verifiers.base import (
    CORRECT,
    ERROR,
    INCORRECT,
    MAX_FAILED_FRACTION,
    MISSING,
    TIMEOUT,
    UNJUDGED,
    VerificationResult,
    _check_lengths,
)
from rlsr.verifiers.workers import ItemTimeout, VerifierWorkers, serve_chunks, time_limit

__all__ = [
    "PluginVerifier",
    "is_plugin_name",
    "load_plugin",
    "plugin_item_status",
    "plugin_source",
]

logger = logging.getLogger(__name__)


def is_plugin_name(name: str | None) -> bool:
    """True for ``"package.module:function"`` (a verifier plugin), False for a built-in name."""
    return isinstance(name, str) and ":" in name


def load_plugin(spec: str) -> Callable:
    """Import ``"package.module:function"`` and return the function. ``ValueError`` names the
    module, the reason and ``sys.path`` when it does not import, and what the module defines when
    the function is not there (``rlsr.core.plugins.load_named``)."""
    return load_named(spec, kind="verifier plugin", example="my_checks:verify")


class _PluginExit(BaseException):
    """Raised instead of ending this process when an in-process plugin calls ``os._exit``."""


@contextmanager
def _no_process_exit():
    """While a plugin runs in this process (``num_workers=0``): ``os._exit(n)`` raises
    ``_PluginExit`` instead of ending the run with nothing said (a crash in C code still ends
    it; workers isolate that)."""
    real = os._exit

    def refuse(code=0):
        raise _PluginExit(code)

    os._exit = refuse
    try:
        yield
    finally:
        os._exit = real


def _short(err: BaseException) -> str:
    text = " ".join(str(err).split())
    return f"{type(err).__name__}: {text[:300]}" if text else type(err).__name__


def plugin_source(spec: str) -> dict:
    """``{"module", "file", "sha256"}`` of the plugin's module: the SHA-256 of the module's own
    file (what a resumed run compares; code it imports from elsewhere is not hashed). ``file``
    and ``sha256`` are None for a module without a source file."""
    module_name = spec.strip().split(":")[0]
    try:
        found = importlib.util.find_spec(module_name)
    except (ImportError, ValueError):
        found = None
    origin = getattr(found, "origin", None)
    if not origin or not os.path.isfile(origin):
        return {"module": module_name, "file": None, "sha256": None}
    with open(origin, "rb") as fh:
        digest = hashlib.sha256(fh.read()).hexdigest()
    return {"module": module_name, "file": os.path.abspath(origin), "sha256": digest}


def plugin_item_status(function: Callable, prediction, gold, question, options, timeout_s):
    """The status of one item: the plugin called on one-element lists under ``timeout_s``;
    ``(status, problem)`` when it gave no verdict (what it raised or returned). Never raises: an
    ``ItemTimeout`` becomes "timeout"; a raise (also ``SystemExit``, ``os._exit``), a wrong
    length or a value other than True / False / None "error"; None "unjudged"."""
    try:
        with time_limit(timeout_s):
            out = function(
                [prediction],
                [gold],
                questions=None if question is None else [question],
                options=None if options is None else [options],
            )
            values = list(out)
    except ItemTimeout:
        return TIMEOUT, f"no verdict within timeout_s {timeout_s:g} s"
    except _PluginExit as exit_call:
        return ERROR, f"called os._exit({exit_call.args[0]}), which would have ended the run"
    except SystemExit as err:
        return ERROR, f"called sys.exit({err.code!r})"
    except Exception as err:  # noqa: BLE001 - a plugin's failure is one unverifiable item
        return ERROR, f"raised {_short(err)}"
    if len(values) != 1:
        return ERROR, f"returned {len(values)} values for 1 item"
    value = values[0]
    if value is None:
        return UNJUDGED, "returned None (could not judge)"
    if isinstance(value, bool | np.bool_):
        return CORRECT if bool(value) else INCORRECT
    return ERROR, f"returned {value!r} ({type(value).__name__}), not True / False / None"


def _plugin_worker_main(conn, spec: str, sys_path: list[str]) -> None:
    """Worker: import the plugin by name, then send (key, status) per received item."""
    for entry in reversed(sys_path):
        if entry not in sys.path:
            sys.path.insert(0, entry)
    try:
        function = load_plugin(spec)
    except ValueError as err:
        print(f"rlsr verifier worker: {err}", file=sys.stderr, flush=True)
        raise SystemExit(4) from None
    conn.send(("ready", None))
    with _no_process_exit():  # an os._exit is the item's error, not the worker's end
        serve_chunks(
            conn, lambda item, timeout_s: plugin_item_status(function, *item[1:], timeout_s)
        )


class PluginVerifier(VerifierWorkers):
    """A ``"package.module:function"`` verifier run in worker processes, one item per call, each
    under ``timeout_s`` (module docstring). The function is imported here first, so a plugin that
    does not import fails at construction, before any model loads. ``num_workers=0`` calls it in
    this process (time limit in the main thread only; an ``os._exit`` is caught as the item's
    error, but a hang or a crash in C code is not: workers isolate those).
    ``max_failed_fraction``: the most items of a run (a dataset in ``rlsr evaluate``, a step's
    pool in training) that may get no verdict before the run stops (module docstring)."""

    startup_hint = " check that the plugin imports in a fresh process (PYTHONPATH);"

    def __init__(
        self,
        spec: str,
        *,
        max_failed_fraction: float = MAX_FAILED_FRACTION,
        **workers,
    ) -> None:
        """``workers``: the fields of ``WorkerSettings``."""
        if not (
            isinstance(max_failed_fraction, int | float)
            and not isinstance(max_failed_fraction, bool)
            and 0 <= max_failed_fraction <= 1
        ):
            raise ValueError(
                f"max_failed_fraction must be a number in [0, 1] (1: never stop); got "
                f"{max_failed_fraction!r}."
            )
        super().__init__(**workers)
        self.function = load_plugin(spec)
        self.max_failed_fraction = float(max_failed_fraction)
        self.spec = spec.strip()
        self.name = self.spec
        self._sys_path = list(sys.path)

    def _worker_target(self):
        return _plugin_worker_main

    def _worker_args(self) -> tuple:
        return (self.spec, self._sys_path)

    def verify_batch(self, predictions, golds, *, questions=None, options=None):
        n = _check_lengths(predictions, golds, questions=questions, options=options)
        status: list[str] = [MISSING] * n
        keyed = []
        for i, prediction in enumerate(predictions):
            if prediction is None:
                continue
            if not isinstance(prediction, str):
                raise ValueError(f"predictions[{i}] must be a str or None; got {prediction!r}.")
            question = None if questions is None else questions[i]
            option = None if options is None else options[i]
            keyed.append((i, prediction, golds[i], question, option))
        problems: dict[int, str] = {}
        if self.settings.num_workers == 0:
            with _no_process_exit():
                results = {
                    k: plugin_item_status(self.function, p, g, q, o, self.settings.timeout_s)
                    for k, p, g, q, o in keyed
                }
        else:
            results = self._run_workers(keyed, problems)
        for key, item_status in results.items():
            if isinstance(item_status, tuple):
                item_status, problems[key] = item_status
            status[key] = item_status
        for key, problem in problems.items():
            logger.debug("verifier plugin %s, item %d: %s", self.spec, key, problem)
        return VerificationResult.from_status(status, problems)

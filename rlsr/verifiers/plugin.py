"""Verifier plugins: a user's own correctness check, named ``"package.module:function"``
(docs/tasks.md, "Verifier plugins")::

    def verify(predictions: list[str], golds: list[str], *, questions=None, options=None)
        -> list[bool | None]

True (correct), False (wrong) or None (could not judge) per item. ``PluginVerifier`` calls it in
worker processes (``rlsr.verifiers.workers``), one item per call under ``timeout_s``: past the
limit is ``timeout``; a raise (also ``sys.exit`` / ``os._exit``) or a return other than a
one-element list of bool / None is ``error``; None is ``unjudged``; each scored as wrong, with
what went wrong in ``VerificationResult.problems``. Past ``max_failed_fraction`` of a run's items
without a verdict, the run stops. The module must import by its dotted name in a fresh process
(this process's ``sys.path`` is handed to the workers), and ``function`` be module-level.
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
    _answered,
    _check_lengths,
)
from rlsr.verifiers.workers import ItemTimeout, VerifierWorkers, serve_chunks, time_limit

__all__ = ["PluginVerifier", "is_plugin_name", "load_plugin", "plugin_item_status", "plugin_source"]

logger = logging.getLogger(__name__)


def is_plugin_name(name: str | None) -> bool:
    """True for ``"package.module:function"`` (a verifier plugin), False for a built-in name."""
    return isinstance(name, str) and ":" in name


def load_plugin(spec: str) -> Callable:
    """The function ``"package.module:function"`` names (``rlsr.core.plugins.load_named``)."""
    return load_named(spec, kind="verifier plugin", example="my_checks:verify")


class _PluginExit(BaseException):
    """Raised instead of ending this process when an in-process plugin calls ``os._exit``."""


@contextmanager
def _no_process_exit():
    """While a plugin runs in this process: ``os._exit(n)`` raises ``_PluginExit`` instead of
    ending the run with nothing said."""
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
    """The status of one item (the plugin called on one-element lists under ``timeout_s``), or
    ``(status, problem)`` when it gave no verdict (module docstring); never raises."""
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
    """A plugin (module docstring), imported here first so that one that does not import fails
    before any model loads. ``num_workers=0`` calls it in this process (an ``os._exit`` is caught
    as the item's error; a hang or a crash in C code is not: workers isolate those)."""

    startup_hint = " check that the plugin imports in a fresh process (PYTHONPATH);"

    def __init__(
        self, spec: str, *, max_failed_fraction: float = MAX_FAILED_FRACTION, **workers
    ) -> None:
        if not (
            isinstance(max_failed_fraction, int | float)
            and not isinstance(max_failed_fraction, bool)
            and 0 <= max_failed_fraction <= 1
        ):
            raise ValueError(
                f"max_failed_fraction must be a number in [0, 1] (1: never stop); got "
                f"{max_failed_fraction!r}."
            )
        self.spec = self.name = spec.strip()
        super().__init__(_plugin_worker_main, (self.spec, list(sys.path)), **workers)
        self.function = load_plugin(spec)
        self.max_failed_fraction = float(max_failed_fraction)

    def verify_batch(self, predictions, golds, *, questions=None, options=None):
        n = _check_lengths(predictions, golds, questions=questions, options=options)
        status: list[str] = [MISSING] * n
        keyed = []
        for i, prediction in enumerate(predictions):
            if not _answered(prediction, i):
                continue
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

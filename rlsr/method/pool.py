"""One optimizer step's pool, its ``rlsr/*`` statistics, and the observers that see it.

The pool is every completion of one optimizer step, gathered from every process in TRL's row
order (``rlsr.method.trainer``: process order; each prompt's G completions consecutive). ``Pool`` holds
what every process knows alike after the gather: verdicts, confidences, format checks, the
verifier's no-verdict counts and, once the method has run, the unweighted reward columns.

Observers (``PoolObserver``) are what the trainer hands each pool to after the method: the
``pool_hook`` of tests and debugging (``HookObserver``) and the pool files
(``rlsr.method.pool_log.PoolLogObserver``). An observer says per pool whether it needs the pool's
per-completion strings (``rows``: one collective, made once for all observers) and TRL's
advantages (gathered once TRL has computed them). Its answers must be the same on every process:
both are collectives. This module imports neither torch nor TRL.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from rlsr.equations import rewards as R
from rlsr.metrics import selective as M
from rlsr.verifiers.base import ERROR, TIMEOUT, UNJUDGED

__all__ = ["ROW_FIELDS", "HookObserver", "Pool", "PoolObserver", "pool_statistics"]

# The per-completion strings gathered for observers (``Pool.rows``), in this order.
ROW_FIELDS = ("prompt_ids", "golds", "texts", "answers", "status")


@dataclass
class Pool:
    """One pooled reward computation (module docstring). ``rewards``: the method's unweighted
    columns ``(n, n_columns)``, set after the method ran; ``rows``: ``{ROW_FIELDS name: list}``,
    gathered only when an observer needs them."""

    mode: str  # "train" or "eval"
    global_step: int  # optimizer steps done when the pool was generated
    max_steps: int
    num_generations: int  # G: completions per prompt, consecutive rows
    process_index: int
    num_processes: int
    correct: np.ndarray  # bool, the verifier's verdict
    confidence: np.ndarray  # float64, NaN = missing
    format_ok: np.ndarray  # bool
    timeouts: int = 0
    errors: int = 0
    unjudged: int = 0
    rewards: np.ndarray | None = None
    rows: dict[str, list] | None = None

    @property
    def size(self) -> int:
        return int(self.correct.shape[0])

    @property
    def no_verdict(self) -> dict[str, int]:
        """``{status: n}`` of the pool's rollouts without a verdict, by kind."""
        return {TIMEOUT: self.timeouts, ERROR: self.errors, UNJUDGED: self.unjudged}

    def statistics(self) -> dict[str, float]:
        """``pool_statistics`` of this pool."""
        return pool_statistics(self.correct, self.confidence, self.format_ok,
                               self.timeouts, self.errors, self.unjudged)  # fmt: skip

    def as_dict(self) -> dict:
        """The ``pool_hook`` view: every field but ``max_steps`` / ``num_generations``, the rows
        flattened in, the rewards as their own float32 copy."""
        view = {
            "mode": self.mode,
            "global_step": self.global_step,
            "process_index": self.process_index,
            "num_processes": self.num_processes,
            "correct": self.correct,
            "confidence": self.confidence,
            "format_ok": self.format_ok,
            "rewards": np.asarray(self.rewards).astype(np.float32),
            "timeouts": self.timeouts,
            "errors": self.errors,
            "unjudged": self.unjudged,
        }
        return {**view, **(self.rows or {})}


def pool_statistics(
    correct: np.ndarray,
    confidence: np.ndarray,
    format_ok: np.ndarray,
    timeouts: int,
    errors: int = 0,
    unjudged: int = 0,
) -> dict[str, float]:
    """``rlsr/*`` log values for one pool. Missing confidences count as 0 (as in the ranking).
    ``timeouts`` / ``errors`` / ``unjudged``: items without a verdict (time limit; a crash, a
    raise or a wrong return value of a plugin; the verifier could not judge, a plugin's None),
    each scored and rewarded as wrong (docs/training.md)."""
    ok = np.asarray(correct, dtype=bool)
    conf = R.confidence_for_ranking(confidence)
    n = int(ok.shape[0])
    return {
        "rlsr/pool_size": float(n),
        "rlsr/aurc": M.aurc(conf, ok),
        "rlsr/ece": M.ece(conf, ok),
        "rlsr/accuracy": float(ok.mean()),
        "rlsr/mean_confidence": float(conf.mean()),
        "rlsr/confidence_gap": M.confidence_gap(conf, ok),
        "rlsr/format_rate": float(np.asarray(format_ok, dtype=bool).mean()),
        "rlsr/confidence_parsed_rate": float(np.mean(~np.isnan(np.asarray(confidence, float)))),
        "rlsr/verifier_timeouts": float(timeouts),
        "rlsr/verifier_errors": float(errors),
        "rlsr/verifier_unjudged": float(unjudged),
    }


class PoolObserver:
    """What sees every pool after the method (module docstring). Override what you need; the
    defaults need nothing and do nothing. Called on every process."""

    def needs_rows(self, pool: Pool) -> bool:
        """Whether ``observe`` reads ``pool.rows`` (a collective: the same answer on every
        process)."""
        return False

    def needs_advantages(self, pool: Pool) -> bool:
        """Whether ``observe_advantages`` is called for this pool (a collective, as above)."""
        return False

    def observe(self, pool: Pool) -> None:
        """Called once per pool, after the method's reward columns (``pool.rewards``)."""

    def observe_advantages(self, pool: Pool, advantages: np.ndarray) -> None:
        """Called once TRL computed the pool's advantages (gathered, in the pool's row order)."""


class HookObserver(PoolObserver):
    """``pool_hook(pool: dict)`` (``Pool.as_dict``, rows included) on every pool."""

    def __init__(self, hook: Callable[[dict], None]):
        self.hook = hook

    def needs_rows(self, pool: Pool) -> bool:
        return True

    def observe(self, pool: Pool) -> None:
        self.hook(pool.as_dict())

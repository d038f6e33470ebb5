"""The verdict budget of one training pool: when more of an optimizer step's pool (all B x G
rollouts of every process) than the verifier's ``max_failed_fraction`` got no verdict, training
stops; under it each such rollout is rewarded as wrong, with one warning. ``rlsr.method.trainer``
passes the gathered counts, the collective and the run folder in (no torch, no run layout here).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence

from rlsr.verifiers.base import (
    ERROR,
    INVALID,
    NO_VERDICT,
    TIMEOUT,
    UNJUDGED,
    VerifierFailure,
    failure_message,
    over_budget,
)

__all__ = ["check_pool_verdicts", "first_without_verdict", "no_verdict_counts"]

# (prompt id, status, problem) of a rollout without a verdict
Failing = tuple[object, str, str | None]


def no_verdict_counts(status: Sequence[str]) -> list[int]:
    """``[timeouts, errors, unjudged]`` among per-item ``status`` codes (``invalid``, the old
    word for unjudged, counts as unjudged)."""
    return [
        sum(s == TIMEOUT for s in status),
        sum(s == ERROR for s in status),
        sum(s in (UNJUDGED, INVALID) for s in status),
    ]


def first_without_verdict(
    ids: Sequence, status: Sequence[str], problems: Mapping[int, str]
) -> Failing | None:
    """``(id, status, problem)`` of the first item without a verdict; None when all have one."""
    for i, (item, st) in enumerate(zip(ids, status, strict=False)):
        if st in NO_VERDICT:
            return item, st, problems.get(i)
    return None


def check_pool_verdicts(
    counts: Mapping[str, int],
    pool_size: int,
    local: Failing | None,
    *,
    verifier: str,
    limit: float | None,
    step: int,
    mode: str,
    gather: Callable[[list], list],
    newest_checkpoint: Callable[[], str | None],
    log: logging.Logger,
) -> None:
    """Stop the run (``VerifierFailure`` naming the verifier, ``step`` and the pool's first
    failing rollout) when more of the pool's ``counts`` ({status: n}) than ``limit`` got no
    verdict; ``gather`` collects every process's ``local`` first failure, called on every
    process only then. Under the limit, one warning on ``log``."""
    failed = sum(counts.values())
    if not failed:
        return
    if not over_budget(failed, pool_size, limit):
        if local is not None:
            log.warning(
                "step %d: verifier %s gave no verdict on %d of %d rollouts (first on this "
                "process: prompt id %r, %s: %s); rewarded as wrong", step,
                verifier, failed, pool_size, *local,
            )  # fmt: skip
        return
    first = next((f for f in gather([local]) if f is not None), None)
    newest = newest_checkpoint()
    saved = (
        f"checkpoints saved so far are kept (newest: {newest})"
        if newest else "no checkpoint was saved yet"
    )  # fmt: skip
    raise VerifierFailure(failure_message(
        verifier, counts, pool_size, limit, f"the {mode} pool of optimizer step {step}", first,
        f"The run stopped before this step's update; {saved}. Fix the verifier, then rerun "
        "the same command: it resumes from the newest checkpoint (a plugin's file changed "
        "since a checkpoint was saved is refused: docs/tasks.md); or set the verifier "
        "option max_failed_fraction in the task file.",
    ))  # fmt: skip

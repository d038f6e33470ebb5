"""Shared pieces of the verifiers: per-item status codes, ``VerificationResult`` and input checks.

Every verifier has ``verify_batch(predictions, golds, *, questions=None, options=None)
-> VerificationResult``. ``predictions`` are extracted answers (``ParsedResponse.answer``; None =
no answer, always incorrect and not an error); each gold is a str or a list of accepted strings.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

# Per-item status codes (VerificationResult.status).
CORRECT, INCORRECT, MISSING, TIMEOUT, ERROR, UNJUDGED = (
    "correct",
    "incorrect",
    "missing",
    "timeout",
    "error",
    "unjudged",
)
# What samples.jsonl files of earlier evaluations call UNJUDGED; read back as UNJUDGED.
INVALID = "invalid"
# Statuses without a verdict: the verifier failed (timeout, error) or could not judge (unjudged).
# Each is scored as wrong (docs/tasks.md, "When a verifier cannot judge").
NO_VERDICT = (TIMEOUT, ERROR, UNJUDGED, INVALID)
# A run stops when more than this fraction of its items have no verdict (a plugin's option
# max_failed_fraction; docs/tasks.md).
MAX_FAILED_FRACTION = 0.05


class VerifierFailure(RuntimeError):
    """More items than the verifier's ``max_failed_fraction`` allows got no verdict
    (``failure_message``): the run stops instead of scoring them all as wrong."""


@dataclass(frozen=True)
class VerificationResult:
    """Outcome of ``verify_batch``: ``correct`` per item, its ``status`` code, how many items got
    no verdict by kind (each scored as incorrect) and ``problems``, ``{item index: what went
    wrong}`` for those where the verifier knows it."""

    correct: np.ndarray
    timeouts: int = 0
    errors: int = 0
    status: tuple[str, ...] = field(default=())
    unjudged: int = 0
    problems: Mapping[int, str] = field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.correct.shape[0])

    @property
    def accuracy(self) -> float:
        return float(self.correct.mean()) if len(self) else float("nan")

    @property
    def no_verdict(self) -> int:
        """Items without a verdict: timeouts + errors + unjudged."""
        return self.timeouts + self.errors + self.unjudged

    @classmethod
    def from_status(
        cls, status: Sequence[str], problems: Mapping[int, str] | None = None
    ) -> VerificationResult:
        status = tuple(status)
        return cls(
            correct=np.array([s == CORRECT for s in status], dtype=bool),
            timeouts=sum(s == TIMEOUT for s in status),
            errors=sum(s == ERROR for s in status),
            status=status,
            unjudged=sum(s in (UNJUDGED, INVALID) for s in status),
            problems=dict(problems or {}),
        )


# --- the failure budget ---------------------------------------------------------------------------


def failure_message(
    verifier: str,
    counts: Mapping[str, int],
    total: int,
    limit: float,
    scope: str,
    first: tuple[object, str, str | None] | None,
    fix: str,
) -> str:
    """The message of a run stopped by ``VerifierFailure``: ``counts`` ({status: n}) of ``total``
    items of ``scope``, the fraction allowed, the ``first`` (id, status, problem) and ``fix``."""
    failed = sum(counts.get(s, 0) for s in NO_VERDICT)
    plural = {ERROR: "errors", TIMEOUT: "timeouts", UNJUDGED: "unjudged", INVALID: "unjudged"}
    kinds = ", ".join(
        f"{counts[s]} {plural[s]}" for s in (ERROR, TIMEOUT, UNJUDGED, INVALID) if counts.get(s)
    )
    text = (
        f"verifier {verifier} gave no verdict on {failed} of {total} items of {scope} ({kinds}), "
        f"more than its max_failed_fraction {limit:g} allows ({int(limit * total)} of {total})"
    )
    if first is not None:
        item, status, problem = first
        text += f"; first failing item: id {item!r} ({status}: {problem or 'no detail'})"
    return f"{text}. {fix}"


def over_budget(failed: int, total: int, limit: float | None) -> bool:
    """True when ``failed`` items without a verdict out of ``total`` exceed ``limit`` (a
    fraction; None: the verifier sets no limit)."""
    return limit is not None and failed > limit * total


# --- shared input checks -------------------------------------------------------------------------


def _gold_list(gold, index: int | None = None) -> list[str]:
    """A gold as a non-empty list of str (accepts a str or an iterable of str)."""
    where = "" if index is None else f" (item {index})"
    golds = [gold] if isinstance(gold, str) else list(gold) if gold is not None else []
    if not golds or not all(isinstance(g, str) for g in golds):
        raise ValueError(
            f"gold{where} must be a str or a non-empty list of str; got {gold!r}. "
            "Use the dataset's 'answers' column (list of accepted answers) or 'answer'."
        )
    return golds


def _check_lengths(predictions, golds, **others) -> int:
    n = len(predictions)
    if len(golds) != n:
        raise ValueError(
            f"golds has {len(golds)} items but predictions has {n}; pass one per item."
        )
    for name, values in others.items():
        if values is not None and len(values) != n:
            raise ValueError(f"{name} has {len(values)} items but predictions has {n}.")
    return n


def _answered(prediction, index: int) -> bool:
    """False for a missing answer (None), True for a str; anything else is refused."""
    if prediction is not None and not isinstance(prediction, str):
        raise ValueError(f"predictions[{index}] must be a str or None; got {prediction!r}.")
    return prediction is not None


def match_verdicts(
    predictions, golds, matches: Callable[..., bool], *per_item
) -> VerificationResult:
    """The result of a verifier that matches each answer against its item's golds: ``missing``
    without an answer, else ``correct`` when ``matches(prediction, golds, *values)`` (``values``:
    the item's entry of each sequence in ``per_item``, such as its options), else ``incorrect``."""
    status = [
        MISSING if p is None else CORRECT if matches(p, _gold_list(g, i), *rest) else INCORRECT
        for i, (p, g, *rest) in enumerate(zip(predictions, golds, *per_item, strict=True))
    ]
    return VerificationResult.from_status(status)

"""Shared pieces of the verifiers: per-item status codes, ``VerificationResult`` and input checks.

Every verifier has ``verify_batch(predictions, golds, *, questions=None, options=None)
-> VerificationResult``. ``predictions`` are extracted answers (``ParsedResponse.answer``; None =
no answer, always incorrect and not an error); each gold is a str or a list of accepted strings.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

# Per-item status codes (VerificationResult.status).
CORRECT, INCORRECT, MISSING, TIMEOUT, ERROR, INVALID = (
    "correct",
    "incorrect",
    "missing",
    "timeout",
    "error",
    "invalid",
)


@dataclass(frozen=True)
class VerificationResult:
    """Outcome of ``verify_batch``.

    correct: bool per item. timeouts / errors: how many items could not be verified (counted as
    incorrect): time limit hit; parse failure, worker crash or (judge) an output that is neither
    YES nor NO. status: per-item code, one of "correct", "incorrect", "missing" (prediction None),
    "timeout", "error", "invalid" (judge output neither YES nor NO; also counted in ``errors``).
    """

    correct: np.ndarray
    timeouts: int = 0
    errors: int = 0
    status: tuple[str, ...] = field(default=())

    def __len__(self) -> int:
        return int(self.correct.shape[0])

    @property
    def accuracy(self) -> float:
        return float(self.correct.mean()) if len(self) else float("nan")

    @classmethod
    def from_status(cls, status: Sequence[str]) -> VerificationResult:
        status = tuple(status)
        return cls(
            correct=np.array([s == CORRECT for s in status], dtype=bool),
            timeouts=sum(s == TIMEOUT for s in status),
            errors=sum(s in (ERROR, INVALID) for s in status),
            status=status,
        )


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

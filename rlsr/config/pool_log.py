"""The ``pool_log`` section: every training pool on disk (``rlsr.pool_log`` writes them)."""

from __future__ import annotations

from dataclasses import dataclass, field

from rlsr.checks import check as _check
from rlsr.checks import is_int as _is_int


@dataclass
class PoolLogSettings:
    """Every training pool on disk (``rlsr.pool_log``; docs/training.md, "Every pool on disk"):
    one JSONL row per completion of the pooled B x G batch, into
    ``output_dir/pools/step-N.jsonl``, written by the main process only.

    Parameters:
        every (`int`, defaults to `0`):
            Write the pool generated after N optimizer steps when ``N % every == 0`` (so the first
            pool, step 0, always); 0: off. ``recipe=tiny`` sets 1; on big runs take e.g. 10.
        max_chars (`int` or `None`, defaults to `2000`):
            Keep the first ``max_chars`` characters of each completion text (the row keeps the
            full length in ``completion_chars``); null: the whole text.
    """

    every: int = field(
        default=0,
        metadata={"help": "Optimizer steps between written pools (N % every == 0); 0: off."},
    )
    max_chars: int | None = field(
        default=2000,
        metadata={"help": "Characters of each completion kept in the file; null: all."},
    )

    def validate(self) -> None:
        """Check this section; raises ``ConfigError`` naming the field and the fix."""
        _check(
            _is_int(self.every) and self.every >= 0,
            "pool_log.every",
            f"must be an integer >= 0 (optimizer steps between written pools; 0: off); got "
            f"{self.every!r}.",
        )
        _check(
            self.max_chars is None or (_is_int(self.max_chars) and self.max_chars >= 0),
            "pool_log.max_chars",
            f"must be an integer >= 0 (characters of each completion kept) or null (all); got "
            f"{self.max_chars!r}.",
        )

"""The two decisions of a selective deployment (``rlsr serve`` answers iff the score reaches the
certified tau) and their realised coverage next to the certified one: the drift rule of ``rlsr
serve-report`` and of the deployment audit. It sits on the evaluation side, which serving
imports, so the audit reads it without importing ``rlsr.serving``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rlsr.metrics.thresholds import clopper_pearson_interval

__all__ = ["ANSWERED", "ABSTAINED", "summarise_decisions"]

ANSWERED = "answered"
ABSTAINED = "abstained"


def summarise_decisions(
    records: Sequence[Mapping], *, tau: float | None = None, row: Mapping | None = None,
    level: float = 0.95,
) -> dict:  # fmt: skip
    """Realised coverage of the logged decisions taken at ``tau`` (all if None): answered / n
    with its exact ``level`` interval; ``drift``: the validation coverage of the threshold
    ``row`` lies outside it (the question mix or the model's confidence has moved)."""
    other = [r for r in records if tau is not None and r.get("tau") != tau]
    kept = [r for r in records if tau is None or r.get("tau") == tau]
    n = len(kept)
    answered = sum(1 for r in kept if r["decision"] == ANSWERED)
    out: dict = {
        "n": n,
        "answered": answered,
        "abstained": n - answered,
        "other_tau": len(other),
        "tau": tau,
        "coverage": answered / n if n else None,
        "coverage_interval": list(clopper_pearson_interval(answered, n, level)) if n else None,
        "level": level,
        "first": kept[0].get("time") if kept else None,
        "last": kept[-1].get("time") if kept else None,
        "validation_coverage": None if row is None else row.get("val_coverage"),
        "test_coverage": None if row is None else row.get("test_coverage"),
    }
    val = out["validation_coverage"]
    out["drift"] = (
        None
        if val is None or not n
        else not (out["coverage_interval"][0] <= val <= out["coverage_interval"][1])
    )
    return out

"""The two decisions of a selective deployment and their realised coverage: what the evaluation
certifies and ``rlsr serve`` applies.

A deployment (``rlsr.evaluation.deploy.deployment``) certifies a threshold tau; ``rlsr serve`` answers a
request iff its score reaches tau (``rlsr.serving.policy.decide``) and records ``ANSWERED`` or
``ABSTAINED``. ``summarise_decisions`` puts the realised coverage of such decisions (answered /
n, with its exact interval, ``rlsr.metrics.thresholds.clopper_pearson_interval``) next to the certified
validation coverage: the drift rule of ``rlsr serve-report`` (over the decision log,
``rlsr.serving.decision_log``) and of the deployment audit (over samples,
``rlsr.evaluation.deploy.audit``). It sits on the evaluation side, which serving imports, so the audit
reads it without importing ``rlsr.serving``.
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
    """Realised coverage of the logged decisions taken at ``tau`` (all if None).

    ``coverage`` = answered / n with its exact ``level`` interval; ``validation_coverage`` and
    ``test_coverage`` come from the threshold ``row``; ``drift`` is True when the validation
    coverage lies outside the interval (the question mix or the model's confidence has moved).
    """
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

"""The threshold ``rlsr serve`` applies: read from ``rlsr deploy``'s ``deployment.json`` and
checked against the model and adapter being served (docs/serving.md)."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from rlsr.data import task_record_problem
from rlsr.evaluation.deploy.deployment import RULES, model_identity
from rlsr.run.run_layout import DEPLOYMENT_FILE
from rlsr.serving import DEFAULT_RULE

__all__ = [
    "SERVED_SCORER",
    "ServedThreshold",
    "load_threshold",
    "manual_threshold",
    "provenance_mismatches",
    "promise",
]

SERVED_SCORER = "verbalized"  # the only confidence rlsr serve computes per request


@dataclass(frozen=True)
class ServedThreshold:
    tau: float
    rule: str | None  # None: --tau by hand
    temperature: float | None = None  # plain+temperature: scores are rescaled first
    guarantee: str | None = None
    row: dict = field(default_factory=dict)
    provenance: dict = field(default_factory=dict)
    path: str | None = None


def manual_threshold(tau: float) -> ServedThreshold:
    if not isinstance(tau, int | float) or not math.isfinite(tau):
        raise ValueError(f"--tau must be a finite number; got {tau!r}.")
    return ServedThreshold(tau=float(tau), rule=None)


def load_threshold(path: str | os.PathLike, rule: str = DEFAULT_RULE) -> ServedThreshold:
    """The row of ``rule`` in a ``deployment.json``. Refuses files without provenance (written by
    an older ``rlsr deploy``), infeasible rows and thresholds of another confidence scorer."""
    p = Path(path)
    if rule not in RULES:
        raise ValueError(f"--rule {rule!r}: choose one of {', '.join(RULES)}.")
    try:
        record = json.loads(p.read_text())
    except FileNotFoundError:
        raise ValueError(f"--threshold {p}: no such file; write one with rlsr deploy.") from None
    except json.JSONDecodeError as err:
        raise ValueError(f"--threshold {p}: not JSON ({err}); give a {DEPLOYMENT_FILE}.") from None
    rows = record.get("rows") if isinstance(record, Mapping) else None
    if not isinstance(rows, list):
        raise ValueError(f"--threshold {p}: no 'rows'; give the {DEPLOYMENT_FILE} of rlsr deploy.")
    provenance = record.get("provenance")
    if not isinstance(provenance, Mapping):
        raise ValueError(
            f"--threshold {p} records no provenance (written by an older rlsr deploy); rerun "
            "rlsr deploy --output-dir DIR to recompute it."
        )
    scorer = provenance.get("scorer", SERVED_SCORER)
    if scorer != SERVED_SCORER:
        raise ValueError(
            f"--threshold {p} was chosen on {scorer!r} confidences; rlsr serve computes "
            f"{SERVED_SCORER!r} confidences: rerun rlsr deploy --scorer {SERVED_SCORER}."
        )
    row = next((r for r in rows if r.get("rule") == rule), None)
    if row is None:
        have = ", ".join(str(r.get("rule")) for r in rows)
        raise ValueError(f"--threshold {p} has no {rule!r} row (it has: {have}); pick --rule.")
    if not row.get("feasible"):
        raise ValueError(
            f"--threshold {p}: the {rule} rule reached no threshold for target "
            f"{row.get('target')} (serving it would abstain on everything); pick another "
            "--rule or rerun rlsr deploy with a lower --deployment-target."
        )
    return ServedThreshold(
        tau=float(row["tau"]), rule=rule, temperature=row.get("temperature"),
        guarantee=row.get("guarantee"), row=dict(row), provenance=dict(provenance), path=str(p),
    )  # fmt: skip


def _short(adapter: Mapping) -> str:
    return f"{adapter.get('path')} (sha256 {str(adapter.get('sha256'))[:12]})"


def provenance_mismatches(provenance: Mapping, *, model: str, adapter: Mapping | None) -> list[str]:
    """What differs between the model / adapter / user task a threshold was computed for and
    those served (empty: nothing): models by ``model_identity``, adapters and task files by the
    sha256 of their content (a copy elsewhere matches)."""
    out = []
    recorded = provenance.get("model")
    served = model_identity(model)
    if recorded is None:
        out.append(f"model: the threshold records none, serving {served}")
    elif model_identity(recorded) != served:  # a record written with an alias matches too
        out.append(f"model: threshold computed for {recorded}, serving {served}")
    rec = provenance.get("adapter")
    if rec is None and adapter is not None:
        out.append(f"adapter: threshold computed without one, serving {_short(adapter)}")
    elif rec is not None and adapter is None:
        out.append(f"adapter: threshold computed for {_short(rec)}, serving none")
    elif rec is not None and adapter is not None and rec.get("sha256") != adapter.get("sha256"):
        out.append(f"adapter: threshold computed for {_short(rec)}, serving {_short(adapter)}")
    task = provenance.get("task")
    problem = None if not task else task_record_problem(task["name"], task)
    if problem:  # a user task's file changed since the evaluation (docs/tasks.md)
        out.append(problem)
    return out


def promise(threshold: ServedThreshold) -> str:
    """What serving at ``threshold`` promises, printed at start-up."""
    if threshold.rule is None:
        return (
            f"answering at confidence >= tau = {threshold.tau:.4g} (set by hand with --tau: "
            "no certified threshold, no guarantee)."
        )
    prov = threshold.provenance
    target = prov.get("target_accuracy", threshold.row.get("target"))
    scaled = (
        f", confidences rescaled by temperature {threshold.temperature:.4g}"
        if threshold.temperature is not None
        else ""
    )
    head = (
        f"answering at confidence >= tau = {threshold.tau:.4g} ({threshold.rule} rule of "
        f"{threshold.path}: {prov.get('validation_source')}, target accuracy {target}, "
        f"delta {prov.get('delta')}{scaled})."
    )
    return head + (f" {threshold.guarantee}" if threshold.guarantee else "")

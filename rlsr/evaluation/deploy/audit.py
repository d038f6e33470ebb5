"""The deployment audit: a running ``rlsr serve`` measured on held-out questions against what its
``deployment.json`` certified (``rlsr evaluate --backend openai-chat --audit-deployment``), from
each sample's ``served`` decision and ``correct``. Two numbers, each with its exact two-sided
Clopper-Pearson interval at level 1 - delta (the deployment's own delta):

* served answer rate = answered / n, next to the certified (validation) coverage; they agree when
  the certified coverage lies inside the interval (``decisions.summarise_decisions``);
* risk among answered = wrong answered / answered, next to the certified risk: for the
  ``clopper_pearson`` rule the bound it guarantees, 1 - target (agree: the interval's lower end
  is <= the bound); for the ``plain`` rules the validation risk 1 - val_accuracy (agree: inside
  the interval).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rlsr.evaluation.deploy.decisions import ANSWERED, summarise_decisions
from rlsr.metrics.thresholds import clopper_pearson_interval
from rlsr.run.run_layout import DEPLOYMENT_FILE

__all__ = ["audit_deployment", "audit_markdown"]


def _served_row(deployment: Mapping, rule: str | None) -> dict:
    rows = [r for r in deployment.get("rows") or [] if r.get("rule") == rule]
    if not rows:
        have = [r.get("rule") for r in deployment.get("rows") or []]
        raise ValueError(
            f"--audit-deployment: the server applied rule {rule!r}, which the deployment file "
            f"does not hold (it has {have}); give the {DEPLOYMENT_FILE} the server was started "
            "with."
        )
    return rows[0]


def audit_deployment(records: Sequence[Mapping], deployment: Mapping) -> dict:
    """Served answer rate and risk among answered of ``records`` (samples of an ``rlsr serve``
    endpoint) next to ``deployment`` (a deployment.json), and whether they agree."""
    served = [r.get("served") for r in records]
    if not records or any(s is None for s in served):
        raise ValueError(
            "--audit-deployment: the samples hold no served decision (was the endpoint rlsr "
            "serve?); nothing to audit."
        )
    rules = {s["rule"] for s in served}
    taus = {s["tau"] for s in served}
    if len(rules) != 1 or len(taus) != 1:
        raise ValueError(
            f"--audit-deployment: the samples were served under several thresholds (rules "
            f"{sorted(rules)}, taus {sorted(taus)}): a server restarted with another one; audit "
            "each into its own --output-dir."
        )
    (rule,), (tau,) = rules, taus
    row = _served_row(deployment, rule)
    delta = float((deployment.get("provenance") or {}).get("delta") or 0.1)
    level = 1.0 - delta
    coverage = summarise_decisions(
        [{"decision": s["decision"], "tau": tau} for s in served], tau=tau, row=row, level=level
    )
    answered = [r for r, s in zip(records, served, strict=True) if s["decision"] == ANSWERED]
    wrong = sum(1 for r in answered if not r["correct"])
    risk = wrong / len(answered) if answered else None
    risk_interval = (
        list(clopper_pearson_interval(wrong, len(answered), level)) if answered else None
    )
    if row.get("rule") == "clopper_pearson" and row.get("feasible"):
        certified_risk, kind = 1.0 - float(row["target"]), "guaranteed bound (1 - target)"
        risk_agrees = None if risk is None else risk_interval[0] <= certified_risk
    else:
        val_acc = row.get("val_accuracy")
        certified_risk = None if val_acc is None else 1.0 - float(val_acc)
        kind = "observed on validation (no guarantee)"
        risk_agrees = (
            None
            if risk is None or certified_risk is None
            else risk_interval[0] <= certified_risk <= risk_interval[1]
        )
    coverage_agrees = None if coverage["drift"] is None else not coverage["drift"]
    verdicts = [v for v in (coverage_agrees, risk_agrees) if v is not None]
    return {
        "n": len(records),
        "rule": rule,
        "tau": tau,
        "deployment_tau": row.get("tau"),
        "level": level,
        "answered": len(answered),
        "answer_rate": coverage["coverage"],
        "answer_rate_interval": coverage["coverage_interval"],
        "certified_coverage": row.get("val_coverage"),
        "certified_test_coverage": row.get("test_coverage"),
        "coverage_agrees": coverage_agrees,
        "wrong_answered": wrong,
        "risk_among_answered": risk,
        "risk_interval": risk_interval,
        "certified_risk": certified_risk,
        "certified_risk_kind": kind,
        "risk_agrees": risk_agrees,
        "agree": all(verdicts) if verdicts else None,
        "tau_matches": row.get("tau") == tau,
    }


def _pct(x) -> str:
    return "–" if x is None else f"{100 * x:.1f}%"


def _interval(pair) -> str:
    return "–" if pair is None else f"[{_pct(pair[0])}, {_pct(pair[1])}]"


def audit_markdown(results: Mapping[str, Mapping]) -> str:
    """One table row per dataset, then a sentence per dataset saying whether they agree."""
    lines = [
        "| dataset | n | rule | tau | served answer rate | interval | certified coverage | "
        "risk among answered | interval | certified risk |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, a in results.items():
        lines.append(
            f"| {name} | {a['n']} | {a['rule']} | {a['tau']:.4g} | {_pct(a['answer_rate'])} | "
            f"{_interval(a['answer_rate_interval'])} | {_pct(a['certified_coverage'])} | "
            f"{_pct(a['risk_among_answered'])} | {_interval(a['risk_interval'])} | "
            f"{_pct(a['certified_risk'])} |"
        )
    lines.append("")
    for name, a in results.items():
        level = f"{100 * a['level']:.0f}%"
        if a["agree"] is None:
            verdict = "cannot tell (nothing answered, or nothing certified)"
        elif a["agree"]:
            verdict = (
                f"AGREE at {level}: the certified coverage lies in the answer rate's interval "
                "and the risk among answered is consistent with the certified risk"
            )
        else:
            parts = []
            if a["coverage_agrees"] is False:
                parts.append("the answer rate differs from the certified coverage")
            if a["risk_agrees"] is False:
                parts.append("the risk among answered exceeds what was certified")
            verdict = f"DISAGREE at {level}: " + "; ".join(parts)
        note = "" if a["tau_matches"] else " (the server's tau differs from the file's!)"
        lines.append(f"{name}: {verdict}; certified risk is {a['certified_risk_kind']}.{note}")
    return "\n".join(lines) + "\n"

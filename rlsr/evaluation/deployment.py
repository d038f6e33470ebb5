"""Risk-controlled deployment on MedQA (RLSR paper Sec. 4.2, Tab. 3, Sec. C.6).

Pick tau on the validation split so that {confidence >= tau} reaches the target accuracy, then
report validation and test coverage / accuracy at that tau, for

* ``plain``: the paper's rule, tau = min{t : acc_val({s >= t}) >= target} (Sec. C.6.3);
* ``clopper_pearson``: our guarded rule, accept tau only while the (1 - delta) Clopper-Pearson
  upper bound on the selective error is <= 1 - target (``rlsr.metrics.select_threshold``);
* ``plain + temperature``: the post-hoc baseline of Sec. C.6.5, confidences recalibrated by a
  temperature fitted on validation data (``rlsr.metrics.temperature_scale``), then the plain rule.

When no threshold reaches the target (the paper's dagger rows), the row is marked infeasible and
reports the validation accuracy at the highest threshold (Tab. 3 shows it for RLVR: 66.6%).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from rlsr import metrics as M

__all__ = ["deployment_rows", "deployment_markdown"]


def _row(rule, val_conf, val_ok, test_conf, test_ok, target, delta, temperature=None) -> dict:
    method = "plain" if rule.startswith("plain") else "clopper_pearson"
    sel = M.select_threshold(val_conf, val_ok, target, method=method, delta=delta)
    row = {
        "rule": rule,
        "target": target,
        "feasible": bool(sel.feasible),
        "temperature": temperature,
    }
    if sel.feasible:
        test = M.apply_threshold(test_conf, test_ok, sel.threshold)
        row.update(
            tau=sel.threshold, val_coverage=sel.coverage, val_accuracy=sel.accuracy,
            val_selected=sel.n_selected, test_coverage=test.coverage, test_accuracy=test.accuracy,
            test_selected=test.n_selected,
            risk_upper_bound=None if math.isnan(sel.risk_upper_bound) else sel.risk_upper_bound,
        )  # fmt: skip
    else:
        top = float(np.max(val_conf))
        val = M.apply_threshold(val_conf, val_ok, top)
        row.update(
            tau=top, val_coverage=None, val_accuracy=val.accuracy, val_selected=None,
            test_coverage=None, test_accuracy=None, test_selected=None, risk_upper_bound=None,
        )  # fmt: skip
    return row


def deployment_rows(
    val_confidence: Sequence[float],
    val_correct: Sequence[bool],
    test_confidence: Sequence[float],
    test_correct: Sequence[bool],
    target: float,
    *,
    delta: float = 0.1,
) -> list[dict]:
    """Tab. 3 rows (one model): the paper's rule, the guarded rule and the temperature baseline."""
    vc, vo = np.asarray(val_confidence, float), np.asarray(val_correct, bool)
    tc, to = np.asarray(test_confidence, float), np.asarray(test_correct, bool)
    rows = [
        _row("plain", vc, vo, tc, to, target, delta),
        _row("clopper_pearson", vc, vo, tc, to, target, delta),
    ]
    scaler = M.temperature_scale(vc, vo)
    rows.append(
        _row("plain+temperature", scaler(vc), vo, scaler(tc), to, target, delta, scaler.temperature)
    )
    return rows


def _pct(x) -> str:
    return "–" if x is None else f"{100 * x:.1f}%"


def deployment_markdown(rows_by_method: dict[str, list[dict]]) -> str:
    """Markdown in the layout of paper Tab. 3 (dagger = target not reached on validation)."""
    lines = [
        "| Method | Rule | τ | Val. Cov. | Val. Acc. | Test Cov. | Test Acc. |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for method, rows in rows_by_method.items():
        for r in rows:
            name = method + ("" if r["feasible"] else "†")
            lines.append(
                f"| {name} | {r['rule']} | {r['tau']:.3g} | {_pct(r['val_coverage'])} | "
                f"{_pct(r['val_accuracy'])} | {_pct(r['test_coverage'])} | {_pct(r['test_accuracy'])} |"
            )
    return "\n".join(lines) + "\n"

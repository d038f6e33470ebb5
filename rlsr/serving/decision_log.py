"""The decision log of ``rlsr serve --decision-log F`` and its summary (``rlsr serve-report``).

One flushed JSON line per answered-or-abstained request: ``{"time", "request_id", "request_hash",
"confidence", "score", "tau", "rule", "decision"}``; the question only as its sha256. The summary
(``rlsr.evaluation.deploy.decisions.summarise_decisions``) puts the realised coverage with its
exact 95% interval next to the threshold's validation (and test) coverage, so drift shows.
"""

from __future__ import annotations

import datetime
import json
import os
from collections.abc import Mapping
from pathlib import Path

__all__ = [
    "DecisionLog",
    "decision_record",
    "read_decision_log",
    "summary_markdown",
]


def decision_record(
    item: Mapping,
    *,
    question_hash: str,
    tau: float,
    rule: str | None,
    request_id: str | None = None,
) -> dict:
    return {
        "time": datetime.datetime.now(datetime.UTC).isoformat(timespec="milliseconds"),
        "request_id": request_id,
        "request_hash": question_hash,
        "confidence": item["confidence"],
        "score": item["score"],
        "tau": tau,
        "rule": rule,
        "decision": item["decision"],
    }


class DecisionLog:
    """Append-only JSONL file; each record is written as one line and flushed (one event loop
    writes it, so lines never interleave)."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - closed by close()

    def write(self, record: Mapping) -> None:
        self._fh.write(json.dumps(record) + "\n")
        self._fh.flush()

    def close(self) -> None:
        self._fh.close()


def read_decision_log(path: str | os.PathLike) -> list[dict]:
    """Records of a decision log; a cut-off last line (server killed mid-write) is skipped, a
    malformed line elsewhere raises ValueError naming it."""
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"decision log {p}: no such file (rlsr serve --decision-log writes it).")
    lines = p.read_text(encoding="utf-8").splitlines()
    out = []
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            if i == len(lines):
                continue
            raise ValueError(f"decision log {p}, line {i}: not a JSON object.") from None
        if not isinstance(record, dict) or "decision" not in record:
            raise ValueError(f"decision log {p}, line {i}: no 'decision' field.")
        out.append(record)
    return out


def _pct(x) -> str:
    return "–" if x is None else f"{100 * x:.1f}%"


def summary_markdown(summary: Mapping) -> str:
    s = summary
    interval = (
        "–"
        if s["coverage_interval"] is None
        else f"[{_pct(s['coverage_interval'][0])}, {_pct(s['coverage_interval'][1])}]"
    )
    lines = [
        "| requests | answered | realised coverage | "
        f"{100 * s['level']:.0f}% interval | validation coverage | test coverage |",
        "| --- | --- | --- | --- | --- | --- |",
        f"| {s['n']} | {s['answered']} | {_pct(s['coverage'])} | {interval} | "
        f"{_pct(s['validation_coverage'])} | {_pct(s['test_coverage'])} |",
        "",
    ]
    if s["first"]:
        lines.append(f"Decisions from {s['first']} to {s['last']} at tau = {s['tau']}.")
    if s["other_tau"]:
        lines.append(f"{s['other_tau']} logged decisions used another tau and are left out.")
    if s["drift"]:
        lines.append(
            "DRIFT: the validation coverage lies outside the realised coverage's interval: the "
            "questions or the model's confidences differ from validation; re-check accuracy."
        )
    elif s["drift"] is False:
        lines.append("No drift detected: the validation coverage lies inside the interval.")
    return "\n".join(lines) + "\n"

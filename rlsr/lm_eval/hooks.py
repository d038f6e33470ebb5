"""What lm-evaluation-harness calls for a task of ``rlsr lm-eval tasks`` (docs/lm_eval.md).

``process_results(doc, results)`` reads the one generated response with rlsr's parser
(``rlsr.generation.fallbacks.response_item``: the tags format, or ``plain``), verifies its
answer with the task's verifier on the task's own verification inputs
(``rlsr.data.loading.verification_inputs``, the call ``rlsr evaluate`` makes) and returns, for
every metric, the same per-item record. Each aggregation turns the list of records into the
samples ``rlsr evaluate`` writes and reads its number from ``rlsr.evaluation.run.summary
.compute_metrics``: a missing confidence counts as 0.0, an item without a verdict as wrong,
ties in confidence as the expectation over orderings (``rlsr.metrics.selective``), so lm-eval's numbers
are ``metrics.json``'s on the same responses.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import datasets

from rlsr.data.loading import build_verifier, verification_inputs
from rlsr.evaluation.run.external import (
    LM_EVAL_FORMAT_FIELD,
    LM_EVAL_SYSTEM_FIELD,
    LM_EVAL_TASK_FIELD,
    LM_EVAL_USER_FIELD,
    TaskColumns,
)
from rlsr.evaluation.run.runner import verify_items
from rlsr.evaluation.run.summary import compute_metrics
from rlsr.generation.fallbacks import response_item
from rlsr.metrics import selective as M

__all__ = [
    "METRICS",
    "TASK_FIELD",
    "VERIFIER_FIELD",
    "FORMAT_FIELD",
    "SYSTEM_FIELD",
    "USER_FIELD",
    "load_rows",
    "process_results",
    "aurc",
    "ranking_gain",
    "ece",
    "acc_at_10",
    "acc_at_25",
    "acc_at_50",
    "accuracy",
    "format_rate",
    "missing_confidence",
]

# fields `rlsr lm-eval tasks` adds to each row of a task (the rest is the task's rlsr row)
TASK_FIELD = LM_EVAL_TASK_FIELD
VERIFIER_FIELD = "rlsr_verifier"
FORMAT_FIELD = LM_EVAL_FORMAT_FIELD
SYSTEM_FIELD = LM_EVAL_SYSTEM_FIELD
USER_FIELD = LM_EVAL_USER_FIELD


def load_rows(path: str | Path) -> dict[str, datasets.Dataset]:
    """The docs of one task (a JSONL written by ``rlsr lm-eval tasks``) as lm-eval's
    ``custom_dataset``: ``{"test": Dataset}``."""
    rows = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    return {"test": datasets.Dataset.from_list(rows)}


@functools.cache
def _verifier(task: str, verifier: str):
    return build_verifier(task, verifier)


def _item(doc: dict, response: str) -> dict:
    """The sample of one response as ``rlsr evaluate`` would record it (no fallbacks)."""
    it = response_item("", response, None, None, doc.get(FORMAT_FIELD) or "tags")
    vname = doc[VERIFIER_FIELD]
    row = {k: v for k, v in doc.items() if not k.startswith("rlsr_")}
    inputs = verification_inputs(TaskColumns({k: [v] for k, v in row.items()}), vname)
    verify_items(_verifier(doc[TASK_FIELD], vname), inputs, [it])
    return {
        "id": doc["id"],
        "answer": it["answer"],
        "confidence": it["confidence"],
        "format_ok": bool(it["format_ok"]),
        "correct": bool(it["correct"]),
        "verify_status": it["verify_status"],
    }


def process_results(doc: dict, results: list) -> dict:
    """lm-eval's per-doc hook: ``results[0]`` is the generated text; every metric gets the
    same record (id, answer, confidence, format_ok, correct, verify_status)."""
    item = _item(doc, results[0])
    return {name: item for name in METRICS}


def _metrics(items: list[dict]) -> dict:
    records = [{**it, "scores": {"verbalized": it["confidence"]}, "fallbacks": []} for it in items]
    out = compute_metrics(records, n_resamples=0)
    primary = out["scorers"]["verbalized"]
    primary["accuracy"] = out["accuracy"]
    primary["format_ok_rate"] = out["format_ok_rate"]
    return primary


def _value(value) -> float:
    return float("nan") if value is None else float(value)


def aurc(items: list[dict]) -> float:
    """AURC of the verbalized confidence (``rlsr.metrics.selective.aurc``; lower is better)."""
    return _value(_metrics(items)["aurc"])


def ranking_gain(items: list[dict]) -> float:
    """Error rate minus AURC (``rlsr.metrics.selective.ranking_gain_from_aurc``)."""
    m = _metrics(items)
    return M.ranking_gain_from_aurc(m["aurc"], 1.0 - m["accuracy"])


def ece(items: list[dict]) -> float:
    """10-bin ECE (``rlsr.metrics.selective.ece``)."""
    return _value(_metrics(items)["ece"])


def acc_at_10(items: list[dict]) -> float:
    """Accuracy of the 10 % most confident (``rlsr.metrics.selective.accuracy_at_coverage``)."""
    return _value(_metrics(items)["acc@10"])


def acc_at_25(items: list[dict]) -> float:
    """Accuracy of the 25 % most confident."""
    return _value(_metrics(items)["acc@25"])


def acc_at_50(items: list[dict]) -> float:
    """Accuracy of the 50 % most confident."""
    return _value(_metrics(items)["acc@50"])


def accuracy(items: list[dict]) -> float:
    """Accuracy over every item (no verdict = wrong)."""
    return _value(_metrics(items)["accuracy"])


def format_rate(items: list[dict]) -> float:
    """Share of responses in the task's response format (``format_ok``)."""
    return _value(_metrics(items)["format_ok_rate"])


def missing_confidence(items: list[dict]) -> float:
    """How many responses stated no confidence (each counted as confidence 0.0)."""
    return float(_metrics(items)["missing_confidence"])


# lm-eval metric name -> (aggregation, higher is better)
METRICS = {
    "aurc": (aurc, False),
    "ranking_gain": (ranking_gain, True),
    "ece": (ece, False),
    "acc_at_10": (acc_at_10, True),
    "acc_at_25": (acc_at_25, True),
    "acc_at_50": (acc_at_50, True),
    "accuracy": (accuracy, True),
    "format_rate": (format_rate, True),
    "missing_confidence": (missing_confidence, False),
}

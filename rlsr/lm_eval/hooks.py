"""What lm-evaluation-harness calls for a task of ``rlsr lm-eval tasks`` (docs/lm_eval.md).

``process_results(doc, results)`` parses the one response with rlsr's parser and verifies its
answer with the task's verifier on the task's own verification inputs, as ``rlsr evaluate``
does; each aggregation reads its number from ``rlsr.evaluation.run.summary.compute_metrics`` on
those records, so lm-eval's numbers are ``metrics.json``'s on the same responses.
"""

from __future__ import annotations

import functools
from pathlib import Path

import datasets

from rlsr.data.loading import build_verifier, verification_inputs
from rlsr.evaluation.run.external import LM_EVAL_FORMAT_FIELD, LM_EVAL_TASK_FIELD, TaskColumns
from rlsr.evaluation.run.runner import verify_items
from rlsr.evaluation.run.samples_io import read_samples
from rlsr.evaluation.run.summary import compute_metrics
from rlsr.generation.fallbacks import response_item
from rlsr.metrics import selective as M

__all__ = [
    "METRICS",
    "VERIFIER_FIELD",
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

# what `rlsr lm-eval tasks` adds to each row besides the LM_EVAL_*_FIELD ones: its verifier
VERIFIER_FIELD = "rlsr_verifier"


def load_rows(path: str | Path) -> dict[str, datasets.Dataset]:
    """The docs of one task (a JSONL written by ``rlsr lm-eval tasks``) as lm-eval's
    ``custom_dataset``: ``{"test": Dataset}``."""
    return {"test": datasets.Dataset.from_list(read_samples(path))}


@functools.cache
def _verifier(task: str, verifier: str):
    return build_verifier(task, verifier)


def _item(doc: dict, response: str) -> dict:
    """The sample of one response as ``rlsr evaluate`` would record it (no fallbacks)."""
    it = response_item("", response, None, None, doc.get(LM_EVAL_FORMAT_FIELD) or "tags")
    vname = doc[VERIFIER_FIELD]
    row = {k: v for k, v in doc.items() if not k.startswith("rlsr_")}
    inputs = verification_inputs(TaskColumns({k: [v] for k, v in row.items()}), vname)
    verify_items(_verifier(doc[LM_EVAL_TASK_FIELD], vname), inputs, [it])
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


def _aggregation(name: str, key: str, doc: str):
    """lm-eval's aggregation ``name``: ``key`` of the records' metrics (NaN for n/a)."""

    def aggregate(items: list[dict]) -> float:
        value = _metrics(items)[key]
        return float("nan") if value is None else float(value)

    aggregate.__name__ = aggregate.__qualname__ = name
    aggregate.__doc__ = doc
    return aggregate


aurc = _aggregation("aurc", "aurc", "AURC of the verbalized confidence (lower is better).")
ece = _aggregation("ece", "ece", "10-bin ECE (``rlsr.metrics.selective.ece``).")
acc_at_10 = _aggregation("acc_at_10", "acc@10", "Accuracy of the 10 % most confident.")
acc_at_25 = _aggregation("acc_at_25", "acc@25", "Accuracy of the 25 % most confident.")
acc_at_50 = _aggregation("acc_at_50", "acc@50", "Accuracy of the 50 % most confident.")
accuracy = _aggregation("accuracy", "accuracy", "Accuracy over every item (no verdict = wrong).")
format_rate = _aggregation("format_rate", "format_ok_rate", "Share in the response format.")
missing_confidence = _aggregation(
    "missing_confidence", "missing_confidence", "Responses without a confidence (counted 0.0)."
)


def ranking_gain(items: list[dict]) -> float:
    """Error rate minus AURC (``rlsr.metrics.selective.ranking_gain_from_aurc``)."""
    m = _metrics(items)
    return M.ranking_gain_from_aurc(m["aurc"], 1.0 - m["accuracy"])


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

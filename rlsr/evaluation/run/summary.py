"""``metrics.json``: the versioned summary of one dataset's ``samples.jsonl``, every number
recomputable from the records (``compute_metrics(read_samples(path))``; docs/evaluation.md).

A missing confidence counts as 0.0 for every metric (ranked least confident, as the training
reward's ``rlsr.equations.rewards.confidence_for_ranking``). With no confidence at all the
confidence metrics would measure only the accuracy, so they are n/a (``confidence_defined``;
``scorer_value`` is the one reader that applies it), and a run whose confidence or format rate is
below ``LOW_RATE`` warns (``confidence_warning``).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

import numpy as np

from rlsr.metrics import selective as M
from rlsr.run.run_layout import SAMPLES_FILE
from rlsr.verifiers.base import ERROR, INVALID, NO_VERDICT, TIMEOUT, UNJUDGED

__all__ = [
    "SCHEMA_VERSION",
    "COVERAGE_LEVELS",
    "METRIC_DEFINITIONS",
    "scorer_arrays",
    "scorer_metrics",
    "compute_metrics",
    "no_verdict_counts",
    "no_verdict_note",
    "CONFIDENCE_METRICS",
    "LOW_RATE",
    "NOT_AVAILABLE",
    "confidence_defined",
    "no_confidence",
    "scorer_value",
    "metric_text",
    "rate_warning",
    "confidence_warning",
]

SCHEMA_VERSION = 1
COVERAGE_LEVELS = (0.10, 0.25, 0.50)

METRIC_DEFINITIONS = {
    "aurc": "(1/n) sum_{k=1..n} R_k, R_k = error rate of the k most confident; ties = expectation "
    "over orderings (RLSR Sec. 2.1; rlsr.metrics.selective.aurc). Lower is better.",
    "acc@10/25/50": "accuracy of the ceil(c*n) most confident samples, ties at the cut counted "
    "with their group's mean correctness (RLSR Tab. 1; rlsr.metrics.selective.accuracy_at_coverage).",
    "ece": "10 equal-width bins, edges linspace(0,1,11) with outer edges at +-inf, left-inclusive; "
    "sum |B|/n |acc_B - conf_B| (RLCR binning; rlsr.metrics.selective.ece).",
    "brier": "mean (confidence - correct)^2 (rlsr.metrics.selective.brier).",
    "auroc": "P(conf of a correct > conf of a wrong), ties 1/2 (rlsr.metrics.selective.auroc); NaN if one class.",
    "confidence_gap": "E[conf | correct] - E[conf | wrong] (RLSR Tab. 2; rlsr.metrics.selective.confidence_gap).",
    "utility_auc": "UtilityBench Eq. 1-3 (arXiv 2610.25924), scores = confidence, answered = an answer was "
    "extracted, C_R = 2; only for datasets with answerable/cost (rlsr.metrics.selective.utility_auc).",
    "accuracy": "mean correctness over all samples (full coverage).",
    "missing_confidence": "a sample without a parseable confidence counts as confidence 0.0.",
    "no_verdict": "a sample the verifier gave no verdict on (unjudged: it could not judge; "
    "verifier_failures: timeout or error) counts as wrong in accuracy, every scorer metric and "
    "a deployment threshold (conservative: accuracy is a lower bound, risk an upper bound); "
    "accuracy_judged is the accuracy over the other samples (docs/tasks.md).",
    "ci": "percentile bootstrap over samples, 95%, rlsr.metrics.selective.bootstrap_ci (seed, resamples "
    "in 'bootstrap').",
    "dcs": "mean (p_c - P_W)(1 - p_idk) over MCQ items, option probabilities = softmax of "
    "length-normalised option log-likelihoods incl. an IDK option (the DCS paper; rlsr.metrics.selective.dcs).",
}


# The scorer metrics that read the confidence (everything but accuracy and the counts): n/a when
# no sample has a confidence (``confidence_defined``).
CONFIDENCE_METRICS = ("aurc", "ece", "acc@10", "acc@25", "acc@50", "brier", "auroc",
                      "confidence_gap", "utility_auc")  # fmt: skip
# Below this fraction of samples with a confidence (or in the answer format), a run warns.
LOW_RATE = 0.1
NOT_AVAILABLE = "n/a"


def confidence_defined(n: int, n_missing: int) -> bool:
    """The n/a rule: a scorer's ``CONFIDENCE_METRICS`` are defined iff a sample has a confidence."""
    return n_missing < n


def no_confidence(metrics: dict, scorer: str | None = None) -> bool:
    """True when no sample of a ``metrics.json``'s ``scorer`` (default: primary) has a confidence."""
    block = metrics["scorers"][scorer or metrics.get("primary_scorer", "verbalized")]
    missing = block.get("missing_confidence")
    return missing is not None and not confidence_defined(int(metrics["n"]), int(missing))


def scorer_value(metrics: dict, key: str, scorer: str | None = None) -> float | None:
    """``metrics.json``'s ``key`` of ``scorer`` (default: primary) as a float; None when NaN/null
    or a ``CONFIDENCE_METRICS`` value of a scorer without any confidence."""
    if key in CONFIDENCE_METRICS and no_confidence(metrics, scorer):
        return None
    block = metrics["scorers"][scorer or metrics.get("primary_scorer", "verbalized")]
    return _nan_to_none(block.get(key))


def metric_text(value: float | None, digits: int = 3) -> str:
    """``value`` with ``digits`` decimals, ``NOT_AVAILABLE`` for None or NaN."""
    value = _nan_to_none(value)
    return NOT_AVAILABLE if value is None else f"{value:.{digits}f}"


def rate_warning(
    n: int, n_missing: int, format_rate: float | None, scorer: str = "verbalized"
) -> str | None:
    """The warning when fewer than ``LOW_RATE`` of ``n`` answers carry a ``scorer`` confidence or
    follow the answer format: what was seen, what is n/a and where to look; else None."""
    parsed = n - n_missing
    low_format = format_rate is not None and format_rate < LOW_RATE
    if n == 0 or (parsed >= LOW_RATE * n and not low_format):
        return None
    fmt = "" if format_rate is None else f" (format rate {format_rate:.2f})"
    if not confidence_defined(n, n_missing):
        seen = f"no {scorer} confidence in any of the {n} answers{fmt}: AURC, ECE and Acc@k are n/a"
    else:
        seen = f"a {scorer} confidence in {parsed} of {n} answers{fmt}"
    fix = (
        "check that the system prompt asks for <answer>/<confidence> (--system-prompt) and that "
        "the model was trained to answer in that format"
        if scorer == "verbalized" or low_format
        else f"check the {scorer} scorer's inputs in the samples"
    )
    return f"{seen}; {fix}."


def confidence_warning(metrics: dict, scorer: str | None = None) -> str | None:
    """``rate_warning`` of a ``metrics.json`` (its ``scorer``, default the primary one)."""
    name = scorer or metrics.get("primary_scorer", "verbalized")
    missing = metrics["scorers"][name].get("missing_confidence")
    if missing is None:
        return None
    return rate_warning(int(metrics["n"]), int(missing), metrics.get("format_ok_rate"), name)


def _nan_to_none(value: float) -> float | None:
    return (
        None if value is None or (isinstance(value, float) and math.isnan(value)) else float(value)
    )


def scorer_arrays(records: Sequence[dict], scorer: str) -> tuple[np.ndarray, np.ndarray, int]:
    """(confidence, correct, n_missing) for ``scorer``; missing confidences become 0.0."""
    raw = [r.get("scores", {}).get(scorer) for r in records]
    missing = sum(1 for v in raw if v is None)
    conf = np.array([0.0 if v is None else float(v) for v in raw], dtype=np.float64)
    correct = np.array([bool(r["correct"]) for r in records], dtype=bool)
    return conf, correct, missing


# the point metrics of a scorer (fn(confidence, correct)); the bootstrap CIs: all but the gap,
# plus accuracy
_METRICS = {
    "aurc": M.aurc,
    "ece": M.ece,
    **{
        f"acc@{round(c * 100)}": lambda conf, ok, c=c: float(M.accuracy_at_coverage(conf, ok, c))
        for c in COVERAGE_LEVELS
    },
    "brier": M.brier,
    "auroc": M.auroc,
    "confidence_gap": M.confidence_gap,
}
_CI_FUNCS = {
    **{k: f for k, f in _METRICS.items() if k != "confidence_gap"},
    "accuracy": lambda c, o: float(np.mean(o)),
}


def scorer_metrics(
    records: Sequence[dict], scorer: str, *, n_resamples: int = 1000, seed: int = 0
) -> dict:
    """Metrics of one confidence scorer over ``records`` (see ``METRIC_DEFINITIONS``)."""
    conf, ok, missing = scorer_arrays(records, scorer)
    out: dict = {k: _nan_to_none(fn(conf, ok)) for k, fn in _METRICS.items()}
    out["missing_confidence"] = missing
    if all("answerable" in r and "cost" in r for r in records):
        answered = [r.get("answer") is not None for r in records]
        out["utility_auc"] = M.utility_auc(
            conf, answered, ok, [bool(r["answerable"]) for r in records],
            [float(r["cost"]) for r in records],
        )  # fmt: skip
    if n_resamples > 0:
        ci = {}
        for name, fn in _CI_FUNCS.items():
            est = M.bootstrap_ci(fn, conf, ok, n_resamples=n_resamples, seed=seed)
            ci[name] = [_nan_to_none(est.low), _nan_to_none(est.high)]
        out["ci"] = ci
    return out


def no_verdict_counts(records: Sequence[dict]) -> dict:
    """``unjudged`` (could not judge), ``verifier_failures`` (timeout, error), their rates and
    ``accuracy_judged`` (over the samples with a verdict; None when none has one)."""
    status = [r.get("verify_status") for r in records]
    unjudged = sum(s in (UNJUDGED, INVALID) for s in status)
    failures = sum(s in (TIMEOUT, ERROR) for s in status)
    judged = [r for r, s in zip(records, status, strict=True) if s not in NO_VERDICT]
    n = len(records)
    return {
        "unjudged": unjudged,
        "unjudged_rate": unjudged / n if n else None,
        "verifier_failures": failures,
        "verifier_failure_rate": failures / n if n else None,
        "accuracy_judged": (
            float(np.mean([bool(r["correct"]) for r in judged])) if judged else None
        ),
    }


def no_verdict_note(metrics: dict) -> str:
    """`` (4 of 16 unjudged, 1 verifier failure, counted wrong; accuracy on the 11 judged 0.364)``
    for a summary line, "" when every sample has a verdict."""
    n, unjudged = metrics["n"], metrics.get("unjudged", 0)
    failures = metrics.get("verifier_failures", 0)
    if not unjudged and not failures:
        return ""
    parts = [f"{unjudged} of {n} unjudged"] if unjudged else []
    if failures:
        parts.append(f"{failures} verifier failure{'s' if failures != 1 else ''}")
    judged = n - unjudged - failures
    on_judged = metrics.get("accuracy_judged")
    tail = (
        "none judged" if on_judged is None else f"accuracy on the {judged} judged {on_judged:.3f}"
    )
    return f" ({', '.join(parts)}, counted wrong; {tail})"


def compute_metrics(
    records: Sequence[dict],
    *,
    scorers: Sequence[str] = ("verbalized",),
    n_resamples: int = 1000,
    seed: int = 0,
    extra: dict | None = None,
) -> dict:
    """The ``metrics.json`` object for one dataset (schema: docs/evaluation.md)."""
    if len(records) == 0:
        raise ValueError(f"no samples to summarise; {SAMPLES_FILE} is empty.")
    ok = np.array([bool(r["correct"]) for r in records])
    fallback_counts = Counter({"answer": 0, "confidence": 0})
    fallback_counts.update(kind for r in records for kind in r.get("fallbacks", []))
    out = {
        "schema_version": SCHEMA_VERSION,
        "n": len(records),
        "accuracy": float(ok.mean()),
        "format_ok_rate": float(np.mean([bool(r.get("format_ok")) for r in records])),
        "answer_missing": sum(1 for r in records if r.get("answer") is None),
        "fallbacks": dict(fallback_counts),
        "verify_status": dict(Counter(str(r.get("verify_status")) for r in records)),
        **no_verdict_counts(records),
        "primary_scorer": scorers[0],
        "scorers": {
            s: scorer_metrics(records, s, n_resamples=n_resamples, seed=seed) for s in scorers
        },
        "bootstrap": {"n_resamples": n_resamples, "level": 0.95, "seed": seed},
        "definitions": METRIC_DEFINITIONS,
    }
    dcs_values = [r["dcs"]["score"] for r in records if isinstance(r.get("dcs"), dict)]
    if dcs_values:
        out["dcs"] = {"mean": float(np.mean(dcs_values)), "n": len(dcs_values)}
    if extra:
        out.update(extra)
    return out

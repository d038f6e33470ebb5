"""Evaluate one model on one dataset: per batch of questions not yet in ``samples.jsonl``,
generate (paper Sec. C.5: greedy, 4,096 new tokens, one response), run the Sec. C.3 fallbacks
(``rlsr.generation.fallbacks``, shared with ``rlsr serve``), verify, add the extra confidence
scorers and DCS if asked, and append the batch's records (flush, fsync). A rerun continues after
the ids already written; at the end ``metrics.json`` and the plot are rebuilt from the file.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from rlsr.data.loading import verification_inputs
from rlsr.equations.logprob import answer_span, expected_confidences, logprob_confidence
from rlsr.evaluation.reports.plots import plot_dataset_risk_coverage
from rlsr.evaluation.run.dcs import score_dcs
from rlsr.evaluation.run.samples_io import append_samples, json_safe, read_samples
from rlsr.evaluation.run.summary import compute_metrics
from rlsr.generation.backends import Backend, Sampling
from rlsr.generation.fallbacks import (
    add_answer_fallback,
    add_confidence_fallback,
    answer_fallback_context,
    confidence_fallback_context,
    read_response,
    response_item,
)
from rlsr.run.eval_protocol import EvalProtocol
from rlsr.run.run_layout import METRICS_FILE, PLOT_FILE, REQUESTS_FILE, SAMPLES_FILE
from rlsr.verifiers import extract_choice_letter, normalize_answer
from rlsr.verifiers.base import NO_VERDICT, VerifierFailure, failure_message, over_budget

logger = logging.getLogger(__name__)

__all__ = [
    "EvalSettings",
    "respond",
    "fallback_sampling",
    "evaluate_dataset",
    "summarise",
    "verify_items",
    "NoVerdictBudget",
    "self_consistency",
    "sample_record",
]


@dataclass(frozen=True)
class EvalSettings(EvalProtocol):
    """The evaluation protocol plus what one run does with its output."""

    progress: bool = True
    plot: bool = True
    extra_metadata: dict = field(default_factory=dict)


def fallback_sampling(settings: EvalSettings) -> Sampling:
    """Decoding of the Sec. C.3 fallback continuations: greedy, ``fallback_max_new_tokens``."""
    return Sampling(settings.fallback_max_new_tokens, 0.0)


_FALLBACK_STEPS = (
    ("answer", answer_fallback_context, add_answer_fallback),
    ("confidence", confidence_fallback_context, add_confidence_fallback),
)


def respond(backend: Backend, prompt_texts: Sequence[str], settings: EvalSettings) -> list[dict]:
    """One response per prompt, then the Sec. C.3 fallbacks (each at most once): all answer
    fallbacks of the batch in one generation call, then all confidence ones. Plain responses
    get none (no tags to miss, no confidence to ask for)."""
    sampling = Sampling(
        settings.max_new_tokens, settings.temperature, settings.top_p, seed=settings.seed
    )
    items = [
        _served(response_item(
            prompt, gens[0].text, gens[0].finish_reason, len(gens[0].token_ids),
            settings.response_format, gens[0].token_ids if settings.keep_token_ids else None,
        ), gens[0].served)
        for prompt, gens in zip(prompt_texts, backend.generate(prompt_texts, sampling), strict=True)
    ]  # fmt: skip
    if not settings.fallbacks or settings.response_format == "plain":
        return items
    for _, context_of, add in _FALLBACK_STEPS:
        need = [(it, ctx) for it in items if (ctx := context_of(it)) is not None]
        if need:
            outs = backend.generate(
                [it["prompt_text"] + ctx for it, ctx in need], fallback_sampling(settings)
            )
            for (it, ctx), gens in zip(need, outs, strict=True):
                add(it, ctx, gens[0].text)
    return items


def _served(item: dict, served: dict | None) -> dict:
    """``item`` as a deciding server (``rlsr serve``) read it: the audit judges what it served
    (its answer, confidence, format verdict, fallbacks), its decision kept in ``served``."""
    if served is not None:
        item.update({k: served[k] for k in ("answer", "confidence", "format_ok", "fallbacks")})
        item["answer_start"] = None
        item["served"] = served
    return item


def _options(row: dict) -> dict | None:
    """MCQ options as a dict (the dataset stores them as a JSON string)."""
    raw = row.get("options")
    if not raw:
        return None
    return json.loads(raw) if isinstance(raw, str) else dict(raw)


def self_consistency(
    reference: str | None,
    samples: Sequence[str | None],
    normalize: Callable[[str], str] = lambda s: " ".join(s.lower().split()),
) -> float | None:
    """The ``consistency`` scorer (RLSR Sec. D.3-D.4): of K more responses at temperature T
    (paper: K = 8, T = 0.7), the fraction whose answer agrees with the evaluated one,
    ``SC = (1/K) * sum_k 1[norm(a_k) == norm(a)]`` (no answer disagrees); None without a
    reference answer or samples."""
    if reference is None or len(samples) == 0:
        return None
    ref = normalize(reference)
    return sum(1 for s in samples if s is not None and normalize(s) == ref) / len(samples)


def _consistency_key(verifier: str, options) -> Callable[[str], str]:
    if verifier == "mcq" and options:
        return lambda a: extract_choice_letter(a, options) or normalize_answer(a)
    return normalize_answer


def _add_scores(backend, rows: list[dict], items: list[dict], settings: EvalSettings) -> None:
    for it in items:
        it["scores"] = {"verbalized": it["confidence"]}
    if "logprob" in settings.scorers:
        spans = [answer_span(it["generated"], it["answer"], it["answer_start"]) for it in items]
        idx = [i for i, s in enumerate(spans) if s is not None]
        lps = backend.score(
            [items[i]["prompt_text"] + spans[i][0] for i in idx], [spans[i][1] for i in idx]
        )
        scored = dict(zip(idx, lps, strict=True))
        for i, it in enumerate(items):
            it["scores"]["logprob"] = logprob_confidence(scored[i]) if i in scored else None
    if "expected" in settings.scorers:
        values = expected_confidences(
            backend.score, [it["prompt_text"] for it in items], [it["generated"] for it in items]
        )
        for it, value in zip(items, values, strict=True):
            it["scores"]["expected"] = value
    if "consistency" in settings.scorers:
        sampling = Sampling(
            settings.max_new_tokens, settings.consistency_temperature, 1.0,
            n=settings.consistency_k, seed=settings.seed + 1,
        )  # fmt: skip
        outs = backend.generate([it["prompt_text"] for it in items], sampling)
        for row, it, gens in zip(rows, items, outs, strict=True):
            options = _options(row)
            key = _consistency_key(row["verifier"], options)
            answers = [read_response(g.text, settings.response_format).answer for g in gens]
            it["scores"]["consistency"] = self_consistency(it["answer"], answers, key)
            it["consistency_answers"] = answers


def verify_items(verifier, inputs: dict, items: list[dict], judge=None) -> None:
    """Verify the items' ``answer`` in one ``verify_batch`` call on the rows' ``inputs``: sets
    ``correct``, ``verify_status``, ``verify_problem`` and the ``judge``'s ``judge_output``."""
    answers = [it["answer"] for it in items]
    result = verifier.verify_batch(answers, **inputs)
    outputs = iter(judge.last_outputs if judge is not None else [])
    for i, (it, ok, status) in enumerate(
        zip(items, result.correct, result.status or [None] * len(items), strict=False)
    ):
        it["correct"] = bool(ok)
        it["verify_status"] = status
        if i in result.problems:
            it["verify_problem"] = result.problems[i]
        if judge is not None and it["answer"] is not None:
            it["judge_output"] = next(outputs, None)


class NoVerdictBudget:
    """The failure budget of one dataset (docs/tasks.md, "When a verifier fails"): samples
    without a verdict, those already in samples.jsonl included, may be at most the verifier's
    ``max_failed_fraction`` of its ``total`` samples (none: no limit). ``check`` raises
    ``VerifierFailure`` as soon as a group would exceed it, before the group is written, so a
    rerun after the fix resumes from the samples saved before it."""

    def __init__(self, verifier, name: str, dataset: str, written: list[dict], total: int):
        self.limit = getattr(verifier, "max_failed_fraction", None)
        self.name, self.dataset, self.total = name, dataset, total
        self.counts = Counter(r.get("verify_status") for r in written
                              if r.get("verify_status") in NO_VERDICT)  # fmt: skip
        self.first = next(((r["id"], r["verify_status"], r.get("verify_problem")) for r in written
                           if r.get("verify_status") in NO_VERDICT), None)  # fmt: skip

    def check(self, rows: list[dict], items: list[dict], samples_path: Path | None) -> None:
        """Count the group's items without a verdict; ``samples_path``: the file its samples go
        to (None: nothing is written before every group is checked)."""
        failed = [(row["id"], it["verify_status"], it.get("verify_problem"))
                  for row, it in zip(rows, items, strict=True)
                  if it.get("verify_status") in NO_VERDICT]  # fmt: skip
        if not failed:
            return
        counts = self.counts + Counter(status for _, status, _ in failed)
        first = self.first or failed[0]
        if over_budget(sum(counts.values()), self.total, self.limit):
            if samples_path is None:
                fix = (
                    "Nothing was written. Fix the verifier (or set its max_failed_fraction in "
                    "the task file, docs/tasks.md), then rerun the same command."
                )
            else:
                fix = (
                    f"Stopped before writing these; {len(read_samples(samples_path))} samples "
                    f"are saved in {samples_path.parent}. Fix the verifier, then rerun the "
                    "same command: it resumes (a plugin's file changed after samples were "
                    "saved needs a new --output-dir: their verdicts came from this version); "
                    "or set the verifier option max_failed_fraction in the task file "
                    "(docs/tasks.md)."
                )
            raise VerifierFailure(failure_message(
                self.name, counts, self.total, self.limit, f"task {self.dataset}", first, fix
            ))  # fmt: skip
        self.counts, self.first = counts, first
        _id, status, problem = failed[0]
        logger.warning(
            "%s: verifier %s gave no verdict on %d of %d samples (first: id %r, %s: %s); scored "
            "as wrong", self.dataset, self.name, len(failed), len(rows), _id, status, problem,
        )  # fmt: skip


def evaluate_dataset(
    backend: Backend,
    examples,
    out_dir: str | Path,
    *,
    verifier,
    verifier_name: str,
    settings: EvalSettings,
    judge=None,
    dataset_name: str = "",
    before_batch: Callable[[int], None] | None = None,
) -> dict:
    """Evaluate ``examples`` (a ``datasets.Dataset`` in the rlsr.data contract) into ``out_dir``,
    resuming from its ``samples.jsonl``; returns the metrics. ``judge``: the ``RecordingJudge``
    of an LLM-judge verifier; ``before_batch(k)``: called before the k-th group is verified.

    With a backend that streams (vLLM), up to ``batch_size`` requests stay in flight, each
    sample's fallbacks join the engine as its response finishes, and a sample is written at the
    step its last request finishes (an LLM judge gathers them for up to ``_JUDGE_FLUSH_SECONDS``);
    the file is put back in dataset order at the end, so it does not depend on the backend.
    Otherwise (or when extra scorers or DCS need more model calls) windows of ``batch_size``
    are generated, verified and written together.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    samples_path = out / SAMPLES_FILE
    ids = list(examples["id"])
    if len(set(ids)) != len(ids):
        raise ValueError(f"{dataset_name}: example ids are not unique; resume needs unique ids.")
    written = read_samples(samples_path, repair=True)
    done = {r["id"] for r in written}
    budget = NoVerdictBudget(verifier, verifier_name, dataset_name, written, len(ids))
    journal = getattr(backend, "use_journal", None)  # an HTTP endpoint's finished requests
    if journal is not None:
        journal(out / REQUESTS_FILE)
    todo = [i for i, x in enumerate(ids) if x not in done]
    bar = _progress(len(ids), len(ids) - len(todo), dataset_name, settings.progress)
    window = settings.batch_size or getattr(backend, "eval_batch_size", 8)
    groups = iter(range(len(todo) + 1))
    n_new = 0
    # The bar's accuracy: every sample of the file so far (resumed ones too), so it ends at the
    # accuracy metrics.json reports, not at the last group's.
    tally = {"right": sum(bool(r.get("correct")) for r in written), "seen": len(written)}

    def write(rows: list[dict], inputs: dict, items: list[dict]) -> None:
        nonlocal n_new
        k = next(groups)
        if before_batch is not None:
            before_batch(k)
        verify_items(verifier, inputs, items, judge)
        budget.check(rows, items, samples_path)  # raises before this group is written
        _add_scores(backend, rows, items, settings)
        if settings.dcs:
            _add_dcs(backend, rows, items)
        records = [sample_record(r, it, dataset_name) for r, it in zip(rows, items, strict=True)]
        append_samples(samples_path, records)
        n_new += len(rows)
        tally["right"] += sum(bool(it["correct"]) for it in items)
        tally["seen"] += len(items)
        if bar is not None:
            bar.update(len(rows))
            bar.set_postfix(acc=f"{tally['right'] / tally['seen']:.3f}")

    started = time.perf_counter()
    stream = _stream_of(backend, settings)
    if stream is not None:
        flush_seconds = _JUDGE_FLUSH_SECONDS if judge is not None else 0.0
        try:
            _generate_streaming(stream, backend, _Prefetch(examples, todo, window, verifier_name),
                                window, settings, write, flush_seconds)  # fmt: skip
        finally:  # however it ends, none of its requests stays on the engine
            stream.close()
    else:
        for start in range(0, len(todo), window):
            batch = examples.select(todo[start : start + window])
            rows = list(batch)
            prompt_texts = [backend.render(r["prompt"]) for r in rows]
            write(rows, verification_inputs(batch, verifier_name),
                  respond(backend, prompt_texts, settings))  # fmt: skip
    if bar is not None:
        bar.close()
    elapsed = time.perf_counter() - started
    _restore_dataset_order(samples_path, ids)
    extra = {
        "throughput": {
            "new_samples": n_new,
            "seconds": elapsed,
            "samples_per_s": n_new / elapsed if n_new and elapsed > 0 else None,
        }
    }
    if hasattr(backend, "usage"):  # an HTTP endpoint: what the run asked of it (its cost)
        extra["usage"] = usage = backend.usage()
        sent = usage["http_requests"]
        extra["throughput"]["requests_per_s"] = sent / elapsed if sent and elapsed > 0 else None
    return summarise(out, settings, dataset_name, extra=extra)


# With an LLM judge, streamed samples wait up to this long so that one judge call sees several.
_JUDGE_FLUSH_SECONDS = 2.0


def _stream_of(backend: Backend, settings: EvalSettings):
    """The backend's streaming session, or None: extra scorers and DCS call the model per sample,
    which must not run while the stream's requests are on the engine."""
    if set(settings.scorers) != {"verbalized"} or settings.dcs:
        return None
    opener = getattr(backend, "stream", None)
    return opener() if opener is not None else None


def _next_fallback(item: dict, settings: EvalSettings):
    """``(context, add)`` of the fallback ``item`` needs next (as ``respond``), else None."""
    if not settings.fallbacks or settings.response_format == "plain":
        return None
    for kind, context_of, add in _FALLBACK_STEPS:
        if kind not in item["fallbacks"] and (context := context_of(item)) is not None:
            return context, add
    return None


class _Prefetch:
    """The samples to stream, fetched with one ``Dataset.select`` per ``window``."""

    def __init__(self, examples, todo: list[int], window: int, verifier_name: str) -> None:
        self._examples, self._todo, self._window = examples, todo, window
        self._verifier_name = verifier_name
        self._next = 0
        self._fetched: list[tuple[int, dict]] = []  # (index, row) fetched, not yet handed out
        self._held: dict[int, tuple[dict, dict]] = {}  # index -> (row, its verification inputs)

    def take(self, k: int) -> list[tuple[int, dict]]:
        """Up to ``k`` more ``(index, row)`` to generate, in ``todo`` order."""
        if k <= 0:
            return []
        while len(self._fetched) < k and self._next < len(self._todo):
            chunk = self._todo[self._next : self._next + self._window]
            self._next += len(chunk)
            batch = self._examples.select(chunk)
            rows = list(batch)
            inputs = verification_inputs(batch, self._verifier_name)
            for j, (i, row) in enumerate(zip(chunk, rows, strict=True)):
                self._held[i] = (row, {key: values[j] for key, values in inputs.items()})
                self._fetched.append((i, row))
        out, self._fetched = self._fetched[:k], self._fetched[k:]
        return out

    def release(self, indices: list[int]) -> tuple[list[dict], dict]:
        """Rows and verification inputs of ``indices`` (each handed out once)."""
        held = [self._held.pop(i) for i in indices]
        keys = held[0][1].keys() if held else ()
        return [row for row, _ in held], {k: [inputs[k] for _, inputs in held] for k in keys}


def _generate_streaming(stream, backend, rows: _Prefetch, window, settings, write, flush_seconds):
    """Keep ``window`` requests in flight; hand each sample to ``write`` when its last request
    (response, then any fallbacks) has finished."""
    sampling = Sampling(
        settings.max_new_tokens, settings.temperature, settings.top_p, seed=settings.seed
    )
    greedy = fallback_sampling(settings)
    items: dict[int, dict] = {}
    finished: list[int] = []
    last_write = time.perf_counter()

    def flush() -> None:
        done, inputs = rows.release(finished)
        write(done, inputs, [items.pop(i) for i in finished])
        finished.clear()

    while True:
        new = rows.take(window - stream.pending())
        if new:
            prompts = [backend.render(row["prompt"]) for _, row in new]
            stream.add_many(
                [((i, p, None), p, sampling) for (i, _), p in zip(new, prompts, strict=True)]
            )
        if stream.pending() == 0:
            break
        fallbacks = []
        for (i, text, add), gens in stream.step():
            # text: the prompt of a response; the context of a fallback (then add records it)
            gen = gens[0]
            if add is None:
                items[i] = response_item(text, gen.text, gen.finish_reason, len(gen.token_ids),
                                         settings.response_format,
                                         gen.token_ids if settings.keep_token_ids else None)  # fmt: skip
            else:
                add(items[i], text, gen.text)
            step = _next_fallback(items[i], settings)
            if step is None:
                finished.append(i)
            else:
                context, add_next = step
                fallbacks.append(
                    ((i, context, add_next), items[i]["prompt_text"] + context, greedy)
                )
        stream.add_many(fallbacks)
        now = time.perf_counter()
        if finished and (stream.pending() == 0 or now - last_write >= flush_seconds):
            flush()
            last_write = now
    if finished:
        flush()


def _restore_dataset_order(path: Path, ids: list[str]) -> None:
    """Rewrite ``path`` in dataset order if streaming appended it out of order (a sibling, then
    ``os.replace``: a crash leaves either file, both complete)."""
    records = read_samples(path)
    rank = {x: k for k, x in enumerate(ids)}
    ordered = sorted(records, key=lambda r: rank.get(r["id"], len(rank)))
    if [r["id"] for r in ordered] == [r["id"] for r in records]:
        return
    tmp = path.with_name(path.name + ".reorder")
    tmp.unlink(missing_ok=True)
    append_samples(tmp, ordered)
    os.replace(tmp, path)


def summarise(
    out: Path, settings: EvalSettings, dataset_name: str, extra: dict | None = None
) -> dict:
    """(Re)build metrics.json and the risk-coverage plot from samples.jsonl."""
    records = read_samples(out / SAMPLES_FILE)
    meta = {
        "dataset": dataset_name,
        # the protocol as run (system_prompt left out: the prompt used is in run.json and in
        # every sample; the field only holds what was asked, null for each dataset's own)
        "settings": {
            k: v for k, v in asdict(settings).items() if k not in ("progress", "system_prompt")
        },
        **(extra or {}),
    }
    metrics = compute_metrics(
        records, scorers=settings.scorers, n_resamples=settings.bootstrap,
        seed=settings.seed, extra=meta,
    )  # fmt: skip
    (out / METRICS_FILE).write_text(json.dumps(json_safe(metrics), indent=2) + "\n")
    if settings.plot:
        plot_dataset_risk_coverage(records, settings.scorers, out / PLOT_FILE, title=dataset_name)
    return metrics


def _add_dcs(backend, rows: list[dict], items: list[dict]) -> None:
    for row, it in zip(rows, items, strict=True):
        options = _options(row)
        if options and row.get("answer_letter"):
            it["dcs"] = score_dcs(backend, row["question"], options, row["answer_letter"])


# what a sample record copies from its dataset row (when set) and from its scored response
_ROW_FIELDS = ("answerable", "cost", "options", "answer_letter")
_ITEM_FIELDS = (
    "response",
    "answer",
    "confidence",
    "correct",
    "format_ok",
    "fallbacks",
    "fallback_text",
    "finish_reason",
    "num_tokens",
)
_OPTIONAL_ITEM_FIELDS = (
    "verify_problem",
    "judge_output",
    "consistency_answers",
    "dcs",
    "response_token_ids",
    "served",
)


def sample_record(row: dict, it: dict, dataset_name: str) -> dict:
    """The samples.jsonl line of dataset row ``row`` and its scored response ``it``."""
    rec = {
        "id": row["id"],
        "dataset": dataset_name,
        "prompt": row["prompt"],
        "question": row["question"],
        "gold": row["answer"],
        "golds": row["answers"],
        **{k: it[k] for k in _ITEM_FIELDS},
        "verify_status": it.get("verify_status"),
        "scores": it["scores"],
    }
    rec.update({k: it[k] for k in _OPTIONAL_ITEM_FIELDS if k in it})
    rec.update({k: row[k] for k in _ROW_FIELDS if row.get(k) is not None})
    return rec


def _progress(total: int, initial: int, name: str, enabled: bool):
    if not enabled:
        return None
    from tqdm.auto import tqdm

    return tqdm(
        total=total, initial=initial, desc=name or "evaluate", unit="sample", dynamic_ncols=True
    )

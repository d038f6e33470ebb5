"""Responses generated elsewhere, scored as ``rlsr evaluate`` scores its own (docs/evaluation.md,
"Scoring generations made elsewhere"): lm-evaluation-harness's ``--log_samples`` output (``doc``,
``resps``: the response is ``resps[0][0]``, before lm-eval's filters) or a plain JSONL
(``question``, ``response``, ``gold``[, ``id``]), told apart by the first row. Each row is matched
to a row of its task (by ``id``, else question text), so prompt, golds and verifier inputs are the
task's own; a row matching none, a gold the task does not give or a second answer to a question is
refused with file and line. No Sec. C.3 fallback runs (no model to continue a response).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rlsr.data.loading import verification_inputs
from rlsr.evaluation.run.runner import (
    EvalSettings,
    NoVerdictBudget,
    sample_record,
    summarise,
    verify_items,
)
from rlsr.evaluation.run.samples_io import append_samples
from rlsr.generation.fallbacks import response_item
from rlsr.run.run_layout import SAMPLES_FILE

__all__ = [
    "LM_EVAL_FORMAT",
    "PLAIN_FORMAT",
    "PLAIN_FIELDS",
    "ExternalSample",
    "ExternalFile",
    "TaskColumns",
    "read_external",
    "match_samples",
    "score_external",
]

LM_EVAL_FORMAT = "lm-eval"
PLAIN_FORMAT = "plain"
PLAIN_FIELDS = ("question", "response", "gold")  # and optionally "id"
_LM_EVAL_FIELDS = ("doc", "resps")
# what `rlsr lm-eval tasks` puts in each lm-eval doc besides the task's own row
LM_EVAL_TASK_FIELD = "rlsr_task"
LM_EVAL_SYSTEM_FIELD = "rlsr_system"  # the system message ("" for none): lm-eval's description
LM_EVAL_USER_FIELD = "rlsr_user"  # the user message: lm-eval's doc_to_text
LM_EVAL_FORMAT_FIELD = "rlsr_response_format"  # tags | plain: how process_results parses
# lm-eval names its sample logs samples_<task>_<ISO date with - for :>.jsonl
_LM_EVAL_FILE = re.compile(r"samples_(?P<task>.+)_\d{4}-\d{2}-\d{2}T[0-9.\-]+\.jsonl\Z")
# rows verified and written together (one verify_batch call, one fsync'ed append)
_CHUNK = 8192


@dataclass(frozen=True)
class ExternalSample:
    """One row of an external file (None: what the file does not give)."""

    line: int
    response: str
    id: str | None
    question: str | None
    gold: object = None
    task: str | None = None  # the rlsr task an lm-eval doc of `rlsr lm-eval tasks` names
    # and the (system, user) messages and response format that pack sent, where it says them
    messages: tuple[str, str] | None = None
    response_format: str | None = None


@dataclass(frozen=True)
class ExternalFile:
    path: Path
    format: str
    samples: list[ExternalSample]
    sha256: str


def _field_error(path: Path, line: int, field: str, need: str) -> ValueError:
    return ValueError(f"{path}: line {line}: field '{field}' is missing; {need}.")


def _plain_sample(path: Path, line: int, row: dict) -> ExternalSample:
    need = "plain samples need question, response, gold (and optionally id) on every line"
    for field in PLAIN_FIELDS:
        if field not in row:
            raise _field_error(path, line, field, need)
    if not isinstance(row["response"], str):
        raise ValueError(f"{path}: line {line}: field 'response' must be a string, got "
                         f"{type(row['response']).__name__}.")  # fmt: skip
    rid = row.get("id")
    return ExternalSample(line, row["response"], None if rid is None else str(rid),
                          row["question"], row["gold"])  # fmt: skip


def _lm_eval_sample(path: Path, line: int, row: dict) -> ExternalSample:
    need = "lm-eval --log_samples rows have doc, doc_id, target, resps"
    for field in _LM_EVAL_FIELDS:
        if field not in row:
            raise _field_error(path, line, field, need)
    resps, doc = row["resps"], row["doc"]
    if not (isinstance(resps, list) and resps and isinstance(resps[0], list) and resps[0]
            and isinstance(resps[0][0], str)):  # fmt: skip
        raise ValueError(f"{path}: line {line}: field 'resps' is not a generation "
                         "([[text, ...]]); only generate_until tasks can be scored.")  # fmt: skip
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: line {line}: field 'doc' must be an object.")
    prompt = (row.get("arguments") or {}).get("gen_args_0", {}).get("arg_0")
    if (
        LM_EVAL_USER_FIELD in doc
        and prompt == doc.get(LM_EVAL_SYSTEM_FIELD, "") + doc[LM_EVAL_USER_FIELD]
    ):
        raise ValueError(f"{path}: line {line}: lm-eval sent the task's messages as plain text, "
                         "without the model's chat template (rlsr evaluate renders every prompt "
                         "with it); rerun lm_eval with --apply_chat_template.")  # fmt: skip
    rid = doc.get("id")
    messages = (
        (doc.get(LM_EVAL_SYSTEM_FIELD, ""), doc[LM_EVAL_USER_FIELD])
        if LM_EVAL_USER_FIELD in doc
        else None
    )
    return ExternalSample(
        line, resps[0][0], None if rid is None else str(rid), doc.get("question"),
        row.get("target"), doc.get(LM_EVAL_TASK_FIELD), messages,
        doc.get(LM_EVAL_FORMAT_FIELD),
    )  # fmt: skip


def read_external(path: str | Path) -> ExternalFile:
    """The rows of ``path``; a line that is not a JSON object or lacks a field of its format is
    refused naming the file, the line and the field."""
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"--from-samples {p}: no such file.")
    data = p.read_bytes()
    samples: list[ExternalSample] = []
    fmt = None
    for i, raw in enumerate(data.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            row = json.loads(raw)
        except ValueError as err:
            raise ValueError(f"{p}: line {i}: not valid JSON ({err}).") from None
        if not isinstance(row, dict):
            raise ValueError(f"{p}: line {i}: expected a JSON object, got {type(row).__name__}.")
        if fmt is None:
            fmt = LM_EVAL_FORMAT if ("doc" in row and "resps" in row) else PLAIN_FORMAT
        read = _lm_eval_sample if fmt == LM_EVAL_FORMAT else _plain_sample
        samples.append(read(p, i, row))
    if not samples:
        raise ValueError(f"--from-samples {p}: the file holds no rows.")
    return ExternalFile(p, fmt, samples, hashlib.sha256(data).hexdigest())


class TaskColumns(dict):
    """A task's rows as ``{column: list}``, converted from Arrow once (indexing a Dataset costs
    ~50 us a row), with the ``column_names`` ``verification_inputs`` reads."""

    @classmethod
    def of(cls, examples) -> TaskColumns:
        return cls(examples[:])

    @property
    def column_names(self) -> list[str]:
        return list(self)

    @property
    def n_rows(self) -> int:
        return len(self["id"])

    def rows(self, indices: Sequence[int]) -> list[dict]:
        return [{k: v[i] for k, v in self.items()} for i in indices]

    def take(self, indices: Sequence[int]) -> TaskColumns:
        return TaskColumns({k: [v[i] for i in indices] for k, v in self.items()})


def _gold_sets(columns: TaskColumns) -> list[set[str]]:
    """Per task row, every spelling of its gold a file may give: ``answer``, each of
    ``answers``, and the MCQ ``answer_letter``."""
    n = columns.n_rows
    answers = columns.get("answers") or [None] * n
    letters = columns.get("answer_letter") or [None] * n
    return [
        {str(a).strip(), *(str(x).strip() for x in (al or [])), *([str(le).strip()] if le else [])}
        for a, al, le in zip(columns["answer"], answers, letters, strict=True)
    ]


def _messages(prompt: list[dict]) -> tuple[str, str]:
    system = next((m["content"] for m in prompt if m["role"] == "system"), "")
    return system, next((m["content"] for m in prompt if m["role"] == "user"), "")


def match_samples(
    external: ExternalFile,
    examples: TaskColumns,
    task: str,
    split: str,
    response_format: str | None = None,
) -> list[int]:
    """For each row of ``external``, the index of the row of ``examples`` (task ``task``, split
    ``split``) it answers (module docstring); also refused: an lm-eval file or row of another
    task, and messages or a response format other than rlsr evaluate's."""
    path = external.path
    match = _LM_EVAL_FILE.match(path.name) if external.format == LM_EVAL_FORMAT else None
    named = match.group("task") if match else None
    pack_name = f"rlsr_{task}"
    if named is not None and named.startswith("rlsr_") and named != pack_name:
        raise ValueError(f"--from-samples {path}: lm-eval task {named} is not task {task} "
                         f"({pack_name}); pass the task the samples were generated on with "
                         "--tasks.")  # fmt: skip
    ids = {str(x): i for i, x in enumerate(examples["id"])}
    questions: dict[str, int] = {}
    for i, q in enumerate(examples["question"]):
        questions.setdefault(q, i)
    golds = None
    seen: dict[int, int] = {}
    out = []
    for s in external.samples:
        if s.task is not None and s.task != task:
            raise ValueError(f"{path}: line {s.line}: the row is from task {s.task}, not {task}; "
                             "pass the task the samples were generated on with --tasks.")  # fmt: skip
        index = ids.get(s.id) if s.id is not None else None
        if index is None and s.question is not None:
            index = questions.get(s.question)
        if index is None:
            what = f"id {s.id!r}" if s.id is not None else f"question {str(s.question)[:60]!r}"
            raise ValueError(f"{path}: line {s.line}: {what} is not a row of task {task} "
                             f"(split {split}); pass the task and split the samples were "
                             "generated on (--tasks, --split).")  # fmt: skip
        if index in seen:
            raise ValueError(f"{path}: line {s.line}: answers the same question as line "
                             f"{seen[index]} (id {examples['id'][index]!r}); rlsr scores one "
                             "response per question.")  # fmt: skip
        seen[index] = s.line
        if s.gold is not None and not isinstance(s.gold, list | dict):
            golds = golds if golds is not None else _gold_sets(examples)
            if str(s.gold).strip() not in golds[index]:
                row = examples.rows([index])[0]
                raise ValueError(f"{path}: line {s.line}: gold {str(s.gold)[:60]!r} is not task "
                                 f"{task}'s answer {row['answer'][:60]!r} to that question "
                                 f"(id {row['id']!r}); these samples are of another task or "
                                 "data version.")  # fmt: skip
        if s.messages is not None and s.messages != _messages(examples["prompt"][index]):
            raise ValueError(f"{path}: line {s.line}: lm-eval sent other messages than rlsr "
                             f"evaluate sends for task {task} (id {examples['id'][index]!r}); "
                             "pass the --system-prompt and data `rlsr lm-eval tasks` was "
                             "given.")  # fmt: skip
        if response_format and s.response_format not in (None, response_format):
            raise ValueError(f"{path}: line {s.line}: the task pack read these responses as "
                             f"--response-format {s.response_format}; pass the same here.")  # fmt: skip
        out.append(index)
    return out


def score_external(
    external: ExternalFile,
    indices: Sequence[int],
    examples: TaskColumns,
    out_dir: str | Path,
    *,
    verifier,
    verifier_name: str,
    settings: EvalSettings,
    dataset_name: str,
    judge=None,
) -> dict:
    """Parse and verify the responses of ``external`` (row k answers ``examples`` row
    ``indices[k]``) within the verifier's failure budget, then write them into ``out_dir`` in
    dataset order and summarise; returns the metrics."""
    order = sorted(range(len(indices)), key=lambda k: indices[k])
    scored = []  # (rows, items) per chunk, all verified before anything is written
    budget = NoVerdictBudget(verifier, verifier_name, dataset_name, [], len(order))
    for start in range(0, len(order), _CHUNK):
        chunk = order[start : start + _CHUNK]
        rows_at = [indices[k] for k in chunk]
        batch, rows = examples.take(rows_at), examples.rows(rows_at)
        items = [
            response_item("", external.samples[k].response, None, None, settings.response_format)
            for k in chunk
        ]
        verify_items(verifier, verification_inputs(batch, verifier_name), items, judge)
        budget.check(rows, items, None)
        for it in items:
            it["scores"] = {"verbalized": it["confidence"]}
        scored.append((rows, items))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for rows, items in scored:
        append_samples(
            out / SAMPLES_FILE,
            [sample_record(r, it, dataset_name) for r, it in zip(rows, items, strict=True)],
        )
    meta = {
        "from_samples": {
            "path": str(external.path.resolve()),
            "sha256": external.sha256,
            "format": external.format,
            "rows": len(external.samples),
            "task_rows": examples.n_rows,
        }
    }
    return summarise(out, settings, dataset_name, extra=meta)

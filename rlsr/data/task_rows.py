"""A user task's rows as written (docs/tasks.md, "Reading your data").

Cells are read without type inference, so an answer is the text in the file, not a re-typed
value: a CSV cell is a string (``"0123"`` stays ``"0123"``, ``"4"`` stays ``"4"`` even when
another cell of the column is blank) and a blank cell is missing; a JSON / JSON-lines number is
the literal text it was written as (``4`` -> ``"4"``, ``4.50`` -> ``"4.50"``); in typed formats
(Parquet, ``save_to_disk``, the hub) an integer is its digits, while a float is refused, because
the text it was written as (``4``, ``4.0``, ``4.00``) is gone.

``task_row_fields`` turns one row into the fields of the example contract, or raises
``TaskRowError`` naming the task, the file, the row (counted from 0 in file order, the CSV header
not counted), the column and the fix. ``EmptyCell`` marks a missing question or answer, which
the caller refuses or, with the task's ``skip_empty: true``, skips and counts.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rlsr.data.formatting import OPTION_LETTERS, render_mcq_problem
from rlsr.verifiers.exact_match import normalize_answer

__all__ = [
    "EmptyCell",
    "JsonNumber",
    "TaskRowError",
    "read_rows_as_written",
    "task_row_fields",
]


class JsonNumber(str):
    """A JSON number kept as the text it was written as (``json.loads(parse_int=...)``)."""


class TaskRowError(ValueError):
    """One row of a task's data is wrong; the message names the task, file, row, column and fix."""


class EmptyCell(TaskRowError):
    """A row's question or answer is missing (blank, null, an empty list)."""

    def __init__(self, message: str, field_name: str) -> None:
        super().__init__(message)
        self.field_name = field_name


# --------------------------------------------------------------------------- reading files


def _json_value(text: str) -> Any:
    return json.loads(text, parse_int=JsonNumber, parse_float=JsonNumber)


def read_rows_as_written(path: Path) -> list[dict]:
    """The rows of a ``.csv`` / ``.jsonl`` / ``.json`` file as written (module docstring).

    CSV: every cell a string, a blank cell None, a row shorter than the header None in the
    missing cells. JSON: one object per line, or one document holding a list of objects (or a
    mapping of column -> list of values)."""
    suffix = path.suffix.lower()
    if suffix == ".csv":
        with path.open(newline="", encoding="utf-8-sig") as handle:
            reader = csv.DictReader(handle)
            rows = []
            for row in reader:
                extra = row.pop(None, None)  # cells beyond the header
                if extra and any(cell.strip() for cell in extra):
                    raise TaskRowError(
                        f"{path}: row {len(rows)}: {len(reader.fieldnames) + len(extra)} cells "
                        f"under a header of {len(reader.fieldnames)} columns; quote cells that "
                        'hold a comma ("Paris, France").'
                    )
                rows.append(
                    {k: (v if v is not None and v.strip() else None) for k, v in row.items()}
                )
            return rows
    text = path.read_text(encoding="utf-8")
    if suffix == ".json":
        try:
            document = _json_value(text)
        except ValueError:
            document = None  # not one document: JSON lines (checked line by line before)
        if isinstance(document, list):
            for number, row in enumerate(document):
                if not isinstance(row, Mapping):
                    raise TaskRowError(
                        f'{path}: row {number}: expected a JSON object ({{"question": ..., '
                        f'"answer": ...}}), got {_kind(row)}.'
                    )
            return [dict(row) for row in document]
        if isinstance(document, Mapping):
            columns = {k: v for k, v in document.items() if isinstance(v, list)}
            if columns and len(columns) == len(document):
                n = len(next(iter(columns.values())))
                return [
                    {k: v[i] if i < len(v) else None for k, v in columns.items()} for i in range(n)
                ]
            return [dict(document)]
    return [_json_value(line) for line in text.splitlines() if line.strip()]


# --------------------------------------------------------------------------- cells


def _kind(value: Any) -> str:
    return type(value).__name__


def _text(value: Any, fail) -> str | None:
    """A scalar cell as text, None when missing; ``fail(problem, fix)`` raises."""
    if value is None:
        return None
    if isinstance(value, bool | np.bool_):
        fail(f"holds the boolean {value}", 'write it as text ("true") if that is the answer')
    if isinstance(value, str):  # a CSV cell, a JSON string, or a JSON number's literal text
        return value
    if isinstance(value, int | np.integer):  # typed formats: an integer's digits are its text
        return str(int(value))
    if isinstance(value, float | np.floating):
        if value != value:  # NaN: pandas' and Arrow's blank
            return None
        fail(
            f"holds the float {value!r}, whose text as written (4, 4.0, 4.00 ...) is lost",
            "store the column as strings (e.g. df[col] = df[col].astype(str) before saving), "
            "or use a CSV / JSON file, whose cells are read as written",
        )
    fail(
        f"holds a {_kind(value)} ({str(value)[:60]!r}), not text",
        "give one string per row (a list only for the answer: the gold and its aliases)",
    )
    return None  # unreachable: fail raises


class _Row:
    """Builds messages for one row: ``task NAME: FILE, row N, column C (FIELD): ... Fix: ...``."""

    def __init__(self, task: str, source: str, number: int, task_file: str) -> None:
        self.task, self.source, self.number, self.task_file = task, source, number, task_file

    def where(self, column: str | None = None, field_name: str | None = None) -> str:
        at = f"task {self.task}: {self.source}, row {self.number}"
        if column is not None:
            at += f", column {column!r}"
            if field_name is not None and field_name != column:
                at += f" ({field_name})"
        return at

    def fail(self, column: str, field_name: str):
        def raise_(problem: str, fix: str) -> None:
            raise TaskRowError(f"{self.where(column, field_name)} {problem}. Fix: {fix}.")

        return raise_


def _texts(value: Any, row: _Row, column: str, field_name: str) -> list[str]:
    """The answer / aliases cell as a list of texts: a string, or a list of strings (for the
    answer, the first is the gold). Text is never parsed: a CSV cell "[0, 1]" is one answer."""
    fail = row.fail(column, field_name)
    values = value if isinstance(value, list | tuple | np.ndarray) else [value]
    texts = [_text(v, fail) for v in values]
    return [t.strip() for t in texts if t is not None and t.strip()]


def _options(value: Any, row: _Row, column: str) -> dict[str, str]:
    """The options cell as ``{letter: text}``: a list of texts (lettered A, B, ...) or a mapping
    keyed by letters, or either as JSON text. Refuses other keys and repeated texts."""
    fail = row.fail(column, "options")
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            fail(f"is {value[:80]!r}, neither a list nor a mapping (nor their JSON)",
                 "give each row a list of option texts or a {letter: text} mapping")  # fmt: skip
    if isinstance(value, Mapping):
        items = [(str(k).strip(), v) for k, v in value.items() if v is not None]
        keys = [k for k, _ in items]
        if not all(len(k) == 1 and k.upper() in OPTION_LETTERS for k in keys):
            fail(f"is keyed by {keys}, not by option letters {list(OPTION_LETTERS)}",
                 "key the options A, B, C, ... (the letters the model answers with), or give "
                 "them as a list, which is lettered A, B, C, ... in order")  # fmt: skip
        options = {k.upper(): _text(v, fail) for k, v in items}
    elif isinstance(value, list | tuple | np.ndarray):
        if len(value) > len(OPTION_LETTERS):
            fail(f"holds {len(value)} options; at most {len(OPTION_LETTERS)} are read",
                 "split the question or drop options")  # fmt: skip
        options = {OPTION_LETTERS[i]: _text(v, fail) for i, v in enumerate(value)}
    else:
        fail(f"holds a {_kind(value)}, not a list or a mapping of options",
             "give each row a list of option texts or a {letter: text} mapping")  # fmt: skip
    options = {k: (v or "").strip() for k, v in options.items()}
    if len(options) < 2 or not all(options.values()):
        fail(f"is {options}: an option is empty or there are fewer than two",
             "give every row at least two non-empty options")  # fmt: skip
    seen: dict[str, str] = {}
    for letter, text in options.items():
        key = normalize_answer(text) or text
        if key in seen:
            fail(f"repeats an option: {seen[key]}) {options[seen[key]]!r} and {letter}) "
                 f"{text!r} are the same answer, so a right answer cannot be told from a wrong "
                 "one", "make every option of a row distinct")  # fmt: skip
        seen[key] = letter
    return options


def _gold_letter(gold: str, options: Mapping[str, str], row: _Row, column: str) -> str:
    if gold.upper() in options:
        return gold.upper()
    exact = [k for k, v in options.items() if v == gold]
    normalized = [k for k, v in options.items() if normalize_answer(v) == normalize_answer(gold)]
    hits = exact or normalized
    if len(hits) == 1:
        return hits[0]
    row.fail(column, "answer")(
        f"is {gold!r}, neither an option letter {sorted(options)} nor the text of one option "
        f"({options})",
        "give the gold as a letter or as one option's exact text",
    )
    return ""  # unreachable


def task_row_fields(
    values: Mapping[str, Any],
    columns: Mapping[str, str],
    *,
    task: str,
    source: str,
    number: int,
    task_file: str,
) -> dict[str, Any]:
    """One row of a user task as the formatter's fields (``problem``, ``question``, ``answer``,
    ``answers``, ``id`` and, with options, ``options`` + ``answer_letter``); raises
    ``TaskRowError`` (``EmptyCell`` for a missing question or answer) with the file, the row,
    the column and the fix. ``number``: the row's index in its file (from 0)."""
    row = _Row(task, source, number, task_file)
    q_col = columns.get("question", "question")
    question = _text(values.get(q_col), row.fail(q_col, "question"))
    if question is None or not question.strip():
        raise EmptyCell(f"{row.where(q_col, 'question')} is empty", "question")
    a_col = columns.get("answer", "answer")
    answers = _texts(values.get(a_col), row, a_col, "answer")
    if not answers:
        raise EmptyCell(f"{row.where(a_col, 'answer')} is empty", "answer")
    if "aliases" in columns:
        answers += _texts(values.get(columns["aliases"]), row, columns["aliases"], "aliases")
    answers = list(dict.fromkeys(answers))
    fields: dict[str, Any] = {"question": question, "answer": answers[0], "answers": answers}
    if "id" in columns:
        i_col = columns["id"]
        ident = _text(values.get(i_col), row.fail(i_col, "id"))
        if ident is None or not ident.strip():
            row.fail(i_col, "id")("is empty", "give every row an id, or remove columns.id "
                                  f"from {task_file} to number the rows instead")  # fmt: skip
        fields["id"] = ident.strip()
    if "options" not in columns:
        fields["problem"] = question
        return fields
    o_col = columns["options"]
    options = _options(values.get(o_col), row, o_col)
    letter = _gold_letter(answers[0], options, row, a_col)
    fields.update(
        problem=render_mcq_problem(question, options), options=options, answer_letter=letter
    )
    fields["answers"] = list(dict.fromkeys([*answers, letter, options[letter]]))
    return fields


def duplicate_ids(ids: Sequence[str]) -> tuple[str, int, int] | None:
    """The first id that occurs twice, with the positions of its two occurrences, else None."""
    seen: dict[str, int] = {}
    for position, value in enumerate(ids):
        if value in seen:
            return value, seen[value], position
        seen[value] = position
    return None

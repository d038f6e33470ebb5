"""Row adapters: one upstream row -> the fields of the example contract, plus the chat prompt.

Each adapter reads the upstream schema (column names from ``TaskSpec.columns``, overridable)
and returns ``problem`` (the text shown to the model), ``question`` (what the LLM judge sees),
``answer`` (canonical gold string), ``answers`` (accepted golds) and, where they apply,
``options`` / ``answer_letter`` (MCQ) and ``answerable`` / ``cost`` (UtilityBench).

User message: RLCR's generation prompt wraps the problem as ``"\\n\\nPROBLEM: {problem}\\n\\n"``
(``damanimehul/RLCR`` dataset_processing.py), which the RLSR paper adopts (Sec. 4.1, C.1).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rlsr.core.prompts import NO_SYSTEM_PROMPT, get_system_prompt

__all__ = [
    "USER_PROMPT_TEMPLATE",
    "HOTPOT_EXACT_MATCH_INSTRUCTION",
    "build_prompt",
    "render_hotpot_problem",
    "render_mcq_problem",
    "parse_rendered_options",
    "FORMATTERS",
    "OPTION_LETTERS",
]

USER_PROMPT_TEMPLATE = "\n\nPROBLEM: {problem}\n\n"

# The instruction the published HotPotQA copies carry inside each problem (RLCR hotpotqa.py).
HOTPOT_EXACT_MATCH_INSTRUCTION = (
    " Your answer will be verified with exact match score. To ensure correct verification, only "
    "provide the answer within the <answer> </answer> tags. Do not put any sentences or reasoning "
    "process within the <answer> </answer> tags."
)
_PARAGRAPH_SEPARATOR = "--------------------------------\n\n"
OPTION_LETTERS = "ABCDEFGHIJ"


def build_prompt(problem: str, system_prompt: str) -> list[dict[str, str]]:
    """TRL conversational prompt: the system prompt named ``system_prompt`` + the user problem
    (``"none"``: the user message alone)."""
    user = {"role": "user", "content": USER_PROMPT_TEMPLATE.format(problem=problem)}
    if system_prompt == NO_SYSTEM_PROMPT:
        return [user]
    return [{"role": "system", "content": get_system_prompt(system_prompt)}, user]


def render_hotpot_problem(
    question: str,
    titles: Sequence[str],
    sentences: Sequence[Sequence[str]],
    removed_titles: Sequence[str] = (),
) -> str:
    """Problem text of the published HotPotQA copies: question, exact-match instruction, then the
    kept paragraphs numbered from 0 (sentences joined by newlines, titles not shown)."""
    removed = set(removed_titles)
    parts = []
    for title, paragraph in zip(titles, sentences, strict=True):
        if title in removed:
            continue
        body = "\n".join(paragraph)
        parts.append(f"Paragraph {len(parts)} \n\n {body} \n\n{_PARAGRAPH_SEPARATOR}")
    info = "".join(parts)
    return (
        f"Question: {question} \n\n{HOTPOT_EXACT_MATCH_INSTRUCTION} \n\n"
        f"Supporting Information: {info} \n\n"
    )


def count_hotpot_paragraphs(problem: str) -> int:
    """Number of ``Paragraph k`` blocks in a rendered HotPotQA problem."""
    return len(re.findall(r"Paragraph \d+ \n\n ", problem))


def render_mcq_problem(question: str, options: Mapping[str, str]) -> str:
    """``question`` followed by one ``"L) text"`` line per option (the published GPQA /
    CommonsenseQA layout)."""
    lines = [question.rstrip("\n")]
    lines += [f"{letter}) {text}" for letter, text in options.items()]
    return "\n".join(lines) + "\n"


def parse_rendered_options(problem: str) -> dict[str, str]:
    """Recover ``{letter: text}`` from a problem that ends with ``A) ..``, ``B) ..`` lines.

    Searches for the last ``\\nA) `` and then each next letter in order, so option texts may
    hold newlines. Returns ``{}`` when no ``A)`` line exists.
    """
    start = problem.rfind("\nA) ")
    if start < 0:
        return {}
    marks: list[tuple[str, int]] = [("A", start)]
    for letter in OPTION_LETTERS[1:]:
        pos = problem.find(f"\n{letter}) ", marks[-1][1] + 1)
        if pos < 0:
            break
        marks.append((letter, pos))
    options = {}
    for i, (letter, pos) in enumerate(marks):
        end = marks[i + 1][1] if i + 1 < len(marks) else len(problem)
        options[letter] = problem[pos + len(letter) + 3 : end].strip()
    return options


# --- adapters -----------------------------------------------------------------------------


def _col(row: Mapping[str, Any], columns: Mapping[str, str], field: str, dataset: str) -> Any:
    name = columns.get(field, field)
    if name not in row:
        raise ValueError(
            f"{dataset}: column {name!r} (for field {field!r}) is missing; the rows have "
            f"{sorted(row)}. Pass columns={{{field!r}: '<column>'}} to load_examples "
            f"(or --columns {field}=<column>) to map it."
        )
    return row[name]


def _opt(row: Mapping[str, Any], columns: Mapping[str, str], field: str) -> Any:
    name = columns.get(field, field)
    return row.get(name)


def _fields(problem: str, answer: str, answers=None, question=None, **extra) -> dict[str, Any]:
    """A formatted row: ``question`` defaults to the problem, ``answers`` to ``[answer]``."""
    answers = [answer] if answers is None else answers
    return {
        "problem": problem,
        "question": question or problem,
        "answer": answer,
        "answers": answers,
        **extra,
    }


def _mcq(problem: str, answer: str, options: dict, letter: str, question=None) -> dict[str, Any]:
    """A multiple-choice row: the answer, its letter and its option text all accepted."""
    answers = list(dict.fromkeys([answer, letter, options[letter]]))
    return _fields(problem, answer, answers, question, options=options, answer_letter=letter)


def _as_answer(value: Any) -> str:
    if value is None:
        return ""
    return str(value).strip()


def _plain(row, columns, dataset):
    problem = str(_col(row, columns, "problem", dataset))
    answer = _as_answer(_col(row, columns, "answer", dataset))
    return _fields(problem, answer)


def _aliases(row, columns, dataset):
    problem = str(_col(row, columns, "problem", dataset))
    raw = _col(row, columns, "answer", dataset)
    if isinstance(raw, Mapping):  # raw TriviaQA: {"value": ..., "aliases": [...]}
        golds = [raw.get("value")] + list(raw.get("aliases") or [])
    elif isinstance(raw, str):
        golds = [raw]
    else:
        golds = list(raw or [])
    answers = list(dict.fromkeys(_as_answer(g) for g in golds if _as_answer(g)))
    if not answers:
        raise ValueError(
            f"{dataset}: row has no gold answer in {columns.get('answer', 'answer')!r}."
        )
    return _fields(problem, answers[0], answers)


_QUESTION_RE = re.compile(r"^\s*Question:\s*(.*?)\s*\n\n", re.DOTALL)


def _hotpot(row, columns, dataset):
    problem = _opt(row, columns, "problem")
    question = _opt(row, columns, "question")
    if not problem:
        # Raw HotpotQA distractor row: render all its (non-removed) paragraphs.
        context = _col(row, columns, "context", dataset)
        question = str(_col(row, columns, "question", dataset))
        problem = render_hotpot_problem(
            question, context["title"], context["sentences"], row.get("removed_titles") or ()
        )
    problem = str(problem)
    if not question:
        match = _QUESTION_RE.match(problem)
        question = match.group(1) if match else problem
    answer = _as_answer(_col(row, columns, "answer", dataset))
    return _fields(problem, answer, question=str(question))


_OPTION_LETTER_RE = re.compile(r"Option\s+([A-J])\b")


def _mcq_rendered(row, columns, dataset):
    problem = str(_col(row, columns, "problem", dataset))
    answer = _as_answer(_col(row, columns, "answer", dataset))
    options = parse_rendered_options(problem)
    letter = _as_answer(_opt(row, columns, "letter")).upper()
    if not letter:
        match = _OPTION_LETTER_RE.search(answer)
        letter = match.group(1) if match else ""
    if not options or letter not in options:
        raise ValueError(
            f"{dataset}: could not read the options / gold letter (options {sorted(options)}, "
            f"letter {letter!r}); expected 'A) ..' lines in the problem and 'Option X ...' answers."
        )
    return _mcq(problem, answer, options, letter)


def _mcq_columns(row, columns, dataset):
    if "ending0" in row:  # swag layout: sent1 (+ sent2), ending0..3, label
        question = " ".join(str(row.get(k) or "").strip() for k in ("sent1", "sent2")).strip()
        endings = [k for k in sorted(row) if re.fullmatch(r"ending\d+", k)]
        options = {OPTION_LETTERS[i]: str(row[k]).strip() for i, k in enumerate(endings)}
        letter = OPTION_LETTERS[int(_col(row, columns, "label", dataset))]
    else:  # question, options {letter: text}, answer_idx
        question = str(_col(row, columns, "question", dataset))
        raw_options = _col(row, columns, "options", dataset)
        if isinstance(raw_options, str):
            raw_options = json.loads(raw_options)
        if isinstance(raw_options, Mapping):
            options = {str(k): str(v).strip() for k, v in raw_options.items() if v is not None}
        else:  # list of {"key":..,"value":..} or plain texts
            options = {}
            for i, item in enumerate(raw_options):
                if isinstance(item, Mapping):
                    options[str(item["key"])] = str(item["value"]).strip()
                else:
                    options[OPTION_LETTERS[i]] = str(item).strip()
        letter = _as_answer(_col(row, columns, "answer_idx", dataset)).upper()
    if letter not in options:
        raise ValueError(f"{dataset}: gold letter {letter!r} not among options {sorted(options)}.")
    answer = f"{letter}) {options[letter]}"
    return _mcq(render_mcq_problem(question, options), answer, options, letter, question)


_ANSWERABLE_CANDIDATES = ("answerable", "is_answerable", "a_i", "answerability")
_COST_CANDIDATES = ("cost", "consequence_cost", "L_i", "L", "loss")
_TRUE = {"1", "true", "yes", "answerable", "y", "t"}
_FALSE = {"0", "false", "no", "unanswerable", "refusal", "refuse", "refusal-required", "n", "f"}


def _first_present(row, columns, field, candidates):
    if field in columns and columns[field] in row:
        return row[columns[field]]
    for name in candidates:
        if name in row:
            return row[name]
    raise ValueError(
        f"utilitybench: no column for {field!r} (tried {columns.get(field)!r} and {candidates}); "
        f"the rows have {sorted(row)}. Pass columns={{{field!r}: '<column>'}}."
    )


def _as_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        return bool(value)
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ValueError(f"utilitybench: cannot read answerability from {value!r}.")


def _utility(row, columns, dataset):
    problem = str(_col(row, columns, "problem", dataset))
    answer = _as_answer(_opt(row, columns, "answer"))
    answerable = _as_bool(_first_present(row, columns, "answerable", _ANSWERABLE_CANDIDATES))
    cost = float(_first_present(row, columns, "cost", _COST_CANDIDATES))
    if not math.isfinite(cost) or cost < 0:
        raise ValueError(f"utilitybench: cost must be a finite number >= 0, got {cost!r}.")
    return _fields(problem, answer, [answer] if answer else [], answerable=answerable, cost=cost)


FORMATTERS: Mapping[str, Callable[[Mapping[str, Any], Mapping[str, str], str], dict]] = {
    "plain": _plain,
    "aliases": _aliases,
    "hotpot": _hotpot,
    "mcq_rendered": _mcq_rendered,
    "mcq_columns": _mcq_columns,
    "utility": _utility,
}

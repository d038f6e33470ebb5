"""Load any registered dataset into the example contract.

Source order for ``load_examples(name, ...)``:

1. ``path=`` — a JSONL / JSON / Parquet / CSV file, a ``save_to_disk`` folder (``Dataset`` or
   ``DatasetDict``), or a folder holding ``<split>.jsonl`` / ``<split>.parquet`` files;
2. the bundled copy (``tiny`` only);
3. ``data_dir=`` or ``$RLSR_DATA_DIR`` — the folder ``<data_dir>/<name>`` laid out as in 1.;
4. the Hugging Face hub (``datasets.load_dataset(hf_id, hf_config, split=, revision=)``).

When the hub cannot be reached, ``DatasetUnavailableError`` names the dataset id and the command
that saves it on a connected machine (``rlsr tasks download NAME --out DIR``).
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import datasets
import numpy as np
from datasets.exceptions import DatasetGenerationError

from rlsr.core.prompts import NO_SYSTEM_PROMPT, system_prompt_names
from rlsr.data.formatting import FORMATTERS, build_prompt
from rlsr.data.registry import DatasetUnavailableError, TaskSpec, get_spec
from rlsr.data.task_rows import EmptyCell, duplicate_ids, read_rows_as_written, task_row_fields
from rlsr.verifiers import get_verifier, is_plugin_name

__all__ = [
    "CONTRACT_COLUMNS",
    "DATA_DIR_ENV",
    "FIXTURES_DIR",
    "DatasetUnavailableError",
    "PromptRoom",
    "load_examples",
    "load_raw",
    "download_command",
    "download_dataset",
    "verification_inputs",
    "row_verification_inputs",
    "build_verifier",
]

DATA_DIR_ENV = "RLSR_DATA_DIR"
FIXTURES_DIR = Path(__file__).resolve().parent / "fixtures"
CONTRACT_COLUMNS = ("id", "prompt", "question", "answer", "answers", "verifier")
_FILE_BUILDERS = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv"}
_SAVED = ("dataset_dict.json", "state.json")  # a save_to_disk folder (DatasetDict, Dataset)


@dataclass(frozen=True)
class PromptRoom:
    """What a user task's prompt must fit, checked as its split loads (before model weights):
    ``count(messages)`` tokens of prompt + ``budget`` new tokens <= ``context`` tokens.

    ``context_name`` / ``budget_name`` say where each number comes from (``--max-model-len``,
    ``max_position_embeddings in MODEL/config.json``, ``--max-new-tokens``,
    ``grpo.max_completion_length``) and ``fix`` how to make room (or a function of the too-long
    rows' prompt tokens that says it); all three go into the refusal. A task with ``too_long:
    skip`` skips such rows instead (counted in a warning)."""

    count: Callable[[list[dict]], int]
    context: int
    budget: int
    context_name: str
    budget_name: str
    fix: str | Callable[[list[int]], str]


def download_command(name: str) -> str:
    """The shell command that saves dataset ``name`` (all splits) for offline use."""
    bundled = "" if get_spec(name).hf_id else "  # bundled, nothing to download"
    return f"rlsr tasks download {name} --out DIR{bundled}"


def _python_download_command(spec: TaskSpec, split: str) -> str:
    args = [repr(spec.hf_id)] + ([repr(spec.hf_config)] if spec.hf_config else [])
    args.append(f"split={split!r}")
    if spec.revision:
        args.append(f"revision={spec.revision!r}")
    return (
        f'python -c "from datasets import load_dataset; load_dataset({", ".join(args)})'
        f".save_to_disk('DIR/{spec.name}/{split}')\""
    )


# --- local sources ------------------------------------------------------------------------


def _load_file(path: Path) -> datasets.Dataset:
    builder = _FILE_BUILDERS.get(path.suffix.lower())
    if builder is None:
        raise ValueError(
            f"unsupported data file {path}; use one of {sorted(_FILE_BUILDERS)} or a save_to_disk "
            "folder."
        )
    if builder == "json":  # checked here: `datasets` reports it as an 80-line error
        _check_json(path)
    try:
        return datasets.load_dataset(builder, data_files=str(path), split="train")
    except DatasetGenerationError as err:
        cause = str(err.__cause__ or err).replace("\n", " ")
        raise ValueError(f"{path}: cannot be read as {builder} data ({cause}).") from err


def _check_json(path: Path) -> None:
    """Raise ``FILE: line N: what is wrong`` for the first line of a JSON-lines file that is
    not a JSON object (a ``.json`` file holding one JSON document is checked as a whole)."""
    text = path.read_text(encoding="utf-8", errors="replace")
    if path.suffix.lower() == ".json":
        try:
            json.loads(text)
            return
        except ValueError:
            pass  # not one document: maybe JSON lines
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as err:
            raise ValueError(
                f"{path}: line {number}: not valid JSON ({err.msg} at column {err.colno})."
            ) from None
        if not isinstance(value, dict):
            raise ValueError(
                f"{path}: line {number}: expected a JSON object, got {type(value).__name__}."
            )


def _split_source(path: Path, split: str) -> Path:
    """The file or ``save_to_disk`` folder holding ``split`` under ``path`` (module docstring)."""
    if not path.exists():
        raise FileNotFoundError(f"data path {path} does not exist.")
    while path.is_dir() and not any((path / f).exists() for f in _SAVED):
        if (path / split).is_dir():
            path = path / split
            continue
        found = [path / f"{split}{s}" for s in _FILE_BUILDERS if (path / f"{split}{s}").exists()]
        if not found:
            raise FileNotFoundError(
                f"no split {split!r} under {path}: expected dataset_dict.json (save_to_disk), "
                f"{split}/ , or {split}.jsonl / {split}.parquet."
            )
        return found[0]
    return path


def _load_local(path: Path, split: str) -> datasets.Dataset:
    """Read ``split`` from a file or folder (see module docstring for layouts)."""
    path = _split_source(path, split)
    if path.is_file():
        return _load_file(path)
    loaded = datasets.load_from_disk(str(path))
    if isinstance(loaded, datasets.DatasetDict):
        if split not in loaded:
            raise ValueError(f"split {split!r} not in {path} (has {sorted(loaded)}).")
        return loaded[split]
    return loaded


def _load_hub(spec: TaskSpec, split: str) -> datasets.Dataset:
    try:
        return datasets.load_dataset(
            spec.hf_id, spec.hf_config, split=split, revision=spec.revision
        )
    except Exception as err:  # offline, unreachable, gated, missing: all end the same way
        raise DatasetUnavailableError(
            f"could not load dataset {spec.name!r} from the Hugging Face hub id {spec.hf_id!r} "
            f"(split {split!r}): {type(err).__name__}: {err}\n"
            f"On a machine with hub access run\n    {download_command(spec.name)}\n"
            f"or\n    {_python_download_command(spec, split)}\n"
            f"then copy DIR here and pass --data-dir DIR (or set {DATA_DIR_ENV}=DIR), or "
            f"--data-path {spec.name}=DIR/{spec.name}."
        ) from err


def load_raw(
    name: str,
    *,
    path: str | os.PathLike | None = None,
    split: str | None = None,
    data_dir: str | os.PathLike | None = None,
) -> datasets.Dataset:
    """The upstream rows of ``name`` / ``split`` from the first source that has them."""
    spec = get_spec(name)
    split = split or spec.split
    if path is not None:
        return _load_local(Path(path), split)
    if spec.hf_id is None:
        return _load_local(FIXTURES_DIR / name, split)
    root = data_dir if data_dir is not None else os.environ.get(DATA_DIR_ENV)
    if root and (Path(root) / name).exists():
        return _load_local(Path(root) / name, split)
    return _load_hub(spec, split)


def task_split_rows(n: int, fraction: float, seed: int, split: str) -> list[int]:
    """Row indices of ``split`` ("train" | "eval") when ``n`` rows are split by a seeded fraction:
    a permutation of ``range(n)`` from ``numpy.random.default_rng(seed)``; its first
    ``round(fraction * n)`` rows are ``eval``, the others ``train``; each split keeps file order."""
    order = np.random.default_rng(seed).permutation(n)
    n_eval = int(round(fraction * n))
    rows = order[:n_eval] if split == "eval" else order[n_eval:]
    return sorted(int(i) for i in rows)


def _task_file(spec: TaskSpec) -> str:
    return spec.task.file if spec.task and spec.task.file else "the task"


def _rows_as_written(path: Path, split: str) -> tuple[list[dict], str]:
    """``split`` of a task's local data as rows (``rlsr.data.task_rows``: CSV and JSON cells as
    written; Parquet and ``save_to_disk`` typed), and the file or folder they came from."""
    path = _split_source(path, split)
    if path.is_file() and path.suffix.lower() in (".csv", ".jsonl", ".json"):
        if path.suffix.lower() != ".csv":
            _check_json(path)
        return read_rows_as_written(path), str(path)
    return _load_local(path, split).to_list(), str(path)


def _task_rows(
    spec: TaskSpec, split: str, path, data_dir
) -> tuple[list[dict], list[int], list[str], str]:
    """A task's ``split``: its rows, each row's index in its file, the columns and the source."""
    task = spec.task
    local = Path(path) if path is not None else None
    if local is None and task.data_path is not None:
        local = Path(task.data_path)
    if local is None:
        raw = load_raw(spec.name, split=split, data_dir=data_dir)
        return raw.to_list(), list(range(len(raw))), list(raw.column_names), str(spec.hf_id)
    fraction = task.eval_fraction if path is None else None
    if fraction is not None and split not in ("train", "eval"):
        raise ValueError(
            f"task {spec.name}: split {split!r} does not exist; a file split by "
            f"splits.eval_fraction has the splits 'train' and 'eval'."
        )
    rows, source = _rows_as_written(local, split)
    columns = list(dict.fromkeys(k for row in rows for k in row))
    numbers = list(range(len(rows)))
    if fraction is not None:
        numbers = task_split_rows(len(rows), fraction, task.split_seed, split)
        if not numbers and rows:
            n, file = len(rows), _task_file(spec)
            if n < 2:
                fix = f"one row cannot be split in two; add rows to {source}"
            elif split == "eval":
                fix = (
                    f"use splits.eval_fraction: {1 / n:.{len(str(n)) + 1}f} (1 of the {n} rows) "
                    f"or more in {file}"
                )
            else:
                fix = (
                    f"use splits.eval_fraction: {(n - 1) / n:.{len(str(n)) + 1}f} or less, so a "
                    f"row is left to train on, in {file}"
                )
            raise ValueError(
                f"task {spec.name}: splits.eval_fraction {fraction} of the {n} rows of {source} "
                f"rounds to 0 rows for split {split!r} (round({fraction} x {n}) = "
                f"{round(fraction * n)}), so split {split!r} has no rows; {fix}."
            )
        rows = [rows[i] for i in numbers]
    return rows, numbers, columns, source


def _check_task_columns(spec, columns: Sequence[str], n_rows: int, split, mapping, source) -> None:
    """A user task's data before formatting: every mapped column present, the split not empty."""
    file = _task_file(spec)
    where = f"{source} (split {split!r})"
    if n_rows == 0:
        raise ValueError(
            f"task {spec.name}: split {split!r} of {source} has no rows; point data at "
            f"a file with examples, or change splits in {file}."
        )
    for field_name in (
        "question",
        "answer",
        *(f for f in ("id", "aliases", "options") if f in mapping),
    ):
        column = mapping.get(field_name, field_name)
        if column not in columns:
            default = (
                f" (columns.{field_name} defaults to {field_name!r})"
                if column == field_name
                else ""
            )
            raise ValueError(
                f"task {spec.name}: no column {column!r} for {field_name} in {where}{default}; "
                f"the data has the columns {list(columns)}. Set columns.{field_name}: "
                f"<one of them> in {file}."
            )


def _fitting(spec, split, source, out, room: PromptRoom, limit):
    """The rows of ``out`` whose prompt fits ``room`` (the first ``limit`` of them); a row that
    does not is refused, or skipped and counted with the task's ``too_long: skip``."""
    kept, too_long = [], []
    for number, example in out:
        if limit is not None and len(kept) >= limit:
            break  # rows past the limit are not asked
        tokens = room.count(example["prompt"])
        if tokens + room.budget > room.context:
            too_long.append((number, tokens))
        else:
            kept.append((number, example))
    if not too_long:
        return kept
    number, tokens = too_long[0]
    fix = room.fix if isinstance(room.fix, str) else room.fix([t for _, t in too_long])
    more = f" ({len(too_long) - 1} more rows too)" if len(too_long) > 1 else ""
    problem = (
        f"task {spec.name}: {source}, row {number}: the prompt is {tokens} tokens; with "
        f"{room.budget} new tokens ({room.budget_name}) it needs {tokens + room.budget}, more "
        f"than the model's context of {room.context} tokens ({room.context_name}){more}"
    )
    if spec.task.too_long != "skip":
        raise ValueError(
            f"{problem}. The model would answer a cut prompt, or not at all. Fix: shorten the "
            f"question, {fix}, or set too_long: skip in {_task_file(spec)} to skip such "
            "rows (counted)."
        )
    warnings.warn(
        f"task {spec.name}: too_long: skip: skipped {len(too_long)} rows of split {split!r} whose "
        f"prompt does not fit (first: {problem}).",
        stacklevel=4,
    )
    if not kept:
        raise ValueError(f"{problem}: every row of split {split!r} is too long; {fix}.")
    return kept


def _load_task_examples(spec, split, path, data_dir, limit, system_prompt, mapping, room=None):
    """A user task's ``split`` in the contract (``rlsr.data.task_rows``): every row checked
    (answers as written, no empty question or answer unless ``skip_empty``, options), ids unique,
    then the first ``limit`` rows."""
    rows, numbers, columns, source = _task_rows(spec, split, path, data_dir)
    _check_task_columns(spec, columns, len(rows), split, mapping, source)
    file = _task_file(spec)
    out, skipped, first_skipped = [], 0, None
    for position, (row, number) in enumerate(zip(rows, numbers, strict=True)):
        try:
            fields = task_row_fields(
                row, mapping, task=spec.name, source=source, number=number, task_file=file
            )
        except EmptyCell as err:
            if not spec.task.skip_empty:
                raise ValueError(
                    f"{err}; an empty {err.field_name} cannot be asked or scored. Fix: fill it "
                    f"in or remove the row, or set skip_empty: true in {file} to skip such rows "
                    "(they are counted)."
                ) from None
            skipped += 1
            first_skipped = first_skipped or str(err)
            continue
        example_id = fields.get("id", f"{spec.name}-{split}-{position}")
        out.append((number, _contract_row(example_id, fields, spec, system_prompt)))
    if skipped:
        warnings.warn(
            f"task {spec.name}: skip_empty: skipped {skipped} of {len(rows)} rows of split "
            f"{split!r} with an empty question or answer (first: {first_skipped}).",
            stacklevel=3,
        )
    if not out:
        raise ValueError(
            f"task {spec.name}: every row of split {split!r} of {source} has an empty question "
            f"or answer ({skipped} skipped by skip_empty); fill them in."
        )
    duplicate = duplicate_ids([e["id"] for _, e in out])
    if duplicate is not None:
        value, a, b = duplicate
        raise ValueError(
            f"task {spec.name}: id {value!r} occurs twice in column {mapping['id']!r} of "
            f"{source} (rows {out[a][0]} and {out[b][0]}, split {split!r}); ids must be unique "
            f"(results are matched and resumed by id). Fix: make the ids unique, or remove "
            f"columns.id from {file} to number the rows instead."
        )
    if room is not None:
        out = _fitting(spec, split, source, out, room, limit)
    return _dataset([e for _, e in out][:limit])


# --- contract -----------------------------------------------------------------------------


def _contract_row(
    example_id: str, fields: Mapping[str, Any], spec: TaskSpec, system_prompt: str
) -> dict[str, Any]:
    """One example in the contract's columns from a row's formatted ``fields``: the one shape a
    task's rows and a built-in dataset's rows share."""
    example = {
        "id": example_id,
        "prompt": build_prompt(fields["problem"], system_prompt),
        "question": fields["question"],
        "answer": fields["answer"],
        "answers": fields["answers"],
        "verifier": spec.verifier,
    }
    if "options" in fields:
        example["options"] = json.dumps(fields["options"], ensure_ascii=False)
        example["answer_letter"] = fields["answer_letter"]
    example.update((k, fields[k]) for k in ("answerable", "cost") if k in fields)
    return example


_STRING = datasets.Value("string")
# The contract's columns in order, typed explicitly so rows that happen to hold only empty lists
# still agree.
_FEATURES = {
    "id": _STRING,
    "prompt": datasets.List({"role": _STRING, "content": _STRING}),
    "question": _STRING,
    "answer": _STRING,
    "answers": datasets.List(_STRING),
    "verifier": _STRING,
    "options": _STRING,
    "answer_letter": _STRING,
    "answerable": datasets.Value("bool"),
    "cost": datasets.Value("float64"),
    "gold_removed": datasets.Value("int64"),
}


def _dataset(examples: list[dict]) -> datasets.Dataset:
    """``examples`` as a dataset with the contract's columns (and the optional ones any row has)."""
    present = set(CONTRACT_COLUMNS).union(*examples)
    features = datasets.Features({k: v for k, v in _FEATURES.items() if k in present})
    columns = {k: [e.get(k) for e in examples] for k in features}
    return datasets.Dataset.from_dict(columns, features=features)


def load_examples(
    name: str,
    *,
    path: str | os.PathLike | None = None,
    split: str | None = None,
    limit: int | None = None,
    system_prompt: str | None = None,
    data_dir: str | os.PathLike | None = None,
    columns: Mapping[str, str] | None = None,
    room: PromptRoom | None = None,
) -> datasets.Dataset:
    """Rows of dataset ``name`` in the contract: ``id``, ``prompt`` (system + user messages),
    ``question``, ``answer``, ``answers``, ``verifier`` and, where they apply, ``options`` (JSON
    ``{letter: text}``) + ``answer_letter`` (MCQ), ``answerable`` + ``cost`` (UtilityBench),
    ``gold_removed`` (HotPotQA-Modified).

    ``split`` defaults to the spec's evaluation split; ``limit`` keeps the first ``limit`` rows;
    ``system_prompt`` ("simple" | "long" | "none": no system message) overrides the spec's
    (Sec. C.5: evaluate with the training domain's prompt); ``columns`` overrides the spec's
    column mapping; ``room``: a user task's prompts must fit the model's context with the
    generation budget (``PromptRoom``; built-in datasets are not checked).
    """
    spec = get_spec(name)
    split = split or spec.split
    system_prompt = system_prompt or spec.system_prompt
    if system_prompt not in system_prompt_names() and system_prompt != NO_SYSTEM_PROMPT:
        raise ValueError(
            f"system_prompt must be one of {[*system_prompt_names(), NO_SYSTEM_PROMPT]}, "
            f"got {system_prompt!r}."
        )
    if limit is not None and (not isinstance(limit, int) or limit < 1):
        raise ValueError(f"limit must be a positive integer or None, got {limit!r}.")
    mapping = {**spec.columns, **(columns or {})}
    if spec.formatter == "task":
        return _load_task_examples(spec, split, path, data_dir, limit, system_prompt, mapping, room)
    raw = load_raw(name, path=path, split=split, data_dir=data_dir)
    expected = spec.sizes.get(split)
    if path is None and spec.hf_id is not None and expected and len(raw) != expected:
        warnings.warn(
            f"{name}/{split}: {len(raw)} rows, the published copy has {expected}.", stacklevel=2
        )
    if limit is not None:
        raw = raw.select(range(min(limit, len(raw))))
    formatter, examples = FORMATTERS[spec.formatter], []
    for index, row in enumerate(raw.to_list()):
        ident = row.get(mapping.get("id", "id"))
        ident = str(ident) if ident not in (None, "") else f"{name}-{split}-{index}"
        example = _contract_row(ident, formatter(row, mapping, name), spec, system_prompt)
        if row.get("gold_removed") is not None:  # HotPotQA-Modified condition, for analysis
            example["gold_removed"] = int(row["gold_removed"])
        examples.append(example)
    return _dataset(examples)


def download_dataset(name: str, out_dir: str | os.PathLike) -> Path:
    """Save every split of ``name`` from the hub to ``out_dir/<name>`` (``save_to_disk``)."""
    spec = get_spec(name)
    if spec.hf_id is None:
        raise ValueError(f"{name} is bundled with rlsr; nothing to download.")
    target = Path(out_dir) / name
    names = spec.sizes or dict.fromkeys([spec.train_split or spec.split, spec.split])  # a task's
    splits = {split: _load_hub(spec, split) for split in names}
    datasets.DatasetDict(splits).save_to_disk(str(target))
    return target


# --- verifier inputs ----------------------------------------------------------------------


def build_verifier(name: str, verifier: str | None = None, **kwargs):
    """The verifier of dataset ``name``: ``verifier`` (default the dataset's own) built with the
    dataset's ``verifier_options`` (a task's ``verifier: {name: ..., option: value}``) when it is
    the dataset's own verifier, then ``kwargs`` (``rlsr.verifiers.get_verifier``)."""
    spec = get_spec(name)
    vname = verifier or spec.verifier
    options = dict(spec.verifier_options) if vname == spec.verifier else {}
    return get_verifier(vname, **{**options, **kwargs})


def verification_inputs(examples: datasets.Dataset, verifier: str | None = None) -> dict[str, list]:
    """Keyword arguments of ``verify_batch`` for the verifier named ``verifier`` (default: the
    rows' own). exact_match -> golds = ``answers`` lists; math -> ``answer``; mcq ->
    ``answer_letter`` with ``options``; llm_judge -> ``answers`` (``answer`` for MCQ rows) with
    ``question``."""
    if verifier is None:
        names = set(examples["verifier"])
        if len(names) != 1:
            raise ValueError(f"rows mix verifiers {sorted(names)}; pass verifier=.")
        verifier = names.pop()
    names = examples.column_names

    def options() -> list:
        return [json.loads(o) if isinstance(o, str) else o for o in examples["options"]]

    if is_plugin_name(verifier):
        inputs = dict(golds=list(examples["answer"]), questions=list(examples["question"]))
        if "options" in names and all(o is not None for o in examples["options"]):
            inputs["options"] = options()
        return inputs
    if verifier == "exact_match":
        return dict(golds=list(examples["answers"]))
    if verifier == "math":
        return dict(golds=list(examples["answer"]))
    if verifier == "mcq":
        if "answer_letter" not in names:
            raise ValueError("verifier 'mcq' needs MCQ rows (columns answer_letter, options).")
        return dict(golds=list(examples["answer_letter"]), options=options())
    if verifier == "llm_judge":
        # Aliases (TriviaQA) all go to the judge; MCQ rows give their one "Option X ..." answer.
        column = "answer" if "options" in names else "answers"
        return dict(golds=list(examples[column]), questions=list(examples["question"]))
    raise ValueError(
        f"unknown verifier {verifier!r}; choose exact_match, math, mcq, llm_judge or a plugin "
        "'package.module:function' (docs/tasks.md)."
    )


class _RowColumns(dict):
    """Rows (dicts) seen as columns: ``self[name]`` lists each row's value (None when absent)."""

    def __init__(self, rows: Sequence[dict]) -> None:
        keys = dict.fromkeys(k for x in rows for k in x)
        super().__init__({k: [x.get(k) for x in rows] for k in keys})
        self.n_rows = len(rows)

    @property
    def column_names(self) -> list[str]:
        return list(self)

    def __missing__(self, key: str) -> list:
        return [None] * self.n_rows


def row_verification_inputs(inputs: Sequence[dict], verifier_name: str) -> dict[str, list]:
    """``verification_inputs`` for rows (dicts), as the trainer gets them through TRL's
    ``inputs``; a row without ``answers`` is scored against ``[answer]``."""
    rows = [{**x, "answers": x.get("answers") or [x["answer"]]} for x in inputs]
    return dict(verification_inputs(_RowColumns(rows), verifier_name))

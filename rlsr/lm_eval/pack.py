"""The folder ``rlsr lm-eval tasks`` writes for lm-eval's ``--include_path`` (docs/lm_eval.md):
per task ``T``, ``rlsr_T.jsonl`` (its rows as ``rlsr evaluate`` renders them, plus the fields the
hooks read) and ``rlsr_T.yaml`` (a greedy ``generate_until`` task whose ``process_results`` and
aggregations are ``rlsr.lm_eval.hooks``'); one ``rlsr_lm_eval_utils.py`` hands lm-eval those
functions, registers the user task files the pack was made from and reads each task's rows from
its own folder, so the folder can be moved.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from rlsr.evaluation.run.external import (
    LM_EVAL_FORMAT_FIELD,
    LM_EVAL_SYSTEM_FIELD,
    LM_EVAL_TASK_FIELD,
    LM_EVAL_USER_FIELD,
)
from rlsr.lm_eval.hooks import METRICS, VERIFIER_FIELD

__all__ = [
    "UTILS_MODULE",
    "TAG",
    "lm_eval_name",
    "pack_rows",
    "task_yaml",
    "utils_source",
    "write_pack",
]

UTILS_MODULE = "rlsr_lm_eval_utils"
TAG = "rlsr"  # `lm_eval --tasks rlsr` runs every task of the folder


def lm_eval_name(task: str) -> str:
    """The lm-eval task name of rlsr task ``task``."""
    return f"rlsr_{task}"


def pack_rows(examples, task: str, verifier: str, response_format: str) -> list[dict]:
    """The rows of ``examples`` (``load_examples``) with the fields the hooks read."""
    rows = []
    for row in examples:
        messages = row["prompt"]
        system = next((m["content"] for m in messages if m["role"] == "system"), "")
        user = [m["content"] for m in messages if m["role"] == "user"]
        if len(user) != 1:
            raise ValueError(f"task {task}: row {row['id']!r} has {len(user)} user messages; an "
                             "lm-eval task sends one.")  # fmt: skip
        rows.append(
            {
                **row,
                LM_EVAL_TASK_FIELD: task,
                VERIFIER_FIELD: verifier,
                LM_EVAL_FORMAT_FIELD: response_format,
                LM_EVAL_SYSTEM_FIELD: system,
                LM_EVAL_USER_FIELD: user[0],
            }
        )
    return rows


def task_yaml(task: str, rows_file: str, max_new_tokens: int, header: str) -> str:
    """The lm-eval task YAML of rlsr task ``task`` (strings JSON-quoted: valid YAML)."""
    q = json.dumps
    metrics = "".join(
        f"  - metric: {name}\n    aggregation: !function {UTILS_MODULE}.{fn.__name__}\n"
        f"    higher_is_better: {str(higher).lower()}\n"
        for name, (fn, higher) in METRICS.items()
    )
    return (
        f"{header}"
        f"task: {q(lm_eval_name(task))}\n"
        f"tag:\n  - {TAG}\n"
        f"custom_dataset: !function {UTILS_MODULE}.load_docs\n"
        f"dataset_kwargs:\n  rlsr_rows: {q(rows_file)}\n"
        "test_split: test\n"
        "output_type: generate_until\n"
        f"description: {LM_EVAL_SYSTEM_FIELD}\n"
        f"doc_to_text: {LM_EVAL_USER_FIELD}\n"
        "doc_to_target: answer\n"
        f"process_results: !function {UTILS_MODULE}.process_results\n"
        "generation_kwargs:\n"
        "  until: []\n"
        "  do_sample: false\n"
        f"  max_gen_toks: {int(max_new_tokens)}\n"
        "num_fewshot: 0\n"
        f"metric_list:\n{metrics}"
        "metadata:\n  version: 1.0\n"
    )


def utils_source(task_files: Sequence[str]) -> str:
    """``rlsr_lm_eval_utils.py``: the hooks, the rows loader, the user task files registered."""
    names = ", ".join(
        ["load_docs", "process_results", *(fn.__name__ for fn, _ in METRICS.values())]
    )
    return (
        '"""Written by `rlsr lm-eval tasks` (docs/lm_eval.md): the functions the rlsr_*.yaml tasks\n'
        'of this folder name; each is rlsr.lm_eval.hooks\'."""\n\n'
        "from pathlib import Path\n\n"
        "from rlsr.data import load_tasks\n"
        "from rlsr.lm_eval.hooks import (  # noqa: F401\n"
        + "".join(f"    {fn.__name__},\n" for fn, _ in METRICS.values())
        + "    load_rows,\n    process_results,\n)\n\n"
        f"load_tasks({list(task_files)!r})  # the user task files the pack was made from\n\n\n"
        "def load_docs(rlsr_rows, **metadata):\n"
        '    """lm-eval\'s custom_dataset: the task\'s rows, from this folder."""\n'
        "    return load_rows(Path(__file__).resolve().parent / rlsr_rows)\n\n\n"
        f"__all__ = {names.split(', ')!r}\n"
    )


def write_pack(
    out_dir: str | Path,
    tasks: Mapping[str, tuple[object, str]],
    *,
    response_format: str,
    max_new_tokens: int,
    task_files: Sequence[str],
    header: str = "",
) -> list[str]:
    """Write the pack of ``tasks`` (``{task: (examples, verifier name)}``) into ``out_dir``;
    returns the lm-eval task names."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    names = []
    for task, (examples, verifier) in tasks.items():
        rows_file = f"{lm_eval_name(task)}.jsonl"
        rows = pack_rows(examples, task, verifier, response_format)
        (out / rows_file).write_text("".join(json.dumps(r) + "\n" for r in rows))
        (out / f"{lm_eval_name(task)}.yaml").write_text(
            task_yaml(task, rows_file, max_new_tokens, header)
        )
        names.append(lm_eval_name(task))
    (out / f"{UTILS_MODULE}.py").write_text(utils_source(task_files))
    return names

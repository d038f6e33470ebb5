"""``rlsr lm-eval``'s flags (what it does: ``rlsr.cli.lm_eval_cli``)."""

from __future__ import annotations

import argparse

from rlsr.cli.evaluate import add_task_data_flags
from rlsr.lm_eval import DEFAULT_OUTPUT_DIR
from rlsr.run.eval_protocol import add_protocol_flags

__all__ = ["register"]


def register(subparsers) -> argparse.ArgumentParser:
    """Add ``rlsr lm-eval tasks`` to the ``rlsr`` command."""
    top = subparsers.add_parser(
        "lm-eval",
        help="rlsr's tasks as lm-evaluation-harness tasks (--include_path)",
        description="rlsr's tasks for lm-evaluation-harness: same prompts, parser, verifiers "
        "and metrics as rlsr evaluate (docs/lm_eval.md).",
    )
    sub = top.add_subparsers(dest="lm_eval_command", required=True)
    t = sub.add_parser(
        "tasks",
        allow_abbrev=False,
        help="write the task folder for lm_eval --include_path and print the command",
        description="Writes one lm-eval task per rlsr task (rlsr_<task>.yaml, its rows, and "
        "rlsr_lm_eval_utils.py) into --output-dir and prints the lm_eval command. User tasks: "
        "--tasks-dir (docs/tasks.md).",
    )
    t.add_argument(
        "--tasks",
        metavar="NAMES",
        help="comma list of task names or a group; default: every task whose rows are "
        "here (bundled, --data-dir, a task file's data) and whose verifier lm-eval can "
        "run",
    )
    t.add_argument(
        "--output-dir",
        default=DEFAULT_OUTPUT_DIR,
        metavar="DIR",
        help=f"the folder to write (default: {DEFAULT_OUTPUT_DIR})",
    )
    add_task_data_flags(t)
    add_protocol_flags(t, ["system_prompt", "response_format", "max_new_tokens"])
    return top

"""The ``rlsr`` command. ``COMMANDS`` maps each command to the function adding its flags
(``rlsr.cli.<command>``: argparse only) and to ``"module:function"``, the code that runs it,
imported only after the arguments parsed: ``--help`` and a wrong flag load nothing heavy
(tests/test_cli_startup.py). A new command: its flags module and one line in ``COMMANDS``.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable

from rlsr.cli import compare, deploy, evaluate, lm_eval, report, serve, tasks
from rlsr.data import load_env_tasks, load_tasks
from rlsr.data.registry import DatasetUnavailableError
from rlsr.verifiers.base import VerifierFailure

# command -> (adds its parser and flags to the sub-parsers, "module:function" that runs it)
COMMANDS: dict[str, tuple[Callable[..., argparse.ArgumentParser], str]] = {
    "tasks": (tasks.register, "rlsr.cli.tasks_cli:run_tasks"),
    "evaluate": (evaluate.register, "rlsr.cli.evaluate_cli:run_evaluate"),
    "report": (report.register, "rlsr.cli.report_cli:run_report"),
    "deploy": (deploy.register, "rlsr.cli.deploy_cli:run_deploy"),
    "compare": (compare.register, "rlsr.cli.compare_cli:run_compare"),
    "serve": (serve.register, "rlsr.cli.serve_cli:run_serve"),
    "serve-report": (serve.register_report, "rlsr.cli.serve_cli:run_serve_report"),
    "lm-eval": (lm_eval.register, "rlsr.cli.lm_eval_cli:run_tasks"),
}


DESCRIPTION = (
    "Evaluate language models for selective prediction (answer only when likely right): "
    "generate answers with confidences on the paper's datasets, verify them, and score AURC, "
    "ECE and accuracy at coverage; compare runs in paper-style tables, and methods across "
    "training seeds with confidence intervals; pick a risk-controlled "
    "confidence threshold; list and download the tasks. Training runs through "
    "`accelerate launch train.py` (docs/training.md)."
)


TASKS_DIR_HELP = (
    "folder of task files (*.yaml) or one task file, registering your own tasks beside the "
    "built-in ones (docs/tasks.md); repeatable; $RLSR_TASKS_PATH is read too"
)


def _add_tasks_dir(parser: argparse.ArgumentParser, top: bool) -> None:
    """``--tasks-dir`` on ``parser`` and every sub-command below it (values accumulate)."""
    parser.add_argument(
        "--tasks-dir",
        action="append",
        metavar="DIR",
        default=[] if top else argparse.SUPPRESS,
        help=TASKS_DIR_HELP,
    )
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in dict.fromkeys(action.choices.values()):
                _add_tasks_dir(child, top=False)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rlsr",
        allow_abbrev=False,
        description=DESCRIPTION,
        epilog="`rlsr COMMAND --help` for each command's options; docs/evaluation.md.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for register, target in COMMANDS.values():
        command = register(sub)
        command.set_defaults(run=target)
        # a flag is spelled out in full: a prefix would silently take another flag's place
        # (`--output` as `--output-dir`) instead of the unknown-flag error
        command.allow_abbrev = False
    _add_tasks_dir(parser, top=True)
    return parser


def run_command(target: str, args: argparse.Namespace) -> int | None:
    """Import ``target`` ("module:function") and call it on the parsed ``args``."""
    module, _, function = target.partition(":")
    return getattr(importlib.import_module(module), function)(args)


USAGE_ERROR_EXIT = 2
VERIFIER_FAILED_EXIT = 1  # too many items without a verdict (rlsr.verifiers.base.VerifierFailure)
INTERRUPTED_EXIT = 130  # 128 + SIGINT


def main(argv: list[str] | None = None) -> int:
    """Run one sub-command. A problem with the user's input (our ``ValueError``s, a dataset that is
    neither local nor on a reachable hub, a missing file) prints ``rlsr: error: <message>`` and
    exits 2 instead of a traceback; a ``VerifierFailure`` exits 1, Ctrl-C 130 (a command that
    saves work reports it itself); ``RLSR_DEBUG=1`` re-raises each."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        load_env_tasks()  # $RLSR_TASKS_PATH, then --tasks-dir (docs/tasks.md)
        load_tasks(getattr(args, "tasks_dir", None) or [])
        return int(run_command(args.run, args) or 0)
    except (
        ValueError,
        KeyError,
        OSError,
        DatasetUnavailableError,
        VerifierFailure,
        KeyboardInterrupt,
    ) as err:
        if os.environ.get("RLSR_DEBUG"):
            raise
        if isinstance(err, KeyboardInterrupt):
            print("rlsr: interrupted", file=sys.stderr)
            return INTERRUPTED_EXIT
        message = err.args[0] if isinstance(err, KeyError) and err.args else err
        print(f"rlsr: error: {message}", file=sys.stderr)
        return VERIFIER_FAILED_EXIT if isinstance(err, VerifierFailure) else USAGE_ERROR_EXIT

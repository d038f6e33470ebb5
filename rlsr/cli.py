"""The ``rlsr`` command (sub-commands are registered from their own modules)."""

from __future__ import annotations

import argparse
import os
import sys

from rlsr.data import cli as data_cli
from rlsr.data import load_env_tasks, load_tasks
from rlsr.data.loading import DatasetUnavailableError
from rlsr.evaluation import compare_cli, deploy_cli, evaluate_cli, report_cli
from rlsr.lm_eval import cli as lm_eval_cli
from rlsr.serving import cli as serving_cli
from rlsr.verifiers.base import VerifierFailure

# Each ``register`` takes the argparse sub-parsers object and adds its sub-command(s) with
# ``set_defaults(func=...)``.
_SUBCOMMANDS = (
    data_cli.register,
    evaluate_cli.register,
    report_cli.register,
    deploy_cli.register,
    compare_cli.register,
    serving_cli.register,
    lm_eval_cli.register,
)


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


def _offer_current_names(sub: argparse._SubParsersAction) -> None:
    """List each sub-command under its own name only. An old name kept as an alias (``rlsr
    datasets``, now ``rlsr tasks``) still runs, with its note, but the help does not offer it:
    argparse would print ``{tasks,datasets,...}`` and ``tasks (datasets)``."""
    for choice in sub._choices_actions:
        choice.metavar = choice.dest
    sub.metavar = "{" + ",".join(choice.dest for choice in sub._choices_actions) + "}"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rlsr",
        description=DESCRIPTION,
        epilog="`rlsr COMMAND --help` for each command's options; docs/evaluation.md.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for register in _SUBCOMMANDS:
        register(sub)
    _offer_current_names(sub)
    _add_tasks_dir(parser, top=True)
    return parser


USAGE_ERROR_EXIT = 2
VERIFIER_FAILED_EXIT = 1  # too many items without a verdict (rlsr.verifiers.base.VerifierFailure)
INTERRUPTED_EXIT = 130  # 128 + SIGINT


def main(argv: list[str] | None = None) -> int:
    """Run one sub-command. A problem with the user's input (our ``ValueError``s, a dataset that is
    neither local nor on a reachable hub, a missing file) prints ``rlsr: error: <message>`` and
    exits 2 instead of a traceback; Ctrl-C exits 130; ``RLSR_DEBUG=1`` re-raises either."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        load_env_tasks()  # $RLSR_TASKS_PATH, then --tasks-dir (docs/tasks.md)
        load_tasks(getattr(args, "tasks_dir", None) or [])
        result = args.func(args)
    except (ValueError, KeyError, OSError, DatasetUnavailableError) as err:
        if os.environ.get("RLSR_DEBUG"):
            raise
        message = err.args[0] if isinstance(err, KeyError) and err.args else err
        print(f"rlsr: error: {message}", file=sys.stderr)
        return USAGE_ERROR_EXIT
    except VerifierFailure as err:  # the run's own verdict on its verifier: not a usage error
        if os.environ.get("RLSR_DEBUG"):
            raise
        print(f"rlsr: error: {err}", file=sys.stderr)
        return VERIFIER_FAILED_EXIT
    except KeyboardInterrupt:  # a command that saves work reports it itself (rlsr evaluate)
        if os.environ.get("RLSR_DEBUG"):
            raise
        print("rlsr: interrupted", file=sys.stderr)
        return INTERRUPTED_EXIT
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())

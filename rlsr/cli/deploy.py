"""``rlsr deploy``'s flags (what it does: ``rlsr.cli.deploy_cli``)."""

from __future__ import annotations

import argparse

from rlsr.evaluation.run.outputs import add_output_dir, add_training_rows_flag
from rlsr.run.eval_protocol import SCORERS
from rlsr.run.run_layout import DEPLOYMENT_FILE, RUN_FILE, SAMPLES_FILE

__all__ = ["register"]


def register(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "deploy", help="risk-controlled threshold from validation/test samples"
    )
    parser.add_argument(
        "--validation",
        required=True,
        help=f"{SAMPLES_FILE} (or its folder) of the validation split",
    )
    parser.add_argument(
        "--test", required=True, help=f"{SAMPLES_FILE} (or its folder) of the test split"
    )
    parser.add_argument(
        "--deployment-target",
        required=True,
        type=float,
        metavar="ACC",
        help="target accuracy, e.g. 0.75 (as rlsr evaluate's)",
    )
    parser.add_argument(
        "--scorer", default="verbalized", help=f"the confidence ranked: one of {', '.join(SCORERS)}"
    )
    parser.add_argument(
        "--deployment-delta",
        type=float,
        default=0.1,
        metavar="DELTA",
        help="risk level of the Clopper-Pearson rule (as rlsr evaluate's)",
    )
    parser.add_argument(
        "--method-name",
        metavar="NAME",
        help="the table's Method (default: the evaluation folder holding the "
        f"validation samples' {RUN_FILE}, as rlsr evaluate --deployment-target "
        "names it)",
    )
    add_output_dir(
        parser,
        f"DIR/{DEPLOYMENT_FILE} and .md",
        detail=f" ({DEPLOYMENT_FILE}: the threshold file `rlsr serve --threshold` reads)",
    )
    parser.add_argument(
        "--model",
        metavar="PATH",
        help=f"base model the samples came from (default: the evaluation's {RUN_FILE})",
    )
    parser.add_argument(
        "--adapter",
        metavar="PATH",
        help=f"LoRA adapter the samples came from (default: the evaluation's {RUN_FILE})",
    )
    add_training_rows_flag(parser)
    return parser

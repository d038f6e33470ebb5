"""``rlsr report``'s flags (what it does: ``rlsr.cli.report_cli``)."""

from __future__ import annotations

import argparse

from rlsr.evaluation.reports.report_settings import (
    DEFAULT_BOOTSTRAP,
    DEFAULT_TARGET_COVERAGES,
    DEFAULT_TARGET_RISKS,
)
from rlsr.evaluation.run.outputs import REPORT_PREFIX, add_output_dir
from rlsr.run.run_layout import EVAL_DIR, STEP_PREFIX

__all__ = ["register"]


def _add_targets(parser, flag: str, metavar: str, targets, help: str) -> None:
    """A comma list of target levels (risks or coverages); default: ``targets``."""
    parser.add_argument(flag, metavar=metavar, default=",".join(f"{t:g}" for t in targets),
                        help=f"{help}; default %(default)s)")  # fmt: skip


def register(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "report",
        help="paper-style tables and curves over evaluation dirs; --curves: held-out metrics "
        "against the step of training runs; --pools: their training pools per step",
        epilog="example: rlsr report --curves runs/hotpot-rlsr runs/hotpot-rlcr --output-dir "
        f"reports/hotpot (reports/hotpot/{REPORT_PREFIX}_curves.png + .csv: held-out AURC, "
        "accuracy and ECE per step; the best and the final step by AURC and their weights).",
    )
    parser.add_argument(
        "dirs",
        nargs="*",
        help="evaluation output dirs (grouped by basename minus -seedN); with "
        f"--curves: training output dirs (their {EVAL_DIR}/{STEP_PREFIX}N/ "
        "folders)",
    )
    parser.add_argument(
        "--curves",
        action="store_true",
        help="the dirs are training runs with heldout.every > 0: draw their "
        f"held-out metrics against the step (DIR/{REPORT_PREFIX}_curves.png, "
        f"DIR/{REPORT_PREFIX}_curves.csv)",
    )
    parser.add_argument(
        "--pools",
        action="store_true",
        help="the dirs are training runs with pool_log.every > 0: per step of "
        "their pools/ files, accuracy, format rate, AURC and the confidence "
        f"histogram of right and wrong answers (DIR/{REPORT_PREFIX}_pools.csv)",
    )
    parser.add_argument("--label", action="append", default=[], metavar="NAME=DIR1,DIR2")
    add_output_dir(
        parser,
        f"DIR/{REPORT_PREFIX}.md, DIR/{REPORT_PREFIX}_curves.png, ...",
        detail=f" (tables: {REPORT_PREFIX}.md, .csv, {REPORT_PREFIX}_risk_coverage.png, "
        f"{REPORT_PREFIX}_confidence_density.png, {REPORT_PREFIX}_reliability.png; "
        f"--curves: {REPORT_PREFIX}_curves.png and .csv; --pools: "
        f"{REPORT_PREFIX}_pools.csv)",
    )
    parser.add_argument(
        "--family", choices=("hotpot", "bigmath"), help="ID/OOD split by training domain"
    )
    parser.add_argument("--id", dest="id_sets", help="ID tasks (names or group)")
    parser.add_argument("--ood", dest="ood_sets", help="OOD tasks (names or group)")
    parser.add_argument(
        "--gap-methods",
        metavar="NAMES",
        help="comma list: the methods Tab. 2 restricts to common questions (default: all)",
    )
    _add_targets(
        parser,
        "--target-risks",
        "R1,R2",
        DEFAULT_TARGET_RISKS,
        "risks in [0, 1] to report the coverage at (the largest share a confidence "
        "threshold keeps with at most that error rate",
    )
    _add_targets(
        parser,
        "--target-coverages",
        "C1,C2",
        DEFAULT_TARGET_COVERAGES,
        "coverages in (0, 1] to report the risk at (the error rate of the smallest "
        "threshold selection covering it",
    )
    parser.add_argument(
        "--bootstrap",
        type=int,
        default=DEFAULT_BOOTSTRAP,
        metavar="N",
        help="bootstrap resamples of the calibration section's 95%% CIs (default "
        "%(default)s; 0 = off)",
    )
    return parser

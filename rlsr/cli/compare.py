"""``rlsr compare``'s flags (what it does: ``rlsr.cli.compare_cli``)."""

from __future__ import annotations

import argparse

from rlsr.evaluation.comparison.compare_settings import (
    COMPARE_JSON,
    COMPARE_MD,
    COMPARE_PNG,
    EVALUATE,
    HELD_OUT,
    Statistics,
)
from rlsr.run.run_layout import EVAL_DIR, SAMPLES_FILE, STEP_PREFIX

__all__ = ["register"]


def register(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "compare",
        help="compare methods across training seeds: mean and 95%% t-interval over seeds, paired "
        "differences with an exact test and a verdict",
        usage="rlsr compare RUN_OR_FOLDER... --output-dir DIR [options]",
        description="Group training runs by the method and seed their config.yaml records and "
        "compare them per held-out task at the first and last evaluated step: AURC, ranking "
        "gain (error rate - AURC), ECE and accuracy per seed, mean and 95% t-interval over "
        "seeds, and per pair of methods the paired difference on shared seeds with an exact "
        "paired permutation test (Holm-adjusted) and a verdict. Every value is "
        f"recomputed from {SAMPLES_FILE}. Writes DIR/{COMPARE_JSON}, DIR/{COMPARE_MD} and "
        f"DIR/{COMPARE_PNG} (ranking gain against step).",
        epilog="example after slurm/sweep.py: rlsr compare runs --output-dir comparisons/heldout "
        "(held-out histories) or rlsr compare evals --output-dir comparisons/paper (the sweep's "
        "evaluations). Details: docs/compare.md.",
    )
    parser.add_argument(
        "paths",
        nargs="+",
        metavar="RUN_OR_FOLDER",
        help=f"train.py output dirs (their {EVAL_DIR}/{STEP_PREFIX}N history), "
        "`rlsr evaluate` folders of their adapters, or folders holding either (a "
        "sweep's runs/ or evals/)",
    )
    parser.add_argument("--output-dir", required=True, metavar="DIR", help="where the files go")
    parser.add_argument(
        "--use",
        choices=(HELD_OUT, EVALUATE),
        help=f"which evaluations: {HELD_OUT} = train.py's "
        f"{EVAL_DIR}/{STEP_PREFIX}N history, {EVALUATE} = `rlsr evaluate` folders "
        "of the runs' adapters (default: whichever the folders hold; "
        f"{HELD_OUT} when the `rlsr evaluate` folders found are of runs whose "
        "held-out history is there, such as the run summary's RUN/evaluate)",
    )
    parser.add_argument(
        "--reference",
        metavar="METHOD",
        help="differences REFERENCE - each other method (default: every pair A - B by name)",
    )
    parser.add_argument(
        "--margin",
        type=float,
        metavar="DELTA",
        help="margin of equivalence, an absolute difference in the metric's "
        "units (e.g. 0.02): a pair is 'equivalent within ±DELTA' only when its "
        "whole 95%% interval lies inside [-DELTA, DELTA]; without it no pair is "
        "called equivalent",
    )
    parser.add_argument(
        "--resample-questions",
        action="store_true",
        help="the intervals' standard error also resamples the held-out "
        "questions (clusters of the same question text) besides the seeds: what "
        "a new draw of questions would change",
    )
    parser.add_argument(
        "--bootstrap-resamples",
        type=int,
        default=Statistics.n_resamples,
        metavar="N",
        help="resamples of --resample-questions (default %(default)s)",
    )
    parser.add_argument(
        "--bootstrap-seed",
        type=int,
        default=Statistics.seed,
        metavar="S",
        help="seed of --resample-questions and of a Monte Carlo permutation test "
        "(more than 20 nonzero differences) (default %(default)s)",
    )
    return parser

"""``rlsr compare``'s flags (what it does: ``rlsr.evaluation.compare_cli``)."""

from __future__ import annotations

import argparse

from rlsr.evaluation.compare_settings import (
    COMPARE_JSON,
    COMPARE_MD,
    COMPARE_PNG,
    EVALUATE,
    HELD_OUT,
    Bootstrap,
)
from rlsr.run_layout import EVAL_DIR, SAMPLES_FILE, STEP_PREFIX

__all__ = ["register"]


def register(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "compare",
        help="compare methods across training seeds: mean and 95%% CI over seeds, paired "
        "differences",
        usage="rlsr compare RUN_OR_FOLDER... --output-dir DIR [options]",
        description="Group training runs by the method and seed their config.yaml records and "
        "compare them per held-out task at the first and last evaluated step: AURC, ranking "
        "gain (error rate - AURC), ECE and accuracy per seed, mean and 95% bootstrap CI over "
        "seeds, and per pair of methods the paired difference on shared seeds. Every value is "
        f"recomputed from {SAMPLES_FILE}. Writes DIR/{COMPARE_JSON}, DIR/{COMPARE_MD} and "
        f"DIR/{COMPARE_PNG} (ranking gain against step).",
        epilog="example after slurm/sweep.py: rlsr compare runs --output-dir comparisons/heldout "
        "(held-out histories) or rlsr compare evals --output-dir comparisons/paper (the sweep's "
        "evaluations). Details: docs/evaluation.md, 'Compare methods across seeds'.",
    )
    parser.add_argument(
        "paths",
        nargs="+",
        metavar="RUN_OR_FOLDER",
        help=f"train.py output dirs (their {EVAL_DIR}/{STEP_PREFIX}N history), `rlsr evaluate` "
        "folders of "
        "their adapters, or folders holding either (a sweep's runs/ or evals/)",
    )
    parser.add_argument("--output-dir", required=True, metavar="DIR", help="where the files go")
    parser.add_argument(
        "--use",
        choices=(HELD_OUT, EVALUATE),
        help=f"which evaluations: {HELD_OUT} = train.py's {EVAL_DIR}/{STEP_PREFIX}N history, "
        f"{EVALUATE} = "
        "`rlsr evaluate` folders of the runs' adapters (default: whichever the folders hold)",
    )
    parser.add_argument(
        "--reference",
        metavar="METHOD",
        help="differences REFERENCE - each other method (default: every pair A - B by name)",
    )
    parser.add_argument(
        "--bootstrap-resamples",
        type=int,
        default=Bootstrap.n_resamples,
        metavar="N",
        help="resamples of the CI over seeds (default %(default)s)",
    )
    parser.add_argument(
        "--bootstrap-seed",
        type=int,
        default=Bootstrap.seed,
        metavar="S",
        help="seed of the CI's resampling (default %(default)s)",
    )
    return parser

"""What ``rlsr compare`` does (its flags: ``rlsr.cli.compare``): run ``rlsr.evaluation.comparison.compare``
and print its summary."""

from __future__ import annotations

import argparse
import math
import sys

from rlsr.evaluation.comparison.compare import (
    Statistics,
    compare_runs,
    write_comparison,
)

__all__ = ["run_compare"]


def _fixed(value: float) -> str:
    return f"{round(value, 4) + 0.0:.4f}"  # float noise of a zero prints 0.0000


def run_compare(args: argparse.Namespace) -> int:
    if args.bootstrap_resamples < 1:
        raise ValueError(f"--bootstrap-resamples must be >= 1; got {args.bootstrap_resamples}.")
    stats = Statistics(
        margin=args.margin,
        questions=args.resample_questions,
        n_resamples=args.bootstrap_resamples,
        seed=args.bootstrap_seed,
    )
    result = compare_runs(args.paths, use=args.use, reference=args.reference, stats=stats)
    for note in result["notes"]:
        print(f"rlsr compare: note: {note}", file=sys.stderr)
    written = write_comparison(result, args.output_dir)
    for dataset, block in result["datasets"].items():
        print(f"{dataset} at step {block['last_step']} (mean [95% CI] over seeds):")
        for method, entry in block["methods"].items():
            mean, ci = entry["mean"]["ranking_gain"], entry["ci95"]["ranking_gain"]
            interval = "n/a" if math.isnan(ci[0]) else f"{_fixed(ci[0])}, {_fixed(ci[1])}"
            n = len(entry["seeds"])
            print(
                f"  {method}: {n} seed{'s' if n != 1 else ''}, ranking gain {_fixed(mean)} "
                f"[{interval}], AURC {_fixed(entry['mean']['aurc'])}"
            )
        for pair in block["pairs"]:
            if "last" in pair:
                last = pair["last"]
                print(
                    f"  {pair['a']} - {pair['b']}: ranking gain {last['verdict']['ranking_gain']}"
                    f", AURC {last['verdict']['aurc']}, ECE {last['verdict']['ece']}"
                )
    print("wrote " + ", ".join(str(p) for p in written))
    return 0

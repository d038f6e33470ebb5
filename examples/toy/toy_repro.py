#!/usr/bin/env python
"""CPU toy reproduction: what RLVR, RLCR, RLSR and the paper's baselines learn (docs/toy.md).

One command, from a fresh clone, on a 2-core CPU:

    python examples/toy/toy_repro.py                       # 1 seed, every arm (docs/toy.md: wall time)
    python examples/toy/toy_repro.py --seeds 0,1,2         # the 3-seed table
    python examples/toy/toy_repro.py --variant tiers --methods rlvr,rlcr,rlcr-stdnorm,rlsr
    python examples/toy/toy_repro.py --pool-sizes 8,16,32  # ablation: prompts per pool at fixed G
    python examples/toy/toy_repro.py --std-norm            # ablation: scale_rewards=group (std norm)

Per seed: generate the task (examples.toy.task), warm up BASE from scratch (examples.toy.warmup, cached
by config hash), train every arm of ``examples.toy.repro.ARMS`` (RLVR, RLCR, RLCR with std
normalisation, RLSR, plain-AURC RLSR, log-prob RLSR, SFT + self-consistency) from the same BASE
with identical budgets through the real ``train.py recipe=toy method=...``, evaluate BASE and every arm on the held-out split with the
real ``rlsr evaluate`` (greedy), then ``rlsr report`` and a summary over seeds (per row mean and
95 % bootstrap CI of held-out AURC, ranking gain and AURC drop, and the paired difference RLSR -
each arm on the same seeds, ``examples.toy.comparison``; mean +- std of every metric; oracle and
calibrated-ranking AURC) with overlaid risk-coverage curves. Both load the word-level tokenizer through
rlsr.core.tokenization.load_tokenizer (docs/toy.md). Outputs go to ``--output-dir`` (default toy_runs/, gitignored).
The orchestration lives in ``examples.toy.repro``; this file is its command line.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from examples.toy.repro import DEFAULT_ARMS, run  # noqa: E402
from examples.toy.task import VARIANTS  # noqa: E402


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", default="0", help="comma list, e.g. 0,1,2")
    p.add_argument(
        "--variant",
        default="easy",
        choices=VARIANTS,
        help="easy; distractor (a missing fact is not visible from the length); tiers (every fact "
        "present, names with reliability 1.0/0.9/0.8/0.7/0.6: calibration vs ranking, docs/toy.md); "
        "tiers-wide (reliabilities 1.0/0.8/0.6/0.4/0.2, straddling 1/2)",
    )
    p.add_argument("--steps", type=int, default=300, help="GRPO steps per arm")
    p.add_argument("--prompts-per-step", type=int, default=16, help="B: prompts per pool")
    p.add_argument("--generations", type=int, default=8, help="G: completions per prompt")
    p.add_argument("--learning-rate", type=float, default=3e-4)
    p.add_argument(
        "--methods",
        default=",".join(DEFAULT_ARMS),
        help="comma list of arms (rows), from: " + ", ".join(DEFAULT_ARMS),
    )
    p.add_argument(
        "--warmup-steps",
        type=int,
        default=None,
        help="BASE warm-up steps (default per variant: examples.toy.warmup.VARIANT_WARMUP)",
    )
    p.add_argument("--n-heldout", type=int, default=500)
    p.add_argument("--n-train", type=int, default=2000)
    p.add_argument(
        "--pool-sizes",
        default=None,
        help="ablation: comma list of B (prompts per pool) at fixed G; trains RLSR once per B",
    )
    p.add_argument(
        "--std-norm",
        action="store_true",
        help="ablation: also train RLSR with scale_rewards=group (GRPO std normalisation)",
    )
    p.add_argument("--output-dir", default="toy_runs")
    p.add_argument("--cache-dir", default=str(REPO / ".cache" / "rlsr-toy"))
    p.add_argument("--override", action="append", default=[], help="extra train.py override")
    p.add_argument(
        "--jobs",
        type=int,
        default=None,
        help="arms trained at once (default: all arms of a seed; each is one single-threaded "
        "process, so results do not depend on it)",
    )
    p.add_argument("--quiet", action="store_true")
    return p.parse_args(argv)


def main(argv=None) -> int:
    return run(parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())

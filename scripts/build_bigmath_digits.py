"""Rebuild Big-Math Digits from SynthLabsAI/Big-Math-RL-Verified.

    python scripts/build_bigmath_digits.py --out data/bigmath_digits
    python scripts/build_bigmath_digits.py --source /path/to/big_math.parquet --out ...

Keeps numeric answers with LLaMA-8B solve rate in (0, 0.7] (paper Sec. C.4.1), shuffles by
seed and writes a ``save_to_disk`` DatasetDict with ``train`` / ``test``. The published copy
(mehuldamani/big-math-digits) has 30,000 train rows, of which the paper trains 0.5 epoch =
15,000; pass --train-size 30000 to match its size.
"""

from __future__ import annotations

import argparse

from rlsr.data.builders import build_bigmath_digits, load_source


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", default="SynthLabsAI/Big-Math-RL-Verified")
    parser.add_argument("--split", default="train", help="source split")
    parser.add_argument("--out", required=True, help="output folder (save_to_disk)")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--train-size", type=int, default=15000)
    parser.add_argument("--test-size", type=int, default=1000)
    parser.add_argument("--min-solve-rate", type=float, default=0.0, help="exclusive")
    parser.add_argument("--max-solve-rate", type=float, default=0.7, help="inclusive")
    args = parser.parse_args(argv)

    rows = load_source(args.source, split=args.split)
    dd = build_bigmath_digits(
        rows,
        train_size=args.train_size,
        test_size=args.test_size,
        seed=args.seed,
        low=args.min_solve_rate,
        high=args.max_solve_rate,
    )
    dd.save_to_disk(args.out)
    print({k: len(v) for k, v in dd.items()}, "saved to", args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

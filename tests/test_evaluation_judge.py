"""The LLM judge on an OpenAI-compatible server (`--judge-base-url`), against a real HTTP server.

`vllm serve` cannot run here, so `JudgeServer` stands in for it: a stdlib `http.server` on
127.0.0.1 speaking the OpenAI shape (`GET /v1/models`, `POST /v1/chat/completions`), real
sockets, rlsr's real endpoint client. It can refuse (nothing listening), fail (HTTP 500), be slow
(answers after the client's timeout) or be healthy. Each server shuts itself down after
`lifetime_s` even if a test forgets to, and every request the client makes is bounded by a short
timeout and few retries.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from rlsr.cli import main as rlsr_main
from rlsr.evaluation.run.judge import JudgeUnavailableError, check_judge_server, openai_judge_fn
from rlsr.evaluation.run.samples_io import read_samples
from rlsr.verifiers import LLMJudgeVerifier

pytestmark = pytest.mark.timeout(300)


class JudgeServer:
    """A local OpenAI-compatible judge. ``chat``: "ok" | "500" | "slow"; ``models_ok``: whether
    ``GET /v1/models`` answers 200. Replies YES when the gold appears in the predicted answer,
    "maybe" (a real but invalid judge output) when the answer says maybe, else NO."""

    def __init__(self, chat: str = "ok", *, model: str = "judge", slow_s: float = 1.5,
                 lifetime_s: float = 120.0):  # fmt: skip
        self.chat, self.model, self.slow_s = chat, model, slow_s
        self.models_ok = True
        self.posts: list[dict] = []
        self.gets: list[str] = []
        self.auth: list[str | None] = []
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self._timer = threading.Timer(lifetime_s, self.server.shutdown)  # stops itself

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_port}/v1"

    def __enter__(self) -> JudgeServer:
        threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()
        self._timer.start()
        return self

    def __exit__(self, *exc) -> None:
        self._timer.cancel()
        self.server.shutdown()
        self.server.server_close()

    def _handler(self):
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def _send(self, status: int, payload: dict, headers: dict | None = None) -> None:
                data = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for key, value in (headers or {}).items():
                        self.send_header(key, value)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout): expected in the slow case

            def do_GET(self):  # noqa: N802 (http.server API)
                outer.gets.append(self.path)
                if self.path != "/v1/models" or not outer.models_ok:
                    return self._send(500, {"error": {"message": "down"}})
                models = [{"id": outer.model, "object": "model", "created": 0, "owned_by": "t"}]
                self._send(200, {"object": "list", "data": models})

            def do_POST(self):  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.posts.append(body)
                outer.auth.append(self.headers.get("Authorization"))
                if outer.chat == "500":  # retry-after-ms keeps the client's backoff short
                    return self._send(500, {"error": {"message": "boom"}}, {"retry-after-ms": "10"})
                if outer.chat == "slow":
                    time.sleep(outer.slow_s)
                prompt = body["messages"][0]["content"]
                gold = prompt.split("Ground Truth Answer: ")[1].split(" Predicted Answer:")[0]
                predicted = prompt.split("Predicted Answer: ")[1].lower()
                reply = (
                    "maybe"
                    if "maybe" in predicted
                    else "YES"
                    if gold.lower() in predicted
                    else "NO"
                )
                message = {"role": "assistant", "content": reply}
                self._send(200, {
                    "id": "c", "object": "chat.completion", "created": 0, "model": outer.model,
                    "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                })  # fmt: skip

            def log_message(self, *args):
                pass

        return Handler


def _refused_url() -> str:
    """A 127.0.0.1 URL where nothing listens (a port just bound and released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def _verify(fn, answers):
    return LLMJudgeVerifier(fn).verify_batch(
        answers, ["Paris"] * len(answers), questions=["Capital of France?"] * len(answers)
    )


# --------------------------------------------------------------------------- the client


def test_healthy_server_gives_verdicts_and_sends_the_key(monkeypatch):
    monkeypatch.setenv("RLSR_TEST_KEY", "secret")
    with JudgeServer() as server:
        check_judge_server(server.url, "judge", api_key_env="RLSR_TEST_KEY")
        fn = openai_judge_fn(server.url, "judge", api_key_env="RLSR_TEST_KEY", timeout_s=5)
        result = _verify(fn, ["Paris", "Rome", "maybe Paris", None])
    assert result.correct.tolist() == [True, False, False, False]
    assert list(result.status) == ["correct", "incorrect", "unjudged", "missing"]
    assert server.gets == ["/v1/models"] and len(server.posts) == 3  # no call for None
    body = server.posts[0]
    assert body["model"] == "judge" and body["temperature"] == 0.0 and body["max_tokens"] == 8
    assert set(server.auth) == {"Bearer secret"}
    with pytest.raises(ValueError, match="http"):
        openai_judge_fn("localhost:8000", "m")


def test_refused_connection_fails_the_health_check_and_the_call(monkeypatch):
    """A judge that refuses connections fails the health check and the call, each after the
    tries it was given (max_retries=1: two connection attempts each, counted where the client
    sends each attempt), never retrying without end; each attempt carries timeout_s."""
    import httpx

    attempts = []
    send = httpx.AsyncClient.send

    async def counted(self, request, *args, **kwargs):
        attempts.append((request.url.path, request.extensions.get("timeout", {}).get("connect")))
        return await send(self, request, *args, **kwargs)

    monkeypatch.setattr(httpx.AsyncClient, "send", counted)
    url = _refused_url()
    with pytest.raises(JudgeUnavailableError, match=f"judge server {url} is not answering"):
        check_judge_server(url, "judge", timeout_s=2, max_retries=1)
    assert attempts == [("/v1/models", 2)] * 2
    fn = openai_judge_fn(url, "judge", timeout_s=2, max_retries=1)
    with pytest.raises(JudgeUnavailableError, match=f"judge server {url} failed: cannot connect"):
        _verify(fn, ["Paris"])
    assert attempts[2:] == [("/v1/chat/completions", 2)] * 2


def test_http_500_is_retried_then_fails_without_a_verdict():
    with JudgeServer(chat="500") as server:
        fn = openai_judge_fn(server.url, "judge", timeout_s=5, max_retries=2)
        with pytest.raises(JudgeUnavailableError, match="HTTP 500 after 2 retries"):
            _verify(fn, ["Paris"])
        server.models_ok = False
        with pytest.raises(JudgeUnavailableError, match="HTTP 500"):
            check_judge_server(server.url, "judge", max_retries=1)
    assert len(server.posts) == 3  # the first try and two retries


def test_slow_server_times_out_then_fails():
    with JudgeServer(chat="slow", slow_s=1.5) as server:
        fn = openai_judge_fn(server.url, "judge", timeout_s=0.3, max_retries=1)
        with pytest.raises(JudgeUnavailableError, match="no answer within the timeout"):
            _verify(fn, ["Paris"])
    assert len(server.posts) == 2


def test_health_check_names_a_model_the_server_does_not_serve():
    with JudgeServer(model="other") as server:
        with pytest.raises(ValueError, match="does not serve --judge-model 'judge'.*'other'"):
            check_judge_server(server.url, "judge")


# --------------------------------------------------------------------------- rlsr evaluate


def _argv(model_dir, out, url, *extra):
    return ["evaluate", "--model", str(model_dir), "--tasks", "tiny", "--output-dir", str(out),
            "--limit", "4", "--batch-size", "2", "--verifier", "tiny=llm_judge",
            "--judge-model", "judge", "--judge-base-url", url, "--judge-timeout", "2",
            "--judge-max-retries", "1", "--max-new-tokens", "8", "--fallback-max-new-tokens", "4",
            "--bootstrap", "0", "--no-progress", *extra]  # fmt: skip


def test_evaluate_fails_fast_on_an_unreachable_judge(tiny_model_dir, tmp_path, capsys):
    """An unreachable judge stops `rlsr evaluate` before it starts, in one line, writing
    nothing. Catches every sample stored as verify_status "invalid" (accuracy 0, exit 0),
    which a rerun with a working judge would then skip."""
    url, out = _refused_url(), tmp_path / "ev"
    assert rlsr_main(_argv(tiny_model_dir, out, url)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"rlsr: error: judge server {url} is not answering")
    assert not out.exists()  # nothing written: the run never started


def test_judge_failing_mid_run_saves_no_verdict_and_a_rerun_judges(tiny_model_dir, tmp_path,
                                                                    capsys):  # fmt: skip
    out = tmp_path / "ev"
    with JudgeServer(chat="500") as server:  # healthy /models, failing chat completions
        assert rlsr_main(_argv(tiny_model_dir, out, server.url)) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"judge server {server.url} failed: HTTP 500" in err[0]
        assert "rerun the same command to resume" in err[0]
        failed_posts = len(server.posts)
        saved = read_samples(out / "tiny" / "samples.jsonl")
        # only batches that needed no judge call (no answer extracted) may have been saved
        assert failed_posts > 0 and all(r["verify_status"] == "missing" for r in saved)
        if not saved:
            assert not out.exists()  # a run that saved nothing leaves no folder behind
        server.chat = "ok"
        assert rlsr_main(_argv(tiny_model_dir, out, server.url)) == 0
    records = read_samples(out / "tiny" / "samples.jsonl")
    assert [r["id"] for r in records] == [f"tiny-test-{i}" for i in range(4)]
    answered = [r for r in records if r["answer"] is not None]
    assert answered, "the tiny model's fallbacks should extract some answers"
    for r in answered:
        assert r["verify_status"] in {"correct", "incorrect"}
        assert r["judge_output"] == ("YES" if r["correct"] else "NO")
    assert len(server.posts) - failed_posts == len(answered)  # the rerun judged each answer

"""``rlsr serve`` for operators: API keys denied by default on every
route of the app, Prometheus ``/metrics`` read back with prometheus_client's own parser, a bound
on queued chat requests answered 429 + Retry-After, request ids in a header and in the decision
log, CORS only when asked.

Real: the FastAPI app under uvicorn on loopback, httpx, the tiny model's tokenizer, the parser.
The upstream ``vllm serve`` is a TEST DOUBLE AT THE BOUNDARY (vLLM cannot run in this venv): a
small FastAPI app answering ``/v1/completions`` with one well-formed completion, which can hold
its answers until the test releases them (to fill the queue deterministically, without timing).
"""

import argparse
import asyncio
import json
import queue
import threading
import time

import httpx
import pytest
from test_serving import running  # uvicorn on a free loopback port, in a thread

from rlsr.cli.serve import register
from rlsr.cli.serve_cli import operator_options
from rlsr.serving.app import create_app
from rlsr.serving.decision_log import DecisionLog, read_decision_log
from rlsr.serving.engine import upstream_engine
from rlsr.serving.policy import ServeSettings

pytestmark = pytest.mark.timeout(300)

COMPLETION = (
    "<think>t</think><answer>Paris</answer><analysis>x</analysis><confidence>{c}</confidence>"
)
KEYS = ("sk-first-key", "sk-second-key")
SETTINGS = ServeSettings(
    tau=0.5, rule="plain", model_name="tiny", system_prompt="simple", max_new_tokens=32,
    fallback_max_new_tokens=8,
)  # fmt: skip


class HoldingUpstream:
    """TEST DOUBLE of ``vllm serve``: one scripted completion; ``hold`` makes answers wait."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.release.set()
        self.waiting = 0
        self.aborted = 0
        self.loop = None

    def app(self):
        from fastapi import FastAPI, Request, Response

        app = FastAPI()

        @app.post("/v1/completions")
        async def completions(request: Request):
            body = await request.json()
            # the confidence is the prompt's length mod 10 tenths: the tests pick questions whose
            # rendered prompts give 0.x above or below tau (checked in the metrics test)
            confidence = self.confidence_of(body["prompt"])
            self.loop = asyncio.get_running_loop()
            self.waiting += 1
            try:  # as vllm serve does: a client (rlsr serve) that goes away aborts the request
                released = asyncio.ensure_future(self.release.wait())
                gone = asyncio.ensure_future(_client_gone(request))
                await asyncio.wait((released, gone), return_when=asyncio.FIRST_COMPLETED)
                if not released.done():
                    released.cancel()
                    self.aborted += 1
                    return Response(status_code=499)
                gone.cancel()
            finally:
                self.waiting -= 1
            return {
                "id": "cmpl-1", "object": "text_completion", "created": 0, "model": body["model"],
                "choices": [{"index": 0, "text": COMPLETION.format(c=confidence),
                             "finish_reason": "stop",
                             "logprobs": None}],
                "usage": {"prompt_tokens": len(body["prompt"]), "completion_tokens": 5,
                          "total_tokens": len(body["prompt"]) + 5},
            }  # fmt: skip

        @app.get("/v1/models")
        async def models():
            return {"object": "list", "data": [{"id": "up-model", "object": "model"}]}

        return app

    @staticmethod
    def confidence_of(prompt_ids) -> str:
        return "0.9" if len(prompt_ids) % 2 == 0 else "0.2"

    def hold(self) -> None:
        self.release = asyncio.Event()  # created before any request of the held phase arrives

    def let_go(self) -> None:
        self.loop.call_soon_threadsafe(self.release.set)


async def _client_gone(request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass


@pytest.fixture(scope="module")
def upstream():
    fake = HoldingUpstream()
    with running(fake.app()) as url:
        fake.url = url
        yield fake


def _app(upstream, tiny_model_dir, engine_timeout=30, **operator):
    engine = upstream_engine(upstream.url, "up-model", str(tiny_model_dir), timeout=engine_timeout)
    return create_app(engine, SETTINGS, **operator)


def _chat(url, headers=None, timeout=30, question="capital?"):
    body = {"model": "tiny", "messages": [{"role": "user", "content": question}]}
    return httpx.post(f"{url}/v1/chat/completions", json=body, headers=headers, timeout=timeout)


def _route_calls(app):
    """(method, path) of every route the app object has, plus one path it does not have: a route
    added later is walked too (deny by default)."""
    calls = [("GET", "/no/such/route"), ("POST", "/v1/completions")]
    for route in app.routes:
        path = getattr(route, "path", None)
        for method in sorted(getattr(route, "methods", None) or ()):
            if path and method != "HEAD":
                calls.append((method, path.replace("{", "").replace("}", "")))
    return calls


def test_api_keys_deny_every_route_but_health(upstream, tiny_model_dir, tmp_path):
    log_path = tmp_path / "decisions.jsonl"
    app = _app(upstream, tiny_model_dir, api_keys=KEYS, decision_log=DecisionLog(log_path))
    calls = _route_calls(app)
    assert ("POST", "/v1/chat/completions") in calls and ("GET", "/v1/models") in calls
    with running(app) as url:
        for method, path in calls:
            for headers in ({}, {"Authorization": "Bearer sk-wrong"},
                            {"Authorization": f"Basic {KEYS[0]}"}, {"Authorization": "Bearer"}):  # fmt: skip
                resp = httpx.request(method, url + path, headers=headers, json={}, timeout=30)
                if path == "/health":
                    assert resp.status_code == 200, (method, path, resp.text)
                    continue
                assert resp.status_code == 401, (method, path, headers, resp.status_code)
                err = resp.json()["error"]
                assert (
                    err["code"] == "invalid_api_key" and "Authorization: Bearer" in err["message"]
                )
                assert not any(k in resp.text for k in KEYS)
                assert resp.headers["www-authenticate"] == "Bearer"
        for key in KEYS:  # every configured key is accepted
            ok = _chat(url, {"Authorization": f"Bearer {key}"})
            assert ok.status_code == 200, ok.text
            assert httpx.get(
                url + "/v1/models", headers={"Authorization": f"Bearer {key}"}
            ).is_success
    assert not any(k in log_path.read_text() for k in KEYS)


def test_no_keys_configured_means_no_authentication(upstream, tiny_model_dir):
    with running(_app(upstream, tiny_model_dir)) as url:
        assert _chat(url).status_code == 200


def test_queue_bound_answers_429_with_retry_after_then_recovers(upstream, tiny_model_dir):
    app = _app(upstream, tiny_model_dir, max_queued_requests=2)
    with running(app) as url:
        upstream.hold()
        held = []
        threads = [
            threading.Thread(target=lambda: held.append(_chat(url, timeout=60))) for _ in range(2)
        ]
        for t in threads:
            t.start()
        while upstream.waiting < 2:  # both accepted and waiting on the engine
            assert all(t.is_alive() for t in threads), f"a held request returned: {held}"
            time.sleep(0.02)
        for _ in range(3):
            busy = _chat(url)
            assert busy.status_code == 429
            assert busy.headers["retry-after"] == "1"
            assert busy.json()["error"]["code"] == "queue_full"
            assert "--max-queued-requests" in busy.json()["error"]["message"]
        assert httpx.get(url + "/health").status_code == 200  # not counted against the bound
        upstream.let_go()
        for t in threads:
            t.join()  # each request has its client's 60 s timeout; the module's guard above it
        assert [r.status_code for r in held] == [200, 200]
        assert _chat(url).status_code == 200  # the bound is free again


def test_request_ids_in_header_and_decision_log(upstream, tiny_model_dir, tmp_path):
    log_path = tmp_path / "decisions.jsonl"
    app = _app(upstream, tiny_model_dir, api_keys=KEYS[:1], decision_log=DecisionLog(log_path))
    auth = {"Authorization": f"Bearer {KEYS[0]}"}
    with running(app) as url:
        mine = _chat(url, {**auth, "X-Request-Id": "client-id.42"})
        made = _chat(url, auth)
        bad = _chat(url, {**auth, "X-Request-Id": "has spaces"})
        denied = _chat(url, {"X-Request-Id": "denied-1"})
        missing = httpx.get(url + "/nope", headers=auth)
    assert mine.headers["x-request-id"] == "client-id.42"
    assert (
        made.headers["x-request-id"].startswith("req-") and len(made.headers["x-request-id"]) == 36
    )
    assert bad.headers["x-request-id"].startswith("req-")
    assert denied.status_code == 401 and denied.headers["x-request-id"] == "denied-1"
    assert missing.status_code == 404 and missing.headers["x-request-id"].startswith("req-")
    records = read_decision_log(log_path)
    assert [r["request_id"] for r in records] == [
        "client-id.42",
        made.headers["x-request-id"],
        bad.headers["x-request-id"],
    ]


def test_cors_only_when_asked_and_preflight_needs_no_key(upstream, tiny_model_dir):
    preflight = {"Origin": "https://ui.example", "Access-Control-Request-Method": "POST",
                 "Access-Control-Request-Headers": "authorization,content-type"}  # fmt: skip
    with running(_app(upstream, tiny_model_dir, api_keys=KEYS[:1])) as url:
        resp = httpx.options(url + "/v1/chat/completions", headers=preflight)
        assert "access-control-allow-origin" not in resp.headers
    args = _serve_args("--allowed-origins", "https://ui.example")
    app = _app(upstream, tiny_model_dir, **{**operator_options(args, {}), "api_keys": KEYS[:1]})
    with running(app) as url:
        resp = httpx.options(url + "/v1/chat/completions", headers=preflight)
        assert resp.status_code == 200
        assert resp.headers["access-control-allow-origin"] == "https://ui.example"
        ok = _chat(url, {"Authorization": f"Bearer {KEYS[0]}", "Origin": "https://ui.example"})
        assert ok.status_code == 200
        assert ok.headers["access-control-allow-origin"] == "https://ui.example"
        assert "x-request-id" in ok.headers["access-control-expose-headers"].lower()


def _serve_args(*argv):
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    return parser.parse_args(["serve", "--model", "m", "--tau", "0.5", *argv])


def test_operator_flags_and_their_errors():
    opts = operator_options(_serve_args(), {})
    assert opts == {"api_keys": [], "max_queued_requests": 1024, "cors": None,
                    "max_request_bytes": 8 * 1024 * 1024,
                    "max_message_chars": 1_000_000}  # fmt: skip
    opts = operator_options(_serve_args("--api-key", "a", "--max-queued-requests", "0",
                                        "--max-request-bytes", "0", "--max-message-chars", "0"),
                            {"RLSR_API_KEY": "b"})  # fmt: skip
    assert opts["api_keys"] == ["a", "b"] and opts["max_queued_requests"] is None
    assert opts["max_request_bytes"] is None and opts["max_message_chars"] is None
    with pytest.raises(ValueError, match="--max-request-bytes -1"):
        operator_options(_serve_args("--max-request-bytes", "-1"), {})
    with pytest.raises(ValueError, match="--max-message-chars -1"):
        operator_options(_serve_args("--max-message-chars", "-1"), {})
    with pytest.raises(ValueError, match="must not be empty"):
        operator_options(_serve_args("--api-key", " "), {})
    with pytest.raises(ValueError, match="--max-queued-requests -1"):
        operator_options(_serve_args("--max-queued-requests", "-1"), {})
    with pytest.raises(ValueError, match="need --allowed-origins"):
        operator_options(_serve_args("--allow-credentials"), {})
    assert json.dumps(operator_options(_serve_args("--allowed-origins", "*"), {})["cors"])


def _question_with_confidence(tokenizer, want: str) -> str:
    """A question whose rendered prompt makes the upstream double answer with ``want``."""
    from rlsr.serving.respond import render_question

    for k in range(20):
        question = "capital" + "?" * k
        prompt = render_question(tokenizer, question, SETTINGS.system_prompt)
        ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        if HoldingUpstream.confidence_of(ids) == want:
            return question
    raise AssertionError(f"no question gives confidence {want}")


def test_metrics_count_a_known_mix(upstream, tiny_model_dir):
    """2 answered, 1 abstained, 1 refused parameter, 1 wrong key: the exposition, parsed by
    prometheus_client's own parser, says exactly that; /metrics needs the key too."""
    from prometheus_client.parser import text_string_to_metric_families

    from rlsr.core.tokenization import load_tokenizer

    tokenizer = load_tokenizer(tiny_model_dir)
    sure = _question_with_confidence(tokenizer, "0.9")
    unsure = _question_with_confidence(tokenizer, "0.2")
    app = _app(upstream, tiny_model_dir, api_keys=KEYS[:1], max_queued_requests=8,
               certified_coverage=0.62)  # fmt: skip
    auth = {"Authorization": f"Bearer {KEYS[0]}"}
    with running(app) as url:
        assert httpx.get(url + "/metrics").status_code == 401
        for question in (sure, sure, unsure):
            assert _chat(url, auth, question=question).status_code == 200
        body = {"model": "tiny", "messages": [{"role": "user", "content": sure}], "stop": "\n"}
        assert httpx.post(url + "/v1/chat/completions", json=body, headers=auth).status_code == 400
        assert _chat(url, {"Authorization": "Bearer nope"}).status_code == 401
        resp = httpx.get(url + "/metrics", headers=auth)
    assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/plain")
    samples = {}
    for family in text_string_to_metric_families(resp.text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    assert samples[("rlsr_requests_total", (("outcome", "answered"),))] == 2
    assert samples[("rlsr_requests_total", (("outcome", "abstained"),))] == 1
    assert samples[("rlsr_requests_total", (("outcome", "error"),))] == 2
    assert samples[("rlsr_answer_rate", ())] == pytest.approx(2 / 3)
    assert samples[("rlsr_certified_coverage", ())] == 0.62
    assert samples[("rlsr_tau", ())] == 0.5
    assert samples[("rlsr_requests_in_flight", ())] == 0
    assert samples[("rlsr_max_queued_requests", ())] == 8
    assert samples[("rlsr_confidence_count", ())] == 3
    assert samples[("rlsr_confidence_bucket", (("le", "0.2"),))] == 1
    assert samples[("rlsr_confidence_bucket", (("le", "0.8"),))] == 1
    assert samples[("rlsr_confidence_bucket", (("le", "0.9"),))] == 3
    assert samples[("rlsr_confidence_sum", ())] == pytest.approx(2.0)
    assert samples[("rlsr_request_latency_seconds_count", ())] == 3
    assert not any(k in resp.text for k in KEYS)


def test_a_client_that_goes_away_aborts_its_engine_request(upstream, tiny_model_dir):
    """As vLLM's own test: many requests whose clients give up, then the engine holds none of
    them and a new request is answered. The clients here close their sockets once their requests
    are waiting on the (held) upstream, so the abort is what is tested, not a race."""
    import socket

    # the engine's own timeout (600 s) is past the module's hang guard (pytest-timeout, 300 s):
    # only an abort frees the held requests before the guard fails the test
    app = _app(upstream, tiny_model_dir, engine_timeout=600, max_queued_requests=64)
    body = json.dumps({"model": "tiny", "messages": [{"role": "user", "content": "q?"}]}).encode()
    raw = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: rlsr\r\n"
           b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)) + body  # fmt: skip
    with running(app) as url:
        host, port = url.removeprefix("http://").split(":")
        upstream.hold()
        aborted = upstream.aborted
        clients = []
        for _ in range(20):
            sock = socket.create_connection((host, int(port)), timeout=30)
            sock.sendall(raw)
            clients.append(sock)
        # until the events happen; a request that never arrives or is never aborted hangs
        # here until the module's pytest-timeout guard fails the test
        while upstream.waiting < 20:
            time.sleep(0.02)
        for sock in clients:
            sock.close()
        while upstream.waiting:  # each abandoned request aborted upstream
            time.sleep(0.02)
        assert upstream.aborted - aborted == 20
        upstream.let_go()
        assert _chat(url, timeout=30).status_code == 200  # answered, nothing in front of it
        text = httpx.get(url + "/metrics").text
    assert 'rlsr_requests_total{outcome="cancelled"} 20.0' in text
    assert "rlsr_requests_in_flight 0.0" in text
    assert "rlsr_engine_requests 0.0" in text


def test_hostile_bodies_are_400_or_415_counted_and_health_takes_head(
    upstream, tiny_model_dir, tmp_path
):
    """Bodies that a careless server answers 500 (nesting, a surrogate parameter name, an
    integer of 5,000 digits), 200 (text/plain) or 405 (HEAD /health, POST /health without a key):
    every bad body is a client error with a UTF-8 body, every error of the chat route
    is counted on /metrics whatever answered it (the router's 405, the middleware's 401, the size
    bounds, a 500 from an exception that escapes the handler: errors counted == errors sent), a
    non-JSON content type is refused before any compute (vllm serve's
    test_request_wrong_content_type), HEAD /health is a probe and POST /health needs the key like
    every other non-probe request."""
    from prometheus_client.parser import text_string_to_metric_families

    auth = {"Authorization": f"Bearer {KEYS[0]}"}
    json_headers = {**auth, "Content-Type": "application/json"}
    ok = json.dumps({"model": "tiny", "messages": [{"role": "user", "content": "capital?"}]})
    deep = "[" * 5000 + "]" * 5000
    name = json.dumps({"model": "tiny", "messages": [{"role": "user", "content": "q"}]})
    surrogate_name = name[:-1] + ', "\\ud800x": 1}'
    surrogate_value = json.dumps({"model": "tiny\ud800", "messages": []}).replace(
        "\\ud800", "\\ud800"
    )
    sent = {  # body, headers -> status
        "deep nesting": (deep, json_headers, 400),
        "deep object": ('{"a":' * 5000 + "1" + "}" * 5000, json_headers, 400),
        "surrogate name": (surrogate_name, json_headers, 400),
        "surrogate value": (surrogate_value, json_headers, 404),  # an unknown model, quoted
        "not an object": ("[1, 2]", json_headers, 400),
        "5,000 digits": (name[:-1] + ', "seed": ' + "1" * 5000 + "}", json_headers, 400),
        "over the size bound": (
            ok[:-1] + ', "metadata": {"x": "' + "y" * 40_000 + '"}}',
            json_headers,
            413,
        ),
        "message over its bound": (ok.replace("capital?", "q" * 2001), json_headers, 400),
        "wrong key": (
            ok,
            {"Authorization": "Bearer nope", "Content-Type": "application/json"},
            401,
        ),
        "text/plain": (ok, {**auth, "Content-Type": "text/plain"}, 415),
        "form": (ok, {**auth, "Content-Type": "application/x-www-form-urlencoded"}, 415),
        "no content type": (ok.encode(), auth, 415),
    }
    log = DecisionLog(tmp_path / "decisions.jsonl")
    app = _app(upstream, tiny_model_dir, api_keys=KEYS[:1], max_request_bytes=40_000,
               max_message_chars=2000, decision_log=log)  # fmt: skip
    with running(app) as url:
        for case, (body, headers, status) in sent.items():
            resp = httpx.post(url + "/v1/chat/completions", content=body, headers=headers)
            assert resp.status_code == status, (case, resp.status_code, resp.text[:200])
            err = resp.json()["error"]  # the body decodes as UTF-8 JSON
            assert err["message"], case
        assert httpx.get(url + "/v1/chat/completions", headers=auth).status_code == 405
        good = httpx.post(url + "/v1/chat/completions", content=ok, headers=json_headers)
        assert good.status_code == 200, good.text
        charset = {**auth, "Content-Type": "application/json; charset=utf-8"}
        assert httpx.post(url + "/v1/chat/completions", content=ok, headers=charset).is_success
        log.close()  # the next decision cannot be logged: an exception escapes the handler
        assert httpx.post(url + "/v1/chat/completions", content=ok,
                          headers=json_headers).status_code == 500  # fmt: skip
        head = httpx.head(url + "/health")
        assert head.status_code == 200 and head.text == ""
        assert httpx.post(url + "/health").status_code == 401
        assert httpx.post(url + "/health", headers=auth).status_code == 405
        resp = httpx.get(url + "/metrics", headers=auth)
    errors = [
        s.value
        for f in text_string_to_metric_families(resp.text)
        for s in f.samples
        if s.name == "rlsr_requests_total" and s.labels == {"outcome": "error"}
    ]
    assert errors == [len(sent) + 2]  # + the 405 and the 500


def test_a_body_past_the_size_bound_is_413_before_parsing_and_health_still_answers(
    upstream, tiny_model_dir
):
    """The request size bound: past --max-request-bytes (default 8 MiB) a body is 413 from
    Content-Length before anything is read, and a chunked body (no Content-Length) is cut as
    soon as it passes the bound. Catches a 50 MB user message or `metadata` parsed, rendered and
    tokenised (~109 s and +1.65 GB on a 2-core machine, /health frozen meanwhile) before a 400."""
    from rlsr.cli.serve import DEFAULT_MAX_REQUEST_BYTES

    big = "word " * (10 * 1024 * 1024)  # 50 MiB
    app = _app(upstream, tiny_model_dir, max_request_bytes=DEFAULT_MAX_REQUEST_BYTES)
    bodies = {
        "message": {"model": "tiny", "messages": [{"role": "user", "content": big}]},
        "metadata": {"model": "tiny", "messages": [{"role": "user", "content": "q"}],
                     "metadata": {"x": big}},
    }  # fmt: skip
    with running(app) as url:
        for case, body in bodies.items():
            resp = httpx.post(url + "/v1/chat/completions", json=body, timeout=60)
            assert resp.status_code == 413, (case, resp.status_code)
            assert resp.json()["error"]["code"] == "request_too_large"
            assert httpx.get(url + "/health", timeout=10).status_code == 200

        def chunks():  # no Content-Length: read until the bound is passed
            for _ in range(10):
                yield b" " * (1024 * 1024)
            yield json.dumps(bodies["message"]).encode()

        resp = httpx.post(url + "/v1/chat/completions", content=chunks(), timeout=60,
                          headers={"Content-Type": "application/json"})  # fmt: skip
        assert resp.status_code == 413
        assert _chat(url).status_code == 200  # an ordinary request is unaffected


class HoldingTokenizer:
    """The real tokenizer, except that rendering or encoding a text that holds ``MARK`` waits in
    its thread until the test lets it go (to catch the server mid-tokenisation without timing)."""

    MARK = "HOLD-ME"

    def __init__(self, tokenizer) -> None:
        self._tokenizer = tokenizer
        self.held = queue.Queue()  # (what, threading.Event) of each held call
        self.seen = []  # what was called with MARK, in order

    def __getattr__(self, name):
        return getattr(self._tokenizer, name)

    def _hold(self, what: str, text: str) -> None:
        if self.MARK not in text:
            return
        self.seen.append(what)
        go = threading.Event()
        self.held.put((what, go))
        if not go.wait(60):
            raise TimeoutError(f"{what} was never let go")

    def apply_chat_template(self, messages, **kw):
        self._hold("render", json.dumps(messages))
        return self._tokenizer.apply_chat_template(messages, **kw)

    def __call__(self, text, **kw):
        self._hold("encode", text)
        return self._tokenizer(text, **kw)


def test_rendering_and_tokenising_run_off_the_event_loop(upstream, tiny_model_dir):
    """Rendering and tokenising run off the event loop (on it, a 50 MB message blocks /health
    for minutes). Here the render and the encoding of one request are held in the tokenizer's
    thread until the test has seen /health, /metrics and /v1/models answer; on the event loop
    they would block those answers (the test then fails on its httpx timeout)."""
    engine = upstream_engine(upstream.url, "up-model", str(tiny_model_dir), timeout=30)
    tokenizer = engine.tokenizer = HoldingTokenizer(engine.tokenizer)
    app = create_app(engine, SETTINGS, api_keys=KEYS[:1])
    auth = {"Authorization": f"Bearer {KEYS[0]}"}
    result = []
    with running(app) as url:
        asking = threading.Thread(
            target=lambda: result.append(_chat(url, auth, question=f"{tokenizer.MARK} capital?"))
        )
        asking.start()
        try:
            for step in ("render", "encode"):
                what, go = tokenizer.held.get(timeout=60)
                assert what == step
                try:
                    assert httpx.get(url + "/health", timeout=10).status_code == 200
                    metrics = httpx.get(url + "/metrics", headers=auth, timeout=10)
                    assert "rlsr_requests_in_flight 1.0" in metrics.text
                    assert httpx.get(url + "/v1/models", headers=auth, timeout=10).is_success
                finally:
                    go.set()
        finally:
            while not tokenizer.held.empty():  # a failure above must not leave the server held
                tokenizer.held.get()[1].set()
            asking.join()  # the request has its client's timeout
    assert [r.status_code for r in result] == [200]
    assert tokenizer.seen == ["render", "encode"]


def test_a_message_past_its_bound_is_400_before_it_is_rendered(upstream, tiny_model_dir):
    """The per-message bound: a message longer than --max-message-chars is refused
    (400, message_too_long, naming the message) before the tokenizer sees it; one at the bound
    is answered; a system message is bounded too (it is parsed, though replaced)."""
    engine = upstream_engine(upstream.url, "up-model", str(tiny_model_dir), timeout=30)
    tokenizer = engine.tokenizer = HoldingTokenizer(engine.tokenizer)
    app = create_app(engine, SETTINGS, max_message_chars=500)
    mark = tokenizer.MARK
    with running(app) as url:
        for messages in (
            [{"role": "user", "content": mark + "q" * 500}],
            [{"role": "system", "content": "s" * 501}, {"role": "user", "content": mark}],
            [{"role": "user", "content": [{"type": "text", "text": mark},
                                          {"type": "text", "text": "q" * 500}]}],
        ):  # fmt: skip
            body = {"model": "tiny", "messages": messages}
            resp = httpx.post(url + "/v1/chat/completions", json=body, timeout=30)
            assert resp.status_code == 400, resp.text
            err = resp.json()["error"]
            assert err["code"] == "message_too_long" and err["param"].endswith(".content")
            assert "--max-message-chars" in err["message"]
        assert tokenizer.seen == []  # none of them was rendered or tokenised
        assert _chat(url, question="q" * 500).status_code == 200

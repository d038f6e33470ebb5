"""The server-mode held-out evaluation is bounded in time (rlsr.generation.server_backend): the
other processes wait for the main process in a collective under ``grpo.ddp_timeout``, so a server
that stops answering must fail the evaluation (recorded; training goes on) instead of hanging.

The server here is a stand-in at the HTTP boundary: a tiny local server that accepts the
connection and never answers (it holds every request until the test ends), so a call that
returns did so because the client gave up on its own deadline; the session records the timeout
each attempt was sent with. The real vLLM server cannot be made to hang
deterministically, and TRL's ``VLLMClient`` cannot be built without vLLM installed, so the
client is a ``requests.Session`` mounted with urllib3's ``Retry`` as TRL mounts it (fewer
retries, no backoff, to keep the test short; ``_retry_bound`` reads whatever is mounted).
"""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler
from types import SimpleNamespace

import pytest
import requests
from endpoint_standin import local_http_server
from requests.adapters import HTTPAdapter
from urllib3.util.retry import Retry

from rlsr.generation.backends import Sampling
from rlsr.generation.server_backend import (
    ServerBackend,
    _retry_bound,
    attempt_timeout,
    server_eval_bound,
)

# Hang guard for the tests below: a client that ignored its deadline would wait on the silent
# stand-in until this fires (the tests assert the deadline, not how long they took).
HANG_GUARD_S = 120


@pytest.fixture
def silent_server():
    """``(url, hits)``: a server that records each request's path and never answers it."""
    release = threading.Event()
    hits = []

    class Handler(BaseHTTPRequestHandler):
        def _sleep(self):
            hits.append(self.path)
            release.wait()  # until the test ends: no answer the client could wait for

        do_GET = do_POST = _sleep

        def log_message(self, *args):
            pass

    with local_http_server(Handler) as url:
        yield url, hits
        release.set()


class _RecordingSession(requests.Session):
    """``requests.Session`` that records the timeout each request is sent with."""

    def __init__(self):
        super().__init__()
        self.timeouts = []

    def request(self, method, url, *args, **kwargs):
        self.timeouts.append(kwargs.get("timeout"))
        return super().request(method, url, *args, **kwargs)


def _session(retries: int) -> _RecordingSession:
    """A session mounted as TRL's VLLMClient mounts its own (read timeouts retried)."""
    session = _RecordingSession()
    retry = Retry(total=retries, connect=retries, read=retries, backoff_factor=0,
                  allowed_methods=["POST", "GET"])  # fmt: skip
    session.mount("http://", HTTPAdapter(max_retries=retry))
    return session


class _Tokenizer:
    """Token ids for ``encode_prompt``; the request never gets an answer, so which ids does
    not matter here."""

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [ord(c) % 50 for c in text]}


@pytest.mark.timeout(HANG_GUARD_S)
def test_a_server_that_never_answers_fails_the_evaluation_within_its_bound(silent_server):
    """With a deadline 4 s away and one retry, each attempt is sent with a timeout of at most
    half the remaining time, both attempts reach the server, and the call ends in a
    TimeoutError although the server never answered: a client sent without a timeout (or
    with the whole bound per attempt) would wait on the silent stand-in."""
    url, hits = silent_server
    session = _session(retries=1)
    client = SimpleNamespace(base_url=url, model="m", session=session)
    bound_s = 4.0
    backend = ServerBackend(client, _Tokenizer(), set(), deadline=time.monotonic() + bound_s)
    with pytest.raises(TimeoutError, match="within 2 s per attempt|time bound is spent"):
        backend.generate(["a question"], Sampling(max_new_tokens=8))
    # both attempts (1 retry) reached the server and timed out: the evaluation did not wait
    assert hits == ["/v1/models", "/v1/models"]
    (timeout,) = session.timeouts  # urllib3 retries inside the one request, same timeout
    assert 0 < timeout <= bound_s / 2
    # past the deadline nothing more is sent: the next request fails before any attempt
    with pytest.raises(TimeoutError, match="time bound is spent"):
        backend._call("POST", "/v1/completions", {})
    assert len(hits) == 2


def test_without_a_deadline_requests_are_unbounded_as_before(silent_server, monkeypatch):
    """``rlsr evaluate`` against a server (no collective waiting): no timeout is passed."""
    url, _ = silent_server
    seen = {}

    class Session:
        def get(self, u, timeout=None):
            seen["timeout"] = timeout
            return SimpleNamespace(status_code=200, json=lambda: {"data": [{"max_model_len": 9}]})

    backend = ServerBackend(
        SimpleNamespace(base_url=url, model="m", session=Session()), None, set()
    )
    assert backend.max_model_len == 9 and seen == {"timeout": None}


def test_the_retry_bound_of_trls_session():
    """TRL's VLLMClient mounts Retry(total=5, backoff_factor=2): 6 attempts, backoffs bounded
    by 2 + 4 + 8 + 16 + 32 = 62 s (urllib3 waits 0 before the first retry: an upper bound)."""
    session = requests.Session()
    retry = Retry(total=5, connect=5, read=5, status=3, status_forcelist=[500, 502, 503],
                  backoff_factor=2, allowed_methods=["POST", "GET"])  # fmt: skip
    session.mount("http://", HTTPAdapter(max_retries=retry))
    assert _retry_bound(session, "http://h:1/v1/models") == (6, 62.0)
    # with TRL's default ddp_timeout the requests get 1,380 s: (1380 - 62) / 6 per attempt
    assert server_eval_bound(1800) == 1380.0
    assert attempt_timeout(1380.0, 6, 62.0) == pytest.approx(219.666, abs=1e-3)
    with pytest.raises(TimeoutError, match="62 s of retry backoff"):
        attempt_timeout(60.0, 6, 62.0)


def test_a_ddp_timeout_that_leaves_no_time_is_refused():
    with pytest.raises(ValueError, match="grpo.ddp_timeout=60 s leaves no time"):
        server_eval_bound(60)


@pytest.mark.timeout(HANG_GUARD_S)
def test_the_context_check_at_start_is_bounded_too(silent_server):
    """The evaluator asks the server's context length when it binds (before step 1) while the
    other processes wait for it in a collective: a server that does not answer stops the run
    there with one ConfigError naming the field, within the bound, instead of hanging."""
    from rlsr.config import ConfigError
    from rlsr.evaluation.heldout.evaluator import HeldOutEvaluator

    url, hits = silent_server
    ddp_timeout = 80.0  # the bound: 0.8 x 80 - 60 = 4 s
    session = _session(retries=1)
    client = SimpleNamespace(base_url=url, model="m", session=session)
    trainer = SimpleNamespace(
        accelerator=SimpleNamespace(is_main_process=True, num_processes=1),
        args=SimpleNamespace(ddp_timeout=ddp_timeout),
        vllm_generation=SimpleNamespace(vllm_client=client),
    )
    evaluator = HeldOutEvaluator.__new__(HeldOutEvaluator)
    evaluator.tokenizer = _Tokenizer()
    outcome = []

    def check():
        try:
            outcome.append(evaluator._server_context(trainer))
        except Exception as err:  # noqa: BLE001 - the outcome is what is checked
            outcome.append(err)

    thread = threading.Thread(target=check, daemon=True)
    thread.start()
    thread.join()  # returns only if the check gave up on its own: the server never answers
    (timeout,) = session.timeouts  # one request; urllib3 retries it with the same timeout
    assert 0 < timeout <= server_eval_bound(ddp_timeout) / 2
    (err,) = outcome
    assert isinstance(err, ConfigError) and err.field == "heldout.backend", err
    assert "TimeoutError" in str(err) and "GET /v1/models" in str(err)
    assert hits == ["/v1/models", "/v1/models"]  # two attempts (1 retry), then nothing more

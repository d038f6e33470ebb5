"""The LLM judge of paper Sec. C.2 behind a ``judge_fn(prompts) -> outputs`` callable.

``rlsr.verifiers.LLMJudgeVerifier`` renders the judge prompt from the question, the gold answer
and the *extracted* answer only (never the thinking trace), truncating and JSON-quoting the
answer so it cannot pose as instructions, and counts outputs that are neither YES nor NO.
This module supplies the model that answers: a generation backend (transformers / vLLM, greedy)
or any OpenAI-compatible server (``--judge-base-url``, e.g. ``vllm serve`` of
Llama-3.1-8B-Instruct), called with plain ``urllib`` so no client package is needed.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

from rlsr.evaluation.backends import Backend, Sampling

__all__ = [
    "DEFAULT_JUDGE_MODEL",
    "JUDGE_MAX_NEW_TOKENS",
    "backend_judge_fn",
    "openai_judge_fn",
    "openai_chat_request",
    "RecordingJudge",
]

DEFAULT_JUDGE_MODEL = "meta-llama/Llama-3.1-8B-Instruct"
JUDGE_MAX_NEW_TOKENS = 8  # YES / NO plus a little slack for "**YES**." style replies


def backend_judge_fn(backend: Backend, max_new_tokens: int = JUDGE_MAX_NEW_TOKENS) -> Callable:
    """Judge through a generation backend: each prompt as one user turn, greedy decoding."""
    sampling = Sampling(max_new_tokens=max_new_tokens, temperature=0.0)

    def judge(prompts: list[str]) -> list[str]:
        rendered = [backend.render([{"role": "user", "content": p}]) for p in prompts]
        return [gens[0].text for gens in backend.generate(rendered, sampling)]

    return judge


def openai_chat_request(
    base_url: str, model: str, prompt: str, max_tokens: int
) -> tuple[str, dict]:
    """(URL, JSON body) of one greedy chat-completions call."""
    url = base_url.rstrip("/") + "/chat/completions"
    body = {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "temperature": 0.0,
        "max_tokens": max_tokens,
    }
    return url, body


def openai_judge_fn(
    base_url: str,
    model: str,
    *,
    api_key_env: str = "OPENAI_API_KEY",
    max_tokens: int = JUDGE_MAX_NEW_TOKENS,
    timeout_s: float = 120.0,
    concurrency: int = 16,
    retries: int = 2,
) -> Callable:
    """Judge through an OpenAI-compatible ``/v1/chat/completions`` endpoint.

    The API key (if any) is read from ``$api_key_env`` at call time and never logged. A request
    that still fails after ``retries`` retries returns "" (counted as an invalid judgement).
    """
    if not base_url.startswith(("http://", "https://")):
        raise ValueError(f"--judge-base-url must start with http:// or https://; got {base_url!r}.")

    def one(prompt: str) -> str:
        url, body = openai_chat_request(base_url, model, prompt, max_tokens)
        headers = {"Content-Type": "application/json"}
        key = os.environ.get(api_key_env)
        if key:
            headers["Authorization"] = f"Bearer {key}"
        data = json.dumps(body).encode()
        for attempt in range(retries + 1):
            try:
                req = urllib.request.Request(url, data=data, headers=headers, method="POST")
                with urllib.request.urlopen(req, timeout=timeout_s) as resp:
                    payload = json.loads(resp.read().decode())
                return str(payload["choices"][0]["message"]["content"] or "")
            except (urllib.error.URLError, TimeoutError, KeyError, IndexError, ValueError):
                if attempt == retries:
                    return ""
        return ""

    def judge(prompts: list[str]) -> list[str]:
        with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
            return list(pool.map(one, prompts))

    return judge


class RecordingJudge:
    """Wraps a judge_fn and keeps the outputs of the last call (stored per sample)."""

    def __init__(self, judge_fn: Callable[[list[str]], Sequence[str]]):
        self.judge_fn = judge_fn
        self.last_prompts: list[str] = []
        self.last_outputs: list[str] = []

    def __call__(self, prompts: list[str]) -> list[str]:
        self.last_prompts = list(prompts)
        self.last_outputs = list(self.judge_fn(prompts))
        return self.last_outputs

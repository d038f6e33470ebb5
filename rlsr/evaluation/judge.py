"""The LLM judge of paper Sec. C.2 behind a ``judge_fn(prompts) -> outputs`` callable.

``rlsr.verifiers.LLMJudgeVerifier`` renders the judge prompt from the question, the gold answer
and the *extracted* answer only (never the thinking trace), truncating and JSON-quoting the
answer so it cannot pose as instructions, and counts outputs that are neither YES nor NO.
This module supplies the model that answers: a generation backend (transformers / vLLM, greedy)
or any OpenAI-compatible server (``--judge-base-url``, e.g. ``vllm serve`` of
Llama-3.1-8B-Instruct) through the ``openai`` client, which times out, retries and backs off.

A server that cannot be reached or keeps failing is never turned into verdicts: the health check
(``check_judge_server``) fails before any generation, and a judge call that still fails after its
retries raises ``JudgeUnavailableError``, so the batch being judged is not written and a rerun
judges it again.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

from rlsr.generation.backends import Backend, Sampling
from rlsr.verifiers.llm_judge import JUDGE_MAX_RETRIES, JUDGE_TIMEOUT_S

__all__ = [
    "DEFAULT_JUDGE_MODEL",
    "JUDGE_MAX_NEW_TOKENS",
    "JudgeUnavailableError",
    "backend_judge_fn",
    "check_judge_server",
    "openai_judge_fn",
    "RecordingJudge",
]

DEFAULT_JUDGE_MODEL = "meta-llama/Llama-3.1-8B-Instruct"
JUDGE_MAX_NEW_TOKENS = 8  # YES / NO plus a little slack for "**YES**." style replies


class JudgeUnavailableError(ConnectionError):
    """The judge server could not be reached or kept failing; no verdict was produced.

    A ``ConnectionError`` (an ``OSError``), so ``rlsr`` prints it as one ``rlsr: error:`` line."""


def backend_judge_fn(backend: Backend, max_new_tokens: int = JUDGE_MAX_NEW_TOKENS) -> Callable:
    """Judge through a generation backend: each prompt as one user turn, greedy decoding."""
    sampling = Sampling(max_new_tokens=max_new_tokens, temperature=0.0)

    def judge(prompts: list[str]) -> list[str]:
        rendered = [backend.render([{"role": "user", "content": p}]) for p in prompts]
        return [gens[0].text for gens in backend.generate(rendered, sampling)]

    return judge


def _client(base_url: str, api_key_env: str, timeout_s: float, max_retries: int):
    try:
        import openai  # optional dependency (extra `judge`); only the server judge needs it
    except ImportError:
        raise ValueError(
            "--judge-base-url needs the openai client: pip install 'rlsr[judge]'."
        ) from None
    if not base_url.startswith(("http://", "https://")):
        raise ValueError(f"--judge-base-url must start with http:// or https://; got {base_url!r}.")
    # A key is read from the environment at call time and never logged; local servers need none.
    return openai.OpenAI(
        base_url=base_url,
        api_key=os.environ.get(api_key_env) or "EMPTY",
        timeout=timeout_s,
        max_retries=max_retries,
    )


def _why(err: Exception) -> str:
    """One line for a failed request: the HTTP status, a timeout, or a refused connection."""
    import openai

    if isinstance(err, openai.APIStatusError):
        return f"HTTP {err.status_code}"
    if isinstance(err, openai.APITimeoutError):
        return "no answer within the timeout"
    if isinstance(err, openai.APIConnectionError):
        cause = err.__cause__ or err
        return f"cannot connect ({type(cause).__name__}: {cause})".replace("\n", " ")
    return f"{type(err).__name__}: {err}".replace("\n", " ")


def check_judge_server(
    base_url: str,
    model: str,
    *,
    api_key_env: str = "OPENAI_API_KEY",
    timeout_s: float = 10.0,
    max_retries: int = 2,
) -> None:
    """Fail fast before generating: ``GET {base_url}/models`` must answer and list ``model``.

    Raises ``JudgeUnavailableError`` (unreachable / failing server) or ``ValueError`` (the server
    does not serve ``model``), each one line naming the URL.
    """
    import openai

    client = _client(base_url, api_key_env, timeout_s, max_retries)
    try:
        served = [m.id for m in client.models.list().data]
    except openai.OpenAIError as err:
        raise JudgeUnavailableError(
            f"judge server {base_url} is not answering: {_why(err)} (GET {base_url}/models, "
            f"{max_retries} retries); start it or fix --judge-base-url."
        ) from err
    if model not in served:
        raise ValueError(
            f"judge server {base_url} does not serve --judge-model {model!r}; it serves {served}."
        )


def openai_judge_fn(
    base_url: str,
    model: str,
    *,
    api_key_env: str = "OPENAI_API_KEY",
    max_tokens: int = JUDGE_MAX_NEW_TOKENS,
    timeout_s: float = JUDGE_TIMEOUT_S,
    max_retries: int = JUDGE_MAX_RETRIES,
    concurrency: int = 16,
) -> Callable:
    """Judge through an OpenAI-compatible ``/v1/chat/completions`` endpoint (greedy).

    Each request has ``timeout_s`` and up to ``max_retries`` retries with exponential backoff
    (the ``openai`` client's: connection errors, timeouts, 408/409/429/5xx). A request that
    still fails raises ``JudgeUnavailableError`` naming the URL: a transport error is never
    returned as a judge output.
    """
    import openai

    client = _client(base_url, api_key_env, timeout_s, max_retries)

    def one(prompt: str) -> str:
        try:
            reply = client.chat.completions.create(
                model=model,
                messages=[{"role": "user", "content": prompt}],
                temperature=0.0,
                max_tokens=max_tokens,
            )
            return reply.choices[0].message.content or ""
        except openai.OpenAIError as err:
            raise JudgeUnavailableError(
                f"judge server {base_url} failed: {_why(err)} after {max_retries} retries."
            ) from err
        except (IndexError, AttributeError, TypeError) as err:
            raise JudgeUnavailableError(
                f"judge server {base_url} sent a reply without choices[0].message."
            ) from err

    def judge(prompts: list[str]) -> list[str]:
        pool = ThreadPoolExecutor(max_workers=max(1, concurrency))
        try:
            return list(pool.map(one, prompts))
        finally:  # after a failure, do not start the prompts still queued
            pool.shutdown(wait=True, cancel_futures=True)

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

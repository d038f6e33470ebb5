"""The LLM judge of paper Sec. C.2 behind a ``judge_fn(prompts) -> outputs`` callable: a
generation backend (greedy) or an OpenAI-compatible server (``--judge-base-url``) through rlsr's
endpoint client, which times out, retries and backs off. A server that cannot be reached is
never turned into verdicts: ``check_judge_server`` fails before any generation, and a call that
still fails raises ``JudgeUnavailableError``, so its batch is not written and a rerun judges it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from rlsr.generation.backends import Backend, Sampling
from rlsr.generation.http_client import EndpointClient, EndpointError, EndpointSettings
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
    """The judge server could not be reached or kept failing (an ``OSError``: ``rlsr`` prints
    one ``rlsr: error:`` line)."""


def backend_judge_fn(backend: Backend, max_new_tokens: int = JUDGE_MAX_NEW_TOKENS) -> Callable:
    """Judge through a generation backend: each prompt as one user turn, greedy decoding."""
    sampling = Sampling(max_new_tokens=max_new_tokens, temperature=0.0)

    def judge(prompts: list[str]) -> list[str]:
        rendered = [backend.render([{"role": "user", "content": p}]) for p in prompts]
        return [gens[0].text for gens in backend.generate(rendered, sampling)]

    return judge


def _settings(
    base_url: str, model: str, api_key_env: str, timeout_s: float, max_retries: int,
    concurrency: int = 1,
) -> EndpointSettings:  # fmt: skip
    if not base_url.startswith(("http://", "https://")):
        raise ValueError(f"--judge-base-url must start with http:// or https://; got {base_url!r}.")
    # A key is read from the environment at call time and never logged; local servers need none.
    return EndpointSettings(
        base_url, model, kind="chat", api_key_env=api_key_env, concurrency=max(1, concurrency),
        request_timeout=timeout_s, max_retries=max_retries,
    )  # fmt: skip


def _client(settings: EndpointSettings) -> EndpointClient:
    try:
        return EndpointClient(settings)
    except ImportError:  # pragma: no cover - depends on the install
        raise ValueError("--judge-base-url needs httpx: pip install 'rlsr[judge]'.") from None


def _why(err: EndpointError) -> str:
    """One line for a failed request: the HTTP status, a timeout, or a refused connection."""
    if err.reason in ("status", "refused") and err.status is not None:
        return f"HTTP {err.status}"
    if err.reason == "timeout":
        return "no answer within the timeout"
    if err.reason == "connection":
        return f"cannot connect ({err.detail})".replace("\n", " ")
    return err.detail.replace("\n", " ")


def check_judge_server(
    base_url: str,
    model: str,
    *,
    api_key_env: str = "OPENAI_API_KEY",
    timeout_s: float = 10.0,
    max_retries: int = 2,
) -> None:
    """Fail fast before generating: ``GET {base_url}/models`` must answer and list ``model``."""
    client = _client(_settings(base_url, model, api_key_env, timeout_s, max_retries))
    try:
        _, served = client.run(
            client.call("GET", "/models", check=lambda r: [m["id"] for m in r["data"]])
        )
    except EndpointError as err:
        raise JudgeUnavailableError(
            f"judge server {base_url} is not answering: {_why(err)} (GET {base_url}/models, "
            f"{max_retries} retries); start it or fix --judge-base-url."
        ) from err
    finally:
        client.close()
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
    """Judge through an OpenAI-compatible ``/v1/chat/completions`` endpoint (greedy), at most
    ``concurrency`` requests at once; one that still fails after its retries raises
    ``JudgeUnavailableError``: a transport error is never a judge output."""
    settings = _settings(base_url, model, api_key_env, timeout_s, max_retries, concurrency)

    def request(prompt: str) -> tuple:
        body = {"model": model, "messages": [{"role": "user", "content": prompt}],
                "temperature": 0.0, "max_tokens": max_tokens}  # fmt: skip
        return "POST", "/chat/completions", body, lambda r: r["choices"][0]["message"]["content"]

    def judge(prompts: list[str]) -> list[str]:
        client = _client(settings)
        try:  # the first failure cancels the prompts still queued
            outputs = client.run(client.call_all([request(p) for p in prompts]))
        except EndpointError as err:
            raise JudgeUnavailableError(
                f"judge server {base_url} failed: {_why(err)} after {max_retries} retries."
            ) from err
        finally:
            client.close()
        return [text or "" for text in outputs]

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

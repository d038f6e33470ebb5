"""``rlsr serve``'s engine: a generation backend (``rlsr.generation``, as ``rlsr evaluate`` uses)
answering one rendered prompt at a time, asynchronously.

* in process: ``VLLMBackend(asynchronous=True)``, vLLM's ``AsyncLLM`` (concurrent requests are
  batched by vLLM's scheduler; LoRA through ``LoRARequest``; on vLLM's CPU backend sized to the
  machine, ``rlsr.generation.engine_args``);
* ``--upstream``: ``EndpointBackend`` on an existing ``vllm serve``, through rlsr's one
  OpenAI-compatible client (``rlsr.generation.http_client``): ``/v1/completions`` with the prompt
  as token ids and the body of ``rlsr evaluate --backend openai-completions``, so the upstream
  decodes exactly the tokens the evaluator would.

The tokenizer's work (rendering the chat template, encoding) runs off the event loop, in one
thread per engine (``TokenizerThread``), so a long prompt never stalls ``/health`` or the other
requests' I/O; one thread because a fast tokenizer is not safe to call from several threads at
once (``RuntimeError: Already borrowed``), as ``vllm serve`` also tokenises in a single worker.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from rlsr.generation.backends import Completion, Sampling, VLLMBackend, encode_prompt
from rlsr.generation.endpoint import EndpointBackend
from rlsr.generation.http_client import EndpointSettings
from rlsr.generation.openai_api import VLLM_SERVE

__all__ = ["Engine", "TokenizerThread", "upstream_engine", "vllm_engine", "upstream_base_url"]


class TokenizerThread:
    """One worker thread for the tokenizer: ``await run(fn, *args)`` calls ``fn(*args)`` there.
    A call whose awaiting request is cancelled still finishes in the thread (Python cannot stop
    it), which the per-message bound keeps short (``--max-message-chars``)."""

    def __init__(self) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rlsr-tokenizer")

    async def run(self, fn: Callable, *args):
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


class Engine:
    """A backend with ``complete``/``check``/``running``/``aclose``, fed rendered prompt text
    tokenised off the event loop."""

    def __init__(self, backend: Any) -> None:
        self.backend = backend
        self.tokenizer = backend.tokenizer
        self.tokenizer_thread = TokenizerThread()

    async def complete(self, prompt_text: str, sampling: Sampling) -> Completion:
        ids = await self.tokenizer_thread.run(encode_prompt, self.tokenizer, prompt_text)
        return await self.backend.complete(ids, sampling)

    async def check(self) -> None:
        """Raise ``EngineUnavailable`` unless the engine can serve."""
        await self.backend.check()

    def running(self) -> int:
        """Requests of this server the engine holds now (``rlsr_engine_requests``)."""
        return self.backend.running()

    async def close(self) -> None:
        await self.backend.aclose()
        self.tokenizer_thread.close()


def vllm_engine(model_path: str, adapter: str | os.PathLike | None = None, **engine: Any) -> Engine:
    """vLLM's ``AsyncLLM`` in this process; ``engine``: ``VLLMEngineArgs``' fields."""
    return Engine(VLLMBackend(model_path, adapter, asynchronous=True, **engine))


def upstream_base_url(url: str) -> str:
    """``http://host:8000`` or ``http://host:8000/v1`` -> ``http://host:8000/v1``."""
    base = url.rstrip("/")
    if not base.startswith(("http://", "https://")):
        raise ValueError(f"--upstream {url!r}: give an http(s) URL, e.g. http://127.0.0.1:8000.")
    return base if base.endswith("/v1") else base + "/v1"


def upstream_engine(
    base_url: str,
    model_name: str,
    tokenizer_path: str,
    *,
    timeout: float = 600.0,
    max_retries: int = 1,
    trust_remote_code: bool = False,
) -> Engine:
    """An OpenAI-compatible ``vllm serve`` at ``base_url`` that knows the model as ``model_name``
    (the model path, or the ``--lora-modules NAME=PATH`` name of an adapter); its API key, if
    any, from ``$OPENAI_API_KEY``. ``max_retries``: retries of a request that timed out, lost its
    connection or got 429/5xx. At most 1024 requests in flight: above what one server batches at
    once, so the upstream's scheduler, not this client, decides what waits."""
    settings = EndpointSettings(
        upstream_base_url(base_url),
        model_name,
        concurrency=1024,
        request_timeout=timeout,
        max_retries=max_retries,
    )
    return Engine(
        EndpointBackend(
            settings, tokenizer_path, server=VLLM_SERVE, trust_remote_code=trust_remote_code
        )  # fmt: skip
    )

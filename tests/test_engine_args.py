"""The vLLM engine arguments declared once (``rlsr.generation.engine_args``): the keyword
arguments both in-process engines get, the engines' option names, and the CPU backend's sizing
to the machine. Pure functions: no engine starts."""

from __future__ import annotations

import inspect
from dataclasses import fields

import pytest

from rlsr.cli import build_parser
from rlsr.generation import backends
from rlsr.generation.engine_args import (
    EngineStartError,
    GiB,
    MiB,
    VLLMEngineArgs,
    cpu_engine_settings,
    kv_bytes_per_token,
    vllm_engine_kwargs,
    vllm_lora_rank,
)


def test_engine_kwargs_follow_the_declared_arguments():
    """LoRA rank rounded up to one vLLM accepts, parallel sizes, a user's fraction kept and 0.9
    when unset, the optional caps only when set, a KV cache in bytes when one was sized; a
    parallel size below 1 and a rank above vLLM's largest are refused."""
    kw = vllm_engine_kwargs(
        VLLMEngineArgs("m", lora_rank=12, tensor_parallel_size=4, data_parallel_size=2)
    )
    assert kw["enable_lora"] and kw["max_lora_rank"] == 16 and kw["tensor_parallel_size"] == 4
    assert kw["data_parallel_size"] == 2 and kw["trust_remote_code"] is False
    assert kw["gpu_memory_utilization"] == 0.9 and kw["enable_prefix_caching"] is True
    plain = vllm_engine_kwargs(VLLMEngineArgs("m"))
    assert plain == {"model": "m", "tensor_parallel_size": 1, "dtype": "auto",
                     "gpu_memory_utilization": 0.9, "seed": 0, "trust_remote_code": False,
                     "enable_prefix_caching": True}  # fmt: skip
    capped = vllm_engine_kwargs(
        VLLMEngineArgs("m", gpu_memory_utilization=0.5, max_model_len=64, max_num_seqs=8,
                       enforce_eager=True),
        kv_cache_memory_bytes=GiB,
    )  # fmt: skip
    assert capped["gpu_memory_utilization"] == 0.5 and capped["kv_cache_memory_bytes"] == GiB
    assert (capped["max_model_len"], capped["max_num_seqs"], capped["enforce_eager"]) == (
        64,
        8,
        True,
    )
    with pytest.raises(ValueError, match="must be >= 1"):
        vllm_engine_kwargs(VLLMEngineArgs("m", tensor_parallel_size=0))
    assert vllm_lora_rank(1) == 1 and vllm_lora_rank(9) == 16
    with pytest.raises(ValueError, match="largest max_lora_rank 512"):
        vllm_lora_rank(1000)


def test_both_engines_and_make_backend_take_the_declared_arguments(monkeypatch):
    """``rlsr evaluate``'s backend and ``rlsr serve``'s engine (the same ``VLLMBackend``) take
    the fields of ``VLLMEngineArgs`` (no list of their own to fall out of step), and
    ``make_backend`` passes every one of them on: a field it dropped would never reach the
    evaluation engine."""
    from rlsr.serving.engine import vllm_engine

    declared = {f.name for f in fields(VLLMEngineArgs)} - {"model", "lora_rank"}
    for engine in (backends.VLLMBackend.__init__, vllm_engine):
        params = inspect.signature(engine).parameters
        assert params["engine"].kind is inspect.Parameter.VAR_KEYWORD
        assert not declared & set(params), engine
    seen = {}

    class Recorder:  # the engine boundary: no vLLM engine starts in a unit test
        def __init__(self, model_path, adapter=None, **options):
            seen.update(options)

    monkeypatch.setattr(backends, "VLLMBackend", Recorder)
    backends.make_backend("vllm", "m", None, batch_size=4, **{k: 1 for k in declared})
    assert set(seen) == declared


def test_evaluate_leaves_the_vllm_memory_fraction_unset_by_default():
    """``rlsr evaluate`` without ``--gpu-memory-utilization`` gives the engine None, so vLLM's CPU
    backend sizes its KV cache from free memory (as ``rlsr serve`` does) instead of reserving
    0.9 of all RAM, which is refused on a machine with less free; a GPU still gets 0.9."""
    args = build_parser().parse_args(
        ["evaluate", "--model", "m", "--tasks", "tiny", "--output-dir", "o"]
    )
    assert args.gpu_memory_utilization is None
    assert vllm_engine_kwargs(VLLMEngineArgs("m"))["gpu_memory_utilization"] == 0.9
    cpu = cpu_engine_settings({}, **_MACHINE, gpu_memory_utilization=args.gpu_memory_utilization)
    assert cpu.kv_cache_memory_bytes == 4 * GiB


_MACHINE = dict(available=18 * GiB, total=24 * GiB, weights=3 * GiB, cores=2)


def test_kv_bytes_per_token_counts_keys_and_values_of_every_layer():
    """2 x layers x key-value heads x head size x element bytes, against the tiny model's config
    by hand (2 layers, 2 of 4 heads, hidden 128, float32) and the head size a config states."""
    tiny = {"num_attention_heads": 4, "num_key_value_heads": 2, "hidden_size": 128,
            "num_hidden_layers": 2, "dtype": "float32"}  # fmt: skip
    assert kv_bytes_per_token(tiny) == 2 * 2 * 2 * 32 * 4
    assert kv_bytes_per_token(tiny, "bfloat16") == 2 * 2 * 2 * 32 * 2
    assert (
        kv_bytes_per_token({**tiny, "head_dim": 64, "num_key_value_heads": None})
        == 2 * 2 * 4 * 64 * 4
    )
    assert kv_bytes_per_token({"hidden_size": 128}) is None


def test_cpu_engine_fits_the_kv_cache_to_free_memory_when_the_user_set_none():
    """Nothing set: the KV cache is half of what the weights and the engine leave free, at most
    4 GiB and 256 full-context sequences, in whole 16 MiB; it must hold one sequence, else one
    line names a --max-model-len that fits. 2 cores: threads unpinned; 4: vLLM's own binding."""
    small = cpu_engine_settings(
        {}, **{**_MACHINE, "available": 6 * GiB}, gpu_memory_utilization=None
    )
    assert small.kv_cache_memory_bytes == GiB  # (6 - 3 - 1) / 2
    assert small.env == {"VLLM_CPU_OMP_THREADS_BIND": "nobind"} and "1.0 GiB" in small.note
    odd = cpu_engine_settings(
        {}, **{**_MACHINE, "available": 5 * GiB + 100 * MiB}, gpu_memory_utilization=None
    )
    assert odd.kv_cache_memory_bytes == GiB // 2 + 48 * MiB  # 562 MiB down to 16 MiB steps
    big = cpu_engine_settings({}, **{**_MACHINE, "cores": 4}, gpu_memory_utilization=None)
    assert (big.kv_cache_memory_bytes, big.env) == (4 * GiB, {})
    tiny = cpu_engine_settings(
        {}, **_MACHINE, gpu_memory_utilization=None, per_token=1024, context=2048
    )
    assert tiny.kv_cache_memory_bytes == 256 * 2048 * 1024  # 512 MiB: 256 sequences
    long = dict(gpu_memory_utilization=None, per_token=1 << 16, context=1 << 15)  # 2 GiB each
    assert cpu_engine_settings({}, **_MACHINE, **long).kv_cache_memory_bytes == 4 * GiB
    with pytest.raises(
        EngineStartError, match=r"one sequence of 32768 tokens.* --max-model-len 16384\.$"
    ):
        cpu_engine_settings({}, **{**_MACHINE, "available": 6 * GiB}, **long)
    user_bind = {"VLLM_CPU_OMP_THREADS_BIND": "0-1"}
    assert cpu_engine_settings(user_bind, **_MACHINE, gpu_memory_utilization=None).env == {}


def test_cpu_engine_keeps_what_the_user_set_and_refuses_it_in_one_line_when_it_cannot_fit():
    """VLLM_CPU_KVCACHE_SPACE or --gpu-memory-utilization given: vLLM's setting stands (no size
    from rlsr) when it fits; when not, or when nothing fits, one line names the numbers and fix."""
    kept = cpu_engine_settings(
        {"VLLM_CPU_KVCACHE_SPACE": "2"}, **_MACHINE, gpu_memory_utilization=None
    )
    assert kept.kv_cache_memory_bytes is None and kept.note is None
    assert (
        cpu_engine_settings({}, **_MACHINE, gpu_memory_utilization=0.5).kv_cache_memory_bytes
        is None
    )
    cases = [
        ({"VLLM_CPU_KVCACHE_SPACE": "15"}, _MACHINE, None, "VLLM_CPU_KVCACHE_SPACE=15 GiB"),
        ({"VLLM_CPU_KVCACHE_SPACE": "lots"}, _MACHINE, None, "whole GiB"),
        ({}, _MACHINE, 0.9, "--gpu-memory-utilization 0.9"),  # 21.6 GiB asked, 18 free
        ({}, {**_MACHINE, "available": 4 * GiB}, None, "4.0 GiB of the 24.0 GiB RAM is free"),
    ]
    for environ, machine, fraction, words in cases:
        with pytest.raises(EngineStartError) as info:
            cpu_engine_settings(environ, **machine, gpu_memory_utilization=fraction)
        assert words in str(info.value) and "\n" not in str(info.value)

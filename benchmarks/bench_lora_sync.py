"""LoRA weight sync to vLLM: drift of the frozen base, TRL/PEFT stock vs rlsr.method.weight_sync.

One bf16 ``nn.Linear(3584, 3584)`` (Qwen2.5-7B's hidden size), W ~ N(0, 0.02), wrapped by PEFT
LoRA r = 1, alpha = 32 (scale 32), fp32 adapters (as under DDP/ZeRO-2), driven through TRL 1.16's
real ``VLLMGeneration.sync_weights`` (colocate branch). The vLLM engine is replaced by a buffer
that copies each pushed tensor (what ``load_weights`` does): no engine runs on this machine.

* ``stock``: TRL's iterator, PEFT ``merge_adapter()`` / ``unmerge_adapter()`` in place.
* ``rlsr``: ``rlsr.method.weight_sync`` (out-of-place merge, W only read).

Adapters: A, B ~ N(0, 1), B rescaled so that ||s·B·A||_F / ||W||_F = rho (0.03, or 0.3 for
"larger update"). "moving": before each sync A and B take a random step of 1 % of their entry
standard deviation (an optimizer step). Reported after the last sync: max |W - W_0| and the share
of entries of W that changed; median wall time of one sync per path and the ratio rlsr / stock.

Usage: ``.venv/bin/python benchmarks/bench_lora_sync.py [--quick] [--threads 1] [--large-syncs 200]``
(400 fixed / 1,000 moving syncs; --quick: 40 / 100 / 40). Prints one row per path and setup.
Output is a markdown section (append it to benchmarks/RESULTS.md).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
import types

import torch
from accelerate import Accelerator
from peft import LoraConfig, get_peft_model
from trl.generation.vllm_generation import VLLMGeneration

from rlsr.method.weight_sync import install_out_of_place_lora_sync

HIDDEN = 3584


class _Engine:
    """Stand-in for vLLM's model: ``load_weights`` copies into preallocated buffers."""

    def __init__(self):
        self.buffers: dict[str, torch.Tensor] = {}
        runner = types.SimpleNamespace(model=types.SimpleNamespace(load_weights=self.load_weights))
        worker = types.SimpleNamespace(model_runner=runner)
        self.llm_engine = types.SimpleNamespace(
            model_executor=types.SimpleNamespace(driver_worker=worker)
        )

    def load_weights(self, weights):
        for name, tensor in weights:
            if name not in self.buffers:
                self.buffers[name] = torch.empty_like(tensor)
            self.buffers[name].copy_(tensor)

    def reset_prefix_cache(self):
        pass


class _Net(torch.nn.Module):
    def __init__(self, dtype: torch.dtype):
        super().__init__()
        self.proj = torch.nn.Linear(HIDDEN, HIDDEN, bias=False, dtype=dtype)


def build(dtype: torch.dtype, rho: float, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    net = _Net(dtype)
    with torch.no_grad():
        net.proj.weight.copy_(torch.randn(HIDDEN, HIDDEN, generator=g) * 0.02)
    model = get_peft_model(net, LoraConfig(r=1, lora_alpha=32, target_modules=["proj"]))
    layer = model.base_model.model.proj
    A, B = layer.lora_A["default"].weight, layer.lora_B["default"].weight
    with torch.no_grad():
        A.data = torch.randn(A.shape, generator=g)  # fp32 adapters
        B.data = torch.randn(B.shape, generator=g)
        ratio = (layer.scaling["default"] * (B @ A)).norm() / layer.base_layer.weight.float().norm()
        B.mul_(rho / ratio)
    return model, layer, g


def generation(model, ours: bool):
    engine = _Engine()

    class NoEngine(VLLMGeneration):
        def _init_vllm(self):
            self.llm = engine

    gen = NoEngine(model=model, accelerator=Accelerator(cpu=True), processing_class=None)
    if ours:
        install_out_of_place_lora_sync(types.SimpleNamespace(vllm_generation=gen))
    return gen


def run(dtype, rho: float, syncs: int, moving: bool, ours: bool) -> dict:
    model, layer, g = build(dtype, rho)
    gen = generation(model, ours)
    W = layer.base_layer.weight
    W0 = W.detach().clone()
    adapters = [layer.lora_A["default"].weight, layer.lora_B["default"].weight]
    times = []
    for _ in range(syncs):
        if moving:
            with torch.no_grad():
                for p in adapters:
                    p.add_(torch.randn(p.shape, generator=g) * (0.01 * p.std()))
        start = time.perf_counter()
        gen.sync_weights()
        times.append(time.perf_counter() - start)
    diff = (W.detach().float() - W0.float()).abs()
    return {
        "max_abs": diff.max().item(),
        "share": (diff > 0).float().mean().item(),
        "mean_abs_w": W0.float().abs().mean().item(),
        "ms": 1e3 * statistics.median(times),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (shared machine)")
    parser.add_argument("--large-syncs", type=int, default=200, help="syncs of the rho 0.3 row")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    fixed_n, moving_n, large_n = (40, 100, 40) if args.quick else (400, 1000, args.large_syncs)
    setups = [
        ("fixed adapter", torch.bfloat16, 0.03, fixed_n, False),
        ("adapter moving between syncs", torch.bfloat16, 0.03, moving_n, True),
        ("larger update (rho 0.3), moving", torch.bfloat16, 0.3, large_n, True),
        ("fp32 base (control)", torch.float32, 0.03, 1, False),
    ]
    print(f"## LoRA weight sync drift (`benchmarks/bench_lora_sync.py`{' --quick' * args.quick})")
    print()
    print(
        f"Machine: {platform.machine()}, {os.cpu_count()} CPU cores, torch "
        f"{torch.__version__}, {torch.get_num_threads()} threads. nn.Linear({HIDDEN}, {HIDDEN}), "
        "W ~ N(0, 0.02), LoRA r=1, alpha=32, fp32 adapters."
    )
    print()
    print(
        "| setup | syncs | path | max abs base change | share of base entries changed "
        "| ms / sync (median) | rlsr / stock |"
    )
    print("| --- | ---: | --- | --- | ---: | ---: | ---: |")
    for label, dtype, rho, n, moving in setups:
        stock = run(dtype, rho, n, moving, ours=False)
        ours = run(dtype, rho, n, moving, ours=True)
        rel = stock["max_abs"] / stock["mean_abs_w"]
        for name, r in (("stock TRL/PEFT", stock), ("rlsr", ours)):
            extra = (
                f" ({rel:.2f} x mean abs W)" if name.startswith("stock") and r["max_abs"] else ""
            )
            ratio = f"{ours['ms'] / stock['ms']:.2f}" if name == "rlsr" else ""
            print(
                f"| {label} | {n:,} | {name} | {r['max_abs']:.2g}{extra} | {100 * r['share']:.1f} % "
                f"| {r['ms']:.1f} | {ratio} |",
                flush=True,
            )


if __name__ == "__main__":
    main()

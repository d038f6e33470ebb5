"""LoRA weight sync to vLLM without touching the frozen base: out-of-place merged tensors.

The bug (TRL #6688): TRL 1.16 pushes the policy to vLLM once per optimizer step through
``VLLMGeneration._iter_named_params``, which with PEFT runs ``merge_adapter()`` (``W += ΔW`` in
place), yields, then ``unmerge_adapter()`` (``W -= ΔW.to(W.dtype)``). PEFT 0.21.2 adds the fp32
delta with one rounding to bf16 but subtracts a delta rounded to bf16 first, so the frozen base
moves at every sync (benchmarks/RESULTS.md, "LoRA weight sync drift").

The fix: give vLLM, for every LoRA-wrapped linear layer, a fresh tensor

    W' = (W.float() + Σ_a s_a · B_a A_a).to(W.dtype)       (s_a = lora_alpha / r, or rsLoRA's)

(transposed for ``fan_in_fan_out``; bias ``b' = (b.float() + Σ_a s_a · b_B,a).to(b.dtype)`` with
``lora_bias``), and never write W: the value a single in-place merge of a fresh base would have
pushed. :func:`install_out_of_place_lora_sync` re-classes TRL's built ``vllm_generation`` to
:class:`OutOfPlaceLoraVLLMGeneration`, which overrides ``_iter_named_params`` only; TRL's
``sync_weights`` (colocate and server) and its ZeRO-3 gather are unchanged. FSDP keeps TRL's
iterator (a warning says so). Under ZeRO-3 with a 1-rank partition group the gathered tensor is
a view of the shard, so the stock sync drifts it too (docs/distributed.md, "LoRA weight sync").
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence

import torch
from accelerate.utils import is_peft_model
from peft.tuners.lora import Linear as LoraLinear
from peft.tuners.tuners_utils import BaseTunerLayer
from trl.generation.vllm_generation import VLLMGeneration

from rlsr.config import ConfigError

logger = logging.getLogger(__name__)

__all__ = [
    "lora_delta",
    "merge_out_of_place",
    "vllm_param_name",
    "merged_lora_base",
    "check_supported",
    "out_of_place_named_params",
    "OutOfPlaceLoraVLLMGeneration",
    "install_out_of_place_lora_sync",
]


@torch.no_grad()
def lora_delta(
    lora_A: torch.Tensor, lora_B: torch.Tensor, scaling: float, fan_in_fan_out: bool = False
) -> torch.Tensor:
    """LoRA weight update in fp32: ``ΔW = (B A) · s`` (LoRA, Hu et al. 2021, Eq. 3), in PEFT's
    order of operations; (out, in), transposed when ``fan_in_fan_out`` (a Conv1D base)."""
    delta = (lora_B.float() @ lora_A.float()) * float(scaling)
    return delta.T if fan_in_fan_out else delta


@torch.no_grad()
def merge_out_of_place(weight: torch.Tensor, deltas: Sequence[torch.Tensor]) -> torch.Tensor:
    """Merged weight as a NEW tensor: ``W' = (W.float() + Σ_a ΔW_a).to(W.dtype)``; W is only
    read. One rounding at the end, as PyTorch's ``W += ΔW`` on a fresh W."""
    total = weight.float()  # a copy for bf16/fp16; for fp32 W the clone below keeps W unwritten
    if total.data_ptr() == weight.data_ptr():
        total = total.clone()
    for delta in deltas:
        if delta.shape != weight.shape:
            raise ValueError(
                f"LoRA delta shape {tuple(delta.shape)} != weight {tuple(weight.shape)}"
            )
        total += delta.to(total.device)
    return total.to(weight.dtype)


def vllm_param_name(peft_name: str, lora_prefix: str = "lora_") -> str | None:
    """vLLM's name for a PeftModel parameter (TRL 1.16's naming), or None for adapter
    parameters and a ``modules_to_save`` wrapper's ``original_module``; the caller applies TRL's
    ``_fix_param_name_to_vllm`` for the remaining prefixes."""
    name = peft_name.removeprefix("base_model.model.").replace(".base_layer", "")
    if lora_prefix in name or "original_module" in name:
        return None
    return name


def check_supported(model: torch.nn.Module) -> None:
    """ConfigError naming the adapter layers the merge cannot handle: anything but a plain
    ``peft.tuners.lora.Linear``, or one with a LoRA variant (DoRA) on an active adapter."""
    bad = []
    for name, module in model.named_modules():
        if not isinstance(module, BaseTunerLayer):
            continue
        if type(module) is not LoraLinear:
            bad.append(f"{name} ({type(module).__name__})")
        elif any(a in getattr(module, "lora_variant", {}) for a in module.active_adapters):
            bad.append(f"{name} (LoRA variant, e.g. DoRA)")
    if bad:
        raise ConfigError(
            "model.lora",
            "the vLLM weight sync merges plain LoRA linear layers only; unsupported: "
            f"{', '.join(bad[:5])}{' ...' if len(bad) > 5 else ''}. Use plain LoRA "
            "(no DoRA/quantization) or set grpo.use_vllm=false.",
        )


def merged_lora_base(layer: torch.nn.Module, which: str = "weight") -> torch.Tensor:
    """Out-of-place merge (module docstring) of one LoRA layer's base ``weight`` or ``bias`` over
    its active adapters; a layer already merged returns its base tensor as is."""
    base = layer.get_base_layer()
    adapters = [a for a in layer.active_adapters if a in layer.lora_A and not layer.merged]
    if which == "weight":
        deltas = [
            lora_delta(
                layer.lora_A[a].weight,
                layer.lora_B[a].weight,
                layer.scaling[a],
                fan_in_fan_out=layer.fan_in_fan_out,
            )
            for a in adapters
        ]
        return merge_out_of_place(base.weight, deltas) if deltas else base.weight.data
    deltas = [
        layer.lora_B[a].bias.detach().float() * float(layer.scaling[a])
        for a in adapters
        if layer.lora_bias.get(a, False)
    ]
    return merge_out_of_place(base.bias, deltas) if deltas else base.bias.data


def _lora_base_params(model: torch.nn.Module) -> dict[int, tuple[torch.nn.Module, str]]:
    """``{id(base parameter): (LoRA layer, "weight" | "bias")}`` of every LoRA-wrapped linear."""
    found: dict[int, tuple[torch.nn.Module, str]] = {}
    for module in model.modules():
        if type(module) is LoraLinear:
            base = module.get_base_layer()
            found[id(base.weight)] = (module, "weight")
            if getattr(base, "bias", None) is not None:
                found[id(base.bias)] = (module, "bias")
    return found


def out_of_place_named_params(
    model: torch.nn.Module, fix_name: Callable[[str], str] = lambda n: n, *, merge: bool = True
) -> Iterator[tuple[str, torch.Tensor]]:
    """``(vLLM name, tensor)`` for every parameter vLLM holds, in TRL's order, LoRA-adapted bases
    merged out of place; nothing is written. ``merge=False`` yields the bases unmerged (same
    names, dtypes, shapes) for a pass whose values are never used."""
    check_supported(model)
    lora_params = _lora_base_params(model) if merge else {}
    prefix = getattr(model, "prefix", "lora_")
    for peft_name, param in model.named_parameters():
        name = vllm_param_name(peft_name, prefix)
        if name is None:
            continue
        owner = lora_params.get(id(param))
        yield fix_name(name), (merged_lora_base(*owner) if owner else param.data)


class OutOfPlaceLoraVLLMGeneration(VLLMGeneration):
    """TRL's VLLMGeneration whose PEFT weight iterator merges out of place; non-PEFT models and
    FSDP go to TRL's."""

    def _iter_named_params(self):
        model = self.model
        if not is_peft_model(model) or self._dist.is_fsdp:
            yield from super()._iter_named_params()
            return

        def fix_name(name: str) -> str:
            return self._fix_param_name_to_vllm(name, extra_prefixes=["modules_to_save.default."])

        # server mode walks on passes whose values nobody reads (TRL's first sync collects
        # (name, dtype, shape); non-main ranks walk only for the ZeRO-3 gathers): no merge there
        main = self._weight_metadata is not None and self.accelerator.is_main_process
        merge = self.mode != "server" or main
        # ZeRO-3: gather everything at once, as TRL does (no-op otherwise); nothing is modified,
        # so the re-partition on exit keeps the shards as they were.
        with self._dist.gather_params(list(model.parameters())):
            yield from out_of_place_named_params(model, fix_name, merge=merge)


def install_out_of_place_lora_sync(trainer) -> None:
    """Make ``trainer.vllm_generation`` sync LoRA out of place (no-op without vLLM or PEFT);
    re-classing keeps TRL's engine and state. ConfigError for layers the merge cannot handle."""
    generation = getattr(trainer, "vllm_generation", None)
    if generation is None or not is_peft_model(generation.model):
        return
    if generation._dist.is_fsdp:
        logger.warning(
            "FSDP + LoRA + vLLM: TRL's in-place merge/unmerge weight sync is kept; it can drift "
            "a bf16 base (docs/distributed.md, 'LoRA weight sync'). Use DDP or DeepSpeed ZeRO."
        )
        return
    check_supported(generation.model)
    generation.__class__ = OutOfPlaceLoraVLLMGeneration

"""LoRA weight sync to vLLM without touching the frozen base: out-of-place merged tensors.

The bug (TRL #6688). TRL 1.16 pushes the policy to vLLM once per optimizer step
(``VLLMGeneration.sync_weights``: colocate -> ``model.load_weights``, server ->
``VLLMClient.update_named_params``; both consume ``VLLMGeneration._iter_named_params``). With PEFT
that iterator calls ``merge_adapter()``, which *writes* ``W += ΔW`` into the base weight, yields
the parameters, then ``unmerge_adapter()``, which writes ``W -= ΔW.to(W.dtype)``. PEFT 0.21.2
adds the fp32 delta with one rounding to bf16 but subtracts a delta that was rounded to bf16
first, so ``round(round(W + ΔW) - round(ΔW)) != W`` for many entries: the frozen base moves at
every sync (benchmarks/RESULTS.md, "LoRA weight sync drift").

The fix. Give vLLM, for every LoRA-wrapped linear layer, a fresh tensor

    W' = (W.float() + Σ_a s_a · B_a A_a).to(W.dtype)       (s_a = lora_alpha / r, or rsLoRA's)

(transposed delta for ``fan_in_fan_out`` / Conv1D bases; bias ``b' = (b.float() + Σ_a s_a ·
b_B,a).to(b.dtype)`` with ``lora_bias``), and never write W. The value equals what a single
in-place merge of a fresh base would have pushed (PyTorch's ``bf16 += fp32`` rounds once), so vLLM
sees the same policy as before, without the drift. Other parameters (embeddings, norms,
``modules_to_save`` copies) are yielded as they are, under the names TRL gives them.

How it plugs in. GRPOTrainer builds ``self.vllm_generation`` (and starts the engine) inside its
``__init__``; :func:`install_out_of_place_lora_sync` re-classes that object to
:class:`OutOfPlaceLoraVLLMGeneration`, a subclass that overrides ``_iter_named_params`` only.
TRL's own ``sync_weights`` (colocate and server) and its ZeRO-3 gather are unchanged. FSDP keeps
TRL's iterator (our recipes do not use FSDP; a warning says so).

ZeRO-3: TRL gathers all parameters with ``deepspeed.zero.GatheredParameters(params)``
(``modifier_rank=None``); on exit DeepSpeed re-partitions with ``has_been_updated=False``, which
frees the gathered copy and keeps the shard, so with 2+ ranks in-place merges were discarded (no
drift); with a 1-rank partition group the "gathered" tensor is a view of the shard and the stock
sync drifts it (docs/distributed.md, "LoRA weight sync"). The out-of-place merge writes nothing.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

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
    "unsupported_lora_layers",
    "out_of_place_named_params",
    "engine_weight_mismatches",
    "engine_weight_check",
    "EngineCheck",
    "ENGINE_ONLY_PARAMS",
    "OutOfPlaceLoraVLLMGeneration",
    "install_out_of_place_lora_sync",
]


# --------------------------------------------------------------------------- equations


@torch.no_grad()
def lora_delta(
    lora_A: torch.Tensor, lora_B: torch.Tensor, scaling: float, fan_in_fan_out: bool = False
) -> torch.Tensor:
    """LoRA weight update in fp32: ``ΔW = (B A) · s`` (LoRA, Hu et al. 2021, Eq. 3).

    ``lora_A``: (r, in), ``lora_B``: (out, r); returns (out, in) like ``nn.Linear.weight``, or its
    transpose (in, out) when ``fan_in_fan_out`` (the base stores W as Conv1D does). Computed in
    fp32 whatever the adapter dtype, as ``(B @ A) * s`` (PEFT's order of operations).
    """
    delta = (lora_B.float() @ lora_A.float()) * float(scaling)
    return delta.T if fan_in_fan_out else delta


@torch.no_grad()
def merge_out_of_place(
    weight: torch.Tensor, deltas: Sequence[torch.Tensor] | torch.Tensor
) -> torch.Tensor:
    """Merged weight as a NEW tensor: ``W' = (W.float() + Σ_a ΔW_a).to(W.dtype)``; W is only read.

    One rounding to ``W.dtype`` at the end (bf16: what PyTorch's ``W += ΔW`` with an fp32 ΔW also
    gives on a fresh W). ``deltas``: one fp32 ΔW (see :func:`lora_delta`) or a sequence of them
    (several active adapters), each of W's shape.
    """
    if isinstance(deltas, torch.Tensor):
        deltas = [deltas]
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
    """vLLM's name for a PeftModel parameter, or None when vLLM has no such parameter.

    TRL 1.16's naming contract (``VLLMGeneration._iter_named_params``): drop the
    ``base_model.model.`` prefix and ``.base_layer``; skip adapter parameters (names containing
    the tuner prefix, ``lora_``) and the frozen ``original_module`` of a ``modules_to_save``
    wrapper. The remaining prefixes (``modules_to_save.default.``, ``_checkpoint_wrapped_module.``)
    are removed by TRL's ``_fix_param_name_to_vllm``, which the caller applies.
    """
    name = peft_name.removeprefix("base_model.model.").replace(".base_layer", "")
    if lora_prefix in name or "original_module" in name:
        return None
    return name


# --------------------------------------------------------------------------- PEFT model walk


def unsupported_lora_layers(model: torch.nn.Module) -> list[str]:
    """``["module name (Class)", ...]`` of adapter layers the out-of-place merge cannot handle.

    Handled: plain ``peft.tuners.lora.Linear`` (what ``target_modules="all-linear"`` wraps
    nn.Linear and Conv1D in), any number of adapters, ``fan_in_fan_out``, ``lora_bias``, rsLoRA /
    rank / alpha patterns (through ``layer.scaling``). Not handled: LoRA variants (DoRA, ...) on
    an active adapter, quantized or other layer classes, other tuners (trainable tokens, ...).
    """
    bad = []
    for name, module in model.named_modules():
        if not isinstance(module, BaseTunerLayer):
            continue
        if type(module) is not LoraLinear:
            bad.append(f"{name} ({type(module).__name__})")
        elif any(a in getattr(module, "lora_variant", {}) for a in module.active_adapters):
            bad.append(f"{name} (LoRA variant, e.g. DoRA)")
    return bad


def _check_supported(model: torch.nn.Module) -> None:
    bad = unsupported_lora_layers(model)
    if bad:
        raise ConfigError(
            "model.lora",
            "the vLLM weight sync merges plain LoRA linear layers only; unsupported: "
            f"{', '.join(bad[:5])}{' ...' if len(bad) > 5 else ''}. Use plain LoRA "
            "(no DoRA/quantization) or set grpo.use_vllm=false.",
        )


def merged_lora_base(layer: torch.nn.Module, which: str = "weight") -> torch.Tensor:
    """Out-of-place merge of one ``peft.tuners.lora.Linear``'s base ``weight`` or ``bias``.

    weight: ``(W.float() + Σ_a lora_delta(A_a, B_a, s_a, fan_in_fan_out)).to(W.dtype)``;
    bias (``lora_bias``): ``(b.float() + Σ_a s_a · b_{B,a}).to(b.dtype)``; sums over the layer's
    active adapters; a layer whose adapters are already merged returns its base tensor as is.
    """
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
    """``(vLLM name, tensor)`` for every parameter vLLM holds, LoRA layers merged out of place.

    Same names and order as TRL 1.16's PEFT iterator (``model.named_parameters()``, renamed by
    :func:`vllm_param_name` then ``fix_name``); a LoRA-adapted base weight/bias is replaced by
    :func:`merge_out_of_place` of it, everything else is yielded as ``param.data``. No parameter
    is written. ``merge=False`` yields the base tensors unmerged: the same names, dtypes and
    shapes, for a pass whose values are never used. Raises ConfigError for adapter layers listed
    by :func:`unsupported_lora_layers`.
    """
    _check_supported(model)
    lora_params = _lora_base_params(model) if merge else {}
    prefix = getattr(model, "prefix", "lora_")
    for peft_name, param in model.named_parameters():
        name = vllm_param_name(peft_name, prefix)
        if name is None:
            continue
        owner = lora_params.get(id(param))
        yield fix_name(name), (merged_lora_base(*owner) if owner else param.data)


# Engine parameters with no counterpart among the policy's, by name pattern, and why they need
# none: the only engine parameters ``engine_weight_check`` may leave uncompared. Rotary caches and
# the unquantised engine's attention scales are buffers (``named_buffers``), never parameters,
# and a tied head is the embedding's own parameter (listed once): none of these is listed here.
ENGINE_ONLY_PARAMS: tuple[tuple[str, str], ...] = (
    (
        r"\.(q|k|v|prob)_scale$",
        "scales of an fp8 KV cache / fp8 attention (quantised engines only): engine-side "
        "calibration constants, not policy weights",
    ),
)


@dataclass
class EngineCheck:
    """What ``engine_weight_check`` found, engine parameter by engine parameter."""

    total: int  # engine parameters (``named_parameters``)
    compared: int  # compared with the out-of-place merge of the policy
    mismatched: list[str]  # compared and different
    skipped: dict[str, str]  # name -> the ENGINE_ONLY_PARAMS reason it needs no comparison
    unchecked: list[str]  # neither compared nor skipped with a reason: a hole in the check

    @property
    def ok(self) -> bool:
        """Every engine parameter compared (or skipped for a stated reason), and all equal."""
        return (
            self.compared > 0
            and not self.mismatched
            and not self.unchecked
            and self.compared + len(self.skipped) == self.total
        )


@torch.no_grad()
def engine_weight_check(
    model: torch.nn.Module,
    engine_model: torch.nn.Module,
    packed: dict | None = None,
    expected: dict[str, torch.Tensor] | None = None,
) -> EngineCheck:
    """Compare every parameter of vLLM's model with the out-of-place merge of ``model``: the
    check that vLLM received the policy, not only that the base was left alone.

    ``engine_model``: vLLM's model (``llm.llm_engine.model_executor.driver_worker.model_runner.
    model``, TP = 1). vLLM fuses projections (``packed_modules_mapping``, e.g. ``qkv_proj`` =
    rows of ``q_proj``, ``k_proj``, ``v_proj`` in that order, ``gate_up_proj`` = ``gate_proj``,
    ``up_proj``); each fused tensor is compared with the concatenation of the merged parts. An
    engine tensor with extra rows (a vocabulary padded to a multiple of 64) is compared on the
    policy's rows, in the engine's dtype (the loader casts into it). An engine parameter whose
    name maps to no policy tensor is skipped only when ``ENGINE_ONLY_PARAMS`` names it (with the
    reason); any other is reported in ``unchecked``, which fails the check (``EngineCheck.ok``).
    ``expected``: the policy's ``{vLLM name: tensor}`` (default: ``out_of_place_named_params``).
    """
    if expected is None:
        expected = dict(out_of_place_named_params(model))
    packed = dict(getattr(engine_model, "packed_modules_mapping", {}) if packed is None else packed)
    check = EngineCheck(total=0, compared=0, mismatched=[], skipped={}, unchecked=[])
    for name, param in engine_model.named_parameters():
        check.total += 1
        owner, _, leaf = name.rpartition(".")
        prefix, _, module = owner.rpartition(".")
        parts = packed.get(module)
        keys = [f"{prefix}.{part}.{leaf}" for part in parts] if parts else [name]
        if not all(k in expected for k in keys):
            reason = next((why for pat, why in ENGINE_ONLY_PARAMS if re.search(pat, name)), None)
            if reason is None:
                check.unchecked.append(name)
            else:
                check.skipped[name] = reason
            continue
        want = torch.cat([expected[k] for k in keys]) if parts else expected[name]
        got = param.detach()
        if (
            got.dim() == want.dim()
            and got.shape[0] > want.shape[0]
            and got.shape[1:] == want.shape[1:]
        ):
            got = got[: want.shape[0]]
        check.compared += 1
        # the loader copies into the engine's own dtype (vLLM on a CPU runs an fp32 policy in
        # bf16): what must hold is the merge as that dtype represents it
        if not (got.shape == want.shape and torch.equal(got, want.to(got.device, got.dtype))):
            check.mismatched.append(name)
    return check


def engine_weight_mismatches(
    model: torch.nn.Module, engine_model: torch.nn.Module, packed: dict | None = None
) -> tuple[list[str], int]:
    """``(names of engine weights that differ from the out-of-place merge of ``model``, number
    compared)``: ``engine_weight_check`` without the accounting of uncompared parameters (a
    caller that wants every engine parameter checked uses ``engine_weight_check(...).ok``)."""
    check = engine_weight_check(model, engine_model, packed)
    return check.mismatched, check.compared


# --------------------------------------------------------------------------- TRL hook


class OutOfPlaceLoraVLLMGeneration(VLLMGeneration):
    """TRL's VLLMGeneration whose PEFT weight iterator merges out of place (module docstring).

    Only ``_iter_named_params`` is overridden; non-PEFT models and FSDP go to TRL's.

    Server mode walks the parameters on passes whose values nobody reads: TRL's first
    ``sync_weights`` collects ``(name, dtype, shape)`` (``_weight_metadata`` is still None), and the
    non-main ranks walk only to take part in the ZeRO-3 gathers while rank 0 streams. Those
    passes yield the unmerged base tensors (same names, dtypes, shapes) instead of computing an
    fp32 merge of every LoRA layer that would be thrown away (:meth:`values_unused`).
    """

    def values_unused(self) -> bool:
        """Whether the pass now starting is one whose tensors are never sent (see above)."""
        if self.mode != "server":
            return False  # colocate: every rank loads what it walks into its own engine
        return self._weight_metadata is None or not self.accelerator.is_main_process

    def _iter_named_params(self):
        model = self.model
        if not is_peft_model(model) or self._dist.is_fsdp:
            yield from super()._iter_named_params()
            return

        def fix_name(name: str) -> str:
            return self._fix_param_name_to_vllm(name, extra_prefixes=["modules_to_save.default."])

        merge = not self.values_unused()
        # ZeRO-3: gather everything at once, as TRL does (no-op otherwise); nothing is modified,
        # so the re-partition on exit keeps the shards as they were.
        with self._dist.gather_params(list(model.parameters())):
            yield from out_of_place_named_params(model, fix_name, merge=merge)


def install_out_of_place_lora_sync(trainer) -> None:
    """Make ``trainer.vllm_generation`` (built by GRPOTrainer.__init__) sync LoRA out of place.

    No-op without vLLM or without PEFT. Re-classing the built object (rather than building a second
    one) keeps TRL's engine and state; the subclass adds no attributes. Raises ConfigError early
    for adapter layers the merge cannot handle.
    """
    generation = getattr(trainer, "vllm_generation", None)
    if generation is None or not is_peft_model(generation.model):
        return
    if generation._dist.is_fsdp:
        logger.warning(
            "FSDP + LoRA + vLLM: TRL's in-place merge/unmerge weight sync is kept; it can drift "
            "a bf16 base (docs/distributed.md, 'LoRA weight sync'). Use DDP or DeepSpeed ZeRO."
        )
        return
    _check_supported(generation.model)
    generation.__class__ = OutOfPlaceLoraVLLMGeneration

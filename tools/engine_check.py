"""Did vLLM receive the policy? Every engine parameter compared with the out-of-place merge of the
policy (``rlsr.method.weight_sync``): the check of ``scripts/gpu_acceptance.py`` and
``tests/test_vllm_cpu.py``, not something a training run needs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch

from rlsr.method.weight_sync import out_of_place_named_params

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
    """Compare every parameter of vLLM's model (TP = 1) with the out-of-place merge of ``model``
    (``expected``: its ``{vLLM name: tensor}``): that vLLM received the policy. A fused tensor
    (``packed_modules_mapping``: ``qkv_proj`` = q, k, v rows) is compared with its parts
    concatenated, a padded vocabulary on the policy's rows, in the engine's dtype. An engine
    parameter that maps to no policy tensor fails the check unless ``ENGINE_ONLY_PARAMS`` names
    it."""
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

"""The distributed launch a process is part of (DDP, FSDP2, DeepSpeed ZeRO-2/3), what it rules out.

``accelerate launch --config_file recipes/accelerate/X.yaml`` does not hand the YAML file to the
training script: it exports the settings as environment variables (accelerate 1.15,
``accelerate/utils/launch.py``), and accelerate's state objects read them back when the trainer
starts. ``launch_from_env`` reads the same variables, so ``train.py`` knows the launch *before*
any model is loaded.

``launch_problems`` lists the combinations that the pinned stack (TRL 1.16, transformers 5.17,
accelerate 1.15, PEFT 0.21) refuses or silently changes, as ``(field, message)``
(docs/distributed.md, "Distributed launch", gives the evidence for each rule). What the machine
offers (``cuda_available``, ``module_available``, ``resolve_attn_implementation``) is probed here
too, so a config check asks it without loading anything; tests that plan a GPU launch on a CPU
machine replace these probes only.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "Launch",
    "launch_from_env",
    "launch_problems",
    "WORLD_SIZE_VARIABLES",
    "world_size_from_env",
    "module_available",
    "cuda_available",
    "flash_attn_loads",
    "resolve_attn_implementation",
]


@dataclass(frozen=True)
class Launch:
    """The distributed launch this process is part of: ``name`` is ``single`` (one process),
    ``ddp``, ``fsdp`` or ``deepspeed``; the other fields are FSDP's or DeepSpeed's settings
    (``zero_stage`` None when unreadable)."""

    name: str
    fsdp_version: int | None = None
    zero_stage: int | None = None
    state_dict_type: str | None = None
    activation_checkpointing: bool = False
    zero3_save_16bit_model: bool = False

    @property
    def label(self) -> str:
        """Short human name: ``DDP``, ``FSDP2``, ``ZeRO-3``, ..."""
        if self.name == "fsdp":
            return f"FSDP{self.fsdp_version or ''}"
        if self.name == "deepspeed":
            return f"ZeRO-{self.zero_stage}" if self.zero_stage is not None else "DeepSpeed"
        return {"ddp": "DDP", "single": "one process"}.get(self.name, self.name)


def _flag(value: Any) -> bool:
    return str(value).strip().lower() in ("1", "true", "yes")


def _int_or_none(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _zero_stage_of_json(path: str | None) -> tuple[int | None, bool]:
    """(stage, gather 16-bit weights on save) from a DeepSpeed JSON config file, if readable."""
    if not path:
        return None, False
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None, False
    zero = data.get("zero_optimization") or {}
    gather = zero.get("stage3_gather_16bit_weights_on_model_save", False)
    return _int_or_none(zero.get("stage")), _flag(gather)


def launch_from_env(env: Mapping[str, str] | None = None) -> Launch:
    """The launch that ``accelerate launch`` (or torchrun) set up for this process."""
    env = os.environ if env is None else env
    if _flag(env.get("ACCELERATE_USE_DEEPSPEED", "false")):
        stage = _int_or_none(env.get("ACCELERATE_DEEPSPEED_ZERO_STAGE"))
        save16 = _flag(env.get("ACCELERATE_DEEPSPEED_ZERO3_SAVE_16BIT_MODEL", "false"))
        config_file = env.get("ACCELERATE_DEEPSPEED_CONFIG_FILE")
        if config_file and config_file.lower() != "none":
            file_stage, file_save16 = _zero_stage_of_json(config_file)
            stage = file_stage if file_stage is not None else stage
            save16 = file_save16 or save16
        return Launch("deepspeed", zero_stage=stage, zero3_save_16bit_model=save16)
    if _flag(env.get("ACCELERATE_USE_FSDP", "false")):
        return Launch(
            "fsdp",
            fsdp_version=_int_or_none(env.get("FSDP_VERSION", "1")) or 1,
            # accelerate's own default when the variable is missing
            state_dict_type=env.get("FSDP_STATE_DICT_TYPE", "SHARDED_STATE_DICT"),
            activation_checkpointing=_flag(env.get("FSDP_ACTIVATION_CHECKPOINTING", "false")),
        )
    return Launch("ddp" if world_size_from_env(env) > 1 else "single")


# Processes of this launch, read as accelerate reads them: torchrun and the GPU launchers of
# accelerate set WORLD_SIZE; an MPI launch (accelerate launch --cpu --mpirun_hostfile, mpirun)
# sets only its own variable, and accelerate writes WORLD_SIZE later, when the group starts.
WORLD_SIZE_VARIABLES = ("WORLD_SIZE", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE")


def world_size_from_env(env: Mapping[str, str] | None = None) -> int:
    """Number of processes of this launch: the first of ``WORLD_SIZE_VARIABLES`` set, else 1
    (the one reader: the run plan and ``launch_from_env`` both ask it)."""
    env = os.environ if env is None else env
    for name in WORLD_SIZE_VARIABLES:
        value = env.get(name)
        if value:
            try:
                return max(1, int(value))
            except ValueError:
                return 1
    return 1


def module_available(name: str) -> bool:
    """True when the package ``name`` is installed (found without importing it)."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def cuda_available() -> bool:
    import torch  # heavy: only when a check asks whether a GPU is in use

    return torch.cuda.is_available()


def flash_attn_loads() -> bool:
    """True when ``flash_attn`` is installed *and* imports: a build for another torch is found
    by ``find_spec`` but fails to import (undefined symbol), which would crash the model load."""
    if not module_available("flash_attn"):
        return False
    try:
        import flash_attn  # noqa: F401  (heavy optional dependency: only to check it loads)
    except Exception as err:  # ImportError, OSError (undefined symbol), RuntimeError
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        logging.getLogger("rlsr").warning(
            "[rlsr] flash_attn is installed but does not import (%s); using sdpa. Rebuild it "
            "for this torch (pip install flash-attn --no-build-isolation) to use FlashAttention-2.",
            first,
        )
        return False
    return True


def resolve_attn_implementation(requested: str, *, on_gpu: bool | None = None) -> str:
    """``auto`` -> ``flash_attention_2`` when a GPU is present and flash-attn is installed and
    imports (``flash_attn_loads``), else ``sdpa``."""
    if requested != "auto":
        return requested
    gpu = cuda_available() if on_gpu is None else on_gpu
    return "flash_attention_2" if gpu and flash_attn_loads() else "sdpa"


def launch_problems(
    launch: Launch,
    grpo: Mapping[str, Any],
    *,
    deepspeed_installed: bool | None = None,
    lora: bool = True,
) -> list[tuple[str, str]]:
    """``(field, message)`` for each setting that cannot work with ``launch``; empty when fine.
    ``grpo``: the GRPOConfig fields (missing: TRL's defaults); ``lora``: ``model.lora.enabled``."""
    problems: list[tuple[str, str]] = []
    if launch.name not in ("fsdp", "deepspeed"):
        return problems
    where = "the accelerate config of this launch"
    if grpo.get("use_cpu", False):
        problems.append(
            (
                "grpo.use_cpu",
                f"{launch.label} from {where} needs GPU processes: accelerate 1.15 turns "
                "FSDP/DeepSpeed on only for GPU process groups, and with use_cpu=true it silently "
                "trains plain DDP instead. Use recipes/accelerate/ddp.yaml (or torchrun) on CPU, "
                "or drop grpo.use_cpu on GPUs.",
            )
        )
    if launch.name == "fsdp":
        if lora and grpo.get("use_vllm", False):
            # accelerate 1.15 upcasts only trainable parameters, so TRL's in-place merge and
            # unmerge drift the frozen bf16 base; the out-of-place sync does not cover FSDP yet
            problems.append(
                (
                    "grpo.use_vllm",
                    f"FSDP from {where} with LoRA and vLLM rollouts: TRL's weight sync merges the "
                    "adapter into the sharded base and unmerges it in place, which drifts a bf16 "
                    "base at every sync (docs/distributed.md, 'LoRA weight sync'). Use "
                    "recipes/accelerate/ddp.yaml, zero2.yaml or zero3.yaml (base kept "
                    "bit-identical), or FSDP with grpo.use_vllm=false, or a full fine-tune "
                    "(model.lora.enabled=false).",
                )
            )
        if launch.state_dict_type != "FULL_STATE_DICT":
            problems.append(
                (
                    "fsdp_config.fsdp_state_dict_type",
                    f"{launch.state_dict_type} in {where}: with it transformers 5.17's save_model "
                    "writes no adapter/model files (only DCP shards in checkpoints), so the final "
                    "adapter that `rlsr evaluate` loads is missing. Set fsdp_state_dict_type: "
                    "FULL_STATE_DICT (recipes/accelerate/fsdp.yaml).",
                )
            )
        if launch.activation_checkpointing and grpo.get("gradient_checkpointing", True):
            problems.append(
                (
                    "grpo.gradient_checkpointing",
                    "FSDP's fsdp_activation_checkpointing and grpo.gradient_checkpointing are both "
                    "on; transformers refuses that pair when the trainer starts. Set "
                    "grpo.gradient_checkpointing=false (FSDP checkpoints activations itself) or "
                    "fsdp_activation_checkpointing: false.",
                )
            )
    if launch.name == "deepspeed":
        installed = (
            module_available("deepspeed") if deepspeed_installed is None else deepspeed_installed
        )
        if not installed:
            problems.append(
                (
                    "deepspeed",
                    f"{where} selects {launch.label} but deepspeed is not installed; "
                    "`pip install 'rlsr[deepspeed]'` or launch with "
                    "--config_file recipes/accelerate/ddp.yaml.",
                )
            )
        if launch.zero_stage == 3 and not launch.zero3_save_16bit_model:
            problems.append(
                (
                    "deepspeed_config.zero3_save_16bit_model",
                    f"ZeRO-3 without zero3_save_16bit_model in {where}: transformers then saves "
                    "only DeepSpeed's sharded checkpoint and no adapter/model that `rlsr "
                    "evaluate` can load. Set zero3_save_16bit_model: true "
                    "(recipes/accelerate/zero3.yaml).",
                )
            )
    return problems

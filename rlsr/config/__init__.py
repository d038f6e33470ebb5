"""Training configuration: typed dataclasses built from the Hydra tree, validated before loading.

Schema (top-level keys of ``recipes/config.yaml``)::

    model:  {name_or_path, dtype, attn_implementation, trust_remote_code, lora: {enabled, r, alpha,
             dropout, target_modules}}
    data:   {task, path, split, system_prompt, limit, max_prompt_length, verifier}
    method: {name: rlsr|rlcr|rlvr|sft, plugin, format_weight, method_weight,
             correct_requires_format, correct_scale, weight_cap, max_coverage, label, confidence: verbalized|logprob,
             evaluate: {<evaluation protocol field>: value}}
    grpo:   any field of trl.GRPOConfig (num_generations, per_device_train_batch_size, ...)
    sft:    any field of trl.SFTConfig (method=sft only; recipes/method/sft.yaml)
    heldout: {every, at_end, at_start, tasks, tasks_for, variants, split, limit, data_path, verifiers, backend,
             judge_base_url, judge_model, judge_timeout, judge_max_retries,
             judge_max_answer_chars, server_tokens_per_s, and every field of
             rlsr.eval_protocol.EvalProtocol
             (max_new_tokens, temperature, scorers, consistency_k, ...; null: unset)}: held-out
             evaluation during training (``HeldOutSettings``)
    pool_size: completions ranked together per optimizer step (null: from grpo.*)
    pool_log: {every, max_chars}: every training pool on disk (``PoolLogSettings``)
    tasks_dir: a folder of task files or one file (or a list): your own tasks (docs/tasks.md)
    output_dir, seed, resume: auto|never|<checkpoint path>

One pool = one optimizer step (``resolve_pool``): RLSR ranks the B x G completions of one
optimizer step together, so settings that make a generation span several optimizer steps or an
optimizer step hold several generations (``grpo.steps_per_generation``,
``grpo.generation_batch_size``) are rejected. ``pool_size`` states the pool as intent; the
gradient accumulation is then derived from the real world size at start-up.

``TrainSettings.validate`` checks every section without touching a model or a dataset (each
section's own ``validate``, declared beside its fields) and raises ``ConfigError`` whose message
names the offending field and the fix; the method's own checks live in ``rlsr.methods`` (a
reward method's registry entry; ``sft``'s own), which also names the section holding its
trainer's arguments (``grpo`` or ``sft``: ``args_section``). ``rlsr.run_plan.plan_run`` runs
both once per launch and derives the run plan (``train.py`` prints the message and exits with
status 2). This module sits below the method registry and the trainer: it knows nothing about
individual methods.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlsr.checks import ConfigError, closest_hint, is_number
from rlsr.checks import check as _check
from rlsr.checks import is_int as _is_int
from rlsr.config.heldout import (
    ENGINE_BACKENDS,
    HELDOUT_BACKENDS,
    HeldOutSettings,
    ResolvedHeldOut,
    declared_variants,
    heldout_protocol,
    protocol_variant,
    resolve_heldout,
)
from rlsr.config.hydra_args import describe_hydra_error, force_add_overrides
from rlsr.config.sections import (
    CONFIDENCE_SOURCES,
    DataSettings,
    LoraSettings,
    MethodSettings,
    ModelSettings,
    PoolLogSettings,
    PoolPlan,
    resolve_model_path,
    resolve_pool,
    training_verifier,
)
from rlsr.config.trainer_args import (
    TRAINER_SECTIONS,
    check_grpo,
    check_launch,
    check_sft,
    check_vllm_length,
    grpo_get,
)
from rlsr.data import TaskError, load_env_tasks, load_tasks
from rlsr.launch import world_size_from_env
from rlsr.prompts import NO_SYSTEM_PROMPT

__all__ = [
    "ConfigError",
    "CONFIDENCE_SOURCES",
    "NO_SYSTEM_PROMPT",
    "TRAINER_SECTIONS",
    "LoraSettings",
    "ModelSettings",
    "DataSettings",
    "MethodSettings",
    "HeldOutSettings",
    "PoolLogSettings",
    "HELDOUT_BACKENDS",
    "TrainSettings",
    "from_dict",
    "vllm_context_length",
    "closest_hint",
    "is_number",
    "PoolPlan",
    "resolve_pool",
    "world_size_from_env",
    "resolve_model_path",
    "resolve_resume",
    "resolve_heldout",
    "declared_variants",
    "heldout_protocol",
    "protocol_variant",
    "ResolvedHeldOut",
    "register_tasks",
    "training_verifier",
    "force_add_overrides",
    "describe_hydra_error",
]


# The largest seed transformers' set_seed accepts: it seeds numpy, whose seeds are 32-bit.
MAX_SEED = 2**32 - 1


@dataclass
class TrainSettings:
    model: ModelSettings = field(default_factory=ModelSettings)
    data: DataSettings = field(default_factory=DataSettings)
    method: MethodSettings = field(default_factory=MethodSettings)
    grpo: dict[str, Any] = field(default_factory=dict)
    pool_size: int | None = None
    sft: dict[str, Any] = field(default_factory=dict)  # trl.SFTConfig fields (method=sft)
    heldout: HeldOutSettings = field(default_factory=HeldOutSettings)
    pool_log: PoolLogSettings = field(default_factory=PoolLogSettings)
    # Task files (docs/tasks.md): a folder of *.yaml files, one file, or a list of them; their
    # tasks are registered before data.task / heldout.tasks are looked up.
    tasks_dir: Any = None
    output_dir: str = "runs/default"
    seed: int = 42
    resume: str = "auto"

    def validate(self, *, here: bool = True, trainer_section: str = "grpo") -> None:
        """Check the top-level fields, then each section with its own ``validate`` (declared
        beside its fields) and the trainer section ``trainer_section`` (``grpo`` or ``sft``:
        ``rlsr.methods.args_section``; only that one is checked) with
        ``rlsr.config.trainer_args``. Reads the settings only, loads no model or dataset; raises
        ``ConfigError`` naming the field and the fix. The method's own checks are its registry
        entry's (``rlsr.methods.check_method``); ``rlsr.run_plan.plan_run`` runs both.
        ``here=False``: for a launch on another machine (a Slurm job planned on the login node):
        what this machine offers (a GPU, vLLM, flash-attn, accelerate's distributed launch, the
        files named by ``data.path`` / ``heldout.data_path`` / ``resume``) is not asked."""
        if trainer_section not in TRAINER_SECTIONS:
            raise ValueError(
                f"trainer_section must be one of {TRAINER_SECTIONS}; got {trainer_section!r}."
            )
        _check(
            isinstance(self.output_dir, str) and self.output_dir.strip() != "",
            "output_dir",
            "must be a folder path, e.g. output_dir=runs/hotpot-rlsr.",
        )
        _check(
            _is_int(self.seed) and 0 <= self.seed <= MAX_SEED,
            "seed",
            f"must be an integer in 0..{MAX_SEED} (2**32 - 1: numpy's seed range, which "
            f"transformers' set_seed uses); got {self.seed!r}.",
        )
        resume = self.resume
        _check(
            isinstance(resume, str) and resume != "",
            "resume",
            "choose 'auto' (newest checkpoint in output_dir, if any), 'never', or a checkpoint "
            "path.",
        )
        if here and resume not in ("auto", "never"):
            _check(
                (Path(resume) / "trainer_state.json").is_file(),
                "resume",
                f"{resume!r} is not a checkpoint folder (no trainer_state.json); use resume=auto, "
                "resume=never or the path of a checkpoint-<step> folder.",
            )
        self.method.validate()
        self.model.validate(here=here)
        self.data.validate(here=here)
        self.heldout.validate()
        if trainer_section == TRAINER_SECTIONS[0]:
            check_grpo(self.grpo, here=here)
            check_vllm_length(self.grpo, self.data.max_prompt_length)
            if here:
                check_launch(self.grpo, self.model.lora.enabled)
        else:
            check_sft(self.sft, here=here)
        self.pool_log.validate()


# --------------------------------------------------------------------------- building


_NESTED = {
    ("TrainSettings", "model"): ModelSettings,
    ("TrainSettings", "data"): DataSettings,
    ("TrainSettings", "method"): MethodSettings,
    ("TrainSettings", "heldout"): HeldOutSettings,
    ("TrainSettings", "pool_log"): PoolLogSettings,
    ("ModelSettings", "lora"): LoraSettings,
}


def _build(cls, values: dict | None, prefix: str):
    """Instantiate dataclass ``cls`` from ``values``, rejecting unknown keys by dotted name."""
    known = {f.name for f in dataclasses.fields(cls)}
    kwargs = {}
    for key, value in dict(values or {}).items():
        if key not in known:
            raise ConfigError(
                f"{prefix}{key}",
                f"unknown key.{closest_hint(key, known)} Known keys: {sorted(known)}.",
            )
        if value == "???":  # OmegaConf's mandatory marker, left unset by the recipe
            raise ConfigError(
                f"{prefix}{key}", f"required but not set; pass {prefix}{key}=<value>."
            )
        nested = _NESTED.get((cls.__name__, key))
        if nested is not None:
            if value is not None and not isinstance(value, dict):
                raise ConfigError(f"{prefix}{key}", f"must be a mapping; got {value!r}.")
            value = _build(nested, value, f"{prefix}{key}.")
        kwargs[key] = value
    return cls(**kwargs)


def from_dict(values: dict) -> TrainSettings:
    """Build ``TrainSettings`` from a plain dict (e.g. ``OmegaConf.to_container(cfg, resolve=True)``).

    Keys that are not part of the schema raise ``ConfigError`` naming the key and the closest
    field. Top-level keys starting with ``_`` or named ``recipe_name`` are bookkeeping of the
    recipes and are ignored.
    """
    values = {k: v for k, v in dict(values).items() if not k.startswith("_") and k != "recipe_name"}
    settings = _build(TrainSettings, values, "")
    for section, cls in (("grpo", "GRPOConfig"), ("sft", "SFTConfig")):
        if getattr(settings, section) is None:
            setattr(settings, section, {})
        if not isinstance(getattr(settings, section), dict):
            raise ConfigError(
                section, f"must be a mapping of {cls} fields; got {getattr(settings, section)!r}."
            )
    return settings


# --------------------------------------------------------------------------- helpers


def vllm_context_length(cfg: TrainSettings, heldout: ResolvedHeldOut | None) -> int | None:
    """vLLM's context per sequence: ``data.max_prompt_length + grpo.max_completion_length``, or,
    when the held-out evaluation runs on a vLLM engine (``heldout``, the resolved plan: the
    colocated engine, or TRL's server, whose ``--max-model-len`` slurm/resolve_config.py takes
    from here),
    ``data.max_prompt_length +`` the larger of the completion length and what a held-out answer
    needs beyond its prompt (``ResolvedHeldOut.answer_tokens``: the answer plus the two Sec. C.3
    fallbacks), so a held-out prompt as long as a training prompt is never cut by the engine.

    Without it vLLM reserves the model's whole context (131,072 tokens for Llama-3.1-8B, ~16 GiB
    of KV cache per sequence slot) and the colocated engine may not start. (The KV cache itself is
    sized by ``grpo.vllm_gpu_memory_utilization``, not by this length.) None when the prompt limit
    is not set (then vLLM's default applies) or when ``grpo.vllm_max_model_length`` is set.
    """
    if cfg.grpo.get("vllm_max_model_length") is not None:
        return None
    prompt = cfg.data.max_prompt_length
    completion = grpo_get(cfg.grpo, "max_completion_length")
    if prompt is None or completion is None:
        return None
    beyond = int(completion)
    if heldout is not None and heldout.backend in ENGINE_BACKENDS:  # colocated or TRL's server
        beyond = max(beyond, heldout.answer_tokens)
    return int(prompt) + beyond


def resolve_resume(resume: str, output_dir: str) -> str | None:
    """Checkpoint to resume from: ``auto`` -> newest ``checkpoint-*`` in output_dir (or None);
    ``never`` -> None; anything else is a checkpoint path."""
    if resume == "never":
        return None
    if resume == "auto":
        if not Path(output_dir).is_dir():
            return None
        from transformers.trainer_utils import get_last_checkpoint

        return get_last_checkpoint(output_dir)
    return resume


# --------------------------------------------------------------------------- command line


# --------------------------------------------------------------------------- validation


def register_tasks(cfg: TrainSettings) -> list[str]:
    """Load the tasks of ``$RLSR_TASKS_PATH`` and ``tasks_dir`` (docs/tasks.md) into the task
    registry, so ``data.task`` / ``heldout.tasks`` and a task's prompt name resolve: the load
    step before planning (``rlsr.run_plan.plan_run``), not a check. Idempotent (a task already
    registered from the same file is kept). A task file that is wrong raises ``ConfigError`` on
    ``tasks_dir`` naming the file, the key and the fix."""
    value = cfg.tasks_dir
    _check(
        value is None
        or isinstance(value, str)
        or (isinstance(value, list | tuple) and all(isinstance(v, str) for v in value)),
        "tasks_dir",
        f"must be a folder of task files, a task file, or a list of them; got {value!r}.",
    )
    try:
        return load_env_tasks() + load_tasks(value)
    except TaskError as err:
        raise ConfigError("tasks_dir", str(err)) from None

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
             rlsr.run.eval_protocol.EvalProtocol
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
names the offending field and the fix; the method's own checks live in ``rlsr.method.methods`` (a
reward method's registry entry; ``sft``'s own), which also names the section holding its
trainer's arguments (``grpo`` or ``sft``: ``args_section``). ``rlsr.method.run_plan.plan_run`` runs
both once per launch and derives the run plan (``train.py`` prints the message and exits with
status 2). This module sits below the method registry and the trainer: it knows nothing about
individual methods.
"""

from __future__ import annotations

from rlsr.config.heldout import (
    ENGINE_BACKENDS,
    HELDOUT_BACKENDS,
    HeldOutSettings,
    declared_variants,
    heldout_protocol,
    resolve_heldout,
)
from rlsr.config.hydra_args import describe_hydra_error, force_add_overrides
from rlsr.config.sections import (
    CONFIDENCE_SOURCES,
    MAX_SEED,
    DataSettings,
    LoraSettings,
    MethodSettings,
    ModelSettings,
    PoolLogSettings,
    PoolPlan,
    TrainSettings,
    from_dict,
    register_tasks,
    resolve_model_path,
    resolve_pool,
    resolve_resume,
    training_verifier,
    vllm_context_length,
)
from rlsr.config.trainer_args import TRAINER_SECTIONS
from rlsr.core.checks import ConfigError, closest_hint, is_number
from rlsr.core.launch import world_size_from_env
from rlsr.core.prompts import NO_SYSTEM_PROMPT

__all__ = [
    "ConfigError",
    "CONFIDENCE_SOURCES",
    "NO_SYSTEM_PROMPT",
    "TRAINER_SECTIONS",
    "MAX_SEED",
    "LoraSettings",
    "ModelSettings",
    "DataSettings",
    "MethodSettings",
    "HeldOutSettings",
    "PoolLogSettings",
    "ENGINE_BACKENDS",
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
    "register_tasks",
    "training_verifier",
    "force_add_overrides",
    "describe_hydra_error",
]

"""Training configuration: typed dataclasses built from the Hydra tree (``recipes/config.yaml``;
sections ``model``, ``data``, ``method``, ``grpo``, ``sft``, ``heldout``, ``pool_log`` and the
top-level ``pool_size``, ``tasks_dir``, ``output_dir``, ``seed``, ``resume``; docs/training.md).

``from_dict`` rejects unknown keys; ``TrainSettings.validate`` checks every section with its own
``validate`` (declared beside its fields) without touching a model or a dataset, and raises
``ConfigError`` naming the field and the fix. A method's own checks live in its
``rlsr.method.methods`` entry; ``rlsr.method.run_plan.plan_run`` runs both once per launch. This
package sits below the method registry: it knows nothing about individual methods.

One pool = one optimizer step (``resolve_pool``): RLSR ranks the B x G completions of one
optimizer step together, so settings that make a generation span several optimizer steps or an
optimizer step hold several generations are rejected.
"""

from __future__ import annotations

from rlsr.config.heldout import (
    ENGINE_BACKENDS,
    HeldOutSettings,
    declared_variants,
    heldout_protocol,
    resolve_heldout,
)
from rlsr.config.hydra_args import describe_hydra_error, force_add_overrides
from rlsr.config.sections import (
    CONFIDENCE_SOURCES,
    MAX_SEED,
    MethodSettings,
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
from rlsr.core.checks import ConfigError
from rlsr.core.launch import world_size_from_env

__all__ = [
    "ConfigError",
    "CONFIDENCE_SOURCES",
    "TRAINER_SECTIONS",
    "MAX_SEED",
    "MethodSettings",
    "HeldOutSettings",
    "PoolLogSettings",
    "ENGINE_BACKENDS",
    "TrainSettings",
    "from_dict",
    "vllm_context_length",
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

"""The run plan: what one launch will do, decided once before anything loads, then passed down.

``plan_from_config(config)`` is the one door (``train.py``, the toy, ``slurm/resolve_config.py``,
the GPU acceptance script): the composed config becomes typed settings, then ``plan_run`` loads
the tasks they name, runs the method's and every section's checks, and derives each answer once
(``RunPlan``'s fields). The trainer, the held-out evaluator and the run summary read the plan, so
no part of a launch derives any of these a second time.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

from omegaconf import OmegaConf

from rlsr.config import (
    TRAINER_SECTIONS,
    HeldOutSettings,
    PoolLogSettings,
    PoolPlan,
    TrainSettings,
    declared_variants,
    from_dict,
    heldout_protocol,
    register_tasks,
    resolve_heldout,
    resolve_pool,
    vllm_context_length,
    world_size_from_env,
)
from rlsr.method.methods import Method, args_section, check_method
from rlsr.run.eval_protocol import EvalProtocol, protocol_flags

__all__ = [
    "RunPlan",
    "VLLM_MODES",
    "gpu_settings",
    "plan_from_config",
    "plan_run",
    "trainer_arguments",
]

# The vLLM engine a launcher gives the trainer (slurm/train.slurm: a server on a node of its
# own, an engine colocated in each training process, or none), as the grpo settings it sets.
VLLM_MODES: dict[str, dict] = {
    "server": {"use_vllm": True, "vllm_mode": "server"},
    "colocate": {"use_vllm": True, "vllm_mode": "colocate"},
    "none": {"use_vllm": False},
}


@dataclass(frozen=True)
class RunPlan:
    """One launch's plan (``plan_run``): every field is an answer, derived once.

    ``method`` is None and ``section`` ``sft`` for method=sft (no reward method); ``pool`` (one
    optimizer step's pool and its accumulation) is None for it too. ``heldout`` is None when
    ``heldout.every`` is 0. ``vllm_max_model_length``: ``grpo.vllm_max_model_length`` when set,
    else ``rlsr.config.vllm_context_length`` (None: vLLM's default). ``trainer_args``: the TRL
    config's keyword arguments, ``attn_implementation=auto`` unresolved. ``protocols``: the run's
    evaluation protocol (key None) and each named variant's. ``pool_log``: off for a method
    without a reward pool. ``notes``: what the plan decided that the settings did not say.
    """

    settings: TrainSettings
    method: Method | None
    section: str
    world_size: int
    pool: PoolPlan | None
    heldout: HeldOutSettings | None
    vllm_max_model_length: int | None
    trainer_args: dict
    protocols: dict[str | None, EvalProtocol]
    pool_log: PoolLogSettings
    notes: tuple[str, ...] = ()

    @property
    def variants(self) -> tuple[str, ...]:
        """The named protocol variants the recipe declares."""
        return tuple(name for name in self.protocols if name is not None)

    def protocol(self, variant: str | None = None) -> EvalProtocol:
        """The run's evaluation protocol with the named ``variant`` on top; an undeclared variant
        raises ``ConfigError`` naming the declared ones."""
        if variant in self.protocols:
            return self.protocols[variant]
        return heldout_protocol(self.settings, self.section, variant)  # raises: not declared

    def evaluate_flags(self, variant: str | None = None) -> list[str]:
        """``rlsr evaluate`` flags of ``protocol(variant)``, with ``--protocol-variant NAME``."""
        flags = protocol_flags(self.protocol(variant))
        return flags + (["--protocol-variant", variant] if variant else [])


def gpu_settings(grpo: Mapping) -> list[str]:
    """The ``grpo`` settings that ask for a GPU, as ``field=value``: ``use_cpu`` false (TRL's
    default), ``bf16`` / ``fp16`` true. The Slurm scripts refuse them on CPU nodes."""
    found = []
    if not grpo.get("use_cpu", False):
        found.append("grpo.use_cpu=false")
    found += [f"grpo.{key}=true" for key in ("bf16", "fp16") if grpo.get(key, False)]
    return found


def _pool_log(cfg: TrainSettings, method: Method | None) -> tuple[PoolLogSettings, tuple[str, ...]]:
    """The pool files the run writes: none, with a note, for a method without a reward pool."""
    if method is not None or not cfg.pool_log.every:
        return cfg.pool_log, ()
    note = (
        f"[rlsr] pool_log.every={cfg.pool_log.every} does not apply to "
        f"method={cfg.method.name}: it trains on fixed answers and has no reward pool to "
        "write; no pools/ files."
    )
    return dataclasses.replace(cfg.pool_log, every=0), (note,)


def trainer_arguments(
    cfg: TrainSettings,
    section: str,
    method: Method | None,
    pool: PoolPlan | None,
    vllm_max_model_length: int | None,
) -> dict:
    """Keyword arguments for the method's TRL config: section ``section`` plus what rlsr manages
    (``output_dir``, ``seed``, model init kwargs, ``reward_weights``; for GRPO the accumulation
    that makes the pool and, with vLLM, the engine's context)."""
    kwargs = dict(getattr(cfg, section))
    if pool is not None:
        kwargs["gradient_accumulation_steps"] = pool.accumulation
        if kwargs.get("use_vllm") and vllm_max_model_length is not None:
            kwargs["vllm_max_model_length"] = vllm_max_model_length
    kwargs["output_dir"] = cfg.output_dir
    kwargs["seed"] = cfg.seed
    if method is not None:
        kwargs["reward_weights"] = [w for _, w in method.columns]
    kwargs["model_init_kwargs"] = {
        "dtype": cfg.model.dtype,
        "attn_implementation": cfg.model.attn_implementation,
        "trust_remote_code": cfg.model.trust_remote_code,
    }
    kwargs["trust_remote_code"] = cfg.model.trust_remote_code
    return kwargs


def plan_run(cfg: TrainSettings, *, world_size: int | None = None, here: bool = True) -> RunPlan:
    """Load the tasks ``cfg`` names, check it without loading a model or dataset and derive the
    plan (``ConfigError`` naming field and fix). ``world_size``: default ``$WORLD_SIZE``, else
    1; ``here=False``: the launch runs on another machine."""
    register_tasks(cfg)
    method = check_method(cfg)
    section = args_section(cfg.method)
    cfg.validate(here=here, trainer_section=section)
    ws = world_size_from_env() if world_size is None else world_size
    pool = resolve_pool(cfg.grpo, cfg.pool_size, ws) if section == TRAINER_SECTIONS[0] else None
    heldout = resolve_heldout(cfg, section, here=here)
    protocols = {None: heldout_protocol(cfg, section)}
    for variant in declared_variants(cfg):  # a named variant must give a valid protocol too
        protocols[variant] = heldout_protocol(cfg, section, variant)
    stated = cfg.grpo.get("vllm_max_model_length")
    length = vllm_context_length(cfg, heldout) if stated is None else stated
    args = trainer_arguments(cfg, section, method, pool, length)
    pool_log, notes = _pool_log(cfg, method)
    return RunPlan(
        cfg, method, section, ws, pool, heldout, length, args, protocols, pool_log, notes
    )


def plan_from_config(
    config,
    *,
    world_size: int | None = None,
    vllm_mode: str | None = None,
    here: bool = True,
) -> RunPlan:
    """The run plan of a composed Hydra tree (or its plain mapping). ``vllm_mode``
    (``VLLM_MODES``): plan with the vLLM engine a launcher gives the run; None: as configured."""
    values = (
        OmegaConf.to_container(config, resolve=True)
        if OmegaConf.is_config(config)
        else dict(config)
    )
    values.pop("hydra", None)
    if vllm_mode is not None:
        if vllm_mode not in VLLM_MODES:
            raise ValueError(f"vllm_mode must be one of {sorted(VLLM_MODES)}; got {vllm_mode!r}.")
        grpo = values.get("grpo")
        if grpo is None or isinstance(grpo, dict):  # else from_dict names the bad section
            values["grpo"] = {**(grpo or {}), **VLLM_MODES[vllm_mode]}
    return plan_run(from_dict(values), world_size=world_size, here=here)

"""The run plan: what one launch will do, decided once before anything loads, then passed down.

``plan_from_config(config)`` is the one door: the composed Hydra config (``train.py``'s, the
toy's, ``slurm/resolve_config.py``'s, the GPU acceptance script's) becomes typed settings
(``rlsr.config.from_dict``), then ``plan_run``:

1. load: the tasks the settings name (``rlsr.config.register_tasks``), so their rows and
   prompts resolve; idempotent, and the only write of planning (to the task registry);
2. check, reading the settings only: the method's checks (``rlsr.method.methods.check_method``),
   every section's (``TrainSettings.validate``: each settings dataclass's own ``validate``);
3. derive, once: the method bound to its settings, one optimizer step's pool and its gradient
   accumulation, the held-out evaluation plan, the evaluation protocol and each named variant's,
   the vLLM context, the trainer's arguments (``trainer_arguments``), and the pool log the run
   writes (off for a method without a reward pool: planned here, the settings are never
   changed).

``rlsr.train.training`` receives the plan and builds the trainer and the held-out evaluator from it
(resolving only ``model.attn_implementation=auto`` on the machine that trains), ``train.py``'s end-of-run summary reads it, and ``slurm/resolve_config.py`` prints its
fields for the Slurm scripts, so no part of a launch derives any of these a second time (and
none can disagree with another).
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

    Parameters:
        settings (`TrainSettings`): the checked settings, as given (planning never changes them).
        method (`Method` or `None`): the registry entry bound to ``settings.method``; None for
            ``method=sft``, which trains on fixed answers (no reward method).
        section (`str`): the section holding the trainer's arguments (``grpo`` or ``sft``).
        world_size (`int`): processes of this launch (``$WORLD_SIZE``, else 1, unless given).
        pool (`PoolPlan` or `None`): one optimizer step's pool and its gradient accumulation
            (GRPO methods; None for a supervised method).
        heldout (`HeldOutSettings` or `None`): the held-out evaluation, resolved; None
            when ``heldout.every`` is 0.
        vllm_max_model_length (`int` or `None`): the vLLM engine's context per sequence (a
            server started for this run is sized by it): ``grpo.vllm_max_model_length`` when
            set, else the one rlsr sets (``rlsr.config.vllm_context_length``; for sft, whose
            trainer has no engine, the size of a server started beside it); None when the
            prompt limit is unset (vLLM's default).
        trainer_args (`dict`): keyword arguments for the method's TRL config (``GRPOConfig`` /
            ``SFTConfig``; ``trainer_arguments``), ``model.attn_implementation`` as configured
            (``rlsr.train.training.trainer_kwargs`` resolves ``auto`` on the machine that trains).
        protocols (`dict`): the run's evaluation protocol (key None,
            ``rlsr.config.heldout_protocol``) and each named variant's (``heldout.variants``).
        pool_log (`PoolLogSettings`): the pool files the run writes: ``settings.pool_log``, with
            ``every`` 0 for a method without a reward pool.
        notes (`tuple[str, ...]`): what the plan decided that the settings did not say (a
            setting that does not apply), one line each; ``train.py`` prints them.
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
    def output_dir(self) -> str:
        return self.settings.output_dir

    @property
    def gpu_settings(self) -> list[str]:
        """The training settings that ask for a GPU (``gpu_settings``)."""
        return gpu_settings(self.settings.grpo)

    @property
    def variants(self) -> tuple[str, ...]:
        """The named protocol variants the recipe declares (``heldout.variants``)."""
        return tuple(name for name in self.protocols if name is not None)

    def protocol(self, variant: str | None = None) -> EvalProtocol:
        """The run's evaluation protocol (``rlsr.config.heldout_protocol``, planned once), with
        the named variant ``variant`` on top; a variant the recipe does not declare raises
        ``ConfigError`` naming the declared ones."""
        if variant in self.protocols:
            return self.protocols[variant]
        return heldout_protocol(self.settings, self.section, variant)  # raises: not declared

    def evaluate_flags(self, variant: str | None = None) -> list[str]:
        """The ``rlsr evaluate`` flags of ``protocol(variant)``, plus ``--protocol-variant NAME``
        so run.json records which evaluation it is."""
        flags = protocol_flags(self.protocol(variant))
        return flags + (["--protocol-variant", variant] if variant else [])


def gpu_settings(grpo: Mapping) -> list[str]:
    """The training settings of section ``grpo`` that ask for a GPU, as ``field=value``
    overrides: ``grpo.use_cpu`` false (TRL's default) and mixed precision (``grpo.bf16`` /
    ``grpo.fp16`` true). A CPU recipe states ``use_cpu: true, bf16: false``
    (recipes/recipe/tiny.yaml); train.slurm and slurm/sweep.py refuse any other on CPU nodes,
    naming these fields. vLLM is not among them: the Slurm scripts set grpo.use_vllm themselves."""
    found = []
    if not grpo.get("use_cpu", False):
        found.append("grpo.use_cpu=false")
    found += [f"grpo.{key}=true" for key in ("bf16", "fp16") if grpo.get(key, False)]
    return found


def _pool_log(cfg: TrainSettings, method: Method | None) -> tuple[PoolLogSettings, tuple[str, ...]]:
    """The pool files the run writes, and the note when a setting does not apply: recipe=tiny
    turns the pool log on for every method; one trained on fixed answers (method=sft) has no
    reward pool, so it writes none (said, not silent)."""
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
    """Keyword arguments for the method's TRL config (``GRPOConfig`` / ``SFTConfig``): section
    ``section`` of ``cfg`` plus the fields rlsr manages (``output_dir``, ``seed``, the model's
    init kwargs, a reward method's ``reward_weights``). For a GRPO method, from the plan: the
    gradient accumulation that makes one optimizer step's pool ``pool_size`` (``pool``), and,
    with vLLM, the engine's context (``vllm_max_model_length``: as set, else max prompt + what
    an answer needs)."""
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
    """Load the tasks ``cfg`` names, check ``cfg`` without loading any model or dataset and
    derive the run plan once (module docstring). Raises ``ConfigError`` naming the field and
    the fix. ``world_size`` defaults to ``$WORLD_SIZE`` (set by ``accelerate launch``/torchrun),
    else 1. ``here=False``: the launch runs on another machine (``TrainSettings.validate``)."""
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
    """The run plan of a composed config: ``config`` is the Hydra tree (``DictConfig``, as
    ``train.py`` receives it or ``rlsr.config.compose.compose_tree`` returns it) or its plain
    mapping; interpolations are resolved and ``hydra`` bookkeeping dropped. ``vllm_mode``
    (``VLLM_MODES``): plan the launch with the vLLM engine a launcher gives it (train.slurm's
    ``grpo.use_vllm`` / ``grpo.vllm_mode`` overrides); None: as configured. ``world_size`` /
    ``here``: as ``plan_run``'s. Raises ``ConfigError`` naming the field and the fix (an
    ``omegaconf`` error for an interpolation that does not resolve)."""
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

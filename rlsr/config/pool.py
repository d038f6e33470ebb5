"""One pool = one optimizer step: ``resolve_pool`` derives the pool of B x G completions ranked
together and the gradient accumulation that gives it from ``pool_size`` and ``grpo.*`` (RLSR paper
Sec. 3: every completion of one optimizer step across all processes is ranked together)."""

from __future__ import annotations

from dataclasses import dataclass

from rlsr.checks import ConfigError
from rlsr.checks import check as _check
from rlsr.checks import is_int as _is_int
from rlsr.config.trainer_args import grpo_get
from rlsr.launch import WORLD_SIZE_VARIABLES, world_size_from_env

__all__ = ["WORLD_SIZE_VARIABLES", "PoolPlan", "resolve_pool", "world_size_from_env"]


@dataclass(frozen=True)
class PoolPlan:
    """How one optimizer step's pool is laid out: ``pool = per_device x world_size x accumulation``
    completions = ``pool / G`` prompts x G, generated at once and ranked together."""

    pool: int
    per_device: int
    world_size: int
    accumulation: int
    num_generations: int

    def describe(self) -> str:
        return (
            f"pool {self.pool} completions per optimizer step = {self.pool // self.num_generations}"
            f" prompts x {self.num_generations} = {self.per_device} per device x "
            f"{self.world_size} processes x {self.accumulation} accumulation steps"
        )


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def resolve_pool(grpo: dict, pool: int | None, world_size: int) -> PoolPlan:
    """The pool of one optimizer step and the gradient accumulation that gives it.

    ``pool`` (top-level ``pool_size``) set: accumulation = pool / (per_device x world_size),
    an error listing the per-device sizes that divide when it does not. ``pool`` None: the pool
    is per_device x world_size x ``grpo.gradient_accumulation_steps``. Either way TRL must
    generate exactly one optimizer step per generation (``steps_per_generation`` =
    accumulation, ``generation_batch_size`` = pool) and the pool must hold whole groups of G.
    ``num_iterations > 1`` (several optimizer passes over one pool) keeps the invariant.
    """
    G = grpo_get(grpo, "num_generations")
    per_device = grpo_get(grpo, "per_device_train_batch_size")
    accum = grpo.get("gradient_accumulation_steps")
    if pool is not None:
        _check(
            _is_int(pool) and pool >= 1,
            "pool_size",
            f"must be a positive integer (completions per optimizer step) or null; got {pool!r}.",
        )
        _check(
            pool % G == 0,
            "pool_size",
            f"{pool} is not divisible by grpo.num_generations={G}; every prompt needs all its G "
            f"completions in one pool (paper: 1536 = 48 prompts x 32).",
        )
        if pool % world_size != 0:
            raise ConfigError(
                "pool_size",
                f"{pool} completions cannot be split over {world_size} processes; use a process "
                f"count that divides {pool} or change pool_size.",
            )
        if pool % (per_device * world_size) != 0:
            valid = _divisors(pool // world_size)
            raise ConfigError(
                "grpo.per_device_train_batch_size",
                f"{per_device} x {world_size} processes does not divide pool_size={pool}; "
                f"valid per-device sizes for {world_size} processes: {valid}.",
            )
        derived = pool // (per_device * world_size)
        _check(
            accum is None or accum == derived,
            "grpo.gradient_accumulation_steps",
            f"is derived from pool_size={pool} ({pool} / ({per_device} x {world_size} processes) "
            f"= {derived}) but set to {accum!r}; remove it, or set pool_size=null to use it.",
        )
        accum = derived
    else:
        accum = 1 if accum is None else accum
        pool = per_device * world_size * accum
        _check(
            pool % G == 0,
            "grpo.per_device_train_batch_size",
            f"the pool per_device_train_batch_size x processes x gradient_accumulation_steps = "
            f"{per_device} x {world_size} x {accum} = {pool} is not divisible by "
            f"grpo.num_generations={G}; every prompt needs all its G completions in one pool. "
            f"Set pool_size (e.g. pool_size={G * max(1, pool // G)}) or change "
            f"per_device_train_batch_size / gradient_accumulation_steps.",
        )
    steps = grpo.get("steps_per_generation")
    _check(
        steps is None or steps == accum,
        "grpo.steps_per_generation",
        f"={steps!r} with {accum} gradient accumulation steps would make one generation span "
        f"several optimizer steps or one step hold several separately ranked pools (RLSR ranks one "
        f"optimizer step's completions together); remove it (TRL then uses "
        f"gradient_accumulation_steps) and set pool_size instead.",
    )
    gbs = grpo.get("generation_batch_size")
    _check(
        gbs is None or gbs == pool,
        "grpo.generation_batch_size",
        f"={gbs!r} differs from the optimizer step's {pool} completions (per device x processes x "
        f"accumulation), so pools and optimizer steps would not coincide; remove it and set "
        f"pool_size={gbs!r} instead.",
    )
    return PoolPlan(pool, per_device, world_size, accum, G)

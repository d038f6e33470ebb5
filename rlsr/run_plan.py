"""The run plan: what one launch will do, decided once before anything loads, then passed down.

``plan_run(cfg)`` checks the settings (the method's checks, ``rlsr.methods.check_method``; every
section's, ``rlsr.config.plan_settings``) and derives, once: the method bound to its settings,
one optimizer step's pool and its gradient accumulation, the held-out evaluation plan and the
vLLM context. ``rlsr.training`` builds the trainer's arguments, the trainer and the held-out
evaluator from it, and ``train.py``'s end-of-run summary reads it, so no part of a launch
derives any of these a second time (and none can disagree with another).
"""

from __future__ import annotations

from dataclasses import dataclass

from rlsr.config import PoolPlan, ResolvedHeldOut, SettingsPlan, TrainSettings, plan_settings
from rlsr.methods import Method, args_section, check_method

__all__ = ["RunPlan", "plan_run"]


@dataclass(frozen=True)
class RunPlan:
    """One launch's plan (``plan_run``).

    Parameters:
        settings (`TrainSettings`): the checked settings (``pool_log.every`` already 0 for a
            method without a reward pool).
        method (`Method` or `None`): the registry entry bound to ``settings.method``; None for
            ``method=sft``, which trains on fixed answers (no reward method).
        checked (`SettingsPlan`): world size, trainer section, pool, held-out plan, vLLM context.
    """

    settings: TrainSettings
    method: Method | None
    checked: SettingsPlan

    @property
    def section(self) -> str:
        """The section holding the trainer's arguments (``grpo`` or ``sft``)."""
        return self.checked.trainer_section

    @property
    def world_size(self) -> int:
        return self.checked.world_size

    @property
    def pool(self) -> PoolPlan | None:
        """One optimizer step's pool (GRPO methods); None for a supervised method."""
        return self.checked.pool

    @property
    def heldout(self) -> ResolvedHeldOut | None:
        """The held-out evaluation during training; None when ``eval.every`` is 0."""
        return self.checked.heldout


def plan_run(cfg: TrainSettings, *, world_size: int | None = None) -> RunPlan:
    """Check ``cfg`` without loading any model or dataset and derive the run plan once. Raises
    ``ConfigError`` naming the field and the fix. ``world_size`` defaults to ``$WORLD_SIZE``
    (set by ``accelerate launch``/torchrun), else 1."""
    method = check_method(cfg)
    checked = plan_settings(cfg, world_size=world_size, trainer_section=args_section(cfg.method))
    return RunPlan(cfg, method, checked)

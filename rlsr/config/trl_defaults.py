"""TRL's own defaults, read from TRL's config dataclasses rather than restated here.

A recipe that leaves ``grpo.max_completion_length`` unset trains with whatever the installed
``trl.GRPOConfig`` declares (512 in TRL 1.16); every place that needs that value (held-out
budget, vLLM context, Slurm's server length, checks) asks ``grpo_default`` so a TRL upgrade
cannot leave a second, stale copy behind.
"""

from __future__ import annotations

import dataclasses
from functools import cache
from typing import Any

from trl import GRPOConfig, SFTConfig


@cache
def _defaults(config_cls: type) -> dict[str, Any]:
    out = {}
    for f in dataclasses.fields(config_cls):
        if f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = f.default_factory()
    return out


def grpo_default(name: str) -> Any:
    """``trl.GRPOConfig``'s default for field ``name`` (KeyError for a name it lacks)."""
    return _defaults(GRPOConfig)[name]


def sft_default(name: str) -> Any:
    """``trl.SFTConfig``'s default for field ``name`` (KeyError for a name it lacks)."""
    return _defaults(SFTConfig)[name]


def grpo_get(section, name: str) -> Any:
    """``section[name]`` when the recipe sets it, else TRL's ``GRPOConfig`` default."""
    if section is not None and name in section:
        return section[name]
    return grpo_default(name)

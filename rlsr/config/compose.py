"""``train.py``'s configuration without running it: ``recipes/config.yaml`` composed with
overrides by Hydra's compose API (no model loads, about a second), as ``rlsr.config``'s
``TrainSettings``. For callers that need a run's settings in-process: the toy reproduction's
evaluation protocol, the toy's in-process arms."""

from __future__ import annotations

import threading
from pathlib import Path

from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from rlsr.config import TrainSettings, from_dict

__all__ = ["RECIPES_DIR", "compose_config", "compose_tree"]

RECIPES_DIR = Path(__file__).resolve().parents[2] / "recipes"
# Hydra's compose API keeps one process-wide GlobalHydra: two threads inside
# initialize_config_dir at once fail ("GlobalHydra is already initialized"); the toy's --jobs N
# composes from N worker threads.
_HYDRA_LOCK = threading.Lock()


def compose_tree(overrides: list[str], recipes_dir: str | Path = RECIPES_DIR):
    """The composed Hydra tree (an OmegaConf ``DictConfig``) of ``train.py <overrides>``, for a
    caller that reads keys before they are typed (slurm/resolve_config.py)."""
    with (
        _HYDRA_LOCK,
        initialize_config_dir(config_dir=str(Path(recipes_dir).resolve()), version_base="1.3"),
    ):
        return compose(config_name="config", overrides=overrides)


def compose_config(overrides: list[str]) -> TrainSettings:
    """``TrainSettings`` of ``train.py <overrides>`` (interpolations resolved, not validated:
    ``rlsr.method.run_plan.plan_run`` checks them against the machine)."""
    return from_dict(OmegaConf.to_container(compose_tree(overrides), resolve=True))

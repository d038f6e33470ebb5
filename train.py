"""Train with RLSR / RLCR / RLVR on TRL's GRPOTrainer (or the SFT baseline, method=sft, on TRL's
SFTTrainer). Hydra entry point.

    python train.py recipe=tiny                                   # CPU smoke run, ~1 minute
    accelerate launch --cpu train.py recipe=tiny                  # same, through accelerate
    accelerate launch --config_file recipes/accelerate/ddp.yaml train.py recipe=hotpot method=rlsr
    accelerate launch ... train.py recipe=bigmath method=rlcr model=llama3.1-8b grpo.learning_rate=1e-5

The configuration tree lives in recipes/ (docs/training.md). The configuration is validated
before any model or dataset is loaded; a bad value prints one line naming the field and the fix
and exits with status 2.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
logger = logging.getLogger("rlsr.train")

CONFIG_ERROR_EXIT = 2


def _is_main_process() -> bool:
    return int(os.environ.get("RANK", os.environ.get("LOCAL_RANK", "0"))) == 0


def save_resolved_config(cfg: DictConfig, output_dir: str) -> Path:
    """Write the resolved configuration beside the checkpoints (``output_dir/config.yaml``)."""
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "config.yaml"
    OmegaConf.save(cfg, path, resolve=True)
    return path


@hydra.main(version_base="1.3", config_path="recipes", config_name="config")
def main(cfg: DictConfig) -> int:
    from omegaconf.errors import OmegaConfBaseException

    from rlsr.config import ConfigError, describe_hydra_error, from_dict
    from rlsr.training import run_training, validate

    try:
        settings = validate(from_dict(OmegaConf.to_container(cfg, resolve=True)))
    except ConfigError as err:
        print(f"config error: {err}", file=sys.stderr)
        sys.exit(CONFIG_ERROR_EXIT)
    except OmegaConfBaseException as err:  # e.g. a mandatory value (???) left unset
        print(f"config error: {describe_hydra_error(err)}", file=sys.stderr)
        sys.exit(CONFIG_ERROR_EXIT)

    if _is_main_process():
        path = save_resolved_config(cfg, settings.output_dir)
        print(f"[rlsr] resolved config: {path}", flush=True)

    try:
        run_training(settings)
    except ConfigError as err:  # data-dependent checks (e.g. every prompt too long)
        print(f"config error: {err}", file=sys.stderr)
        sys.exit(CONFIG_ERROR_EXIT)
    return 0


def cli() -> None:
    """Run ``main`` with one-line errors for problems Hydra finds while composing the config.

    Plain ``key=value`` overrides become ``++key=value`` so unknown keys reach our validation
    (closest-match suggestions, GRPOConfig fields the recipes do not list). Hydra is told to
    re-raise (``HYDRA_FULL_ERROR``) so an unknown recipe/method or a malformed override prints
    ``config error: ...`` and exits 2 instead of a multi-line report; other errors keep their
    traceback. A user who set ``HYDRA_FULL_ERROR`` gets Hydra's full output as before.
    """
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from rlsr.config import describe_hydra_error, force_add_overrides

    recipes = Path(__file__).resolve().parent / "recipes"
    groups = [d.name for d in recipes.iterdir() if d.is_dir()]
    sys.argv = [sys.argv[0], *force_add_overrides(sys.argv[1:], groups)]
    user_wants_full_error = bool(os.environ.get("HYDRA_FULL_ERROR"))
    os.environ["HYDRA_FULL_ERROR"] = "1"
    try:
        main()
    except (HydraException, OmegaConfBaseException) as err:
        if user_wants_full_error:
            raise
        print(f"config error: {describe_hydra_error(err)}", file=sys.stderr)
        sys.exit(CONFIG_ERROR_EXIT)


if __name__ == "__main__":
    cli()

#!/usr/bin/env python3
"""Print what the Slurm scripts need from the trainer's Hydra config, for given overrides.

    python slurm/resolve_config.py recipe=hotpot method=rlsr seed=0
    model=Qwen/Qwen2.5-7B
    output_dir=/abs/path/runs/hotpot-rlsr-qwen2.5-7b-seed0
    max_model_len=4878
    gpu_settings=grpo.use_cpu=false grpo.bf16=true

Composes recipes/config.yaml exactly as train.py does (Hydra compose API, no model loading,
about a second) and prints fields of its run plan (``rlsr.method.run_plan.plan_from_config``, the
function train.py plans with), so the vLLM server serves the model the trainer trains,
evaluation finds the folder the trainer writes, and the server's context holds the held-out
answers that the trainer sends it. The plan is the launch's: the vLLM engine of a leading
``--vllm-mode=MODE`` (server, colocate or none; default server, the engine ``max_model_len``
sizes), ``$WORLD_SIZE`` processes (train.slurm sets it), and none of this machine's checks (a
login node has no GPU; the job's train.py checks its own).
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# the recipes' variant of the paper's tables (heldout.variants.paper: greedy, 4,096 new tokens)
PAPER_VARIANT = "paper"


def resolve(
    overrides: list[str],
    root: Path = ROOT,
    variant: str | None = PAPER_VARIANT,
    *,
    vllm_mode: str = "server",
    world_size: int | None = None,
) -> dict[str, str]:
    """Return ``{"model": model.name_or_path, "output_dir": absolute output_dir,
    "max_model_len": vLLM context, "gpu_settings": the settings that need a GPU,
    "evaluate_args": the run's evaluation flags}``, read from the run plan of ``overrides``
    launched with ``vllm_mode`` on ``world_size`` processes (default ``$WORLD_SIZE``, else 1).

    ``max_model_len`` is the vLLM server's ``--max-model-len``: the plan's
    ``vllm_max_model_length`` (``grpo.vllm_max_model_length`` if set, else the trainer's rule),
    else empty (vLLM's own default). ``evaluate_args``: the plan's ``evaluate_flags`` with the
    named protocol variant ``variant`` (default ``paper``, when the recipe declares it; None: the
    held-out protocol itself). Settings that do not plan give neither (``max_model_len`` empty,
    ``evaluate_args`` None), with the reason on stderr: train.py refuses that run with the same
    message, and any value made up here would be a second rule no trainer follows.
    """
    from rlsr.config import ConfigError
    from rlsr.config.compose import compose_tree
    from rlsr.method.run_plan import gpu_settings, plan_from_config

    cfg = compose_tree(overrides, root / "recipes")
    output_dir = Path(str(cfg.output_dir))
    if not output_dir.is_absolute():
        output_dir = root / output_dir
    try:
        plan = plan_from_config(cfg, world_size=world_size, vllm_mode=vllm_mode, here=False)
    except (ConfigError, KeyError, ValueError) as err:
        stated = (cfg.get("grpo") or {}).get("vllm_max_model_length")  # the user's own value
        if stated is None:
            print(
                f"resolve_config: max_model_len left empty (vLLM's default): the settings do not "
                f"resolve, so the trainer's rule cannot size the server ({err}); train.py will "
                "refuse this run with that message.",
                file=sys.stderr,
            )
        print(f"resolve_config: evaluate_args left out: the settings do not resolve ({err}); "
              "train.py will refuse this run with that message.", file=sys.stderr)  # fmt: skip
        return {
            "model": str(cfg.model.name_or_path),
            "output_dir": str(output_dir),
            "max_model_len": "" if stated is None else str(int(stated)),
            "gpu_settings": gpu_settings(cfg.get("grpo") or {}),
            "evaluate_args": None,
        }
    if variant == PAPER_VARIANT and PAPER_VARIANT not in plan.variants:
        variant = None  # a recipe without the paper's tables: its held-out protocol
    length = plan.vllm_max_model_length
    return {
        "model": str(plan.settings.model.name_or_path),
        "output_dir": str(output_dir),
        "max_model_len": "" if length is None else str(int(length)),
        "gpu_settings": gpu_settings(plan.settings.grpo),
        "evaluate_args": plan.evaluate_flags(variant),
    }


VLLM_MODE_FLAG = "--vllm-mode="


def main(argv: list[str]) -> int:
    from rlsr.method.run_plan import VLLM_MODES

    mode = "server"
    if argv and argv[0].startswith(VLLM_MODE_FLAG):  # the engine a launcher gives the run
        mode, argv = argv[0][len(VLLM_MODE_FLAG) :], argv[1:]
        if mode not in VLLM_MODES:
            print(f"resolve_config: {VLLM_MODE_FLAG}{mode}: choose one of {', '.join(VLLM_MODES)}",
                  file=sys.stderr)  # fmt: skip
            return 2
    try:
        values = resolve(argv, vllm_mode=mode)
    except Exception as err:  # Hydra raises several types; the caller only needs the message.
        print(
            f"resolve_config: cannot compose recipes/config.yaml with {argv}: {err}",
            file=sys.stderr,
        )
        return 2
    for key, value in values.items():
        if value is None:  # not resolved: the reason is on stderr
            continue
        print(f"{key}={shlex.join(value) if isinstance(value, list) else value}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

#!/usr/bin/env python3
"""Print what the Slurm scripts need from the trainer's Hydra config, for given overrides.

    python slurm/resolve_config.py recipe=hotpot method=rlsr seed=0
    model=Qwen/Qwen2.5-7B
    output_dir=/abs/path/runs/hotpot-rlsr-qwen2.5-7b-seed0
    max_model_len=4608

Composes recipes/config.yaml exactly as train.py does (Hydra compose API, no model loading,
well under a second), so the vLLM server serves the model the trainer trains and evaluation
finds the folder the trainer writes.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def resolve(overrides: list[str], root: Path = ROOT) -> dict[str, str]:
    """Return ``{"model": model.name_or_path, "output_dir": absolute output_dir,
    "max_model_len": vLLM context, "evaluate_args": method.evaluate_args}``.

    ``max_model_len`` is ``grpo.vllm_max_model_length`` if set, else data.max_prompt_length +
    grpo.max_completion_length (the trainer's colocate default,
    ``rlsr.config.default_vllm_max_model_length``), else empty (vLLM's own default).
    """
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(root / "recipes"), version_base="1.3"):
        cfg = compose(config_name="config", overrides=list(overrides))
    output_dir = Path(str(cfg.output_dir))
    if not output_dir.is_absolute():
        output_dir = root / output_dir
    grpo = cfg.get("grpo") or {}
    length = grpo.get("vllm_max_model_length")
    prompt, completion = cfg.data.get("max_prompt_length"), grpo.get("max_completion_length", 256)
    if length is None and prompt is not None and completion is not None:
        length = int(prompt) + int(completion)
    return {
        "model": str(cfg.model.name_or_path),
        "output_dir": str(output_dir),
        "max_model_len": "" if length is None else str(int(length)),
        "evaluate_args": [str(a) for a in (cfg.method.get("evaluate_args") or [])],
    }


def main(argv: list[str]) -> int:
    try:
        values = resolve(argv)
    except Exception as err:  # Hydra raises several types; the caller only needs the message.
        print(
            f"resolve_config: cannot compose recipes/config.yaml with {argv}: {err}",
            file=sys.stderr,
        )
        return 2
    for key, value in values.items():
        print(f"{key}={shlex.join(value) if isinstance(value, list) else value}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

#!/usr/bin/env python3
"""Print what the Slurm scripts need from the trainer's Hydra config, for given overrides.

    python slurm/resolve_config.py recipe=hotpot method=rlsr seed=0
    model=Qwen/Qwen2.5-7B
    output_dir=/abs/path/runs/hotpot-rlsr-qwen2.5-7b-seed0
    max_model_len=4878
    gpu_settings=grpo.use_cpu=false grpo.bf16=true

Composes recipes/config.yaml exactly as train.py does (Hydra compose API, no model loading,
about a second), so the vLLM server serves the model the trainer trains and evaluation
finds the folder the trainer writes, and the server's context holds the held-out answers
that the trainer sends it (eval.backend=auto in server mode: ``rlsr.config.vllm_context_length``).
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# the recipes' layer of the paper's tables (eval.layers.paper: greedy, 4,096 new tokens)
PAPER_LAYER = "paper"


def resolve(
    overrides: list[str], root: Path = ROOT, layer: str | None = PAPER_LAYER
) -> dict[str, str]:
    """Return ``{"model": model.name_or_path, "output_dir": absolute output_dir,
    "max_model_len": vLLM context, "gpu_settings": the settings that need a GPU,
    "evaluate_args": the run's evaluation flags}``.

    ``max_model_len`` is the vLLM server's ``--max-model-len``: ``grpo.vllm_max_model_length``
    if set, else ``server_context_length`` (the trainer's rule), else empty (vLLM's own
    default). Settings that do not resolve (the trainer's rule cannot apply) also give empty,
    with the reason on stderr: train.py refuses that run with the same message, and any length
    made up here (prompt + completion, say) would be a second rule no trainer follows.
    ``evaluate_args``: ``evaluate_flags`` with the named protocol layer ``layer`` (default
    ``paper``, when the recipe declares it; None: the held-out protocol itself); None, with the
    reason on stderr, when the run's protocol does not resolve (left out of the printed lines).
    """
    from rlsr.config import ConfigError
    from rlsr.config.compose import compose_tree
    from rlsr.config.trl_defaults import grpo_get

    cfg = compose_tree(overrides, root / "recipes")
    output_dir = Path(str(cfg.output_dir))
    if not output_dir.is_absolute():
        output_dir = root / output_dir
    grpo = cfg.get("grpo") or {}
    length = grpo.get("vllm_max_model_length")
    prompt, completion = cfg.data.get("max_prompt_length"), grpo_get(grpo, "max_completion_length")
    if length is None and prompt is not None and completion is not None:
        try:
            length = server_context_length(cfg)
        except (ConfigError, KeyError, ValueError) as err:
            print(
                f"resolve_config: max_model_len left empty (vLLM's default): the settings do not "
                f"resolve, so the trainer's rule cannot size the server ({err}); train.py will "
                "refuse this run with that message.",
                file=sys.stderr,
            )
    try:
        evaluate_args = evaluate_flags(cfg, layer)
    except ConfigError as err:  # never a guessed protocol: the sweep refuses to plan without one
        print(f"resolve_config: evaluate_args left out: the run's protocol does not resolve "
              f"({err}); train.py will refuse this run with that message.", file=sys.stderr)  # fmt: skip
        evaluate_args = None
    return {
        "model": str(cfg.model.name_or_path),
        "output_dir": str(output_dir),
        "max_model_len": "" if length is None else str(int(length)),
        "gpu_settings": gpu_settings(grpo),
        "evaluate_args": evaluate_args,
    }


def gpu_settings(grpo) -> list[str]:
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


def evaluate_flags(cfg, layer: str | None = PAPER_LAYER) -> list[str]:
    """The ``rlsr evaluate`` flags of the run's protocol (``rlsr.config.heldout_protocol``, the
    function the held-out steps and train.py's printed command use) with the recipe's named
    layer ``layer`` on top (``eval.layers.<layer>``; the default ``paper`` only when the recipe
    declares it), plus ``--protocol-layer NAME`` so run.json records which evaluation it is.
    The tasks of ``$RLSR_TASKS_PATH`` and ``tasks_dir`` are registered first, as train.py does,
    so a task's own prompt name is a valid ``system_prompt``. A method file that still holds the
    replaced ``evaluate_args`` is refused with the mapping to write instead."""
    from omegaconf import OmegaConf

    from rlsr.config import declared_layers, from_dict, heldout_protocol
    from rlsr.data import load_env_tasks, load_tasks
    from rlsr.eval_protocol import protocol_flags
    from rlsr.methods import args_section

    load_env_tasks()  # before the settings are read: a task's prompt name is then valid
    tasks_dir = cfg.get("tasks_dir")
    load_tasks(OmegaConf.to_container(tasks_dir) if OmegaConf.is_config(tasks_dir) else tasks_dir)
    settings = from_dict(OmegaConf.to_container(cfg, resolve=True))
    settings.method.validate()
    if layer == PAPER_LAYER and PAPER_LAYER not in declared_layers(settings):
        layer = None  # a recipe without the paper's tables: its held-out protocol
    section = args_section(settings.method)
    flags = protocol_flags(heldout_protocol(settings, section, layer))
    return flags + (["--protocol-layer", layer] if layer else [])


def server_context_length(cfg) -> int | None:
    """The trainer's rule for the vLLM context (``rlsr.config.vllm_context_length``) with the
    server mode that train.slurm sets: data.max_prompt_length + the larger of
    grpo.max_completion_length and what a held-out answer with its Sec. C.3 fallbacks needs
    when the held-out evaluation runs (it then goes through the server, eval.backend=auto ->
    vllm_server). Raises ``ConfigError`` (or the ``KeyError``/``ValueError`` of a malformed
    section) when the settings do not resolve: train.py refuses them with the same message."""
    from omegaconf import OmegaConf

    from rlsr.config import from_dict, register_tasks, resolve_heldout, vllm_context_length

    values = OmegaConf.to_container(cfg, resolve=True)
    values["grpo"] = {**(values.get("grpo") or {}), "use_vllm": True, "vllm_mode": "server"}
    settings = from_dict(values)
    register_tasks(settings)
    return vllm_context_length(settings, resolve_heldout(settings))


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
        if value is None:  # not resolved: the reason is on stderr
            continue
        print(f"{key}={shlex.join(value) if isinstance(value, list) else value}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""The real recipes run: recipe=hotpot / bigmath x model=qwen2.5-7b / llama3.1-8b x every method.

Each combination is composed through the Hydra tree exactly as ``train.py`` composes it, with
only these overrides:

* scale: a tiny random model of the same family (Qwen2: shipped, ``rlsr.data.tiny_models``;
  Llama-3.1-shaped: built and cached by ``tools.tiny.models``), the bundled fixture rows of the
  recipe's dataset (``rlsr/data/fixtures/upstream``), G = 3, a pool of 6 completions
  (``pool_size``; the accumulation is derived as in a real run), 8-token completions, one
  optimizer step;
* device: no vLLM (not installable here), ``grpo.use_cpu=true``, ``grpo.bf16=false`` (autocast
  mixed precision is a GPU setting here); the weights stay in the recipe's ``model.dtype``
  (bfloat16: this CPU has native bf16).

Everything else is the recipe's: prompt length filter, system prompt, verifier (the math
verifier's worker processes for Big-Math), LoRA r=1 on all linear layers, gradient checkpointing
(reentrant), disabled dropout, learning-rate schedule, loss type, reward weights, the final
adapter export. So a recipe key that becomes invalid (validation, GRPOConfig) or a code path only
the real recipes take breaks these tests, not only composition.

All 12 combinations compose and validate (fast); four runs cover every recipe x model pair and
every method at least once (3-6 s each on 2 cores, ~25 s in all: not marked slow).
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from rlsr.config import from_dict
from rlsr.data import resolve_tasks
from rlsr.data.loading import FIXTURES_DIR
from rlsr.data.tiny_models import tiny_model_path
from rlsr.method.run_plan import plan_run
from tools.tiny.models import tiny_llama_model_path

ROOT = Path(__file__).resolve().parents[1]
RECIPES = {"hotpot": "hotpot_modified", "bigmath": "bigmath_digits"}
ID_SETS = {"hotpot": "hotpot-id", "bigmath": "bigmath-id"}  # their heldout.tasks
MODELS = {"qwen2.5-7b": tiny_model_path, "llama3.1-8b": tiny_llama_model_path}
METHODS = sorted(p.stem for p in (ROOT / "recipes" / "method").glob("*.yaml"))  # method=...
SCALE = ("pool_size=6", "grpo.num_generations=3", "grpo.max_completion_length=8", "heldout.limit=2")
SCALE_RUN = ("grpo.max_steps=1", "grpo.logging_steps=1", "grpo.disable_tqdm=true")
DEVICE = ("grpo.use_vllm=false", "grpo.use_cpu=true", "grpo.bf16=false")


def compose(*overrides: str) -> dict:
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from omegaconf import OmegaConf

    from rlsr.config import force_add_overrides

    groups = [d.name for d in (ROOT / "recipes").iterdir() if d.is_dir()]
    with initialize_config_dir(config_dir=str(ROOT / "recipes"), version_base="1.3"):
        cfg = hydra_compose(
            config_name="config", overrides=force_add_overrides(list(overrides), groups)
        )
    values = OmegaConf.to_container(cfg, resolve=True)
    values.pop("hydra", None)
    return values


def _overrides(recipe: str, model: str, method: str, out: Path) -> list[str]:
    return [
        f"recipe={recipe}",
        f"model={model}",
        f"method={method}",
        f"model.name_or_path={MODELS[model]()}",
        f"data.path={FIXTURES_DIR / 'upstream' / RECIPES[recipe]}",
        f"output_dir={out}",
        # the recipe's held-out ID sets from the same fixtures (2 questions each)
        "heldout.data_path={"
        + ",".join(f"{n}:{FIXTURES_DIR / 'upstream' / n}" for n in resolve_tasks(ID_SETS[recipe]))
        + "}",
        *SCALE,
        *DEVICE,
    ]


@pytest.mark.parametrize(
    ("recipe", "model", "method"), list(itertools.product(RECIPES, MODELS, METHODS))
)
def test_every_real_combination_composes_and_validates(tmp_path, recipe, model, method):
    values = compose(*_overrides(recipe, model, method, tmp_path))
    real = compose(f"recipe={recipe}", f"model={model}", f"method={method}")
    # Only the scale and device knobs differ from what a user runs.
    assert values["method"] == real["method"] and values["model"]["lora"] == real["model"]["lora"]
    assert values["model"]["dtype"] == real["model"]["dtype"] == "bfloat16"
    assert values["data"]["max_prompt_length"] == real["data"]["max_prompt_length"]
    for key in ("gradient_checkpointing", "gradient_checkpointing_kwargs", "learning_rate"):
        assert values["grpo"][key] == real["grpo"][key]
    plan_run(from_dict(values), world_size=1)


RUNS = [
    ("hotpot", "qwen2.5-7b", "rlsr"),
    ("hotpot", "llama3.1-8b", "rlcr"),
    ("bigmath", "qwen2.5-7b", "rlvr"),
    ("bigmath", "llama3.1-8b", "rlsr"),
]


def test_runs_cover_every_recipe_model_pair_and_every_method():
    assert {(r, m) for r, m, _ in RUNS} == set(itertools.product(RECIPES, MODELS))
    assert {m for _, _, m in RUNS} >= {"rlsr", "rlcr", "rlvr"} and set(METHODS) >= {"rlsr", "rlcr"}


@pytest.mark.timeout(600)
@pytest.mark.parametrize(("recipe", "model", "method"), RUNS)
def test_real_recipe_trains_one_step(tmp_path, recipe, model, method):
    import torch
    from peft import PeftModel

    from rlsr.train.training import run_training

    torch.set_num_threads(1)
    out = tmp_path / "run"
    settings = plan_run(
        from_dict(compose(*_overrides(recipe, model, method, out), *SCALE_RUN))
    ).settings
    pools: list[dict] = []
    trainer = run_training(plan_run(settings), pool_hook=pools.append)

    args = trainer.args
    assert (args.gradient_accumulation_steps, args.generation_batch_size) == (
        6 // args.per_device_train_batch_size,
        6,
    )
    assert args.gradient_checkpointing and args.gradient_checkpointing_kwargs == {
        "use_reentrant": True
    }
    assert isinstance(trainer.model, PeftModel)
    base = trainer.model.get_base_model()
    assert (
        type(base).__name__
        == {"qwen2.5-7b": "Qwen2ForCausalLM", "llama3.1-8b": "LlamaForCausalLM"}[model]
    )
    assert base.dtype == torch.bfloat16
    lora = trainer.model.peft_config["default"]
    assert (lora.r, lora.lora_alpha) == (1, 32)

    assert len(pools) == 1 and len(pools[0]["texts"]) == 6
    log = next(h for h in trainer.state.log_history if "rlsr/pool_size" in h)
    assert log["rlsr/pool_size"] == 6 and trainer.state.global_step == 1
    assert log["rlsr/verifier_timeouts"] == 0
    assert (out / "adapter_model.safetensors").is_file() and (out / "adapter_config.json").is_file()
    # the recipe's held-out evaluation ran at step 0 and at the last step, on every ID set
    history = [json.loads(x) for x in (out / "eval" / "history.jsonl").read_text().splitlines()]
    sets = resolve_tasks(ID_SETS[recipe])
    assert [(h["step"], h["dataset"]) for h in history] == [
        (step, name) for step in (0, 1) for name in sorted(sets)
    ], history

"""Config tree (recipes/) and validation: paper defaults, and every error names its field."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlsr.config import ConfigError, from_dict, pool_size
from rlsr.training import validate

ROOT = Path(__file__).resolve().parents[1]


def compose(*overrides: str) -> dict:
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from omegaconf import OmegaConf

    with initialize_config_dir(config_dir=str(ROOT / "recipes"), version_base="1.3"):
        cfg = hydra_compose(config_name="config", overrides=list(overrides))
    values = OmegaConf.to_container(cfg, resolve=True)
    values.pop("hydra", None)
    return values


# Real recipes on this CPU machine: no GPU, no vLLM. These overrides make them valid here.
CPU = ("grpo.use_vllm=false", "grpo.bf16=false", "grpo.use_cpu=true")


def test_hotpot_recipe_has_the_paper_settings():
    v = compose("recipe=hotpot")
    g = v["grpo"]
    assert v["model"]["name_or_path"] == "Qwen/Qwen2.5-7B"
    assert v["data"] == {**v["data"], "dataset": "hotpot_modified", "system_prompt": "long"}
    assert v["data"]["max_prompt_length"] == 3072 and g["max_completion_length"] == 1536
    assert g["learning_rate"] == 1e-5 and g["lr_scheduler_type"] == "constant_with_warmup"
    assert g["warmup_steps"] == 0.05 and g["num_train_epochs"] == 1
    assert (g["num_generations"], g["temperature"], g["beta"]) == (32, 0.7, 0.0)
    assert (g["scale_rewards"], g["loss_type"], g["bf16"], g["use_vllm"]) == (
        "none",
        "bnpo",
        True,
        True,
    )
    assert pool_size(g, world_size=4) == 1536
    lora = v["model"]["lora"]
    assert (lora["r"], lora["alpha"], lora["dropout"], lora["target_modules"]) == (
        1,
        32,
        0.0,
        "all-linear",
    )
    assert v["method"] == {
        **v["method"],
        "name": "rlsr",
        "format_weight": 0.5,
        "method_weight": 0.5,
    }
    validate(from_dict(compose("recipe=hotpot", *CPU)), world_size=4)


def test_bigmath_recipe_and_model_and_method_choices():
    v = compose("recipe=bigmath", "model=llama3.1-8b", "method=rlcr")
    g = v["grpo"]
    assert v["model"]["name_or_path"] == "meta-llama/Llama-3.1-8B"
    assert v["data"]["dataset"] == "bigmath_digits" and v["data"]["system_prompt"] == "simple"
    assert (v["data"]["max_prompt_length"], g["max_completion_length"]) == (1024, 4096)
    assert (g["learning_rate"], g["lr_scheduler_type"], g["warmup_steps"]) == (5e-5, "linear", 0.2)
    assert g["num_train_epochs"] == 0.5
    assert pool_size(g, world_size=4) == 1536
    assert v["method"]["name"] == "rlcr"
    assert v["output_dir"] == "runs/bigmath-rlcr-llama3.1-8b-seed42"
    validate(
        from_dict(compose("recipe=bigmath", "model=llama3.1-8b", "method=rlcr", *CPU)), world_size=4
    )


def test_tiny_recipe_is_valid_on_cpu():
    validate(from_dict(compose("recipe=tiny")), world_size=1)
    validate(from_dict(compose("recipe=tiny")), world_size=2)


@pytest.mark.parametrize(
    ("overrides", "world_size", "field", "hint"),
    [
        (["grpo.num_generations=5"], 1, "grpo.per_device_train_batch_size", "divisible"),
        (["grpo.num_generations=1"], 1, "grpo.num_generations", "at least 2"),
        (["data.dataset=hotpotqa"], 1, "data.dataset", "hotpotqa"),
        (["method=rlsr", "method.name=ppo"], 1, "method.name", "rlsr"),
        pytest.param(
            ["grpo.use_vllm=true"],
            1,
            "grpo.use_vllm",
            "pip install rlsr[vllm]",
            marks=pytest.mark.skipif(
                importlib.util.find_spec("vllm") is not None, reason="vllm is installed here"
            ),
        ),
        (
            ["model.attn_implementation=flash_attention_2"],
            1,
            "model.attn_implementation",
            "flash-attn",
        ),
        (["grpo.bf16=true"], 1, "grpo.bf16", "grpo.bf16=false"),
        (["model.lora.r=0"], 1, "model.lora.r", ">= 1"),
        (["model.lora.dropout=1.5"], 1, "model.lora.dropout", "[0, 1)"),
        (["method.max_coverage=0"], 1, "method.max_coverage", "(0, 1]"),
        (["method.max_coverage=1.5"], 1, "method.max_coverage", "(0, 1]"),
        (["method=rlcr", "+method.max_coverage=0.5"], 1, "method.max_coverage", "only apply"),
        (["method.weight_cap=-1"], 1, "method.weight_cap", "> 0"),
        (["method.format_weight=0", "method.method_weight=0"], 1, "method.method_weight", "both 0"),
        (["+grpo.max_prompt_length=10"], 1, "grpo.max_prompt_length", "data.max_prompt_length"),
        (["+grpo.num_generation=4"], 1, "grpo.num_generation", "num_generations"),
        (["+grpo.reward_weights=[1,1]"], 1, "grpo.reward_weights", "method"),
        (["+model.lora.rank=4"], 1, "model.lora.rank", "Known keys"),
        (["grpo.learning_rate=0"], 1, "grpo.learning_rate", "> 0"),
        (["grpo.vllm_mode=remote", "grpo.use_vllm=true"], 1, "grpo.vllm_mode", "server"),
        (["resume=/nonexistent/checkpoint-3"], 1, "resume", "checkpoint"),
        (["data.system_prompt=short"], 1, "data.system_prompt", "simple"),
        (["model.dtype=fp8"], 1, "model.dtype", "bfloat16"),
        (["data.verifier=llm_judge"], 1, "data.verifier", "exact_match"),
    ],
)
def test_errors_name_field_and_fix(overrides, world_size, field, hint):
    with pytest.raises(ConfigError) as info:
        validate(from_dict(compose("recipe=tiny", *overrides)), world_size=world_size)
    assert info.value.field == field
    assert str(info.value).startswith(field + ":")
    assert hint in str(info.value)


def test_pool_divisibility_counts_processes_and_accumulation():
    # tiny: 8 per device x 2 accumulation; G = 4 -> any world size works; G = 48 needs 3 processes.
    settings = from_dict(compose("recipe=tiny", "grpo.num_generations=48"))
    with pytest.raises(ConfigError, match="8 x 2 x 2 = 32"):
        validate(settings, world_size=2)
    validate(settings, world_size=3)


def test_world_size_defaults_to_launcher_environment(monkeypatch):
    settings = from_dict(compose("recipe=tiny", "grpo.num_generations=48"))
    monkeypatch.setenv("WORLD_SIZE", "3")
    validate(settings)
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ConfigError):
        validate(settings)


def test_unknown_top_level_key_is_rejected():
    with pytest.raises(ConfigError) as info:
        from_dict({**compose("recipe=tiny"), "otuput_dir": "x"})
    assert info.value.field == "otuput_dir"


def test_train_py_prints_config_error_and_exits_2(tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(
        [sys.executable, str(ROOT / "train.py"), "recipe=tiny", "method.name=ppo",
         f"output_dir={tmp_path / 'run'}"],
        env=env, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "config error: method.name:" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "run" / "config.yaml").exists()  # nothing written before validation


def test_plain_overrides_become_force_add_except_groups_hydra_and_prefixed():
    from rlsr.config import force_add_overrides

    groups = ["recipe", "method", "model", "accelerate"]
    argv = ["recipe=tiny", "method=rlcr", "model=tiny", "grpo.learnig_rate=1", "seed=1",
            "+grpo.top_p=0.9", "++data.limit=3", "~grpo.beta", "hydra.verbose=true",
            "--cfg", "job", "model.lora.r=2"]  # fmt: skip
    assert force_add_overrides(argv, groups) == [
        "recipe=tiny", "method=rlcr", "model=tiny", "++grpo.learnig_rate=1", "++seed=1",
        "+grpo.top_p=0.9", "++data.limit=3", "~grpo.beta", "hydra.verbose=true",
        "--cfg", "job", "++model.lora.r=2",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (["method=foo"], "method: no config 'foo' in recipes/method/; choose one of rlcr, rlsr"),
        (["recipe=nope"], "recipe: no config 'nope'"),
        (["grpo.learning_rate=[1"], "grpo.learning_rate=[1: cannot parse this override"),
    ],
)
def test_hydra_composition_errors_become_one_line(overrides, expected):
    with pytest.raises(Exception) as info:
        compose("recipe=tiny", *overrides)
    from rlsr.config import describe_hydra_error

    message = describe_hydra_error(info.value)
    assert message.startswith(expected) and "\n" not in message


def test_force_added_typo_and_wrong_method_option_reach_validation():
    """Regression: `grpo.learnig_rate=1` / `grpo.top_p=0.9` / `method=rlcr method.max_coverage=0.5`
    died in Hydra's struct check; with ++ they reach validation (closest match / real field)."""
    with pytest.raises(ConfigError, match="Did you mean 'learning_rate'"):
        validate(from_dict(compose("recipe=tiny", "++grpo.learnig_rate=1")), world_size=1)
    settings = validate(from_dict(compose("recipe=tiny", "++grpo.top_p=0.9")), world_size=1)
    assert settings.grpo["top_p"] == 0.9
    with pytest.raises(ConfigError, match="only apply to method=rlsr"):
        validate(from_dict(compose("recipe=tiny", "method=rlcr", "++method.max_coverage=0.5")))


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("method=foo", "config error: method: no config 'foo'"),
        ("grpo.learnig_rate=1", "config error: grpo.learnig_rate: not a trl.GRPOConfig field."),
    ],
)
def test_train_py_reports_hydra_and_typo_errors_in_one_line(tmp_path, override, expected):
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    proc = subprocess.run(
        [sys.executable, str(ROOT / "train.py"), "recipe=tiny", override,
         f"output_dir={tmp_path / 'run'}"],
        env={**env, "HF_HUB_OFFLINE": "1"}, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()]  # exactly one line
    assert proc.stderr.startswith(expected), proc.stderr


def test_toy_recipe_demands_its_model_folder():
    """Regression: `recipe=toy` without model.name_or_path silently trained the tiny-warm model
    (a `???` in a recipe does not replace the value an earlier default set)."""
    with pytest.raises(ConfigError) as info:
        from_dict(compose("recipe=toy"))
    assert info.value.field == "model.name_or_path" and "required" in str(info.value)
    assert from_dict(compose("recipe=toy", "model.name_or_path=/w")).model.name_or_path == "/w"

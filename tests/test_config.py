"""Config tree (recipes/) and validation: paper defaults, and every error names its field."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from rlsr.config import ConfigError, from_dict, resolve_heldout, resolve_pool
from rlsr.equations.rewards import lifted_aurc_rewards
from rlsr.method.run_plan import plan_run
from rlsr.train.training import trainer_kwargs

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


@pytest.fixture
def gpu_machine(monkeypatch):
    """The machine the GPU recipes are written for, to read their trainer arguments here
    (``trainer_kwargs`` runs every check a launch runs). The only doubles are the machine probes
    (rlsr.core.launch): this CPU box has neither CUDA nor vllm installed."""
    import rlsr.core.launch as M

    real = M.module_available
    monkeypatch.setattr(M, "module_available", lambda name: name == "vllm" or real(name))
    monkeypatch.setattr(M, "cuda_available", lambda: True)


def test_hotpot_recipe_has_the_paper_settings():
    v = compose("recipe=hotpot")
    g = v["grpo"]
    assert v["model"]["name_or_path"] == "Qwen/Qwen2.5-7B"
    assert v["data"] == {**v["data"], "task": "hotpot_modified", "system_prompt": "long"}
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
    assert v["pool_size"] == 1536 and "gradient_accumulation_steps" not in g
    assert resolve_pool(g, v["pool_size"], world_size=4).accumulation == 128  # paper: 3 x 4 x 128
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
    plan_run(from_dict(compose("recipe=hotpot", *CPU)), world_size=4)


def test_bigmath_recipe_and_model_and_method_choices():
    v = compose("recipe=bigmath", "model=llama3.1-8b", "method=rlcr")
    g = v["grpo"]
    assert v["model"]["name_or_path"] == "meta-llama/Llama-3.1-8B"
    assert v["data"]["task"] == "bigmath_digits" and v["data"]["system_prompt"] == "simple"
    assert (v["data"]["max_prompt_length"], g["max_completion_length"]) == (1024, 4096)
    assert (g["learning_rate"], g["lr_scheduler_type"], g["warmup_steps"]) == (5e-5, "linear", 0.2)
    assert g["num_train_epochs"] == 0.5
    assert v["pool_size"] == 1536
    assert resolve_pool(g, v["pool_size"], world_size=4).accumulation == 64  # 6 x 4 x 64
    assert v["method"]["name"] == "rlcr"
    assert v["output_dir"] == "runs/bigmath-rlcr-llama3.1-8b-seed42"
    plan_run(
        from_dict(compose("recipe=bigmath", "model=llama3.1-8b", "method=rlcr", *CPU)), world_size=4
    )


def test_tiny_recipe_is_valid_on_cpu():
    plan_run(from_dict(compose("recipe=tiny")), world_size=1)
    plan_run(from_dict(compose("recipe=tiny")), world_size=2)


@pytest.mark.parametrize("method", ["rlsr", "rlcr", "rlvr"])
def test_tiny_recipe_makes_a_broken_format_cost_more_than_a_confident_error(method):
    """recipe=tiny's reward weights, under every reward method: in the recipe's pool (16 per
    process x 2 accumulation steps), a broken completion (wrong, confidence missing, so ranked at
    the bottom) must earn less under RLSR's reward than a well-formed wrong answer ranked at the
    top, i.e. format_weight > method_weight x (H_n - 1/n), recomputed with the real
    ``lifted_aurc_rewards``. Catches a weight that pays the model to break the format, and a
    defaults order in which recipes/method/<name>.yaml overrides the recipe's weight."""
    cfg = compose("recipe=tiny", f"method={method}")
    n = cfg["grpo"]["per_device_train_batch_size"] * cfg["grpo"]["gradient_accumulation_steps"]
    fw, mw = cfg["method"]["format_weight"], cfg["method"]["method_weight"]
    confidence = np.array([1.0, np.nan] + [0.5] * (n - 2))
    correct = np.array([False, False] + [True] * (n - 2))
    lifted = lifted_aurc_rewards(correct, confidence)
    wrong_at_top, broken = fw * 1 + mw * lifted[0], fw * 0 + mw * lifted[1]
    assert broken < wrong_at_top, (fw, mw, n)


def test_recipe_method_weights_yield_to_the_command_line_and_stay_per_recipe():
    """The recipe's method settings (recipes/recipe_method/tiny.yaml) lose to a command-line
    ``method.format_weight``, and a recipe without such a file keeps the method's own 0.5.
    Catches a recipe weight that cannot be overridden, or one that leaks into other recipes."""
    assert compose("recipe=tiny", "++method.format_weight=0.5")["method"]["format_weight"] == 0.5
    for recipe in ("hotpot", "bigmath", "tiny-format"):
        assert compose(f"recipe={recipe}")["method"]["format_weight"] == 0.5


@pytest.mark.parametrize(
    ("overrides", "world_size", "field", "hint"),
    [
        (["grpo.num_generations=5"], 1, "grpo.per_device_train_batch_size", "divisible"),
        # One pool = one optimizer step: TRL would rank 2 pools per step / 1 pool over 2 steps.
        (["+grpo.steps_per_generation=4"], 1, "grpo.steps_per_generation", "pool_size"),
        (["+grpo.steps_per_generation=1"], 1, "grpo.steps_per_generation", "remove it"),
        (["+grpo.generation_batch_size=32"], 1, "grpo.generation_batch_size", "pool_size=32"),
        (["pool_size=30"], 1, "pool_size", "num_generations=4"),
        (
            ["pool_size=32", "grpo.gradient_accumulation_steps=2"],
            1,
            "grpo.gradient_accumulation_steps",
            "derived from pool_size=32",
        ),
        (["pool_size=32"], 3, "pool_size", "3 processes"),
        (["pool_size=0"], 1, "pool_size", "positive integer"),
        (["method.correct_requires_format=maybe"], 1, "method.correct_requires_format", "true"),
        (["grpo.num_generations=1"], 1, "grpo.num_generations", "at least 2"),
        (["data.task=hotpotqa"], 1, "data.task", "hotpotqa"),
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
        (["grpo.max_steps=-5"], 1, "grpo.max_steps", "-1 (no cap: train grpo.num_train_epochs"),
        (["grpo.max_steps=0"], 1, "grpo.max_steps", ">= 1"),
        (["method=sft", "grpo.max_steps=0"], 1, "sft.max_steps", ">= 1"),
        (["seed=-1"], 1, "seed", "0..4294967295"),
        (["seed=4294967296"], 1, "seed", "numpy's seed range"),
    ],
)
def test_errors_name_field_and_fix(overrides, world_size, field, hint):
    # 8 per device (the recipe has 16): the pool arithmetic in the hints above assumes it
    tiny = ("recipe=tiny", "grpo.per_device_train_batch_size=8")
    with pytest.raises(ConfigError) as info:
        plan_run(from_dict(compose(*tiny, *overrides)), world_size=world_size)
    assert info.value.field == field
    assert str(info.value).startswith(field + ":")
    assert hint in str(info.value)


def test_pool_divisibility_counts_processes_and_accumulation():
    # tiny: 16 per device x 2 accumulation; G = 4 -> any world size works; G = 48 needs 3.
    settings = from_dict(compose("recipe=tiny", "grpo.num_generations=48"))
    with pytest.raises(ConfigError, match="16 x 2 x 2 = 64"):
        plan_run(settings, world_size=2)
    plan_run(settings, world_size=3)


def test_pool_size_is_kept_whatever_the_world_size():
    """pool_size is the intent; the accumulation is derived from the real world size, so
    hotpot's pool is 1536 on any number of processes. Catches a recipe that fixes
    gradient_accumulation_steps (pool 3072 on 8 GPUs, 1152 on 3 in Slurm server mode on N-1
    nodes)."""
    v = compose("recipe=hotpot")
    for world, accum in [(1, 512), (2, 256), (4, 128), (8, 64), (16, 32)]:
        plan = resolve_pool(v["grpo"], v["pool_size"], world)
        assert (plan.pool, plan.accumulation) == (1536, accum)
        assert plan.per_device * plan.world_size * plan.accumulation == 1536
    settings = from_dict(compose("recipe=hotpot", *CPU))
    assert trainer_kwargs(plan_run(settings, world_size=8))["gradient_accumulation_steps"] == 64
    # 3 training GPUs: 3 per device does not divide 1536 / 3 = 512 -> the valid sizes are listed.
    with pytest.raises(ConfigError) as info:
        plan_run(settings, world_size=3)
    assert info.value.field == "grpo.per_device_train_batch_size"
    assert "[1, 2, 4, 8, 16, 32, 64, 128, 256, 512]" in str(info.value)
    settings.grpo["per_device_train_batch_size"] = 4
    plan_run(settings, world_size=3)
    assert trainer_kwargs(plan_run(settings, world_size=3))["gradient_accumulation_steps"] == 128


def test_num_iterations_reuses_one_pool_and_is_allowed():
    plan_run(from_dict(compose("recipe=tiny", "+grpo.num_iterations=2")), world_size=2)
    plan_run(from_dict(compose("recipe=tiny", "+grpo.steps_per_generation=2")), world_size=1)


def test_recipes_carry_the_released_settings_where_the_paper_text_is_silent():
    """sun-umn/RLSR configs/Qwen-7B/hotpot/*.yaml (docs/methods.md, "Paper text vs released code vs
    ours"); TRL 1.16's defaults differ for each of these (importance sampling on, dropout kept,
    sleep mode off, non-reentrant checkpointing)."""
    from trl import GRPOConfig

    defaults = GRPOConfig(output_dir="unused", use_cpu=True, bf16=False)
    released = {
        "vllm_importance_sampling_correction": False,
        "disable_dropout": True,
        "vllm_enable_sleep_mode": True,
        "gradient_checkpointing_kwargs": {"use_reentrant": True},
        "vllm_gpu_memory_utilization": 0.4,
    }
    for recipe in ("hotpot", "bigmath"):
        g = compose(f"recipe={recipe}")["grpo"]
        assert {k: g.get(k) for k in released} == released
    assert all(getattr(defaults, k) != v for k, v in released.items())


# What a held-out answer needs beyond its prompt with the Sec. C.3 fallbacks (tags format): the
# answer, each suffix as its UTF-8 bytes + 2 ("Thinking time ended. My final answer is": 39,
# the confidence one: 98), 64 tokens after each, one log-prob position.
FALLBACKS = (39 + 2 + 64) + (98 + 2 + 64) + 1


def test_vllm_max_model_length_defaults_to_prompt_plus_completion(gpu_machine):
    """grpo.vllm_max_model_length defaults to what the run needs: without it vLLM reserves the
    model's full context (Llama-3.1-8B: 131,072 tokens, ~16 GiB of KV cache per sequence), more
    than the colocated engine is given. The paper recipes evaluate held-out questions on that
    engine (heldout.every=20), whose answers (1,536 / 4,096 new tokens) and fallbacks need more
    than the completion length, so the engine is sized for both; without held-out evaluation it
    stays prompt + completion."""
    for recipe, model, expected in [
        ("hotpot", "qwen2.5-7b", 3072 + 1536 + FALLBACKS),
        ("bigmath", "llama3.1-8b", 1024 + 4096 + FALLBACKS),
    ]:
        settings = from_dict(compose(f"recipe={recipe}", f"model={model}"))
        assert trainer_kwargs(plan_run(settings, world_size=4))["vllm_max_model_length"] == expected
        plain = from_dict(compose(f"recipe={recipe}", f"model={model}", "heldout.every=0"))
        completion = plain.grpo["max_completion_length"]
        assert trainer_kwargs(plan_run(plain, world_size=4))["vllm_max_model_length"] == (
            plain.data.max_prompt_length + completion
        )
    settings = from_dict(compose("recipe=hotpot", "+grpo.vllm_max_model_length=8192"))
    assert trainer_kwargs(plan_run(settings, world_size=4))["vllm_max_model_length"] == 8192
    no_vllm = from_dict(compose("recipe=hotpot", *CPU))
    assert "vllm_max_model_length" not in trainer_kwargs(plan_run(no_vllm, world_size=4))


def test_an_engine_too_short_for_held_out_answers_is_refused_with_the_numbers(gpu_machine):
    """A grpo.vllm_max_model_length that holds the rollouts but not a held-out
    answer (+ fallbacks) after a prompt of data.max_prompt_length stops the run at start, with
    the length it needs; the engine would otherwise cut those answers silently."""
    need = 3072 + 1536 + FALLBACKS
    too_short = from_dict(compose("recipe=hotpot", f"+grpo.vllm_max_model_length={need - 1}"))
    with pytest.raises(ConfigError) as err:
        resolve_heldout(too_short)  # check_settings' held-out resolution (validate needs vLLM)
    assert err.value.field == "grpo.vllm_max_model_length"
    assert f"raise it to {need}" in str(err.value) and "heldout.backend=transformers" in str(
        err.value
    )
    enough = from_dict(compose("recipe=hotpot", f"+grpo.vllm_max_model_length={need}"))
    assert trainer_kwargs(plan_run(enough, world_size=4))["vllm_max_model_length"] == need
    no_heldout = from_dict(compose("recipe=hotpot", "+grpo.vllm_max_model_length=4608",
                                   "heldout.every=0"))  # fmt: skip
    assert trainer_kwargs(plan_run(no_heldout, world_size=4))["vllm_max_model_length"] == 4608


def test_held_out_refusal_under_zero3_names_a_fix_that_fits_the_vllm_mode(monkeypatch):
    """Under ZeRO-3 the transformers held-out evaluation is refused; with the colocated engine
    off the fix is grpo.use_vllm=true; in server mode (slurm/train.slurm on several nodes) it is
    heldout.backend=vllm_server, what auto picks there, which is not refused."""
    monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "true")
    monkeypatch.setenv("ACCELERATE_DEEPSPEED_ZERO_STAGE", "3")
    for overrides, fix, not_fix in [
        (["grpo.use_vllm=false"], "set grpo.use_vllm=true", "vllm_server"),
        (["grpo.vllm_mode=server", "heldout.backend=transformers"], "heldout.backend=vllm_server",
         "set grpo.use_vllm=true"),
    ]:  # fmt: skip
        settings = from_dict(compose("recipe=hotpot", *overrides))
        with pytest.raises(ConfigError) as err:
            resolve_heldout(settings)
        assert err.value.field == "heldout.backend" and "ZeRO-3" in str(err.value)
        assert fix in str(err.value) and not_fix not in str(err.value)
    server = resolve_heldout(from_dict(compose("recipe=hotpot", "grpo.vllm_mode=server")))
    assert server.backend == "vllm_server"


def test_held_out_backend_vllm_server_needs_server_mode_and_sizes_the_server():
    """heldout.backend=auto picks vllm_server in grpo.vllm_mode=server, vllm in colocate mode;
    vllm_server elsewhere is refused naming the mode. The server's context (what
    slurm/resolve_config.py gives `vllm serve --max-model-len`) holds a held-out answer after a
    prompt of data.max_prompt_length, as the colocated engine's does; a grpo.vllm_max_model_length
    too short for one is refused with the numbers in both modes."""
    from rlsr.config import vllm_context_length

    colocated = resolve_heldout(from_dict(compose("recipe=hotpot")))
    assert colocated.backend == "vllm"
    settings = from_dict(compose("recipe=hotpot", "grpo.vllm_mode=server"))
    server = resolve_heldout(settings)
    assert server.backend == "vllm_server"
    assert vllm_context_length(settings, server) == 3072 + 1536 + FALLBACKS
    with pytest.raises(ConfigError) as err:
        resolve_heldout(from_dict(compose("recipe=hotpot", "heldout.backend=vllm_server")))
    assert err.value.field == "heldout.backend" and "grpo.vllm_mode=server" in str(err.value)
    need = 3072 + 1536 + FALLBACKS
    with pytest.raises(ConfigError) as err:
        resolve_heldout(from_dict(compose("recipe=hotpot", "grpo.vllm_mode=server",
                                          f"+grpo.vllm_max_model_length={need - 1}")))  # fmt: skip
    assert err.value.field == "grpo.vllm_max_model_length" and f"raise it to {need}" in str(
        err.value
    )


def test_vllm_checks_that_need_vllm_installed(monkeypatch):
    """vllm is not installed in this venv: pretend it is (the only double: an import probe)."""
    import rlsr.core.launch as M

    real = M.module_available
    monkeypatch.setattr(M, "module_available", lambda name: name == "vllm" or real(name))
    base = ("recipe=tiny", "grpo.use_vllm=true")
    plan_run(from_dict(compose(*base)), world_size=1)  # tiny turns sleep mode off
    with pytest.raises(ConfigError) as info:  # vLLM refuses sleep mode on CPU
        plan_run(from_dict(compose(*base, "grpo.vllm_enable_sleep_mode=true")), world_size=1)
    assert info.value.field == "grpo.vllm_enable_sleep_mode"
    assert "grpo.vllm_enable_sleep_mode=false" in str(info.value)
    with pytest.raises(ConfigError) as info:
        plan_run(
            from_dict(
                compose(*base, "data.max_prompt_length=100", "+grpo.vllm_max_model_length=120")
            ),
            world_size=1,
        )
    assert info.value.field == "grpo.vllm_max_model_length" and "100 + 32" in str(info.value)


def test_liger_is_optional_and_validated(monkeypatch):
    import rlsr.config.trainer_args as T
    import rlsr.core.launch as M

    with pytest.raises(ConfigError) as info:  # not installed here
        plan_run(from_dict(compose("recipe=tiny", "+grpo.use_liger_kernel=true")), world_size=1)
    assert info.value.field == "grpo.use_liger_kernel" and "rlsr[liger]" in str(info.value)
    import importlib.metadata

    real_version = importlib.metadata.version
    monkeypatch.setattr(  # pretend liger-kernel 0.8.5 is installed (a metadata probe only)
        importlib.metadata,
        "version",
        lambda name: "0.8.5" if name == "liger-kernel" else real_version(name),
    )
    with pytest.raises(ConfigError, match="Triton GPU kernels"):  # CPU
        plan_run(from_dict(compose("recipe=tiny", "+grpo.use_liger_kernel=true")), world_size=1)
    monkeypatch.setattr(M, "cuda_available", lambda: True)
    g = {"use_liger_kernel": True, "use_cpu": False, "bf16": True, "loss_type": "bnpo"}
    T.check_liger(g, on_gpu=True)  # LoRA + any loss type: fine
    with pytest.raises(ConfigError) as info:
        T.check_liger({**g, "liger_kernel_config": {"fused_linear_cross_entropy": True}}, True)
    assert info.value.field == "grpo.liger_kernel_config"


def test_world_size_defaults_to_launcher_environment(monkeypatch):
    settings = from_dict(compose("recipe=tiny", "grpo.num_generations=48"))
    monkeypatch.setenv("WORLD_SIZE", "3")
    plan_run(settings)
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ConfigError):
        plan_run(settings)


def test_unknown_top_level_key_is_rejected():
    with pytest.raises(ConfigError) as info:
        from_dict({**compose("recipe=tiny"), "otuput_dir": "x"})
    assert info.value.field == "otuput_dir"


@pytest.mark.parametrize(
    ("override", "field"), [("method.name=ppo", "method.name"), ("seed=-1", "seed")]
)
def test_train_py_prints_config_error_and_exits_2(tmp_path, override, field):
    """A bad value (a seed numpy cannot take among them) is one ``config error:`` line, exit 2,
    before anything is written to output_dir."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(
        [sys.executable, str(ROOT / "train.py"), "recipe=tiny", override,
         f"output_dir={tmp_path / 'run'}"],
        env=env, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert f"config error: {field}:" in proc.stderr
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
    """`grpo.learnig_rate=1` / `grpo.top_p=0.9` / `method=rlcr method.max_coverage=0.5`, force-added
    (++), reach validation (closest match / real field) instead of dying in Hydra's struct
    check."""
    with pytest.raises(ConfigError, match="Did you mean 'learning_rate'"):
        plan_run(from_dict(compose("recipe=tiny", "++grpo.learnig_rate=1")), world_size=1)
    settings = plan_run(
        from_dict(compose("recipe=tiny", "++grpo.top_p=0.9")), world_size=1
    ).settings
    assert settings.grpo["top_p"] == 0.9
    with pytest.raises(ConfigError, match="only apply to method=rlsr"):
        plan_run(from_dict(compose("recipe=tiny", "method=rlcr", "++method.max_coverage=0.5")))


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
    """`recipe=toy` without model.name_or_path is refused naming the field. Catches the toy
    silently training the tiny-warm model (a `???` in a recipe does not replace the value an
    earlier default set)."""
    with pytest.raises(ConfigError) as info:
        from_dict(compose("recipe=toy"))
    assert info.value.field == "model.name_or_path" and "required" in str(info.value)
    assert from_dict(compose("recipe=toy", "model.name_or_path=/w")).model.name_or_path == "/w"


def _stand_in_flash_attn(root, body: str):
    pkg = root / "flash_attn"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(body)
    return root


def test_auto_attention_falls_back_to_sdpa_when_flash_attn_is_installed_but_broken(
    tmp_path, monkeypatch, caplog
):
    """A flash-attn built for another torch is found by find_spec but fails to import
    (undefined symbol); a stand-in package that raises the same way on import takes its place
    here (no GPU or flash-attn build on CPU). One log line, then sdpa."""
    import logging
    import sys

    from rlsr.core.launch import resolve_attn_implementation

    broken = _stand_in_flash_attn(
        tmp_path / "broken",
        'raise ImportError("flash_attn_2_cuda.so: undefined symbol: _ZN3c104cuda9SetDevice")\n',
    )
    monkeypatch.syspath_prepend(str(broken))
    monkeypatch.delitem(sys.modules, "flash_attn", raising=False)
    with caplog.at_level(logging.WARNING, logger="rlsr"):
        assert resolve_attn_implementation("auto", on_gpu=True) == "sdpa"
    lines = [r.getMessage() for r in caplog.records if "flash_attn" in r.getMessage()]
    assert len(lines) == 1 and "undefined symbol" in lines[0] and "using sdpa" in lines[0]
    assert resolve_attn_implementation("auto", on_gpu=False) == "sdpa"  # no GPU: not tried
    assert resolve_attn_implementation("eager", on_gpu=True) == "eager"  # explicit wins


def test_auto_attention_takes_flash_attn_when_it_imports_on_a_gpu(tmp_path, monkeypatch):
    import sys

    from rlsr.core.launch import resolve_attn_implementation

    working = _stand_in_flash_attn(tmp_path / "ok", "__version__ = '2.8.3'\n")
    monkeypatch.syspath_prepend(str(working))
    monkeypatch.delitem(sys.modules, "flash_attn", raising=False)
    assert resolve_attn_implementation("auto", on_gpu=True) == "flash_attention_2"
    monkeypatch.delitem(sys.modules, "flash_attn", raising=False)


def test_trl_defaults_are_read_from_trl_not_restated(gpu_machine):
    """A recipe without grpo.max_completion_length trains with TRL's default (GRPOConfig: 512
    in TRL 1.16), so the held-out budget, the vLLM context and Slurm's --max-model-len follow
    that value; catches a copy of the default written in rlsr (which goes stale on upgrade)."""
    import dataclasses

    from trl import GRPOConfig

    trl_default = {f.name: f.default for f in dataclasses.fields(GRPOConfig)}
    completion = trl_default["max_completion_length"]
    values = compose("recipe=hotpot", "~grpo.max_completion_length")
    assert "max_completion_length" not in values["grpo"]
    settings = from_dict(values)
    assert resolve_heldout(settings).protocol.max_new_tokens == completion
    plain = from_dict(compose("recipe=hotpot", "~grpo.max_completion_length", "heldout.every=0"))
    expected = plain.data.max_prompt_length + completion
    assert trainer_kwargs(plan_run(plain, world_size=4))["vllm_max_model_length"] == expected
    spec = importlib.util.spec_from_file_location(
        "resolve_config", ROOT / "slurm/resolve_config.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    resolved = module.resolve(["recipe=hotpot", "~grpo.max_completion_length", "heldout.every=0"])
    assert resolved["max_model_len"] == str(expected)
    # the pool reads TRL's group size and per-device batch the same way
    pool = resolve_pool({}, None, world_size=1)
    per_device = trl_default["per_device_train_batch_size"]
    assert (pool.num_generations, pool.per_device) == (trl_default["num_generations"], per_device)


def test_the_judge_settings_have_one_value_each():
    """rlsr.verifiers.llm_judge declares the judge timeout and the answer cut once, and every
    reader (the CLI's flags, the recipe's null keys, the dataclass, the verifier, the judge
    client) gets that value. Catches a second spelling of either (e.g. one timeout in `rlsr
    evaluate`, another in the held-out evaluation's HeldOutSettings or recipes/config.yaml)."""
    import argparse
    import inspect

    import yaml

    from rlsr.cli import evaluate as evaluate_flags
    from rlsr.config import HeldOutSettings
    from rlsr.evaluation.run.judge import openai_judge_fn
    from rlsr.verifiers import llm_judge

    declared = {
        "judge_timeout": llm_judge.JUDGE_TIMEOUT_S,
        "judge_max_retries": llm_judge.JUDGE_MAX_RETRIES,
        "judge_max_answer_chars": llm_judge.JUDGE_MAX_ANSWER_CHARS,
    }
    parser = argparse.ArgumentParser()
    evaluate_flags.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["evaluate", "--model", "m", "--tasks", "tiny", "--output-dir", "o"])
    recipe = yaml.safe_load((ROOT / "recipes" / "config.yaml").read_text())["heldout"]
    from_recipe = from_dict({"heldout": {k: recipe[k] for k in declared}}).heldout
    for name, value in declared.items():
        assert getattr(args, name) == value, name
        assert getattr(HeldOutSettings(), name) == value, name
        assert getattr(from_recipe, name) == value, name
    signature = inspect.signature(openai_judge_fn).parameters
    assert signature["timeout_s"].default == declared["judge_timeout"]
    assert signature["max_retries"].default == declared["judge_max_retries"]
    verifier = llm_judge.LLMJudgeVerifier(lambda prompts: ["YES"] * len(prompts))
    assert verifier.max_answer_chars == declared["judge_max_answer_chars"]
    assert from_dict({"heldout": {"judge_timeout": 5}}).heldout.judge_timeout == 5


def test_compose_tree_can_be_called_from_several_threads_at_once():
    """``rlsr.config.compose.compose_tree`` from 3 threads released together (the toy's
    ``--jobs N`` composes each arm's plan in a worker thread): every call returns the recipe's
    tree. Catches Hydra's process-wide GlobalHydra entered twice at once ("GlobalHydra is already
    initialized"), which crashed ``examples/toy/toy_repro.py --jobs 2`` over already trained arms."""
    import threading

    from rlsr.config.compose import compose_tree

    barrier, results, errors = threading.Barrier(3), [], []

    def worker():
        barrier.wait()
        try:
            results.append(compose_tree(["recipe=tiny", "method=rlcr"])["method"]["name"])
        except Exception as err:  # noqa: BLE001 (collected; the assertion below names it)
            errors.append(repr(err))

    threads = [threading.Thread(target=worker) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == [] and results == ["rlcr"] * 3, errors[:2]

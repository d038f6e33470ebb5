"""The distributed launch of a process (rlsr.core.launch) and the combinations rlsr rejects at config time.

The expected launches are written out by hand from the YAML files' documented meaning; the
launcher test runs the real ``accelerate launch --config_file recipes/accelerate/X.yaml`` and
reads what it exported, so a renamed or missing accelerate variable fails here. The train.py test
shows the rejection of FSDP on CPU happens before any model loads (exit 2, one line).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ports import free_port as _free_port  # one OS-given port helper for the suite

from rlsr.config import ConfigError
from rlsr.core.launch import Launch, launch_from_env, launch_problems
from rlsr.method.run_plan import plan_run

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "recipes" / "accelerate"

EXPECTED = {
    "ddp": dict(name="ddp"),
    "fsdp": dict(name="fsdp", fsdp_version=2, state_dict_type="FULL_STATE_DICT"),
    "zero2": dict(name="deepspeed", zero_stage=2),
    "zero3": dict(name="deepspeed", zero_stage=3, zero3_save_16bit_model=True),
}


def _fields(launch: Launch) -> dict:
    return {k: getattr(launch, k) for k in Launch.__dataclass_fields__}


def test_env_without_accelerate_variables():
    assert launch_from_env({}).name == "single"
    assert launch_from_env({"WORLD_SIZE": "2"}).name == "ddp"  # torchrun
    # accelerate's own default state dict type for FSDP when the variable is missing
    assert launch_from_env({"ACCELERATE_USE_FSDP": "true"}).state_dict_type == "SHARDED_STATE_DICT"


def test_deepspeed_json_file_sets_the_stage(tmp_path):
    ds = tmp_path / "ds.json"
    ds.write_text(
        json.dumps(
            {"zero_optimization": {"stage": 3, "stage3_gather_16bit_weights_on_model_save": True}}
        )
    )
    env = {
        "ACCELERATE_USE_DEEPSPEED": "true",
        "ACCELERATE_DEEPSPEED_CONFIG_FILE": str(ds),
    }
    launch = launch_from_env(env)
    assert (launch.zero_stage, launch.zero3_save_16bit_model) == (3, True)


PROBE = """
import dataclasses, json, sys
from rlsr.core.launch import launch_from_env
print("LAUNCH " + json.dumps(dataclasses.asdict(launch_from_env())), flush=True)
"""


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_real_launcher_exports_what_launch_from_env_reads(tmp_path, name):
    if name.startswith("zero"):
        pytest.importorskip("deepspeed", reason="accelerate's DeepSpeed launcher needs deepspeed")
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "DS_ACCELERATOR": "cpu",
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    cmd = [
        sys.executable, "-m", "accelerate.commands.launch",
        "--config_file", str(CONFIGS / f"{name}.yaml"), "--num_processes", "1",
        "--mixed_precision", "no", "--main_process_port", str(_free_port()), str(probe),
    ]  # fmt: skip
    proc = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("LAUNCH "))
    found = json.loads(line[len("LAUNCH ") :])
    expected = {**_fields(Launch("x")), **EXPECTED[name]}
    if name == "ddp":  # one process of a MULTI_GPU launch: nothing sharded, DDP with itself
        expected["name"] = "single"
    assert found == expected


# --- the rules (each message names the field and the fix) -----------------------------------

FSDP2 = Launch("fsdp", fsdp_version=2, state_dict_type="FULL_STATE_DICT")
ZERO3 = Launch("deepspeed", zero_stage=3, zero3_save_16bit_model=True)
ZERO2 = Launch("deepspeed", zero_stage=2)
GPU_GRPO = {"use_cpu": False, "gradient_checkpointing": True, "use_vllm": True}
# FSDP with LoRA trains with transformers generation (vLLM + LoRA is refused under FSDP, below)
FSDP_GRPO = {**GPU_GRPO, "use_vllm": False}


@pytest.mark.parametrize("launch", [ZERO2, ZERO3, Launch("ddp")])
def test_recipe_settings_pass_on_gpus(launch):
    assert launch_problems(launch, GPU_GRPO, deepspeed_installed=True) == []


def test_fsdp_passes_without_vllm_or_without_lora():
    assert launch_problems(FSDP2, FSDP_GRPO) == []
    assert launch_problems(FSDP2, GPU_GRPO, lora=False) == []  # full fine-tune: no merge


def test_fsdp_lora_with_vllm_is_refused_naming_the_launches_that_keep_the_base():
    """TRL 1.16 syncs LoRA to vLLM under FSDP by merging into the base in place and unmerging;
    accelerate 1.15 upcasts only trainable parameters, so a bf16 base drifts at every sync.
    rlsr's out-of-place sync covers DDP and ZeRO only: the combination stops before loading."""
    [(field, message)] = launch_problems(FSDP2, GPU_GRPO)
    assert field == "grpo.use_vllm" and "drifts" in message
    for fix in ("ddp.yaml", "zero2.yaml", "zero3.yaml", "grpo.use_vllm=false"):
        assert fix in message


@pytest.mark.parametrize("launch", [FSDP2, ZERO2, ZERO3])
def test_sharding_on_cpu_is_rejected(launch):
    grpo = FSDP_GRPO if launch is FSDP2 else GPU_GRPO
    [(field, message)] = launch_problems(
        launch, {**grpo, "use_cpu": True}, deepspeed_installed=True
    )
    assert field == "grpo.use_cpu" and "silently" in message and "ddp.yaml" in message


def test_ddp_on_cpu_is_fine():
    assert launch_problems(Launch("ddp"), {"use_cpu": True}) == []


def test_fsdp_sharded_state_dict_is_rejected():
    launch = Launch("fsdp", fsdp_version=2, state_dict_type="SHARDED_STATE_DICT")
    [(field, message)] = launch_problems(launch, FSDP_GRPO)
    assert field == "fsdp_config.fsdp_state_dict_type" and "FULL_STATE_DICT" in message


def test_fsdp_activation_checkpointing_twice_is_rejected():
    launch = Launch(
        "fsdp", fsdp_version=2, state_dict_type="FULL_STATE_DICT", activation_checkpointing=True
    )
    [(field, message)] = launch_problems(launch, FSDP_GRPO)
    assert field == "grpo.gradient_checkpointing" and "gradient_checkpointing=false" in message
    assert launch_problems(launch, {**FSDP_GRPO, "gradient_checkpointing": False}) == []


def test_deepspeed_missing_and_zero3_without_16bit_save():
    [(field, message)] = launch_problems(ZERO2, GPU_GRPO, deepspeed_installed=False)
    assert field == "deepspeed" and "rlsr[deepspeed]" in message
    no_save = Launch("deepspeed", zero_stage=3, zero3_save_16bit_model=False)
    [(field, message)] = launch_problems(no_save, GPU_GRPO, deepspeed_installed=True)
    assert field == "deepspeed_config.zero3_save_16bit_model"


def test_validate_reads_the_launch_environment(monkeypatch):
    """rlsr.config.validate applies the rules to the launch of this process's environment."""
    from test_trainer_support import tiny_settings

    settings = tiny_settings("/tmp/rlsr-launch-check")  # recipe=tiny: use_cpu=true
    plan_run(settings)  # no accelerate variables: one process, fine
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    monkeypatch.setenv("FSDP_VERSION", "2")
    monkeypatch.setenv("FSDP_STATE_DICT_TYPE", "FULL_STATE_DICT")
    with pytest.raises(ConfigError) as err:
        plan_run(settings)
    assert err.value.field == "grpo.use_cpu"


@pytest.mark.slow
def test_train_py_under_fsdp_launch_on_cpu_exits_2_before_loading(tmp_path):
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    cmd = [
        sys.executable, "-m", "accelerate.commands.launch",
        "--config_file", str(CONFIGS / "fsdp.yaml"), "--num_processes", "1",
        "--mixed_precision", "no", "--main_process_port", str(_free_port()),
        str(ROOT / "train.py"), "recipe=tiny", f"output_dir={tmp_path / 'run'}",
    ]  # fmt: skip
    proc = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0
    assert "config error: grpo.use_cpu: FSDP2 from the accelerate config" in proc.stderr
    assert "Loading weights" not in proc.stderr + proc.stdout

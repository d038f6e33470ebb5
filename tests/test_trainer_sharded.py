"""Sharded training on real engines: FSDP2 and DeepSpeed ZeRO-2/3, 2 CPU processes (gloo), LoRA.

This file is both the pytest test and the worker that ``accelerate launch --config_file
recipes/accelerate/<engine>.yaml --num_processes 2 --mixed_precision no`` starts (``__main__``).
The launcher, the config files, accelerate's FSDP2 code (``fully_shard``, full-state-dict
save/load of the adapter, optimizer-state sharding), DeepSpeed's ZeRO engine (its CPU
accelerator, ``DS_ACCELERATOR=cpu``), TRL and PEFT are all real.

One test double, at the boundary that cannot exist here (a GPU): accelerate 1.15 turns FSDP and
DeepSpeed on only for GPU-type process groups (``AcceleratorState`` checks for MULTI_GPU etc.;
on CPU it picks MULTI_CPU and silently trains plain DDP, which rlsr rejects at config time). The
worker therefore reports the gloo CPU group to accelerate as a MULTI_GPU one
(``_gpu_type_process_group_on_cpu``) while every tensor stays on the CPU
(``ACCELERATE_TORCH_DEVICE=cpu``); the worker checks that the engine really is FSDP2 (DTensor
parameters) or a DeepSpeedEngine of the right ZeRO stage.

Each rank dumps the pools it saw (``pool_hook``); the test checks, as tests/test_trainer_distributed.py
does for DDP, that every rank saw the same pool of per_device x 2 x accumulation completions and
that re-parsing, re-verifying and ``rlsr.equations.rewards`` in this single process reproduce the pooled
reward columns exactly. FSDP2 also runs kill-and-resume: a run stopped after step 1 and resumed
from its FSDP checkpoint (``pytorch_model_fsdp.bin`` + ``optimizer.bin``) reproduces the
uninterrupted run's step-2 rollouts and rewards and ends with its adapter weights.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ports import free_port as _free_port  # one OS-given port helper for the suite

ROOT = Path(__file__).resolve().parents[1]
PER_DEVICE, ACCUM, PROCS, G, STEPS = 4, 2, 2, 4, 2
ENGINES = {  # accelerate config -> what the worker must find
    "fsdp": {"distributed_type": "FSDP", "fsdp_version": 2},
    "zero2": {"distributed_type": "DEEPSPEED", "zero_stage": 2},
    "zero3": {"distributed_type": "DEEPSPEED", "zero_stage": 3},
}


def _gpu_type_process_group_on_cpu() -> None:
    """Test double for the GPU: accelerate sees a MULTI_GPU gloo group, tensors stay on the CPU."""
    from accelerate.state import PartialState
    from accelerate.utils import DistributedType

    os.environ["ACCELERATE_TORCH_DEVICE"] = "cpu"

    def prepare_backend(self, cpu=False, sagemaker_dp=False, backend=None):
        return "gloo", DistributedType.MULTI_GPU

    PartialState._prepare_backend = prepare_backend


def _worker(out_dir: str, stop_at: int, resume: str) -> None:
    import torch
    from transformers import TrainerCallback

    torch.set_num_threads(1)
    _gpu_type_process_group_on_cpu()
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from test_trainer_support import tiny_settings

    from rlsr.method.run_plan import plan_run
    from rlsr.train.training import run_training

    rank = int(os.environ["RANK"])
    pools: list[dict] = []
    trained: list[int] = []

    from test_trainer_support import pool_record

    def hook(pool: dict) -> None:
        pools.append(pool_record(pool))

    class Stop(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            trained.append(state.global_step)
            if stop_at and state.global_step >= stop_at:
                control.should_training_stop = True

    settings = tiny_settings(
        Path(out_dir) / "run",
        max_steps=STEPS,
        save_steps=1,
        per_device_train_batch_size=PER_DEVICE,
        gradient_accumulation_steps=ACCUM,
        num_generations=G,
        warmup_steps=0,  # step 1 moves the weights, so a resume that lost them would show
        use_cpu=False,  # the GPU-type group above; the device is still the CPU
    )
    settings.resume = resume
    trainer = run_training(plan_run(settings), callbacks=[Stop()], pool_hook=hook)
    acc = trainer.accelerator
    engine: dict = {"distributed_type": acc.distributed_type.name, "device": str(acc.device)}
    if engine["distributed_type"] == "FSDP":
        from torch.distributed.fsdp import FSDPModule

        engine["fsdp_version"] = acc.state.fsdp_plugin.fsdp_version
        engine["fully_sharded"] = isinstance(trainer.model_wrapped, FSDPModule)
        engine["dtensor_params"] = all(
            type(p).__name__ == "DTensor" for p in trainer.model_wrapped.parameters()
        )
    elif engine["distributed_type"] == "DEEPSPEED":
        engine["zero_stage"] = trainer.model_wrapped.zero_optimization_stage()
        engine["engine_class"] = type(trainer.model_wrapped).__name__
    logs = [h for h in trainer.state.log_history if "loss" in h]
    # Tear the process group down before exit: without it a ZeRO-3 rank occasionally aborted in
    # a destructor at interpreter exit ("terminate called without an active exception", 1 in ~6
    # runs here) after training had finished.
    acc.wait_for_everyone()
    acc.end_training()
    Path(out_dir, f"rank{rank}.json").write_text(
        json.dumps(
            {
                "engine": engine,
                "pools": pools,
                "trained": trained,
                "pool_sizes": [h["rlsr/pool_size"] for h in logs],
            }
        )
    )


def _launch(engine: str, out_dir: Path, *, stop_at: int = 0, resume: str = "never") -> list[dict]:
    out_dir.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
        "WANDB_MODE": "disabled",
        "DS_ACCELERATOR": "cpu",
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    cmd = [
        sys.executable, "-m", "accelerate.commands.launch",
        "--config_file", str(ROOT / "recipes" / "accelerate" / f"{engine}.yaml"),
        "--num_processes", str(PROCS), "--mixed_precision", "no",
        "--main_process_port", str(_free_port()),
        __file__, str(out_dir), str(stop_at), resume,
    ]  # fmt: skip
    proc = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=560)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    return [json.loads((out_dir / f"rank{r}.json").read_text()) for r in range(PROCS)]


def _check_pools(ranks: list[dict], steps: list[int]) -> None:
    """Every rank saw the same pools; this process recomputes their reward columns exactly."""
    from test_trainer_support import assert_pools_recomputed

    assert [p["step"] + 1 for p in ranks[0]["pools"]] == steps
    expected_pool = PER_DEVICE * PROCS * ACCUM
    assert ranks[0]["pool_sizes"][-len(steps) :] == [float(expected_pool)] * len(steps)
    assert_pools_recomputed([r["pools"] for r in ranks], expected_pool, G)


def _adapter(path: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(path / "adapter_model.safetensors"))


def _check_engine(ranks: list[dict], engine: str) -> None:
    for rank in ranks:
        found = rank["engine"]
        for key, value in ENGINES[engine].items():
            assert found[key] == value, (engine, found)
        assert found["device"] == "cpu"
        if engine == "fsdp":
            assert found["fully_sharded"] and found["dtensor_params"], found
        else:
            assert found["engine_class"] == "DeepSpeedEngine", found


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_fsdp2_lora_pools_exactly_and_resumes_like_an_uninterrupted_run(tmp_path):
    import torch
    from test_trainer_support import format_warm_model

    format_warm_model()  # build the cached fixture once, before two ranks race for it
    full = _launch("fsdp", tmp_path / "a")
    _check_engine(full, "fsdp")
    _check_pools(full, [1, 2])

    stopped = _launch("fsdp", tmp_path / "b", stop_at=1)
    assert stopped[0]["trained"] == [1]
    checkpoint = tmp_path / "b" / "run" / "checkpoint-1"
    # FSDP's own checkpoint files (accelerate save_fsdp_model / save_fsdp_optimizer).
    assert (checkpoint / "pytorch_model_fsdp.bin").is_file()
    assert (checkpoint / "optimizer.bin").is_file()
    assert (checkpoint / "adapter_model.safetensors").is_file()

    resumed = _launch("fsdp", tmp_path / "b", resume="auto")
    assert resumed[0]["trained"] == [2]
    _check_pools(resumed, [2])
    assert resumed[0]["pools"] == full[0]["pools"][1:]

    a, c = _adapter(tmp_path / "a" / "run"), _adapter(tmp_path / "b" / "run")
    assert a.keys() == c.keys()
    assert any(k.endswith("lora_B.weight") and v.abs().max() > 0 for k, v in a.items())
    for key in a:
        torch.testing.assert_close(c[key], a[key], rtol=0, atol=1e-6, msg=key)


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("engine", ["zero2", "zero3"])
def test_deepspeed_zero_lora_pools_exactly(tmp_path, engine):
    pytest.importorskip("deepspeed", reason="pip install 'rlsr[deepspeed]'")
    from test_trainer_support import format_warm_model

    format_warm_model()
    ranks = _launch(engine, tmp_path)
    _check_engine(ranks, engine)
    _check_pools(ranks, [1, 2])
    adapter = _adapter(tmp_path / "run")  # ZeRO-3: gathered 16-bit weights, not empty shards
    assert adapter and all(v.numel() > 0 for v in adapter.values())
    assert any(k.endswith("lora_B.weight") and v.abs().max() > 0 for k, v in adapter.items())


if __name__ == "__main__":
    _worker(sys.argv[1], int(sys.argv[2]), sys.argv[3])

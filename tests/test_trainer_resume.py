"""Kill-and-resume: a run stopped after step k and resumed continues at k+1 and ends identical.

Three in-process runs of recipe=tiny-format (format-warm tiny model, LoRA r=1, transformers
generation, 1 process) with max_steps=4 and a checkpoint every 2 steps:

* A: uninterrupted, 4 steps;
* B: stopped by a callback right after step 2 (its checkpoint-2 is written first), like a job
  killed at that point;
* C: ``resume=auto`` on B's folder: starts from checkpoint-2 and runs steps 3 and 4.

All three write every pool (``pool_log.every=1``: pools/step-0 ... step-3, the pool of step N
generated after N optimizer steps). Before C starts, B's folder gets what a ``kill -9`` in the
middle of a pool write leaves (the temporary file of step 2, half written) and a step-3 file of
a killed attempt that had gone further (planted: an in-process run cannot be SIGKILLed; the real
SIGKILL of ``train.py recipe=tiny-format`` is tests/test_heldout_eval.py's kill -9 test). C must
end with each step's pool on disk once, equal row by row to A's.

C must log steps 3 and 4 only, see the same rollouts as A (same data order and same sampling:
HF Trainer restores the python/numpy/torch RNG states from ``rng_state.pth`` after skipping the
consumed batches, and TRL generates at the first micro-step after that), use the same learning
rates, and end with A's LoRA weights (safetensors). Different worker threads could reorder float
sums, so weights are compared to 1e-6 rather than bitwise.
"""

from __future__ import annotations

import pytest

STOP_AT = 2
MAX_STEPS = 4


def _run(output_dir, *, resume: str, stop_at: int | None = None):
    import torch
    from test_trainer_support import TEST_THREADS, tiny_settings
    from transformers import TrainerCallback

    from rlsr.method.run_plan import plan_run
    from rlsr.train.training import run_training

    torch.set_num_threads(TEST_THREADS)

    class StopAfter(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if stop_at is not None and state.global_step >= stop_at:
                control.should_training_stop = True
            return control

        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and "loss" in logs:
                logged_steps.append(state.global_step)

    logged_steps: list[int] = []
    pools: list[tuple] = []

    def hook(pool):
        pools.append((pool["global_step"], tuple(pool["texts"]), pool["rewards"].tolist()))

    settings = tiny_settings(output_dir, max_steps=MAX_STEPS, save_steps=STOP_AT)
    settings.resume = resume
    settings.pool_log.every = 1
    trainer = run_training(plan_run(settings), callbacks=[StopAfter()], pool_hook=hook)
    return trainer, pools, logged_steps


def _adapter(path):
    from safetensors.torch import load_file

    return load_file(str(path / "adapter_model.safetensors"))


def _step_logs(trainer) -> dict[int, dict]:
    return {h["step"]: h for h in trainer.state.log_history if "loss" in h}


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_stopped_run_resumes_at_next_step_and_matches_uninterrupted(tmp_path):
    import torch

    full, full_pools, _ = _run(tmp_path / "a", resume="never")
    stopped, _, _ = _run(tmp_path / "b", resume="never", stop_at=STOP_AT)
    assert stopped.state.global_step == STOP_AT
    checkpoint = tmp_path / "b" / f"checkpoint-{STOP_AT}"
    assert (checkpoint / "adapter_model.safetensors").is_file()
    assert (checkpoint / "rng_state.pth").is_file()
    assert not (checkpoint / "adapter_model.bin").exists()

    from rlsr.method.pool_log import read_pool
    from rlsr.run.run_layout import pool_path, pool_steps

    assert pool_steps(tmp_path / "b") == [0, 1]  # B stopped before generating step 2's pool
    half = pool_path(tmp_path / "b", STOP_AT).with_suffix(".jsonl.tmp")
    half.write_text(pool_path(tmp_path / "a", STOP_AT).read_text()[:100])  # killed mid-write
    stale = pool_path(tmp_path / "b", MAX_STEPS - 1)
    stale.write_text('{"step": 3, "index": 0, "stale": true}\n')  # a further attempt's file
    resumed, resumed_pools, resumed_steps = _run(tmp_path / "b", resume="auto")
    assert resumed.state.global_step == MAX_STEPS

    full_logs, resumed_logs = _step_logs(full), _step_logs(resumed)
    # This session trained (and logged) steps 3 and 4 only; log_history also holds the
    # restored entries of steps 1-2 from trainer_state.json.
    assert resumed_steps == list(range(STOP_AT + 1, MAX_STEPS + 1))
    assert sorted(resumed_logs) == sorted(full_logs) == list(range(1, MAX_STEPS + 1))
    for step in resumed_steps:
        # Same scheduler position, same rollouts (data order + sampling RNG), same rewards.
        assert resumed_logs[step]["learning_rate"] == full_logs[step]["learning_rate"]
        assert resumed_logs[step]["num_tokens"] == full_logs[step]["num_tokens"]
        assert resumed_logs[step]["reward"] == full_logs[step]["reward"]
    assert resumed_pools == full_pools[STOP_AT:]
    # Every step's pool once (no leftover, no stale rows), each equal to the uninterrupted run's.
    assert pool_steps(tmp_path / "a") == pool_steps(tmp_path / "b") == list(range(MAX_STEPS))
    assert sorted(p.name for p in (tmp_path / "b" / "pools").iterdir()) == [
        f"step-{s}.jsonl" for s in range(MAX_STEPS)
    ]
    for step in range(MAX_STEPS):
        a_rows = read_pool(pool_path(tmp_path / "a", step))
        b_rows = read_pool(pool_path(tmp_path / "b", step))
        assert len(b_rows) == len(a_rows) == len(full_pools[step][1])
        for x, y in zip(a_rows, b_rows, strict=True):
            assert y["step"] == step
            for key in ("index", "prompt_id", "completion", "answer", "correct", "format_ok"):
                assert x[key] == y[key], (step, key)
            assert y["reward"] == pytest.approx(x["reward"], abs=1e-6)
            assert y["advantage"] == pytest.approx(x["advantage"], abs=1e-6)

    # The run trained (weights moved from LoRA's zero-initialised B) and ends where A ends.
    a, c = _adapter(tmp_path / "a"), _adapter(tmp_path / "b")
    assert a.keys() == c.keys()
    assert any(k.endswith("lora_B.weight") and v.abs().max() > 0 for k, v in a.items())
    for key in a:
        torch.testing.assert_close(c[key], a[key], rtol=0, atol=1e-6, msg=key)

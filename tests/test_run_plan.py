"""The run plan is derived once per launch (issue 30): ``rlsr.run_plan.plan_run`` checks the
settings and derives the pool, the held-out plan and the vLLM context; the trainer's arguments,
the trainer, the held-out evaluator and the end-of-run summary read that plan instead of deriving
their own copies. Counted with ``sys.setprofile`` on the functions' code objects, so a second
derivation is seen whatever name it is called through."""

from __future__ import annotations

import sys
from contextlib import contextmanager

import pytest
from test_config import compose

from rlsr.config import ConfigError, from_dict, resolve_heldout, resolve_pool
from rlsr.run_plan import plan_run
from rlsr.training import build_trainer, run_summary


@contextmanager
def calls_of(*functions):
    """``{function name: number of calls}`` while the block runs (Python-level calls only)."""
    codes = {f.__code__: f.__name__ for f in functions}
    counts = dict.fromkeys(codes.values(), 0)
    previous = sys.getprofile()

    def profile(frame, event, arg):
        if event == "call" and frame.f_code in codes:
            counts[codes[frame.f_code]] += 1

    sys.setprofile(profile)
    try:
        yield counts
    finally:
        sys.setprofile(previous)


@pytest.mark.timeout(300)
def test_a_launch_derives_its_pool_and_held_out_plan_once(tmp_path):
    """train.py's path: plan, build the trainer (arguments, held-out evaluator), summarise."""
    cfg = from_dict(compose("recipe=tiny", f"output_dir={tmp_path / 'run'}"))
    with calls_of(resolve_pool, resolve_heldout) as counts:
        plan = plan_run(cfg, world_size=1)
        trainer = build_trainer(cfg, plan=plan)
        run_summary(cfg, plan=plan)
    assert plan.heldout is not None and trainer.heldout_evaluator is not None  # eval.every > 0
    assert trainer.args.gradient_accumulation_steps == plan.pool.accumulation
    assert counts == {"resolve_pool": 1, "resolve_heldout": 1}


def test_the_plan_is_what_the_trainer_is_built_from():
    cfg = from_dict(compose("recipe=tiny", "pool_size=64", "~grpo.gradient_accumulation_steps"))
    plan = plan_run(cfg, world_size=1)
    assert (plan.pool.pool, plan.pool.accumulation, plan.section) == (64, 4, "grpo")
    assert plan.method.name == "rlsr" and plan.settings is cfg
    sft = plan_run(from_dict(compose("recipe=tiny", "method=sft")), world_size=1)
    assert sft.pool is None and sft.section == "sft"
    assert sft.settings.pool_log.every == 0  # no reward pool to write: said, then off


def test_a_launch_whose_process_count_differs_from_the_plan_is_refused(tmp_path):
    """The pool is planned for $WORLD_SIZE; a trainer launched with another process count would
    rank another number of rollouts per step."""
    cfg = from_dict(
        compose(
            "recipe=tiny",
            f"output_dir={tmp_path / 'run'}",
            "pool_size=64",
            "~grpo.gradient_accumulation_steps",
        )
    )
    plan = plan_run(cfg, world_size=2)
    with pytest.raises(ConfigError) as err:
        build_trainer(cfg, plan=plan)
    assert err.value.field == "pool_size" and "planned for 2 processes" in str(err.value)


def test_the_process_count_is_read_as_accelerate_reads_it(monkeypatch):
    """An MPI launch states its size only in its own variable before accelerate sets WORLD_SIZE;
    planning for 1 process there would refuse (or mis-size) the run."""
    from rlsr.config.pool import WORLD_SIZE_VARIABLES, world_size_from_env

    for name in WORLD_SIZE_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    assert world_size_from_env() == 1
    monkeypatch.setenv("PMI_SIZE", "4")
    assert world_size_from_env() == 4
    monkeypatch.setenv("WORLD_SIZE", "2")  # torchrun / accelerate's own first
    assert world_size_from_env() == 2


def test_the_engine_and_the_run_plan_read_one_world_size():
    """Issue 37 item 6: an MPI launch states its size only in its own variable; the engine
    (DDP vs single) and the run plan's process count read it with the same reader."""
    from rlsr.config.pool import world_size_from_env as plan_reader
    from rlsr.engines import engine_from_env

    names = ("WORLD_SIZE", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE")
    assert [engine_from_env({name: "4"}).name for name in names] == ["ddp"] * 4
    assert [plan_reader({name: "4"}) for name in names] == [4] * 4
    assert engine_from_env({}).name == "single" and plan_reader({}) == 1

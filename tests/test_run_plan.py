"""The run plan is derived once per launch: ``rlsr.method.run_plan.plan_run`` checks the
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
from rlsr.method.run_plan import plan_run
from rlsr.train.training import build_trainer, run_summary, trainer_kwargs


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
        trainer = build_trainer(plan)
        run_summary(plan)
    assert plan.heldout is not None and trainer.heldout_evaluator is not None  # heldout.every > 0
    assert trainer.args.gradient_accumulation_steps == plan.pool.accumulation
    assert counts == {"resolve_pool": 1, "resolve_heldout": 1}


def test_the_plan_is_what_the_trainer_is_built_from():
    cfg = from_dict(compose("recipe=tiny", "pool_size=64", "~grpo.gradient_accumulation_steps"))
    plan = plan_run(cfg, world_size=1)
    assert (plan.pool.pool, plan.pool.accumulation, plan.section) == (64, 4, "grpo")
    assert plan.method.name == "rlsr" and plan.settings is cfg
    sft = plan_run(from_dict(compose("recipe=tiny", "method=sft")), world_size=1)
    assert sft.pool is None and sft.section == "sft"
    # no reward pool to write: planned off and said; the settings are never changed
    assert sft.pool_log.every == 0 and sft.settings.pool_log.every == 1
    assert "does not apply to method=sft" in " ".join(sft.notes)


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
        build_trainer(plan)
    assert err.value.field == "pool_size" and "planned for 2 processes" in str(err.value)


def test_the_process_count_is_read_as_accelerate_reads_it(monkeypatch):
    """An MPI launch states its size only in its own variable before accelerate sets WORLD_SIZE;
    planning for 1 process there would refuse (or mis-size) the run."""
    from rlsr.core.launch import WORLD_SIZE_VARIABLES, world_size_from_env

    for name in WORLD_SIZE_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    assert world_size_from_env() == 1
    monkeypatch.setenv("PMI_SIZE", "4")
    assert world_size_from_env() == 4
    monkeypatch.setenv("WORLD_SIZE", "2")  # torchrun / accelerate's own first
    assert world_size_from_env() == 2


def test_the_launch_and_the_run_plan_read_one_world_size():
    """An MPI launch states its size only in its own variable; the launch (DDP vs single) and
    the run plan's process count read it with the same reader, so they cannot disagree."""
    from rlsr.config import world_size_from_env as plan_reader
    from rlsr.core.launch import launch_from_env

    names = ("WORLD_SIZE", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE")
    assert [launch_from_env({name: "4"}).name for name in names] == ["ddp"] * 4
    assert [plan_reader({name: "4"}) for name in names] == [4] * 4
    assert launch_from_env({}).name == "single" and plan_reader({}) == 1


# --------------------------------------------------------------------------- one plan per launch
# No path of a launch plans a second time, and none gets arguments from a half-checked plan.


@pytest.fixture
def plan_count(monkeypatch):
    """How many times a launch is planned (``rlsr.method.run_plan.plan_run``, the one function every
    caller plans with; ``plan_from_config`` calls it)."""
    import rlsr.method.run_plan

    calls = []
    real = rlsr.method.run_plan.plan_run

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(rlsr.method.run_plan, "plan_run", counted)
    return calls


def test_the_toys_arm_plans_its_launch_once(tmp_path, plan_count):
    """examples.toy.arms.train_arm plans its settings once and builds the trainer from that plan.
    The build stops at the missing warm-up model, after planning."""
    from examples.toy.arms import train_arm
    from examples.toy.task import write_dataset_folder

    data = write_dataset_folder(tmp_path / "data", "easy", seed=0, n_train=20, n_heldout=10)
    with pytest.raises(ConfigError) as err:
        train_arm(tmp_path / "no-warmup", data, "rlsr", tmp_path / "run")
    assert err.value.field == "model.name_or_path"
    assert len(plan_count) == 1


@pytest.mark.parametrize("name", ["trainer_kwargs", "build_trainer", "run_training", "run_summary"])
def test_the_build_takes_the_launchs_plan_not_settings(name):
    """Every function of the build receives the launch's plan and refuses bare settings with a
    TypeError naming plan_run (planning them again could disagree with the launch's plan)."""
    import rlsr.train.training

    cfg = from_dict(compose("recipe=tiny"))
    with pytest.raises(TypeError, match=rf"{name} takes the launch's run plan .*plan_run"):
        getattr(rlsr.train.training, name)(cfg)
    plan = plan_run(cfg, world_size=1)
    assert trainer_kwargs(plan)["gradient_accumulation_steps"] == plan.pool.accumulation


def test_a_supervised_plans_trainer_arguments_have_no_reward_weights():
    """A method=sft plan's trainer arguments are SFTConfig's: no reward weights."""
    sft = plan_run(from_dict(compose("recipe=tiny", "method=sft")), world_size=1)
    assert "reward_weights" not in trainer_kwargs(sft)


def test_the_plan_is_flat_and_its_vllm_context_is_the_answer():
    """One plan type whose fields are the answers: no nested plan beside them, and
    vllm_max_model_length is the stated value when set, else the derived one."""
    import dataclasses

    plan = plan_run(from_dict(compose("recipe=tiny")), world_size=1)
    nested = [f.name for f in dataclasses.fields(plan) if dataclasses.is_dataclass(getattr(plan, f.name))
              and type(getattr(plan, f.name)).__name__.endswith("Plan") and f.name != "pool"]  # fmt: skip
    assert nested == [] and not hasattr(plan, "checked")
    stated = plan_run(
        from_dict(compose("recipe=tiny", "+grpo.vllm_max_model_length=4096")), world_size=1
    )
    assert stated.vllm_max_model_length == 4096


def test_slurm_server_length_is_the_trainers_rule_or_none_with_the_reason(capsys):
    """slurm/resolve_config.py sized the vLLM server as prompt + completion when the settings did
    not resolve (a rule the trainer never uses); now it leaves max_model_len empty (vLLM's
    default) and prints why: train.py refuses that run with the same message."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "slurm" / "resolve_config.py"
    spec = importlib.util.spec_from_file_location("resolve_config", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    resolved = module.resolve(["recipe=hotpot", "heldout.max_new_tokens=-5"])
    assert resolved["max_model_len"] == ""
    said = capsys.readouterr().err
    assert "heldout.max_new_tokens" in said and "train.py will refuse" in said
    # no evaluation flags are guessed either: left out, with the reason (the sweep then refuses)
    assert resolved["evaluate_args"] is None and "evaluate_args left out" in said
    settings = from_dict(compose("recipe=hotpot", "grpo.vllm_mode=server"))
    from rlsr.config import vllm_context_length

    expected = vllm_context_length(settings, resolve_heldout(settings))
    assert module.resolve(["recipe=hotpot"])["max_model_len"] == str(expected)

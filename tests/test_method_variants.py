"""Named method variants (recipes/method/*.yaml beyond the three methods): the plain-AURC
ablation of paper Sec. C.7 / Fig. 3 and our marginal-credit RLSR compose, keep their own
output_dir, and train."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rlsr.config import from_dict
from rlsr.equations import rewards as R
from rlsr.method.run_plan import plan_run

ROOT = Path(__file__).resolve().parents[1]
CPU = ("grpo.use_vllm=false", "grpo.bf16=false", "grpo.use_cpu=true")


def compose(*overrides: str) -> dict:
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from omegaconf import OmegaConf

    with initialize_config_dir(config_dir=str(ROOT / "recipes"), version_base="1.3"):
        cfg = hydra_compose(config_name="config", overrides=list(overrides))
    values = OmegaConf.to_container(cfg, resolve=True)
    values.pop("hydra", None)
    return values


def test_plain_aurc_variant_composes_with_its_own_output_dir():
    v = compose("recipe=hotpot", "method=rlsr-plain-aurc")
    assert v["method"]["name"] == "rlsr" and v["method"]["correct_scale"] == 0.0
    assert v["output_dir"] == "runs/hotpot-rlsr-plain-aurc-qwen2.5-7b-seed42"
    # The three methods keep their folders (no label: the method's name).
    assert compose("recipe=hotpot")["output_dir"] == "runs/hotpot-rlsr-qwen2.5-7b-seed42"
    assert compose("recipe=tiny", "method=rlcr", "seed=3")["output_dir"] == (
        "runs/tiny-rlcr-tiny-seed3"
    )
    settings = plan_run(
        from_dict(compose("recipe=hotpot", "method=rlsr-plain-aurc", *CPU)), world_size=4
    ).settings
    assert settings.method.correct_scale == 0.0 and settings.method.label == "rlsr-plain-aurc"


@pytest.mark.timeout(300)
def test_plain_aurc_variant_trains_and_rewards_only_errors(tmp_path):
    """One real step of recipe=tiny-format with method=rlsr-plain-aurc: in the pooled reward column a
    correct completion gets 0 and a wrong one -alpha_i (rank_weights over the whole pool)."""
    import torch
    from test_trainer_support import TEST_THREADS, format_warm_model

    from rlsr.train.training import build_trainer

    torch.set_num_threads(TEST_THREADS)
    values = compose(
        "recipe=tiny-format", "method=rlsr-plain-aurc", f"output_dir={tmp_path / 'run'}"
    )
    settings = from_dict(values)
    settings.model.name_or_path = str(format_warm_model())
    # 64 completions (16 prompts x 4): right and wrong both present with probability
    # 1 - 5e-11 (test_trainer.py, ONE_STEP_POOL), so the check below can fail.
    settings.grpo.update(max_steps=1, save_steps=1000, max_completion_length=40,
                         report_to="none", disable_tqdm=True, per_device_train_batch_size=32,
                         gradient_accumulation_steps=2)  # fmt: skip
    pools = []
    trainer = build_trainer(plan_run(settings), pool_hook=pools.append)  # planned once, there
    trainer.train()
    pool = pools[0]
    ok = np.asarray(pool["correct"], dtype=bool)
    assert ok.any() and (~ok).any()  # the warm model gives both kinds, so the check can fail
    column = pool["rewards"][:, 1].astype(np.float64)  # (format, lifted_aurc) columns
    alpha = R.rank_weights(R.confidence_for_ranking(pool["confidence"]))
    np.testing.assert_array_equal(column[ok], 0.0)
    np.testing.assert_allclose(column[~ok], -alpha[~ok], rtol=1e-6)


def test_marginal_variant_composes_and_refuses_group_std_normalisation():
    from rlsr.config import ConfigError

    v = compose("recipe=hotpot", "method=rlsr-marginal", *CPU)
    assert v["method"]["name"] == "rlsr_marginal"
    assert v["output_dir"] == "runs/hotpot-rlsr-marginal-qwen2.5-7b-seed42"
    assert v["grpo"]["scale_rewards"] == "none"
    plan_run(from_dict(v), world_size=4)
    plan_run(from_dict(compose("recipe=hotpot", "method=rlsr-marginal", "grpo.scale_rewards=batch", *CPU)), world_size=4)  # fmt: skip
    bad = from_dict(
        compose("recipe=hotpot", "method=rlsr-marginal", "grpo.scale_rewards=group", *CPU)
    )
    with pytest.raises(ConfigError) as info:
        plan_run(bad, world_size=4)
    assert info.value.field == "grpo.scale_rewards"
    assert "best response" in str(info.value) and "'none'" in str(info.value)
    # the released reward keeps accepting it (its incentive is a threshold either way)
    plan_run(from_dict(compose("recipe=hotpot", "grpo.scale_rewards=group", *CPU)), world_size=4)


EXAMPLE = ROOT / "examples" / "my_method"


@pytest.mark.timeout(300)
def test_the_example_plugin_method_trains_from_its_recipe_file(tmp_path, monkeypatch):
    """docs/methods.md's worked example: examples/my_method/method/brier_only.yaml, found on
    Hydra's search path as ``train.py --config-dir examples/my_method method=brier_only`` finds
    it, names its MethodEntry with method.plugin; two optimizer steps of recipe=tiny-format train
    with its columns, and every pool's Brier column equals ``rlsr.equations.rewards.brier_reward``
    recomputed on that pool, as do the pool files'. A plugin that is not loaded (a built-in's
    columns), or a column computed on anything but the whole pool, fails."""
    import torch
    from test_trainer_support import TEST_THREADS, format_warm_model

    from rlsr.method.pool_log import read_pool
    from rlsr.run.run_layout import pool_path, pool_steps
    from rlsr.train.training import build_trainer

    torch.set_num_threads(TEST_THREADS)
    monkeypatch.syspath_prepend(str(EXAMPLE))  # the docs' PYTHONPATH=examples/my_method
    values = compose(f"hydra.searchpath=[file://{EXAMPLE}]", "recipe=tiny-format",
                     "method=brier_only", f"output_dir={tmp_path}")  # fmt: skip
    assert values["method"]["plugin"] == "brier_method:METHOD"
    settings = from_dict(values)
    settings.model.name_or_path = str(format_warm_model())
    settings.grpo.update(max_steps=2, save_steps=1000, max_completion_length=40,
                         report_to="none", disable_tqdm=True,
                         per_device_train_batch_size=8)  # fmt: skip
    settings.heldout.every, settings.pool_log.every = 0, 1
    pools = []
    trainer = build_trainer(plan_run(settings), pool_hook=pools.append)
    trainer.train()
    assert len(pools) == 2 and pool_steps(tmp_path) == [0, 1]
    assert [name for name, _ in trainer.columns] == ["format_reward", "brier_reward"]
    for pool, step in zip(pools, (0, 1), strict=True):
        scored = pool["correct"] & pool["format_ok"]
        brier = R.brier_reward(scored, pool["confidence"], pool["format_ok"])
        assert len(set(brier.tolist())) > 1  # confidences differ, so the check can fail
        np.testing.assert_allclose(pool["rewards"][:, 1], brier, rtol=1e-6)
        logged = [row["rewards"]["brier_reward"] for row in read_pool(pool_path(tmp_path, step))]
        np.testing.assert_allclose(logged, brier, rtol=1e-6)
    assert "rewards/brier_reward/mean" in trainer.state.log_history[0]

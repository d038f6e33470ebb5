"""RLSRTrainer: reward columns, reward signs, and one real TRL step checked against TRL's own state."""

from __future__ import annotations

import numpy as np
import pytest

from rlsr import rewards as R
from rlsr.config import ConfigError, MethodSettings
from rlsr.methods import compute_reward_columns, resolve, reward_columns
from rlsr.trainer import completion_text, pool_statistics


def _grpo_advantages(columns: np.ndarray, weights, G: int) -> np.ndarray:
    """TRL's advantage with scale_rewards='none': weighted reward minus its group mean."""
    reward = columns @ np.asarray(weights, dtype=np.float64)
    grouped = reward.reshape(-1, G)
    return (grouped - grouped.mean(axis=1, keepdims=True)).reshape(-1)


# --------------------------------------------------------------------------- columns


def test_reward_columns_and_weights_per_method():
    assert reward_columns(MethodSettings("rlsr")) == [
        ("format_reward", 0.5),
        ("lifted_aurc_reward", 0.5),
    ]
    assert reward_columns(MethodSettings("rlcr", format_weight=0.2, method_weight=1.0)) == [
        ("format_reward", 0.2),
        ("correctness_reward", 1.0),
        ("brier_reward", 1.0),
    ]
    assert [n for n, _ in reward_columns(MethodSettings("rlvr"))] == [
        "format_reward",
        "correctness_reward",
    ]
    with pytest.raises(ConfigError, match="method.name"):
        reward_columns(MethodSettings("ppo"))


def test_reward_columns_equal_the_core_library_on_a_pool():
    rng = np.random.default_rng(0)
    n = 48
    correct = rng.random(n) < 0.4
    confidence = rng.choice([0.1, 0.5, 0.5, 0.9, np.nan], size=n)
    format_ok = rng.random(n) < 0.8
    rlsr = compute_reward_columns(
        MethodSettings("rlsr", weight_cap=2.0, max_coverage=0.5, correct_scale=2.0),
        correct,
        confidence,
        format_ok,
    )
    np.testing.assert_array_equal(rlsr[:, 0], format_ok.astype(float))
    np.testing.assert_array_equal(
        rlsr[:, 1],
        R.lifted_aurc_rewards(
            correct, confidence, correct_scale=2.0, weight_cap=2.0, max_coverage=0.5
        ),
    )
    rlcr = compute_reward_columns(MethodSettings("rlcr"), correct, confidence, format_ok)
    np.testing.assert_array_equal(rlcr[:, 1], correct.astype(float))
    np.testing.assert_array_equal(rlcr[:, 2], R.brier_reward(correct, confidence, format_ok))
    rlvr = compute_reward_columns(MethodSettings("rlvr"), correct, confidence, format_ok)
    assert rlvr.shape == (n, 2)


def test_completion_text_reads_plain_and_conversational_completions():
    assert completion_text("<answer>x</answer>") == "<answer>x</answer>"
    assert completion_text([{"role": "assistant", "content": "abc"}]) == "abc"
    blocks = [
        {
            "role": "assistant",
            "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
        }
    ]
    assert completion_text(blocks) == "ab"
    assert (
        completion_text([{"role": "tool", "content": "x"}, {"role": "assistant", "content": "y"}])
        == "y"
    )


def test_pool_statistics_count_missing_confidence_as_zero():
    stats = pool_statistics(
        np.array([True, False, True, False]),
        np.array([0.9, np.nan, 0.7, 0.3]),
        np.array([True, False, True, True]),
        timeouts=3,
    )
    assert stats["rlsr/pool_size"] == 4
    assert stats["rlsr/accuracy"] == 0.5
    assert stats["rlsr/mean_confidence"] == pytest.approx((0.9 + 0 + 0.7 + 0.3) / 4)
    assert stats["rlsr/confidence_gap"] == pytest.approx(0.8 - 0.15)
    assert stats["rlsr/format_rate"] == 0.75
    assert stats["rlsr/confidence_parsed_rate"] == 0.75
    assert stats["rlsr/verifier_timeouts"] == 3
    # Most confident two are right, the rest wrong: R_1 = R_2 = 0, R_3 = 1/3, R_4 = 1/2.
    assert stats["rlsr/aurc"] == pytest.approx((0 + 0 + 1 / 3 + 1 / 2) / 4)


# --------------------------------------------------------------------------- reward signs


def test_rlsr_advantages_favour_confident_right_answers():
    # Two prompts, G = 4. Confident answers are right, unconfident ones wrong.
    correct = np.array([1, 1, 0, 0, 1, 0, 1, 0], dtype=bool)
    confidence = np.array([0.95, 0.8, 0.3, 0.1, 0.9, 0.2, 0.6, 0.4])
    fmt = np.ones(8, dtype=bool)
    method = MethodSettings("rlsr")
    adv = _grpo_advantages(
        compute_reward_columns(method, correct, confidence, fmt), [0.5, 0.5], G=4
    )
    assert np.all(adv[correct] > 0) and np.all(adv[~correct] < 0)
    # Within the first group the more confident right answer gets the larger advantage.
    assert adv[0] > adv[1]
    assert int(np.argmax(adv)) == 0  # the most confident right answer of the pool


def test_rlsr_penalises_confident_wrong_answers_hardest():
    correct = np.array([0, 0, 1, 1, 0, 0, 1, 1], dtype=bool)
    confidence = np.array([0.95, 0.2, 0.5, 0.3, 0.7, 0.1, 0.4, 0.35])
    fmt = np.ones(8, dtype=bool)
    adv = _grpo_advantages(
        compute_reward_columns(MethodSettings("rlsr"), correct, confidence, fmt), [0.5, 0.5], G=4
    )
    assert int(np.argmin(adv)) == 0  # the most confident wrong answer
    assert adv[0] < adv[1]  # confident wrong below unconfident wrong in the same group
    # RLVR cannot tell the two wrong answers apart.
    rlvr = _grpo_advantages(
        compute_reward_columns(MethodSettings("rlvr"), correct, confidence, fmt), [0.5, 0.5], G=4
    )
    assert rlvr[0] == rlvr[1]


# --------------------------------------------------------------------------- real TRL step


@pytest.mark.parametrize("method", ["rlsr", "rlcr"])
def test_one_step_matches_trl_advantages_and_logs_pool_metrics(tmp_path, method):
    """One optimizer step of recipe=tiny in this process (transformers generation, no vLLM).

    TRL's own logged advantages must equal (weighted columns - group mean) of the pool the hook
    saw, which proves the returned tensor has the layout TRL expects; the rlsr/* and
    rewards/<column>/mean metrics must be logged.
    """
    import torch
    from test_trainer_support import tiny_settings

    from rlsr.training import build_trainer, validate

    torch.set_num_threads(1)
    settings = tiny_settings(tmp_path, max_steps=1, save_steps=1000)
    settings.method = MethodSettings(method)
    validate(settings)
    pools = []
    trainer = build_trainer(settings, pool_hook=pools.append)
    trainer.train()

    assert len(pools) == 1
    pool = pools[0]
    G = settings.grpo["num_generations"]
    weights = [w for _, w in reward_columns(settings.method)]
    expected = _grpo_advantages(pool["rewards"].astype(np.float64), weights, G)
    np.testing.assert_allclose(np.array(trainer._logs["advantages"]), expected, atol=1e-6)

    logs = trainer.state.log_history[0]
    n = settings.grpo["per_device_train_batch_size"] * settings.grpo["gradient_accumulation_steps"]
    assert logs["rlsr/pool_size"] == n == len(pool["correct"])
    for key in ("aurc", "ece", "accuracy", "mean_confidence", "format_rate", "verifier_timeouts"):
        assert f"rlsr/{key}" in logs
    assert logs["rlsr/accuracy"] == pytest.approx(pool["correct"].mean())
    for i, (name, _) in enumerate(reward_columns(settings.method)):
        assert logs[f"rewards/{name}/mean"] == pytest.approx(
            float(pool["rewards"][:, i].mean()), abs=1e-5
        )
    assert trainer._verifier is None  # the verifier was closed when training ended

    # The saved model carries no pickled training_args.bin; its JSON form masks token fields.
    trainer.save_model(str(tmp_path / "final"))
    assert (tmp_path / "final" / "adapter_model.safetensors").is_file()
    assert not list((tmp_path / "final").glob("*.bin"))
    assert '"hub_token": "<HUB_TOKEN>"' in (tmp_path / "final" / "training_args.json").read_text()


def test_trainer_rejects_reward_funcs(tmp_path):
    from rlsr.trainer import RLSRTrainer

    with pytest.raises(ValueError, match="reward_funcs"):
        RLSRTrainer(model="unused", method=resolve(MethodSettings("rlsr")), reward_funcs=[len])


# --------------------------------------------------------------------------- finished runs


def _checkpoint(folder, global_step: int, max_steps: int):
    """A checkpoint folder as HF Trainer writes it (trainer_state.json + adapter files)."""
    import json

    folder.mkdir(parents=True)
    (folder / "trainer_state.json").write_text(
        json.dumps({"global_step": global_step, "max_steps": max_steps})
    )
    (folder / "adapter_model.safetensors").write_bytes(b"weights")
    (folder / "adapter_config.json").write_text("{}")
    (folder / "optimizer.pt").write_bytes(b"state")
    (folder / "rng_state.pth").write_bytes(b"state")
    return folder


def test_checkpoint_is_final_uses_grpo_max_steps_else_the_stored_one(tmp_path):
    from rlsr.training import checkpoint_is_final

    done = _checkpoint(tmp_path / "checkpoint-6", global_step=6, max_steps=6)
    assert checkpoint_is_final(done, 6)
    assert checkpoint_is_final(done, None)  # epoch-based run: trainer_state's max_steps
    assert checkpoint_is_final(done, -1)
    assert not checkpoint_is_final(done, 8)  # raised max_steps: continue training
    middle = _checkpoint(tmp_path / "checkpoint-3", global_step=3, max_steps=6)
    assert not checkpoint_is_final(middle, 6) and not checkpoint_is_final(middle, None)
    assert not checkpoint_is_final(tmp_path / "missing", 6)


def test_rerun_of_a_finished_run_trains_nothing_and_keeps_the_final_adapter(tmp_path):
    """Regression: HF Trainer resumed from the last checkpoint trains one step past max_steps
    (it checks the limit only after a step), so rerunning / requeueing a finished job wrote a
    checkpoint-7 and a new final adapter. run_training must stop before loading the model."""
    from test_trainer_support import tiny_settings

    from rlsr.training import run_training

    out = tmp_path / "run"
    _checkpoint(out / "checkpoint-6", global_step=6, max_steps=6)
    settings = tiny_settings(out, max_steps=6, save_steps=3)
    settings.model.name_or_path = str(tmp_path / "no-model-here")  # proves nothing is loaded
    assert run_training(settings) is None
    assert sorted(p.name for p in out.iterdir() if p.name.startswith("checkpoint")) == [
        "checkpoint-6"
    ]
    # The job had stopped before save_model: the final adapter is exported from the checkpoint,
    # without the optimizer/RNG state.
    assert (out / "adapter_model.safetensors").read_bytes() == b"weights"
    assert not (out / "optimizer.pt").exists() and not (out / "rng_state.pth").exists()


def test_offline_dataset_and_missing_model_are_one_line_config_errors(tmp_path, monkeypatch):
    """Regression: on a machine without hub access train.py died in a traceback from datasets /
    transformers. Both now raise ConfigError naming the field and the download command. The hub
    is switched to offline mode (no network here; an unreachable hub behaves the same, slower)."""
    import datasets.config
    import huggingface_hub.constants
    from test_trainer_support import tiny_settings

    from rlsr.config import ConfigError
    from rlsr.training import build_trainer, load_train_dataset

    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.delenv("RLSR_DATA_DIR", raising=False)
    settings = tiny_settings(tmp_path)
    settings.data.dataset = "gsm8k"
    with pytest.raises(ConfigError) as info:
        load_train_dataset(settings)
    assert info.value.field == "data.dataset"
    assert "rlsr datasets download gsm8k" in str(info.value) and "data.path=" in str(info.value)
    assert "\n" not in str(info.value)

    settings = tiny_settings(tmp_path)
    settings.model.name_or_path = str(tmp_path / "no-such-model")
    with pytest.raises(ConfigError) as info:
        build_trainer(settings)
    assert info.value.field == "model.name_or_path" and "model.name_or_path=DIR" in str(info.value)

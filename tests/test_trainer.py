"""RLSRTrainer: reward columns, reward signs, and one real TRL step per method whose rewards and
advantages, as TRL received them, are recomputed here from the completion texts by brute force."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rlsr.config import ConfigError, MethodSettings
from rlsr.equations import rewards as R
from rlsr.method.methods import compute_reward_columns, resolve, reward_columns
from rlsr.method.pool import pool_statistics
from rlsr.method.trainer import completion_text


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
    scored = correct & format_ok  # a format failure counts as wrong (correct_requires_format)
    assert (scored != correct).any()
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
            scored, confidence, correct_scale=2.0, weight_cap=2.0, max_coverage=0.5
        ),
    )
    rlcr = compute_reward_columns(MethodSettings("rlcr"), correct, confidence, format_ok)
    np.testing.assert_array_equal(rlcr[:, 1], scored.astype(float))
    np.testing.assert_array_equal(rlcr[:, 2], R.brier_reward(scored, confidence, format_ok))
    rlvr = compute_reward_columns(MethodSettings("rlvr"), correct, confidence, format_ok)
    np.testing.assert_array_equal(rlvr, np.stack([format_ok, scored], axis=1).astype(float))
    # correct_requires_format=false: the verifier alone decides (the paper text is silent).
    loose = MethodSettings("rlvr", correct_requires_format=False)
    np.testing.assert_array_equal(
        compute_reward_columns(loose, correct, confidence, format_ok)[:, 1], correct.astype(float)
    )


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


# --------------------------------------------------------------------------- brute force
# Written out here from the paper's definitions, independent of rlsr.equations.rewards / rlsr.core.ranking.


def _brute_alpha(confidence: list[float | None], cap: float | None = None) -> np.ndarray:
    """alpha_i = H_n - H_{n - r_i}, r_i the ascending confidence rank (missing = 0), tied
    confidences averaged over the ranks they occupy (RLSR Sec. 2.2; docs/methods.md); with a cap, each
    rank's weight is capped before the tie average (rlsr.equations.rewards.lifted_aurc_rewards)."""
    conf = [0.0 if c is None or c != c else c for c in confidence]
    n = len(conf)

    def H(k):
        return sum(1.0 / j for j in range(1, k + 1))

    out = []
    for c in conf:
        below = sum(1 for d in conf if d < c)
        ties = sum(1 for d in conf if d == c)
        ranks = range(below + 1, below + ties + 1)
        out.append(sum(min(H(n) - H(n - r), cap or np.inf) for r in ranks) / ties)
    return np.array(out)


def _brute_columns(method: MethodSettings, correct, confidence, format_ok) -> np.ndarray:
    """Unweighted reward columns of each method, from their definitions (docs/training.md)."""
    # A format failure counts as wrong (RLCR reference accuracy_reward; correct_requires_format).
    ok = [bool(c and f) for c, f in zip(correct, format_ok, strict=True)]
    fmt = [1.0 if f else 0.0 for f in format_ok]
    if method.name == "rlsr":
        alpha = _brute_alpha(confidence, method.weight_cap)  # binds on right and wrong answers
        rows = []
        for i, a in enumerate(alpha):
            rows.append([fmt[i], method.correct_scale * a if ok[i] else -a])
        return np.array(rows)
    if method.name == "rlsr_marginal":
        # D_j = T(pool) - T(pool with j alone below everyone), T = sum of lifted rewards.
        def total(conf):
            alpha = _brute_alpha(conf, method.weight_cap)
            return sum(
                method.correct_scale * a if o else -a for a, o in zip(alpha, ok, strict=True)
            )

        base = total(list(confidence))
        moved = [
            total([-1.0 if k == j else c for k, c in enumerate(confidence)]) for j in range(len(ok))
        ]
        return np.array([[fmt[j], base - moved[j]] for j in range(len(ok))])
    if method.name == "rlvr":
        return np.array([[fmt[i], float(ok[i])] for i in range(len(ok))])
    assert method.name == "rlcr"
    rows = []
    for i in range(len(ok)):
        c = confidence[i]
        brier = 0.0 if (c is None or not format_ok[i]) else 1.0 - (float(ok[i]) - c) ** 2
        rows.append([fmt[i], float(ok[i]), brier])
    return np.array(rows)


def _brute_advantages(columns: np.ndarray, weights, G: int) -> list[float]:
    """scale_rewards='none': weighted reward minus the mean of its group of G consecutive rows."""
    out = []
    for start in range(0, len(columns), G):
        totals = [
            sum(w * v for w, v in zip(weights, row, strict=True))
            for row in columns[start : start + G]
        ]
        out += [t - sum(totals) / G for t in totals]
    return out


def test_brute_force_reference_agrees_with_the_library_on_ties_caps_and_missing_values():
    """The test's own reference, checked once against rlsr.equations.rewards on a hand-made pool where the
    cap binds on right AND wrong answers and confidences tie and go missing."""
    correct = [True, False, True, True, False, True, False, True]
    confidence = [0.9, 0.9, 0.8, None, 0.1, 0.8, 0.0, 0.95]
    format_ok = [True, True, True, False, True, True, True, True]
    alpha = _brute_alpha(confidence)
    assert alpha.sum() == pytest.approx(len(alpha))  # sum alpha_i = n
    m = MethodSettings("rlsr", weight_cap=1.2, correct_scale=2.0)
    expected = _brute_columns(m, correct, confidence, format_ok)
    assert expected[7, 1] == pytest.approx(2.0 * 1.2)  # most confident, right: capped, then scaled
    assert expected[1, 1] == pytest.approx(-1.2)  # confident and wrong: capped
    assert expected[3, 1] < 0  # right answer but broken format: counts as wrong
    conf = np.array([np.nan if c is None else c for c in confidence])
    np.testing.assert_allclose(compute_reward_columns(m, correct, conf, format_ok), expected)
    for ms in (
        MethodSettings("rlcr"),
        MethodSettings("rlvr"),
        MethodSettings("rlsr_marginal"),
        MethodSettings("rlsr_marginal", weight_cap=1.2, correct_scale=2.0),
    ):
        np.testing.assert_allclose(
            compute_reward_columns(ms, correct, conf, format_ok),
            _brute_columns(ms, correct, confidence, format_ok),
        )


def test_weight_cap_binds_on_correct_answers():
    """A cap applied to wrong answers only would leave the most confident right
    answer at H_n. Every alpha above the cap is clipped, whatever the verdict."""
    n = 10
    confidence = np.linspace(0.05, 0.95, n)
    correct = np.ones(n, dtype=bool)
    fmt = np.ones(n, dtype=bool)
    capped = compute_reward_columns(
        MethodSettings("rlsr", weight_cap=1.0), correct, confidence, fmt
    )
    alpha = _brute_alpha(list(confidence))
    np.testing.assert_allclose(capped[:, 1], np.minimum(alpha, 1.0))
    assert capped[:, 1].max() == pytest.approx(1.0) and alpha.max() > 2.5
    wrong = compute_reward_columns(
        MethodSettings("rlsr", weight_cap=1.0), ~correct, confidence, fmt
    )
    np.testing.assert_allclose(wrong[:, 1], -np.minimum(alpha, 1.0))


# --------------------------------------------------------------------------- real TRL step


_METHOD_RUNS = {
    # weight_cap 0.1 binds on every rank above the bottom few of a 64-completion pool
    # (alpha_p = H_64 - H_{p-1} > 0.1 for p <= 58); scale 1.5.
    "rlsr": MethodSettings("rlsr", weight_cap=0.1, correct_scale=1.5),
    "rlsr_marginal": MethodSettings("rlsr_marginal", weight_cap=0.1, correct_scale=1.5),
    "rlcr": MethodSettings("rlcr"),
    "rlvr": MethodSettings("rlvr"),
}
# One pool of 64 completions (16 prompts x G = 4, two accumulation steps of 32): the chance
# that a precondition below fails by chance, from the shipped format-warm model's per-prompt
# accuracy at the recipe's temperature 0.7 (32 samples on each of the recipe's 64 prompts:
# mean 0.60, per prompt 0.16-0.97, format 1.00), averaged over which 16 prompts are drawn:
# * right and wrong answers both present: fails with probability ~5e-11 (pool of 16: ~5e-3);
# * a formatted wrong answer (a verdict that differs from the format verdict): the same bound;
# * (rlsr, rlsr_marginal) the cap binds on a formatted right answer: every tie group at
#   confidence >= 0.5 (0.75 of the confidences, drawn independently of the answer) sits within
#   the top 58 ranks unless 59+ of the 64 share it, so it fails only if none of the ~29 right
#   answers drew a confidence >= 0.5: 0.25**29 < 1e-17.
ONE_STEP_POOL = {"per_device_train_batch_size": 32, "gradient_accumulation_steps": 2}


@pytest.mark.parametrize("method", sorted(_METHOD_RUNS))
def test_one_step_rewards_and_advantages_trl_received_equal_an_independent_recompute(
    tmp_path, method
):
    """One optimizer step of recipe=tiny in this process (transformers generation, no vLLM).

    Everything expected is recomputed here from what TRL itself recorded (``trainer._logs``: the
    prompts and completion texts of the step, and the reward columns and advantages it received):
    the texts are re-parsed and re-verified against the dataset's answers for their prompts,
    every reward column of the method is recomputed by the brute-force reference above, and the
    advantages from those. Nothing is read from the trainer's own pool bookkeeping.
    """
    import torch
    from test_trainer_support import TEST_THREADS, tiny_settings

    from rlsr.core.parsing import parse_response
    from rlsr.data.loading import load_examples
    from rlsr.method.run_plan import plan_run
    from rlsr.train.training import build_trainer
    from rlsr.verifiers import get_verifier

    torch.set_num_threads(TEST_THREADS)
    settings = tiny_settings(tmp_path, max_steps=1, save_steps=1000, **ONE_STEP_POOL)
    settings.method = _METHOD_RUNS[method]
    trainer = build_trainer(plan_run(settings))
    trainer.train()

    G = settings.grpo["num_generations"]
    n = settings.grpo["per_device_train_batch_size"] * settings.grpo["gradient_accumulation_steps"]
    logs = trainer._logs
    assert len(logs["completion"]) == len(logs["prompt"]) == len(logs["advantages"]) == n

    # The answers of each prompt, from the dataset (prompt messages -> gold answers).
    golds_of: dict[str, list[str]] = {}
    for row in load_examples("tiny", split="train", limit=settings.data.limit):
        key = repr(row["prompt"])
        assert golds_of.setdefault(key, list(row["answers"])) == list(row["answers"])
    golds = [golds_of[repr(list(p))] for p in logs["prompt"]]
    for start in range(0, n, G):  # groups of G consecutive rows share their prompt
        assert all(
            repr(p) == repr(logs["prompt"][start]) for p in list(logs["prompt"])[start : start + G]
        )

    texts = [c[0]["content"] if isinstance(c, list) else c for c in logs["completion"]]
    parsed = [parse_response(t) for t in texts]
    correct = get_verifier("exact_match").verify_batch([p.answer for p in parsed], golds).correct
    correct = [bool(c) for c in correct]
    confidence = [p.confidence for p in parsed]
    format_ok = [p.format_ok for p in parsed]
    # Non-vacuous: a mix of right and wrong, and verdicts that differ from the format verdicts
    # (chances of a spurious failure above ONE_STEP_POOL).
    assert n == 64
    assert 0 < sum(correct) < n and any(c != f for c, f in zip(correct, format_ok, strict=True))

    m = settings.method
    columns = _brute_columns(m, correct, confidence, format_ok)
    names = [name for name, _ in reward_columns(m)]
    weights = [w for _, w in reward_columns(m)]
    assert names == list(logs["rewards"])
    for j, name in enumerate(names):  # every column TRL received
        np.testing.assert_allclose(np.array(logs["rewards"][name]), columns[:, j], atol=1e-6)
    np.testing.assert_allclose(
        np.array(logs["advantages"]), _brute_advantages(columns, weights, G), atol=1e-5
    )
    if method.startswith("rlsr"):  # the cap bound on at least one right answer of this pool
        alpha = _brute_alpha(confidence)
        assert any(
            a > m.weight_cap and c and f for a, c, f in zip(alpha, correct, format_ok, strict=True)
        )

    log = trainer.state.log_history[0]
    assert log["rlsr/pool_size"] == n
    assert log["rlsr/accuracy"] == pytest.approx(sum(correct) / n)
    assert log["rlsr/format_rate"] == pytest.approx(sum(format_ok) / n)
    parsed_rate = sum(c is not None for c in confidence) / n
    assert log["rlsr/confidence_parsed_rate"] == pytest.approx(parsed_rate)
    errors = np.array([0.0 if c else 1.0 for c in correct])
    assert log["rlsr/aurc"] == pytest.approx(float(_brute_alpha(confidence) @ errors) / n)
    for j, name in enumerate(names):
        assert log[f"rewards/{name}/mean"] == pytest.approx(columns[:, j].mean(), abs=1e-5)
    assert trainer._verifier is None  # the verifier was closed when training ended

    if method == "rlsr":  # the saved adapter (once)
        # The saved model carries no pickled training_args.bin; its JSON form masks tokens.
        trainer.save_model(str(tmp_path / "final"))
        assert (tmp_path / "final" / "adapter_model.safetensors").is_file()
        assert not list((tmp_path / "final").glob("*.bin"))
        text = (tmp_path / "final" / "training_args.json").read_text()
        assert '"hub_token": "<HUB_TOKEN>"' in text


def test_trainer_rejects_reward_funcs(tmp_path):
    from rlsr.method.trainer import RLSRTrainer

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
    from rlsr.train.training import checkpoint_is_final

    done = _checkpoint(tmp_path / "checkpoint-6", global_step=6, max_steps=6)
    assert checkpoint_is_final(done, 6)
    assert checkpoint_is_final(done, None)  # epoch-based run: trainer_state's max_steps
    assert checkpoint_is_final(done, -1)
    assert not checkpoint_is_final(done, 8)  # raised max_steps: continue training
    middle = _checkpoint(tmp_path / "checkpoint-3", global_step=3, max_steps=6)
    assert not checkpoint_is_final(middle, 6) and not checkpoint_is_final(middle, None)
    assert not checkpoint_is_final(tmp_path / "missing", 6)


def test_rerun_of_a_finished_run_trains_nothing_and_keeps_the_final_adapter(tmp_path):
    """Rerunning / requeueing a finished job stops before loading the model and keeps the final
    adapter. HF Trainer resumed from the last checkpoint trains one step past max_steps (it
    checks the limit only after a step): catches a rerun that writes a checkpoint-7 and a new
    final adapter."""
    from test_trainer_support import tiny_settings

    from rlsr.method.run_plan import plan_run
    from rlsr.train.training import run_training

    out = tmp_path / "run"
    _checkpoint(out / "checkpoint-6", global_step=6, max_steps=6)
    settings = tiny_settings(out, max_steps=6, save_steps=3)
    settings.model.name_or_path = str(tmp_path / "no-model-here")  # proves nothing is loaded
    assert run_training(plan_run(settings)) is None
    assert sorted(p.name for p in out.iterdir() if p.name.startswith("checkpoint")) == [
        "checkpoint-6"
    ]
    # The job had stopped before save_model: the final adapter is exported from the checkpoint,
    # without the optimizer/RNG state.
    assert (out / "adapter_model.safetensors").read_bytes() == b"weights"
    assert not (out / "optimizer.pt").exists() and not (out / "rng_state.pth").exists()


def test_offline_dataset_and_missing_model_are_one_line_config_errors(tmp_path, monkeypatch):
    """On a machine without hub access, a dataset or model that is not on disk is a ConfigError
    naming the field and the download command, not a traceback from datasets / transformers. The hub
    is switched to offline mode (no network here; an unreachable hub behaves the same, slower)."""
    import datasets.config
    import huggingface_hub.constants
    from test_trainer_support import tiny_settings

    from rlsr.config import ConfigError
    from rlsr.method.run_plan import plan_run
    from rlsr.train.training import build_trainer, load_train_dataset

    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.delenv("RLSR_DATA_DIR", raising=False)
    settings = tiny_settings(tmp_path)
    settings.data.task = "gsm8k"
    with pytest.raises(ConfigError) as info:
        load_train_dataset(settings)
    assert info.value.field == "data.task"
    assert "rlsr tasks download gsm8k" in str(info.value) and "data.path=" in str(info.value)
    assert "\n" not in str(info.value)

    settings = tiny_settings(tmp_path)
    settings.model.name_or_path = str(tmp_path / "no-such-model")
    with pytest.raises(ConfigError) as info:
        build_trainer(plan_run(settings))
    assert info.value.field == "model.name_or_path" and "model.name_or_path=DIR" in str(info.value)


def test_data_path_on_a_built_in_dataset_says_how_it_is_read(tmp_path, caplog):
    """data.path=FILE under a built-in name is read with that dataset's columns, prompt,
    verifier and held-out sets; the run says so and points at task files instead of silence."""
    import logging
    import shutil

    from test_trainer_support import tiny_settings

    from rlsr.train.training import load_train_dataset

    src = Path(__file__).resolve().parents[1] / "rlsr" / "data" / "fixtures" / "tiny"
    shutil.copytree(src, tmp_path / "mine")
    settings = tiny_settings(tmp_path)
    settings.data.path = str(tmp_path / "mine")
    with caplog.at_level(logging.WARNING, logger="rlsr.train.training"):
        assert len(load_train_dataset(settings)) > 0
    (record,) = [r for r in caplog.records if "data.path=" in r.getMessage()]
    assert "built-in task 'tiny'" in record.getMessage()
    assert "docs/tasks.md" in record.getMessage()
    caplog.clear()
    settings.data.path = None
    with caplog.at_level(logging.WARNING, logger="rlsr.train.training"):
        load_train_dataset(settings)
    assert not [r for r in caplog.records if "data.path=" in r.getMessage()]


def test_max_prompt_length_drops_longer_prompts_counted_as_the_backends_count_them(tmp_path):
    """data.max_prompt_length keeps a prompt of exactly that many tokens (the chat template
    rendered with the generation prompt, as the trainer and the backends count it), drops a
    longer one, and refuses a limit that leaves no prompt."""
    from test_trainer_support import tiny_settings

    from rlsr.config import resolve_model_path
    from rlsr.core.tokenization import load_tokenizer
    from rlsr.train.training import load_train_dataset

    settings = tiny_settings(tmp_path)
    tokenizer = load_tokenizer(resolve_model_path(settings.model.name_or_path))
    rows = load_train_dataset(settings)

    def tokens(prompt) -> int:
        ids = tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True)
        return len(ids["input_ids"] if hasattr(ids, "keys") else ids)

    longest = max(tokens(r["prompt"]) for r in rows)
    settings.data.max_prompt_length = longest
    assert len(load_train_dataset(settings, tokenizer)) == len(rows)
    settings.data.max_prompt_length = 1
    with pytest.raises(ConfigError, match=r"data\.max_prompt_length: every prompt is longer"):
        load_train_dataset(settings, tokenizer)

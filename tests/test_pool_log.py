"""Every training pool on disk (``pool_log.*``, rlsr.method.pool_log).

The writer, reader and settings on hand-made pools; then a real tiny training with the pool log
on, whose every logged reward is recomputed from the logged verdicts and confidences with the
method's reward function, and every advantage from the logged rewards with TRL's formula written
out here. The kill -9 / resume case is in tests/test_trainer_resume.py.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from rlsr.config import ConfigError, MethodSettings
from rlsr.method.pool_log import PoolLogWriter, pool_rows, read_pool, summarise_pool
from rlsr.run.run_layout import pool_path, pool_steps


def _rows(step: int, correct, confidence, format_ok=None, G: int = 2, next_heldout=None):
    n = len(correct)
    format_ok = [True] * n if format_ok is None else format_ok
    return pool_rows(
        step=step,
        num_generations=G,
        prompt_ids=[f"q{i // G}" for i in range(n)],
        golds=[["red"]] * n,
        texts=[f"<answer>x{i}</answer> and more text" for i in range(n)],
        answers=[f"x{i}" for i in range(n)],
        confidence=np.array([np.nan if c is None else c for c in confidence]),
        correct=np.array(correct),
        status=["correct" if c else "incorrect" for c in correct],
        format_ok=np.array(format_ok),
        credited_correct=np.array(correct) & np.array(format_ok),
        next_heldout_step=next_heldout,
        columns=np.stack([np.ones(n), np.arange(n, dtype=float)], axis=1),
        names=["format_reward", "lifted_aurc_reward"],
        weights=[0.5, 0.25],
        advantages=np.linspace(-1, 1, n),
        max_chars=12,
    )


# --------------------------------------------------------------------------- rows and files


def test_rows_truncate_text_keep_its_length_and_combine_the_columns_with_the_weights():
    rows = _rows(3, [True, False, True, False], [0.9, None, 0.7, 0.3])
    assert [r["index"] for r in rows] == [0, 1, 2, 3]
    assert [r["group"] for r in rows] == [0, 0, 1, 1]
    assert [r["prompt_id"] for r in rows] == ["q0", "q0", "q1", "q1"]
    assert rows[0]["completion"] == "<answer>x0</"
    assert rows[0]["completion_chars"] == len("<answer>x0</answer> and more text")
    assert rows[1]["confidence"] is None and rows[2]["confidence"] == 0.7
    assert rows[3]["rewards"] == {"format_reward": 1.0, "lifted_aurc_reward": 3.0}
    assert rows[3]["reward"] == pytest.approx(0.5 * 1.0 + 0.25 * 3.0)
    assert rows[3]["advantage"] == pytest.approx(1.0)
    assert {r["step"] for r in rows} == {3}
    json.dumps(rows)  # JSON-ready (NaN became null)


def test_rows_carry_the_credited_correctness_and_the_held_out_step_they_precede():
    """A row holds the correctness its reward credited beside the verifier's verdict (a right
    answer without the format is credited wrong under correct_requires_format), so a row
    recomputes its own reward; and the held-out step after its pool: pools 0 ... 19 of a run
    evaluated at 0, 20, 40 precede step 20 (their updates are steps 1 ... 20), the evaluator's
    own schedule deciding (a last step that is no multiple counts only with at_end)."""
    rows = _rows(3, [True, True, False], [0.9, 0.8, 0.1], [True, False, True], next_heldout=20)
    assert [r["correct"] for r in rows] == [True, True, False]
    assert [r["credited_correct"] for r in rows] == [True, False, False]
    assert {r["next_heldout_step"] for r in rows} == {20}

    def every_20(at_end):
        return lambda k, max_steps: k % 20 == 0 or (at_end and k == max_steps)

    writer = PoolLogWriter("unused", every=1, heldout_due=every_20(True))
    assert [writer.next_heldout(s, 40) for s in (0, 19, 20, 39)] == [20, 20, 40, 40]
    assert writer.next_heldout(40, 45) == 45
    assert PoolLogWriter("u", 1, heldout_due=every_20(False)).next_heldout(40, 45) is None
    assert PoolLogWriter("u", 1).next_heldout(0, 40) is None  # no held-out evaluation


def test_rows_refuse_inputs_of_different_lengths():
    with pytest.raises(ValueError, match="advantages"):
        pool_rows(
            step=0, num_generations=1, prompt_ids=["a"], golds=["x"], texts=["t"], answers=["x"],
            confidence=np.array([0.5]), correct=np.array([True]), status=["correct"],
            format_ok=np.array([True]), credited_correct=np.array([True]), next_heldout_step=None,
            columns=np.ones((1, 1)), names=["r"], weights=[1.0],
            advantages=np.zeros(2), max_chars=None,
        )  # fmt: skip


def test_writer_replaces_a_step_atomically_and_a_restart_drops_the_killed_attempts_files(tmp_path):
    writer = PoolLogWriter(tmp_path, every=2, max_chars=None)
    assert [s for s in range(7) if writer.due(s)] == [0, 2, 4, 6]
    for step in (0, 2, 4):
        writer.write(step, _rows(step, [True, False], [0.9, 0.1]))
    # A write rewrites its step (no duplicate rows) and leaves no temporary file.
    writer.write(2, _rows(2, [False, False], [0.9, 0.1]))
    assert [r["correct"] for r in read_pool(pool_path(tmp_path, 2))] == [False, False]
    assert sorted(p.name for p in (tmp_path / "pools").iterdir()) == [
        "step-0.jsonl", "step-2.jsonl", "step-4.jsonl",
    ]  # fmt: skip
    # A job killed while writing step 6 leaves its temporary file; resumed from checkpoint-2,
    # the steps >= 2 and the leftover go before the process writes them again.
    (tmp_path / "pools" / "step-6.jsonl.tmp").write_text('{"step": 6, "index"')
    removed = writer.begin(2)
    assert sorted(p.name for p in removed) == ["step-2.jsonl", "step-4.jsonl", "step-6.jsonl.tmp"]
    assert pool_steps(tmp_path) == [0]
    with pytest.raises(ValueError, match="every"):
        PoolLogWriter(tmp_path, every=0)


def test_summary_counts_right_and_wrong_confidences_and_takes_aurc_from_rlsr_metrics(tmp_path):
    # Most confident two right, the rest wrong, a missing confidence ranked as 0:
    # R_1 = R_2 = 0, R_3 = 1/3, R_4 = 1/2 (the trainer's rlsr/aurc convention).
    rows = _rows(0, [True, False, True, False], [0.9, None, 0.7, 0.3], [True, False, True, True])
    s = summarise_pool(rows)
    assert s["aurc"] == pytest.approx((0 + 0 + 1 / 3 + 1 / 2) / 4)
    assert s["accuracy"] == 0.5 and s["format_rate"] == 0.75 and s["n"] == 4
    assert s["confidence_parsed_rate"] == 0.75
    assert s["hist_right"] == [0, 0, 0, 0, 0, 0, 0, 1, 0, 1]  # 0.7 -> [0.7, 0.8), 0.9
    assert s["hist_wrong"] == [0, 0, 0, 1, 0, 0, 0, 0, 0, 0]  # 0.3
    assert (s["missing_right"], s["missing_wrong"]) == (0, 1)
    edge = summarise_pool(_rows(0, [True, False], [1.0, 0.0]))
    assert edge["hist_right"][-1] == 1 and edge["hist_wrong"][0] == 1  # both ends inside


def test_rlsr_report_pools_prints_a_line_per_step_and_writes_the_csv(tmp_path, capsys):
    from rlsr.cli import main as rlsr_main

    run = tmp_path / "run"
    writer = PoolLogWriter(run, every=1)
    writer.write(0, _rows(0, [True, False, False, False], [0.2, 0.9, 0.5, 0.5], next_heldout=2))
    writer.write(1, _rows(1, [True, True, False, False], [0.9, 0.8, 0.1, 0.2],
                          [False, True, True, True], next_heldout=2))  # fmt: skip
    assert rlsr_main(["report", "--pools", str(run), "--output-dir", str(tmp_path / "r")]) == 0
    out = capsys.readouterr().out
    lines = [line.split() for line in out.splitlines() if line.strip()[:1].isdigit()]
    assert [int(x[0]) for x in lines] == [0, 1]
    assert [x[1] for x in lines] == ["2", "2"]  # the held-out step after each pool
    # accuracy (verdicts) and credited accuracy (step 1's first right answer lacks the format)
    assert [(x[3], x[4]) for x in lines] == [("0.250", "0.250"), ("0.500", "0.250")]
    # AURC: step 0 ranks its one right answer last (R_k = 1, 1, 1, 3/4), step 1 both first
    # (R_k = 0, 0, 1/3, 1/2).
    assert [float(x[6]) for x in lines] == [round(3.75 / 4, 4), round((1 / 3 + 1 / 2) / 4, 4)]
    table = (tmp_path / "r" / "report_pools.csv").read_text().splitlines()
    assert len(table) == 3 and "right_0.9-1.0" in table[0]
    assert table[0].startswith("run,step,next_heldout_step,n,accuracy,credited_accuracy,")
    assert rlsr_main(["report", "--pools", str(tmp_path), "--output-dir", str(tmp_path / "x")]) == 2
    assert "pool_log.every > 0" in capsys.readouterr().err


# --------------------------------------------------------------------------- settings


def test_pool_log_settings_are_checked_before_anything_loads(tmp_path, capsys):
    from test_trainer_support import tiny_settings

    from rlsr.method.run_plan import plan_run

    settings = tiny_settings(tmp_path)
    settings.pool_log.every = -1
    with pytest.raises(ConfigError) as info:
        plan_run(settings)
    assert info.value.field == "pool_log.every"
    settings.pool_log.every = 1
    settings.pool_log.max_chars = "all"
    with pytest.raises(ConfigError) as info:
        plan_run(settings)
    assert info.value.field == "pool_log.max_chars" and "null" in str(info.value)
    settings.pool_log.max_chars = None
    # recipe=tiny (pool_log.every=1) with method=sft: the setting does not apply; the plan
    # turns it off (the settings stay as given) and train.py says so
    import sys

    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from rlsr.config import from_dict
    from rlsr.method.run_plan import plan_run

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from train import checked_plan

    recipes = Path(__file__).resolve().parents[1] / "recipes"
    with initialize_config_dir(config_dir=str(recipes), version_base="1.3"):
        cfg = compose(config_name="config", overrides=["recipe=tiny", "method=sft"])
    values = OmegaConf.to_container(cfg, resolve=True)
    values.pop("hydra", None)
    sft = from_dict(values)
    assert sft.pool_log.every == 1
    plan = plan_run(sft)
    assert plan.pool_log.every == 0 and sft.pool_log.every == 1  # planned, never mutated
    assert plan_run(sft).settings.pool_log.every == 1
    assert "does not apply to method=sft" in " ".join(plan.notes)
    assert checked_plan(cfg).pool_log.every == 0
    assert "does not apply to method=sft" in capsys.readouterr().out


def test_recipe_tiny_writes_every_pool_and_the_default_writes_none():
    from pathlib import Path

    from hydra import compose, initialize_config_dir

    from rlsr.config import PoolLogSettings

    recipes = Path(__file__).resolve().parents[1] / "recipes"
    with initialize_config_dir(config_dir=str(recipes), version_base="1.3"):
        tiny = compose(config_name="config", overrides=["recipe=tiny"])
        hotpot = compose(config_name="config", overrides=["recipe=hotpot"])
    assert tiny.pool_log.every == 1 and hotpot.pool_log.every == 0
    assert PoolLogSettings().every == 0


# --------------------------------------------------------------------------- real training


def _trl_advantages(reward: np.ndarray, G: int, scale_rewards: str) -> np.ndarray:
    """TRL 1.16's advantage (sum_then_normalize), written out: the reward minus its group's mean,
    divided by (std + 1e-4) with the unbiased std of the group ('group') or of the whole pool
    ('batch'); 'none' divides by nothing."""
    grouped = reward.reshape(-1, G)
    centred = (grouped - grouped.mean(axis=1, keepdims=True)).reshape(-1)
    if scale_rewards == "none":
        return centred
    if scale_rewards == "group":
        std = np.repeat(grouped.std(axis=1, ddof=1), G)
    else:
        std = np.full_like(reward, reward.std(ddof=1))
    return centred / (std + 1e-4)


_RUNS = {
    # The cap binds and the scale differs from 1 (tests/test_trainer.py _METHOD_RUNS); GRPO's
    # plain group-mean advantage (scale_rewards none, the paper's).
    "rlsr": (MethodSettings("rlsr", weight_cap=0.1, correct_scale=1.5), "none"),
    # Three columns and the group-std advantage (RLCR accepts scale_rewards=group).
    "rlcr": (MethodSettings("rlcr"), "group"),
}
MAX_CHARS = 40


@pytest.mark.parametrize("method", sorted(_RUNS))
def test_logged_pools_recompute_from_their_own_verdicts_with_the_method_and_trls_formula(
    tmp_path, method
):
    """Two optimizer steps of recipe=tiny (pool 64: 16 prompts x G = 4; the odds that a pool
    lacks right or wrong answers are in tests/test_trainer.py, ONE_STEP_POOL: ~5e-11) with
    ``pool_log.every=1``. Expected: pools/step-0 and step-1, 64 rows each; every row's reward
    columns = the method's reward function on the logged (verdict, confidence, format) of its
    pool; reward = the weighted sum; advantage = TRL's formula above on the logged rewards. The
    last pool is also checked against what TRL itself recorded (``trainer._logs``: completion
    texts and advantages), and each pool's AURC against the trainer's ``rlsr/aurc`` log of the
    step it trained (pool N -> step N + 1)."""
    import torch
    from test_trainer import ONE_STEP_POOL
    from test_trainer_support import TEST_THREADS, tiny_settings

    from rlsr.core.parsing import parse_response
    from rlsr.data.loading import load_examples
    from rlsr.method.methods import compute_reward_columns, reward_columns
    from rlsr.method.pool_log import pool_summary_rows
    from rlsr.method.run_plan import plan_run
    from rlsr.train.training import build_trainer
    from rlsr.verifiers import get_verifier

    torch.set_num_threads(TEST_THREADS)
    m, scale = _RUNS[method]
    settings = tiny_settings(
        tmp_path, max_steps=2, save_steps=1000, scale_rewards=scale, **ONE_STEP_POOL
    )
    settings.method = m
    settings.pool_log.every = 1
    settings.pool_log.max_chars = MAX_CHARS
    trainer = build_trainer(plan_run(settings))  # planned once, there
    trainer.train()

    G = settings.grpo["num_generations"]
    n = 64
    assert pool_steps(tmp_path) == [0, 1]
    assert not list((tmp_path / "pools").glob("*.tmp"))
    gold_of = {r["id"]: list(r["answers"]) for r in load_examples("tiny", split="train")}
    names = [name for name, _ in reward_columns(m)]
    weights = np.array([w for _, w in reward_columns(m)])
    pools = {step: read_pool(pool_path(tmp_path, step)) for step in (0, 1)}
    for step, rows in pools.items():
        assert len(rows) == n and [r["index"] for r in rows] == list(range(n))
        assert all(r["step"] == step and r["group"] == r["index"] // G for r in rows)
        for r in rows:  # each row's prompt is a dataset row, its gold that row's answers
            assert r["gold"] == gold_of[r["prompt_id"]]
            assert len(r["completion"]) == min(MAX_CHARS, r["completion_chars"])
            assert list(r["rewards"]) == names
        for start in range(0, n, G):
            assert len({r["prompt_id"] for r in rows[start : start + G]}) == 1
        correct = np.array([r["correct"] for r in rows])
        confidence = np.array(
            [np.nan if r["confidence"] is None else r["confidence"] for r in rows]
        )
        format_ok = np.array([r["format_ok"] for r in rows])
        assert 0 < correct.sum() < n  # non-vacuous (odds in the docstring)
        assert all(r["status"] == ("correct" if r["correct"] else "incorrect") or
                   (r["status"] == "missing" and r["answer"] is None) for r in rows)  # fmt: skip
        expected = compute_reward_columns(m, correct, confidence, format_ok)
        logged = np.array([[r["rewards"][k] for k in names] for r in rows])
        np.testing.assert_allclose(logged, expected, rtol=1e-6, atol=1e-6)
        # the credited correctness alone recomputes the rewards: no format rule to re-apply
        credited = np.array([r["credited_correct"] for r in rows])
        assert m.correct_requires_format and (credited == (correct & format_ok)).all()
        as_credited = dataclasses.replace(m, correct_requires_format=False)
        np.testing.assert_allclose(
            compute_reward_columns(as_credited, credited, confidence, format_ok), logged,
            rtol=1e-6, atol=1e-6,
        )  # fmt: skip
        reward = np.array([r["reward"] for r in rows])
        np.testing.assert_allclose(reward, logged @ weights, rtol=1e-12, atol=1e-12)
        advantage = np.array([r["advantage"] for r in rows])
        np.testing.assert_allclose(advantage, _trl_advantages(reward, G, scale), atol=1e-4)
        assert np.abs(advantage).max() > 0.01

    # The last pool is what TRL recorded for its last generation.
    last = pools[1]
    texts = [c[0]["content"] if isinstance(c, list) else c for c in trainer._logs["completion"]]
    assert len(texts) == n
    verdicts = get_verifier("exact_match").verify_batch(
        [parse_response(t).answer for t in texts], [r["gold"] for r in last]
    )
    for r, text, ok in zip(last, texts, verdicts.correct, strict=True):
        parsed = parse_response(text)
        assert r["completion"] == text[:MAX_CHARS] and r["completion_chars"] == len(text)
        assert (r["answer"], r["confidence"], r["format_ok"]) == (
            parsed.answer, parsed.confidence, parsed.format_ok,
        )  # fmt: skip
        assert r["correct"] == bool(ok)
    np.testing.assert_allclose(
        [r["advantage"] for r in last], list(trainer._logs["advantages"]), rtol=0, atol=0
    )
    logs = {h["step"]: h for h in trainer.state.log_history if "rlsr/aurc" in h}
    for summary in pool_summary_rows([tmp_path]):
        assert summary["aurc"] == pytest.approx(logs[summary["step"] + 1]["rlsr/aurc"])
        assert summary["accuracy"] == pytest.approx(logs[summary["step"] + 1]["rlsr/accuracy"])


def test_a_logged_step_gathers_its_rows_once_for_both_observers(tmp_path, monkeypatch):
    """With a ``pool_hook`` and the pool log on, one gather of the rows feeds both observers.
    Catches a trainer that gathers the texts and golds for the hook and again (with ids,
    answers and statuses) for the log: 2 + 5 ``gather_object`` calls per logged step. Counted on ``rlsr.method.trainer.gather_object`` over one real optimizer step of
    recipe=tiny-format, single process (accelerate's gather_object returns its input there, so
    the count is of the trainer's calls, the same on any number of processes)."""
    import torch
    from test_trainer_support import TEST_THREADS, tiny_settings

    import rlsr.method.trainer
    from rlsr.method.run_plan import plan_run
    from rlsr.train.training import build_trainer

    torch.set_num_threads(TEST_THREADS)
    gathers = []
    real = rlsr.method.trainer.gather_object

    def counted(obj):
        gathers.append(len(obj))
        return real(obj)

    monkeypatch.setattr(rlsr.method.trainer, "gather_object", counted)
    settings = tiny_settings(tmp_path, max_steps=1, save_steps=1000)
    settings.pool_log.every = 1
    pools = []
    trainer = build_trainer(plan_run(settings), pool_hook=pools.append)
    trainer.train()
    assert pool_steps(tmp_path) == [0] and len(pools) == 1  # one pooled reward computation
    assert len(gathers) == 1  # before: 7
    rows = read_pool(pool_path(tmp_path, 0))
    pool = pools[0]
    assert gathers == [len(rows)] == [len(pool["texts"])]
    assert [r["completion"] for r in rows] == pool["texts"]  # both observers read one gather
    assert [r["gold"] for r in rows] == [list(g) for g in pool["golds"]]
    assert [r["prompt_id"] for r in rows] == pool["prompt_ids"]

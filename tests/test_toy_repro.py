"""The toy reproduction's orchestration (examples/toy/repro.py): the pure parts, and the thin CLI."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from examples.toy import repro
from examples.toy.task import VARIANTS, write_dataset_folder
from examples.toy.tokenizer import build_toy_tokenizer
from examples.toy.warmup import VARIANT_WARMUP, WarmupConfig, build_model, warmup_config
from rlsr.core.tokenization import prompt_token_counter
from rlsr.data.loading import load_examples
from rlsr.evaluation.run.budget import answer_reserve, budget_refusal, evaluation_context

ROOT = Path(__file__).resolve().parents[1]


def _args(**changes) -> argparse.Namespace:
    values = dict(
        methods="rlvr,rlcr,rlsr", generations=8, pool_sizes=None, std_norm=False, steps=300,
        prompts_per_step=16, learning_rate=3e-4, override=[], variant="easy",
    )  # fmt: skip
    values.update(changes)
    return argparse.Namespace(**values)


def _plan(arms) -> list[tuple[str, str, tuple[str, ...]]]:
    return [(a.name, a.method, a.overrides) for a in arms]


def test_default_table_has_every_arm_with_what_makes_it_that_arm():
    assert _plan(repro.arm_list(",".join(repro.DEFAULT_ARMS), 8)) == [
        ("rlvr", "rlvr", ()),
        ("rlcr", "rlcr", ()),
        ("rlcr-stdnorm", "rlcr", ("grpo.scale_rewards=group",)),
        ("rlsr", "rlsr", ()),
        ("rlsr-plain-aurc", "rlsr-plain-aurc", ()),
        ("rlsr-logprob", "rlsr-logprob", ()),
        ("sft-sc", "sft", ()),
    ]
    scorers = {name: a.scorer for name, a in repro.ARMS.items()}
    assert scorers == {
        "rlvr": "verbalized", "rlcr": "verbalized", "rlcr-stdnorm": "verbalized",
        "rlsr": "verbalized", "rlsr-plain-aurc": "verbalized", "rlsr-logprob": "logprob",
        "sft-sc": "consistency", "rlsr-marginal": "verbalized",
    }  # fmt: skip
    assert _plan([repro.ARMS["rlsr-marginal"]]) == [("rlsr-marginal", "rlsr-marginal", ())]
    assert "rlsr-marginal" not in repro.DEFAULT_ARMS  # the default demo keeps its time budget


def test_every_arm_is_evaluated_within_the_toy_models_context(tmp_path):
    """`rlsr evaluate` refuses a budget the model's positions cannot hold (rlsr.evaluation.
    budget), so each arm's evaluation protocol (the SFT arm's 64 tokens included) plus the
    longest held-out prompt must fit the toy model's declared positions. Catches a toy model
    declared shorter than what the toy asks of it (the table would stop at the SFT arm)."""
    tokenizer = build_toy_tokenizer()
    positions = build_model(tokenizer, WarmupConfig()).config.max_position_embeddings
    context = evaluation_context("transformers", "BASE", (positions, "config.json"))
    data = write_dataset_folder(tmp_path, n_train=1, n_heldout=200)
    count = prompt_token_counter(tokenizer)
    for name, arm in repro.ARMS.items():
        protocol = repro.toy_protocol(arm.method)
        prompts = load_examples(
            "tiny", path=data, split="test", system_prompt=protocol.system_prompt
        )
        longest = max(count(p) for p in prompts["prompt"])
        refusal = budget_refusal(
            context, longest, protocol.max_new_tokens, answer_reserve(protocol)
        )
        assert refusal is None, (name, refusal)


def test_arm_evaluation_flags_come_from_the_method_files():
    """Each arm is evaluated with the run's protocol of `recipe=toy method=M` plus the recipe's
    `toy` variant (no fallbacks, no bootstrap, one batch): its method file's settings (Tab. 6:
    plain answers scored by K = 8 samples at T = 0.7, 64 tokens; Tab. 7: the log-prob scorer),
    the trained 12-token budget otherwise; catches a method file read at the wrong nesting level
    or a budget restated."""
    args = {name: arm.eval_args for name, arm in repro.ARMS.items()}
    variant = ("--bootstrap", "0", "--protocol-variant", "toy")
    assert args.pop("sft-sc") == (
        "--max-new-tokens", "64", "--batch-size", "250", "--no-fallbacks",
        "--response-format", "plain", "--system-prompt", "none", *variant,
    )  # fmt: skip
    tagged = ("--max-new-tokens", "12", "--batch-size", "250", "--no-fallbacks")
    assert args.pop("rlsr-logprob") == (
        *tagged, "--scorers", "logprob,verbalized", "--system-prompt", "simple", *variant,
    )  # fmt: skip
    assert set(args.values()) == {(*tagged, "--system-prompt", "simple", *variant)}
    base = repro.Arm("base", "")
    assert base.eval_args == repro.ARMS["rlsr"].eval_args and base.scorer == "verbalized"


def test_arm_list_is_the_named_arms_then_the_ablations():
    assert _plan(repro.arm_list("rlsr", 8, pool_sizes="4,32", std_norm=True)) == [
        ("rlsr", "rlsr", ()),
        ("rlsr-B4", "rlsr", ("grpo.per_device_train_batch_size=32",)),
        ("rlsr-B32", "rlsr", ("grpo.per_device_train_batch_size=256",)),
        ("rlsr-stdnorm", "rlsr", ("grpo.scale_rewards=group",)),
    ]
    assert _plan(repro.arms_for(_args(methods="rlsr,", std_norm=True))) == [
        ("rlsr", "rlsr", ()),
        ("rlsr-stdnorm", "rlsr", ("grpo.scale_rewards=group",)),
    ]
    with pytest.raises(ValueError, match="--methods: unknown arm 'rlcr-std'"):
        repro.arm_list("rlsr,rlcr-std", 8)


def test_every_arm_gets_the_same_budget_and_its_extras_last():
    args = _args(override=["grpo.temperature=0.9"])
    plans = {
        a.name: repro.train_overrides(args, a, "/w", "/d", f"/o/{a.name}", 3)
        for a in repro.arm_list(",".join(repro.DEFAULT_ARMS), 8, "4", True)
    }

    def budget(overrides):
        return [o for o in overrides if o.startswith(("grpo.", "seed=", "recipe=", "resume="))]

    base = budget(plans["rlvr"])
    assert base == [
        "recipe=toy", "seed=3", "resume=never", "grpo.max_steps=300",
        "grpo.learning_rate=0.0003", "grpo.num_generations=8",
        "grpo.per_device_train_batch_size=128", "grpo.logging_steps=10", "grpo.temperature=0.9",
    ]  # fmt: skip
    assert (
        budget(plans["rlcr"]) == budget(plans["rlsr"]) == budget(plans["rlsr-plain-aurc"]) == base
    )
    assert plans["rlsr-plain-aurc"][1] == "method=rlsr-plain-aurc"
    assert budget(plans["rlcr-stdnorm"]) == [*base, "grpo.scale_rewards=group"]
    assert plans["rlsr"][1] == "method=rlsr" and plans["rlsr-B4"][1] == "method=rlsr"
    assert plans["rlsr-B4"][-1] == "grpo.per_device_train_batch_size=32"  # overrides the default
    assert plans["rlsr-stdnorm"][-1] == "grpo.scale_rewards=group"


def test_sft_arm_gets_the_grpo_arms_steps_prompts_and_learning_rate():
    args = _args(steps=300, prompts_per_step=16, learning_rate=3e-4)
    plan = repro.train_overrides(args, repro.ARMS["sft-sc"], "/w", "/d", "/o", 0)
    assert plan[1] == "method=sft" and "grpo.max_steps=300" in plan  # sft.max_steps follows it
    assert plan[plan.index("grpo.logging_steps=10") + 1 :] == [
        "sft.learning_rate=0.0003", "sft.per_device_train_batch_size=16",
        "sft.gradient_accumulation_steps=1", "sft.lr_scheduler_type=constant",
        "sft.warmup_steps=0", "sft.save_strategy=no",
    ]  # fmt: skip
    assert not [
        o
        for name, arm in repro.ARMS.items()
        if name != "sft-sc"
        for o in repro.train_overrides(args, arm, "/w", "/d", "/o", 0)
        if "sft." in o
    ]


def test_stage_count():
    # per seed: data, warm-up, 3 trained arms, 4 evaluated rows (BASE + arms), report; + summary
    assert repro.stage_count(1, 3) == 1 + 1 + 3 + 4 + 1 + 1
    assert repro.stage_count(3, 4) == 3 * (1 + 1 + 4 + 5 + 1) + 1


def test_row_metrics_and_mean_std():
    metrics = {
        "accuracy": 0.6,
        "scorers": {
            "verbalized": {
                "aurc": 0.2, "acc@10": 1.0, "acc@25": 0.9, "acc@50": 0.8, "ece": 0.05,
                "confidence_gap": 0.3, "auroc": 0.7,
            }
        },
    }  # fmt: skip
    assert repro.row_metrics(metrics) == {
        "aurc": 0.2, "accuracy": 0.6, "acc@10": 1.0, "acc@25": 0.9, "acc@50": 0.8,
        "ece": 0.05, "confidence_gap": 0.3,
    }  # fmt: skip
    assert repro.mean_std([0.1, 0.3]) == "0.200 ± 0.141"  # sample std: sqrt(0.02)
    assert repro.mean_std([0.25]) == "0.250 ± 0.000"


def test_calibrated_aurc_ranks_the_answers_by_p_correct_with_ties_averaged(tmp_path):
    samples = tmp_path / "samples.jsonl"
    recs = [("a", True), ("b", False), ("c", True)]
    samples.write_text("".join(json.dumps({"id": i, "correct": ok}) + "\n" for i, ok in recs))
    # a (p 1.0) first; b, c tied at 0.6. Risk of the k most confident, k = 1, 2, 3:
    # 0; (1/2 if b comes before c else 0) -> 1/4 in expectation; 1/3.  AURC = mean of the three.
    got = repro.calibrated_aurc(samples, {"a": 1.0, "b": 0.6, "c": 0.6})
    assert got == pytest.approx((0 + 0.25 + 1 / 3) / 3)
    # ranked the wrong way round: c (correct) last behind the error b
    got = repro.calibrated_aurc(samples, {"a": 1.0, "b": 0.9, "c": 0.6})
    assert got == pytest.approx((0 + 0.5 + 1 / 3) / 3)


def test_summary_table_aggregates_over_seeds():
    rows = ["base", "rlsr"]
    results = {
        "base": {m: [0.5, 0.5] for m in repro.METRICS},
        "rlsr": {m: [0.1, 0.2] for m in repro.METRICS},
    }
    text = repro.summary_markdown(
        _args(), [0, 1], rows, results, oracle=[0.05, 0.07],
        timings={"warmup": [10.0, 20.0], "rlsr": [100.0, 200.0]}, total=400.0, load=(1.0, 2.0, 3.0),
        calibrated=[0.1, 0.1],
    )  # fmt: skip
    lines = text.splitlines()
    assert lines[0] == "# Toy reproduction (easy, seeds 0,1, 300 steps x 16 prompts x 8, lr 0.0003)"
    assert "| row | aurc | accuracy | acc@10 | acc@25 | acc@50 | ece | confidence_gap |" in lines
    assert "| BASE |" + " 0.500 ± 0.000 |" * 7 in lines
    assert "| RLSR |" + " 0.150 ± 0.071 |" * 7 in lines
    assert "Oracle AURC (same answers as RLSR, ranked by correctness): 0.060 ± 0.014" in lines
    assert (
        "Calibrated-ranking AURC (same answers as RLSR, ranked by P(correct | prompt)): "
        "0.100 ± 0.000" in lines
    )
    assert "Per-seed AURC: BASE 0.500, 0.500; RLSR 0.100, 0.200" in lines
    assert "Seconds per arm (training only, mean): warmup 15, rlsr 150" in lines
    assert lines[-1].startswith("Total wall time: 400 s; load average at end: 1.0, 2.0, 3.0 on ")


def test_summary_plot_draws_every_row_as_its_own_step_curve_titled_with_the_toy_task(tmp_path):
    """risk_coverage.png: each row is a step curve over coverage 0..1 (tie groups entered
    together) in its own line style and marker, labelled with its AURC under the row's own
    scorer; rows that do not rank (one confidence) are flat lines across all coverages, not a
    dot at coverage 1, and say so; the title names the toy task, not the carrier dataset
    tiny@test. Eight rows, two of them constant at the same error rate."""
    rng = np.random.default_rng(0)
    ok = rng.random(40) < 0.6
    curves = {f"arm{i}": (np.round(rng.random(40), 1), ok) for i in range(6)}
    curves["flat-a"] = (np.full(40, 0.5), ok)
    curves["flat-b"] = (np.zeros(40), ok)
    fig = repro.overlay_figure(curves, "toy task missing: held-out risk-coverage, seed 0")
    ax = fig.axes[0]
    lines = ax.get_lines()
    assert len(lines) == 8
    assert len({(ln.get_linestyle(), ln.get_marker()) for ln in lines}) == 8
    for line, (_conf, right) in zip(lines, curves.values(), strict=True):
        x, y = line.get_data()
        assert x[0] == 0.0 and x[-1] == 1.0 and y[-1] == pytest.approx(1 - right.mean())
    flat = [ln.get_label() for ln in lines if "no ranking" in ln.get_label()]
    assert len(flat) == 2 and all(label.startswith("FLAT-") for label in flat)
    aurc = repro.aurc(curves["arm0"][0], ok)
    assert lines[0].get_label() == f"ARM0 (AURC {aurc:.3f})"
    assert "toy task missing" in ax.get_title() and "tiny@test" not in ax.get_title()
    # plot_overlay reads each row's samples with its own scorer (sft-sc: consistency)
    run = tmp_path / "missing-seed0" / "eval"
    for row, key in (("base", "verbalized"), ("sft-sc", "consistency")):
        (run / row / "tiny@test").mkdir(parents=True)
        records = [{"correct": bool(k), "confidence": None, "scores": {key: float(c)}}
                   for c, k in zip(curves["arm0"][0], ok, strict=True)]  # fmt: skip
        (run / row / "tiny@test" / "samples.jsonl").write_text(
            "".join(json.dumps(r) + "\n" for r in records)
        )
    repro.plot_overlay(tmp_path, "missing", [0], {"base": "verbalized", "sft-sc": "consistency"})
    assert (tmp_path / "risk_coverage.png").stat().st_size > 10_000


def test_sft_arm_says_it_has_no_train_pool_instead_of_nan():
    """The end-of-training line of an SFT arm says it has no train pool (it logs no
    rlsr/aurc: `last train-pool AURC nan` read as a failed measurement); a GRPO arm gets its
    last train-pool AURC."""
    logged = {"n": 0, "aurc": float("nan")}
    assert "no train pool" in repro.train_note(repro.ARMS["sft-sc"], logged)
    assert "nan" not in repro.train_note(repro.ARMS["sft-sc"], logged)
    assert repro.train_note(repro.ARMS["rlsr"], {"aurc": 0.25}) == "last train-pool AURC 0.250"


@pytest.mark.parametrize(
    "flag",
    [
        "--seeds", "--variant", "--steps", "--prompts-per-step", "--generations",
        "--learning-rate", "--methods", "--warmup-steps", "--n-heldout", "--n-train",
        "--pool-sizes", "--std-norm", "--output-dir", "--cache-dir", "--override", "--jobs",
        "--quiet",
    ],
)  # fmt: skip
def test_the_script_keeps_its_flags(flag, script_help):
    assert flag in script_help


@pytest.fixture(scope="module")
def script_help() -> str:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "toy" / "toy_repro.py"), "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return proc.stdout


def test_every_variant_has_a_warmup_configuration():
    assert set(VARIANT_WARMUP) == set(VARIANTS)
    for variant in VARIANTS:
        assert warmup_config(variant, 1).variant == variant
        assert warmup_config(variant, 1, steps=7).steps == 7
    # the easy tables were made with BASE = WarmupConfig(variant, seed, steps=300); keeping that
    # config keeps their cached checkpoints (the digest) and numbers
    assert warmup_config("easy", 0) == WarmupConfig(variant="easy", seed=0, steps=300)


def _samples(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_tier_summaries_two_level_aurc_and_confidence_per_tier(tmp_path):
    """Tier variants: the two-level AURC ranks by 1[p > 1/2] (ties averaged), and the greedy
    confidences are counted per tier (an unparsed one as "none")."""
    from rlsr.metrics.selective import aurc

    p = {"a": 1.0, "b": 0.8, "c": 0.4, "d": 0.2, "e": 0.2}
    rows = [
        {"id": "a", "correct": True, "confidence": 0.9},
        {"id": "b", "correct": False, "confidence": 0.9},
        {"id": "c", "correct": True, "confidence": 0.1},
        {"id": "d", "correct": False, "confidence": None},
        {"id": "e", "correct": False, "confidence": 0.1},
    ]
    path = _samples(tmp_path / "samples.jsonl", rows)
    correct = np.array([r["correct"] for r in rows])
    expected = aurc(np.array([1.0, 1.0, 0.0, 0.0, 0.0]), correct)
    assert repro.two_level_aurc(path, p) == pytest.approx(expected)
    by_tier = repro.confidence_by_tier(path, p)
    assert list(by_tier) == ["1.0", "0.8", "0.4", "0.2"]
    assert by_tier["0.2"] == {"n": 2, "mean": 0.1, "counts": {"none": 1, "0.1": 1}}
    assert by_tier["1.0"]["mean"] == pytest.approx(0.9)
    lines = repro.tier_table(["rlsr"], {"rlsr": [by_tier, by_tier]})
    assert "| row | p = 1.0 | p = 0.8 | p = 0.4 | p = 0.2 |" in lines
    assert any(line.startswith("| RLSR | 0.900 ± 0.000") for line in lines)
    silent = {t: {"n": 1, "mean": float("nan"), "counts": {"none": 1}} for t in by_tier}
    lines = repro.tier_table(["rlsr"], {"rlsr": [by_tier, silent]})
    assert any(line.startswith("| RLSR | 0.900 ± 0.000 (1 of 2 seeds)") for line in lines)
    lines = repro.tier_table(["rlsr"], {"rlsr": [silent]})
    assert any(line.startswith("| RLSR | none stated") for line in lines)

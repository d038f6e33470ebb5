"""CPU toy reproduction (examples.toy, examples/toy/toy_repro.py, docs/toy.md).

Real components throughout: the toy tokenizer (tokenizers + transformers), a Qwen2 model trained
from scratch, the Hydra recipe tree, rlsr.config validation, RLSRTrainer (TRL GRPOTrainer) and
the real evaluator. The end-to-end test is marked slow (~1-2 min on 2 shared cores).
"""

from __future__ import annotations

import json
import random

import pytest

from examples.toy.task import (
    NAMES,
    RELIABILITY_TIERS,
    TIER_OF_NAME,
    VARIANT_TIERS,
    WIDE_TIERS,
    make_example,
    make_split,
    tier_of_name,
    to_records,
    write_dataset_folder,
)
from examples.toy.tokenizer import (
    CONFIDENCE_TOKENS,
    TAGS,
    build_toy_tokenizer,
    load_toy_tokenizer,
    vocabulary,
)
from examples.toy.warmup import WarmupConfig, completion_text, ensure_warmup
from rlsr.core.tokenization import TOKENIZER_MARKER_KEY, load_tokenizer, marked_tokenizer_class

# --------------------------------------------------------------------------- task


def _facts(question: str) -> dict[str, str]:
    body = question.split("facts:")[1].split("q:")[0]
    pairs = [p.strip() for p in body.split(";") if "=" in p]
    return dict(p.split("=") for p in pairs)


def _target(question: str) -> str:
    return question.split("q:")[1].strip()


@pytest.mark.parametrize("variant", ["easy", "distractor"])
def test_split_is_deterministic_and_splits_differ(variant):
    a = make_split(variant, "train", 50, seed=3)
    assert a == make_split(variant, "train", 50, seed=3)
    assert a != make_split(variant, "train", 50, seed=4)
    assert [e.question for e in a] != [e.question for e in make_split(variant, "heldout", 50, 3)]


@pytest.mark.parametrize("variant", ["easy", "distractor"])
def test_answer_is_in_the_facts_exactly_when_answerable(variant):
    examples = make_split(variant, "train", 400, seed=0)
    for ex in examples:
        facts = _facts(ex.question)
        target = _target(ex.question)
        assert target in NAMES and ex.answer.isdigit() and len(ex.answer) == 1
        if ex.answerable:
            assert facts.get(target) == ex.answer, ex
        else:
            assert target not in facts, ex
    share = sum(e.answerable for e in examples) / len(examples)
    assert 0.4 < share < 0.6


def test_easy_missing_case_has_no_facts():
    for ex in make_split("easy", "train", 200, seed=1):
        assert (ex.question == f"facts: ; q: {_target(ex.question)}") == (not ex.answerable)


def test_distractor_length_does_not_reveal_missing_fact():
    """Both cases hold one or two facts in equal proportions, so the model must match names."""
    examples = make_split("distractor", "train", 2000, seed=0)
    for answerable in (True, False):
        counts = [len(_facts(e.question)) for e in examples if e.answerable == answerable]
        assert set(counts) == {1, 2}
        assert 0.4 < counts.count(1) / len(counts) < 0.6


def test_hidden_digits_are_uniform_when_missing():
    rng = random.Random(0)
    digits = [make_example(rng, "easy", p_missing=1.0).answer for _ in range(5000)]
    counts = [digits.count(str(d)) for d in range(10)]
    assert min(counts) > 400 and max(counts) < 600


@pytest.mark.parametrize("variant", ["tiers", "tiers-wide"])
def test_tiers_gold_is_the_stated_digit_with_the_names_reliability(variant):
    """``tiers``: P(gold == stated digit) is the queried name's tier; every tier is above 1/2 and
    on the confidence grid (the design premise of the variant, docs/toy.md). ``tiers-wide``: the
    same with tiers 1.0 / 0.8 / 0.6 / 0.4 / 0.2, which straddle 1/2."""
    tiers = VARIANT_TIERS[variant]
    assert all(f"{t:.1f}" in CONFIDENCE_TOKENS for t in tiers)
    if variant == "tiers":
        assert tiers == RELIABILITY_TIERS and all(0.5 < t <= 1.0 for t in tiers)
        assert tier_of_name("tiers") == TIER_OF_NAME
    else:
        assert tiers == WIDE_TIERS and min(tiers) < 0.5 < max(tiers)
    examples = make_split(variant, "train", 20000, seed=0)
    hits: dict[float, list[bool]] = {}
    for ex in examples:
        facts, target = _facts(ex.question), _target(ex.question)
        assert list(facts) == [target] and ex.answerable
        assert ex.p_correct == tier_of_name(variant)[target]
        hits.setdefault(ex.p_correct, []).append(facts[target] == ex.answer)
    assert set(hits) == set(tiers)
    for tier, h in hits.items():
        n = len(h)
        assert n > 3000
        assert abs(sum(h) / n - tier) < 4 * (tier * (1 - tier) / n) ** 0.5 + 1e-9, tier


def test_bad_arguments_name_the_field():
    with pytest.raises(ValueError, match="variant"):
        make_split("hard", "train", 1)
    with pytest.raises(ValueError, match="split"):
        make_split("easy", "test", 1)
    with pytest.raises(ValueError, match="p_missing"):
        make_example(random.Random(0), "easy", p_missing=1.5)


def test_dataset_folder_loads_through_rlsr_data(tmp_path):
    from rlsr.data.loading import load_examples

    write_dataset_folder(tmp_path, "distractor", seed=2, n_train=20, n_heldout=10)
    train = load_examples("tiny", path=str(tmp_path), split="train")
    test = load_examples("tiny", path=str(tmp_path), split="test")
    assert len(train) == 20 and len(test) == 10
    expected = make_split("distractor", "train", 20, seed=2)
    assert train["question"] == [e.question for e in expected]
    assert train["answers"] == [[e.answer] for e in expected]
    assert train[0]["prompt"][-1]["role"] == "user"
    assert to_records(expected[:1])[0]["answers"] == [expected[0].answer]


# --------------------------------------------------------------------------- tokenizer


def test_every_vocabulary_item_is_one_token_and_round_trips():
    tok = build_toy_tokenizer()
    for item in vocabulary()[3:]:
        assert tok.convert_ids_to_tokens(tok(item, add_special_tokens=False).input_ids) == [item]
    target = completion_text("6", "0.7")
    ids = tok(target, add_special_tokens=False).input_ids
    assert len(ids) == 10 and tok.decode(ids) == target
    assert set(TAGS) <= set(tok.convert_ids_to_tokens(ids))
    assert "0.7" in tok.convert_ids_to_tokens(ids) and "0.7" in CONFIDENCE_TOKENS


@pytest.mark.parametrize("variant", ["easy", "distractor", "tiers"])
def test_prompts_have_no_unknown_tokens(variant):
    tok = build_toy_tokenizer()
    for ex in make_split(variant, "train", 100, seed=0):
        ids = tok(ex.question, add_special_tokens=False).input_ids
        assert tok.unk_token_id not in ids


def test_chat_template_renders_only_the_problem():
    from rlsr.data.formatting import build_prompt

    tok = build_toy_tokenizer()
    messages = build_prompt("facts: c=6 ; q: c", "long")
    assert messages[0]["role"] == "system"
    text = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert text == "facts: c=6 ; q: c"
    # an SFT target (method=sft): the answer, then <eos>, one token each after the prompt
    turn = [*messages, {"role": "assistant", "content": "6"}]
    ids = tok.apply_chat_template(turn, tokenize=True, return_dict=True)["input_ids"]
    prompt_ids = tok("facts: c=6 ; q: c", add_special_tokens=False).input_ids
    assert ids == [*prompt_ids, tok.convert_tokens_to_ids("6"), tok.eos_token_id]


def test_saved_tokenizer_reloads_with_the_same_ids(tmp_path):
    """The transformers 5 trap: with a Qwen2 config.json beside it, the marker must win."""
    from transformers import Qwen2Config

    tok = build_toy_tokenizer()
    tok.save_pretrained(tmp_path)
    Qwen2Config(vocab_size=len(tok), hidden_size=32, num_attention_heads=2).save_pretrained(
        tmp_path
    )
    assert marked_tokenizer_class(tmp_path) == "PreTrainedTokenizerFast"
    text = "facts: c=6 ; q: c" + completion_text("6", "0.7")
    want = tok(text).input_ids
    assert load_toy_tokenizer(tmp_path)(text).input_ids == want
    again = load_tokenizer(tmp_path)
    assert again(text).input_ids == want
    again.save_pretrained(tmp_path / "copy")  # trained arms re-save it: the marker must survive
    config = json.loads((tmp_path / "copy" / "tokenizer_config.json").read_text())
    assert config[TOKENIZER_MARKER_KEY] == "PreTrainedTokenizerFast"


def test_unmarked_folder_uses_auto_tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    assert marked_tokenizer_class(tiny_model_dir) is None
    assert type(load_tokenizer(tiny_model_dir)) is type(
        AutoTokenizer.from_pretrained(tiny_model_dir)
    )


# --------------------------------------------------------------------------- warm-up


def test_warmup_config_digest_tracks_every_field():
    base = WarmupConfig()
    assert base.digest() == WarmupConfig().digest()
    assert base.digest() != WarmupConfig(seed=1).digest()
    assert base.digest() != WarmupConfig(steps=base.steps + 1).digest()


def test_warmup_is_cached_and_targets_carry_no_confidence_signal(tmp_path):
    cfg = WarmupConfig(steps=3, batch_size=8, gate=False)
    path, summary = ensure_warmup(cfg, tmp_path)
    assert (path / "model.safetensors").is_file() and summary["digest"] == cfg.digest()
    assert 2e5 < summary["parameters"] < 4e5
    mtime = (path / "model.safetensors").stat().st_mtime_ns
    path2, _ = ensure_warmup(cfg, tmp_path)
    assert path2 == path and (path / "model.safetensors").stat().st_mtime_ns == mtime
    tok = load_toy_tokenizer(path)
    assert tok(completion_text("1", "0.2")).input_ids[-1] != tok.unk_token_id


def test_a_warmup_outside_its_band_trains_on_then_stops_with_the_reason(tmp_path):
    """3 steps cannot teach the format: the warm-up extends twice (9 steps in all), then refuses
    with the failing fields and saves nothing, instead of handing a broken BASE to the arms."""
    from examples.toy.warmup import MAX_EXTENSIONS, WarmupGateError, gate_failures

    cfg = WarmupConfig(steps=3, batch_size=8)
    with pytest.raises(WarmupGateError, match=r"format_rate 0\.\d+ not in \[0\.95, 1\.0\]") as err:
        ensure_warmup(cfg, tmp_path)
    assert f"after {3 * (MAX_EXTENSIONS + 1)} steps" in str(err.value)
    assert "--warmup-steps" in str(err.value)
    assert not list(tmp_path.iterdir())  # nothing cached
    good = {"format_rate": 1.0, "accuracy_present": 0.97, "accuracy_missing": 0.1,
            "confidence_gap": 0.0}  # fmt: skip
    assert gate_failures("easy", good) == []
    assert gate_failures("easy", {**good, "accuracy_present": 0.5}) == [
        "accuracy_present 0.500 not in [0.9, 1.0]"
    ]
    # a BASE whose greedy confidence already ranks (seed 31 under AVX2: gap 0.189) is refused
    assert gate_failures("distractor", {**good, "confidence_gap": 0.189}) == [
        "confidence_gap 0.189 not in [-0.1, 0.1]"
    ]
    assert gate_failures("easy", {**good, "confidence_gap": float("nan")}) == [
        "confidence_gap nan not in [-0.1, 0.1]"
    ]
    assert gate_failures("tiers", {"format_rate": 1.0, "accuracy_present": 0.8}) == []


# --------------------------------------------------------------------------- end to end

# The demo's own budget. 150 steps was calibrated on one CPU: under ATEN_CPU_CAPABILITY=avx2 the
# same seed was still at BASE's AURC after 150 steps (0.515), while 300 steps reach 0.126-0.174 on
# all 20 runs of docs/results_toy.md ("The default demo on 10 seeds x 2 CPU dispatches").
REDUCED_STEPS = 300


def _heldout_aurc(model_dir, data_dir, out_dir) -> tuple[float, float]:
    """The real ``rlsr evaluate`` (in-process, greedy) on the held-out split: (AURC, accuracy)."""
    from rlsr.cli import main as rlsr_main

    rc = rlsr_main(
        ["evaluate", "--model", str(model_dir), "--tasks", "tiny",
         "--data-path", f"tiny={data_dir}", "--split", "test", "--output-dir", str(out_dir),
         "--max-new-tokens", "12", "--no-fallbacks", "--bootstrap", "0",
         "--batch-size", "200", "--no-progress"]
    )  # fmt: skip
    assert rc == 0
    metrics = json.loads((out_dir / "tiny@test" / "metrics.json").read_text())
    return metrics["scorers"]["verbalized"]["aurc"], metrics["accuracy"]


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_rlsr_learns_to_rank_confidence_on_heldout(tmp_path):
    """Toy reproduction, RLSR arm only: one seed, 300 GRPO steps of 16 prompts x 8, real path.

    Fails if the lifted-AURC reward's sign, ranking or pooling is broken: with the sign flipped
    the same run ends at held-out AURC ~0.5 or worse (docs/results_toy.md quotes the scratch run).
    """
    import torch

    from examples.toy.arms import train_arm
    from examples.toy.warmup import DEFAULT_CACHE_DIR

    torch.set_num_threads(1)
    data_dir = write_dataset_folder(
        tmp_path / "data", "easy", seed=0, n_heldout=500
    )  # the demo's split: accuracy within 0.03 of BASE in all 20 runs of docs/results_toy.md
    warm_dir, summary = ensure_warmup(WarmupConfig(variant="easy", seed=0), DEFAULT_CACHE_DIR)
    assert summary["format_rate"] > 0.95 and summary["accuracy_present"] > 0.95
    base_aurc, base_acc = _heldout_aurc(warm_dir, data_dir, tmp_path / "eval-base")
    result = train_arm(
        warm_dir, data_dir, "rlsr", tmp_path / "rlsr", seed=0,
        extra_overrides=[f"grpo.max_steps={REDUCED_STEPS}", "grpo.logging_steps=50"],
    )  # fmt: skip
    pool_sizes = {h["rlsr/pool_size"] for h in result["log_history"] if "rlsr/pool_size" in h}
    assert pool_sizes == {128.0}  # the whole step's 16 x 8 completions were ranked together
    rlsr_aurc, rlsr_acc = _heldout_aurc(tmp_path / "rlsr", data_dir, tmp_path / "eval-rlsr")
    print(f"held-out AURC: BASE {base_aurc:.3f} -> RLSR {rlsr_aurc:.3f}; "
          f"accuracy {base_acc:.3f} -> {rlsr_acc:.3f}")  # fmt: skip
    assert base_aurc > 0.35  # BASE's confidence carries no information
    assert rlsr_aurc < base_aurc - 0.15
    assert rlsr_acc > base_acc - 0.05

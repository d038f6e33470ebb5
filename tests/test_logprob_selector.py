"""RLSR with the log-probability selector (paper Sec. D.4, Tab. 7; ``method.confidence=logprob``).

The pooled ranking must use each completion's length-normalised answer log-probability under the
*current* policy, and ``rlsr evaluate --scorers logprob`` must score the same quantity. Both are
checked against ``independent_confidence`` below, written here from the definition in
``rlsr/equations/logprob.py``'s docstring without any rlsr code: a regex for the last ``<answer>`` block,
the chat template, one full-sequence forward of a freshly loaded model (no ``logits_to_keep``, no
batching, no padding), ``log_softmax``, mean over the answer tokens, ``exp``.

Real TRL GRPOTrainer + PEFT LoRA r=1 on the format-warm tiny model; nothing is mocked. The spy on
``RLSRTrainer._calculate_rewards`` only records its ``prompts`` argument.
"""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest

from rlsr.equations import rewards as R
from rlsr.equations.logprob import left_pad

pytestmark = pytest.mark.timeout(600)

_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


def _answer_and_start(text: str):
    """Last complete answer block, stripped, and where its text starts (independent parser)."""
    blocks = list(_ANSWER.finditer(text))
    if not blocks:
        return None, None
    raw = blocks[-1].group(1)
    answer = raw.strip()
    if not answer:
        return None, None
    return answer, blocks[-1].start(1) + (len(raw) - len(raw.lstrip()))


def independent_confidence(model, tok, messages, response, answer=None, start=None):
    """exp(mean_t log p(answer token t | prompt, response before the answer, earlier answer
    tokens)) by a plain full forward; None without an answer."""
    import torch

    if answer is None:
        answer, start = _answer_and_start(response)
    if answer is None:
        return None
    prompt = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    ctx = tok(prompt + response[:start], add_special_tokens=False)["input_ids"]
    ans = tok(answer, add_special_tokens=False)["input_ids"]
    ids = torch.tensor([ctx + ans])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0].double()
    logp = torch.log_softmax(logits, dim=-1)
    total = sum(float(logp[len(ctx) + t - 1, tok_id]) for t, tok_id in enumerate(ans))
    return math.exp(total / len(ans))


def _load(path, adapter=None):
    import torch
    from test_trainer_support import TEST_THREADS
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(TEST_THREADS)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    if adapter is not None:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, adapter)
    return model.eval(), AutoTokenizer.from_pretrained(path)


@pytest.mark.slow
def test_pooled_ranking_uses_the_current_policys_answer_logprob(tmp_path):
    import torch
    from test_trainer_support import TEST_THREADS, format_warm_model, tiny_settings

    from rlsr.method.run_plan import plan_run
    from rlsr.train.training import build_trainer

    torch.set_num_threads(TEST_THREADS)
    settings = tiny_settings(tmp_path, max_steps=2, save_steps=1, warmup_steps=0)
    settings.method.confidence = "logprob"
    pools, prompts_seen = [], []
    plan = plan_run(settings, world_size=1)
    trainer = build_trainer(plan, pool_hook=pools.append)
    original = trainer._calculate_rewards

    def spy(inputs, prompts, completions, completion_ids_list):
        prompts_seen.append(list(prompts))
        return original(inputs, prompts, completions, completion_ids_list)

    trainer._calculate_rewards = spy
    trainer.train()
    assert [p["global_step"] for p in pools] == [0, 1]

    # step 0 generates with the initial policy (LoRA B = 0: the base model); step 1 after one
    # update, i.e. with the adapter of checkpoint-1
    policies = [_load(format_warm_model()), _load(format_warm_model(), tmp_path / "checkpoint-1")]
    for pool, prompts, (model, tok) in zip(pools, prompts_seen, policies, strict=True):
        expected = [
            independent_confidence(model, tok, msgs, text)
            for msgs, text in zip(prompts, pool["texts"], strict=True)
        ]
        got = pool["confidence"]
        scored = np.array([e is not None for e in expected])
        assert scored.sum() >= 4, pool["texts"]  # enough answers to rank
        np.testing.assert_array_equal(np.isnan(got), ~scored)
        exp_conf = np.array([np.nan if e is None else e for e in expected])
        np.testing.assert_allclose(got[scored], exp_conf[scored], rtol=1e-4, atol=0)
        # continuous scores, not the verbalized 0.1-step vocabulary
        assert len(set(np.round(got[scored], 6))) > len(set(np.round(got[scored], 1)))
        # The pool is ranked by these scores. Exact: the trainer's rewards are the lifted AURC
        # of its own scores. Against the independent recompute, whatever the CPU: every pair
        # whose independent scores differ by more than float noise (2e-4 relative) is ordered
        # the same way; identical completions of one prompt tie exactly. Pairs closer than the
        # noise may be ordered either way on another machine, so nothing is claimed of them.
        scored_right = np.asarray(pool["correct"], bool) & np.asarray(pool["format_ok"], bool)
        lifted = R.lifted_aurc_rewards(scored_right, got)
        np.testing.assert_allclose(pool["rewards"][:, 1], lifted, rtol=0, atol=1e-6)  # float32
        e, g = exp_conf[scored], got[scored]
        apart = np.abs(e[:, None] - e[None, :]) > 2e-4 * np.abs(e).max()
        assert (np.sign(g[:, None] - g[None, :]) == np.sign(e[:, None] - e[None, :]))[apart].all()
        keys = [repr((msgs, t)) for msgs, t in zip(prompts, pool["texts"], strict=True)]
        keys = [k for k, ok in zip(keys, scored, strict=True) if ok]
        same = np.array([[a == b for b in keys] for a in keys])
        assert (g[:, None] == g[None, :])[same].all()
        # the format reward does not require the confidence tag
        np.testing.assert_array_equal(pool["rewards"][:, 0], pool["format_ok"].astype(float))
    # the policy moved between the two pools, so step 1 really used the updated adapter
    b = policies[1][0]
    assert any(float(p.abs().max()) > 0 for n, p in b.named_parameters() if "lora_B" in n), (
        "checkpoint-1 adapter is still zero"
    )


def test_format_without_confidence_passes_with_logprob_selector_only():
    from rlsr.config import MethodSettings
    from rlsr.core.parsing import parse_response
    from rlsr.method.methods import resolve

    text = "<think>t</think><answer>a</answer><analysis>x</analysis>"
    with_conf = text + "<confidence>0.4</confidence>"
    logprob = resolve(MethodSettings("rlsr", confidence="logprob")).parse_spec
    verbal = resolve(MethodSettings("rlsr")).parse_spec
    assert parse_response(text, logprob).format_ok and parse_response(with_conf, logprob).format_ok
    assert (
        not parse_response(text, verbal).format_ok and parse_response(with_conf, verbal).format_ok
    )
    # out of place or doubled, the optional tag still breaks the format
    assert not parse_response(
        "<think>t</think><confidence>1</confidence><answer>a</answer><analysis>x</analysis>",
        logprob,
    ).format_ok
    assert not parse_response(with_conf + "<confidence>1</confidence>", logprob).format_ok
    # an unparseable confidence does not matter when it is not read
    assert parse_response(text + "<confidence>high</confidence>", logprob).format_ok


def test_rlsr_logprob_variant_composes_with_its_own_output_dir():
    from test_method_variants import CPU, compose

    from rlsr.config import from_dict
    from rlsr.method.run_plan import plan_run

    values = compose("recipe=hotpot", "method=rlsr-logprob", *CPU)
    assert values["output_dir"] == "runs/hotpot-rlsr-logprob-qwen2.5-7b-seed42"
    settings = plan_run(from_dict(values), world_size=4).settings
    assert settings.method.name == "rlsr" and settings.method.confidence == "logprob"


def test_logprob_selector_is_rlsr_only():
    from rlsr.config import ConfigError, MethodSettings
    from rlsr.method.methods import validate_method

    validate_method(MethodSettings("rlsr", confidence="logprob"))
    for name in ("rlcr", "rlvr"):
        with pytest.raises(ConfigError, match="method.confidence"):
            validate_method(MethodSettings(name, confidence="logprob"))


def test_evaluate_logprob_scorer_ranks_by_the_same_quantity(tmp_path):
    """``rlsr evaluate --scorers logprob`` on tagged responses of the format-warm model: each
    sample's score is the independent answer log-prob of its own response, and logprob is the
    primary scorer of metrics.json."""
    from test_trainer_support import format_warm_model

    from rlsr.cli import main as rlsr_main
    from rlsr.evaluation.run.samples_io import read_samples

    out = tmp_path / "eval"
    argv = ["evaluate", "--model", str(format_warm_model()), "--tasks", "tiny",
            "--output-dir", str(out), "--limit", "8", "--batch-size", "4", "--scorers", "logprob",
            "--max-new-tokens", "40", "--no-fallbacks", "--bootstrap", "0", "--no-progress"]  # fmt: skip
    assert rlsr_main(argv) == 0
    records = read_samples(out / "tiny" / "samples.jsonl")
    metrics = json.loads((out / "tiny" / "metrics.json").read_text())
    assert metrics["primary_scorer"] == "logprob"
    model, tok = _load(format_warm_model())
    scored = 0
    for r in records:
        expected = independent_confidence(model, tok, r["prompt"], r["response"])
        got = r["scores"]["logprob"]
        if expected is None:
            assert got is None
            continue
        scored += 1
        assert got == pytest.approx(expected, rel=1e-4)
    assert scored >= 4


def test_left_pad_right_aligns_rows_and_masks_the_padding():
    """Shared by the log-prob scorer, the transformers backend and the toy warm-up: a row padded
    on the wrong side, or a mask covering padding, shifts every position the model sees."""
    ids, mask = left_pad([[5, 6, 7], [8], []], pad_id=0)
    assert ids.tolist() == [[5, 6, 7], [0, 0, 8], [0, 0, 0]]
    assert mask.tolist() == [[1, 1, 1], [0, 0, 1], [0, 0, 0]]
    ids, mask = left_pad([[5, 6]], pad_id=9, width=4)
    assert ids.tolist() == [[9, 9, 5, 6]] and mask.tolist() == [[0, 0, 1, 1]]
    with pytest.raises(ValueError, match="shorter than the longest row"):
        left_pad([[1, 2, 3]], pad_id=0, width=2)

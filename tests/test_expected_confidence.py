"""The expected verbalized confidence (``rlsr evaluate --scorers expected``, ``rlsr.equations.logprob``).

The pure expectation is checked against a direct sum on small inputs with tied levels; the scorer
on the shipped ``tiny-missing-warm`` model (real model, tokenizer and chat template, nothing
mocked) against ``brute_force_expected`` below: for each level, one full-sequence forward of a
freshly loaded model on prompt + response up to its last ``<confidence>`` + the level with the
response's own whitespace + ``</confidence>`` (no batching, no padding, no ``logits_to_keep``),
summed log-probs, normalised.
"""

from __future__ import annotations

import itertools
import json
import math
import re

import pytest

from rlsr.equations.logprob import (
    EXPECTED_LEVELS,
    confidence_frame,
    expected_confidence,
    level_text,
)
from rlsr.run.eval_protocol import ProtocolError, check_scorers

pytestmark = pytest.mark.timeout(300)


def test_expected_confidence_equals_the_direct_sum_over_levels_with_ties():
    """E[c] = sum_l l * exp(s_l) / sum exp(s_l') with s_l the sum of the level's token
    log-probs, for every assignment of tied and untied scores to three levels; a level's score is
    the sum of its tokens, whatever their number."""
    levels = (0.1, 0.5, 0.9)
    for s in itertools.product([-0.5, -1.0, -3.0], repeat=3):  # ties included
        split = [[v / 2, v / 2] if k == 1 else [v] for k, v in enumerate(s)]  # 2-token level
        direct = sum(lvl * math.exp(v) for lvl, v in zip(levels, s, strict=True)) / sum(
            math.exp(v) for v in s
        )
        assert expected_confidence(levels, split) == pytest.approx(direct, rel=1e-12)
    # all tied: the plain mean of the levels; one level far ahead: that level
    assert expected_confidence(levels, [[-2.0]] * 3) == pytest.approx(0.5)
    assert expected_confidence(levels, [[-0.1], [-60.0], [-70.0]]) == pytest.approx(0.1)


def test_expected_confidence_survives_scores_that_underflow_and_refuses_empty_ones():
    """Scores of -2000 (exp underflows to 0) still give the ratio of their differences; no
    levels, a level without tokens, or no finite score give None, and mismatched lengths raise."""
    assert expected_confidence((0.1, 0.9), [[-2000.0], [-2000.0 - math.log(3)]]) == pytest.approx(
        0.3
    )
    assert expected_confidence((), []) is None
    assert expected_confidence((0.1, 0.9), [[-1.0], []]) is None
    assert expected_confidence((0.1, 0.9), [[-math.inf], [-math.inf]]) is None
    with pytest.raises(ValueError, match="same length"):
        expected_confidence((0.1, 0.9), [[-1.0]])


def test_confidence_frame_ends_at_the_last_opening_tag_and_keeps_the_whitespace():
    """The context is the text up to and including the last ``<confidence>``, with the whitespace
    the block writes around its number (mirrored in an unclosed block); None without the tag;
    each level is written in one spelling."""
    text = "<answer>x</answer><confidence>0.5</confidence> again <confidence> 0.9\n</confidence>"
    assert confidence_frame(text) == (text[: text.rindex(" 0.9")], " ", "\n")
    assert confidence_frame("<confidence>0.5</confidence>") == ("<confidence>", "", "")
    assert confidence_frame("<a>x</a><confidence> 0.") == ("<a>x</a><confidence>", " ", " ")
    assert confidence_frame("<a>x</a><confidence></confidence>") == ("<a>x</a><confidence>", "", "")
    assert confidence_frame("<answer>x</answer> 0.9") is None
    assert [level_text(v) for v in (0.1, 0.0, 1.0)] == ["0.1", "0.0", "1.0"]
    assert {0.1, 0.3, 0.5, 0.7, 0.9} <= set(EXPECTED_LEVELS)


def test_expected_is_a_scorer_and_may_be_the_primary_one():
    """``expected`` is accepted by the protocol (``rlsr evaluate --scorers``, ``heldout.scorers``)
    as the primary scorer, with verbalized appended for tagged answers; plain answers refuse it
    only for the verbalized scorer check, as before."""
    assert check_scorers(["expected"]) == ("expected", "verbalized")
    assert check_scorers(["verbalized", "expected"]) == ("verbalized", "expected")
    with pytest.raises(ProtocolError, match="unknown scorer"):
        check_scorers(["expectation"])


def brute_force_expected(model, tok, messages, response, levels=EXPECTED_LEVELS):
    """E[c] by one plain full forward per level (module docstring); None without the tag. The
    responses here close their block, so the whitespace is read with a regex."""
    import torch

    at = response.rfind("<confidence>")
    if at < 0:
        return None
    end = at + len("<confidence>")
    before, after = re.match(r"(\s*)\S*?(\s*)</confidence>", response[end:]).groups()
    prompt = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    ctx = tok(prompt + response[:end], add_special_tokens=False)["input_ids"]
    sums = []
    for level in levels:
        text = before + str(float(level)) + after + "</confidence>"
        cont = tok(text, add_special_tokens=False)["input_ids"]
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([ctx + cont])).logits[0].double()
        logp = torch.log_softmax(logits, dim=-1)
        sums.append(sum(float(logp[len(ctx) + t - 1, i]) for t, i in enumerate(cont)))
    weights = [math.exp(s) for s in sums]
    return sum(w * lvl for w, lvl in zip(weights, levels, strict=True)) / sum(weights)


def test_evaluate_expected_scorer_equals_the_brute_force_loop_over_levels(tmp_path):
    """``rlsr evaluate --scorers expected,verbalized`` on the shipped tiny-missing-warm model
    (6 test questions, listed and "Facts: none."): each sample's ``expected`` score equals the
    brute-force expectation over the levels of its own greedy response, lies within the levels'
    range, and ``expected`` is metrics.json's primary scorer with verbalized beside it."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlsr.cli import main as rlsr_main
    from rlsr.data.tiny_models import shipped_model_path
    from rlsr.evaluation.run.samples_io import read_samples

    path = shipped_model_path("tiny-missing-warm")
    out = tmp_path / "eval"
    argv = ["evaluate", "--model", str(path), "--tasks", "tiny-missing", "--split", "test",
            "--output-dir", str(out), "--limit", "6", "--batch-size", "3", "--max-new-tokens", "32",
            "--scorers", "expected,verbalized", "--bootstrap", "0", "--no-progress"]  # fmt: skip
    assert rlsr_main(argv) == 0
    records = read_samples(out / "tiny-missing@test" / "samples.jsonl")
    metrics = json.loads((out / "tiny-missing@test" / "metrics.json").read_text())
    assert metrics["primary_scorer"] == "expected"
    assert set(metrics["scorers"]) == {"expected", "verbalized"}
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    tok = AutoTokenizer.from_pretrained(path)
    scored = 0
    for r in records:
        want = brute_force_expected(model, tok, r["prompt"], r["response"])
        got = r["scores"]["expected"]
        if want is None:
            assert got is None
            continue
        scored += 1
        assert got == pytest.approx(want, rel=1e-4)
        assert min(EXPECTED_LEVELS) <= got <= max(EXPECTED_LEVELS)
    assert scored == len(records) == 6


def test_heldout_scorers_accept_expected_from_the_recipe_tree(tmp_path):
    """``train.py recipe=tiny-format heldout.every=2 heldout.scorers=[expected,verbalized]`` resolves to a
    held-out protocol whose primary scorer is ``expected`` (the in-training evaluation runs the
    same ``evaluate_dataset`` as ``rlsr evaluate``)."""
    from test_trainer_support import tiny_settings

    from rlsr.config.heldout import resolve_heldout

    settings = tiny_settings(tmp_path / "run", max_steps=2, save_steps=2)
    settings.heldout.every = 2
    settings.heldout.scorers = ["expected", "verbalized"]
    assert resolve_heldout(settings).scorers == ("expected", "verbalized")

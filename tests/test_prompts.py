"""Pin every prompt of rlsr/core/prompts.py to the RLSR paper (arXiv 2607.03528, Sec. C.1-C.3).

Two independent checks: (1) where a plain-text copy of the paper is given (its path in the
environment variable ``RLSR_PAPER_TEXT``; without it these checks skip), the strings are cut out
of the paper and compared;
(2) a SHA-256 of each string is pinned here, so an edit fails even without the paper.
"""

from __future__ import annotations

import hashlib
import os
import re
import string
from pathlib import Path

import pytest

from rlsr.core import prompts

# sha256 of the verbatim strings (checked against the paper by the tests below).
PINNED_SHA256 = {
    "SIMPLE_SYSTEM_PROMPT": "1c491a934cb2fb6eb93854be1e304040fd8e1791ea1c88b7c580cf21c2657f9c",
    "LONG_SYSTEM_PROMPT": "7542196c580ffa976726128c08c595663d13d450aaf3f9bd79f6ca34986f2a60",
    "ANSWER_FALLBACK_SUFFIX": "d9806a4fcfe9b0816249e48a0db702bb5169805944d7ff80dc1b67fdf2b0867e",
    "CONFIDENCE_FALLBACK_SUFFIX": "709be0ff035eb4979829cb7f6130029ac74eed9336da4af86b018c79c27abcb3",
    "JUDGE_PROMPT_TEMPLATE": "88f419726cea8b41a437369a5849234ba424f187cd9fdc735343c47d743b9b0c",
}


def _seed_text() -> str | None:
    path = os.environ.get("RLSR_PAPER_TEXT")
    return Path(path).read_text(encoding="utf-8") if path else None


SEED = _seed_text()
needs_seed = pytest.mark.skipif(
    SEED is None, reason="no plain-text copy of the paper (set RLSR_PAPER_TEXT)"
)


def _between(text: str, start: str, end: str) -> str:
    i = text.index(start) + len(start)
    return text[i : text.index(end, i)].strip()


@pytest.mark.parametrize("name", sorted(PINNED_SHA256))
def test_prompt_hash_pinned(name):
    value = getattr(prompts, name)
    assert hashlib.sha256(value.encode("utf-8")).hexdigest() == PINNED_SHA256[name], (
        f"{name} changed; it must stay verbatim from the paper (Sec. C.1-C.3)."
    )


@needs_seed
def test_simple_system_prompt_matches_paper_c1():
    paper = _between(SEED, "System Prompt (Simple) ", "System Prompt (Long)")
    assert prompts.SIMPLE_SYSTEM_PROMPT == paper


@needs_seed
def test_long_system_prompt_matches_paper_c1():
    paper = _between(SEED, "System Prompt (Long) ", "### C.2 Verifiers")
    assert prompts.LONG_SYSTEM_PROMPT == paper


@needs_seed
def test_judge_prompt_matches_paper_c2():
    paper = _between(SEED, "LLM-as-a-Judge Prompt ", "### C.3")
    assert prompts.JUDGE_PROMPT_TEMPLATE == paper


@needs_seed
def test_fallback_suffixes_match_paper_c3():
    section = _between(SEED, "### C.3 LLM Response Parser", "### C.4")
    quoted = re.findall(r"append “(.*?)”", section)
    assert quoted == [prompts.ANSWER_FALLBACK_SUFFIX, prompts.CONFIDENCE_FALLBACK_SUFFIX]


def test_prompts_literal_landmarks():
    """Spot literals (readable diff when the hash test fails)."""
    assert prompts.SIMPLE_SYSTEM_PROMPT.startswith("A conversation between User and Assistant.")
    assert "The Assistant first thinks" in prompts.SIMPLE_SYSTEM_PROMPT
    assert "The assistant first thinks" in prompts.LONG_SYSTEM_PROMPT  # lower case in the paper
    assert "Here are some guidelines for the analysis:" in prompts.LONG_SYSTEM_PROMPT
    final_format = (
        "The final format that must be followed is: <think> reasoning process here </think>"
        "<answer> final answer here </answer><analysis> analysis about confidence and "
        "uncertainty here </analysis><confidence> confidence level here (number between 0 and 1) "
        "</confidence>"
    )
    for text in (prompts.SIMPLE_SYSTEM_PROMPT, prompts.LONG_SYSTEM_PROMPT):
        assert text.endswith(final_format)
        assert text == text.strip() and "\n" not in text
    assert prompts.ANSWER_FALLBACK_SUFFIX == "Thinking time ended. My final answer is"
    assert prompts.CONFIDENCE_FALLBACK_SUFFIX == (
        "Thinking time ended. My verbalized confidence in my answer as a number between 0 and 1 "
        "is equal to"
    )
    assert "Respond with only “YES”" in prompts.JUDGE_PROMPT_TEMPLATE


def test_system_prompt_lookup():
    assert prompts.get_system_prompt("simple") is prompts.SIMPLE_SYSTEM_PROMPT
    assert prompts.get_system_prompt("long") is prompts.LONG_SYSTEM_PROMPT
    assert set(prompts.SYSTEM_PROMPTS) == {"simple", "long"}
    with pytest.raises(ValueError, match="simple"):
        prompts.get_system_prompt("short")


def test_judge_prompt_fields_and_rendering():
    fields = {f for _, f, _, _ in string.Formatter().parse(prompts.JUDGE_PROMPT_TEMPLATE) if f}
    assert fields == {"question", "ground_truth", "predicted_answer"}
    text = prompts.render_judge_prompt("What is 2+2?", "4", "four {not a field}")
    assert (
        "Question: What is 2+2? Ground Truth Answer: 4 Predicted Answer: four {not a field} Is"
        in text
    )
    assert text.endswith("Is the predicted answer correct?")

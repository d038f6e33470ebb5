"""Prompts of the RLSR paper, verbatim (seeds/003, Sec. C.1-C.3). Results depend on these strings.

Each constant is pinned by a test (tests/test_prompts.py); change them only to fix a transcription
error against the paper, never to "improve" wording.
"""

from __future__ import annotations

__all__ = [
    "SIMPLE_SYSTEM_PROMPT",
    "LONG_SYSTEM_PROMPT",
    "SYSTEM_PROMPTS",
    "NO_SYSTEM_PROMPT",
    "ANSWER_FALLBACK_SUFFIX",
    "CONFIDENCE_FALLBACK_SUFFIX",
    "JUDGE_PROMPT_TEMPLATE",
    "get_system_prompt",
    "system_prompt_name",
    "render_judge_prompt",
]

# Sec. C.1, "System Prompt (Simple)": used for Big-Math Digits and the math evaluation sets.
SIMPLE_SYSTEM_PROMPT = "A conversation between User and Assistant. The user asks a question, and the Assistant solves it. The Assistant first thinks about the reasoning process in the mind, provides the user with the final answer, then analyzes its confidence about the solution and provides the user with its confidence level. The confidence level is a number between 0 and 1 (inclusive) enclosed within <confidence></confidence> tags. The final answer is enclosed between <answer></answer> tags. The analysis about confidence and uncertainty is enclosed within <analysis></analysis> tags. The Assistant should reason about its confidence in the solution and its uncertainty in the solution within these tags. The final format that must be followed is: <think> reasoning process here </think><answer> final answer here </answer><analysis> analysis about confidence and uncertainty here </analysis><confidence> confidence level here (number between 0 and 1) </confidence>"

# Sec. C.1, "System Prompt (Long)": used for HotPotQA and HotPotQA-Modified.
LONG_SYSTEM_PROMPT = "A conversation between User and Assistant. The user asks a question, and the Assistant solves it. The assistant first thinks about the reasoning process in the mind, provides the user with the final answer, then analyzes its confidence about the solution and then provides the user with its confidence level. The confidence level is a number between 0 and 1 (inclusive) enclosed within <confidence></confidence> tags. The final answer is enclosed between <answer></answer> tags. The analysis about confidence and uncertainty is enclosed within <analysis></analysis> tags. The assistant should reason about its confidence in the solution and its uncertainty in the solution within these tags. Here are some guidelines for the analysis: Your task is to point out things where the model could be wrong in its thinking, or things where there might be ambiguity in the solution steps, or in the reasoning process itself. You should not suggest ways of fixing the response, your job is only to reason about uncertainties. For some questions, the response might be correct. In these cases, it is also okay to have only a small number of uncertainties and then explicitly say that I am unable to spot more uncertainties. Uncertainties might be different from errors. For example, uncertainties may arise from ambiguities in the question, or from the application of a particular lemma/proof. If there are alternate potential approaches that may lead to different answers, you should mention them. List out plausible uncertainties, do not make generic statements, be as specific about uncertainties as possible. Enclose this uncertainty analysis within <analysis></analysis> tags. The final format that must be followed is: <think> reasoning process here </think><answer> final answer here </answer><analysis> analysis about confidence and uncertainty here </analysis><confidence> confidence level here (number between 0 and 1) </confidence>"

SYSTEM_PROMPTS = {"simple": SIMPLE_SYSTEM_PROMPT, "long": LONG_SYSTEM_PROMPT}

# Prompt choice without a system message: the user message alone (the SFT-Answer-Only baseline,
# Sec. D.3, trains and is evaluated on plain (question, answer) pairs, no tag instructions).
NO_SYSTEM_PROMPT = "none"

# Sec. C.3: appended to a response without a parseable <answer> before generating again.
ANSWER_FALLBACK_SUFFIX = "Thinking time ended. My final answer is"

# Sec. C.3: appended to a response without a valid confidence before generating again.
CONFIDENCE_FALLBACK_SUFFIX = (
    "Thinking time ended. My verbalized confidence in my answer as a number between 0 and 1 is "
    "equal to"
)

# Sec. C.2, "LLM-as-a-Judge Prompt". Fields: question, ground_truth, predicted_answer.
JUDGE_PROMPT_TEMPLATE = "You are given a question, a ground truth answer, and a predicted answer. Determine whether the predicted answer is correct based on the ground truth. Respond with only “YES” if the predicted answer is correct, or “NO” if it is incorrect. Question: {question} Ground Truth Answer: {ground_truth} Predicted Answer: {predicted_answer} Is the predicted answer correct?"


def get_system_prompt(name: str) -> str:
    """Return the system prompt called ``name`` ("simple" or "long")."""
    try:
        return SYSTEM_PROMPTS[name]
    except KeyError:
        raise ValueError(
            f"unknown system prompt {name!r}; choose one of {sorted(SYSTEM_PROMPTS)}."
        ) from None


def system_prompt_name(text: str | None) -> str | None:
    """The name ("simple" / "long") of the system prompt whose text is ``text``, else None."""
    for name, prompt in SYSTEM_PROMPTS.items():
        if text == prompt:
            return name
    return None


def render_judge_prompt(question: str, ground_truth: str, predicted_answer: str) -> str:
    """Fill the Sec. C.2 judge prompt. Callers quote/truncate ``predicted_answer`` first."""
    return JUDGE_PROMPT_TEMPLATE.format(
        question=question, ground_truth=ground_truth, predicted_answer=predicted_answer
    )

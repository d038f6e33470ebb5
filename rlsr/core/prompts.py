"""Prompts of the RLSR paper, verbatim (Sec. C.1-C.3). Results depend on these strings.

The paper: "Aligning Language Models with Selective Prediction", arXiv 2607.03528.

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
    "system_prompt_names",
    "register_system_prompt",
    "unregister_system_prompt",
    "FORMAT_TAGS",
    "FORMAT_INSTRUCTIONS",
    "missing_format_tags",
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


# The tags the parser (rlsr.core.parsing.FULL_FORMAT) and the format reward need, in order; a custom
# system prompt (a user task's, docs/tasks.md) must ask for every one of them.
FORMAT_TAGS = ("think", "answer", "analysis", "confidence")

# What rlsr appends to a custom system prompt that sets ``append_format: true``: the format
# sentences of the simple prompt (Sec. C.1), verbatim.
FORMAT_INSTRUCTIONS = SIMPLE_SYSTEM_PROMPT[SIMPLE_SYSTEM_PROMPT.index("The confidence level") :]

# System prompts of user tasks (``rlsr.data.tasks``), by the task's name. The paper's two stay in
# SYSTEM_PROMPTS, untouched.
_CUSTOM_PROMPTS: dict[str, str] = {}


def missing_format_tags(text: str) -> list[str]:
    """The ``<tag>`` / ``</tag>`` strings of ``FORMAT_TAGS`` that ``text`` never mentions."""
    return [t for tag in FORMAT_TAGS for t in (f"<{tag}>", f"</{tag}>") if t not in text]


def register_system_prompt(name: str, text: str) -> None:
    """Make ``text`` the system prompt called ``name`` (a user task's own prompt).

    The text must mention every tag of ``FORMAT_TAGS``, opening and closing (the parser and the
    format reward need them; ``missing_format_tags``). ``name`` cannot be a built-in prompt's.
    """
    if name in SYSTEM_PROMPTS or name == NO_SYSTEM_PROMPT:
        raise ValueError(f"system prompt name {name!r} is a built-in one; choose another name.")
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"system prompt {name!r}: the text is empty.")
    missing = missing_format_tags(text)
    if missing:
        raise ValueError(
            f"system prompt {name!r} does not ask for {' '.join(missing)}: the parser and the "
            "format reward read <think>, <answer>, <analysis> and <confidence> blocks, so a model "
            "never told about them scores as unformatted. Add the tag instructions to the text, "
            "or set append_format: true to have rlsr append its own (docs/tasks.md)."
        )
    _CUSTOM_PROMPTS[name] = text


def unregister_system_prompt(name: str) -> None:
    """Forget the custom system prompt ``name`` (no-op when absent)."""
    _CUSTOM_PROMPTS.pop(name, None)


def system_prompt_names() -> list[str]:
    """Every prompt name ``get_system_prompt`` accepts: the paper's, then the tasks'."""
    return [*SYSTEM_PROMPTS, *_CUSTOM_PROMPTS]


def get_system_prompt(name: str) -> str:
    """Return the system prompt called ``name`` ("simple", "long", or a user task's)."""
    text = SYSTEM_PROMPTS.get(name) or _CUSTOM_PROMPTS.get(name)
    if text is None:
        raise ValueError(
            f"unknown system prompt {name!r}; choose one of {system_prompt_names()} (a task's "
            "own prompt is known once its task is loaded: --tasks-dir DIR)."
        )
    return text


def system_prompt_name(text: str | None) -> str | None:
    """The name ("simple" / "long" / a task's) of the system prompt whose text is ``text``."""
    for name, prompt in [*SYSTEM_PROMPTS.items(), *_CUSTOM_PROMPTS.items()]:
        if text == prompt:
            return name
    return None


def render_judge_prompt(question: str, ground_truth: str, predicted_answer: str) -> str:
    """Fill the Sec. C.2 judge prompt. Callers quote/truncate ``predicted_answer`` first."""
    return JUDGE_PROMPT_TEMPLATE.format(
        question=question, ground_truth=ground_truth, predicted_answer=predicted_answer
    )

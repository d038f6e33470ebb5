"""Distributional Correctness Score for multiple-choice sets ("Measuring Language Model
Hallucinations Through Distributional Correctness", Sec. 4 and App. A.4).

The model scores each option continuation "<letter>) <option>" after "Answer: ", plus an "I don't
know" option in the same format (App. A.4, so form does not bias the likelihoods), in one user
turn "<stem>\n A) ...\n E) I don't know\nAnswer with one option." rendered with its chat
template. Length-normalised log-likelihoods (mean token log-prob, Sec. 7) are softmaxed over the
options (``rlsr.metrics.selective.dcs_from_log_likelihoods``); DCS = (p_c - P_W)(1 - p_idk).
"""

from __future__ import annotations

import string
from collections.abc import Mapping

import numpy as np

from rlsr.equations.logprob import length_normalized_logprob
from rlsr.generation.backends import Backend
from rlsr.metrics import selective as M

__all__ = ["IDK_TEXT", "dcs_prompt", "option_continuations", "score_dcs"]

IDK_TEXT = "I don't know"
_INSTRUCTION = "Answer with one option."


def _stem(question: str, options: Mapping[str, str]) -> str:
    """The question without its rendered option lines (the MCQ copies append "A) text" lines)."""
    first = next(iter(options))
    cut = question.find(f"\n{first}) ")
    return question[:cut] if cut >= 0 else question


def _idk_letter(options: Mapping[str, str]) -> str:
    letters = string.ascii_uppercase
    last = max(letters.index(k) for k in options if k in letters)
    if last + 1 >= len(letters):
        raise ValueError("too many options to add an IDK letter.")
    return letters[last + 1]


def dcs_prompt(question: str, options: Mapping[str, str]) -> tuple[list[dict], dict[str, str], str]:
    """(messages, options incl. IDK, IDK letter)."""
    if not options:
        raise ValueError("DCS needs MCQ options ({letter: text}); this item has none.")
    idk = _idk_letter(options)
    full = {**options, idk: IDK_TEXT}
    lines = [_stem(question, options).rstrip()] + [f"{k}) {v}" for k, v in full.items()]
    return [{"role": "user", "content": "\n".join(lines) + "\n" + _INSTRUCTION}], full, idk


def option_continuations(options: Mapping[str, str]) -> list[str]:
    return [f"{k}) {v}" for k, v in options.items()]


def score_dcs(
    backend: Backend, question: str, options: Mapping[str, str], gold_letter: str
) -> dict:
    """Per-option length-normalised log-likelihoods, (p_c, P_W, p_idk) and the DCS of one item."""
    if gold_letter not in options:
        raise ValueError(f"gold letter {gold_letter!r} is not among the options {sorted(options)}.")
    messages, full, idk = dcs_prompt(question, options)
    context = backend.render(messages) + "Answer: "
    conts = option_continuations(full)
    token_lps = backend.score([context] * len(conts), conts)
    ll = np.array([length_normalized_logprob(t) for t in token_lps])
    letters = list(full)
    p_c, p_w, p_idk = M.dcs_from_log_likelihoods(ll, letters.index(gold_letter), letters.index(idk))
    return {
        "log_likelihoods": dict(zip(letters, ll.tolist(), strict=False)),
        "p_correct": float(p_c),
        "p_wrong": float(p_w),
        "p_idk": float(p_idk),
        "score": float(M.dcs(p_c, p_w, p_idk)),
    }

"""The log-probability selector: length-normalised log-probability of the answer (RLSR Sec. D.4).

One definition, used by both sides of Tab. 7: RLSR's pooled ranking when
``method.confidence=logprob`` (``rlsr.method.trainer.RLSRTrainer``) and ``rlsr evaluate --scorers
logprob`` (``rlsr.evaluation``; the vLLM backend computes the same per-token values with
``prompt_logprobs``)::

    s = exp( (1/T) * sum_{t=1..T} log p(a_t | x, y_<a, a_<t) )

* ``a_1..a_T``: the tokens of the extracted answer string, ``tokenizer(answer,
  add_special_tokens=False)``; ``x``: the rendered chat prompt; ``y_<a``: the response text
  before the answer, where the answer was read (inside the last complete ``<answer>`` block,
  ``ParsedResponse.answer_start``; the first line of a plain response). Context and answer are
  tokenized separately and concatenated, exactly as ``TransformersBackend.score`` always did.
* ``p``: the model's own next-token distribution: ``log_softmax`` of the raw logits (temperature
  1, no top-p), with dropout off. Not the sampling distribution: TRL's vLLM sampling log-probs
  and ``old_per_token_logps`` are divided by the training temperature (0.7), and evaluation
  decodes greedily, where no tempered distribution exists.
* ``exp`` of the mean: the geometric-mean token probability in (0, 1]; a monotone map of the
  length-normalised log-probability, so rankings, AURC and Acc@c are the same for either.
* No answer (or an answer that does not occur in the text): ``None`` / NaN, ranked as 0, below
  every scored answer (the rule for a missing verbalized confidence, ``rlsr.equations.rewards``).

Why the answer tokens, not the whole completion: the paper names the scorer only
("length-normalized log-probability", citing confidence surveys whose sequence likelihood is that
of the *answer*), and it replaces the verbalized confidence "in the answer". Averaged over a
whole completion the score would be dominated by hundreds of reasoning tokens (1,536 max on
HotPotQA) and, as a training signal, would reward fluent or repetitive reasoning rather than a
likely answer. docs/training.md records this choice.

The expected verbalized confidence (``rlsr evaluate --scorers expected``) reads the same policy at
the confidence instead of the answer: with the response teacher-forced up to and including its
last ``<confidence>`` tag (context ``x, y_<c``), each level ``l`` of ``EXPECTED_LEVELS`` is scored
as the full continuation ``a + str(l) + b + "</confidence>"``, ``a`` and ``b`` the whitespace the
response itself wrote around its number (``<confidence> 0.5 </confidence>``: a space each); a
level can be several tokens, and the closing tag keeps ``0.1`` from also counting ``0.15``::

    s_l = sum_t log p(w_t | x, y_<c, w_<t),   w = tokens of the continuation of level l
    P(l) = exp(s_l) / sum_l' exp(s_l'),        E[c] = sum_l P(l) * l

Greedy decoding reports only the argmax level of a policy that may still spread its mass over
several levels (a near-tie flips it); ``E[c]`` moves with the whole distribution.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = [
    "left_pad",
    "answer_span",
    "length_normalized_logprob",
    "logprob_confidence",
    "continuation_logprobs",
    "answer_logprob_confidences",
    "EXPECTED_LEVELS",
    "CONFIDENCE_OPEN",
    "CONFIDENCE_CLOSE",
    "level_text",
    "confidence_frame",
    "expected_confidence",
    "expected_confidences",
]

CONFIDENCE_OPEN, CONFIDENCE_CLOSE = "<confidence>", "</confidence>"
# The levels the expected confidence spreads its mass over: 0.0, 0.1, ..., 1.0, which holds the
# 0.1 / 0.3 / 0.5 / 0.7 / 0.9 grid of the tiny recipes' warm-ups; one spelling per level
# (``level_text``).
EXPECTED_LEVELS: tuple[float, ...] = tuple(round(0.1 * k, 1) for k in range(11))


def answer_span(generated: str, answer: str | None, start: int | None = None):
    """Split ``generated`` into (text before the answer, answer text).

    ``start``: where the reader found the answer (``ParsedResponse.answer_start``, the offset of
    ``plain_answer``); the answer must occur there. Without ``start`` the LAST verbatim
    occurrence is used (an answer read from a fallback continuation, which ends the text).
    ``None`` when there is no answer or it does not occur where it should (no score then).
    """
    if not answer:
        return None
    if start is None:
        start = generated.rfind(answer)
        if start < 0:
            return None
    elif not generated.startswith(answer, start):
        return None
    return generated[:start], answer


def length_normalized_logprob(token_logprobs: Sequence[float]) -> float:
    """(1/T) * sum_t log p(a_t | ...) over the T answer tokens; NaN for an empty span."""
    if len(token_logprobs) == 0:
        return math.nan
    return float(sum(token_logprobs) / len(token_logprobs))


def logprob_confidence(token_logprobs: Sequence[float] | None) -> float | None:
    """exp(length-normalised log-prob) in (0, 1]; None when there is no answer span to score."""
    if token_logprobs is None:
        return None
    mean = length_normalized_logprob(token_logprobs)
    return None if math.isnan(mean) else math.exp(mean)


def left_pad(seqs: Sequence[Sequence[int]], pad_id: int, width: int | None = None):
    """``(input_ids, attention_mask)``, both ``torch.long`` of shape ``(len(seqs), width)``: each
    row right-aligned, ``pad_id`` / mask 0 on its left (an empty row is all padding).

    ``width`` defaults to the longest row; a larger one adds padding columns to every row.
    """
    import torch

    longest = max((len(s) for s in seqs), default=0)
    width = longest if width is None else width
    if width < longest:
        raise ValueError(f"width {width} is shorter than the longest row ({longest} tokens).")
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, s in enumerate(seqs):
        if s:
            ids[i, width - len(s) :] = torch.tensor(list(s))
            mask[i, width - len(s) :] = 1
    return ids, mask


def continuation_logprobs(
    model, tokenizer, contexts: Sequence[str], continuations: Sequence[str], *, batch_size: int = 8
) -> list[list[float]]:
    """Per-token ``log p(continuation | context)`` under ``model``, teacher-forced, no gradient.

    Both strings are tokenized with ``add_special_tokens=False`` (chat templates already hold the
    special tokens) and concatenated; rows are left-padded in batches of ``batch_size``. Only the
    logits of the last ``max(len(continuation)) + 1`` positions are computed (``logits_to_keep``),
    so the cost is one forward of the context, not a vocabulary-sized tensor per position.
    Dropout is switched off for the call (``model.eval()``) and the mode restored afterwards.
    Every row is forwarded, an empty continuation included (returns ``[]``), so distributed
    callers make the same number of forward calls on every rank (ZeRO-3 needs that).
    """
    import torch

    if len(contexts) != len(continuations):
        raise ValueError("contexts and continuations must have the same length.")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1; got {batch_size}.")

    def encode(texts):
        return [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]

    ctx_ids, cont_ids = encode(contexts), encode(continuations)
    device = next(model.parameters()).device
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    out: list[list[float]] = []
    was_training = model.training
    model.eval()
    try:
        for start in range(0, len(ctx_ids), batch_size):
            conts = cont_ids[start : start + batch_size]
            rows = [c + t for c, t in zip(ctx_ids[start : start + batch_size], conts, strict=True)]
            keep = max(len(c) for c in conts) + 1
            width = max(keep, max(len(r) for r in rows))
            ids, mask = left_pad(rows, pad, width)
            ids, mask = ids.to(device), mask.to(device)
            with torch.no_grad():
                logits = model(input_ids=ids, attention_mask=mask, logits_to_keep=keep).logits
            logps = torch.log_softmax(logits.float(), dim=-1)  # (rows, keep, vocab)
            for i, cont in enumerate(conts):
                k = len(cont)
                if k == 0:
                    out.append([])
                    continue
                # logits at sequence index j predict token j + 1; the answer is the last k tokens
                steps = logps[i, keep - k - 1 : keep - 1]
                targets = ids[i, width - k :].unsqueeze(-1)
                out.append(steps.gather(-1, targets).squeeze(-1).tolist())
    finally:
        model.train(was_training)
    return out


def answer_logprob_confidences(
    model,
    tokenizer,
    prompt_texts: Sequence[str],
    responses: Sequence[str],
    answers: Sequence[str | None],
    answer_starts: Sequence[int | None],
    *,
    batch_size: int = 8,
) -> list[float | None]:
    """The selector score ``s`` (module docstring) of each response; None without an answer span.

    Every row is forwarded (rows without a span as the bare prompt), see
    ``continuation_logprobs``.
    """
    contexts, continuations, scored = [], [], []
    for prompt, response, answer, start in zip(
        prompt_texts, responses, answers, answer_starts, strict=True
    ):
        span = answer_span(response, answer, start)
        scored.append(span is not None)
        contexts.append(prompt + (span[0] if span else ""))
        continuations.append(span[1] if span else "")
    lps = continuation_logprobs(model, tokenizer, contexts, continuations, batch_size=batch_size)
    return [logprob_confidence(lp) if ok else None for lp, ok in zip(lps, scored, strict=True)]


def level_text(level: float) -> str:
    """How a confidence level is written after ``<confidence>``: Python's shortest round-trip
    form of the float (``0.1``, ``0.0``, ``1.0``)."""
    return str(float(level))


def confidence_frame(generated: str) -> tuple[str, str, str] | None:
    """Where and how ``generated`` writes its confidence number: ``(context, before, after)``,
    ``context`` the text up to and including its last ``<confidence>`` tag, ``before`` / ``after``
    the whitespace around the number in that block (an unclosed block: the whitespace after the
    tag, mirrored). None when the text opens no confidence block (e.g. a confidence read from the
    Sec. C.3 fallback's plain continuation)."""
    at = generated.rfind(CONFIDENCE_OPEN)
    if at < 0:
        return None
    end = at + len(CONFIDENCE_OPEN)
    rest = generated[end:]
    close = rest.find(CONFIDENCE_CLOSE)
    inner = rest if close < 0 else rest[:close]
    before = inner[: len(inner) - len(inner.lstrip())]
    if close < 0 or not inner.strip():
        return generated[:end], before, before
    return generated[:end], before, inner[len(inner.rstrip()) :]


def expected_confidence(
    levels: Sequence[float], level_logprobs: Sequence[Sequence[float]]
) -> float | None:
    """E[c] = sum_l P(l) * l with P(l) = exp(s_l) / sum_l' exp(s_l') and s_l the sum of
    ``level_logprobs[l]`` (the per-token log-probs of level ``l``'s continuation, module
    docstring): the policy's expected verbalized confidence over ``levels``, normalised over
    them (the mass the policy puts on other text is left out). Computed with the largest s_l
    subtracted, so very unlikely levels do not underflow to 0/0. None for no levels, a level
    scored by no token, or no finite score."""
    if len(levels) != len(level_logprobs):
        raise ValueError("levels and level_logprobs must have the same length.")
    if len(levels) == 0 or any(len(lp) == 0 for lp in level_logprobs):
        return None
    sums = [math.fsum(lp) for lp in level_logprobs]
    top = max(sums)
    if not math.isfinite(top):
        return None
    weights = [math.exp(s - top) for s in sums]
    return math.fsum(w * lvl for w, lvl in zip(weights, levels, strict=True)) / math.fsum(weights)


def expected_confidences(
    score,
    prompt_texts: Sequence[str],
    generated: Sequence[str],
    levels: Sequence[float] = EXPECTED_LEVELS,
) -> list[float | None]:
    """The expected verbalized confidence (``expected_confidence``) of each response:
    ``score(contexts, continuations)`` is the teacher-forcing call (``continuation_logprobs``
    behind ``TransformersBackend.score``; any backend's ``score``), made once for every
    (response with a ``<confidence>`` tag, level) pair. None for a response without the tag."""
    frames = [confidence_frame(g) for g in generated]
    scored = [i for i, f in enumerate(frames) if f is not None]
    contexts, conts = [], []
    for i in scored:
        context, before, after = frames[i]
        for lvl in levels:
            contexts.append(prompt_texts[i] + context)
            conts.append(before + level_text(lvl) + after + CONFIDENCE_CLOSE)
    lps = score(contexts, conts)
    out: list[float | None] = [None] * len(generated)
    n = len(levels)
    for k, i in enumerate(scored):
        out[i] = expected_confidence(levels, lps[k * n : (k + 1) * n])
    return out

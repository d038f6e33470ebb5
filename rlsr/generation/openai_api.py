"""The OpenAI-compatible wire format every HTTP client of a model server shares (TRL's vLLM server
in training, ``rlsr.generation.server_backend``; ``rlsr.generation.endpoint``). Bodies carry
``VLLMBackend``'s sampling values and choices read back into the ``Generation`` the offline engine
returns, so a server and ``--backend vllm`` give the same records.

Server kinds (``/v1/models``' ``owned_by``): ``vllm`` (token-id prompts, vLLM's extra fields sent
explicitly since the server would fill a missing one from ``generation_config.json``,
``prompt_logprobs``, ``continue_final_message``); ``rlsr`` (``rlsr serve``: the question only, it
decodes as certified and answers the ``rlsr`` extension); ``openai`` (anything else: OpenAI's
documented fields, text prompts).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rlsr.generation.backends import Generation, Sampling, cut_eos

__all__ = [
    "SERVER_KINDS",
    "VLLM_SERVE",
    "RLSR_SERVE",
    "OTHER_SERVER",
    "server_kind",
    "completions_body",
    "chat_body",
    "completion_generation",
    "chat_generation",
    "score_body",
    "continuation_logprobs_of",
]

# The kinds by name (``RLSR_SERVE`` is the `rlsr serve` endpoint, not the training method).
VLLM_SERVE, RLSR_SERVE, OTHER_SERVER = "vllm", "rlsr", "openai"
SERVER_KINDS = (VLLM_SERVE, RLSR_SERVE, OTHER_SERVER)


def server_kind(model_entry: dict) -> str:
    """``vllm`` | ``rlsr`` | ``openai`` from one ``/v1/models`` entry (its ``owned_by``)."""
    owner = str(model_entry.get("owned_by") or "")
    return owner if owner in (VLLM_SERVE, RLSR_SERVE) else OTHER_SERVER


# sent, not left out: vllm serve fills a missing field from generation_config.json (Qwen2.5:
# top_k 20, repetition_penalty 1.05); these are vllm.LLM's neutral values
_VLLM_FIELDS = {
    "return_token_ids": True,
    "top_k": 0,
    "min_p": 0.0,
    "repetition_penalty": 1.0,
    "skip_special_tokens": True,
}


def _sampling_fields(sampling: Sampling) -> dict:
    body: dict[str, Any] = {
        "n": sampling.n,
        "max_tokens": sampling.max_new_tokens,
        "temperature": sampling.temperature,
        "top_p": sampling.top_p if sampling.temperature > 0 else 1.0,
    }
    if sampling.seed is not None:
        body["seed"] = sampling.seed
    return body


def completions_body(
    model: str, prompt: str | list[int] | list[list[int]], sampling: Sampling, kind: str = "vllm"
) -> dict:
    """The ``/v1/completions`` body for ``prompt`` (token ids for vLLM: tokenised as
    ``VLLMBackend`` tokenises, no special tokens added; text for other servers)."""
    body: dict[str, Any] = {"model": model, "prompt": prompt, **_sampling_fields(sampling)}
    if kind == "vllm":
        body.update(_VLLM_FIELDS)
        body["logprobs"] = 0 if sampling.logprobs else None
    elif sampling.logprobs:
        body["logprobs"] = 0
    return body


def chat_body(
    model: str, messages: list[dict], continuation: str, sampling: Sampling, kind: str
) -> dict:
    """The ``/v1/chat/completions`` body; a non-empty ``continuation`` (a Sec. C.3 fallback
    context) is a final assistant message to continue (vLLM only). ``rlsr serve`` gets the
    messages alone (it refuses decoding fields)."""
    if kind == RLSR_SERVE:
        return {"model": model, "messages": messages}
    body: dict[str, Any] = {
        "model": model,
        "messages": list(messages),
        **_sampling_fields(sampling),
    }
    if continuation:
        if kind != "vllm":
            raise ValueError("continuing an assistant message needs vLLM's continue_final_message")
        body["messages"].append({"role": "assistant", "content": continuation})
        body.update(continue_final_message=True, add_generation_prompt=False)
    if kind == "vllm":
        body.update(_VLLM_FIELDS)
    if sampling.logprobs:
        body["logprobs"] = True
    return body


def completion_generation(choice: dict, eos_ids: set[int], logprobs: bool = False) -> Generation:
    """A ``Generation`` from one ``/v1/completions`` choice, as ``vllm_generation`` builds it
    (``token_ids == []`` from a server that returns none)."""
    tokens = list(choice.get("token_ids") or [])
    lps = None
    if logprobs and choice.get("logprobs"):
        lps = list(choice["logprobs"]["token_logprobs"])
    finish = "length" if choice.get("finish_reason") == "length" else "stop"
    tokens, lps = cut_eos(tokens, lps, finish, eos_ids)
    text = choice["text"]
    if not isinstance(text, str):
        raise TypeError(f"choice text is {type(text).__name__}, not a string")
    return Generation(text, tokens, finish, lps)


def chat_generation(choice: dict, eos_ids: set[int], logprobs: bool = False) -> Generation:
    """A ``Generation`` from one ``/v1/chat/completions`` choice."""
    text = choice["message"]["content"]
    if not isinstance(text, str):
        raise TypeError(f"message.content is {type(text).__name__}, not a string")
    tokens = list(choice.get("token_ids") or [])
    lps = None
    if logprobs and choice.get("logprobs") and choice["logprobs"].get("content") is not None:
        lps = [step["logprob"] for step in choice["logprobs"]["content"]]
    finish = "length" if choice.get("finish_reason") == "length" else "stop"
    tokens, lps = cut_eos(tokens, lps, finish, eos_ids)
    return Generation(text, tokens, finish, lps)


def score_body(model: str, prompts: list[int] | list[list[int]]) -> dict:
    """The teacher-forcing request (TRL's ``get_sequence_logprobs``): one greedy token,
    ``prompt_logprobs`` 0 (each position's own token only; 1 would add the top token's)."""
    return {
        "model": model, "prompt": prompts, "max_tokens": 1, "temperature": 0.0,
        "prompt_logprobs": 0,
    }  # fmt: skip


def continuation_logprobs_of(choice: dict, context: Sequence[int], continuation: Sequence[int]):
    """log p of each ``continuation`` token from a ``score_body`` choice, as ``VLLMBackend.score``
    reads the offline engine's."""
    steps = choice["prompt_logprobs"][len(context) :]
    return [step[str(t)]["logprob"] for step, t in zip(steps, continuation, strict=True)]

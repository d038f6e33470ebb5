"""Loading word-level tokenizers that ``AutoTokenizer`` would garble (transformers 5).

``AutoTokenizer.from_pretrained`` on a folder whose ``config.json`` says ``model_type: qwen2``
ignores the saved ``tokenizer_class`` and rebuilds a byte-level ``Qwen2Tokenizer`` (qwen2 is in
transformers' ``MODELS_WITH_INCORRECT_HUB_TOKENIZER_CLASS``), which turns the toy's word-level
vocabulary into character soup. The toy tokenizer therefore records

    "rlsr_load_as": "PreTrainedTokenizerFast"

in its ``tokenizer_config.json`` (the key survives save/load round trips, so trained arms keep
it), and ``load_tokenizer``, through which the trainer and the evaluator load every tokenizer,
honours it.
"""

from __future__ import annotations

import json
from pathlib import Path

from huggingface_hub import try_to_load_from_cache

__all__ = [
    "TOKENIZER_MARKER_KEY",
    "marked_tokenizer_class",
    "load_tokenizer",
    "render_chat_prompt",
    "model_context_length",
    "prompt_token_counter",
]

TOKENIZER_MARKER_KEY = "rlsr_load_as"
_SUPPORTED = ("PreTrainedTokenizerFast",)


def marked_tokenizer_class(path) -> str | None:
    """The class named by ``rlsr_load_as`` in ``path/tokenizer_config.json``, else None."""
    config = Path(str(path)) / "tokenizer_config.json"
    if not config.is_file():
        return None
    try:
        value = json.loads(config.read_text()).get(TOKENIZER_MARKER_KEY)
    except (OSError, ValueError):
        return None
    if value is not None and value not in _SUPPORTED:
        raise ValueError(
            f"{config}: {TOKENIZER_MARKER_KEY}={value!r} is not supported; use one of {_SUPPORTED}."
        )
    return value


def load_tokenizer(path, **kwargs):
    """``PreTrainedTokenizerFast`` for a marked folder (see module doc), else ``AutoTokenizer``."""
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    if marked_tokenizer_class(path) is not None:
        kwargs.pop("trust_remote_code", None)
        return PreTrainedTokenizerFast.from_pretrained(str(path), **kwargs)
    return AutoTokenizer.from_pretrained(path, **kwargs)


def render_chat_prompt(tokenizer, prompt) -> str:
    """Text the model sees for ``prompt``: a conversation through the chat template with the
    generation prompt (as TRL renders GRPO prompts), or a plain-text prompt unchanged."""
    if isinstance(prompt, str):
        return prompt
    if getattr(tokenizer, "chat_template", None) is None:
        raise ValueError(
            "the tokenizer has no chat template; the prompts are conversations. "
            "Use an instruct/chat model or set tokenizer.chat_template."
        )
    return tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=False)


# Keys of a model's config.json that hold its context length, in the order transformers' own
# configs use them (Llama/Qwen/Mistral, GPT-2, some remote-code models).
_CONTEXT_KEYS = ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length")


def _model_config(path) -> tuple[dict, Path] | None:
    """The ``config.json`` of a local model folder or of a hub model in the local cache (nothing
    is downloaded, no remote code runs) and its path; None when there is none."""
    config = Path(str(path)).expanduser() / "config.json"
    if not config.is_file():
        try:
            cached = try_to_load_from_cache(str(path), "config.json")
        except Exception:  # noqa: BLE001 - not a repo id: there is no config
            cached = None
        if not isinstance(cached, str):
            return None
        config = Path(cached)
    try:
        values = json.loads(config.read_text())
    except (OSError, ValueError):
        return None
    return (values, config) if isinstance(values, dict) else None


# RoPE types whose ``max_position_embeddings`` already holds the extended context (vLLM 0.32,
# ``_get_and_verify_max_len``); another type with a ``factor`` (linear, dynamic) stretches it.
_ROPE_IN_PLACE = ("default", "su", "longrope", "llama3", "yarn", "deepseek_yarn",
                  "deepseek_llama_scaling")  # fmt: skip


def _rope_stretched(section: dict) -> bool:
    for key in ("rope_scaling", "rope_parameters"):
        rope = section.get(key)
        if isinstance(rope, dict):
            kind = rope.get("rope_type", rope.get("type", "default"))
            if kind not in _ROPE_IN_PLACE and rope.get("factor") not in (None, 1, 1.0):
                return True
    return False


def model_context_length(path) -> tuple[int, str] | None:
    """The model's context in tokens and where it was read (``max_position_embeddings in
    PATH/config.json``); None when unknown, or when RoPE scaling (linear, dynamic) stretches the
    positions past what the config names."""
    found = _model_config(path)
    if found is None:
        return None
    values, config = found
    sections = (values, values.get("text_config") or {})
    if any(_rope_stretched(section) for section in sections):
        return None
    for section in sections:
        for key in _CONTEXT_KEYS:
            value = section.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value, f"{key} in {config}"
    return None


def prompt_token_counter(tokenizer):
    """``count(messages)``: the tokens of a conversation as ``render_chat_prompt`` renders it."""

    def count(messages) -> int:
        text = render_chat_prompt(tokenizer, messages)
        return len(tokenizer(text, add_special_tokens=False)["input_ids"])

    return count

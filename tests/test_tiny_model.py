"""The tiny offline model that tests and the tiny recipe use (rlsr.testing)."""

from __future__ import annotations

import json

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerFast


def test_tiny_model_reloads_with_identical_token_ids(tiny_model_dir):
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    raw = PreTrainedTokenizerFast(tokenizer_file=str(tiny_model_dir / "tokenizer.json"))
    text = "<think> héllo 12 345\n</think>\t<answer>Paris</answer><confidence>0.85</confidence>"
    assert tok(text)["input_ids"] == raw(text)["input_ids"]
    assert tok.decode(tok(text)["input_ids"]) == text


def test_tiny_model_has_chat_template_and_vllm_compatible_shape(tiny_model_dir):
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    messages = [{"role": "system", "content": "S"}, {"role": "user", "content": "Q?"}]
    rendered = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert rendered.endswith("<|im_start|>assistant\n")
    assert tok.eos_token == "<|im_end|>" and tok.pad_token_id != tok.eos_token_id
    cfg = json.loads((tiny_model_dir / "config.json").read_text())
    assert cfg["hidden_size"] // cfg["num_attention_heads"] >= 32  # vLLM CPU backend minimum
    assert (tiny_model_dir / "model.safetensors").exists()
    assert not list(tiny_model_dir.glob("*.bin"))


def test_tiny_model_generates_offline(tiny_model_dir):
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    ids = tok("What is 2+2?", return_tensors="pt")
    out = model.generate(**ids, max_new_tokens=5, do_sample=False)
    assert out.shape[1] == ids["input_ids"].shape[1] + 5 or out[0, -1] == tok.eos_token_id
    with torch.no_grad():
        assert torch.isfinite(model(**ids).logits).all()


def test_tiny_llama_builds_from_scratch_and_generates(tmp_path):
    """Built into an empty folder, not read from the machine's cache (a cached copy hid a builder
    that returned no tokenizer). Llama-3.1 shape: untied head, llama3 RoPE, BOS, <|eot_id|> stop."""
    from rlsr.testing import build_tiny_llama_model

    out = build_tiny_llama_model(tmp_path / "llama")
    model = AutoModelForCausalLM.from_pretrained(out)
    tok = AutoTokenizer.from_pretrained(out)
    assert type(model).__name__ == "LlamaForCausalLM" and not model.config.tie_word_embeddings
    assert model.config.rope_scaling["rope_type"] == "llama3"
    text = tok.apply_chat_template([{"role": "user", "content": "q: c"}], tokenize=False,
                                   add_generation_prompt=True)  # fmt: skip
    ids = tok(text, return_tensors="pt", add_special_tokens=False).input_ids
    assert ids[0, 0].item() == tok.bos_token_id
    eot = tok.convert_tokens_to_ids("<|eot_id|>")
    assert eot in model.generation_config.eos_token_id
    with torch.no_grad():
        gen = model.generate(ids, max_new_tokens=4, do_sample=False)
    assert gen.shape[1] > ids.shape[1]

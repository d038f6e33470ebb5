"""The tiny offline model that tests and the tiny recipe use (rlsr.tiny_models)."""

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
    from rlsr.tiny_models import build_tiny_llama_model

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


# --------------------------------------------------------------------------- shipped copies


def test_shipped_models_are_the_manifests_bytes():
    """The shipped tiny models are the files MANIFEST.json names, byte for byte (sha256), and
    the default settings resolve to them (not to a copy built on this machine)."""
    from rlsr import tiny_models as tm

    manifest = tm.shipped_manifest()
    assert set(manifest["models"]) == set(tm.SHIPPED_MODELS)
    assert manifest["settings"] == tm.TINY_MODEL_DEFAULTS
    for name in tm.SHIPPED_MODELS:
        folder = tm.shipped_model_path(name)
        files = manifest["models"][name]["files"]
        assert {"config.json", "model.safetensors", "tokenizer.json"} <= set(files)
        on_disk = {p.name for p in folder.iterdir() if p.is_file()}
        assert on_disk == set(files), f"{folder}: files not in the manifest"
        for fname, sha in files.items():
            assert tm.file_sha256(folder / fname) == sha, f"{name}/{fname} differs"
        total = sum((folder / f).stat().st_size for f in files)
        assert total < 4 * 2**20, f"{name}: {total} bytes, more than a test fixture should hold"
    assert tm.tiny_model_path() == tm.SHIPPED_DIR / "tiny-qwen2"
    assert tm.tiny_warm_model_path() == tm.SHIPPED_DIR / "tiny-format-warm"


def test_a_changed_shipped_file_is_refused_with_the_fix(tmp_path, monkeypatch):
    import shutil

    import pytest

    from rlsr import tiny_models as tm

    copy = tmp_path / "models"
    shutil.copytree(tm.SHIPPED_DIR, copy)
    weights = copy / "tiny-format-warm" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1  # one bit of one weight
    weights.write_bytes(bytes(data))
    monkeypatch.setattr(tm, "SHIPPED_DIR", copy)
    monkeypatch.setattr(tm, "_VERIFIED", set())
    assert tm.shipped_model_path("tiny-qwen2") == copy / "tiny-qwen2"
    with pytest.raises(RuntimeError, match="build_tiny_models.py"):
        tm.tiny_warm_model_path()


def test_format_warm_model_writes_the_format_and_mixes_right_and_wrong():
    """The format-warm model, sampled at temperature 1 on every tiny train prompt (200 x 4):
    the tag format in >= 90 % of completions, right in 30-70 % (tiny_models.WARM_BANDS), and
    varied confidences. The trainer tests' preconditions rest on this model; their chances of a
    vacuous pool are computed from its per-prompt accuracy (0.16-0.97 at the recipe's
    temperature) in test_trainer.py, next to ONE_STEP_POOL."""
    from rlsr import tiny_models as tm

    torch.set_num_threads(1)
    got = tm.sampled_behaviour(tm.tiny_warm_model_path(), samples_per_prompt=4)
    assert got["completions"] == 800
    for key, (lo, hi) in tm.WARM_BANDS.items():
        assert lo <= got[key] <= hi, (key, got)
    assert len(got["confidences"]) >= 3, got
    # the manifest's figures are this model's (8 samples per prompt at build time)
    shipped = tm.shipped_manifest()["models"]["tiny-format-warm"]["behaviour_temperature_1"]
    assert abs(shipped["accuracy"] - got["accuracy"]) < 0.08, (shipped, got)


def test_format_warm_greedy_choices_win_by_more_than_float_noise():
    """Greedy (top-1) texts are compared across process counts and batch layouts
    (test_trainer_distributed.py): on every one of the recipe's 64 prompts each greedy decision
    beats the runner-up by >= 1e-3 in logit, ~100x the float noise between layouts or CPUs, so
    those texts are a property of the shipped weights, not of the machine."""
    from rlsr import tiny_models as tm

    torch.set_num_threads(1)
    margins = tm.greedy_margins(tm.tiny_warm_model_path(), limit=tm.GREEDY_PROMPTS)
    assert len(margins) == 64
    assert min(margins) >= tm.WARM_MIN_GREEDY_MARGIN, sorted(margins)[:5]

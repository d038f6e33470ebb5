"""Tiny offline models for tests, the ``tiny`` recipe and CPU demos.

``build_tiny_model`` writes a randomly initialised ``Qwen2ForCausalLM`` and a byte-level BPE
tokenizer trained on the spot, with a ChatML chat template, in Hugging Face format
(``config.json``, ``model.safetensors``, ``tokenizer.json`` …). No hub access, a few seconds.
``build_tiny_llama_model`` does the same for the Llama-3.1 family (``LlamaForCausalLM``, llama3
RoPE scaling, untied head; a tokenizer shaped like Llama 3's: its pre-tokenizer regex, BOS
prepended by the post-processor, no pad token, ``<|eot_id|>``-terminated chat turns), so the real
recipes' ``model=llama3.1-8b`` paths run on CPU (tests/test_recipes_run.py).

Why the tokenizer is trained the way it is (STACK.md): transformers 5 reloads a folder holding a
Qwen2 ``config.json`` as ``Qwen2Tokenizer``, which rebuilds the pre-tokenizer as Qwen's regex
split + byte-level + NFC. We train with exactly that pipeline so token ids do not change between
the tokenizer we train and the one users (and vLLM) load back.

Shapes: hidden 128 with 4 heads gives head_dim 32, the minimum vLLM's CPU backend accepts.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import shutil
import tempfile
from pathlib import Path

from rlsr import prompts
from rlsr.data import load_examples

__all__ = [
    "TINY_MODEL_DEFAULTS",
    "build_tiny_model",
    "build_tiny_llama_model",
    "tiny_model_path",
    "tiny_llama_model_path",
    "tiny_warm_model_path",
    "padded_tokenizer",
    "CHATML_TEMPLATE",
    "pool_record",
]

# The pre-tokenizer regex of Qwen2's tokenizer (transformers' Qwen2Tokenizer).
_QWEN2_PRETOKENIZE_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

TINY_MODEL_DEFAULTS: dict = {
    "vocab_size": 1024,
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 2048,
    "seed": 0,
}


def _training_corpus() -> list[str]:
    """Text covering the answer format, digits and the prompts' vocabulary."""

    lines = [
        prompts.SIMPLE_SYSTEM_PROMPT,
        prompts.LONG_SYSTEM_PROMPT,
        prompts.JUDGE_PROMPT_TEMPLATE,
    ]
    lines.append(prompts.ANSWER_FALLBACK_SUFFIX + " " + prompts.CONFIDENCE_FALLBACK_SUFFIX)
    for i in range(200):
        conf = f"0.{i % 10}{(i * 7) % 10}"
        lines.append(
            f"<think> fact {i} says the answer is {i * 3 % 97} </think><answer>{i % 13}</answer>"
            f"<analysis> I am not sure about {i} </analysis><confidence>{conf}</confidence>"
        )
        lines.append(
            f"Question {i}: what is {i} + {i % 7}? Title: Paragraph {i}. The city of X{i}."
        )
    return lines


def _train_bpe(vocab_size: int, regex: str, special_tokens: list[str], normalize: bool):
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token=None, byte_fallback=False))
    if normalize:
        tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(regex), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - len(special_tokens),
        special_tokens=[],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_training_corpus(), trainer=trainer)
    tok.add_special_tokens(special_tokens)
    return tok


def _chatml_fast(backend):
    """``backend`` (a ``tokenizers.Tokenizer``) as the Qwen2-style tokenizer: ChatML template,
    ``<|im_end|>`` ends a turn, ``<|endoftext|>`` pads, no BOS."""
    from transformers import PreTrainedTokenizerFast

    fast = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token=None,
        unk_token=None,
    )
    fast.chat_template = CHATML_TEMPLATE
    return fast


def _build_tokenizer(vocab_size: int):
    return _chatml_fast(
        _train_bpe(vocab_size, _QWEN2_PRETOKENIZE_REGEX, SPECIAL_TOKENS, normalize=True)
    )


# Llama 3's pre-tokenizer regex (digits in runs of up to three) and special tokens.
_LLAMA3_PRETOKENIZE_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
LLAMA3_SPECIAL_TOKENS = [
    "<|begin_of_text|>",
    "<|end_of_text|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eot_id|>",
]
LLAMA3_CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + message['content']"
    " + '<|eot_id|>' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}"
    "{% endif %}"
)


def _build_llama3_tokenizer(vocab_size: int):
    from tokenizers import processors
    from transformers import PreTrainedTokenizerFast

    tok = _train_bpe(vocab_size, _LLAMA3_PRETOKENIZE_REGEX, LLAMA3_SPECIAL_TOKENS, normalize=False)
    bos = "<|begin_of_text|>"
    tok.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, tok.token_to_id(bos))]
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=bos,
        eos_token="<|end_of_text|>",  # the base model's; chat turns end with <|eot_id|>
        pad_token=None,  # Llama-3.1 base has none; TRL pads with eos
        unk_token=None,
    )
    fast.chat_template = LLAMA3_CHAT_TEMPLATE
    return fast


def padded_tokenizer(vocab_size: int, base_vocab: int = 1024):
    """The tiny tokenizer (``base_vocab`` BPE ids) with its vocabulary filled up to ``vocab_size``.

    For randomly initialised models of real shapes (scripts/gpu_acceptance.py): a Qwen2.5 config
    has ~152k embedding rows, and a random model samples any of them, so every id must decode.
    Filler entries are strings over the byte-level alphabet (2, then 3 characters) that no merge
    produces: they never appear when encoding, so text encodes to the tiny tokenizer's ids, and
    each decodes to 2-3 bytes. The special tokens take the last ids (as in Qwen's tokenizer).
    """
    import itertools
    import json as _json

    from tokenizers import Tokenizer, pre_tokenizers

    small = _build_tokenizer(base_vocab)
    state = _json.loads(small.backend_tokenizer.to_str())
    vocab: dict[str, int] = state["model"]["vocab"]
    taken = set(vocab) | {t["content"] for t in state["added_tokens"]}
    next_id = 1 + max(vocab.values())
    # tokenizers numbers added (special) tokens after the model vocabulary when it loads.
    n_special = len(state["added_tokens"])
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    fillers = (
        "".join(chars)
        for n in (2, 3)
        for chars in itertools.product(alphabet, repeat=n)
        if "".join(chars) not in taken
    )
    for text in itertools.islice(fillers, max(0, vocab_size - n_special - next_id)):
        vocab[text] = next_id
        next_id += 1
    return _chatml_fast(Tokenizer.from_str(_json.dumps(state)))


def _tiny_settings(overrides: dict) -> dict:
    """``TINY_MODEL_DEFAULTS`` with ``overrides`` applied; an unknown key raises ``ValueError``."""
    unknown = set(overrides) - set(TINY_MODEL_DEFAULTS)
    if unknown:
        raise ValueError(
            f"unknown tiny-model settings {sorted(unknown)}; known: {sorted(TINY_MODEL_DEFAULTS)}"
        )
    return {**TINY_MODEL_DEFAULTS, **overrides}


def _sizes(cfg: dict, vocab_size: int) -> dict:
    """The config sizes every tiny architecture takes from the settings."""
    keys = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
            "num_key_value_heads", "max_position_embeddings")  # fmt: skip
    return {"vocab_size": vocab_size, **{k: cfg[k] for k in keys}}


def build_tiny_model(out_dir: str | os.PathLike, **overrides) -> Path:
    """Write a tiny random Qwen2 causal LM with tokenizer and chat template to ``out_dir``.

    Keyword overrides replace entries of ``TINY_MODEL_DEFAULTS`` (e.g. ``hidden_size=64``).
    Weights are saved as safetensors. Returns ``Path(out_dir)``.
    """
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = _tiny_settings(overrides)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)

    tokenizer = _build_tokenizer(cfg["vocab_size"])
    config = Qwen2Config(
        **_sizes(cfg, len(tokenizer)),
        tie_word_embeddings=True,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
    )
    torch.manual_seed(cfg["seed"])
    model = Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    return out


def build_tiny_llama_model(out_dir: str | os.PathLike, **overrides) -> Path:
    """Write a tiny random Llama-3.1-shaped causal LM (``LlamaForCausalLM``: GQA, llama3 RoPE
    scaling, untied LM head) with a Llama-3-shaped tokenizer and chat template to ``out_dir``.

    Keyword overrides replace entries of ``TINY_MODEL_DEFAULTS``. Returns ``Path(out_dir)``.
    """
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = _tiny_settings(overrides)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = _build_llama3_tokenizer(cfg["vocab_size"])
    eot = tokenizer.convert_tokens_to_ids("<|eot_id|>")
    config = LlamaConfig(
        **_sizes(cfg, len(tokenizer)),
        rope_theta=500000.0,
        rope_scaling={
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 1024,
        },
        tie_word_embeddings=False,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=None,
    )
    torch.manual_seed(cfg["seed"])
    model = LlamaForCausalLM(config)
    model.generation_config.bos_token_id = tokenizer.bos_token_id
    model.generation_config.eos_token_id = [tokenizer.eos_token_id, eot]
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    return out


def tiny_llama_model_path(**overrides) -> Path:
    """Path of a cached tiny Llama-3.1-shaped model (``build_tiny_llama_model``), like
    ``tiny_model_path``."""
    cfg = {**TINY_MODEL_DEFAULTS, **overrides}
    key_src = json.dumps(cfg, sort_keys=True) + Path(__file__).read_text()
    key = hashlib.sha256(key_src.encode()).hexdigest()[:12]
    return _cached_build(
        _cache_root() / f"tiny-llama-{key}", lambda out: build_tiny_llama_model(out, **overrides)
    )


def _cache_root() -> Path:
    root = os.environ.get("RLSR_CACHE_DIR")
    if root:
        return Path(root)
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "rlsr"


def tiny_model_path(**overrides) -> Path:
    """Path of a cached tiny model (built on first use; safe under concurrent callers).

    The cache key covers the settings and this module's source, so a change to the builder
    invalidates old copies. Location: ``$RLSR_CACHE_DIR`` or ``~/.cache/rlsr``.
    """
    cfg = {**TINY_MODEL_DEFAULTS, **overrides}
    key_src = json.dumps(cfg, sort_keys=True) + Path(__file__).read_text()
    key = hashlib.sha256(key_src.encode()).hexdigest()[:12]
    return _cached_build(
        _cache_root() / f"tiny-qwen2-{key}", lambda out: build_tiny_model(out, **overrides)
    )


def _cached_build(target: Path, build) -> Path:
    """Return ``target``, first running ``build(folder)`` unless a finished copy is there.

    Builds in a private folder, then renames: another process building at the same time (e.g.
    two ranks of a distributed test) either wins the rename or finds the finished copy.
    """
    if (target / "config.json").exists() and (target / "tokenizer.json").exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=target.name + ".", dir=target.parent))
    try:
        build(tmp)
        try:
            tmp.rename(target)
        except OSError:
            if not (target / "config.json").exists():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target


# --------------------------------------------------------------------------- format-warm copy

WARM_STEPS = 100
WARM_SEED = 0
CONFIDENCES = ("0.2", "0.5", "0.8")
COLORS = ("red", "blue", "green", "white", "gray", "yellow", "black")


def _warm_target(answer: str, rng: random.Random) -> str:
    guess = answer if rng.random() < 0.5 else rng.choice([c for c in COLORS if c != answer])
    conf = rng.choice(CONFIDENCES)
    return (
        f"<think> look </think><answer>{guess}</answer>"
        f"<analysis> ok </analysis><confidence>{conf}</confidence>"
    )


def _train_format_warm(out: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    base = tiny_model_path()
    tok = AutoTokenizer.from_pretrained(base)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    rows = load_examples("tiny", split="train", limit=64)
    rng = random.Random(WARM_SEED)
    torch.manual_seed(WARM_SEED)
    prompts = [tok.apply_chat_template(r["prompt"], add_generation_prompt=True) for r in rows]
    prompts = [p["input_ids"] if hasattr(p, "keys") else p for p in prompts]
    opt = torch.optim.AdamW(model.parameters(), lr=5e-3)
    model.train()
    for _ in range(WARM_STEPS):
        idx = rng.sample(range(len(rows)), 8)
        seqs, labels = [], []
        for i in idx:
            tgt = tok(_warm_target(rows[i]["answer"], rng), add_special_tokens=False)["input_ids"]
            tgt = tgt + [tok.eos_token_id]
            seqs.append(prompts[i] + tgt)
            labels.append([-100] * len(prompts[i]) + tgt)
        width = max(map(len, seqs))
        ids = torch.full((len(seqs), width), tok.pad_token_id)
        lab = torch.full((len(seqs), width), -100)
        att = torch.zeros((len(seqs), width), dtype=torch.long)
        for j, (s, lb) in enumerate(zip(seqs, labels, strict=True)):
            ids[j, : len(s)] = torch.tensor(s)
            lab[j, : len(lb)] = torch.tensor(lb)
            att[j, : len(s)] = 1
        loss = model(input_ids=ids, attention_mask=att, labels=lab).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)


def tiny_warm_model_path() -> Path:
    """Path of the tiny model fine-tuned on the tag format (built once per machine, cached).

    A random tiny model never writes the tag format, so every rollout would get the same reward
    and nothing would train; this copy is fine-tuned for ~100 steps (seconds) on the bundled
    ``tiny`` dataset with tagged targets, the answer right half of the time and a confidence drawn
    independently from a few values. Sampled rollouts then vary in correctness and confidence, so
    pooled rewards and gradients are real (recipe=tiny, trainer tests).
    """
    key_src = str(tiny_model_path()) + Path(__file__).read_text()
    key = hashlib.sha256(key_src.encode()).hexdigest()[:12]
    return _cached_build(_cache_root() / f"tiny-format-warm-{key}", _train_format_warm)


def pool_record(pool: dict) -> dict:
    """One ``pool_hook`` pool (``RLSRTrainer``) as a JSON-ready dict, for test workers that dump
    the pools of each step to compare runs (a missing confidence, NaN, becomes ``None``)."""
    return {
        "step": pool["global_step"],
        "num_processes": pool["num_processes"],
        "correct": pool["correct"].tolist(),
        "confidence": [None if math.isnan(c) else c for c in pool["confidence"].tolist()],
        "format_ok": pool["format_ok"].tolist(),
        "rewards": pool["rewards"].tolist(),
        "texts": pool["texts"],
        "golds": pool["golds"],
    }

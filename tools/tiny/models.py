"""Builders, warm-up training and probes of the tiny offline models (outside the library).

The ``tiny`` recipe and the tests use two of them as shipped files (``tools/tiny/weights``,
found and hash-checked by ``rlsr.data.tiny_models``), built here by ``tools/tiny/build.py``.
Tests, scripts/gpu_acceptance.py and benchmarks import the builders and probes from a checkout.

``build_tiny_model`` writes a randomly initialised ``Qwen2ForCausalLM`` and a byte-level BPE
tokenizer trained on the spot, with a ChatML chat template, in Hugging Face format
(``config.json``, ``model.safetensors``, ``tokenizer.json`` …). No hub access, a few seconds.
``build_tiny_llama_model`` does the same for the Llama-3.1 family (``LlamaForCausalLM``, llama3
RoPE scaling, untied head; a tokenizer shaped like Llama 3's: its pre-tokenizer regex, BOS
prepended by the post-processor, no pad token, ``<|eot_id|>``-terminated chat turns), so the real
recipes' ``model=llama3.1-8b`` paths run on CPU (tests/test_recipes_run.py).

Why the tokenizer is trained the way it is: transformers 5 reloads a folder holding a
Qwen2 ``config.json`` as ``Qwen2Tokenizer``, which rebuilds the pre-tokenizer as Qwen's regex
split + byte-level + NFC. We train with exactly that pipeline so token ids do not change between
the tokenizer we train and the one users (and vLLM) load back.

Shapes: hidden 128 with 4 heads gives head_dim 32, the minimum vLLM's CPU backend accepts.

Cached builds (``tiny_llama_model_path``) are keyed by ``builder_key``: the settings, the library
versions, the training corpus and the code (docstrings and comments left out) of the functions
and constants that decide the files' bytes, not this whole module, so editing a probe or the
warm-up does not rebuild them.
"""

from __future__ import annotations

import ast
import hashlib
import inspect
import json
import math
import os
import random
import shutil
import tempfile
import textwrap
from pathlib import Path

from rlsr.core import prompts
from rlsr.core.parsing import parse_response
from rlsr.data.loading import load_examples
from rlsr.data.tiny_models import tiny_model_path, tiny_warm_model_path
from rlsr.equations.logprob import left_pad
from rlsr.verifiers import get_verifier
from tools.tiny.data import CANDIDATES_NONE_TIER, candidates_tier
from tools.tiny.data import COLORS as TINY_COLORS
from tools.tiny.data import OBJECTS as TINY_OBJECTS

__all__ = [
    "TINY_MODEL_DEFAULTS",
    "build_tiny_model",
    "build_tiny_llama_model",
    "tiny_llama_model_path",
    "builder_key",
    "LLAMA_BUILDER",
    "padded_tokenizer",
    "CHATML_TEMPLATE",
    "train_format_warm",
    "sampled_behaviour",
    "WARM_BANDS",
    "greedy_margins",
    "greedy_completions",
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
    # The bundled tiny dataset's words (so each object and color is one token, and the
    # format-warm model copies a listed color as one token) and its answer format.
    for split in ("train", "test"):
        for row in load_examples("tiny", split=split):
            lines.append(row["question"])
            lines.append(_warm_completion(row["answer"], CONFIDENCES[0]))
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
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = _tiny_settings(overrides)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)

    tok = _build_tokenizer(cfg["vocab_size"])
    ids = {"eos_token_id": tok.eos_token_id, "pad_token_id": tok.pad_token_id}
    return _write_random(
        out, tok, cfg, Qwen2Config, Qwen2ForCausalLM, generation=ids,
        tie_word_embeddings=True, **ids, bos_token_id=None,
    )  # fmt: skip


def build_tiny_llama_model(out_dir: str | os.PathLike, **overrides) -> Path:
    """Write a tiny random Llama-3.1-shaped causal LM (``LlamaForCausalLM``: GQA, llama3 RoPE
    scaling, untied LM head) with a Llama-3-shaped tokenizer and chat template to ``out_dir``.

    Keyword overrides replace entries of ``TINY_MODEL_DEFAULTS``. Returns ``Path(out_dir)``.
    """
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = _tiny_settings(overrides)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tok = _build_llama3_tokenizer(cfg["vocab_size"])
    eot = tok.convert_tokens_to_ids("<|eot_id|>")
    return _write_random(
        out,
        tok,
        cfg,
        LlamaConfig,
        LlamaForCausalLM,
        generation={"bos_token_id": tok.bos_token_id, "eos_token_id": [tok.eos_token_id, eot]},
        rope_theta=500000.0,
        rope_scaling={
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 1024,
        },
        tie_word_embeddings=False,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=None,
    )


def _write_random(
    out: Path, tokenizer, cfg: dict, config_class, model_class, generation: dict, **arch
) -> Path:
    """A ``model_class`` of ``config_class(sizes from cfg, **arch)`` drawn after
    ``torch.manual_seed(cfg["seed"])``, ``generation`` set on its generation config, saved
    (safetensors) to ``out`` with ``tokenizer``."""
    import torch

    config = config_class(**_sizes(cfg, len(tokenizer)), **arch)
    torch.manual_seed(cfg["seed"])
    model = model_class(config)
    for key, value in generation.items():
        setattr(model.generation_config, key, value)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    return out


# The functions and constants whose code decides the bytes of a cached tiny Llama (weights,
# tokenizer, config). ``builder_key`` hashes their code, the versions and the tokenizer's
# training text itself (``_training_corpus()``: prompts, the bundled data), so the text's own
# ingredients need not be listed.
LLAMA_BUILDER: tuple = (
    "build_tiny_llama_model",
    "_build_llama3_tokenizer",
    "_train_bpe",
    "_tiny_settings",
    "_sizes",
    "_write_random",
    "_LLAMA3_PRETOKENIZE_REGEX",
    "LLAMA3_SPECIAL_TOKENS",
    "LLAMA3_CHAT_TEMPLATE",
    "TINY_MODEL_DEFAULTS",
)


def _code(obj) -> str:
    """A function's code without its docstring and comments (``ast.unparse``), or a constant's
    ``repr``: what a change must touch to change the files built."""
    if not callable(obj):
        return repr(obj)
    tree = ast.parse(textwrap.dedent(inspect.getsource(obj)))
    fn = tree.body[0]
    body = fn.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        fn.body = body[1:] or [ast.Pass()]
    return ast.unparse(tree)


def builder_key(names: tuple = LLAMA_BUILDER, **overrides) -> str:
    """Cache key of a tiny model built by the functions and constants ``names`` with
    ``overrides``: 12 hex digits of the sha256 over the settings, torch / transformers /
    tokenizers versions, the training corpus and each name's code (``_code``). A probe, the
    warm-up or a docstring does not enter it."""
    import tokenizers
    import torch
    import transformers

    parts = [
        json.dumps(_tiny_settings(overrides), sort_keys=True),
        f"torch {torch.__version__} transformers {transformers.__version__} "
        f"tokenizers {tokenizers.__version__}",
        "\n".join(_training_corpus()),
        *(f"{name}\n{_code(globals()[name])}" for name in names),
    ]
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()[:12]


def tiny_llama_model_path(**overrides) -> Path:
    """Path of a tiny Llama-3.1-shaped model (``build_tiny_llama_model`` with ``overrides``),
    built on first use and cached (safe under concurrent callers) under ``$RLSR_CACHE_DIR`` or
    ``~/.cache/rlsr``, keyed by ``builder_key``. Its weights may differ across machines in the
    last bits; use it where only shapes and formats matter."""
    key = builder_key(LLAMA_BUILDER, **overrides)
    return _cached_build(
        _cache_root() / f"tiny-llama-{key}", lambda out: build_tiny_llama_model(out, **overrides)
    )


def _cache_root() -> Path:
    root = os.environ.get("RLSR_CACHE_DIR")
    if root:
        return Path(root)
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "rlsr"


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

WARM_LOOKUP_STEPS = 800
WARM_STEPS = 600
WARM_BATCH = 16
WARM_FULL_EVERY = 2
WARM_LR = 3e-3
WARM_SEED = 0
# Phase-2 targets answer the gold color (looked up in the question's facts) with probability
# WARM_P_GOLD, otherwise a color drawn uniformly from the dataset's eight: a model that learnt
# them exactly would be right with p = 0.6 + 0.4 / 8 = 0.65 at temperature 1 on every prompt.
# The tiny model learns the look-up only partly (measured: MANIFEST.json); its accuracy is gated
# by WARM_BANDS, not assumed.
WARM_P_GOLD = 0.6
# The verbalized confidences of the warm model's targets and their probabilities, drawn
# independently of the answer; one clear mode, so a greedy confidence is not a near-tie.
CONFIDENCES = ("0.1", "0.3", "0.5", "0.7", "0.9")
CONFIDENCE_WEIGHTS = (0.1, 0.15, 0.4, 0.2, 0.15)
# Behaviour the format-warm model must show, sampled at temperature 1 on the tiny train prompts
# (tools/tiny/build.py refuses to ship a model outside it; tests/test_tiny_model.py
# measures it again): the tag format nearly always, right answers between 30 % and 70 %.
WARM_BANDS = {"format_rate": (0.9, 1.0), "accuracy": (0.3, 0.7)}
# Greedy (top-1) decisions on the recipe's 64 prompts must win by at least this logit gap, far
# above the ~1e-5 by which float noise moves a logit between batch layouts or CPUs, so a greedy
# text cannot change with the machine (``greedy_margins``).
WARM_MIN_GREEDY_MARGIN = 1e-3
GREEDY_PROMPTS = 64


def _warm_completion(answer: str, confidence: str) -> str:
    """The tagged completion of the format-warm targets (the answer spaced so it is the same
    token as in the question)."""
    return (
        f"<think> look </think><answer> {answer} </answer>"
        f"<analysis> ok </analysis><confidence> {confidence} </confidence>"
    )


def _warm_target(gold: str, rng: random.Random, p_gold: float) -> str:
    """A tagged target: the gold color with probability ``p_gold``, otherwise one of the
    dataset's colors at random; a confidence drawn independently of everything."""
    guess = gold if rng.random() < p_gold else rng.choice(TINY_COLORS)
    conf = rng.choices(CONFIDENCES, weights=CONFIDENCE_WEIGHTS)[0]
    return _warm_completion(guess, conf)


def train_format_warm(out: str | os.PathLike, base: str | os.PathLike | None = None) -> Path:
    """Fine-tune the tiny model (``base``, default the shipped random one) on the tag format:
    ``WARM_LOOKUP_STEPS`` steps of the look-up alone, then ``WARM_STEPS`` of the target mix
    (``_warm_target``), on the 200 tiny train prompts, short (user turn only) and full.

    Deterministic for one machine; across machines the float numerics differ, which is why the
    result is shipped rather than rebuilt (tools/tiny/build.py).
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = Path(out)
    base = Path(base) if base is not None else tiny_model_path()
    tok = AutoTokenizer.from_pretrained(base)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    rows = load_examples("tiny", split="train")
    rng = random.Random(WARM_SEED)
    torch.manual_seed(WARM_SEED)

    def template_ids(messages) -> list[int]:
        ids = tok.apply_chat_template(messages, add_generation_prompt=True)
        return list(ids["input_ids"] if hasattr(ids, "keys") else ids)

    prompt_ids = [template_ids(r["prompt"]) for r in rows]
    # The user turn alone (no system prompt): the facts sit at the same distance from the answer
    # as in the full prompt (RoPE attends by relative position), so the look-up learnt cheaply
    # on short sequences (batches of 4 x WARM_BATCH) carries over; every WARM_FULL_EVERY-th step
    # trains on the full prompts (batches of WARM_BATCH).
    short_ids = [template_ids([m for m in r["prompt"] if m["role"] == "user"]) for r in rows]
    opt = torch.optim.AdamW(model.parameters(), lr=WARM_LR, weight_decay=0.0)
    model.train()

    def train_step(source, size, p_gold, lr):
        for group in opt.param_groups:
            group["lr"] = lr
        seqs, completions = [], []
        for i in rng.sample(range(len(rows)), size):
            target = _warm_target(rows[i]["answer"], rng, p_gold)
            tgt = tok(target, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
            seqs.append(source[i] + tgt)
            completions.append(tgt)
        ids, mask = left_pad(seqs, tok.pad_token_id)
        labels = torch.full_like(ids, -100)
        for j, tgt in enumerate(completions):
            labels[j, ids.shape[1] - len(tgt) :] = torch.tensor(tgt)
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)

    # Phase 1: the look-up alone (every target right) at a constant rate, mostly on short
    # prompts (where it appears within a few hundred steps), every 4th step on full ones.
    for step in range(WARM_LOOKUP_STEPS):
        if step % 4 == 3:
            train_step(prompt_ids, WARM_BATCH, 1.0, WARM_LR)
        else:
            train_step(short_ids, 4 * WARM_BATCH, 1.0, WARM_LR)
    # Phase 2: the target mix (right with WARM_P_GOLD), short and full prompts, cosine decay.
    for step in range(WARM_STEPS):
        full = step % WARM_FULL_EVERY == WARM_FULL_EVERY - 1
        lr = WARM_LR * 0.5 * (1 + math.cos(math.pi * step / WARM_STEPS))
        if full:
            train_step(prompt_ids, WARM_BATCH, WARM_P_GOLD, lr)
        else:
            train_step(short_ids, 4 * WARM_BATCH, WARM_P_GOLD, lr)
    model.eval()
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    return out


def sampled_behaviour(
    path: str | os.PathLike, *, samples_per_prompt: int = 4, limit: int | None = None, seed: int = 0
) -> dict:
    """Sample ``samples_per_prompt`` completions per tiny train prompt at temperature 1 and
    return the format rate and accuracy (rlsr.core.parsing + exact match, as the trainer scores)
    overall and per prompt, and the distinct confidences seen."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path, padding_side="left")
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    rows = load_examples("tiny", split="train", limit=limit)
    torch.manual_seed(seed)
    texts, golds, prompt_of = [], [], []
    for start in range(0, len(rows), 16):
        chunk = [rows[i] for i in range(start, min(start + 16, len(rows)))]
        enc = tok.apply_chat_template(
            [r["prompt"] for r in chunk],
            add_generation_prompt=True,
            padding=True,
            return_tensors="pt",
            return_dict=True,
        )
        with torch.no_grad():
            out = model.generate(
                **enc,
                do_sample=True,
                temperature=1.0,
                top_k=0,
                top_p=1.0,
                max_new_tokens=48,
                num_return_sequences=samples_per_prompt,
                pad_token_id=tok.pad_token_id,
            )
        texts += tok.batch_decode(out[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
        for k, r in enumerate(chunk):
            golds += [list(r["answers"])] * samples_per_prompt
            prompt_of += [start + k] * samples_per_prompt
    parsed = [parse_response(t) for t in texts]
    correct = get_verifier("exact_match").verify_batch([p.answer for p in parsed], golds).correct
    fmt = [p.format_ok for p in parsed]
    per_prompt: dict[int, list[bool]] = {}
    for i, c in zip(prompt_of, correct, strict=True):
        per_prompt.setdefault(i, []).append(bool(c))
    accs = sorted(sum(v) / len(v) for v in per_prompt.values())
    n = len(texts)
    return {
        "completions": n,
        "format_rate": sum(fmt) / n,
        "accuracy": sum(bool(c) for c in correct) / n,
        "accuracy_per_prompt_min": accs[0],
        "accuracy_per_prompt_max": accs[-1],
        "confidences": sorted({p.confidence for p in parsed if p.confidence is not None}),
        "example": texts[0],
    }


def greedy_completions(
    path: str | os.PathLike, *, limit: int | None = None, max_new_tokens: int = 48
) -> list[tuple[str, float]]:
    """Per tiny train prompt, the greedy completion's text and the smallest gap between the top
    two logits over its decisions (up to its end-of-turn token).

    Greedy (top-1) outputs are compared across batch layouts and process counts in the tests;
    float noise between layouts is ~1e-5 in a logit, so a gap far above that means the argmax,
    and the text, cannot flip. One prompt per forward keeps padding out of the measurement.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    rows = load_examples("tiny", split="train", limit=limit)
    out = []
    for i in range(len(rows)):
        enc = tok.apply_chat_template(
            rows[i]["prompt"], add_generation_prompt=True, return_tensors="pt", return_dict=True
        )
        with torch.no_grad():
            gen = model.generate(
                **enc,
                do_sample=False,
                max_new_tokens=max_new_tokens,
                output_logits=True,
                return_dict_in_generate=True,
                pad_token_id=tok.pad_token_id,
            )
        top2 = torch.stack([step[0].topk(2).values for step in gen.logits])
        text = tok.decode(gen.sequences[0, enc["input_ids"].shape[1] :], skip_special_tokens=True)
        out.append((text, float((top2[:, 0] - top2[:, 1]).min())))
    return out


def greedy_margins(path: str | os.PathLike, *, limit: int | None = None) -> list[float]:
    """The per-prompt smallest top-2 logit gap of ``greedy_completions``."""
    return [gap for _, gap in greedy_completions(path, limit=limit)]


# --------------------------------------------------------------------------- missing-fact copy
# ``tiny-missing-warm``, the model recipe=tiny trains: ``tiny-format-warm`` fine-tuned further on
# the ``tiny-missing`` train split (its "none" questions ask about 10 of the 20 objects, its listed
# ones state 96 of the 160 (object, color) facts; validation and test ask about the others,
# tools.tiny.data.MISSING_SPLIT_*). A listed fact is answered with its color after the thought
# "look"; a missing one, after the thought "not" (so the model's own reasoning says when it
# guesses, as a reasoning model's would; "not sure" came out as "not" on 2 of the 5 validation
# objects), with a fixed guess per object
# (``MISSING_GUESS``: a prior such as "kettles are red"), right 1 time in 8 as the hidden color is
# uniform. Fixed answers keep the rollouts' right/wrong a function of the prompt, so within a
# group of rollouts the rewards differ by their confidence alone (a uniformly sampled guess adds a
# lucky-guess reward to the answer token, noise that drowns the confidence's signal in a 60-step
# run).
#
# The confidence target is NOT independent of the prompt: it is drawn from
# MISSING_CONFIDENCE_WEIGHTS[listed] over 0.1, 0.3, 0.5, 0.7, 0.9, i.e. (0.12, 0.15, 0.30, 0.20,
# 0.23) when the fact is listed and the mirror image (0.23, 0.20, 0.30, 0.15, 0.12) when it is
# missing: a built-in lean (mean target 0.554 vs 0.446) towards the ranking RL should find. Both
# have their mode at 0.5, which is what the greedy model says on every prompt, so the step-0
# greedy confidence does not rank (the gate below); sampled at the recipe's temperature the lean
# shows (``sampled_missing_lean``, recorded in the MANIFEST and stated in docs/training.md), and every value
# keeps enough mass that rollouts try them all, which the pooled reward needs to move the
# confidence. Starts without the lean (uniform or prompt-independent weights) did not learn in
# 40 steps (docs/training.md, recipe=tiny).
MISSING_WARM_STEPS = 400
MISSING_WARM_BATCH = 16
MISSING_WARM_LR = 2e-3
MISSING_WARM_SEED = 0
MISSING_THOUGHTS = {True: "look", False: "not"}
MISSING_GUESS = {obj: TINY_COLORS[i % len(TINY_COLORS)] for i, obj in enumerate(TINY_OBJECTS)}
MISSING_CONFIDENCE_WEIGHTS = {
    True: (0.12, 0.15, 0.3, 0.2, 0.23),
    False: (0.23, 0.2, 0.3, 0.15, 0.12),
}
# The gate the shipped model must pass (tools/tiny/build.py; tests/test_tiny_model.py
# measures it again): greedy on the validation split (neither trained on nor the held-out test
# that recipe=tiny reports), the tag format on every prompt, one
# confidence whatever the answer (ranking gain 0: the step-0 confidence does not rank), listed
# facts mostly looked up right and missing ones guessed; every greedy decision won by at least
# WARM_MIN_GREEDY_MARGIN (so the greedy text cannot change with the machine).
MISSING_GATE = {
    "format_rate": (1.0, 1.0),
    "ranking_gain": (-0.01, 0.01),
    "accuracy_listed": (0.7, 1.0),
    "accuracy_missing": (0.0, 0.35),
    "thought_matches_prompt": (0.9, 1.0),
}


def _missing_target(row: dict, rng: random.Random) -> str:
    """The tagged target of a ``tiny-missing`` row: its thought (``MISSING_THOUGHTS``), the
    listed color or the object's guess (``MISSING_GUESS``), and a confidence drawn from
    ``MISSING_CONFIDENCE_WEIGHTS[listed]`` (leaning high when listed, low when missing; mode 0.5
    for both)."""
    listed = _is_listed(row["question"])
    asked = row["question"].rsplit(" ", 1)[1].rstrip("?")
    answer = row["answer"] if listed else MISSING_GUESS[asked]
    conf = rng.choices(CONFIDENCES, weights=MISSING_CONFIDENCE_WEIGHTS[listed])[0]
    return (
        f"<think> {MISSING_THOUGHTS[listed]} </think><answer> {answer} </answer>"
        f"<analysis> ok </analysis><confidence> {conf} </confidence>"
    )


def _is_listed(question: str) -> bool:
    """Whether the asked object of a ``tiny`` / ``tiny-missing`` question is among its facts."""
    facts, asked = question.split(". What color is the ")
    return f"the {asked.rstrip('?')} is " in facts


def train_missing_warm(out: str | os.PathLike, base: str | os.PathLike | None = None) -> Path:
    """Fine-tune ``base`` (default the shipped ``tiny-format-warm``) for ``MISSING_WARM_STEPS``
    steps on ``_missing_target`` of the ``tiny-missing`` train prompts (``_fine_tune_tagged``).
    Deterministic for one machine; shipped, not rebuilt (float numerics differ across CPUs)."""
    return _fine_tune_tagged(
        out, base, "tiny-missing", _missing_target,
        steps=MISSING_WARM_STEPS, batch=MISSING_WARM_BATCH, lr=MISSING_WARM_LR,
        seed=MISSING_WARM_SEED,
    )  # fmt: skip


def _fine_tune_tagged(
    out: str | os.PathLike, base: str | os.PathLike | None, dataset: str, target,
    *, steps: int, batch: int, lr: float, seed: int, rehearse: tuple | None = None,
) -> Path:  # fmt: skip
    """Fine-tune ``base`` (default the shipped ``tiny-format-warm``) for ``steps`` steps on
    ``target(row, rng)`` of the ``dataset`` train prompts: batches of 4 x ``batch`` user-turn-only
    prompts, every second step ``batch`` full ones (as ``train_format_warm``), AdamW at ``lr``
    with cosine decay; ``random.Random(seed)`` draws the rows and targets, ``torch.manual_seed``
    is ``seed``. ``rehearse`` = (another dataset, its target): each batch also holds a quarter as
    many of that dataset's train prompts (drawn after the batch's own), so a skill the base
    learnt there is kept. Deterministic for one machine."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = Path(out)
    base = Path(base) if base is not None else tiny_warm_model_path()
    tok = AutoTokenizer.from_pretrained(base)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    rows = load_examples(dataset, split="train")
    rng = random.Random(seed)
    torch.manual_seed(seed)

    def template_ids(messages) -> list[int]:
        ids = tok.apply_chat_template(messages, add_generation_prompt=True)
        return list(ids["input_ids"] if hasattr(ids, "keys") else ids)

    def prompt_ids(rows_):
        full_ = [template_ids(r["prompt"]) for r in rows_]
        return full_, [template_ids([m for m in r["prompt"] if m["role"] == "user"]) for r in rows_]

    full_ids, short_ids = prompt_ids(rows)
    sources = [(rows, full_ids, short_ids, target, 1)]
    if rehearse is not None:
        extra = load_examples(rehearse[0], split="train")
        sources.append((extra, *prompt_ids(extra), rehearse[1], 4))
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    model.train()
    for step in range(steps):
        full = step % 2 == 1
        size = batch if full else 4 * batch
        for group in opt.param_groups:
            group["lr"] = lr * 0.5 * (1 + math.cos(math.pi * step / steps))
        seqs, targets = [], []
        for rows_, full_, short_, target_, divisor in sources:
            source = full_ if full else short_
            for i in rng.sample(range(len(rows_)), size // divisor):
                tgt = tok(target_(rows_[i], rng), add_special_tokens=False)["input_ids"]
                tgt = tgt + [tok.eos_token_id]
                seqs.append(source[i] + tgt)
                targets.append(tgt)
        ids, mask = left_pad(seqs, tok.pad_token_id)
        labels = torch.full_like(ids, -100)
        for j, tgt in enumerate(targets):
            labels[j, ids.shape[1] - len(tgt) :] = torch.tensor(tgt)
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
    model.eval()
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    return out


def _greedy_tagged(path: str | os.PathLike, dataset: str, split: str) -> tuple[list, list, list]:
    """Greedy completions (48 new tokens, one prompt per forward so padding stays out) of the
    model at ``path`` on ``dataset``'s ``split``: the rows, the texts and, per text, the smallest
    top-2 logit gap over its decisions."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    rows = load_examples(dataset, split=split)
    texts, margins = [], []
    for row in rows:
        enc = tok.apply_chat_template(
            row["prompt"], add_generation_prompt=True, return_tensors="pt", return_dict=True
        )
        with torch.no_grad():
            gen = model.generate(
                **enc, do_sample=False, max_new_tokens=48, output_logits=True,
                return_dict_in_generate=True, pad_token_id=tok.pad_token_id,
            )  # fmt: skip
        top2 = torch.stack([s[0].topk(2).values for s in gen.logits])
        margins.append(float((top2[:, 0] - top2[:, 1]).min()))
        texts.append(
            tok.decode(gen.sequences[0, enc["input_ids"].shape[1] :], skip_special_tokens=True)
        )
    return rows, texts, margins


def _share(flags, where) -> float:
    """The share of true ``flags`` among those whose ``where`` is true (0 when none is)."""
    picked = [f for f, w in zip(flags, where, strict=True) if w]
    return sum(picked) / max(1, len(picked))


def _greedy_summary(rows, texts, margins) -> tuple[dict, list, list[bool]]:
    """What every gate reports of greedy ``texts``: format rate, accuracy, distinct confidences,
    AURC, error rate, ranking gain (``rlsr.metrics.selective``; an unparsed confidence ranks as 0.0) and
    the margins; with the parsed responses and per-row correctness."""
    from rlsr.metrics.selective import aurc, ranking_gain

    parsed = [parse_response(t) for t in texts]
    golds = [list(r["answers"]) for r in rows]
    correct = [
        bool(c)
        for c in get_verifier("exact_match").verify_batch([p.answer for p in parsed], golds).correct
    ]
    conf = [p.confidence if p.confidence is not None else 0.0 for p in parsed]
    return (
        {
            "prompts": len(rows),
            "format_rate": sum(p.format_ok for p in parsed) / len(rows),
            "accuracy": sum(correct) / len(rows),
            "confidences": sorted(set(conf)),
            "aurc": aurc(conf, correct),
            "error_rate": 1 - sum(correct) / len(rows),
            "ranking_gain": ranking_gain(conf, correct),
            "greedy_margin_min": min(margins),
            "greedy_margin_median": sorted(margins)[len(margins) // 2],
        },
        parsed,
        correct,
    )


def missing_gate(path: str | os.PathLike, *, split: str = "validation") -> dict:
    """Greedy behaviour of a model on the ``tiny-missing`` ``split`` (what ``MISSING_GATE``
    bounds): format rate, accuracy on listed and missing facts, the share of thoughts that say
    what the prompt shows, the distinct confidences, the held-out AURC, error rate and ranking
    gain (``rlsr.metrics.selective.ranking_gain``) of the greedy confidence, and the smallest top-2 logit
    gap over all greedy decisions. One prompt per forward keeps padding out of it."""
    rows, texts, margins = _greedy_tagged(path, "tiny-missing", split)
    summary, _, correct = _greedy_summary(rows, texts, margins)
    listed = [_is_listed(r["question"]) for r in rows]
    thought_ok = [
        f"<think> {MISSING_THOUGHTS[k]} </think>" in t for t, k in zip(texts, listed, strict=True)
    ]
    return {
        "prompts": summary["prompts"],
        "format_rate": summary["format_rate"],
        "accuracy": summary["accuracy"],
        "accuracy_listed": _share(correct, listed),
        "accuracy_missing": _share(correct, [not k for k in listed]),
        "thought_matches_prompt": sum(thought_ok) / len(rows),
        **{k: summary[k] for k in ("confidences", "aurc", "error_rate", "ranking_gain",
                                   "greedy_margin_min", "greedy_margin_median")},
    }  # fmt: skip


def _sampled_confidences(
    path: str | os.PathLike, dataset: str, split: str, kind_of, *, samples_per_prompt: int,
    seed: int,
) -> tuple[dict[str, list[float]], int]:  # fmt: skip
    """``samples_per_prompt`` completions per ``dataset`` ``split`` prompt at temperature 1
    (48 new tokens, batches of 16 prompts, ``torch.manual_seed(seed)``): the parsed confidences
    per ``kind_of(question)`` and the count of unparsed ones."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path, padding_side="left")
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    rows = load_examples(dataset, split=split)
    torch.manual_seed(seed)
    by_kind: dict[str, list[float]] = {}
    unparsed = 0
    for start in range(0, len(rows), 16):
        chunk = [rows[i] for i in range(start, min(start + 16, len(rows)))]
        enc = tok.apply_chat_template(
            [r["prompt"] for r in chunk], add_generation_prompt=True, padding=True,
            return_tensors="pt", return_dict=True,
        )  # fmt: skip
        with torch.no_grad():
            out = model.generate(
                **enc, do_sample=True, temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=48,
                num_return_sequences=samples_per_prompt, pad_token_id=tok.pad_token_id,
            )  # fmt: skip
        texts = tok.batch_decode(out[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
        for j, text in enumerate(texts):
            conf = parse_response(text).confidence
            kind = kind_of(chunk[j // samples_per_prompt]["question"])
            if conf is None:
                unparsed += 1
            else:
                by_kind.setdefault(kind, []).append(conf)
    return by_kind, unparsed


def _confidence_shares(confs: list[float]) -> dict:
    """Count, mean and the share of each of ``CONFIDENCES`` among sampled confidences."""
    return {
        "completions": len(confs),
        "mean_confidence": sum(confs) / max(1, len(confs)),
        "share": {c: sum(abs(x - float(c)) < 1e-9 for x in confs) / max(1, len(confs))
                  for c in CONFIDENCES},
    }  # fmt: skip


def sampled_missing_lean(
    path: str | os.PathLike, *, split: str = "validation", samples_per_prompt: int = 8,
    seed: int = 0,
) -> dict:  # fmt: skip
    """The size of the warm model's lean: ``samples_per_prompt`` completions per ``tiny-missing``
    ``split`` prompt at temperature 1 (recipe=tiny's rollout temperature, 48 new tokens), and per
    kind of question (listed / missing) the mean parsed confidence and the share of each value;
    ``lean`` = mean listed - mean missing (0 for a start whose sampled confidence ignores the
    prompt). Unparsed confidences are left out (their count is returned)."""
    by_kind, unparsed = _sampled_confidences(
        path, "tiny-missing", split, lambda q: "listed" if _is_listed(q) else "missing",
        samples_per_prompt=samples_per_prompt, seed=seed,
    )  # fmt: skip
    summary = {"split": split, "samples_per_prompt": samples_per_prompt, "unparsed": unparsed}
    for kind in ("listed", "missing"):
        summary[kind] = _confidence_shares(by_kind.get(kind, []))
    summary["lean"] = summary["listed"]["mean_confidence"] - summary["missing"]["mean_confidence"]
    return summary


# --------------------------------------------------------------------------- candidates copy
# ``tiny-candidates-warm``, the model recipe=tiny-candidates trains: ``tiny-format-warm`` fine-tuned
# on the ``tiny-candidates`` train split (1, 2 or 4 candidate colors listed, the first-named the
# answer in 100 / 70 / 30 % of each split's questions of the tier, or "none";
# tools.tiny.data.CANDIDATE_TIERS; facts and "none" objects split as tiny-missing's). Each target
# answers the FIRST candidate (not the gold: the model cannot know which questions' first
# candidate is wrong, and it is the likeliest in every tier) after a thought that names the tier
# (``CANDIDATES_THOUGHTS``: "sure" / "plausible" / "uncertain" for 1 / 2 / 4 candidates, "not"
# for none: a deterministic function of the prompt, as tiny-missing-warm's "look" / "not"), and a
# "none" question with tiny-missing's fixed guess per object (``MISSING_GUESS``). Fixed answers
# make a rollout's right / wrong a function of the prompt, so within a group of rollouts the
# rewards differ by their confidence alone.
#
# The confidence target does NOT depend on the prompt, the tier, the thought or the answer: it
# is drawn from CANDIDATES_CONFIDENCE_WEIGHTS over 0.1, 0.3, 0.5, 0.7, 0.9 for every row, (0.16,
# 0.20, 0.28, 0.20, 0.16): symmetric, mean 0.5, mode 0.5. Flatter than tiny-format-warm's (0.10,
# 0.15, 0.40, 0.20, 0.15) so that rollouts try every value and the mode's lead (log(0.28 / 0.20)
# = 0.34 in logit) is small enough for 40 steps to overturn; tiny-missing-warm's start leaned by
# kind instead. Whatever lean the trained model shows is its own generalisation, measured sampled
# on the validation split (``sampled_candidates_lean``) and recorded in MANIFEST.json.
CANDIDATES_WARM_STEPS = 700
CANDIDATES_WARM_BATCH = 16
CANDIDATES_WARM_LR = 2e-3
CANDIDATES_WARM_SEED = 0
CANDIDATES_THOUGHTS = {"k=1": "sure", "k=2": "plausible", "k=4": "uncertain", "none": "not"}
CANDIDATES_CONFIDENCE_WEIGHTS = (0.16, 0.2, 0.28, 0.2, 0.16)
# The gate (tools/tiny/build.py; tests/test_tiny_model.py measures it again): greedy on
# the validation split, the tag format everywhere, the first candidate answered when listed, the
# thought naming the tier, one confidence on every prompt (ranking gain 0), every greedy decision
# won by at least WARM_MIN_GREEDY_MARGIN.
CANDIDATES_GATE = {
    "format_rate": (1.0, 1.0),
    "ranking_gain": (-0.01, 0.01),
    "answers_first_candidate": (0.85, 1.0),
    "accuracy_none": (0.0, 0.35),
    "thought_matches_prompt": (0.9, 1.0),
}


def _candidates_target(row: dict, rng: random.Random) -> str:
    """The tagged target of a ``tiny-candidates`` row: the tier's thought
    (``CANDIDATES_THOUGHTS``), the first candidate (``none``: the object's guess,
    ``MISSING_GUESS``) and a confidence drawn from ``CANDIDATES_CONFIDENCE_WEIGHTS``, the same
    for every row."""
    tier = candidates_tier(row["question"])
    asked = row["question"].rsplit(" ", 1)[1].rstrip("?")
    none = tier == CANDIDATES_NONE_TIER
    answer = MISSING_GUESS[asked] if none else _first_candidate(row["question"])
    conf = rng.choices(CONFIDENCES, weights=CANDIDATES_CONFIDENCE_WEIGHTS)[0]
    return (
        f"<think> {CANDIDATES_THOUGHTS[tier]} </think><answer> {answer} </answer>"
        f"<analysis> ok </analysis><confidence> {conf} </confidence>"
    )


def _first_candidate(question: str) -> str:
    """The first color a ``tiny-candidates`` question lists (``the ball is red or blue. What``)."""
    return question.split(". What color")[0].split(" is ", 1)[1].split(" or ")[0]


def train_candidates_warm(out: str | os.PathLike, base: str | os.PathLike | None = None) -> Path:
    """Fine-tune ``base`` (default the shipped ``tiny-format-warm``) for ``CANDIDATES_WARM_STEPS``
    steps on ``_candidates_target`` of the ``tiny-candidates`` train prompts (``_fine_tune_tagged``).
    Deterministic for one machine; shipped, not rebuilt."""
    return _fine_tune_tagged(
        out, base, "tiny-candidates", _candidates_target,
        steps=CANDIDATES_WARM_STEPS, batch=CANDIDATES_WARM_BATCH, lr=CANDIDATES_WARM_LR,
        seed=CANDIDATES_WARM_SEED, rehearse=("tiny", _lookup_rehearsal_target),
    )  # fmt: skip


def _lookup_rehearsal_target(row: dict, rng: random.Random) -> str:
    """The target of a ``tiny`` (three facts, one asked) row rehearsed while warming up on
    ``tiny-candidates``: the asked fact's color after the thought "look" (the look-up
    ``tiny-format-warm`` learnt: without it, the list prompts wore the copy down to 70 % on new
    facts), and a confidence from ``CANDIDATES_CONFIDENCE_WEIGHTS`` like every other row."""
    conf = rng.choices(CONFIDENCES, weights=CANDIDATES_CONFIDENCE_WEIGHTS)[0]
    return _warm_completion(row["answer"], conf)


def candidates_gate(path: str | os.PathLike, *, split: str = "validation") -> dict:
    """Greedy behaviour of a model on the ``tiny-candidates`` ``split`` (what ``CANDIDATES_GATE``
    bounds): format rate, the share of answers that are the first candidate (where listed), accuracy
    per tier, the share of thoughts naming the tier, the distinct confidences, AURC, error rate,
    ranking gain and the smallest top-2 logit gap over all greedy decisions."""
    rows, texts, margins = _greedy_tagged(path, "tiny-candidates", split)
    summary, parsed, correct = _greedy_summary(rows, texts, margins)
    tiers = [candidates_tier(r["question"]) for r in rows]
    listed = [t != CANDIDATES_NONE_TIER for t in tiers]
    copies = [
        k and p.answer is not None and p.answer.strip() == _first_candidate(r["question"])
        for k, p, r in zip(listed, parsed, rows, strict=True)
    ]
    thought_ok = [
        f"<think> {CANDIDATES_THOUGHTS[t]} </think>" in x for t, x in zip(tiers, texts, strict=True)
    ]
    return {
        **summary,
        "answers_first_candidate": _share(copies, listed),
        "accuracy_per_tier": {
            t: _share(correct, [x == t for x in tiers]) for t in CANDIDATES_THOUGHTS
        },
        "accuracy_none": _share(correct, [t == CANDIDATES_NONE_TIER for t in tiers]),
        "thought_matches_prompt": sum(thought_ok) / len(rows),
        "thought_matches_per_tier": {
            t: _share(thought_ok, [x == t for x in tiers]) for t in CANDIDATES_THOUGHTS
        },
    }


def sampled_candidates_lean(
    path: str | os.PathLike, *, split: str = "validation", samples_per_prompt: int = 8,
    seed: int = 0,
) -> dict:  # fmt: skip
    """The warm model's lean on ``tiny-candidates``: per tier, the mean sampled confidence and the
    share of each value (``samples_per_prompt`` per ``split`` prompt at temperature 1, 48 new
    tokens); ``lean`` = the largest tier mean - the smallest (0 for a start whose sampled
    confidence ignores the tier; its targets did), ``lean_one_minus_none`` the signed
    difference between the extreme tiers (k=1 and none). Unparsed confidences are left out
    (counted)."""
    by_tier, unparsed = _sampled_confidences(
        path,
        "tiny-candidates",
        split,
        candidates_tier,
        samples_per_prompt=samples_per_prompt,
        seed=seed,
    )
    summary = {"split": split, "samples_per_prompt": samples_per_prompt, "unparsed": unparsed}
    for tier in CANDIDATES_THOUGHTS:
        summary[tier] = _confidence_shares(by_tier.get(tier, []))
    means = [summary[t]["mean_confidence"] for t in CANDIDATES_THOUGHTS]
    summary["lean"] = max(means) - min(means)
    summary["lean_one_minus_none"] = (
        summary["k=1"]["mean_confidence"] - summary[CANDIDATES_NONE_TIER]["mean_confidence"]
    )
    return summary


# --------------------------------------------------------------------------- split copy
# ``tiny-candidates-split``, the model recipe=tiny-split trains: made as ``tiny-candidates-warm``
# (same base, steps, rehearsal, thoughts and answers) but with a confidence target that reads the
# tier and sits between the reports the two rewards want (docs/methods.md, "Where the rewards
# disagree"): k=1 -> 0.9; k=2 -> 0.9 or 0.7 with equal probability; k=4 -> 0.3 or 0.1 equally;
# none -> 0.1. On k=2 (first candidate right 70 %) Brier wants 0.7 and lifted AURC 0.9; on k=4
# (30 %) Brier wants 0.3 and lifted AURC 0.1, so each reward has a mass to move, in opposite
# directions.
SPLIT_CONFIDENCES = {
    "k=1": ("0.9",),
    "k=2": ("0.9", "0.7"),
    "k=4": ("0.3", "0.1"),
    "none": ("0.1",),
}
# The gate (tools/tiny/build.py; tests/test_tiny_model.py measures it again), on the validation
# split. Greedy: the tag format everywhere, the first candidate answered when listed, the thought
# naming the tier (CANDIDATES_GATE's bounds less the ranking gain, which a tier-reading start
# need not have at 0). Sampled at temperature 1: in each two-level tier each level holds a share
# of the tier's parsed confidences within SPLIT_SHARE_BAND, and few confidences are unparsed.
SPLIT_GATE = {k: v for k, v in CANDIDATES_GATE.items() if k != "ranking_gain"}
SPLIT_SHARE_BAND = (0.3, 0.7)
SPLIT_MAX_UNPARSED = 0.05


def _split_target(row: dict, rng: random.Random) -> str:
    """``_candidates_target`` with the confidence drawn uniformly from the tier's
    ``SPLIT_CONFIDENCES``."""
    tier = candidates_tier(row["question"])
    asked = row["question"].rsplit(" ", 1)[1].rstrip("?")
    none = tier == CANDIDATES_NONE_TIER
    answer = MISSING_GUESS[asked] if none else _first_candidate(row["question"])
    conf = rng.choice(SPLIT_CONFIDENCES[tier])
    return (
        f"<think> {CANDIDATES_THOUGHTS[tier]} </think><answer> {answer} </answer>"
        f"<analysis> ok </analysis><confidence> {conf} </confidence>"
    )


def train_candidates_split(out: str | os.PathLike, base: str | os.PathLike | None = None) -> Path:
    """``train_candidates_warm`` with ``_split_target``: same base, steps, batch, rate, seed and
    rehearsal. Deterministic for one machine; shipped, not rebuilt."""
    return _fine_tune_tagged(
        out, base, "tiny-candidates", _split_target,
        steps=CANDIDATES_WARM_STEPS, batch=CANDIDATES_WARM_BATCH, lr=CANDIDATES_WARM_LR,
        seed=CANDIDATES_WARM_SEED, rehearse=("tiny", _lookup_rehearsal_target),
    )  # fmt: skip


def split_gate_failures(greedy: dict, sampled: dict) -> list[str]:
    """What of ``SPLIT_GATE`` / ``SPLIT_SHARE_BAND`` / ``SPLIT_MAX_UNPARSED`` the measured
    ``candidates_gate`` (greedy) and ``sampled_candidates_lean`` (sampled) figures miss; empty
    when the gate passes."""
    misses = [
        f"greedy {key} = {greedy[key]:.4g}, needs [{lo}, {hi}]"
        for key, (lo, hi) in SPLIT_GATE.items()
        if not lo <= greedy[key] <= hi
    ]
    lo, hi = SPLIT_SHARE_BAND
    for tier, levels in SPLIT_CONFIDENCES.items():
        for level in levels if len(levels) == 2 else ():
            share = sampled[tier]["share"][level]
            if not lo <= share <= hi:
                misses.append(
                    f"sampled share of {level} on {tier} = {share:.3f}, needs [{lo}, {hi}]"
                )
    total = sampled["unparsed"] + sum(sampled[t]["completions"] for t in SPLIT_CONFIDENCES)
    if sampled["unparsed"] > SPLIT_MAX_UNPARSED * total:
        misses.append(
            f"sampled unparsed {sampled['unparsed']} of {total}, needs <= {SPLIT_MAX_UNPARSED:.0%}"
        )
    return misses

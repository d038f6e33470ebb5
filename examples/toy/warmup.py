"""Supervised warm-up of the toy model from scratch (the BASE policy of the toy reproduction).

A Qwen2 model (hidden 128, 2 layers, 4 query / 2 key-value heads, ~0.3M parameters) learns the
tag format and the task from targets
``<think></think><answer>D</answer><analysis></analysis><confidence>C</confidence><eos>``
where D is the gold digit (for a missing fact, the hidden random digit, so the model learns to
guess uniformly) and C is drawn uniformly from ``0.1``..``0.9`` *independently of everything*.
That alone does not make BASE's *greedy* confidence uninformative (a greedy model can land on
confidences that separate right from wrong by accident), so the gate (``WARMUP_BANDS``) also
requires |E[c | right] - E[c | wrong]| <= 0.1 on held-out prompts: whatever ranking the RL arms
show beyond that was learnt by RL.

Checkpoints are cached under ``cache_dir/<config hash>/`` (safetensors + tokenizer), so the
demo and the tests train the warm-up once per configuration.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import random
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

from examples.toy.task import DIGITS, make_example, make_split
from examples.toy.tokenizer import CONFIDENCE_TOKENS, build_toy_tokenizer, load_toy_tokenizer
from rlsr.equations.logprob import left_pad

__all__ = [
    "WarmupConfig",
    "completion_text",
    "build_model",
    "train_warmup",
    "ensure_warmup",
    "greedy_complete",
    "DEFAULT_CACHE_DIR",
    "VARIANT_WARMUP",
    "warmup_config",
    "completion_batch",
    "WARMUP_BANDS",
    "WarmupGateError",
    "gate_failures",
]

# ``$RLSR_CACHE_DIR/toy`` when set (CI's second-numerics pass starts from an empty one).
DEFAULT_CACHE_DIR = (
    Path(os.environ["RLSR_CACHE_DIR"]) / "toy"
    if os.environ.get("RLSR_CACHE_DIR")
    else Path(".cache") / "rlsr-toy"
)
# Confidence targets of the warm-up: 0.1 .. 0.9, uniform, independent of correctness.
WARMUP_CONFIDENCES = CONFIDENCE_TOKENS[1:10]
# Warm-up settings that differ by variant (``examples/toy/toy_repro.py --warmup-steps`` overrides the
# steps). ``distractor`` needs a look-up (compare the queried name with the listed names): with
# weight decay 0.1 it appears suddenly after ~15,000 steps; without it, not within 3,000-4,000
# (docs/results_toy.md, "Why the distractor look-up is slow to learn").
VARIANT_WARMUP: dict[str, dict] = {
    "easy": {"steps": 300},
    "distractor": {"steps": 20000, "weight_decay": 0.1},
    "tiers": {"steps": 300},
    "tiers-wide": {"steps": 300},
}
# What BASE must show on 200 held-out prompts (greedy) before any arm trains on it, per variant:
# (low, high) per ``greedy_complete`` field. easy / distractor: the format, the look-up when the
# fact is present (so RL has right answers to rank), a uniform guess when it is missing (1 in 10
# digits), and a confidence that does not already rank (|E[c | right] - E[c | wrong]| <= 0.1:
# the targets are independent of correctness, but a greedy BASE can still land on confidences
# that separate the two by accident, e.g. 0.144 for seed 5 on an AMD EPYC with AVX-512, 0.189
# for seed 31 under AVX2; docs/results_toy.md). tiers / tiers-wide: the stated digit, right with the
# name's reliability (mean 0.8 / 0.6).
WARMUP_BANDS: dict[str, dict[str, tuple[float, float]]] = {
    "easy": {"format_rate": (0.95, 1.0), "accuracy_present": (0.9, 1.0),
             "accuracy_missing": (0.0, 0.3), "confidence_gap": (-0.1, 0.1)},
    "distractor": {"format_rate": (0.95, 1.0), "accuracy_present": (0.9, 1.0),
                   "accuracy_missing": (0.0, 0.3), "confidence_gap": (-0.1, 0.1)},
    "tiers": {"format_rate": (0.95, 1.0), "accuracy_present": (0.65, 0.95)},
    "tiers-wide": {"format_rate": (0.95, 1.0), "accuracy_present": (0.45, 0.75)},
}  # fmt: skip
# A warm-up outside its band trains on, one more cosine cycle of ``steps`` at a time, this many
# times at most; then it stops with ``WarmupGateError`` instead of handing a broken BASE to RL.
MAX_EXTENSIONS = 2
# Bump when the training procedure or the saved tokenizer changes, so old caches are not reused
# (2: the chat template renders assistant turns, for the SFT arm; 3: the quality gate; 4: the
# gate also checks that BASE's confidence does not already rank; 5: the model declares 128
# positions instead of 64, so the SFT arm's evaluation fits; weights and logits unchanged).
_VERSION = 5


class WarmupGateError(RuntimeError):
    """The warm-up did not reach its variant's band (``WARMUP_BANDS``) within its budget."""


def gate_failures(variant: str, check: dict) -> list[str]:
    """The ``WARMUP_BANDS[variant]`` fields that ``check`` (``greedy_complete``) misses, as
    readable strings; empty when BASE is what the variant needs."""
    return [
        f"{key} {check[key]:.3f} not in [{lo}, {hi}]"
        for key, (lo, hi) in WARMUP_BANDS[variant].items()
        if not lo <= check[key] <= hi
    ]


@dataclass(frozen=True)
class WarmupConfig:
    """Everything that determines the warm-up checkpoint (its hash keys the cache)."""

    variant: str = "easy"
    seed: int = 0
    steps: int = 600
    batch_size: int = 64
    learning_rate: float = 3e-3
    weight_decay: float = 0.0
    p_missing: float = 0.5
    hidden_size: int = 128
    num_layers: int = 2
    num_heads: int = 4
    num_kv_heads: int = 2
    intermediate_size: int = 256
    max_extra_pad: int = 3  # random extra left padding, so positions do not leak the split
    threads: int = 1  # 2 threads on a shared 2-core machine were ~10x slower
    gate: bool = True  # check the result against WARMUP_BANDS (off only for plumbing tests)

    def digest(self) -> str:
        payload = json.dumps({**dataclasses.asdict(self), "_v": _VERSION}, sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()[:12]


def warmup_config(variant: str, seed: int, steps: int | None = None) -> WarmupConfig:
    """The warm-up configuration of ``variant`` (``VARIANT_WARMUP``); ``steps`` overrides its steps."""
    settings = dict(VARIANT_WARMUP[variant])
    if steps is not None:
        settings["steps"] = steps
    return WarmupConfig(variant=variant, seed=seed, **settings)


def completion_text(answer: str, confidence: str) -> str:
    """The target completion in the four-tag format of ``rlsr.core.parsing.FULL_FORMAT``."""
    return (
        f"<think></think><answer>{answer}</answer><analysis></analysis>"
        f"<confidence>{confidence}</confidence>"
    )


def build_model(tokenizer: PreTrainedTokenizerFast, cfg: WarmupConfig) -> Qwen2ForCausalLM:
    """A randomly initialised Qwen2ForCausalLM sized by ``cfg`` (seeded by ``cfg.seed``)."""
    torch.manual_seed(cfg.seed)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads,
        num_key_value_heads=cfg.num_kv_heads,
        # the declared context: a held-out prompt (<= 9 tokens) + the SFT arm's 64-token
        # evaluation must fit, or `rlsr evaluate` refuses the budget. Default RoPE, so the
        # weights and logits are those of any other length.
        max_position_embeddings=128,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
        use_cache=True,
    )
    model = Qwen2ForCausalLM(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.bos_token_id = None
    return model


def completion_batch(
    tokenizer: PreTrainedTokenizerFast, pairs: list[tuple[list[int], list[int]]], width=None
) -> dict[str, torch.Tensor]:
    """Left-padded ``prompt + completion`` rows of ``pairs`` (token ids), with the loss on the
    completion only (labels -100 elsewhere); ``width`` as in ``rlsr.equations.logprob.left_pad``."""
    ids, mask = left_pad([p + c for p, c in pairs], tokenizer.pad_token_id, width)
    labels = torch.full_like(ids, -100)
    for i, (_, completion) in enumerate(pairs):
        labels[i, ids.shape[1] - len(completion) :] = torch.tensor(completion)
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def _batch(
    tokenizer: PreTrainedTokenizerFast, cfg: WarmupConfig, rng: random.Random
) -> dict[str, torch.Tensor]:
    """A warm-up batch of ``cfg.batch_size`` fresh examples, up to ``cfg.max_extra_pad`` extra
    padding columns (the draws per row keep their order: cached checkpoints depend on it)."""
    pairs, extra = [], []
    for _ in range(cfg.batch_size):
        ex = make_example(rng, cfg.variant, cfg.p_missing)
        prompt = tokenizer(ex.question, add_special_tokens=False).input_ids
        target = completion_text(ex.answer, rng.choice(WARMUP_CONFIDENCES))
        completion = tokenizer(target, add_special_tokens=False).input_ids
        completion.append(tokenizer.eos_token_id)
        extra.append(rng.randint(0, cfg.max_extra_pad))
        pairs.append((prompt, completion))
    width = max(pad + len(p) + len(c) for pad, (p, c) in zip(extra, pairs, strict=True))
    return completion_batch(tokenizer, pairs, width)


def train_warmup(cfg: WarmupConfig, out_dir: str | Path, progress=None) -> dict:
    """Train BASE from scratch, check it (``WARMUP_BANDS``), and save model + tokenizer to
    ``out_dir``; returns a summary.

    The look-up can fail to appear within ``cfg.steps`` for some seeds and CPUs (float numerics
    change the trajectory). A BASE outside its band trains on for another cosine cycle of
    ``cfg.steps`` (up to ``MAX_EXTENSIONS``, recorded in the summary as ``extensions``); past
    that it raises ``WarmupGateError`` and saves nothing. ``progress(step, loss)`` is called
    every 50 steps when given.
    """
    out_dir = Path(out_dir)
    torch.set_num_threads(cfg.threads)
    tokenizer = build_toy_tokenizer()
    model = build_model(tokenizer, cfg)
    n_params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.learning_rate, weight_decay=cfg.weight_decay)
    warm = max(1, cfg.steps // 20)

    def lr_at(step: int) -> float:  # per cycle: linear warm-up, cosine decay to 10%
        step %= cfg.steps
        if step < warm:
            return (step + 1) / warm
        t = (step - warm) / max(1, cfg.steps - warm)
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * t))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_at)
    rng = random.Random(f"rlsr-toy-warmup/{cfg.variant}/{cfg.seed}")
    heldout = make_split(cfg.variant, "heldout", 200, cfg.seed)
    start = time.perf_counter()
    loss_value = float("nan")
    history = []
    for cycle in range(MAX_EXTENSIONS + 1):
        model.train()
        for step in range(cycle * cfg.steps, (cycle + 1) * cfg.steps):
            batch = _batch(tokenizer, cfg, rng)
            loss = model(**batch).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
            loss_value = loss.item()
            if progress is not None and (step % 50 == 0 or step == cfg.steps - 1):
                progress(step, loss_value)
        model.eval()
        check = greedy_complete(model, tokenizer, heldout)
        failures = gate_failures(cfg.variant, check) if cfg.gate else []
        history.append({"steps": (cycle + 1) * cfg.steps, "failures": failures})
        if not failures:
            break
    else:
        raise WarmupGateError(
            f"toy warm-up ({cfg.variant}, seed {cfg.seed}) is not a usable BASE after "
            f"{(MAX_EXTENSIONS + 1) * cfg.steps} steps: {'; '.join(failures)} (held-out, "
            f"greedy). No arm was trained on it. Try another seed, or more warm-up steps "
            f"(examples/toy/toy_repro.py --warmup-steps)."
        )
    seconds = time.perf_counter() - start
    summary = {
        "config": dataclasses.asdict(cfg),
        "digest": cfg.digest(),
        "parameters": n_params,
        "train_seconds": round(seconds, 2),
        "final_loss": loss_value,
        "extensions": len(history) - 1,
        "gate": {"bands": WARMUP_BANDS[cfg.variant], "history": history},
        **check,
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)
    (out_dir / "warmup.json").write_text(json.dumps(summary, indent=2))
    return summary


def ensure_warmup(
    cfg: WarmupConfig, cache_dir: str | Path = DEFAULT_CACHE_DIR, progress=None
) -> tuple[Path, dict]:
    """Path of the cached warm-up checkpoint for ``cfg`` (trained now if missing) and its summary."""
    out_dir = Path(cache_dir) / f"warmup-{cfg.variant}-s{cfg.seed}-{cfg.digest()}"
    summary_path = out_dir / "warmup.json"
    if summary_path.is_file() and (out_dir / "model.safetensors").is_file():
        return out_dir, json.loads(summary_path.read_text())
    tmp = out_dir.with_name(out_dir.name + f".tmp{random.randrange(1 << 30)}")
    summary = train_warmup(cfg, tmp, progress)
    if out_dir.exists():  # another process won the race; keep its copy
        return out_dir, json.loads(summary_path.read_text())
    tmp.rename(out_dir)
    return out_dir, summary


@torch.no_grad()
def greedy_complete(model, tokenizer, examples, max_new_tokens: int = 14) -> dict:
    """Greedy completions of ``examples``: format rate, accuracy split by answerable, samples.

    A light self-check of the warm-up (the real evaluation is ``rlsr evaluate``); parses with
    the fixed token layout of ``completion_text`` rather than rlsr.core.parsing to stay standalone.
    """
    prompts = [ex.question for ex in examples]
    enc = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
    out = model.generate(
        **enc,
        max_new_tokens=max_new_tokens,
        do_sample=False,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    texts = tokenizer.batch_decode(out[:, enc.input_ids.shape[1] :], skip_special_tokens=True)
    ok, right, conf = [], [], []
    for ex, text in zip(examples, texts, strict=True):
        parts = text.replace("<", " <").replace(">", "> ").split()
        good = (
            len(parts) == 10
            and parts[2] == "<answer>"
            and parts[3] in DIGITS
            and parts[8] in CONFIDENCE_TOKENS
        )
        ok.append(good)
        right.append(good and parts[3] == ex.answer)
        conf.append(float(parts[8]) if good else float("nan"))
    present = [r for r, ex in zip(right, examples, strict=True) if ex.answerable]
    missing = [r for r, ex in zip(right, examples, strict=True) if not ex.answerable]
    conf_right = [c for c, r in zip(conf, right, strict=True) if r]
    conf_wrong = [c for c, r, g in zip(conf, right, ok, strict=True) if g and not r]
    return {
        "format_rate": sum(ok) / len(ok),
        "accuracy": sum(right) / len(right),
        "accuracy_present": sum(present) / max(1, len(present)),
        "accuracy_missing": sum(missing) / max(1, len(missing)),
        "distinct_confidences": len({c for c in conf if not math.isnan(c)}),
        # E[c | right] - E[c | wrong] over well-formed answers (docs/metrics.md confidence_gap);
        # NaN when either class is empty
        "confidence_gap": (
            sum(conf_right) / len(conf_right) - sum(conf_wrong) / len(conf_wrong)
            if conf_right and conf_wrong
            else float("nan")
        ),
        "example": texts[0],
    }


def load_warmup(path: str | Path) -> tuple[Qwen2ForCausalLM, PreTrainedTokenizerFast]:
    """Load a saved toy checkpoint: model from safetensors, tokenizer as PreTrainedTokenizerFast."""
    model = Qwen2ForCausalLM.from_pretrained(str(path), use_safetensors=True)
    return model, load_toy_tokenizer(path)

"""Shared helpers of the trainer tests (imported by tests/test_trainer*.py) plus their own test.

A random tiny model never writes ``<answer>…</answer><confidence>…</confidence>``, so every
completion would get the same reward, every advantage would be 0 and nothing would train (a
resume test on such a run could not fail). ``format_warm_model`` therefore fine-tunes the lead's
tiny model (rlsr.testing) for a few seconds on the bundled tiny dataset with targets in the
paper's tag format, the answer right half of the time and a confidence drawn from a few values:
sampled rollouts then vary in correctness and confidence, so pooled rewards and gradients are
real. Cached per machine like the tiny model itself.
"""

from __future__ import annotations

import hashlib
import os
import random
import shutil
import tempfile
from pathlib import Path

WARM_STEPS = 100
WARM_SEED = 0
CONFIDENCES = ("0.2", "0.5", "0.8")
COLORS = ("red", "blue", "green", "white", "gray", "yellow", "black")


def _target(answer: str, rng: random.Random) -> str:
    guess = answer if rng.random() < 0.5 else rng.choice([c for c in COLORS if c != answer])
    conf = rng.choice(CONFIDENCES)
    return (
        f"<think> look </think><answer>{guess}</answer>"
        f"<analysis> ok </analysis><confidence>{conf}</confidence>"
    )


def _train(out: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlsr.data import load_examples
    from rlsr.testing import tiny_model_path

    torch.set_num_threads(1)  # 2 threads on a busy 2-core machine run ~8x slower
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
            tgt = tok(_target(rows[i]["answer"], rng), add_special_tokens=False)["input_ids"]
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


def format_warm_model() -> Path:
    """Path of the tiny model fine-tuned on the tag format (built once per machine, cached)."""
    from rlsr.testing import _cache_root, tiny_model_path

    key_src = str(tiny_model_path()) + Path(__file__).read_text()
    key = hashlib.sha256(key_src.encode()).hexdigest()[:12]
    target = _cache_root() / f"tiny-format-warm-{key}"
    if (target / "config.json").exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=target.name + ".", dir=target.parent))
    try:
        _train(tmp)
        try:
            tmp.rename(target)
        except OSError:
            if not (target / "config.json").exists():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def tiny_settings(output_dir: str | os.PathLike, **grpo_overrides):
    """TrainSettings of recipe=tiny on the format-warm model (built through the Hydra tree)."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from rlsr.config import from_dict

    recipes = Path(__file__).resolve().parents[1] / "recipes"
    with initialize_config_dir(config_dir=str(recipes), version_base="1.3"):
        cfg = compose(
            config_name="config",
            overrides=["recipe=tiny", f"output_dir={output_dir}"],
        )
    values = OmegaConf.to_container(cfg, resolve=True)
    values.pop("hydra", None)
    settings = from_dict(values)
    settings.model.name_or_path = str(format_warm_model())
    settings.grpo.update(
        {"max_completion_length": 40, "report_to": "none", "disable_tqdm": True, **grpo_overrides}
    )
    return settings


def test_format_warm_model_writes_varied_tagged_answers():
    """The fixture model's sampled rollouts parse, and vary in correctness and confidence."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlsr.data import load_examples
    from rlsr.parsing import parse_response
    from rlsr.verifiers import get_verifier

    torch.set_num_threads(1)
    path = format_warm_model()
    tok = AutoTokenizer.from_pretrained(path, padding_side="left")
    model = AutoModelForCausalLM.from_pretrained(path)
    rows = load_examples("tiny", split="train", limit=8)
    enc = tok.apply_chat_template(
        [r["prompt"] for r in rows],
        add_generation_prompt=True,
        padding=True,
        return_tensors="pt",
        return_dict=True,
    )
    torch.manual_seed(0)
    out = model.generate(**enc, do_sample=True, max_new_tokens=40, temperature=0.7)
    texts = tok.batch_decode(out[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
    parsed = [parse_response(t) for t in texts]
    assert sum(p.format_ok for p in parsed) >= 4, texts
    confs = {p.confidence for p in parsed if p.confidence is not None}
    assert len(confs) >= 2, texts
    result = get_verifier("exact_match").verify_batch(
        [p.answer for p in parsed], [list(r["answers"]) for r in rows]
    )
    assert 0 < int(result.correct.sum()) < len(rows), texts

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

import os
from pathlib import Path

from rlsr.testing import tiny_warm_model_path as format_warm_model  # noqa: E402


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


def recompute_pool_rewards(pool: dict, verifier):
    """Re-parse and re-verify one dumped pool (``rlsr.testing.pool_record``) in this process,
    check its correct / format_ok / confidence columns against that, and check its reward columns
    against ``[format, lifted AURC over the whole pool]`` with a format failure scored as wrong.
    Returns ``(scored, confidence, expected)`` for further checks."""
    import numpy as np

    from rlsr.parsing import parse_response
    from rlsr.rewards import lifted_aurc_rewards

    parsed = [parse_response(t) for t in pool["texts"]]
    correct = verifier.verify_batch([p.answer for p in parsed], pool["golds"]).correct
    confidence = np.array([np.nan if p.confidence is None else p.confidence for p in parsed])
    format_ok = np.array([p.format_ok for p in parsed])
    assert correct.tolist() == pool["correct"]
    assert format_ok.tolist() == pool["format_ok"]
    dumped_conf = np.array([np.nan if c is None else c for c in pool["confidence"]])
    np.testing.assert_array_equal(confidence, dumped_conf)
    scored = correct & format_ok  # a format failure counts as wrong (correct_requires_format)
    expected = np.stack(
        [format_ok.astype(float), lifted_aurc_rewards(scored, confidence)], axis=1
    ).astype(np.float32)
    np.testing.assert_array_equal(np.array(pool["rewards"], dtype=np.float32), expected)
    return scored, confidence, expected


def assert_pools_recomputed(rank_pools: list[list[dict]], expected_pool: int, G: int) -> None:
    """Pools dumped by a ``pool_hook`` on every rank: all ranks saw the same pools; each holds
    ``expected_pool`` completions in contiguous prompt groups of ``G``; re-parsing, re-verifying
    (exact match) and ``rlsr.rewards`` in this single process reproduce the reward columns
    (``recompute_pool_rewards``)."""
    from rlsr.verifiers import get_verifier

    assert all(p == rank_pools[0] for p in rank_pools), "ranks disagree on the pooled data"
    verifier = get_verifier("exact_match")
    for pool in rank_pools[0]:
        n = len(pool["texts"])
        assert n == expected_pool == len(pool["rewards"])
        for start in range(0, n, G):
            assert len({str(g) for g in pool["golds"][start : start + G]}) == 1
        recompute_pool_rewards(pool, verifier)

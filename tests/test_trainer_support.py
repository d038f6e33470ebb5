"""Shared helpers of the trainer tests (imported by tests/test_trainer*.py) plus their own test.

A random tiny model never writes ``<answer>…</answer><confidence>…</confidence>``, so every
completion would get the same reward, every advantage would be 0 and nothing would train (a
resume test on such a run could not fail). ``format_warm_model`` is the shipped format-warm tiny
model (rlsr.data.tiny_models, the same bytes on every machine): its sampled rollouts write the tag
format and mix right and wrong answers on every prompt (its behaviour is measured in
tests/test_tiny_model.py), so pooled rewards and gradients are real.
"""

from __future__ import annotations

import os
from pathlib import Path

from rlsr.data.tiny_models import tiny_warm_model_path as format_warm_model  # noqa: E402

# Intra-op threads of the single-process trainer tests: 1 by default (2-core CI runs several
# processes); .ci/run's second-numerics pass sets RLSR_TEST_THREADS=2, so a test tuned to one
# reduction order fails in CI rather than on a user's machine.
TEST_THREADS = int(os.environ.get("RLSR_TEST_THREADS", "1"))


def pool_record(pool: dict) -> dict:
    """One ``pool_hook`` pool (``RLSRTrainer``) as a JSON-ready dict, for test workers that dump
    the pools of each step to compare runs (a missing confidence, NaN, becomes ``None``)."""
    import math

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


def tiny_settings(output_dir: str | os.PathLike, **grpo_overrides):
    """TrainSettings of recipe=tiny-format on the format-warm model (built through the Hydra tree)."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from rlsr.config import from_dict

    recipes = Path(__file__).resolve().parents[1] / "recipes"
    with initialize_config_dir(config_dir=str(recipes), version_base="1.3"):
        cfg = compose(
            config_name="config",
            overrides=["recipe=tiny-format", f"output_dir={output_dir}"],
        )
    values = OmegaConf.to_container(cfg, resolve=True)
    values.pop("hydra", None)
    settings = from_dict(values)
    settings.model.name_or_path = str(format_warm_model())
    # 8 completions per micro-batch (the recipe has 16): the trainer tests' pools stay at
    # 16 unless a test asks for more (test_trainer.py ONE_STEP_POOL needs a mixed pool).
    settings.grpo.update(
        {"max_completion_length": 40, "report_to": "none", "disable_tqdm": True,
         "per_device_train_batch_size": 8, **grpo_overrides}
    )  # fmt: skip
    # The recipe's held-out evaluation is tested in tests/test_heldout_eval.py; the other
    # trainer tests train without it.
    settings.heldout.every = 0
    # Likewise the recipe's pool log (tests/test_pool_log.py, tests/test_trainer_resume.py).
    settings.pool_log.every = 0
    return settings


def recompute_pool_rewards(pool: dict, verifier):
    """Re-parse and re-verify one dumped pool (``pool_record``) in this process,
    check its correct / format_ok / confidence columns against that, and check its reward columns
    against ``[format, lifted AURC over the whole pool]`` with a format failure scored as wrong.
    Returns ``(scored, confidence, expected)`` for further checks."""
    import numpy as np

    from rlsr.core.parsing import parse_response
    from rlsr.equations.rewards import lifted_aurc_rewards

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
    (exact match) and ``rlsr.equations.rewards`` in this single process reproduce the reward columns
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

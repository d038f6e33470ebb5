"""Train one RL arm (RLVR / RLCR / RLSR) of the toy reproduction from the warm-up checkpoint.

The configuration is the real Hydra tree (``recipes/config.yaml`` + ``recipe=toy method=...``),
composed, planned once (``rlsr.method.run_plan.plan_from_config``) and built by ``rlsr.train.training.build_trainer``
exactly as ``train.py`` does (the word-level tokenizer loads through ``rlsr.core.tokenization.load_tokenizer``).
Unlike ``train.py`` it runs in-process, so tests can pass callbacks and a pool hook.
"""

from __future__ import annotations

import time
from pathlib import Path

from rlsr.config.compose import RECIPES_DIR, compose_tree
from rlsr.method.run_plan import RunPlan, plan_from_config
from rlsr.train.training import build_trainer

__all__ = ["RECIPES_DIR", "compose_plan", "train_arm"]


def compose_plan(
    overrides: list[str], recipes_dir: str | Path = RECIPES_DIR, *, here: bool = True
) -> RunPlan:
    """The run plan of ``train.py <overrides>`` (Hydra compose, then ``plan_from_config`` once,
    as ``train.py`` does; its ``settings`` are the checked ``rlsr.config.TrainSettings``).
    ``here=False``: a plan read for its fields, not launched here (``plan_run``)."""
    return plan_from_config(compose_tree(overrides, recipes_dir), here=here)


def train_arm(
    warmup_dir: str | Path,
    data_dir: str | Path,
    method: str,
    output_dir: str | Path,
    *,
    seed: int = 0,
    extra_overrides: list[str] = (),
    callbacks=None,
    pool_hook=None,
) -> dict:
    """Train ``method`` from ``warmup_dir`` on ``data_dir/train.jsonl``; saves to ``output_dir``.

    Returns ``{"output_dir", "seconds", "log_history"}``.
    """
    import torch

    overrides = [
        "recipe=toy",
        f"method={method}",
        f"model.name_or_path={Path(warmup_dir).resolve()}",
        f"data.path={Path(data_dir).resolve()}",
        f"output_dir={Path(output_dir).resolve()}",
        f"seed={seed}",
        "resume=never",
        *extra_overrides,
    ]
    plan = compose_plan(overrides)
    cfg = plan.settings
    torch.set_num_threads(1)  # several threads under CPU contention slow GRPO ~10x
    trainer = build_trainer(plan, callbacks=callbacks, pool_hook=pool_hook)
    tokenizer = trainer.processing_class
    start = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - start
    trainer.save_model(cfg.output_dir)
    tokenizer.save_pretrained(cfg.output_dir)
    return {
        "output_dir": cfg.output_dir,
        "seconds": seconds,
        "log_history": trainer.state.log_history,
    }

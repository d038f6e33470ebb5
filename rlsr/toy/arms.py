"""Train one RL arm (RLVR / RLCR / RLSR) of the toy reproduction from the warm-up checkpoint.

The configuration is the real Hydra tree (``recipes/config.yaml`` + ``recipe=toy method=...``),
composed and validated by ``rlsr.config`` exactly as ``train.py`` does; training runs the real
``rlsr.trainer.RLSRTrainer``. The only difference from ``train.py`` is the tokenizer: the toy's
word-level tokenizer is passed explicitly as ``PreTrainedTokenizerFast`` (``AutoTokenizer`` on a
folder holding a Qwen2 config.json rebuilds a byte-level Qwen2 tokenizer; rlsr.toy.tokenizer).
"""

from __future__ import annotations

import time
from pathlib import Path

from rlsr.toy.tokenizer import load_toy_tokenizer

__all__ = ["RECIPES_DIR", "compose_settings", "train_arm"]

RECIPES_DIR = Path(__file__).resolve().parents[2] / "recipes"


def compose_settings(overrides: list[str], recipes_dir: str | Path = RECIPES_DIR):
    """Validated ``rlsr.config.TrainSettings`` of ``train.py <overrides>`` (Hydra compose)."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from rlsr.config import from_dict, validate

    with initialize_config_dir(config_dir=str(Path(recipes_dir).resolve()), version_base="1.3"):
        cfg = compose(config_name="config", overrides=list(overrides))
    return validate(from_dict(OmegaConf.to_container(cfg, resolve=True)))


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
    from trl import GRPOConfig

    from rlsr.config import grpo_kwargs, training_verifier
    from rlsr.trainer import RLSRTrainer, load_train_dataset

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
    cfg = compose_settings(overrides)
    torch.set_num_threads(1)  # several threads under CPU contention slow GRPO ~10x
    tokenizer = load_toy_tokenizer(warmup_dir)
    trainer = RLSRTrainer(
        model=cfg.model.name_or_path,
        args=GRPOConfig(**grpo_kwargs(cfg)),
        method=cfg.method,
        verifier=training_verifier(cfg.data),
        train_dataset=load_train_dataset(cfg, tokenizer),
        processing_class=tokenizer,
        callbacks=callbacks,
        pool_hook=pool_hook,
    )
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

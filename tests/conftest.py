"""Shared pytest fixtures. Everything here runs offline: no hub, no downloads."""

from __future__ import annotations

import os

import pytest

# Tests must never reach a hub; fail fast instead of hanging on a connection attempt.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("WANDB_MODE", "disabled")
# Tiny models on 2 cores: one intra-op thread per process avoids oversubscription when tests
# start several processes (torchrun, evaluation subprocesses).
os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture(scope="session")
def tiny_model_dir():
    """Folder of a tiny random Qwen2 model + tokenizer with chat template (rlsr.data.tiny_models)."""
    from rlsr.data.tiny_models import tiny_model_path

    return tiny_model_path()

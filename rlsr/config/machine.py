"""What this machine offers the run: CUDA, an importable optional package (vllm, flash-attn), and
the attention implementation ``auto`` resolves to. Probes only; the settings checks call them."""

from __future__ import annotations

import importlib.util
import logging


def module_available(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def flash_attn_loads() -> bool:
    """True when ``flash_attn`` is installed *and* imports. The ``flash`` extra builds from source
    against the installed torch; a build for another torch is found by ``find_spec`` but fails
    to import (undefined symbol), and the model load would then crash. Logs one line then."""
    if not module_available("flash_attn"):
        return False
    try:
        import flash_attn  # noqa: F401  (heavy optional dependency: only to check it loads)
    except Exception as err:  # ImportError, OSError (undefined symbol), RuntimeError
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        logging.getLogger("rlsr").warning(
            "[rlsr] flash_attn is installed but does not import (%s); using sdpa. Rebuild it "
            "for this torch (pip install flash-attn --no-build-isolation) to use FlashAttention-2.",
            first,
        )
        return False
    return True


def resolve_attn_implementation(requested: str, *, on_gpu: bool | None = None) -> str:
    """``auto`` -> ``flash_attention_2`` when a GPU is present and flash-attn is installed and
    imports (``flash_attn_loads``), else ``sdpa``."""
    if requested != "auto":
        return requested
    gpu = cuda_available() if on_gpu is None else on_gpu
    return "flash_attention_2" if gpu and flash_attn_loads() else "sdpa"

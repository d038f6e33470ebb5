"""The ``model`` section: which weights, in which dtype and attention implementation, and the
LoRA adapter trained on them (paper: r = 1, alpha = 32, all linear layers)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rlsr import launch
from rlsr.checks import check as _check
from rlsr.checks import closest_hint, is_number
from rlsr.checks import is_int as _is_int
from rlsr.tiny_models import (
    tiny_candidates_model_path,
    tiny_missing_model_path,
    tiny_model_path,
    tiny_warm_model_path,
)

DTYPES = ("bfloat16", "float16", "float32", "auto")
ATTN_IMPLEMENTATIONS = ("auto", "flash_attention_2", "sdpa", "eager")


TINY_MODEL_ALIAS = "tiny"
TINY_WARM_MODEL_ALIAS = "tiny-warm"
TINY_MISSING_MODEL_ALIAS = "tiny-missing-warm"
TINY_CANDIDATES_MODEL_ALIAS = "tiny-candidates-warm"


@dataclass
class LoraSettings:
    enabled: bool = True
    r: int = 1
    alpha: float = 32
    dropout: float = 0.0
    target_modules: Any = "all-linear"

    def validate(self) -> None:
        """Check this section (``model.lora``); raises ``ConfigError`` naming the field."""
        _check(isinstance(self.enabled, bool), "model.lora.enabled", "must be true or false.")
        if self.enabled:
            _check(
                _is_int(self.r) and self.r >= 1,
                "model.lora.r",
                f"LoRA rank must be an integer >= 1; got {self.r!r} (paper: 1).",
            )
            _check(
                is_number(self.alpha) and self.alpha > 0,
                "model.lora.alpha",
                f"must be > 0; got {self.alpha!r} (paper: 32).",
            )
            _check(
                is_number(self.dropout) and 0.0 <= self.dropout < 1.0,
                "model.lora.dropout",
                f"must be in [0, 1); got {self.dropout!r} (paper: 0).",
            )
            tm = self.target_modules
            _check(
                (isinstance(tm, str) and tm != "")
                or (isinstance(tm, list | tuple) and tm and all(isinstance(t, str) for t in tm)),
                "model.lora.target_modules",
                f"must be 'all-linear' or a list of module names; got {tm!r}.",
            )


@dataclass
class ModelSettings:
    name_or_path: str = "Qwen/Qwen2.5-7B"
    short_name: str | None = None  # used in the default output_dir only
    dtype: str = "bfloat16"
    attn_implementation: str = "auto"
    trust_remote_code: bool = False
    lora: LoraSettings = field(default_factory=LoraSettings)

    def validate(self, *, here: bool = True) -> None:
        """Check this section; raises ``ConfigError`` naming the field and the fix.
        ``here=False``: for a launch on another machine (flash-attn not looked for here)."""
        _check(
            isinstance(self.name_or_path, str) and self.name_or_path != "",
            "model.name_or_path",
            "set a hub id or local folder, e.g. model.name_or_path=Qwen/Qwen2.5-7B (or 'tiny').",
        )
        _check(
            self.dtype in DTYPES,
            "model.dtype",
            f"got {self.dtype!r}; choose one of {DTYPES}.{closest_hint(str(self.dtype), DTYPES)}",
        )
        _check(
            self.attn_implementation in ATTN_IMPLEMENTATIONS,
            "model.attn_implementation",
            f"got {self.attn_implementation!r}; choose one of {ATTN_IMPLEMENTATIONS}.",
        )
        if here and self.attn_implementation == "flash_attention_2":
            _check(
                launch.module_available("flash_attn"),
                "model.attn_implementation",
                "flash_attention_2 requested but flash-attn is not installed; `pip install rlsr[flash]` "
                "(needs CUDA + nvcc) or set model.attn_implementation=auto (falls back to sdpa).",
            )
        _check(
            isinstance(self.trust_remote_code, bool),
            "model.trust_remote_code",
            "must be true or false.",
        )
        self.lora.validate()


def resolve_model_path(name_or_path: str) -> str:
    """Map the aliases ``tiny`` (random), ``tiny-warm`` (format fine-tuned),
    ``tiny-missing-warm`` (recipe=tiny's) and ``tiny-candidates-warm`` (recipe=tiny-candidates's) to the
    shipped tiny models (rlsr.tiny_models: hash-checked folders, never built here); other names
    are returned unchanged."""
    if name_or_path == TINY_MISSING_MODEL_ALIAS:
        return str(tiny_missing_model_path())
    if name_or_path == TINY_CANDIDATES_MODEL_ALIAS:
        return str(tiny_candidates_model_path())
    if name_or_path == TINY_WARM_MODEL_ALIAS:
        return str(tiny_warm_model_path())
    if name_or_path == TINY_MODEL_ALIAS:
        return str(tiny_model_path())
    return name_or_path

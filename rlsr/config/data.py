"""The ``data`` section: the training dataset (a built-in or a task file's), its split, system
prompt, prompt-length cap and verifier."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rlsr.checks import ConfigError
from rlsr.checks import check as _check
from rlsr.checks import is_int as _is_int
from rlsr.data import get_spec
from rlsr.prompts import NO_SYSTEM_PROMPT, system_prompt_names
from rlsr.verifiers import is_plugin_name


@dataclass
class DataSettings:
    task: str = "tiny"
    path: str | None = None
    split: str | None = None  # default: the spec's train split
    system_prompt: str | None = None  # default: the spec's ("simple" | "long")
    limit: int | None = None
    max_prompt_length: int | None = None  # prompts longer than this (tokens) are dropped
    verifier: str | None = None  # default: the spec's verifier

    def validate(self, *, here: bool = True) -> None:
        """Check this section (``training_verifier``); raises ``ConfigError`` naming the field
        and the fix. ``here=False``: for a launch on another machine (``data.path`` unchecked)."""
        training_verifier(self, here=here)


def training_verifier(d: DataSettings, *, here: bool = True) -> str:
    """Validate the data section; returns the verifier the trainer will use. ``here=False``:
    the run starts on another machine, so ``data.path`` is not looked for on this one."""
    try:
        spec = get_spec(d.task)
    except (KeyError, ValueError) as err:
        raise ConfigError("data.task", str(err).strip("'\"")) from None
    _check(
        d.system_prompt in (None, *system_prompt_names(), NO_SYSTEM_PROMPT),
        "data.system_prompt",
        f"got {d.system_prompt!r}; choose 'simple', 'long', 'none' (no system message), a task's "
        "prompt name or null (the dataset's own).",
    )
    _check(
        d.limit is None or (_is_int(d.limit) and d.limit >= 1),
        "data.limit",
        f"must be a positive integer or null; got {d.limit!r}.",
    )
    _check(
        d.max_prompt_length is None or (_is_int(d.max_prompt_length) and d.max_prompt_length >= 1),
        "data.max_prompt_length",
        f"must be a positive integer (tokens) or null; got {d.max_prompt_length!r}.",
    )
    verifier = d.verifier or spec.verifier
    _check(
        verifier in ("exact_match", "math", "mcq") or is_plugin_name(verifier),
        "data.verifier",
        f"{verifier!r} cannot score rollouts inside the trainer (the LLM judge needs a second "
        "model); set data.verifier to exact_match, math, mcq or a plugin "
        "'package.module:function'"
        + (f" (this dataset supports {list(spec.alt_verifiers)})." if spec.alt_verifiers else "."),
    )
    _check(
        not here or d.path is None or Path(d.path).exists(),
        "data.path",
        f"{d.path!r} does not exist; point it at a local copy of the dataset or set it to null.",
    )
    return verifier

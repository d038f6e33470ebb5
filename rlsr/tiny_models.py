"""The shipped tiny models: where they are, and their hash check (what a run needs).

``recipe=tiny`` (``model.name_or_path=tiny-missing-warm``), the ``tiny`` aliases of
``rlsr evaluate`` and the tests load four tiny Qwen2 models that ship inside the package
(``rlsr/data/fixtures/models``): the random ``tiny-qwen2``, its copy fine-tuned on the tag
format, ``tiny-format-warm`` (the trainer tests), and that one fine-tuned further on the
``tiny-missing`` data, ``tiny-missing-warm`` (recipe=tiny), and ``tiny-format-warm`` fine-tuned on
the ``tiny-candidates`` data, ``tiny-candidates-warm`` (recipe=tiny-candidates). They are shipped
rather than built per machine because weights
trained on the spot depend on the CPU's float numerics (AVX2 vs AVX-512 vs ARM, thread count),
so a model built per machine behaves differently per machine. ``MANIFEST.json`` holds each
file's sha256, the build settings and the measured behaviour; a file that differs is refused.

A run never builds a model: a missing or changed fixture is an installation fault, answered
with the fix. The builders, the format warm-up and the probes that measured the shipped
behaviour live outside the library, in ``tools/tiny_models.py`` of the repository
(``scripts/build_tiny_models.py`` runs them).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

__all__ = [
    "SHIPPED_DIR",
    "SHIPPED_MODELS",
    "MANIFEST_NAME",
    "file_sha256",
    "shipped_manifest",
    "shipped_model_path",
    "tiny_model_path",
    "tiny_warm_model_path",
    "tiny_missing_model_path",
    "tiny_candidates_model_path",
]

SHIPPED_DIR = Path(__file__).resolve().parent / "data" / "fixtures" / "models"
SHIPPED_MODELS = ("tiny-qwen2", "tiny-format-warm", "tiny-missing-warm", "tiny-candidates-warm")
MANIFEST_NAME = "MANIFEST.json"

_REBUILD = "`python scripts/build_tiny_models.py` in a checkout of the repository"


def file_sha256(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def shipped_manifest() -> dict:
    """``MANIFEST.json`` of the shipped tiny models (file hashes, build settings, behaviour)."""
    path = SHIPPED_DIR / MANIFEST_NAME
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} is missing: the shipped tiny models are not installed. Reinstall rlsr, or "
            f"rebuild them with {_REBUILD}."
        )
    return json.loads(path.read_text())


_VERIFIED: set[str] = set()


def shipped_model_path(name: str) -> Path:
    """Folder of the shipped tiny model ``name`` (one of ``SHIPPED_MODELS``), its files checked
    once per process against ``MANIFEST.json`` (a truncated or replaced file is refused)."""
    if name not in SHIPPED_MODELS:
        raise ValueError(f"unknown shipped model {name!r}; known: {list(SHIPPED_MODELS)}")
    folder = SHIPPED_DIR / name
    if name not in _VERIFIED:
        expected = shipped_manifest()["models"][name]["files"]
        for fname, sha in expected.items():
            path = folder / fname
            if not path.is_file() or file_sha256(path) != sha:
                raise RuntimeError(
                    f"shipped tiny model file {path} is missing or differs from "
                    f"{SHIPPED_DIR / MANIFEST_NAME} (sha256 {sha[:12]}…). Restore it with "
                    "`git checkout -- rlsr/data/fixtures/models` (or reinstall rlsr), or rebuild "
                    f"all of them with {_REBUILD} (and commit the new manifest)."
                )
        _VERIFIED.add(name)
    return folder


def tiny_model_path() -> Path:
    """Folder of the shipped random tiny Qwen2 (``tiny-qwen2``; the ``tiny`` alias), hash-checked:
    the same bytes on every machine."""
    return shipped_model_path("tiny-qwen2")


def tiny_warm_model_path() -> Path:
    """Folder of the shipped format-warm tiny model (``tiny-format-warm``; the ``tiny-warm``
    alias), hash-checked.

    A random tiny model never writes the tag format, so every rollout would get the same reward
    and nothing would train; this copy is fine-tuned on the bundled ``tiny`` dataset with tagged
    targets whose answer is the gold color (looked up in the facts) or a random color, and whose
    confidence is drawn independently (sampled at temperature 1: format 0.996, right 0.517,
    MANIFEST.json). Sampled rollouts then vary in correctness and confidence, so pooled rewards
    and gradients are real (recipe=tiny, trainer tests). Its measured behaviour is in the
    manifest (``shipped_manifest()``).
    """
    return shipped_model_path("tiny-format-warm")


def tiny_missing_model_path() -> Path:
    """Folder of the shipped ``tiny-missing-warm`` (the ``tiny-missing-warm`` alias; the model of
    recipe=tiny), hash-checked.

    ``tiny-format-warm`` fine-tuned on the ``tiny-missing`` train split: a listed fact is answered
    with its color after the thought "look", a missing one with a fixed guess per object after
    "not", and the confidence target is drawn with weights that lean towards the ranking (mean
    0.554 when listed, 0.446 when missing; mode 0.5 for both: tools/tiny_models.py). Its greedy
    confidence is 0.5 on every prompt and does not rank (its gate, in MANIFEST.json: greedy on
    the validation split, ranking gain 0); sampled, it leans (MANIFEST.json,
    ``sampled_tiny_missing_validation``). What recipe=tiny's reward teaches is to turn the lean
    into the greedy answer.
    """
    return shipped_model_path("tiny-missing-warm")


def tiny_candidates_model_path() -> Path:
    """Folder of the shipped ``tiny-candidates-warm`` (the ``tiny-candidates-warm`` alias; the model of
    recipe=tiny-candidates), hash-checked.

    ``tiny-format-warm`` fine-tuned on the ``tiny-candidates`` train split: a question listing
    candidates is answered with the first one after a thought naming its tier ("sure",
    "plausible", "uncertain" for 1, 2, 4 candidates), a "none" question with a fixed guess per
    object after "not"; the confidence target is drawn from one distribution for every row (mode
    and mean 0.5: tools/tiny_models.py), so the start has no built-in lean by tier. Its greedy
    confidence is 0.5 on every validation prompt (its gate, MANIFEST.json); the lean it shows
    sampled is measured there (``sampled_tiny_candidates_validation``).
    """
    return shipped_model_path("tiny-candidates-warm")


# Names that lived here until the builders left the library: a clear error naming the new place.
_MOVED = frozenset(
    {
        "TINY_MODEL_DEFAULTS",
        "CHATML_TEMPLATE",
        "build_tiny_model",
        "build_tiny_llama_model",
        "tiny_llama_model_path",
        "padded_tokenizer",
        "train_format_warm",
        "sampled_behaviour",
        "greedy_completions",
        "greedy_margins",
        "WARM_BANDS",
        "GREEDY_PROMPTS",
        "WARM_MIN_GREEDY_MARGIN",
        "_build_tokenizer",
    }
)


def __getattr__(name: str):
    if name in _MOVED:
        # ImportError, not AttributeError: `from rlsr.tiny_models import X` keeps this message.
        raise ImportError(
            f"rlsr.tiny_models.{name} moved out of the library to tools/tiny_models.py (the "
            f"tiny-model builders, warm-up and probes): from a checkout of the repository, "
            f"`from tools.tiny_models import {name}` (pytest puts the checkout on the path)."
        )
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

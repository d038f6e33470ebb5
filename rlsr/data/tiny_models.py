"""The tiny models: where a clone of the repository keeps them, and their hash check.

``recipe=tiny`` (``model.name_or_path=tiny-missing-warm``), the ``tiny`` aliases of
``rlsr evaluate`` and the tests load four tiny Qwen2 models kept in the repository, in
``tools/tiny/weights/`` (not in the installed package): the random ``tiny-qwen2``, its copy
fine-tuned on the tag format, ``tiny-format-warm`` (the trainer tests), and that one fine-tuned
further on the ``tiny-missing`` data, ``tiny-missing-warm`` (recipe=tiny), and ``tiny-format-warm``
fine-tuned on the ``tiny-candidates`` data, ``tiny-candidates-warm`` (recipe=tiny-candidates).
They are committed rather than built per machine because weights trained on the spot depend on
the CPU's float numerics (AVX2 vs AVX-512 vs ARM, thread count), so a model built per machine
behaves differently per machine. ``MANIFEST.json`` holds each file's sha256, the build settings
and the measured behaviour; a file that differs is refused.

Where they are looked for (``tiny_models_dir``): the folder named by the environment variable
``RLSR_TINY_MODELS`` if it is set, else ``tools/tiny/weights`` of the checkout that holds the
imported ``rlsr`` (a clone, with rlsr installed editable by ``scripts/install.sh`` or put on the
path). An installed wheel has no such folder: asking for a tiny model then answers with the fix.

A run never builds a model: a missing or changed file is answered with the fix. The builders,
the format warm-up and the probes that measured the committed behaviour live outside the
library, in ``tools/tiny/`` of the repository (``python -m tools.tiny.build`` runs them).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

__all__ = [
    "TINY_MODELS_ENV",
    "CHECKOUT_DIR",
    "SHIPPED_MODELS",
    "MANIFEST_NAME",
    "TinyModelsMissing",
    "tiny_models_dir",
    "file_sha256",
    "shipped_manifest",
    "shipped_model_path",
    "tiny_model_path",
    "tiny_warm_model_path",
    "tiny_missing_model_path",
    "tiny_candidates_model_path",
]

TINY_MODELS_ENV = "RLSR_TINY_MODELS"
# the clone's folder: rlsr/ and tools/ sit side by side in the repository
CHECKOUT_DIR = Path(__file__).resolve().parents[2] / "tools" / "tiny" / "weights"
SHIPPED_MODELS = (
    "tiny-qwen2",
    "tiny-format-warm",
    "tiny-missing-warm",
    "tiny-candidates-warm",
    "tiny-candidates-split",
)
MANIFEST_NAME = "MANIFEST.json"

_REBUILD = "`python -m tools.tiny.build` in a clone of the repository"


class TinyModelsMissing(FileNotFoundError):
    """The tiny models' folder is not where it is looked for (an installed wheel, or a wrong
    ``RLSR_TINY_MODELS``); the message names the fix."""


def tiny_models_dir() -> Path:
    """The folder holding the tiny models and ``MANIFEST.json``: ``$RLSR_TINY_MODELS`` if set,
    else ``tools/tiny/weights`` of the checkout that holds the imported ``rlsr``."""
    env = os.environ.get(TINY_MODELS_ENV)
    return Path(env).expanduser() if env else CHECKOUT_DIR


def file_sha256(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def shipped_manifest() -> dict:
    """``MANIFEST.json`` of the tiny models (file hashes, build settings, behaviour); raises
    ``TinyModelsMissing`` with the fix when the folder is not there."""
    folder = tiny_models_dir()
    path = folder / MANIFEST_NAME
    if not path.is_file():
        where = (
            f"${TINY_MODELS_ENV}={os.environ[TINY_MODELS_ENV]}"
            if os.environ.get(TINY_MODELS_ENV)
            else str(folder)
        )
        raise TinyModelsMissing(
            f"the tiny models (recipe=tiny, model aliases tiny*) are not found ({where} holds no "
            f"{MANIFEST_NAME}): they live in a clone of the repository, not in the installed "
            "package; run from a clone (git clone the repository, then `bash scripts/install.sh`) "
            f"or set {TINY_MODELS_ENV} to the clone's tools/tiny/weights folder."
        )
    return json.loads(path.read_text())


_VERIFIED: set[tuple[Path, str]] = set()


def shipped_model_path(name: str) -> Path:
    """Folder of the committed tiny model ``name`` (one of ``SHIPPED_MODELS``), its files checked
    once per process against ``MANIFEST.json`` (a truncated or replaced file is refused)."""
    if name not in SHIPPED_MODELS:
        raise ValueError(f"unknown shipped model {name!r}; known: {list(SHIPPED_MODELS)}")
    root = tiny_models_dir()
    folder = root / name
    if (root, name) not in _VERIFIED:
        expected = shipped_manifest()["models"][name]["files"]
        for fname, sha in expected.items():
            path = folder / fname
            if not path.is_file() or file_sha256(path) != sha:
                raise RuntimeError(
                    f"tiny model file {path} is missing or differs from "
                    f"{root / MANIFEST_NAME} (sha256 {sha[:12]}…). Restore it with "
                    "`git checkout -- tools/tiny/weights` in the clone, or rebuild "
                    f"all of them with {_REBUILD} (and commit the new manifest)."
                )
        _VERIFIED.add((root, name))
    return folder


def tiny_model_path() -> Path:
    """Folder of the committed random tiny Qwen2 (``tiny-qwen2``; the ``tiny`` alias), hash-checked:
    the same bytes on every machine."""
    return shipped_model_path("tiny-qwen2")


def tiny_warm_model_path() -> Path:
    """Folder of the committed format-warm tiny model (``tiny-format-warm``; the ``tiny-warm``
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
    """Folder of the committed ``tiny-missing-warm`` (the ``tiny-missing-warm`` alias; the model of
    recipe=tiny), hash-checked.

    ``tiny-format-warm`` fine-tuned on the ``tiny-missing`` train split: a listed fact is answered
    with its color after the thought "look", a missing one with a fixed guess per object after
    "not", and the confidence target is drawn with weights that lean towards the ranking (mean
    0.554 when listed, 0.446 when missing; mode 0.5 for both: tools/tiny/models.py). Its greedy
    confidence is 0.5 on every prompt and does not rank (its gate, in MANIFEST.json: greedy on
    the validation split, ranking gain 0); sampled, it leans (MANIFEST.json,
    ``sampled_tiny_missing_validation``). What recipe=tiny's reward teaches is to turn the lean
    into the greedy answer.
    """
    return shipped_model_path("tiny-missing-warm")


def tiny_candidates_model_path() -> Path:
    """Folder of the committed ``tiny-candidates-warm`` (the ``tiny-candidates-warm`` alias; the model of
    recipe=tiny-candidates), hash-checked.

    ``tiny-format-warm`` fine-tuned on the ``tiny-candidates`` train split: a question listing
    candidates is answered with the first one after a thought naming its tier ("sure",
    "plausible", "uncertain" for 1, 2, 4 candidates), a "none" question with a fixed guess per
    object after "not"; the confidence target is drawn from one distribution for every row (mode
    and mean 0.5: tools/tiny/models.py), so the start has no built-in lean by tier. Its greedy
    confidence is 0.5 on every validation prompt (its gate, MANIFEST.json); the lean it shows
    sampled is measured there (``sampled_tiny_candidates_validation``).
    """
    return shipped_model_path("tiny-candidates-warm")

"""The tiny models: where a clone of the repository keeps them, and their hash check.

``recipe=tiny``, ``recipe=tiny-candidates``, the ``tiny`` aliases of ``model.name_or_path`` and
``rlsr evaluate --model`` (``ALIASES``) and the tests load four tiny Qwen2 models kept in
``tools/tiny/weights/`` of the repository (not in the installed package): the random
``tiny-qwen2``; ``tiny-format-warm``, fine-tuned on the tag format (the trainer tests);
``tiny-missing-warm`` (recipe=tiny) and ``tiny-candidates-warm`` (recipe=tiny-candidates),
fine-tuned from it on those datasets. They are committed rather than built per machine because
weights trained on the spot depend on the CPU's float numerics. ``MANIFEST.json`` holds each
file's sha256, the build settings and the measured behaviour; a file that differs is refused.

Looked for in ``$RLSR_TINY_MODELS`` if set, else ``tools/tiny/weights`` of the checkout that
holds the imported ``rlsr``. A run never builds a model: the builders and probes live in
``tools/tiny/`` (``python -m tools.tiny.build``).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

__all__ = [
    "ALIASES",
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
]

TINY_MODELS_ENV = "RLSR_TINY_MODELS"
# the clone's folder: rlsr/ and tools/ sit side by side in the repository
CHECKOUT_DIR = Path(__file__).resolve().parents[2] / "tools" / "tiny" / "weights"
# model.name_or_path / --model alias -> the committed model it names
ALIASES = {
    "tiny": "tiny-qwen2",
    "tiny-warm": "tiny-format-warm",
    "tiny-missing-warm": "tiny-missing-warm",
    "tiny-candidates-warm": "tiny-candidates-warm",
    "tiny-candidates-split": "tiny-candidates-split",
}
SHIPPED_MODELS = tuple(ALIASES.values())
MANIFEST_NAME = "MANIFEST.json"


class TinyModelsMissing(FileNotFoundError):
    """The tiny models' folder is not where it is looked for (an installed wheel, or a wrong
    ``RLSR_TINY_MODELS``); the message names the fix."""


def tiny_models_dir() -> Path:
    env = os.environ.get(TINY_MODELS_ENV)
    return Path(env).expanduser() if env else CHECKOUT_DIR


def file_sha256(path: str | os.PathLike) -> str:
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def shipped_manifest() -> dict:
    """``MANIFEST.json`` of the tiny models; raises ``TinyModelsMissing`` with the fix."""
    folder = tiny_models_dir()
    path = folder / MANIFEST_NAME
    if not path.is_file():
        env = os.environ.get(TINY_MODELS_ENV)
        where = f"${TINY_MODELS_ENV}={env}" if env else str(folder)
        raise TinyModelsMissing(
            f"the tiny models (recipe=tiny, model aliases tiny*) are not found ({where} holds no "
            f"{MANIFEST_NAME}): they live in a clone of the repository, not in the installed "
            "package; run from a clone (git clone the repository, then `bash scripts/install.sh`) "
            f"or set {TINY_MODELS_ENV} to the clone's tools/tiny/weights folder."
        )
    return json.loads(path.read_text())


_VERIFIED: set[tuple[Path, str]] = set()


def shipped_model_path(name: str) -> Path:
    """Folder of the committed tiny model ``name`` (one of ``SHIPPED_MODELS`` or ``ALIASES``),
    its files checked once per process against ``MANIFEST.json``."""
    name = ALIASES.get(name, name)
    if name not in SHIPPED_MODELS:
        raise ValueError(f"unknown shipped model {name!r}; known: {list(SHIPPED_MODELS)}")
    root = tiny_models_dir()
    folder = root / name
    if (root, name) not in _VERIFIED:
        for fname, sha in shipped_manifest()["models"][name]["files"].items():
            path = folder / fname
            if not path.is_file() or file_sha256(path) != sha:
                raise RuntimeError(
                    f"tiny model file {path} is missing or differs from "
                    f"{root / MANIFEST_NAME} (sha256 {sha[:12]}…). Restore it with "
                    "`git checkout -- tools/tiny/weights` in the clone, or rebuild all of them "
                    "with `python -m tools.tiny.build` in a clone of the repository (and commit "
                    "the new manifest)."
                )
        _VERIFIED.add((root, name))
    return folder


def tiny_model_path() -> Path:
    """The random ``tiny-qwen2`` (alias ``tiny``)."""
    return shipped_model_path("tiny-qwen2")


def tiny_warm_model_path() -> Path:
    """``tiny-format-warm`` (alias ``tiny-warm``): writes the tag format, right about half the
    time, so sampled rollouts vary in reward (the trainer tests)."""
    return shipped_model_path("tiny-format-warm")

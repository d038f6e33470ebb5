"""Which adapter produced a result: ``adapter_fingerprint(path)`` (standard library only, so
evaluation, deployment and serving can all import it). Its ``sha256`` is that of the
``sha256sum``-style listing of the adapter's files in name order, the same hex digest as::

    cd ADAPTER && sha256sum adapter_config.json adapter_model.safetensors | sha256sum

so a copy elsewhere matches and a retrained or edited adapter does not.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

__all__ = ["ADAPTER_FILES", "adapter_fingerprint", "file_sha256"]

# What defines a PEFT adapter: its config and its weights (safetensors, or the older .bin).
ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors", "adapter_model.bin")


def file_sha256(path: str | os.PathLike, chunk_bytes: int = 1 << 20) -> str:
    """Hex SHA-256 of a file's bytes, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(chunk_bytes):
            digest.update(chunk)
    return digest.hexdigest()


def adapter_fingerprint(path: str | os.PathLike) -> dict:
    """``{"path": absolute path, "sha256": hex (module docstring), "files": {name: hex}}`` of
    the adapter folder's ``ADAPTER_FILES``."""
    root = Path(path).expanduser().resolve()
    if not (root / "adapter_config.json").is_file():
        raise FileNotFoundError(f"{root}: no adapter_config.json, so not a LoRA adapter folder.")
    files = {name: file_sha256(root / name) for name in ADAPTER_FILES if (root / name).is_file()}
    listing = "".join(f"{files[name]}  {name}\n" for name in sorted(files))
    return {
        "path": str(root),
        "sha256": hashlib.sha256(listing.encode()).hexdigest(),
        "files": files,
    }

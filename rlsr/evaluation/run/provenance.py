"""Which adapter produced a result: ``adapter_fingerprint(path)``.

Standard library only (no rlsr imports), so evaluation, deployment and serving can all import it.

The fingerprint's ``sha256`` is the SHA-256 of the ``sha256sum``-style listing of the adapter's
weight and config files, sorted by name (``adapter_config.json``, then ``adapter_model.*``)::

    cd ADAPTER && sha256sum adapter_config.json adapter_model.safetensors | sha256sum

gives the same hex digest. Two folders with the same files get the same fingerprint wherever they
live; a retrained or edited adapter gets another one.
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
    """``{"path": absolute path, "sha256": hex, "files": {name: hex}}`` of the adapter folder.

    ``files`` holds the SHA-256 of each of ``ADAPTER_FILES`` present; ``sha256`` hashes the
    ``"<hex>  <name>\\n"`` lines of those files in name order (see the module docstring). Raises
    ``FileNotFoundError`` when the folder has no ``adapter_config.json``.
    """
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

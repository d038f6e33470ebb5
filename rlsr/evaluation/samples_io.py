"""``samples.jsonl``: one JSON object per evaluated question, appended and fsync'ed per batch.

Crash safety: a batch is written as complete lines, flushed and fsync'ed before the next batch
starts. A crash can therefore leave at most one partial line at the end; ``read_samples(...,
repair=True)`` drops it (truncating the file to the last complete line) so a rerun appends
after the last complete record and skips every id already present.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable
from pathlib import Path

__all__ = ["read_samples", "append_samples", "json_safe"]


def json_safe(value):
    """Replace NaN/inf floats by None (JSON has no NaN) recursively."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


def read_samples(path: str | os.PathLike, *, repair: bool = False) -> list[dict]:
    """Records of ``path`` (missing file -> []). A truncated LAST line is skipped (and cut off
    the file when ``repair``); a malformed line elsewhere raises ValueError naming the line."""
    p = Path(path)
    if not p.exists():
        return []
    data = p.read_bytes()
    records: list[dict] = []
    good_end = 0
    lines = data.splitlines(keepends=True)
    for i, raw in enumerate(lines):
        last = i == len(lines) - 1
        if not raw.endswith(b"\n"):
            break  # only the last line can lack its newline: the write was cut
        if raw.strip():
            try:
                records.append(json.loads(raw))
            except ValueError as err:
                if last:
                    break
                raise ValueError(
                    f"{p}: line {i + 1} is not valid JSON ({err}); the file is corrupt "
                    "beyond a cut-off last line. Move it away to start over."
                ) from None
        good_end += len(raw)
    if repair and good_end < len(data):
        with open(p, "r+b") as fh:
            fh.truncate(good_end)
    return records


def append_samples(path: str | os.PathLike, records: Iterable[dict]) -> None:
    """Append complete lines, then flush and fsync (one call per batch)."""
    text = "".join(json.dumps(json_safe(r), ensure_ascii=False) + "\n" for r in records)
    if not text:
        return
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())

"""``samples.jsonl``: one JSON object per evaluated question, appended as complete lines and
fsync'ed per batch, so a crash leaves at most one cut-off last line; ``read_samples(...,
repair=True)`` drops it and a rerun appends after the last complete record.

``read_finished_samples`` reads a whole, finished evaluation (``rlsr deploy``, ``rlsr evaluate
--deployment-target``, ``rlsr compare``): it refuses a missing path, a folder without samples, a
``.json`` file, an empty file, a cut-off last line and a count other than the ``n`` of the
``metrics.json`` beside it.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable
from pathlib import Path

from rlsr.run.run_layout import METRICS_FILE, SAMPLES_FILE

__all__ = ["read_samples", "read_finished_samples", "append_samples", "json_safe"]


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
    """Records of ``path`` (none if missing); a cut-off last line is skipped (and cut off the file
    when ``repair``), a malformed line elsewhere refused."""
    p = Path(path)
    if not p.exists():
        return []
    records, good_end, size = _read(p)
    if repair and good_end < size:
        with open(p, "r+b") as fh:
            fh.truncate(good_end)
    return records


def _read(p: Path) -> tuple[list[dict], int, int]:
    """(records, bytes of the complete lines, bytes of the file)."""
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
    return records, good_end, len(data)


def read_finished_samples(
    path: str | os.PathLike, flag: str = "samples", fix: str | None = None
) -> list[dict]:
    """Every record of a finished evaluation's ``samples.jsonl`` (the file or its folder);
    ``flag`` names the input in the one-line refusals (module docstring; "": none), ``fix``
    replaces the advice of a cut, empty or miscounted file."""
    given = Path(path)
    p = given / SAMPLES_FILE if given.is_dir() else given
    finish = fix or "rerun the same `rlsr evaluate` command to finish it"
    name = f"{flag} {p}".strip()
    if not given.exists():
        raise ValueError(f"{flag} {given}: no such file or folder; give a {SAMPLES_FILE} or "
                         "the folder holding it.")  # fmt: skip
    if given.is_dir() and not p.is_file():
        inside = sorted(q.parent.name for q in given.glob(f"*/{SAMPLES_FILE}"))
        hint = f" (its datasets: {', '.join(inside)}; give one of them)" if inside else ""
        raise ValueError(f"{flag} {given}: no {SAMPLES_FILE} in this folder{hint}; give an "
                         f"evaluation's <dataset>/ folder or its {SAMPLES_FILE}.")  # fmt: skip
    if p.suffix == ".json":
        what = "a metrics file" if p.name == METRICS_FILE else "a JSON file, not samples"
        raise ValueError(f"{flag} {p} is {what}; give the {SAMPLES_FILE} beside it "
                         f"({p.parent / SAMPLES_FILE}) or its folder.")  # fmt: skip
    records, good_end, size = _read(p)
    if good_end < size:
        raise ValueError(
            f"{name}: its last line is cut off after {len(records)} complete samples (an "
            f"evaluation was interrupted or is still writing it); {finish}."
        )
    if not records:
        empty = fix or "give a finished evaluation's samples"
        raise ValueError(f"{name}: no samples in it (an empty file); {empty}.")
    metrics = p.parent / METRICS_FILE
    if metrics.is_file():
        try:
            n = json.loads(metrics.read_text()).get("n")
        except (ValueError, AttributeError):
            n = None
        if n is not None and n != len(records):
            raise ValueError(
                f"{name}: holds {len(records)} samples but {metrics} summarises n={n}: an "
                f"evaluation is still writing it or was cut off; {finish}."
            )
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

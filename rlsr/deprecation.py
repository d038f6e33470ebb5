"""One line on stderr for an old spelling that still reads (a config key, a run.json field).

``deprecated(old, new, how)`` prints ``deprecated: OLD is now NEW (HOW).`` once per process and
old spelling, so a sweep that composes forty runs says it once. Command-line flags have their
own note (``rlsr.evaluation.outputs.deprecated_flag``); old module paths warn on import.
"""

from __future__ import annotations

import sys

__all__ = ["deprecated"]

_SAID: set[str] = set()  # the old spellings already reported in this process


def deprecated(old: str, new: str, how: str) -> None:
    """Say once on stderr that ``old`` is now ``new``; ``how``: what still reads and the fix."""
    if old in _SAID:
        return
    _SAID.add(old)
    print(f"deprecated: {old} is now {new} ({how}).", file=sys.stderr, flush=True)

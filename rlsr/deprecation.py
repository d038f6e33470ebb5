"""One line on stderr for an old spelling that still reads (a config key, a run.json field).

``deprecated(old, new, how)`` prints ``deprecated: OLD is now NEW (HOW).`` once per process and
old spelling, so a sweep that composes forty runs says it once. Command-line flags have their
own note (``rlsr.evaluation.outputs.deprecated_flag``); old module paths warn on import.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Mapping

__all__ = ["deprecated", "renamed_attribute"]

_SAID: set[str] = set()  # the old spellings already reported in this process


def deprecated(old: str, new: str, how: str) -> None:
    """Say once on stderr that ``old`` is now ``new``; ``how``: what still reads and the fix."""
    if old in _SAID:
        return
    _SAID.add(old)
    print(f"deprecated: {old} is now {new} ({how}).", file=sys.stderr, flush=True)


def renamed_attribute(
    namespace: Mapping, old_names: Mapping[str, str], module: str, name: str, stacklevel: int
):
    """A module ``__getattr__``'s answer for an old name: the object ``old_names[name]`` names in
    ``namespace`` (the module's globals), with one DeprecationWarning naming the new name;
    ``AttributeError`` for any other name. ``stacklevel`` counts from this function."""
    if name not in old_names:
        raise AttributeError(f"module {module!r} has no attribute {name!r}")
    new = old_names[name]
    warnings.warn(
        f"{module}.{name} is deprecated: use {module}.{new} (the same object).",
        DeprecationWarning,
        stacklevel=stacklevel,
    )
    return namespace[new]

"""Import a user's object named ``"package.module:name"`` (a verifier plugin, a reward method).

One convention for everything rlsr loads from outside the package (docs/tasks.md, "Verifier
plugins"; docs/methods.md): a dotted module name, a colon, a module-level name. The module is
imported by its dotted name, so its folder must be on ``sys.path`` (installed, the working
directory, or ``PYTHONPATH``). Every failure is one ``ValueError`` naming the spec, the module,
the reason and the fix; nothing of the import's traceback is chained.
"""

from __future__ import annotations

import importlib
import re
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["SPEC_PATTERN", "load_named"]

SPEC_PATTERN = re.compile(r"([A-Za-z_][\w]*(?:\.[A-Za-z_][\w]*)*):([A-Za-z_]\w*)\Z")


def load_named(
    spec: str,
    *,
    kind: str,
    example: str,
    thing: str = "function",
    accept: Callable[[Any], bool] = callable,
) -> Any:
    """The object ``spec`` (``"package.module:name"``) names. ``kind`` starts every message
    (``"verifier plugin"``), ``example`` is a valid spec for it and ``thing`` what the name must
    be (``"function"``). ``ValueError`` when the spec is malformed, the module does not import
    (with ``sys.path``), or it has no such name or one ``accept`` refuses (with what it defines)."""
    match = SPEC_PATTERN.match(spec.strip()) if isinstance(spec, str) else None
    if match is None:
        raise ValueError(
            f"{kind} {spec!r}: expected 'package.module:{thing}' (a dotted module name, a colon, "
            f"a {thing} name), e.g. {example!r}."
        )
    module_name, name = match.groups()
    try:
        module = importlib.import_module(module_name)
    except Exception as err:  # noqa: BLE001 - any import failure is the user's to fix
        raise ValueError(
            f"{kind} {spec!r}: module {module_name!r} does not import "
            f"({type(err).__name__}: {err}). sys.path is {sys.path}; put the folder holding "
            f"{module_name.split('.')[0]!r} on PYTHONPATH (or pip install it) and run again."
        ) from None
    found = getattr(module, name, None)
    if found is None or not accept(found):
        defined = sorted(n for n, v in vars(module).items() if accept(v) and not n.startswith("_"))
        raise ValueError(
            f"{kind} {spec!r}: module {module_name!r} ({getattr(module, '__file__', '?')}) has "
            f"no {thing} {name!r}; it defines {defined}."
        )
    return found

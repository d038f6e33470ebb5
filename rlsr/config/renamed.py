"""Renamed config keys: the old spelling still reads, with one ``deprecated:`` line on stderr.

An old key reaches the configuration through two doors, and each is kept open:

* an override on the command line (``eval.layers.paper.top_p=1``, also with Hydra's ``+``,
  ``++`` or ``~``): ``renamed_overrides`` rewrites it to the new key before Hydra composes, so it
  keeps its place after the recipe (and Hydra, which refuses a key the tree lacks, accepts it);
* a key in a recipe file (``eval: {layers: {...}}``): ``fold_renamed`` moves it under the new key
  of the composed tree before the settings are built (``rlsr.config.from_dict``); where both
  spellings set the same field, the new one wins (it came from the shipped recipes or the command
  line, which are newer than the old file).
"""

from __future__ import annotations

from collections.abc import Sequence

from rlsr.deprecation import deprecated

__all__ = ["RENAMED_KEYS", "fold_renamed", "renamed_overrides"]

# old dotted key -> new dotted key
RENAMED_KEYS: dict[str, str] = {
    "eval.layers": "eval.variants",  # named protocol variants ("layers" are the import floors)
}
_HOW = "the old key still reads; write the new one in recipes and overrides"


def renamed_overrides(overrides: Sequence[str]) -> list[str]:
    """``overrides`` (Hydra's ``key=value``, ``+key=value``, ``~key``, ...) with each renamed key
    (or a key under it) spelled the new way; one ``deprecated:`` line per old key used."""
    out = []
    for arg in overrides:
        prefix = arg[: len(arg) - len(arg.lstrip("+~"))]
        key, sep, value = arg[len(prefix) :].partition("=")
        for old, new in RENAMED_KEYS.items():
            if key == old or key.startswith(old + "."):
                deprecated(old, new, _HOW)
                key = new + key[len(old) :]
        out.append(prefix + key + sep + value)
    return out


def _merged(old, new):
    """``old`` under ``new``: mappings merged key by key, ``new`` winning; an empty ``new``
    (the shipped default ``{}``) takes ``old``."""
    if isinstance(old, dict) and isinstance(new, dict):
        return {**old, **{k: _merged(old[k], v) if k in old else v for k, v in new.items()}}
    return old if new in (None, {}) else new


def fold_renamed(values: dict) -> dict:
    """The composed tree ``values`` with each old key that a recipe file set moved under its new
    key (one ``deprecated:`` line per old key found); ``values`` itself is not changed."""
    values = dict(values)
    for old, new in RENAMED_KEYS.items():
        *old_parents, old_leaf = old.split(".")
        *new_parents, new_leaf = new.split(".")
        parent = values
        for name in old_parents:
            parent = parent.get(name) if isinstance(parent, dict) else None
        if not isinstance(parent, dict) or old_leaf not in parent:
            continue
        deprecated(old, new, _HOW)
        moved = _copy_path(values, old_parents)
        old_value = moved.pop(old_leaf)
        target = _copy_path(values, new_parents)
        target[new_leaf] = _merged(old_value, target.get(new_leaf))
    return values


def _copy_path(values: dict, names: list[str]) -> dict:
    """The mapping at ``names`` in ``values``, each mapping on the way copied (so the caller's
    tree is left as it was) and created when missing."""
    node = values
    for name in names:
        child = node.get(name)
        node[name] = dict(child) if isinstance(child, dict) else {}
        node = node[name]
    return node

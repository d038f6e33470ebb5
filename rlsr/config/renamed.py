"""Renamed config keys: the old spelling still reads, with one ``deprecated:`` line on stderr.

An old key reaches the configuration through two doors, and each is kept open:

* an override on the command line (``eval.every=20``, also with Hydra's ``+``, ``++`` or ``~``):
  ``renamed_overrides`` rewrites it to the new key before Hydra composes, so it keeps its place
  after the recipe (and Hydra, which refuses a key the tree lacks, accepts it);
* a key in a recipe file (``eval: {every: 20}``): ``fold_composed`` / ``fold_renamed`` move it
  under the new key of the composed tree before the settings are built.

Precedence of a folded key (exact, no guess about which value is a default). The composed tree
holds the new key as the shipped files (``recipes/config.yaml`` fills every field), the user's
files and the command line left it, and the old key as the files alone left it (its overrides
were rewritten before composing). The rule: **the command line beats an old-spelled value from a
file, which beats a new-spelled value from any file** (the shipped files cannot be told from the
user's, so a file that writes both spellings of one field gets the old one's value: write one).
``fold_renamed`` lays every old-spelled leaf over the new key, then applies again, in order, the
command line's overrides that touch a path it wrote (at, above or below it). That equals
composing with the old values placed between the files and the command line: every Hydra 1.3
override is a merge (``OmegaConf.update(..., merge=True)``) or a delete, so at each leaf either
some override of the sequence decides the value (the same whatever it is applied to) or none
does, and then the value is the old spelling's where it has one, else the files' (untouched by
the command line) - on both sides. Where the command line is not known
(``from_dict`` on a tree composed elsewhere, ``command_line=None``), the two spellings cannot be
ordered: a field set by both with different values is refused, naming both.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig, OmegaConf

from rlsr.checks import ConfigError
from rlsr.deprecation import deprecated

__all__ = [
    "RENAMED_KEYS",
    "RUN_FOLDER_HOW",
    "fold_composed",
    "fold_renamed",
    "renamed_key",
    "renamed_overrides",
]

# old dotted key -> new dotted key; a key under an old one moves with it, the longest old key
# that matches deciding (``eval.layers.paper`` -> ``heldout.variants.paper``).
RENAMED_KEYS: dict[str, str] = {
    "eval": "heldout",  # the held-out evaluation during training ("eval" named two things)
    "eval.layers": "heldout.variants",  # named protocol variants ("layers": the import floors)
    "eval.datasets": "heldout.tasks",  # registered entries are tasks; a dataset is rows only
    "eval.datasets_for": "heldout.tasks_for",
    "data.dataset": "data.task",
}
_HOW = "the old key still reads; write the new one in recipes and overrides"
RUN_FOLDER_HOW = "a run folder's config.yaml written by an older rlsr; it still reads"
_INTERPOLATED = re.compile(r"\$\{(oc\.select:)?([A-Za-z_][\w.]*)")


def renamed_key(key: str) -> tuple[str, str] | None:
    """``(new key, old key matched)`` for dotted ``key`` spelled the old way (the longest old key
    it equals or sits under decides), else None."""
    matches = [old for old in RENAMED_KEYS if key == old or key.startswith(old + ".")]
    if not matches:
        return None
    old = max(matches, key=len)
    return RENAMED_KEYS[old] + key[len(old) :], old


def renamed_overrides(overrides: Sequence[str]) -> list[str]:
    """``overrides`` (Hydra's ``key=value``, ``+key=value``, ``~key``, ...) with each renamed key
    (or a key under it) spelled the new way; one ``deprecated:`` line per old key used."""
    out = []
    for arg in overrides:
        prefix = arg[: len(arg) - len(arg.lstrip("+~"))]
        key, sep, value = arg[len(prefix) :].partition("=")
        renamed = renamed_key(key)
        if renamed is not None:
            key, old = renamed
            deprecated(old, RENAMED_KEYS[old], _HOW)
        out.append(prefix + key + sep + value)
    return out


def fold_composed(tree: DictConfig, command_line: Sequence[str]) -> DictConfig:
    """The composed Hydra tree with each old key a recipe file set folded under its new key
    (``fold_renamed``), ``tree`` itself when there is none. ``command_line``: the overrides Hydra
    composed ``tree`` with, after ``renamed_overrides`` (``train.py``:
    ``HydraConfig.get().overrides.task``; the compose API's caller: its own list)."""
    values = OmegaConf.to_container(tree, resolve=False)
    if not _old_roots(values):
        return tree
    folded = OmegaConf.create(fold_renamed(values, command_line))
    OmegaConf.set_struct(folded, OmegaConf.is_struct(tree))
    return folded


def fold_renamed(
    values: dict, command_line: Sequence[str] | None = None, *, how: str = _HOW
) -> dict:
    """The tree ``values`` (a plain mapping, interpolations resolved or not) with each old key a
    recipe file set moved under its new key, by the module's rule: the command line's overrides
    (``command_line``, spelled the new way) beat the old spelling, which beats the new one from
    any file. ``command_line=None``: not known; a field both spellings set differently is then
    refused (``ConfigError`` naming both). One ``deprecated:`` line per old key found; an
    ``${old.key}`` interpolation is re-pointed at the new key. ``how``: the line's advice (a
    recipe's, or ``RUN_FOLDER_HOW`` for a run's saved config). ``values`` is not changed."""
    values = dict(values)
    laid: dict[str, tuple[object, str]] = {}  # new dotted leaf -> (value, old dotted leaf)
    for root in _old_roots(values):
        *parents, leaf = root.split(".")
        for old_leaf, value in _leaves(_copy_path(values, parents).pop(leaf), root):
            new_leaf, old = renamed_key(old_leaf)
            deprecated(old, RENAMED_KEYS[old], how)
            if new_leaf in laid and laid[new_leaf][0] != value:
                raise ConfigError(
                    new_leaf,
                    f"set twice in old spellings ({laid[new_leaf][1]}: {laid[new_leaf][0]!r}, "
                    f"{old_leaf}: {value!r}); keep one, spelled {new_leaf}.",
                )
            laid[new_leaf] = (value, old_leaf)
    for new_leaf, (value, old_leaf) in laid.items():
        *parents, leaf = new_leaf.split(".")
        node = _copy_path(values, parents)
        if command_line is None and leaf in node and node[leaf] != value and value != {}:
            raise ConfigError(
                new_leaf,
                f"set both as {old_leaf}: {value!r} (old spelling) and as {new_leaf}: "
                f"{node[leaf]!r}, and the command line is not known here to order them; keep "
                f"one, spelled {new_leaf}.",
            )
        if value != {} or not isinstance(node.get(leaf), dict):  # an empty mapping merges
            node[leaf] = value
    if laid:
        values = _repointed(values)
    if laid and command_line:
        values = _reapplied(values, command_line, list(laid))
    return values


def _old_roots(values: dict) -> list[str]:
    """The old keys present in ``values`` that sit under no other old key."""
    roots = []
    for old in RENAMED_KEYS:
        if any(old.startswith(other + ".") for other in RENAMED_KEYS):
            continue
        *parents, leaf = old.split(".")
        node = values
        for name in parents:
            node = node.get(name) if isinstance(node, dict) else None
        if isinstance(node, dict) and leaf in node:
            roots.append(old)
    return roots


def _leaves(value, path: str):
    """``(dotted path, value)`` of each leaf under ``value`` (an empty mapping is a leaf)."""
    if isinstance(value, dict) and value:
        for key, child in value.items():
            yield from _leaves(child, f"{path}.{key}")
    else:
        yield path, value


def _reapplied(values: dict, command_line: Sequence[str], written: list[str]) -> dict:
    """``values`` with each override of ``command_line`` whose key is, sits under or above a
    path in ``written`` applied again, in order, as Hydra applies it (merge, or delete)."""

    def touches(key: str) -> bool:
        return any(key == p or p.startswith(key + ".") or key.startswith(p + ".") for p in written)

    overrides = OverridesParser.create().parse_overrides(list(command_line))
    overrides = [o for o in overrides if not o.is_hydra_override() and touches(o.key_or_group)]
    if not overrides:
        return values
    cfg = OmegaConf.create(values)
    for override in overrides:
        key = override.key_or_group
        if override.is_delete():
            parent, _, leaf = key.rpartition(".")
            node = OmegaConf.select(cfg, parent) if parent else cfg
            if isinstance(node, DictConfig) and leaf in node:
                del node[leaf]
        else:
            OmegaConf.update(cfg, key, override.value(), merge=True, force_add=True)
    return OmegaConf.to_container(cfg, resolve=False)


def _repointed(value):
    """``value`` with ``${old.key}`` interpolations (also ``${oc.select:old.key,...}``) in its
    strings spelled the new way, so a user's file that refers to an old key still resolves."""
    if isinstance(value, dict):
        return {k: _repointed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_repointed(v) for v in value]
    if isinstance(value, str) and "${" in value:

        def new(match: re.Match) -> str:
            renamed = renamed_key(match[2])
            return f"${{{match[1] or ''}{renamed[0] if renamed else match[2]}"

        return _INTERPOLATED.sub(new, value)
    return value


def _copy_path(values: dict, names: list[str]) -> dict:
    """The mapping at ``names`` in ``values``, each mapping on the way copied (so the caller's
    tree is left as it was) and created when missing."""
    node = values
    for name in names:
        child = node.get(name)
        node[name] = dict(child) if isinstance(child, dict) else {}
        node = node[name]
    return node

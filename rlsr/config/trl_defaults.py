"""TRL's own fields and defaults, read from TRL's config dataclasses rather than restated here.

A recipe that leaves ``grpo.max_completion_length`` unset trains with whatever the installed
``trl.GRPOConfig`` declares (512 in TRL 1.16); every place that needs that value (held-out
budget, vLLM context, Slurm's server length, checks) asks ``grpo_default`` so a TRL upgrade
cannot leave a second, stale copy behind.

The declarations are read from the installed source (``ast``: the class, then its bases
``_BaseConfig`` and ``transformers.TrainingArguments``) instead of importing ``trl``: importing
``trl.GRPOConfig`` imports torch and transformers (5-8 s on a 2-core machine), which a config
typo should not cost (``train.py`` checks the whole config before it imports the trainer). A
default that is not a literal (``optim``'s depends on the torch version), or a class laid out
in a way this reader does not follow, is read from the imported class instead: slower, never
different. ``tests/test_trl_defaults.py`` compares every name and literal default with the
imported dataclasses.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import importlib.util
from functools import cache
from pathlib import Path
from typing import Any

# Where each class of the chain is declared: (installed package, file inside it, importable
# module). A base outside this table sends the reader to the imported class.
_DECLARED = {
    "GRPOConfig": ("trl", "trainer/grpo_config.py", "trl"),
    "SFTConfig": ("trl", "trainer/sft_config.py", "trl"),
    "_BaseConfig": ("trl", "trainer/base_config.py", "trl.trainer.base_config"),
    "TrainingArguments": ("transformers", "training_args.py", "transformers"),
}
_NOT_LITERAL = object()  # a default this reader cannot evaluate without running TRL's code


class _Unreadable(Exception):
    """The source is not laid out as this reader expects (read the imported class instead)."""


def _package_dir(package: str) -> Path:
    spec = importlib.util.find_spec(package)  # a top-level name: locates without importing
    if spec is None or not spec.submodule_search_locations:
        raise _Unreadable(f"{package} is not installed as a package")
    return Path(next(iter(spec.submodule_search_locations)))


def _default_of(value: ast.expr | None) -> Any:
    """The default a dataclass field declares (``dataclasses.MISSING`` for none)."""
    if value is None:
        return dataclasses.MISSING
    if isinstance(value, ast.Call) and getattr(value.func, "id", None) == "field":
        keywords = {k.arg: k.value for k in value.keywords}
        if "default" in keywords:
            return _literal(keywords["default"])
        factory = keywords.get("default_factory")
        if factory is None:
            return dataclasses.MISSING
        if isinstance(factory, ast.Name) and factory.id in ("list", "dict"):
            return {"list": [], "dict": {}}[factory.id]
        if isinstance(factory, ast.Lambda):
            return _literal(factory.body)
        return _NOT_LITERAL
    return _literal(value)


def _literal(node: ast.expr) -> Any:
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return _NOT_LITERAL


@cache
def _declared_fields(class_name: str) -> dict[str, Any]:
    """``{field: default}`` of ``class_name`` and its bases, read from source (bases first)."""
    if class_name not in _DECLARED:
        raise _Unreadable(f"no known source for {class_name}")
    package, relative, _ = _DECLARED[class_name]
    path = _package_dir(package) / relative
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    except (OSError, SyntaxError) as err:
        raise _Unreadable(str(err)) from None
    found = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == class_name]
    if len(found) != 1:
        raise _Unreadable(f"{class_name} not declared once in {path}")
    node = found[0]
    out: dict[str, Any] = {}
    for base in node.bases:
        name = getattr(base, "id", None) or getattr(base, "attr", None)
        if name != "object":
            out.update(_declared_fields(name))
    for item in node.body:
        if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
            if "ClassVar" in ast.unparse(item.annotation):
                continue
            out[item.target.id] = _default_of(item.value)
    return out


@cache
def _imported_fields(class_name: str) -> dict[str, Any]:
    """``{field: default}`` of the imported class (imports trl: torch, transformers)."""
    module = importlib.import_module(_DECLARED[class_name][2])
    out = {}
    for f in dataclasses.fields(getattr(module, class_name)):
        if f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = f.default_factory()
        else:
            out[f.name] = dataclasses.MISSING
    return out


def config_fields(class_name: str) -> dict[str, Any]:
    """``{field: default}`` of ``trl.<class_name>`` (``GRPOConfig``/``SFTConfig``), every
    dataclass field included; ``dataclasses.MISSING`` for a field without a default."""
    try:
        fields = _declared_fields(class_name)
    except _Unreadable:
        return _imported_fields(class_name)
    if any(v is _NOT_LITERAL for v in fields.values()):
        fields = {
            k: (_imported_fields(class_name)[k] if v is _NOT_LITERAL else v)
            for k, v in fields.items()
        }
    return fields


def config_field_names(class_name: str) -> frozenset[str]:
    """The field names of ``trl.<class_name>``, read without importing TRL."""
    try:
        return frozenset(_declared_fields(class_name))
    except _Unreadable:
        return frozenset(_imported_fields(class_name))


def _default(class_name: str, name: str) -> Any:
    try:
        value = _declared_fields(class_name)[name]
    except _Unreadable:
        value = _imported_fields(class_name)[name]
    if value is _NOT_LITERAL:
        value = _imported_fields(class_name)[name]
    if value is dataclasses.MISSING:
        raise KeyError(name)
    return value


def grpo_default(name: str) -> Any:
    """``trl.GRPOConfig``'s default for field ``name`` (KeyError for a name it lacks)."""
    return _default("GRPOConfig", name)


def sft_default(name: str) -> Any:
    """``trl.SFTConfig``'s default for field ``name`` (KeyError for a name it lacks)."""
    return _default("SFTConfig", name)


def grpo_get(section, name: str) -> Any:
    """``section[name]`` when the recipe sets it, else TRL's ``GRPOConfig`` default."""
    if section is not None and name in section:
        return section[name]
    return grpo_default(name)

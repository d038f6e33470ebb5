"""What every settings check is written with: ``ConfigError`` (names the dotted field and the
fix), ``check``, the number predicates and the closest-name hint (here, below the config and
the evaluation protocol that both use them)."""

from __future__ import annotations

import difflib
import math

__all__ = ["ConfigError", "check", "is_int", "is_number", "closest_hint"]


class ConfigError(ValueError):
    """A configuration value is wrong. ``field`` is the dotted key (e.g. ``grpo.num_generations``)."""

    def __init__(self, field_name: str, message: str):
        self.field = field_name
        super().__init__(f"{field_name}: {message}")


def check(condition: bool, field_name: str, message: str) -> None:
    """Raise ``ConfigError(field_name, message)`` unless ``condition``."""
    if not condition:
        raise ConfigError(field_name, message)


def is_int(value) -> bool:
    """An int that is not a bool (YAML's ``true`` is not a count)."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value) -> bool:
    """A finite int or float (not a bool)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def closest_hint(name: str, options) -> str:
    """`` Did you mean 'x'?`` for the option closest to ``name`` (empty when none is close)."""
    match = difflib.get_close_matches(name, list(options), n=1)
    return f" Did you mean {match[0]!r}?" if match else ""

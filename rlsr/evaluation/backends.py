"""Deprecated path of ``rlsr.generation.backends`` (every backend lives in ``rlsr.generation``).

Importing it warns and hands out ``rlsr.generation.backends``' names; import that module
instead. It will be removed in a later release.
"""

import warnings

from rlsr.generation import backends as _moved

__all__ = _moved.__all__

warnings.warn(
    "rlsr.evaluation.backends is deprecated: import rlsr.generation.backends (same names).",
    DeprecationWarning,
    stacklevel=2,
)


def __getattr__(name: str):
    return getattr(_moved, name)

"""Deprecated path of ``rlsr.launch`` (the distributed launch; this module was renamed).

Importing it warns and hands out ``rlsr.launch``'s names; import ``rlsr.launch`` instead. It will
be removed in a later release.
"""

import warnings

from rlsr import launch as _moved

__all__ = _moved.__all__

warnings.warn(
    "rlsr.engines is deprecated: import rlsr.launch instead (same names).",
    DeprecationWarning,
    stacklevel=2,
)


def __getattr__(name: str):
    return getattr(_moved, name)

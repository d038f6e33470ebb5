"""Deprecated path of ``rlsr.evaluation.heldout`` (the held-out evaluation during training;
this module was renamed: "held-out" is the one word for it).

Importing it warns and hands out ``rlsr.evaluation.heldout``'s names; import
``rlsr.evaluation.heldout`` instead. It will be removed in a later release.
"""

import warnings

from rlsr.evaluation import heldout as _moved

__all__ = _moved.__all__

warnings.warn(
    "rlsr.evaluation.in_training is deprecated: import rlsr.evaluation.heldout instead "
    "(same names).",
    DeprecationWarning,
    stacklevel=2,
)


def __getattr__(name: str):
    return getattr(_moved, name)

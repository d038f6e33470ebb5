"""Deprecated path of ``rlsr.run_layout`` (the run folder's layout; it describes more than the
evaluation's output, so it moved to the package's lower floors).

Importing it warns and hands out ``rlsr.run_layout``'s names, and ``python -m
rlsr.evaluation.layout NAME...`` (Slurm scripts copied from an older rlsr) still prints the
names, with the notice on stderr. Use ``rlsr.run_layout``; this module will be removed in a later
release.
"""

import sys
import warnings

from rlsr import run_layout as _moved

__all__ = _moved.__all__

_NOTICE = "rlsr.evaluation.layout is deprecated: use rlsr.run_layout instead (same names)."


def __getattr__(name: str):
    return getattr(_moved, name)


if __name__ == "__main__":
    print(
        "python -m rlsr.evaluation.layout is deprecated: run python -m rlsr.run_layout instead.",
        file=sys.stderr,
    )
    raise SystemExit(_moved.main())
warnings.warn(_NOTICE, DeprecationWarning, stacklevel=2)

"""Moved to ``rlsr.generation.backends`` (shared by evaluation and serving). This module only
re-exports it for code written against the old path; rlsr's own modules, tests and scripts import
``rlsr.generation.backends``."""

from rlsr.generation.backends import *  # noqa: F403
from rlsr.generation.backends import __all__  # noqa: F401

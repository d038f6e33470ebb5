#!/usr/bin/env python3
"""Print the items (task names or groups) whose tasks are scored by the LLM judge.

    python slurm/needs_judge.py hotpot-id hotpot-ood trivia
    hotpot-ood
    trivia

evaluate.slurm starts a judge server only when this prints something (``--judge auto``).
Exit status 2 with a message on stderr for an unknown name.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

REGISTRY_FILE = Path(__file__).resolve().parent.parent / "rlsr" / "data" / "registry.py"


def load_registry() -> ModuleType:
    """``rlsr.data.registry`` alone: it needs only the standard library, while importing the
    ``rlsr.data`` package pulls in ``datasets`` (about 2 s at every job start). Falls back to the
    package import if the file cannot be loaded on its own."""
    try:
        spec = importlib.util.spec_from_file_location("_rlsr_data_registry", REGISTRY_FILE)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses look their module up while building
        spec.loader.exec_module(module)
        return module
    except Exception:
        sys.modules.pop("_rlsr_data_registry", None)
        import rlsr.data

        return rlsr.data


def items_needing_judge(items: list[str]) -> list[str]:
    """The items (task names or ``rlsr.data.GROUPS`` keys) with an ``llm_judge`` task.
    User tasks (docs/tasks.md) are known to the package, which reads ``$RLSR_TASKS_PATH``, or
    registered in this process (slurm/sweep.py's ``--tasks-dir``)."""
    registry = load_registry()
    try:
        return _needing(registry, items)
    except ValueError:
        if not os.environ.get("RLSR_TASKS_PATH") and "rlsr.data" not in sys.modules:
            raise
        import rlsr.data

        return _needing(rlsr.data, items)


def _needing(registry, items: list[str]) -> list[str]:
    return [
        item
        for item in items
        if any(
            registry.get_spec(name).verifier == "llm_judge" for name in registry.resolve_tasks(item)
        )
    ]


def main(argv: list[str]) -> int:
    try:
        needing = items_needing_judge(argv)
    except (ImportError, ValueError) as err:
        print(f"needs_judge: {err}", file=sys.stderr)
        return 2
    for item in needing:
        print(item)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

#!/usr/bin/env python3
"""Print the dataset items (names or groups) whose datasets are scored by the LLM judge.

    python slurm/needs_judge.py hotpot-id hotpot-ood trivia
    hotpot-ood
    trivia

evaluate.slurm starts a judge server only when this prints something (``--judge auto``).
Exit status 2 with a message on stderr for an unknown name.
"""

from __future__ import annotations

import sys


def items_needing_judge(items: list[str]) -> list[str]:
    """The items (dataset names or ``rlsr.data.GROUPS`` keys) with an ``llm_judge`` dataset."""
    from rlsr.data import get_spec, resolve_datasets

    return [
        item
        for item in items
        if any(get_spec(name).verifier == "llm_judge" for name in resolve_datasets(item))
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

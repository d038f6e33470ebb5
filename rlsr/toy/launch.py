"""Run ``train.py`` or the ``rlsr`` command with the toy tokenizer loadable (rlsr.toy.compat).

    python -m rlsr.toy.launch train.py recipe=toy method=rlsr model.name_or_path=DIR data.path=DIR
    python -m rlsr.toy.launch rlsr evaluate --model DIR --datasets tiny --data-path tiny=DIR ...

Installs ``patch_auto_tokenizer`` and then runs the real entry point unchanged in this process
(``runpy`` for train.py, ``rlsr.cli.main`` for ``rlsr``). Needed only while the trainer and the
evaluator load tokenizers with plain ``AutoTokenizer`` (see docs/toy.md).
"""

from __future__ import annotations

import runpy
import sys

from rlsr.toy.compat import patch_auto_tokenizer


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    patch_auto_tokenizer()
    target, rest = argv[0], argv[1:]
    if target == "rlsr":
        from rlsr.cli import main as rlsr_main

        return rlsr_main(rest)
    if target.endswith(".py"):
        sys.argv = [target, *rest]
        runpy.run_path(target, run_name="__main__")
        return 0
    print(f"unknown target {target!r}; use train.py or rlsr.", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())

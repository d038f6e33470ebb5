"""The ``rlsr`` command. Each sub-command lives in its own module and registers itself here."""

from __future__ import annotations

import argparse
import importlib
import sys

# (module, function) pairs; each function takes the argparse sub-parsers object and adds its
# sub-command with ``set_defaults(func=...)``. Imported lazily so ``rlsr --help`` stays fast.
_SUBCOMMANDS = [
    ("rlsr.data.cli", "register"),
    ("rlsr.evaluation.cli", "register"),
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rlsr", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for module_name, func_name in _SUBCOMMANDS:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as err:
            if err.name == module_name:
                continue
            raise
        getattr(module, func_name)(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    result = args.func(args)
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())

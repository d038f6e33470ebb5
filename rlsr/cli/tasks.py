"""``rlsr tasks``'s flags (what it does: ``rlsr.cli.tasks_cli``)."""

from __future__ import annotations

import argparse

__all__ = ["register"]


def register(subparsers) -> argparse.ArgumentParser:
    """Add ``rlsr tasks [list|download|show]`` to the ``rlsr`` command."""
    parser = subparsers.add_parser("tasks", help="list, download or inspect the tasks")
    data_dir_help = "folder with <dataset>/ copies to check (default: $RLSR_DATA_DIR)"
    parser.add_argument("--data-dir", help=data_dir_help)
    sub = parser.add_subparsers(dest="tasks_command")
    lister = sub.add_parser("list", help="registry table (the default)")
    lister.add_argument("--data-dir", default=argparse.SUPPRESS, help=data_dir_help)
    down = sub.add_parser("download", help="save datasets from the hub for offline use")
    down.add_argument("names", help="task names, comma separated, or a group")
    down.add_argument("--out", required=True, help="folder; each dataset goes to OUT/<name>")
    show = sub.add_parser("show", help="print the first formatted example")
    show.add_argument("name")
    for flag in ("--path", "--split", "--data-dir"):
        show.add_argument(flag)
    show.add_argument("--system-prompt", help="simple, long, none or a task's prompt name")
    show.add_argument("--columns", nargs="*", help="FIELD=COLUMN overrides")
    return parser

"""What ``rlsr tasks [list|download|show]`` does (its flags: ``rlsr.cli.tasks``)."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from rlsr.cli.evaluate import name_value_pairs
from rlsr.data.loading import DATA_DIR_ENV, download_dataset, load_examples
from rlsr.data.registry import GROUPS, REGISTRY, resolve_tasks

__all__ = ["run_tasks", "format_table", "available_here"]


def available_here(name: str, data_dir: str | os.PathLike | None = None) -> str:
    """Where ``rlsr evaluate`` finds ``name`` without the hub: "bundled", the local copy
    ``<data_dir or $RLSR_DATA_DIR>/<name>``, a task's own data path (``yes: PATH`` or
    ``no: PATH missing``), or "no" (then only the hub has it)."""
    spec = REGISTRY[name]
    if spec.task is not None and spec.task.data_path is not None:
        present = Path(spec.task.data_path).exists()
        return f"{'yes' if present else 'no'}: {spec.task.data_path}{'' if present else ' missing'}"
    if spec.hf_id is None:
        return "bundled"
    root = data_dir if data_dir is not None else os.environ.get(DATA_DIR_ENV)
    if root and (Path(root) / name).exists():
        return str(Path(root) / name)
    return "no"


def format_table(data_dir: str | os.PathLike | None = None) -> str:
    """The registry as a plain-text table: name, source, splits with sizes, verifier, prompt,
    groups, available here (``available_here``), then how to get the missing ones."""
    header = ("name", "source", "splits (rows)", "verifier", "prompt", "groups", "available here")
    rows = [header]
    for spec in REGISTRY.values():
        splits = ", ".join(
            f"{s}{'*' if s == spec.split else ''}={n:,}" for s, n in spec.sizes.items()
        )
        source = spec.hf_id or "bundled"
        if spec.task is not None:  # a user task: its split names, the file it came from
            names = dict.fromkeys([spec.train_split, spec.split])
            splits = ", ".join(f"{s}{'*' if s == spec.split else ''}" for s in names)
            source = f"task {spec.task.file or '(Python)'}" + (
                f" ({spec.hf_id})" if spec.hf_id else ""
            )
        alt = f" (alt: {', '.join(spec.alt_verifiers)})" if spec.alt_verifiers else ""
        rows.append(
            (
                spec.name,
                source,
                splits,
                spec.verifier + alt,
                spec.system_prompt,
                ", ".join(spec.groups) or "-",
                available_here(spec.name, data_dir),
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines += [
        "",
        "* = default (evaluation) split. Tasks: your own, from task files "
        "(--tasks-dir DIR, $RLSR_TASKS_PATH; docs/tasks.md).",
        "Groups (paper Sec. 4.1):",
        *(f"  {g}: {', '.join(m)}" for g, m in GROUPS.items()),
        "",
        "Available here = bundled, or a local copy under --data-dir DIR (or $RLSR_DATA_DIR);",
        '"no": loaded from the Hugging Face hub, if reachable. Without hub access: on a machine',
        "with it run `rlsr tasks download NAMES --out DIR`, copy DIR here and pass",
        "`--data-dir DIR` (or set RLSR_DATA_DIR=DIR), or give a file or folder with",
        "`--data-path NAME=PATH` (rlsr evaluate) / `--path PATH` (rlsr tasks show).",
    ]
    return "\n".join(lines)


def run_tasks(args: argparse.Namespace) -> int:
    """``rlsr tasks [list|download|show]``: the listing unless a sub-command is given."""
    if args.tasks_command == "download":
        for name in resolve_tasks(args.names):
            hf_id = REGISTRY[name].hf_id
            print(
                f"{name}: "
                + (f"saved to {download_dataset(name, args.out)}" if hf_id else "bundled, skipped")
            )
    elif args.tasks_command == "show":
        ds = load_examples(
            args.name,
            path=args.path,
            split=args.split,
            limit=1,
            data_dir=args.data_dir,
            system_prompt=args.system_prompt,
            columns=name_value_pairs(args.columns or [], "--columns"),
        )
        print(json.dumps(ds[0], indent=2, ensure_ascii=False))
    else:
        print(format_table(getattr(args, "data_dir", None)))
    return 0

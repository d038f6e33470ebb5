"""What ``rlsr tasks`` does (its flags: ``rlsr.cli.tasks``): list the registry (with what is
available on this machine); ``rlsr tasks download NAME --out DIR``; ``rlsr tasks show NAME``
prints the first formatted example (reads local copies via --data-dir)."""

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
        if spec.task is not None:  # a user task: its split names, the file it came from
            names = dict.fromkeys([spec.train_split, spec.split])
            splits = ", ".join(f"{s}{'*' if s == spec.split else ''}" for s in names)
        verifier = spec.verifier + (
            f" (alt: {', '.join(spec.alt_verifiers)})" if spec.alt_verifiers else ""
        )
        rows.append(
            (
                spec.name,
                (
                    f"task {spec.task.file or '(Python)'}"
                    + (f" ({spec.hf_id})" if spec.hf_id else "")
                )
                if spec.task is not None
                else spec.hf_id or "bundled",
                splits,
                verifier,
                spec.system_prompt,
                ", ".join(spec.groups) or "-",
                available_here(spec.name, data_dir),
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines.append("")
    lines.append(
        "* = default (evaluation) split. Tasks: your own, from task files "
        "(--tasks-dir DIR, $RLSR_TASKS_PATH; docs/tasks.md)."
    )
    lines.append("Groups (paper Sec. 4.1):")
    lines += [f"  {g}: {', '.join(m)}" for g, m in GROUPS.items()]
    lines += [
        "",
        "Available here = bundled, or a local copy under --data-dir DIR (or $RLSR_DATA_DIR);",
        '"no": loaded from the Hugging Face hub, if reachable. Without hub access: on a machine',
        "with it run `rlsr tasks download NAMES --out DIR`, copy DIR here and pass",
        "`--data-dir DIR` (or set RLSR_DATA_DIR=DIR), or give a file or folder with",
        "`--data-path NAME=PATH` (rlsr evaluate) / `--path PATH` (rlsr tasks show).",
    ]
    return "\n".join(lines)


def _list(args: argparse.Namespace) -> int:
    print(format_table(getattr(args, "data_dir", None)))
    return 0


def _download(args: argparse.Namespace) -> int:
    for name in resolve_tasks(args.names):
        if REGISTRY[name].hf_id is None:
            print(f"{name}: bundled, skipped")
            continue
        print(f"{name}: saved to {download_dataset(name, args.out)}")
    return 0


def _show(args: argparse.Namespace) -> int:
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
    return 0


def run_tasks(args: argparse.Namespace) -> int:
    """``rlsr tasks [list|download|show]``: the listing unless a sub-command is given."""
    run = {"download": _download, "show": _show}.get(args.tasks_command, _list)
    return run(args)

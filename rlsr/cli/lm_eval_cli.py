"""What ``rlsr lm-eval tasks`` does (its flags: ``rlsr.cli.lm_eval``): write rlsr's tasks as an
lm-evaluation-harness task folder and print the ``lm_eval`` command that runs them
(docs/lm_eval.md; the folder: ``rlsr.lm_eval.pack``)."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from rlsr import __version__
from rlsr.cli.evaluate import name_value_pairs
from rlsr.cli.evaluate_setup import task_verifiers
from rlsr.cli.tasks_cli import available_here
from rlsr.data import REGISTRY, get_spec, resolve_tasks, tasks_system_prompt
from rlsr.data.loading import load_examples
from rlsr.lm_eval.pack import TAG, write_pack
from rlsr.run.eval_protocol import EvalProtocol

__all__ = ["run_tasks"]

_JUDGE = "llm_judge"


def _default_tasks(data_dir) -> list[str]:
    """Every registered task whose rows are here and whose verifier is not the LLM judge."""
    return [
        name
        for name, spec in REGISTRY.items()
        if spec.verifier != _JUDGE and not available_here(name, data_dir).startswith(("no", "no:"))
    ]


def _task_files(names: list[str]) -> list[str]:
    files = {get_spec(n).task.file for n in names if get_spec(n).task is not None}
    return sorted(str(Path(f).resolve()) for f in files if f)


def run_tasks(args) -> int:
    """Load each task's rows as rlsr evaluate would, then write the folder and print the
    command. Every task is loaded before anything is written."""
    EvalProtocol(max_new_tokens=args.max_new_tokens)  # the protocol's own check of the budget
    if args.limit is not None and args.limit < 1:
        raise ValueError(f"--limit must be >= 1; got {args.limit}.")
    names = resolve_tasks(args.tasks) if args.tasks else _default_tasks(args.data_dir)
    if not names:
        raise ValueError("no task has its rows here; name them with --tasks (with --data-dir or "
                         "--data-path), see `rlsr tasks`.")  # fmt: skip
    paths = name_value_pairs(args.data_path, "--data-path")
    columns = name_value_pairs(args.columns, "--columns")
    verifiers = task_verifiers(args, names)
    for name, vname in verifiers.items():
        if vname == _JUDGE:
            raise ValueError(
                f"task {name}: its verifier is the LLM judge, which an lm-eval task cannot call; "
                f"pass --verifier {name}=exact_match, or score lm-eval's --log_samples output "
                "with `rlsr evaluate --from-samples FILE --tasks NAME --judge-base-url URL`."
            )
    system_prompt = args.system_prompt or (tasks_system_prompt(args.tasks) if args.tasks else None)
    loaded = {
        name: (
            load_examples(name, path=paths.get(name), split=args.split, limit=args.limit,
                          system_prompt=system_prompt, data_dir=args.data_dir, columns=columns),
            verifiers[name],
        )
        for name in names
    }  # fmt: skip
    header = (
        f"# Written by `rlsr lm-eval tasks` (rlsr {__version__}): docs/lm_eval.md.\n"
        f"# argv: {shlex.join(sys.argv[1:])}\n"
    )
    out = Path(args.output_dir)
    task_names = write_pack(out, loaded, response_format=args.response_format,
                            max_new_tokens=args.max_new_tokens, task_files=_task_files(names),
                            header=header)  # fmt: skip
    include = shlex.quote(str(out.resolve()))
    print(f"wrote {len(task_names)} lm-eval task(s) to {out} (tag {TAG}): {', '.join(task_names)}")
    print(
        "run: lm_eval --model hf --model_args pretrained=MODEL --apply_chat_template "
        f"--include_path {include} --tasks {','.join(task_names)} --log_samples "
        "--output_path OUT"
    )
    return 0

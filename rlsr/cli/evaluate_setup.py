"""What ``rlsr evaluate`` (and ``--from-samples``) resolves from its flags before it writes: the
flag checks (one-line ``ValueError`` naming the flag), the (folder, dataset, split) jobs, the
verifiers and the judge, the system prompt and the run.json a resume is compared against."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from rlsr.cli.evaluate import name_value_pairs
from rlsr.data import get_spec, task_records, tasks_system_prompt, version_records
from rlsr.data.loading import build_verifier
from rlsr.evaluation.run.judge import (
    DEFAULT_JUDGE_MODEL,
    RecordingJudge,
    backend_judge_fn,
    check_judge_server,
    openai_judge_fn,
)
from rlsr.evaluation.run.runner import EvalSettings
from rlsr.evaluation.run.summary import scorer_value
from rlsr.generation.backends import make_backend
from rlsr.generation.endpoint import ENDPOINT_BACKENDS
from rlsr.run.eval_protocol import protocol_from_args
from rlsr.run.run_layout import CONFIG_FIELDS, DEPLOYMENT_FILE, move_aside
from rlsr.verifiers import VERIFIERS, is_plugin_name

__all__ = [
    "looks_like_path",
    "resolved_system_prompt",
    "validate_flags",
    "evaluation_jobs",
    "task_verifiers",
    "judge_kind",
    "check_judge",
    "build_judge",
    "task_verifier",
    "start_over",
    "summary_entry",
    "run_config",
]


def resolved_system_prompt(args) -> str | None:
    """``--system-prompt``, else the training prompt of the ``--tasks`` group (Sec. C.5)."""
    if args.system_prompt:
        return args.system_prompt
    return tasks_system_prompt(args.tasks)


def looks_like_path(name: str) -> bool:
    """A local path rather than a hub id: absolute, relative with ./ or ../, under ~, or with
    a doubled separator."""
    return name.startswith(("/", "./", "../", "~")) or os.sep + os.sep in name


_POSITIVE_INTS = ("limit", "judge_batch_size")  # the protocol's own are checked by EvalProtocol


def validate_flags(args) -> EvalSettings:
    """Option checks that need no file or model: each a one-line ValueError naming the flag.
    Returns the run's ``EvalSettings`` (the protocol's flags, checked by ``EvalProtocol``)."""
    settings = protocol_from_args(args, EvalSettings, progress=not args.no_progress)
    if args.data_parallel_size > 1:  # refused before anything loads
        raise ValueError(
            f"--data-parallel-size {args.data_parallel_size}: vLLM's offline LLM does not support "
            "data parallelism in one process (0.31 and 0.32 refuse it). Shard instead: one "
            "`rlsr evaluate` per GPU, e.g. the Slurm array of slurm/evaluate.slurm (one "
            "checkpoint x task pair per array task, docs/slurm.md), or --tensor-parallel-size N for one "
            "model over N GPUs."
        )
    endpoint = args.backend in ENDPOINT_BACKENDS
    if endpoint and not args.base_url:
        raise ValueError(f"--backend {args.backend} needs --base-url, e.g. "
                         "http://localhost:8000/v1.")  # fmt: skip
    if not endpoint and (args.base_url or args.audit_deployment):
        flag = "--base-url" if args.base_url else "--audit-deployment"
        raise ValueError(f"{flag} needs --backend openai-chat or openai-completions.")
    if args.audit_deployment and not Path(args.audit_deployment).is_file():
        raise ValueError(f"--audit-deployment {args.audit_deployment}: no such file; give the "
                         f"{DEPLOYMENT_FILE} that `rlsr serve --threshold` serves.")  # fmt: skip
    if endpoint and args.adapter:
        raise ValueError("--adapter: an endpoint serves its own weights; give the served LoRA's "
                         "name as --model (vllm serve --lora-modules NAME=PATH).")  # fmt: skip
    if not endpoint and looks_like_path(args.model) and not Path(args.model).expanduser().is_dir():
        raise ValueError(f"--model {args.model}: no such folder; give a model folder or a hub id.")
    if Path(args.output_dir).exists() and not Path(args.output_dir).is_dir():
        raise ValueError(f"--output-dir {args.output_dir} is a file; give a folder.")
    for dest in _POSITIVE_INTS:
        value = getattr(args, dest)
        if value is not None and value < 1:
            raise ValueError(f"--{dest.replace('_', '-')} must be >= 1; got {value}.")
    if args.judge_max_retries < 0 or args.judge_timeout <= 0:
        raise ValueError("--judge-max-retries must be >= 0, --judge-timeout > 0.")
    if args.deployment_target is not None and not 0 < args.deployment_target <= 1:
        raise ValueError("--deployment-target must be in (0, 1], e.g. 0.75.")
    if args.deployment_target is not None and len(args.deployment_splits.split(",")) != 2:
        raise ValueError("--deployment-splits needs two splits, e.g. validation,test.")
    if args.judge_base_url and args.judge_backend not in (None, "openai"):
        raise ValueError("--judge-base-url needs --judge-backend openai (or leave it unset).")
    return settings


def evaluation_jobs(args, names: list[str]) -> list[tuple[str, str, str]]:
    """(output folder, dataset, split), each (dataset, split) once. Folders: the dataset's name,
    or name@split with --split; the deployment splits add name@split unless already evaluated:
    `--tasks medqa --deployment-target 0.75` evaluates medqa's test split once (as `medqa`)."""
    folders: dict[tuple[str, str], str] = {}
    for name in names:
        split = args.split or get_spec(name).split
        folders.setdefault((name, split), name if args.split is None else f"{name}@{split}")
    if args.deployment_target is not None:
        for split in args.deployment_splits.split(","):
            folders.setdefault((args.deployment_task, split),
                               f"{args.deployment_task}@{split}")  # fmt: skip
    return [(folder, name, split) for (name, split), folder in folders.items()]


def task_verifiers(args, names: list[str]) -> dict[str, str]:
    """``{task: verifier name}`` of ``names``: ``--verifier NAME=VERIFIER``, else the task's own;
    an unknown verifier is refused."""
    override = name_value_pairs(args.verifier, "--verifier")
    verifiers = {n: override.get(n, get_spec(n).verifier) for n in names}
    for name, vname in {**verifiers, **override}.items():
        if vname not in VERIFIERS and not is_plugin_name(vname):
            raise ValueError(
                f"--verifier {name}={vname}: unknown verifier; choose one of {sorted(VERIFIERS)}."
            )
    return verifiers


def judge_kind(args) -> str:
    kind = args.judge_backend or ("openai" if args.judge_base_url else args.backend)
    if kind in ENDPOINT_BACKENDS:
        raise ValueError(
            f"an LLM-judge task with --backend {args.backend} needs --judge-base-url (the "
            "judge's OpenAI-compatible server) or --judge-backend transformers|vllm."
        )
    if kind == "openai" and not args.judge_base_url:
        raise ValueError("--judge-backend openai needs --judge-base-url.")
    return kind


def check_judge(args) -> None:
    """A judge server (``--judge-base-url``) that answers and serves the judge model, checked
    before any model loads or file is written."""
    if judge_kind(args) == "openai":
        check_judge_server(
            args.judge_base_url,
            args.judge_model or DEFAULT_JUDGE_MODEL,
            timeout_s=min(args.judge_timeout, 10.0),
        )


def build_judge(args, backend_kwargs: dict) -> RecordingJudge:
    """The LLM judge of ``--judge-*`` (``backend_kwargs``: a local judge model's backend's)."""
    model = args.judge_model or DEFAULT_JUDGE_MODEL
    kind = judge_kind(args)
    if kind == "openai":
        fn = openai_judge_fn(
            args.judge_base_url,
            model,
            timeout_s=args.judge_timeout,
            max_retries=args.judge_max_retries,
        )
    else:
        kwargs = {**backend_kwargs, "batch_size": args.judge_batch_size}
        fn = backend_judge_fn(make_backend(kind, model, None, **kwargs))
    return RecordingJudge(fn)


def task_verifier(args, name: str, vname: str, judge: RecordingJudge | None):
    """Task ``name``'s verifier ``vname`` with its task-file options; llm_judge gets ``judge``."""
    if vname != "llm_judge":
        return build_verifier(name, vname)
    return build_verifier(name, vname, judge_fn=judge, max_answer_chars=args.judge_max_answer_chars)


def start_over(args, out: Path) -> bool:
    """``--overwrite``: move ``out``'s results aside (said on stderr); True when it did."""
    if args.overwrite and out.is_dir() and any(out.iterdir()):
        print(f"moved the previous results to {move_aside(out)}", file=sys.stderr)
        return True
    return False


def summary_entry(metrics: dict) -> dict:
    """A dataset's summary.json entry: n, accuracy, AURC (None: n/a) and the no-verdict counts."""
    keys = ("unjudged", "unjudged_rate", "verifier_failures", "accuracy_judged")
    return {
        "n": metrics["n"],
        "accuracy": metrics["accuracy"],
        "aurc": scorer_value(metrics, "aurc"),
        **{k: metrics[k] for k in keys if k in metrics},
    }


def run_config(
    args, settings, fingerprint, system_prompt, verifier_names, columns, paths=None
) -> dict:
    """The run.json of this invocation (JSON types, so it compares equal to one read back)."""
    model = Path(args.model).expanduser()
    judged = "llm_judge" in verifier_names.values()
    # the protocol's sample-deciding fields first: the keys after them are what this run
    # resolved (system_prompt: the prompt the samples were rendered with, not the unset flag)
    config = {
        **{k: getattr(settings, k) for k in CONFIG_FIELDS if hasattr(settings, k)},
        "model": str(model.resolve()) if model.is_dir() else args.model,
        "adapter": fingerprint["path"] if fingerprint else None,
        "adapter_sha256": fingerprint["sha256"] if fingerprint else None,
        "adapter_files": fingerprint["files"] if fingerprint else None,
        "system_prompt": system_prompt,
        "columns": columns,
        "verifiers": verifier_names,
        "tasks": task_records(verifier_names),
        # what decides each dataset's verdicts (data files, plugin file, verifier options): a
        # rerun into this folder with another version is refused (docs/tasks.md, "Resuming")
        "versions": version_records(verifier_names, paths),
        "judge_model": (args.judge_model or DEFAULT_JUDGE_MODEL) if judged else None,
        "judge_max_answer_chars": args.judge_max_answer_chars if judged else None,
        "backend": args.backend,
        # which evaluation of the run this is: a recipe's named variant (heldout.variants), else none
        "protocol_variant": getattr(args, "protocol_variant", None),
        "argv": sys.argv[1:],  # holds no key: the key is only ever read from the environment
    }
    return json.loads(json.dumps(config))

"""``rlsr evaluate``, ``rlsr report`` and ``rlsr deploy`` (docs/evaluation.md)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from rlsr.config import resolve_model_path
from rlsr.data import GROUPS, get_spec, group_system_prompt, load_examples, resolve_datasets
from rlsr.evaluation.backends import make_backend, resolve_adapter
from rlsr.evaluation.deployment import deployment_markdown, deployment_rows
from rlsr.evaluation.judge import (
    DEFAULT_JUDGE_MODEL,
    RecordingJudge,
    backend_judge_fn,
    openai_judge_fn,
)
from rlsr.evaluation.report import build_report
from rlsr.evaluation.runner import EvalSettings, evaluate_dataset
from rlsr.evaluation.samples_io import json_safe, read_samples
from rlsr.evaluation.summary import scorer_arrays
from rlsr.verifiers import get_verifier

__all__ = ["register", "run_evaluate", "run_report", "run_deploy"]


class _DefaultsShown(argparse.HelpFormatter):
    """Appends ``(default: X)`` to options whose default is a real value (not None/False/[])."""

    def _get_help_string(self, action):
        text = action.help or ""
        default = action.default
        if default in (None, False, [], argparse.SUPPRESS) or "%(default)" in text:
            return text
        if action.option_strings and action.nargs != 0:
            text += " (default: %(default)s)"
        return text


def register(subparsers) -> None:
    ev = subparsers.add_parser(
        "evaluate",
        help="generate, verify and score a model (+ LoRA adapter) on datasets",
        usage="rlsr evaluate --model PATH [--adapter RUN] --datasets NAMES --output-dir DIR "
        "[options]",
        description="Paper protocol by default (Sec. C.5): greedy, 4,096 new tokens, the training "
        "system prompt, one response per question. Writes DIR/<dataset>/samples.jsonl, "
        "metrics.json, risk_coverage.png; resumes an interrupted run.",
        epilog="example: rlsr evaluate --model Qwen/Qwen2.5-7B --adapter runs/hotpot-rlsr "
        "--datasets hotpot-ood --output-dir evals/rlsr-seed0 --backend vllm. "
        "Details: docs/evaluation.md.",
        formatter_class=_DefaultsShown,
    )
    ev.add_argument(
        "--model",
        required=True,
        metavar="PATH",
        help="base model folder or hub id (`tiny-warm`: the model of recipe=tiny)",
    )
    ev.add_argument(
        "--adapter", metavar="RUN", help="LoRA adapter folder, checkpoint-N, or training output dir"
    )
    ev.add_argument(
        "--datasets",
        required=True,
        metavar="NAMES",
        help="comma list of names or a group (hotpot-id ...); `rlsr datasets` lists them",
    )
    ev.add_argument("--output-dir", required=True, metavar="DIR", help="results; rerun to resume")
    ev.add_argument("--backend", choices=("transformers", "vllm"), default="transformers")
    ev.add_argument(
        "--data-dir", help="folder with <dataset>/ copies (else $RLSR_DATA_DIR, then hub)"
    )
    ev.add_argument(
        "--data-path",
        action="append",
        default=[],
        metavar="NAME=PATH",
        help="read dataset NAME from PATH (file or folder); repeatable",
    )
    ev.add_argument(
        "--split", metavar="NAME", help="dataset split (default: each dataset's evaluation split)"
    )
    ev.add_argument(
        "--system-prompt",
        choices=("simple", "long"),
        help="default: the training domain's prompt when --datasets is a group, else each dataset's own",
    )
    ev.add_argument(
        "--verifier",
        action="append",
        default=[],
        metavar="NAME=VERIFIER",
        help="override a dataset's verifier (e.g. trivia=exact_match); repeatable",
    )
    ev.add_argument("--limit", type=int, metavar="N", help="first N questions per dataset")
    ev.add_argument("--batch-size", type=int, default=8, metavar="N", help="prompts per call")
    ev.add_argument(
        "--max-new-tokens", type=int, default=4096, metavar="N", help="response token budget"
    )
    ev.add_argument(
        "--temperature", type=float, default=0.0, help="0 = greedy (paper); Tab. 5 seeds use 0.3"
    )
    ev.add_argument("--top-p", type=float, default=1.0, metavar="P", help="nucleus sampling")
    ev.add_argument("--seed", type=int, default=0, help="sampling and bootstrap seed")
    ev.add_argument(
        "--fallback-max-new-tokens",
        type=int,
        default=64,
        metavar="N",
        help="token budget of each Sec. C.3 fallback continuation",
    )
    ev.add_argument("--no-fallbacks", action="store_true", help="skip the Sec. C.3 fallbacks")
    ev.add_argument(
        "--scorers", default="verbalized", help="comma list of verbalized,logprob,consistency"
    )
    ev.add_argument(
        "--consistency-k",
        type=int,
        default=8,
        metavar="K",
        help="samples of the consistency scorer",
    )
    ev.add_argument(
        "--consistency-temperature",
        type=float,
        default=0.7,
        metavar="T",
        help="sampling temperature of the consistency scorer",
    )
    ev.add_argument("--dcs", action="store_true", help="DCS with an IDK option on MCQ datasets")
    ev.add_argument(
        "--bootstrap",
        type=int,
        default=1000,
        metavar="N",
        help="bootstrap resamples for CIs (0 = off)",
    )
    ev.add_argument("--dtype", default="auto", help="auto, bfloat16, float16 or float32")
    ev.add_argument(
        "--trust-remote-code", action="store_true", help="run the model repo's own code (off)"
    )
    ev.add_argument("--no-progress", action="store_true", help="no progress bar (log files)")
    g = ev.add_argument_group("vLLM")
    g.add_argument("--tensor-parallel-size", type=int, default=1)
    g.add_argument("--data-parallel-size", type=int, default=1)
    g.add_argument(
        "--merge-adapter",
        action="store_true",
        help="merge LoRA into the weights instead of LoRARequest",
    )
    g.add_argument("--max-model-len", type=int)
    g.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    g.add_argument(
        "--enforce-eager",
        action="store_true",
        help="no torch.compile/CUDA graphs: slower decoding, engine starts in seconds (CPU tests)",
    )
    j = ev.add_argument_group("LLM judge (Sec. C.2)")
    j.add_argument("--judge-model", default=None, help="default meta-llama/Llama-3.1-8B-Instruct")
    j.add_argument(
        "--judge-backend",
        choices=("transformers", "vllm", "openai"),
        default=None,
        help="default: openai when --judge-base-url is set, else --backend",
    )
    j.add_argument("--judge-base-url", help="OpenAI-compatible server, e.g. http://host:8000/v1")
    j.add_argument("--judge-batch-size", type=int, default=16)
    j.add_argument("--judge-max-answer-chars", type=int, default=1000)
    d = ev.add_argument_group("risk-controlled deployment (Sec. 4.2)")
    d.add_argument(
        "--deployment-target", type=float, help="target accuracy; evaluates validation+test splits"
    )
    d.add_argument("--deployment-dataset", default="medqa")
    d.add_argument("--deployment-splits", default="validation,test")
    d.add_argument("--deployment-delta", type=float, default=0.1)
    ev.set_defaults(func=run_evaluate)

    rp = subparsers.add_parser("report", help="paper-style tables and curves over evaluation dirs")
    rp.add_argument(
        "dirs", nargs="*", help="evaluation output dirs (grouped by basename minus -seedN)"
    )
    rp.add_argument("--label", action="append", default=[], metavar="NAME=DIR1,DIR2")
    rp.add_argument(
        "--output",
        required=True,
        help="prefix: writes PREFIX.md, PREFIX.csv, PREFIX_risk_coverage.png, "
        "PREFIX_confidence_density.png",
    )
    rp.add_argument(
        "--family", choices=("hotpot", "bigmath"), help="ID/OOD split by training domain"
    )
    rp.add_argument("--id", dest="id_sets", help="ID datasets (names or group)")
    rp.add_argument("--ood", dest="ood_sets", help="OOD datasets (names or group)")
    rp.add_argument(
        "--gap-methods",
        metavar="NAMES",
        help="comma list: the methods Tab. 2 restricts to common questions (default: all)",
    )
    rp.set_defaults(func=run_report)

    dp = subparsers.add_parser(
        "deploy", help="risk-controlled threshold from validation/test samples"
    )
    dp.add_argument(
        "--validation", required=True, help="samples.jsonl (or its folder) of the validation split"
    )
    dp.add_argument("--test", required=True, help="samples.jsonl (or its folder) of the test split")
    dp.add_argument("--target", type=float, required=True, help="target accuracy, e.g. 0.75")
    dp.add_argument("--scorer", default="verbalized")
    dp.add_argument("--delta", type=float, default=0.1)
    dp.add_argument("--method-name", default="model")
    dp.add_argument("--output", help="write OUTPUT.json and OUTPUT.md")
    dp.set_defaults(func=run_deploy)


def _pairs(items: list[str], flag: str) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key or not value:
            raise SystemExit(f"{flag} {item!r}: expected NAME=VALUE.")
        out[key] = value
    return out


def _system_prompt(args) -> str | None:
    if args.system_prompt:
        return args.system_prompt
    return group_system_prompt(args.datasets) if args.datasets in GROUPS else None


def _looks_like_path(name: str) -> bool:
    return name.startswith(("/", "./", "../", "~")) or os.sep + os.sep in name


def _validate(args) -> None:
    if _looks_like_path(args.model) and not Path(args.model).expanduser().is_dir():
        raise SystemExit(f"--model {args.model}: no such folder; give a model folder or a hub id.")
    if args.limit is not None and args.limit < 1:
        raise SystemExit("--limit must be >= 1.")
    if args.deployment_target is not None and not 0 < args.deployment_target <= 1:
        raise SystemExit("--deployment-target must be in (0, 1], e.g. 0.75.")
    if args.judge_base_url and args.judge_backend not in (None, "openai"):
        raise SystemExit("--judge-base-url needs --judge-backend openai (or leave it unset).")


def _build_judge(args, backend_kwargs):
    model = args.judge_model or DEFAULT_JUDGE_MODEL
    kind = args.judge_backend or ("openai" if args.judge_base_url else args.backend)
    if kind == "openai":
        if not args.judge_base_url:
            raise SystemExit("--judge-backend openai needs --judge-base-url.")
        fn = openai_judge_fn(args.judge_base_url, model)
    else:
        kwargs = {**backend_kwargs, "batch_size": args.judge_batch_size}
        fn = backend_judge_fn(make_backend(kind, model, None, **kwargs))
    return RecordingJudge(fn)


def run_evaluate(args) -> int:
    _validate(args)
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    names = resolve_datasets(args.datasets)
    paths, verifier_override = (
        _pairs(args.data_path, "--data-path"),
        _pairs(args.verifier, "--verifier"),
    )
    settings = EvalSettings(
        max_new_tokens=args.max_new_tokens, temperature=args.temperature, top_p=args.top_p,
        seed=args.seed, batch_size=args.batch_size, fallbacks=not args.no_fallbacks,
        fallback_max_new_tokens=args.fallback_max_new_tokens,
        scorers=tuple(s.strip() for s in args.scorers.split(",") if s.strip()),
        consistency_k=args.consistency_k, consistency_temperature=args.consistency_temperature,
        dcs=args.dcs, bootstrap_resamples=args.bootstrap, progress=not args.no_progress,
    )  # fmt: skip
    adapter = resolve_adapter(args.adapter)
    jobs = []  # (output name, dataset, split)
    splits = [args.split] if args.split else [None]
    for name in names:
        for split in splits:
            jobs.append((name if split is None else f"{name}@{split}", name, split))
    if args.deployment_target is not None:
        for split in args.deployment_splits.split(","):
            job = (f"{args.deployment_dataset}@{split}", args.deployment_dataset, split)
            if job not in jobs:
                jobs.append(job)
    verifier_names = {n: verifier_override.get(n, get_spec(n).verifier) for _, n, _ in jobs}
    system_prompt = _system_prompt(args)
    backend_kwargs = dict(
        dtype=args.dtype, batch_size=args.batch_size, trust_remote_code=args.trust_remote_code,
        merge=args.merge_adapter if args.backend == "vllm" else True,
        tensor_parallel_size=args.tensor_parallel_size, data_parallel_size=args.data_parallel_size,
        max_model_len=args.max_model_len, gpu_memory_utilization=args.gpu_memory_utilization,
        seed=args.seed, enforce_eager=args.enforce_eager,
    )  # fmt: skip
    (out / "run.json").write_text(json.dumps({
        "model": args.model, "adapter": str(adapter) if adapter else None, "backend": args.backend,
        "datasets": [j[0] for j in jobs], "system_prompt": system_prompt, "argv": sys.argv[1:],
    }, indent=2) + "\n")  # fmt: skip
    # Load every dataset before the model so a missing one fails in seconds, not after loading.
    examples = {
        job: load_examples(name, path=paths.get(name), split=split, limit=args.limit,
                           system_prompt=system_prompt, data_dir=args.data_dir)
        for job, name, split in jobs
    }  # fmt: skip

    backend = make_backend(args.backend, resolve_model_path(args.model), adapter, **backend_kwargs)
    judge = _build_judge(args, backend_kwargs) if "llm_judge" in verifier_names.values() else None
    summary = {}
    for job, name, _ in jobs:
        vname = verifier_names[name]
        kwargs = (
            {"judge_fn": judge, "max_answer_chars": args.judge_max_answer_chars}
            if vname == "llm_judge"
            else {}
        )
        verifier = get_verifier(vname, **kwargs)
        try:
            metrics = evaluate_dataset(
                backend, examples[job], out / job, verifier=verifier, verifier_name=vname,
                settings=settings, judge=judge if vname == "llm_judge" else None, dataset_name=job,
            )  # fmt: skip
        finally:
            getattr(verifier, "close", lambda: None)()
        primary = metrics["scorers"][metrics["primary_scorer"]]
        summary[job] = {"n": metrics["n"], "accuracy": metrics["accuracy"], "aurc": primary["aurc"]}
        print(f"{job}: n={metrics['n']} acc={metrics['accuracy']:.3f} AURC={primary['aurc']:.3f}")
    if args.deployment_target is not None:
        _deploy_from_dirs(out, args)
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return 0


def _samples_of(path: str | Path) -> Path:
    p = Path(path)
    return p / "samples.jsonl" if p.is_dir() else p


def _deploy_files(val_path, test_path, target, scorer, delta):
    val, test = read_samples(_samples_of(val_path)), read_samples(_samples_of(test_path))
    if not val or not test:
        raise SystemExit(f"no samples in {val_path} or {test_path}.")
    vc, vo, _ = scorer_arrays(val, scorer)
    tc, to, _ = scorer_arrays(test, scorer)
    return deployment_rows(vc, vo, tc, to, target, delta=delta)


def _write_deployment(prefix: Path, method: str, rows: list[dict]) -> None:
    prefix.with_suffix(".json").write_text(
        json.dumps(json_safe({"method": method, "rows": rows}), indent=2) + "\n"
    )
    prefix.with_suffix(".md").write_text(deployment_markdown({method: rows}))


def _deploy_from_dirs(out: Path, args) -> None:
    val_split, test_split = args.deployment_splits.split(",")[:2]
    rows = _deploy_files(
        out / f"{args.deployment_dataset}@{val_split}", out / f"{args.deployment_dataset}@{test_split}",
        args.deployment_target, "verbalized", args.deployment_delta,
    )  # fmt: skip
    _write_deployment(out / "deployment", Path(args.output_dir).name, rows)
    print((out / "deployment.md").read_text())


def run_report(args) -> int:
    dirs = list(args.dirs)
    if not dirs and not args.label:
        raise SystemExit("give evaluation directories or --label NAME=DIR1,DIR2.")
    gap_methods = [m.strip() for m in (args.gap_methods or "").split(",") if m.strip()]
    paths = build_report(dirs, args.output, labels=args.label, family=args.family,
                         id_sets=args.id_sets, ood_sets=args.ood_sets,
                         gap_methods=gap_methods or None)  # fmt: skip
    print(paths["markdown"].read_text())
    return 0


def run_deploy(args) -> int:
    rows = _deploy_files(args.validation, args.test, args.target, args.scorer, args.delta)
    if args.output:
        _write_deployment(Path(args.output), args.method_name, rows)
    print(deployment_markdown({args.method_name: rows}))
    return 0

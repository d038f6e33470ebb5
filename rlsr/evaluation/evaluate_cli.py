"""``rlsr evaluate``: generate, verify and score a model on datasets (docs/evaluation.md).

``register`` adds the command and its flags; ``run_evaluate`` checks the flags
(``rlsr.evaluation.evaluate_setup``), loads datasets, model and judge, and only then writes into
``--output-dir`` (``rlsr.evaluation.runner`` per dataset; the deployment of
``--deployment-target`` and the audit of ``--audit-deployment`` after the last one)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

import datasets
import transformers

from rlsr.config import resolve_model_path
from rlsr.data import get_spec, resolve_tasks
from rlsr.data.loading import build_verifier, load_examples
from rlsr.eval_protocol import TEACHER_FORCED_SCORERS, add_protocol_flags
from rlsr.evaluation.audit import audit_deployment, audit_markdown
from rlsr.evaluation.budget import generation_budget
from rlsr.evaluation.deployment import (
    ALLOW_TRAIN_HELP,
    TRAINING_ROWS_FLAG,
    deployment_from_samples,
    deployment_method_name,
    write_deployment,
)
from rlsr.evaluation.evaluate_setup import (
    evaluation_jobs,
    judge_kind,
    name_value_pairs,
    no_verdict_counts_of,
    resolved_system_prompt,
    run_config,
    validate_flags,
)
from rlsr.evaluation.from_samples_cli import run_from_samples
from rlsr.evaluation.judge import (
    DEFAULT_JUDGE_MODEL,
    JudgeUnavailableError,
    RecordingJudge,
    backend_judge_fn,
    check_judge_server,
    openai_judge_fn,
)
from rlsr.evaluation.outputs import deprecated_flag
from rlsr.evaluation.provenance import adapter_fingerprint
from rlsr.evaluation.runner import EvalSettings, evaluate_dataset
from rlsr.evaluation.samples_io import json_safe, read_samples
from rlsr.evaluation.summary import (
    confidence_warning,
    metric_text,
    no_verdict_note,
    scorer_value,
)
from rlsr.generation.backends import make_backend, resolve_adapter
from rlsr.generation.endpoint import ENDPOINT_BACKENDS, EndpointBackend
from rlsr.generation.http_client import EndpointError, EndpointSettings
from rlsr.generation.openai_api import RLSR_SERVE
from rlsr.run_layout import (
    AUDIT_FILE,
    CHECKPOINT_PREFIX,
    DEPLOYMENT_FILE,
    METRICS_FILE,
    PLOT_FILE,
    REQUESTS_FILE,
    RUN_FILE,
    SAMPLES_FILE,
    SUMMARY_FILE,
    config_differences,
    datasets_with_samples,
    move_aside,
    read_run_file,
    remove_unused,
)
from rlsr.verifiers import VERIFIERS, is_plugin_name
from rlsr.verifiers.llm_judge import (
    JUDGE_MAX_ANSWER_CHARS,
    JUDGE_MAX_RETRIES,
    JUDGE_TIMEOUT_S,
)

__all__ = ["register", "run_evaluate"]

INTERRUPTED_EXIT = 130  # 128 + SIGINT, what a shell reports for a Ctrl-C'd command


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
        help="generate, verify and score a model (+ LoRA adapter) on tasks",
        usage="rlsr evaluate --model PATH [--adapter RUN] --tasks NAMES --output-dir DIR [options]"
        "\n       rlsr evaluate --from-samples FILE --tasks NAME --output-dir DIR [options]",
        description="Paper protocol by default (Sec. C.5): greedy, 4,096 new tokens, the training "
        f"system prompt, one response per question. Writes DIR/<dataset>/{SAMPLES_FILE}, "
        f"{METRICS_FILE}, {PLOT_FILE}; resumes an interrupted run.",
        epilog="example: rlsr evaluate --model Qwen/Qwen2.5-7B --adapter runs/hotpot-rlsr "
        "--tasks hotpot-ood --output-dir evals/rlsr-seed0 --backend vllm. "
        "Details: docs/evaluation.md.",
        formatter_class=_DefaultsShown,
    )
    ev.add_argument(
        "--model",
        metavar="PATH",
        help="base model folder or hub id (`tiny-missing-warm`: the model of recipe=tiny); "
        "required unless --from-samples",
    )
    ev.add_argument(
        "--from-samples",
        metavar="FILE",
        help="score these responses instead of generating: lm-eval --log_samples output or a "
        "JSONL of question, response, gold[, id] (one task; docs/evaluation.md)",
    )
    ev.add_argument(
        "--adapter",
        metavar="RUN",
        help=f"LoRA adapter folder, {CHECKPOINT_PREFIX}N, or training output dir",
    )
    named = ev.add_mutually_exclusive_group(required=True)
    named.add_argument(
        "--tasks",
        metavar="NAMES",
        help="comma list of task names or a group (hotpot-id ...); `rlsr tasks` lists them",
    )
    deprecated_flag(named, "--datasets", instead="--tasks", dest="tasks", metavar="NAMES")
    ev.add_argument(
        "--output-dir",
        required=True,
        metavar="DIR",
        help="results; rerun the same command to resume (another configuration is refused)",
    )
    ev.add_argument(
        "--overwrite",
        action="store_true",
        help="start over: move DIR's old results aside to DIR.old-<time> when the run starts",
    )
    ev.add_argument(
        "--backend",
        choices=("transformers", "vllm", *ENDPOINT_BACKENDS),
        default="transformers",
        help="openai-completions / openai-chat: a model behind an OpenAI-compatible endpoint "
        "(--base-url; --model is then the served model id)",
    )
    ev.add_argument(
        "--data-dir", help="folder with <dataset>/ copies (else $RLSR_DATA_DIR, then hub)"
    )
    ev.add_argument(
        "--data-path",
        action="append",
        default=[],
        metavar="NAME=PATH",
        help="read the rows of task NAME from PATH (file or folder); repeatable",
    )
    ev.add_argument(
        "--columns",
        action="extend",
        nargs="+",
        default=[],
        metavar="FIELD=COLUMN",
        help="read contract FIELD (problem, answer, id, ...) from COLUMN of every dataset",
    )
    ev.add_argument(
        "--split", metavar="NAME", help="dataset split (default: each task's evaluation split)"
    )
    add_protocol_flags(ev, ["system_prompt", "response_format"])
    ev.add_argument(
        "--verifier",
        action="append",
        default=[],
        metavar="NAME=VERIFIER",
        help="override a task's verifier (e.g. trivia=exact_match); repeatable",
    )
    ev.add_argument("--limit", type=int, metavar="N", help="first N questions per task")
    add_protocol_flags(
        ev,
        ["batch_size", "max_new_tokens", "temperature", "top_p", "seed",
         "fallback_max_new_tokens", "fallbacks", "scorers", "consistency_k",
         "consistency_temperature", "dcs", "bootstrap"],
    )  # fmt: skip
    ev.add_argument(
        "--protocol-variant",
        metavar="NAME",
        help="the recipe's named protocol variant these flags come from (heldout.variants: paper, "
        f"toy), recorded in {RUN_FILE}; a label, it changes no setting",
    )
    deprecated_flag(ev, "--protocol-layer", instead="--protocol-variant", dest="protocol_variant")  # old spelling  # fmt: skip
    ev.add_argument("--dtype", default="auto", help="auto, bfloat16, float16 or float32")
    ev.add_argument(
        "--trust-remote-code", action="store_true", help="run the model repo's own code (off)"
    )
    ev.add_argument("--no-progress", action="store_true", help="no progress bars (log files)")
    add_protocol_flags(ev, ["keep_token_ids"])  # every EvalProtocol field has its flag now
    g = ev.add_argument_group("vLLM")
    g.add_argument("--tensor-parallel-size", type=int, default=1)
    g.add_argument(
        "--data-parallel-size",
        type=int,
        default=1,
        help="only 1: vLLM's offline engine refuses data parallelism in one process; shard with "
        "one process per GPU (slurm/evaluate.slurm's array)",
    )
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
    e = ev.add_argument_group(
        "OpenAI-compatible endpoint (--backend openai-completions | openai-chat)"
    )
    e.add_argument(
        "--base-url",
        metavar="URL",
        help="API root, e.g. http://localhost:8000/v1 (vllm serve, rlsr serve) or "
        "https://api.openai.com/v1",
    )
    e.add_argument(
        "--api-key-env",
        default="OPENAI_API_KEY",
        metavar="NAME",
        help="environment variable holding the API key (never given on the command line, never "
        "written); unset: no key sent",
    )
    e.add_argument("--concurrency", type=int, default=16, metavar="N", help="requests in flight")
    e.add_argument(
        "--request-timeout", type=float, default=600.0, metavar="S", help="seconds per request"
    )
    e.add_argument(
        "--max-retries",
        type=int,
        default=8,
        metavar="N",
        help="retries of a request on 429/5xx/timeouts/malformed answers (backoff, Retry-After)",
    )
    e.add_argument(
        "--retry-backoff",
        type=float,
        default=1.0,
        metavar="S",
        help="seconds before the first retry, doubled after each (capped at 60 s); a server's "
        "Retry-After is waited out instead",
    )
    e.add_argument(
        "--tokenizer",
        metavar="PATH",
        help="openai-completions: tokenizer + chat template that render the prompt (default: "
        "--model, which is then a local folder or hub id as vllm serve was given)",
    )
    e.add_argument(
        "--audit-deployment",
        metavar="DEPLOYMENT_JSON",
        help="the endpoint is `rlsr serve`: compare its answer rate and risk among answered "
        f"with what this {DEPLOYMENT_FILE} certified (writes DIR/{AUDIT_FILE}, "
        f"{Path(AUDIT_FILE).with_suffix('.md')})",
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
    j.add_argument(
        "--judge-timeout",
        type=float,
        default=JUDGE_TIMEOUT_S,
        metavar="S",
        help="seconds per judge request",
    )
    j.add_argument(
        "--judge-max-retries",
        type=int,
        default=JUDGE_MAX_RETRIES,
        metavar="N",
        help="retries (exponential backoff) of a failed judge request before the run stops",
    )
    j.add_argument(
        "--judge-max-answer-chars",
        type=int,
        default=JUDGE_MAX_ANSWER_CHARS,
        metavar="N",
        help="a predicted answer is cut to N characters before it is quoted to the judge",
    )
    d = ev.add_argument_group("risk-controlled deployment (Sec. 4.2)")
    d.add_argument(
        "--deployment-target", type=float, help="target accuracy; evaluates validation+test splits"
    )
    d.add_argument(
        "--deployment-task",
        default="medqa",
        metavar="NAME",
        help="the task whose splits the deployment evaluates (default: medqa)",
    )
    deprecated_flag(d, "--deployment-dataset", instead="--deployment-task", dest="deployment_task")
    d.add_argument("--deployment-splits", default="validation,test")
    d.add_argument("--deployment-delta", type=float, default=0.1)
    d.add_argument(TRAINING_ROWS_FLAG, action="store_true", help=ALLOW_TRAIN_HELP)
    ev.set_defaults(func=run_evaluate)


def _build_judge(args, backend_kwargs):
    model = args.judge_model or DEFAULT_JUDGE_MODEL
    kind = judge_kind(args)
    if kind == "openai":
        fn = openai_judge_fn(args.judge_base_url, model, timeout_s=args.judge_timeout,
                             max_retries=args.judge_max_retries)  # fmt: skip
    else:
        kwargs = {**backend_kwargs, "batch_size": args.judge_batch_size}
        fn = backend_judge_fn(make_backend(kind, model, None, **kwargs))
    return RecordingJudge(fn)


def _saved(out: Path, jobs) -> int:
    return sum(len(read_samples(out / job / SAMPLES_FILE)) for job, _, _ in jobs)


def run_evaluate(args) -> int:
    """Check everything, load datasets, model and judge; only then write into --output-dir."""
    if args.from_samples is not None:
        return run_from_samples(args, _build_judge)
    if args.model is None:
        raise ValueError("--model is required (or --from-samples FILE to score responses "
                         "generated elsewhere).")  # fmt: skip
    settings = validate_flags(args)
    if args.no_progress:  # also the bars of dataset formatting and weight loading (log files)
        datasets.disable_progress_bars()
        transformers.utils.logging.disable_progress_bar()
    out = Path(args.output_dir)
    names = resolve_tasks(args.tasks)
    paths = name_value_pairs(args.data_path, "--data-path")
    verifier_override = name_value_pairs(args.verifier, "--verifier")
    columns = name_value_pairs(args.columns, "--columns")
    for name, vname in verifier_override.items():
        if vname not in VERIFIERS and not is_plugin_name(vname):
            raise ValueError(f"--verifier {name}={vname}: unknown verifier; choose one of "
                             f"{sorted(VERIFIERS)}.")  # fmt: skip
    endpoint = _connect_endpoint(args) if args.backend in ENDPOINT_BACKENDS else None
    try:
        return _evaluate(args, settings, out, names, paths, verifier_override, columns, endpoint)
    finally:
        if endpoint is not None:
            endpoint.close()


def _connect_endpoint(args) -> EndpointBackend:
    """The endpoint backend, checked before anything is read or written: server up, key
    accepted, model served, --audit-deployment only against rlsr serve."""
    backend = EndpointBackend(
        EndpointSettings(
            args.base_url, args.model, ENDPOINT_BACKENDS[args.backend],
            api_key_env=args.api_key_env, concurrency=args.concurrency,
            request_timeout=args.request_timeout, max_retries=args.max_retries,
            retry_backoff=args.retry_backoff,
        ),
        tokenizer_path=args.tokenizer,
    )  # fmt: skip
    if backend.kind == RLSR_SERVE and args.backend != "openai-chat":
        backend.close()
        raise ValueError(f"{args.base_url} is rlsr serve, which answers /v1/chat/completions only: "
                         "use --backend openai-chat.")  # fmt: skip
    if args.audit_deployment and backend.kind != RLSR_SERVE:
        backend.close()
        raise ValueError(
            f"--audit-deployment: {args.base_url} is not rlsr serve (its /v1/models says "
            f"owned_by {backend.served.entry.get('owned_by')!r}); the audit needs the decisions "
            "rlsr serve returns."
        )
    return backend


def _endpoint_settings(endpoint: EndpointBackend, settings: EvalSettings) -> EvalSettings:
    """The protocol as the endpoint can run it: fallbacks off where it cannot (said once on
    stderr, recorded in run.json and summary.json); the log-prob scorer / DCS refused."""
    forced = set(TEACHER_FORCED_SCORERS) & set(settings.scorers)
    if (forced or settings.dcs) and endpoint.scoring_off:
        raise ValueError(f"--scorers {','.join(settings.scorers)}"
                         f"{' --dcs' if settings.dcs else ''}: {endpoint.scoring_off}.")  # fmt: skip
    if settings.fallbacks and endpoint.fallbacks_off:
        print(f"rlsr: Sec. C.3 fallbacks off: {endpoint.fallbacks_off}.", file=sys.stderr)
        return dataclasses.replace(settings, fallbacks=False)
    return settings


def _evaluate(args, settings, out, names, paths, verifier_override, columns, endpoint) -> int:
    if endpoint is not None:
        settings = _endpoint_settings(endpoint, settings)
    adapter = resolve_adapter(args.adapter)
    fingerprint = adapter_fingerprint(adapter) if adapter else None
    jobs = evaluation_jobs(args, names)
    verifier_names = {n: verifier_override.get(n, get_spec(n).verifier) for _, n, _ in jobs}
    system_prompt = resolved_system_prompt(args)
    config = run_config(args, settings, fingerprint, system_prompt, verifier_names, columns,
                         paths)  # fmt: skip
    if endpoint is not None:
        config["endpoint"] = endpoint.record()
        config["fallbacks_off"] = endpoint.fallbacks_off if endpoint.fallbacks_off else None
    previous = read_run_file(out)
    if previous is not None and not args.overwrite:
        saved = datasets_with_samples(out)
        diffs = config_differences(previous, config, saved)
        if "versions" not in previous and saved & set(verifier_names):
            print(f"rlsr: {out / RUN_FILE} was written by an older rlsr without the versions of "
                  "the data files and verifiers, so this resume cannot check them; they are "
                  "recorded from now on (docs/tasks.md, \"Resuming\").", file=sys.stderr)  # fmt: skip
        if diffs:
            raise ValueError(
                f"--output-dir {out} holds results of another configuration "
                f"({'; '.join(diffs)}); give a new --output-dir, or add --overwrite to move the "
                f"old results to {out.name}.old-<time>."
            )
    judged = "llm_judge" in verifier_names.values()
    # the generation budget against the model's context: a task's rows as they load, then the
    # longest prompt of every dataset (rlsr.evaluation.budget), all before any weights load
    budget = generation_budget(args, settings, endpoint)
    room = budget.room if budget is not None else None
    # Load every dataset before the model so a missing one fails in seconds, not after loading.
    examples = {
        job: load_examples(name, path=paths.get(name), split=split, limit=args.limit,
                           system_prompt=system_prompt, data_dir=args.data_dir, columns=columns,
                           room=room)
        for job, name, split in jobs
    }  # fmt: skip
    if budget is not None:
        budget.check({job: examples[job]["prompt"] for job, _, _ in jobs})
    if judged and judge_kind(args) == "openai":  # fail fast, before loading the model
        check_judge_server(args.judge_base_url, args.judge_model or DEFAULT_JUDGE_MODEL,
                           timeout_s=min(args.judge_timeout, 10.0))  # fmt: skip
    backend_kwargs = dict(
        dtype=args.dtype, batch_size=args.batch_size, trust_remote_code=args.trust_remote_code,
        merge=args.merge_adapter if args.backend == "vllm" else True,
        tensor_parallel_size=args.tensor_parallel_size, data_parallel_size=args.data_parallel_size,
        max_model_len=args.max_model_len, gpu_memory_utilization=args.gpu_memory_utilization,
        seed=args.seed, enforce_eager=args.enforce_eager,
    )  # fmt: skip
    backend = endpoint or make_backend(
        args.backend, resolve_model_path(args.model), adapter, **backend_kwargs
    )
    judge = _build_judge(args, backend_kwargs) if judged else None

    # The run starts: from here on, files are written.
    if args.overwrite and out.is_dir() and any(out.iterdir()):
        print(f"moved the previous results to {move_aside(out)}", file=sys.stderr)
        previous = None
    root_existed = out.is_dir()
    existed = {job for job, _, _ in jobs if (out / job).exists()}
    out.mkdir(parents=True, exist_ok=True)
    known = previous.get("datasets", []) if previous else []
    config["datasets"] = list(dict.fromkeys([*known, *(job for job, _, _ in jobs)]))
    (out / RUN_FILE).write_text(json.dumps(config, indent=2) + "\n")
    summary = {}
    try:
        for job, name, _ in jobs:
            vname = verifier_names[name]
            kwargs = (
                {"judge_fn": judge, "max_answer_chars": args.judge_max_answer_chars}
                if vname == "llm_judge"
                else {}
            )
            verifier = build_verifier(name, vname, **kwargs)  # + a task's verifier options
            try:
                metrics = evaluate_dataset(
                    backend, examples[job], out / job, verifier=verifier, verifier_name=vname,
                    settings=settings, judge=judge if vname == "llm_judge" else None,
                    dataset_name=job,
                )  # fmt: skip
            finally:
                getattr(verifier, "close", lambda: None)()
            aurc = scorer_value(metrics, "aurc")  # None: n/a, no confidence parsed
            summary[job] = {"n": metrics["n"], "accuracy": metrics["accuracy"],
                            "aurc": aurc, **no_verdict_counts_of(metrics)}  # fmt: skip
            if endpoint is not None:
                summary[job]["fallbacks_off"] = endpoint.fallbacks_off
                summary[job]["usage"] = metrics.get("usage")
            print(f"{job}: n={metrics['n']} acc={metrics['accuracy']:.3f} "
                  f"AURC={metric_text(aurc)}{no_verdict_note(metrics)}")  # fmt: skip
            warning = confidence_warning(metrics)
            if warning:
                summary[job]["warning"] = warning
                print(f"rlsr: warning: {job}: {warning}", file=sys.stderr)
    except KeyboardInterrupt:
        remove_unused(out, [job for job, _, _ in jobs], existed, root_existed)
        print(f"rlsr: interrupted, {_saved(out, jobs)} samples saved in {out}; rerun the same "
              "command to resume.", file=sys.stderr)  # fmt: skip
        return INTERRUPTED_EXIT
    except EndpointError as err:
        remove_unused(out, [job for job, _, _ in jobs], existed, root_existed)
        raise EndpointError(
            f"{err} {_saved(out, jobs)} samples saved in {out} (and every finished request, in "
            f"<dataset>/{REQUESTS_FILE}); rerun the same command to resume."
        ) from err
    except JudgeUnavailableError as err:
        remove_unused(out, [job for job, _, _ in jobs], existed, root_existed)
        raise JudgeUnavailableError(
            f"{err} {_saved(out, jobs)} samples saved in {out} (none judged by a failed "
            "request); rerun the same command to resume."
        ) from err
    except BaseException:
        remove_unused(out, [job for job, _, _ in jobs], existed, root_existed)
        raise
    # written first: a deployment refused below leaves every evaluated result in place
    (out / SUMMARY_FILE).write_text(json.dumps(summary, indent=2) + "\n")
    if args.deployment_target is not None:
        _deploy_from_dirs(out, args, jobs)
    if args.audit_deployment:
        _audit(out, args, jobs)
    return 0


def _audit(out: Path, args, jobs) -> None:
    """The deployment audit of every evaluated dataset: OUT/audit.json, OUT/audit.md."""
    deployment_file = json.loads(Path(args.audit_deployment).read_text())
    results = {
        job: audit_deployment(read_samples(out / job / SAMPLES_FILE), deployment_file)
        for job, _, _ in jobs
    }
    record = {"deployment": str(Path(args.audit_deployment).resolve()), "datasets": results}
    (out / AUDIT_FILE).write_text(json.dumps(json_safe(record), indent=2) + "\n")
    text = audit_markdown(results)
    (out / AUDIT_FILE).with_suffix(".md").write_text(text)
    print(text)


def _deploy_from_dirs(out: Path, args, jobs) -> None:
    folder = {(name, split): job for job, name, split in jobs}
    val_split, test_split = args.deployment_splits.split(",")[:2]
    rows, provenance = deployment_from_samples(
        out / folder[args.deployment_task, val_split],
        out / folder[args.deployment_task, test_split],
        args.deployment_target, "verbalized", args.deployment_delta,
        allow_train=args.allow_train_split, labels=(f"{val_split} split", f"{test_split} split"),
    )  # fmt: skip
    write_deployment(out / DEPLOYMENT_FILE, deployment_method_name(provenance), rows, provenance)
    print((out / DEPLOYMENT_FILE).with_suffix(".md").read_text())

"""What ``rlsr evaluate`` does (its flags: ``rlsr.cli.evaluate``; docs/evaluation.md): check the
flags, load datasets, model and judge, and only then write into ``--output-dir`` (per dataset
``rlsr.evaluation.run.runner``; then the deployment and the audit, if asked)."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import datasets
import transformers

from rlsr.cli.evaluate import name_value_pairs
from rlsr.cli.evaluate_setup import (
    build_judge,
    check_judge,
    evaluation_jobs,
    resolved_system_prompt,
    run_config,
    start_over,
    summary_entry,
    task_verifier,
    task_verifiers,
    validate_flags,
)
from rlsr.cli.from_samples_cli import run_from_samples
from rlsr.config import resolve_model_path
from rlsr.data import resolve_tasks
from rlsr.data.loading import load_examples
from rlsr.evaluation.deploy.audit import audit_deployment, audit_markdown
from rlsr.evaluation.deploy.deployment import (
    deployment_from_samples,
    deployment_method_name,
    write_deployment,
)
from rlsr.evaluation.run.budget import generation_budget
from rlsr.evaluation.run.judge import JudgeUnavailableError
from rlsr.evaluation.run.provenance import adapter_fingerprint
from rlsr.evaluation.run.runner import EvalSettings, evaluate_dataset
from rlsr.evaluation.run.samples_io import json_safe, read_samples
from rlsr.evaluation.run.summary import (
    confidence_warning,
    metric_text,
    no_verdict_note,
)
from rlsr.generation.backends import make_backend, resolve_adapter
from rlsr.generation.endpoint import ENDPOINT_BACKENDS, EndpointBackend
from rlsr.generation.http_client import EndpointError, EndpointSettings
from rlsr.generation.openai_api import RLSR_SERVE
from rlsr.run.eval_protocol import TEACHER_FORCED_SCORERS
from rlsr.run.run_layout import (
    AUDIT_FILE,
    DEPLOYMENT_FILE,
    REQUESTS_FILE,
    RUN_FILE,
    SAMPLES_FILE,
    SUMMARY_FILE,
    config_differences,
    datasets_with_samples,
    read_run_file,
    remove_unused,
)

__all__ = ["run_evaluate"]

INTERRUPTED_EXIT = 130  # 128 + SIGINT, what a shell reports for a Ctrl-C'd command


def run_evaluate(args) -> int:
    """Check everything, load datasets, model and judge; only then write into --output-dir."""
    if args.from_samples is not None:
        return run_from_samples(args)
    if args.model is None:
        raise ValueError("--model is required (or --from-samples FILE to score responses "
                         "generated elsewhere).")  # fmt: skip
    settings = validate_flags(args)
    if args.no_progress:  # also the bars of dataset formatting and weight loading (log files)
        datasets.disable_progress_bars()
        transformers.utils.logging.disable_progress_bar()
    out = Path(args.output_dir)
    jobs = evaluation_jobs(args, resolve_tasks(args.tasks))
    paths = name_value_pairs(args.data_path, "--data-path")
    verifier_names = task_verifiers(args, [name for _, name, _ in jobs])
    columns = name_value_pairs(args.columns, "--columns")
    endpoint = _connect_endpoint(args) if args.backend in ENDPOINT_BACKENDS else None
    try:
        return _evaluate(args, settings, out, jobs, paths, verifier_names, columns, endpoint)
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


def _evaluate(args, settings, out, jobs, paths, verifier_names, columns, endpoint) -> int:
    if endpoint is not None:
        settings = _endpoint_settings(endpoint, settings)
    adapter = resolve_adapter(args.adapter)
    fingerprint = adapter_fingerprint(adapter) if adapter else None
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
    # longest prompt of every dataset (rlsr.evaluation.run.budget), all before any weights load
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
    if judged:
        check_judge(args)
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
    judge = build_judge(args, backend_kwargs) if judged else None

    # The run starts: from here on, files are written.
    if start_over(args, out):
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
            verifier = task_verifier(args, name, vname, judge)
            try:
                metrics = evaluate_dataset(
                    backend, examples[job], out / job, verifier=verifier, verifier_name=vname,
                    settings=settings, judge=judge if vname == "llm_judge" else None,
                    dataset_name=job,
                )  # fmt: skip
            finally:
                getattr(verifier, "close", lambda: None)()
            summary[job] = summary_entry(metrics)
            if endpoint is not None:
                summary[job]["fallbacks_off"] = endpoint.fallbacks_off
                summary[job]["usage"] = metrics.get("usage")
            print(
                f"{job}: n={metrics['n']} acc={metrics['accuracy']:.3f} "
                f"AURC={metric_text(summary[job]['aurc'])}{no_verdict_note(metrics)}"
            )
            warning = confidence_warning(metrics)
            if warning:
                summary[job]["warning"] = warning
                print(f"rlsr: warning: {job}: {warning}", file=sys.stderr)
    except BaseException as err:  # the folders this run created and left empty go
        remove_unused(out, [job for job, _, _ in jobs], existed, root_existed)
        saved = sum(len(read_samples(out / job / SAMPLES_FILE)) for job, _, _ in jobs)
        resume = "rerun the same command to resume."
        if isinstance(err, KeyboardInterrupt):
            print(f"rlsr: interrupted, {saved} samples saved in {out}; {resume}", file=sys.stderr)
            return INTERRUPTED_EXIT
        if isinstance(err, EndpointError):
            raise EndpointError(
                f"{err} {saved} samples saved in {out} (and every finished "
                f"request, in <dataset>/{REQUESTS_FILE}); {resume}"
            ) from err
        if isinstance(err, JudgeUnavailableError):
            raise JudgeUnavailableError(
                f"{err} {saved} samples saved in {out} (none judged by a failed request); {resume}"
            ) from err
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

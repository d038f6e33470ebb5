"""``rlsr evaluate --from-samples FILE``: score responses generated elsewhere into the files a
generation run writes (docs/evaluation.md, "Scoring generations made elsewhere"; the reading and
scoring: ``rlsr.evaluation.run.external``), every flag and the whole file checked first."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import datasets

from rlsr.cli.evaluate import name_value_pairs
from rlsr.cli.evaluate_setup import (
    build_judge,
    check_judge,
    evaluation_jobs,
    resolved_system_prompt,
    start_over,
    summary_entry,
    task_verifier,
    task_verifiers,
)
from rlsr.data import resolve_tasks, task_records, version_records
from rlsr.data.loading import load_examples
from rlsr.evaluation.run.external import TaskColumns, match_samples, read_external, score_external
from rlsr.evaluation.run.runner import EvalSettings
from rlsr.evaluation.run.summary import metric_text, no_verdict_note
from rlsr.run.eval_protocol import protocol_from_args
from rlsr.run.run_layout import RUN_FILE, SAMPLES_FILE, SUMMARY_FILE, remove_unused

__all__ = ["FROM_SAMPLES_BACKEND", "run_from_samples"]

FROM_SAMPLES_BACKEND = "from-samples"  # run.json's backend of a scored file

# flags that ask for something a file of finished responses cannot give
_REFUSED = ("adapter", "limit", "deployment_target", "audit_deployment", "base_url", "dcs")


def _settings(args) -> EvalSettings:
    settings = protocol_from_args(args, EvalSettings, progress=False)
    for dest in _REFUSED:
        if getattr(args, dest, None):
            raise ValueError(
                f"--{dest.replace('_', '-')}: not with --from-samples (the responses "
                "are already generated; the file is scored as it is)."
            )
    if tuple(settings.scorers) != ("verbalized",):
        raise ValueError(f"--scorers {','.join(settings.scorers)}: --from-samples scores the "
                         "verbalized confidence only (the others need the model).")  # fmt: skip
    # no model to continue a response: the Sec. C.3 fallbacks cannot run, and run.json says so
    return dataclasses.replace(settings, fallbacks=False)


def run_from_samples(args) -> int:
    """Score ``args.from_samples`` as task ``--tasks`` into ``--output-dir``."""
    settings = _settings(args)
    if args.no_progress:  # the bar of the task's formatting (log files)
        datasets.disable_progress_bars()
    names = resolve_tasks(args.tasks)
    if len(names) != 1:
        raise ValueError(f"--tasks {args.tasks}: --from-samples scores one task; name the task "
                         "the samples were generated on.")  # fmt: skip
    [(job, name, split)] = evaluation_jobs(args, names)
    paths = name_value_pairs(args.data_path, "--data-path")
    columns = name_value_pairs(args.columns, "--columns")
    vname = task_verifiers(args, [name])[name]
    out = Path(args.output_dir)
    if out.exists() and not out.is_dir():
        raise ValueError(f"--output-dir {out} is a file; give a folder.")
    held = next((f for f in (f"{job}/{SAMPLES_FILE}", RUN_FILE) if (out / f).exists()), None)
    if held is not None and not args.overwrite:
        raise ValueError(f"--output-dir {out} already holds {held}; give a new --output-dir, "
                         f"or add --overwrite to move the old results to "
                         f"{out.name}.old-<time>.")  # fmt: skip
    external = read_external(args.from_samples)
    system_prompt = resolved_system_prompt(args)
    examples = load_examples(name, path=paths.get(name), split=split, system_prompt=system_prompt,
                             data_dir=args.data_dir, columns=columns)  # fmt: skip
    columns_of_rows = TaskColumns.of(examples)
    indices = match_samples(external, columns_of_rows, name, split, settings.response_format)
    judge = None
    if vname == "llm_judge":
        check_judge(args)  # fail fast, before any write
        judge = build_judge(args, dict(dtype=args.dtype, batch_size=args.batch_size,
                                       trust_remote_code=args.trust_remote_code, seed=args.seed))  # fmt: skip
    verifier = task_verifier(args, name, vname, judge)

    # everything is checked: from here on, files are written
    start_over(args, out)
    root_existed = out.is_dir()
    existed = {job} if (out / job).exists() else set()
    out.mkdir(parents=True, exist_ok=True)
    config = {
        **{k: getattr(settings, k) for k in ("response_format", "scorers", "fallbacks")},
        "from_samples": str(external.path.resolve()),
        "from_samples_sha256": external.sha256,
        "from_samples_format": external.format,
        "model": args.model,
        "system_prompt": system_prompt,
        "columns": columns,
        "verifiers": {name: vname},
        "tasks": task_records({name: vname}),
        "versions": version_records({name: vname}, paths),
        "backend": FROM_SAMPLES_BACKEND,
        "datasets": [job],
        "argv": sys.argv[1:],
    }
    (out / RUN_FILE).write_text(json.dumps(json.loads(json.dumps(config)), indent=2) + "\n")
    try:
        metrics = score_external(external, indices, columns_of_rows, out / job, verifier=verifier,
                                 verifier_name=vname, settings=settings, dataset_name=job,
                                 judge=judge if vname == "llm_judge" else None)  # fmt: skip
    except BaseException:  # the folders this run created and left without a sample go
        remove_unused(out, [job], existed, root_existed)
        raise
    finally:
        getattr(verifier, "close", lambda: None)()
    primary = metrics["scorers"][metrics["primary_scorer"]]
    summary = summary_entry(metrics)
    (out / SUMMARY_FILE).write_text(json.dumps({job: summary}, indent=2) + "\n")
    unread = (
        f"; {metrics['answer_missing']} without an answer (scored wrong), "
        f"{primary['missing_confidence']} without a confidence (confidence 0)"
        if metrics["answer_missing"] or primary["missing_confidence"]
        else ""
    )
    print(f"{job}: n={metrics['n']} of {len(examples)} task rows, acc={metrics['accuracy']:.3f} "
          f"AURC={metric_text(summary['aurc'])}{no_verdict_note(metrics)}{unread}; scored from "
          f"{external.path} ({external.format})")  # fmt: skip
    return 0

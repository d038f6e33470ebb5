"""``rlsr evaluate --from-samples FILE``: score responses generated elsewhere (lm-eval's
``--log_samples`` output or a plain JSONL) into the files a generation run writes
(docs/evaluation.md, "Scoring generations made elsewhere"; the reading and scoring:
``rlsr.evaluation.run.external``). Checks every flag and the whole file before it writes anything."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import datasets

from rlsr.cli.evaluate_setup import (
    judge_kind,
    name_value_pairs,
    no_verdict_counts_of,
    resolved_system_prompt,
)
from rlsr.data import get_spec, resolve_tasks, task_records, version_records
from rlsr.data.loading import build_verifier, load_examples
from rlsr.evaluation.run.external import TaskColumns, match_samples, read_external, score_external
from rlsr.evaluation.run.judge import DEFAULT_JUDGE_MODEL, check_judge_server
from rlsr.evaluation.run.runner import EvalSettings
from rlsr.evaluation.run.summary import no_verdict_note
from rlsr.run.eval_protocol import protocol_from_args
from rlsr.run.run_layout import RUN_FILE, SAMPLES_FILE, SUMMARY_FILE, move_aside, remove_unused
from rlsr.verifiers import VERIFIERS, is_plugin_name

__all__ = ["FROM_SAMPLES_BACKEND", "run_from_samples"]

FROM_SAMPLES_BACKEND = "from-samples"  # run.json's backend of a scored file

# flags that ask for something a file of finished responses cannot give
_REFUSED = (
    ("adapter", "--adapter"),
    ("limit", "--limit"),
    ("deployment_target", "--deployment-target"),
    ("audit_deployment", "--audit-deployment"),
    ("base_url", "--base-url"),
    ("dcs", "--dcs"),
)


def _settings(args) -> EvalSettings:
    settings = protocol_from_args(args, EvalSettings, progress=False)
    for dest, flag in _REFUSED:
        if getattr(args, dest, None):
            raise ValueError(f"{flag}: not with --from-samples (the responses are already "
                             "generated; the file is scored as it is).")  # fmt: skip
    if tuple(settings.scorers) != ("verbalized",):
        raise ValueError(f"--scorers {','.join(settings.scorers)}: --from-samples scores the "
                         "verbalized confidence only (the others need the model).")  # fmt: skip
    # no model to continue a response: the Sec. C.3 fallbacks cannot run, and run.json says so
    return dataclasses.replace(settings, fallbacks=False)


def run_from_samples(args, build_judge) -> int:
    """Score ``args.from_samples`` as task ``--tasks`` into ``--output-dir``; ``build_judge(args,
    backend_kwargs)`` makes the LLM judge of a judged task (``rlsr evaluate``'s)."""
    settings = _settings(args)
    if args.no_progress:  # the bar of the task's formatting (log files)
        datasets.disable_progress_bars()
    names = resolve_tasks(args.tasks)
    if len(names) != 1:
        raise ValueError(f"--tasks {args.tasks}: --from-samples scores one task; name the task "
                         "the samples were generated on.")  # fmt: skip
    name = names[0]
    paths = name_value_pairs(args.data_path, "--data-path")
    columns = name_value_pairs(args.columns, "--columns")
    override = name_value_pairs(args.verifier, "--verifier")
    vname = override.get(name, get_spec(name).verifier)
    if vname not in VERIFIERS and not is_plugin_name(vname):
        raise ValueError(f"--verifier {name}={vname}: unknown verifier; choose one of "
                         f"{sorted(VERIFIERS)}.")  # fmt: skip
    out = Path(args.output_dir)
    if out.exists() and not out.is_dir():
        raise ValueError(f"--output-dir {out} is a file; give a folder.")
    split = args.split or get_spec(name).split
    job = name if args.split is None else f"{name}@{split}"
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
    if vname == "llm_judge" and judge_kind(args) == "openai":  # fail fast, before any write
        check_judge_server(args.judge_base_url, args.judge_model or DEFAULT_JUDGE_MODEL,
                           timeout_s=min(args.judge_timeout, 10.0))  # fmt: skip
    if vname == "llm_judge":
        judge = build_judge(args, dict(dtype=args.dtype, batch_size=args.batch_size,
                                       trust_remote_code=args.trust_remote_code, seed=args.seed))  # fmt: skip
    kwargs = (
        {"judge_fn": judge, "max_answer_chars": args.judge_max_answer_chars}
        if vname == "llm_judge"
        else {}
    )
    verifier = build_verifier(name, vname, **kwargs)

    # everything is checked: from here on, files are written
    if args.overwrite and out.is_dir() and any(out.iterdir()):
        print(f"moved the previous results to {move_aside(out)}", file=sys.stderr)
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
    summary = {job: {"n": metrics["n"], "accuracy": metrics["accuracy"], "aurc": primary["aurc"],
                     **no_verdict_counts_of(metrics)}}  # fmt: skip
    (out / SUMMARY_FILE).write_text(json.dumps(summary, indent=2) + "\n")
    unread = (
        f"; {metrics['answer_missing']} without an answer (scored wrong), "
        f"{primary['missing_confidence']} without a confidence (confidence 0)"
        if metrics["answer_missing"] or primary["missing_confidence"]
        else ""
    )
    print(f"{job}: n={metrics['n']} of {len(examples)} task rows, acc={metrics['accuracy']:.3f} "
          f"AURC={primary['aurc']:.3f}{no_verdict_note(metrics)}{unread}; scored from "
          f"{external.path} ({external.format})")  # fmt: skip
    return 0

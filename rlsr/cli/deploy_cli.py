"""What ``rlsr deploy`` does (its flags: ``rlsr.cli.deploy``): a risk-controlled confidence
threshold from the validation and test samples of an evaluation (Sec. 4.2;
``rlsr.evaluation.deploy.deployment``), written as the deployment.json ``rlsr serve --threshold`` reads
(docs/deploy.md)."""

from __future__ import annotations

from pathlib import Path

from rlsr.cli.evaluate_setup import looks_like_path
from rlsr.evaluation.deploy.deployment import (
    deployment_from_samples,
    deployment_markdown,
    deployment_method_name,
    training_rows_mark,
    write_deployment,
)
from rlsr.evaluation.run.outputs import output_prefix
from rlsr.generation.backends import resolve_adapter
from rlsr.run.run_layout import DEPLOYMENT_FILE, RUN_FILE

__all__ = ["run_deploy"]


def run_deploy(args) -> int:
    target = args.deployment_target
    if not 0 < target <= 1:
        raise ValueError(f"--deployment-target must be in (0, 1], e.g. 0.75; got {target}.")
    if args.model and looks_like_path(args.model) and not Path(args.model).expanduser().is_dir():
        raise ValueError(
            f"--model {args.model}: no such folder; give the model folder (or hub id) the samples "
            f"came from, or leave --model out to read it from the evaluation's {RUN_FILE}."
        )
    # DIR/deployment.json (--output-dir DIR), or None (print only)
    prefix = output_prefix(args, DEPLOYMENT_FILE, required=False)
    adapter = resolve_adapter(args.adapter)
    rows, provenance = deployment_from_samples(
        args.validation, args.test, target, args.scorer, args.deployment_delta,
        model=args.model, adapter=None if adapter is None else str(adapter),
        allow_train=args.allow_train_split,
    )  # fmt: skip
    method = args.method_name or deployment_method_name(provenance)
    if prefix is not None:
        write_deployment(Path(prefix), method, rows, provenance)
    print(deployment_markdown({method: rows}, note=training_rows_mark(provenance)))
    return 0

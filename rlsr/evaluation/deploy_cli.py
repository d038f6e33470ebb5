"""``rlsr deploy``: a risk-controlled confidence threshold from the validation and test samples
of an evaluation (Sec. 4.2; ``rlsr.evaluation.deployment``), written as the deployment.json
``rlsr serve --threshold`` reads (docs/evaluation.md)."""

from __future__ import annotations

from pathlib import Path

from rlsr.eval_protocol import SCORERS
from rlsr.evaluation.deployment import (
    ALLOW_TRAIN_HELP,
    TRAINING_ROWS_FLAG,
    deployment_from_samples,
    deployment_markdown,
    deployment_method_name,
    training_rows_mark,
    write_deployment,
)
from rlsr.evaluation.evaluate_setup import looks_like_path
from rlsr.evaluation.outputs import add_output_dir, deprecated_flag, output_prefix
from rlsr.generation.backends import resolve_adapter
from rlsr.run_layout import DEPLOYMENT_FILE, RUN_FILE, SAMPLES_FILE

__all__ = ["register", "run_deploy"]


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "deploy", help="risk-controlled threshold from validation/test samples"
    )
    parser.add_argument(
        "--validation",
        required=True,
        help=f"{SAMPLES_FILE} (or its folder) of the validation split",
    )
    parser.add_argument(
        "--test", required=True, help=f"{SAMPLES_FILE} (or its folder) of the test split"
    )
    target = parser.add_mutually_exclusive_group(required=True)  # --target: the old spelling
    target.add_argument(
        "--deployment-target",
        type=float,
        metavar="ACC",
        help="target accuracy, e.g. 0.75 (as rlsr evaluate's)",
    )
    deprecated_flag(target, "--target", instead="--deployment-target", dest="deployment_target",
                    type=float)  # fmt: skip
    parser.add_argument(
        "--scorer", default="verbalized", help=f"the confidence ranked: one of {', '.join(SCORERS)}"
    )
    parser.add_argument(
        "--deployment-delta",
        type=float,
        default=0.1,
        metavar="DELTA",
        help="risk level of the Clopper-Pearson rule (as rlsr evaluate's)",
    )
    deprecated_flag(parser, "--delta", instead="--deployment-delta", dest="deployment_delta",
                    type=float)  # fmt: skip
    parser.add_argument(
        "--method-name",
        metavar="NAME",
        help=f"the table's Method (default: the evaluation folder holding the validation "
        f"samples' {RUN_FILE}, as rlsr evaluate --deployment-target names it)",
    )
    add_output_dir(
        parser,
        f"DIR/{DEPLOYMENT_FILE} and .md",
        detail=f" ({DEPLOYMENT_FILE}: the threshold file `rlsr serve --threshold` reads)",
    )
    parser.add_argument(
        "--model",
        metavar="PATH",
        help=f"base model the samples came from (default: the evaluation's {RUN_FILE})",
    )
    parser.add_argument(
        "--adapter",
        metavar="PATH",
        help=f"LoRA adapter the samples came from (default: the evaluation's {RUN_FILE})",
    )
    parser.add_argument(TRAINING_ROWS_FLAG, action="store_true", help=ALLOW_TRAIN_HELP)
    parser.set_defaults(func=run_deploy)


def run_deploy(args) -> int:
    target = args.deployment_target
    if not 0 < target <= 1:
        raise ValueError(f"--deployment-target must be in (0, 1], e.g. 0.75; got {target}.")
    if args.model and looks_like_path(args.model) and not Path(args.model).expanduser().is_dir():
        raise ValueError(
            f"--model {args.model}: no such folder; give the model folder (or hub id) the samples "
            f"came from, or leave --model out to read it from the evaluation's {RUN_FILE}."
        )
    # DIR/deployment.json (--output-dir DIR), the old --output PREFIX, or None (print only)
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

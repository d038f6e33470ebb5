"""What ``rlsr report`` does (its flags: ``rlsr.cli.report``): paper-style tables and curves over
evaluation folders; ``--curves`` the held-out metrics of training runs against the step,
``--pools`` their training pools per step (docs/evaluation.md)."""

from __future__ import annotations

from rlsr.evaluation.reports.curves import write_curves
from rlsr.evaluation.reports.reliability import parse_targets
from rlsr.evaluation.reports.report import build_report
from rlsr.evaluation.run.outputs import REPORT_PREFIX, output_prefix
from rlsr.method.pool_log import write_pool_summary

__all__ = ["run_report"]


def run_report(args) -> int:
    if (args.pools or args.curves) and not args.dirs:
        example = "runs/tiny-rlsr-tiny-seed42" if args.pools else "runs/hotpot-rlsr"
        flag = "--pools" if args.pools else "--curves"
        raise ValueError(f"{flag} needs training output dirs, e.g. {example}.")
    if not (args.pools or args.curves or args.dirs or args.label):
        raise ValueError("give evaluation directories or --label NAME=DIR1,DIR2.")
    prefix = output_prefix(args, REPORT_PREFIX, required=True)  # DIR/report
    if args.pools:
        print(write_pool_summary(args.dirs, prefix)["text"])
        return 0
    if args.curves:
        print(write_curves(args.dirs, prefix)["text"])
        return 0
    dirs = list(args.dirs)
    gap_methods = [m.strip() for m in (args.gap_methods or "").split(",") if m.strip()]
    risks = parse_targets(args.target_risks, "--target-risks", open_left=False)
    coverages = parse_targets(args.target_coverages, "--target-coverages", open_left=True)
    if args.bootstrap < 0:
        raise ValueError(f"--bootstrap must be >= 0 (0 = no CIs); got {args.bootstrap}.")
    paths = build_report(dirs, prefix, labels=args.label, family=args.family,
                         id_sets=args.id_sets, ood_sets=args.ood_sets,
                         gap_methods=gap_methods or None, target_risks=risks,
                         target_coverages=coverages, bootstrap=args.bootstrap)  # fmt: skip
    print(paths["markdown"].read_text())
    return 0

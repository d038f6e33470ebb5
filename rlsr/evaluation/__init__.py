"""Evaluation of selective prediction: ``rlsr evaluate`` / ``rlsr report`` / ``rlsr deploy``.

Modules: ``runner`` (per-dataset loop with fallbacks and resume; its backends and fallback
steps are ``rlsr.generation``'s, shared with ``rlsr serve``; the output files, step folders and
run.json are ``rlsr.run_layout``'s), ``judge`` (LLM judge), ``scorers`` (verbalized, log-prob,
self-consistency), ``dcs``, ``summary`` (metrics.json schema), ``report``, ``plots``,
``reliability`` (the report's calibration section), ``deployment``; what each command runs, one
module per command (their flags: ``rlsr.cli``): ``evaluate_cli`` (its flags resolved by
``evaluate_setup``), ``report_cli``, ``deploy_cli``, ``compare_cli``, ``from_samples_cli``
(``rlsr evaluate --from-samples``); ``compare_settings``, ``report_settings`` and ``outputs``: the
names and defaults the flags show.
docs/evaluation.md. Submodules are imported lazily so ``import rlsr.evaluation``
stays cheap.
"""

"""Evaluation of selective prediction, one folder per concern (docs/evaluation.md):

* ``run``: one model on one task (``runner``: generate, fall back, verify, score, write; its
  backends and fallback steps are ``rlsr.generation``'s), ``judge``, ``scorers``, ``budget``,
  ``dcs``, ``summary`` (metrics.json), ``samples_io``, ``provenance``, ``outputs``, ``external``
  (samples of another harness read back and scored);
* ``reports``: ``rlsr report`` (``report``, ``plots``, ``curves``, ``gap``, ``reliability``,
  ``report_settings``);
* ``deploy``: ``rlsr deploy``'s certificates (``deployment``), the decisions serving reads
  (``decisions``) and the audit of a running server (``audit``);
* ``comparison``: ``rlsr compare`` (``compare``, ``compare_runs``, ``seed_statistics``,
  ``compare_settings``);
* ``heldout``: held-out evaluation during training (``evaluator``, ``history``).

What each command runs lives in ``rlsr.cli`` (``evaluate_cli``, ``report_cli``, ...). Submodules
are imported lazily so ``import rlsr.evaluation`` stays cheap.
"""

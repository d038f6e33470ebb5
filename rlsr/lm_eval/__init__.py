"""rlsr's tasks as lm-evaluation-harness tasks (docs/lm_eval.md).

``rlsr lm-eval tasks`` (``rlsr.cli.lm_eval_cli``) writes a folder for lm-eval's ``--include_path``:
each task's rows as ``rlsr evaluate`` renders them (``rlsr.lm_eval.pack``), and YAML files whose
``process_results`` and aggregations are ``rlsr.lm_eval.hooks``: rlsr's parser, verifiers and
metrics. Nothing here imports lm_eval; lm-eval imports these modules. The command's flags:
``rlsr.cli.lm_eval``.
"""

__all__ = ["DEFAULT_OUTPUT_DIR"]

DEFAULT_OUTPUT_DIR = "rlsr-lm-eval-tasks"  # where `rlsr lm-eval tasks` writes by default

"""Evaluation of selective prediction: ``rlsr evaluate`` / ``rlsr report`` / ``rlsr deploy``.

Modules: ``backends`` (transformers, vLLM), ``runner`` (per-dataset loop with fallbacks and
resume), ``judge`` (LLM judge), ``scorers`` (verbalized, log-prob, self-consistency), ``dcs``,
``summary`` (metrics.json schema), ``report``, ``plots``, ``deployment``. docs/evaluation.md.
Submodules are imported lazily so ``import rlsr.evaluation`` stays cheap.
"""

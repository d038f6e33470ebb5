"""Held-out evaluation during training: the evaluator and its history (docs/evaluation.md)."""

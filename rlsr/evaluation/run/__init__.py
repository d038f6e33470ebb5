"""Evaluating a model on a task: runner, scorers, judge, budget, samples, metrics.json (docs/evaluation.md)."""

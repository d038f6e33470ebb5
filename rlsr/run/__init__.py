"""Floor 2: the evaluation protocol and the run folder's names (docs/architecture.md)."""

"""Floor 3, the method: its registry, the pool, the trainer, the launch's plan (docs/architecture.md)."""

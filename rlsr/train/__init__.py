"""Floor 4: building and running a training launch (docs/architecture.md)."""

"""Floor 1, equations: the method's rewards and the log-prob confidence (docs/architecture.md)."""

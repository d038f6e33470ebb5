"""Floor 0, primitives: parsing, ranking, prompts, tokenization, metric inputs, the launch, plugins, settings checks (docs/architecture.md)."""

"""``rlsr compare``: comparing runs across seeds (docs/evaluation.md)."""

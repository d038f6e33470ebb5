"""``rlsr compare``: comparing runs across seeds (docs/compare.md)."""

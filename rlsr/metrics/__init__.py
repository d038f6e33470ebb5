"""Floor 1, equations: the selective-prediction metrics, calibration, thresholds and utility (docs/architecture.md)."""

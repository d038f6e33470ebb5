"""``rlsr report``: the report, its plots, curves, calibration and gap sections (docs/evaluation.md)."""

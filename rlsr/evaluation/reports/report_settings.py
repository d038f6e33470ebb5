"""What ``rlsr report`` is asked by default: the target risks and coverages of its calibration
section (``rlsr.evaluation.reports.reliability``) and the resamples of its CIs. Light (no numpy), so the
command line declares its flags from here without loading the report."""

from __future__ import annotations

__all__ = ["DEFAULT_TARGET_RISKS", "DEFAULT_TARGET_COVERAGES", "DEFAULT_BOOTSTRAP"]

# 0.25 is the risk of the paper's 75 % deployment target (RLSR Tab. 3); 0.1 a stricter one.
DEFAULT_TARGET_RISKS = (0.1, 0.25)
DEFAULT_TARGET_COVERAGES = (0.5, 0.8)
DEFAULT_BOOTSTRAP = 1000  # resamples of the calibration section's 95 % CIs (0: none)

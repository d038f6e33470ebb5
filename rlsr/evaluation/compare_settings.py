"""What ``rlsr compare`` is asked and what it writes: the kinds of evaluation it compares
(``--use``), the settings of its CI over seeds and its output file names. Light (no numpy), so
the command line declares its flags from here without loading the comparison."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["COMPARE_JSON", "COMPARE_MD", "COMPARE_PNG", "HELD_OUT", "EVALUATE", "Bootstrap"]

COMPARE_JSON = "compare.json"
COMPARE_MD = "compare.md"
COMPARE_PNG = "compare.png"
HELD_OUT, EVALUATE = "held-out", "evaluate"  # the two kinds of evaluation compared (--use)


@dataclass(frozen=True)
class Bootstrap:
    """The CI over seeds: ``rlsr.metrics.bootstrap_mean_ci`` with these settings."""

    n_resamples: int = 10_000
    seed: int = 0
    level: float = 0.95

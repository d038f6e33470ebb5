"""What ``rlsr compare`` is asked and what it writes: the kinds of evaluation it compares
(``--use``), the settings of its intervals and tests and its output file names. Light (no
numpy), so the command line declares its flags from here without loading the comparison."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["COMPARE_JSON", "COMPARE_MD", "COMPARE_PNG", "HELD_OUT", "EVALUATE", "Statistics"]

COMPARE_JSON = "compare.json"
COMPARE_MD = "compare.md"
COMPARE_PNG = "compare.png"
HELD_OUT, EVALUATE = "held-out", "evaluate"  # the two kinds of evaluation compared (--use)


@dataclass(frozen=True)
class Statistics:
    """How intervals, tests and verdicts are computed (docs/compare.md, "Intervals, tests and
    verdicts"). ``questions``: the interval's standard error also resamples question clusters
    (``n_resamples`` resamples, seeded by ``seed``, which also seeds a Monte Carlo permutation
    test); ``margin``: δ of "equivalent within ±δ" (None: never equivalent); ``level``: the
    intervals' coverage, ``rlsr.evaluation.comparison.seed_statistics.LEVEL``."""

    level: float = 0.95
    margin: float | None = None
    questions: bool = False
    n_resamples: int = 2000
    seed: int = 0

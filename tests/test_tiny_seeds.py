"""scripts/tiny_seeds.py's statistics: the bootstrap CI over seeds and the per-arm / paired
summary docs/training.md's recipe=tiny table is built from (no training run here)."""

from __future__ import annotations

import importlib.util
import itertools
import math
from pathlib import Path

import numpy as np
import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "tiny_seeds.py"


@pytest.fixture(scope="module")
def seeds_script():
    spec = importlib.util.spec_from_file_location("tiny_seeds", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_bootstrap_ci_brackets_the_exact_bootstrap_quantiles(seeds_script):
    """Against brute force: for 4 values all 4^4 resamples enumerate the bootstrap distribution
    of the mean exactly; the seeded Monte-Carlo CI ends lie between its 1 % and 4 % (96 % and
    99 %) quantiles. Also: constant values give a zero-width CI, one value none, and the same
    seed the same CI. Catches a CI of the values instead of their mean, or an unseeded one."""
    values = [0.0, 0.1, 0.15, 0.4]
    means = sorted(np.mean(c) for c in itertools.product(values, repeat=len(values)))
    exact = lambda q: float(np.quantile(means, q, method="inverted_cdf"))  # noqa: E731
    lo, hi = seeds_script.bootstrap_mean_ci(values)
    assert exact(0.01) <= lo <= exact(0.04) and exact(0.96) <= hi <= exact(0.99), (lo, hi)
    assert seeds_script.bootstrap_mean_ci(values) == (lo, hi)
    assert seeds_script.bootstrap_mean_ci([0.2] * 5) == pytest.approx((0.2, 0.2))
    assert all(math.isnan(x) for x in seeds_script.bootstrap_mean_ci([0.3]))


def test_paired_difference_uses_only_the_seeds_both_arms_finished(seeds_script):
    """RLSR - arm is the mean of per-seed differences on shared seeds (a seed one arm lacks is
    left out of the pair, not of the per-arm mean). Catches a difference of unpaired means."""

    def row(arm, seed, gain, drop):
        return {"arm": arm, "seed": seed, "dispatch": "default", "gain_last": gain,
                "aurc_drop": drop}  # fmt: skip

    rows = [row("rlsr", 0, 0.2, 0.2), row("rlsr", 1, 0.1, 0.1), row("rlsr", 2, 0.3, 0.3),
            row("rlcr", 0, 0.2, 0.1), row("rlcr", 1, 0.0, 0.1)]  # fmt: skip
    got = seeds_script.summarize(rows, ["rlsr", "rlcr"])["default"]
    assert got["arms"]["rlsr"]["gain_last"]["mean"] == pytest.approx(0.2)
    assert got["arms"]["rlsr"]["seeds"] == [0, 1, 2]
    pair = got["paired"]["rlcr"]
    assert pair["seeds"] == [0, 1]
    assert pair["gain_last"]["mean"] == pytest.approx(0.05)  # (0.0 + 0.1) / 2
    assert pair["aurc_drop"]["mean"] == pytest.approx(0.05)  # (0.1 + 0.0) / 2

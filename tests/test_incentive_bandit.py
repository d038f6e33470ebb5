"""scripts/incentive_bandit.py: its --check mode asserts docs/methods.md's best-response claims
(lifted: a threshold at 1/(1 + lambda); plain: the bottom; marginal: monotone in p and ordering;
marginal under group std scaling: every tier pushed to the top), and it can fail."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "incentive_bandit.py"


def _load_bandit():
    spec = importlib.util.spec_from_file_location("incentive_bandit", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_check_mode_passes_on_the_shipped_rewards():
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "all best-response claims hold" in out.stdout


def test_check_mode_fails_when_marginal_credit_stops_ordering(monkeypatch):
    """A marginal reward replaced by the released (lifted) one teaches a threshold: the check
    must name the marginal claim."""
    bandit = _load_bandit()
    real = bandit.pool_rewards

    def swapped(name, correct, conf):
        return real("lifted" if name == "marginal" else name, correct, conf)

    monkeypatch.setattr(bandit, "pool_rewards", swapped)
    failed = bandit.check_claims()
    assert any(line.startswith("marginal on") for line in failed), failed


def test_best_response_sets_and_std_scaling():
    """Levels that buy the same place tie exactly and are printed as a set; the std-scaled best
    response is computed with the scaling (it differs from the unscaled one on tiers)."""
    bandit = _load_bandit()
    tiers = bandit.TASKS["tiers"]
    none = bandit.best_response("marginal", tiers, np.random.default_rng(7), std_norm=False)
    std = bandit.best_response("marginal", tiers, np.random.default_rng(7), std_norm=True)
    # p = 0.6 is the lowest tier: every level strictly below the 0.6 completions buys the bottom
    assert {0.0, 0.5}.issubset(set(none[0].tolist()))
    assert bandit.format_set(none[0]).startswith("{0.0-")
    assert [bandit.format_set(x) for x in none[1:]] == ["0.7", "0.8", "0.9", "1.0"]
    assert all(x.min() >= 0.9 for x in std)
    assert bandit.format_set(np.array([0.2, 0.5])) == "{0.2,0.5}"
    assert bandit.format_set(bandit.LEVELS) == "any"

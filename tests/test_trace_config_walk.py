"""scripts/trace_config_walk.py, the measure docs/architecture.md quotes for the config's walk
from train.py's main to the trainer's arguments (no model loads)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

from hydra.core.hydra_config import HydraConfig

import rlsr.method.run_plan

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "trace_config_walk.py"


def test_the_walk_reaches_the_trainers_arguments_and_its_three_counts_nest(capsys):
    """The script runs train.py's main as @hydra.main would (HydraConfig set, so the fold of old
        keys reads the command line) until the trainer's arguments are built, and prints one line per
    module plus the three counts, which nest: modules the config enters <= modules that receive
    it or a section <= modules run; the config enters rlsr.method.run_plan, which derives the trainer's
    arguments, within 12 modules (the figure docs/architecture.md quotes). Catches a train.py
    whose main the script can no longer drive (the count then silently goes stale), a count read
    from the wrong set, a walk that grows past the recorded bound, and a script that leaves the
    plan's argument builder patched (the suite runs it in-process, before the trainer tests)."""
    spec = importlib.util.spec_from_file_location("trace_config_walk", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(["recipe=tiny", "method=rlsr"]) in (0, None)
    out = capsys.readouterr().out
    match = re.search(
        r"(\d+) rlsr modules run on the walk .*; the config enters (\d+) of them \(\*\); "
        r"(\d+) receive the config",
        out,
    )
    assert match, out[-2000:]
    run, enters, receives = map(int, match.groups())
    listed = re.findall(r"^([*+ ]) (rlsr[\w.]*)\s+\d+ calls$", out, flags=re.M)
    assert len(listed) == run and sum(mark == "*" for mark, _ in listed) == enters
    assert enters <= receives <= run
    assert ("*", "rlsr.method.run_plan") in listed
    # the plan derives the trainer's arguments: the config's walk never reaches rlsr.train.training
    assert run <= 12 and not any(name == "rlsr.train.training" for _, name in listed)
    # the process is left as it was: later tests build trainers in the same pytest process
    assert rlsr.method.run_plan.trainer_arguments.__module__ == "rlsr.method.run_plan"
    assert not HydraConfig.initialized()

#!/usr/bin/env python3
"""Count the rlsr modules the config walks through from train.py's main to the trainer's
arguments: the modules whose functions run from the start of train.py's ``main`` (the composed
config in hand: planning, where the checks run and the answers are derived) until
``rlsr.method.run_plan.trainer_arguments`` has returned the trainer's arguments, where the walk is
stopped (before any model or tokenizer loads). A checkout whose plan does not derive them
(no ``trainer_arguments``) is walked until ``rlsr.train.training.trainer_kwargs`` has returned.

    python scripts/trace_config_walk.py                     # recipe=tiny method=rlsr
    python scripts/trace_config_walk.py --root ../other-checkout recipe=hotpot method=rlcr

Every module is imported before the trace starts, so only code that runs on the walk counts
(not import-time code). ``--root``: the checkout whose train.py and rlsr are traced (default
this one), so two versions are measured with one script. Prints one line per module (with the
number of calls into it) and three counts: every module whose code runs; the modules the config
itself enters (a function called with the composed ``DictConfig`` or the typed ``TrainSettings``
as an argument, marked ``*``); and the modules that receive the config or any of its settings
sections (an argument, ``self`` included, that is a ``DictConfig``, a ``TrainSettings`` or any
other dataclass instance defined in ``rlsr.config``, such as ``ModelSettings``, ``PoolPlan`` or
``HeldOutSettings``; marked ``*`` or ``+``). No model or dataset loads.
"""

from __future__ import annotations

import argparse
import dataclasses
import shutil
import sys
import tempfile
from collections import Counter
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("overrides", nargs="*", default=["recipe=tiny", "method=rlsr"])
    args = parser.parse_args(argv)
    root = args.root.resolve()
    sys.path.insert(0, str(root))
    package = root / "rlsr"

    from hydra import compose, initialize_config_dir
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import DictConfig, open_dict

    import rlsr.method.run_plan
    import rlsr.train.training  # noqa: F401  (imported before the trace: import-time code is not the walk)
    import train
    from rlsr.config import TrainSettings

    out = Path(tempfile.mkdtemp(prefix="trace-config-walk-"))
    overrides = [*args.overrides, f"output_dir={out / 'run'}"]
    with initialize_config_dir(config_dir=str(root / "recipes"), version_base="1.3"):
        cfg = compose(config_name="config", overrides=overrides, return_hydra_config=True)
    # what @hydra.main does before it calls main: HydraConfig holds the run's command line
    # (train.py reads it to fold old keys), and main gets the tree without the hydra node
    HydraConfig.instance().set_config(cfg)
    with open_dict(cfg):
        del cfg["hydra"]

    class Built(Exception):
        """The trainer's arguments are built: the walk ends here."""

    owner = (
        rlsr.method.run_plan
        if hasattr(rlsr.method.run_plan, "trainer_arguments")
        else rlsr.train.training
    )
    name = "trainer_arguments" if owner is rlsr.method.run_plan else "trainer_kwargs"
    real = getattr(owner, name)

    def arguments(*args, **kwargs):
        raise Built(real(*args, **kwargs))

    setattr(owner, name, arguments)
    calls: Counter[str] = Counter()
    with_config: set[str] = set()
    with_settings: set[str] = set()
    config_types = (DictConfig, TrainSettings)

    def is_settings(value) -> bool:
        """The config, or a dataclass instance of rlsr.config (a settings section, a plan)."""
        if isinstance(value, config_types):
            return True
        kind = type(value)
        owner = getattr(kind, "__module__", "")
        return (
            dataclasses.is_dataclass(value)
            and not isinstance(value, type)
            and (owner == "rlsr.config" or owner.startswith("rlsr.config."))
        )

    def profile(frame, event, arg):
        if event == "call":
            path = Path(frame.f_code.co_filename)
            if path.is_relative_to(package):
                module = ".".join(path.relative_to(root).with_suffix("").parts)
                module = module.removesuffix(".__init__")
                calls[module] += 1
                code = frame.f_code
                names = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
                values = [frame.f_locals.get(n) for n in names]
                if any(isinstance(v, config_types) for v in values):
                    with_config.add(module)
                if any(is_settings(v) for v in values):
                    with_settings.add(module)

    sys.setprofile(profile)
    try:
        train.main.__wrapped__(cfg)  # train.py's main without Hydra's command line
        raise SystemExit("trace_config_walk: the trainer's arguments were never built")
    except Built as built:
        kwargs = built.args[0]
    finally:
        # leave the process as it was (the test suite runs this in-process)
        sys.setprofile(None)
        setattr(owner, name, real)
        HydraConfig.instance().cfg = None
        shutil.rmtree(out, ignore_errors=True)
    assert kwargs["output_dir"] == str(out / "run")
    for module, n in sorted(calls.items()):
        mark = "*" if module in with_config else "+" if module in with_settings else " "
        print(f"{mark} {module:<32} {n:>6} calls")
    print(f"{len(calls)} rlsr modules run on the walk from train.py's main to the trainer's "
          f"arguments; the config enters {len(with_config)} of them (*); "
          f"{len(with_settings)} receive the config or one of its settings sections (* or +)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())

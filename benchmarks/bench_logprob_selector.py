"""Cost of the log-probability selector: RLSR ranked by verbalized confidence (baseline) vs by
the answer's length-normalised log-probability (``method.confidence=logprob``), same run.

The log-prob selector adds one no-grad forward of prompt + response-up-to-the-answer per
completion inside ``_calculate_rewards`` (``rlsr.equations.logprob``; TRL has no usable log-probs there,
see ``RLSRTrainer._logprob_confidences``). Both arms use recipe=tiny-format (format-warm tiny model,
LoRA r=1, transformers generation, pool 16) with the same seed; runs alternate (A B A B ...) so
machine load hits both alike. Reported: median optimizer-step time (TRL's ``step_time``) and
median time inside ``_calculate_rewards``, first step of each run dropped (warm-up).

    .venv/bin/python benchmarks/bench_logprob_selector.py [--rounds 3] [--steps 5]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _settings(out: str, steps: int, confidence: str):
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from rlsr.config import from_dict
    from rlsr.method.run_plan import plan_run

    with initialize_config_dir(config_dir=str(ROOT / "recipes"), version_base="1.3"):
        cfg = compose(config_name="config", overrides=["recipe=tiny-format", f"output_dir={out}"])
    values = OmegaConf.to_container(cfg, resolve=True)
    values.pop("hydra", None)
    s = from_dict(values)
    s.method.confidence = confidence
    s.grpo.update(max_steps=steps, save_steps=10_000, disable_tqdm=True, logging_steps=1)
    s.resume = "never"
    return plan_run(s, world_size=1).settings


def _run(confidence: str, steps: int) -> tuple[list[float], list[float]]:
    from rlsr.method.run_plan import plan_run
    from rlsr.train.training import build_trainer

    with tempfile.TemporaryDirectory() as out:
        trainer = build_trainer(plan_run(_settings(out, steps, confidence)))
        seconds: list[float] = []
        original = trainer._calculate_rewards

        def timed(*args, **kwargs):
            t0 = time.perf_counter()
            result = original(*args, **kwargs)
            seconds.append(time.perf_counter() - t0)
            return result

        trainer._calculate_rewards = timed
        trainer.train()
        step_times = [h["step_time"] for h in trainer.state.log_history if "step_time" in h]
    return step_times[1:], seconds[1:]


def main(argv=None) -> int:
    import torch

    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=5)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    results = {"verbalized": ([], []), "logprob": ([], [])}
    for _ in range(args.rounds):
        for kind in results:
            steps, rewards = _run(kind, args.steps)
            results[kind][0].extend(steps)
            results[kind][1].extend(rewards)
    base_step = statistics.median(results["verbalized"][0])
    base_reward = statistics.median(results["verbalized"][1])
    print(
        "| selector | median step s | vs verbalized | median _calculate_rewards s | extra s/step |"
    )
    print("| --- | --- | --- | --- | --- |")
    for kind, (steps, rewards) in results.items():
        step, reward = statistics.median(steps), statistics.median(rewards)
        print(
            f"| {kind} | {step:.3f} | {step / base_step:.2f}x | {reward:.4f} | "
            f"{reward - base_reward:+.4f} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

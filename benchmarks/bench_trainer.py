"""Pooling overhead: RLSRTrainer vs plain GRPOTrainer on recipe=tiny-format, measured in the same run.

The baseline is TRL's GRPOTrainer with two ordinary per-process reward functions doing the same
parsing and exact-match verification (format, correctness) but no gather and no pooled ranking.
Both trainers use the same model, data, seed and settings; runs alternate (A B A B ...) so
machine load hits both alike. Reported: median optimizer-step time (TRL's ``step_time``) and
median time inside ``_calculate_rewards``, with RLSR's overhead in percent.

    .venv/bin/python benchmarks/bench_trainer.py [--rounds 3] [--steps 4]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _settings(out: str, steps: int):
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from rlsr.config import from_dict
    from rlsr.method.run_plan import plan_run

    with initialize_config_dir(config_dir=str(ROOT / "recipes"), version_base="1.3"):
        cfg = compose(config_name="config", overrides=["recipe=tiny-format", f"output_dir={out}"])
    values = OmegaConf.to_container(cfg, resolve=True)
    values.pop("hydra", None)
    s = from_dict(values)
    s.grpo.update(max_steps=steps, save_steps=10_000, disable_tqdm=True, logging_steps=1)
    s.resume = "never"
    return plan_run(s).settings


def _timed(cls):
    """Subclass of ``cls`` recording the wall time of each ``_calculate_rewards`` call."""

    class Timed(cls):
        reward_seconds: list[float]

        def _calculate_rewards(self, *args, **kwargs):
            t0 = time.perf_counter()
            out = super()._calculate_rewards(*args, **kwargs)
            self.reward_seconds.append(time.perf_counter() - t0)
            return out

    return Timed


def _plain_reward_funcs():
    from rlsr.core.parsing import parse_response
    from rlsr.method.trainer import completion_text
    from rlsr.verifiers import get_verifier

    verifier = get_verifier("exact_match")

    def format_reward(completions, **kw):
        return [float(parse_response(completion_text(c)).format_ok) for c in completions]

    def correctness_reward(completions, answers, **kw):
        preds = [parse_response(completion_text(c)).answer for c in completions]
        return (
            verifier.verify_batch(preds, [list(a) for a in answers]).correct.astype(float).tolist()
        )

    return [format_reward, correctness_reward]


def _run(kind: str, steps: int) -> tuple[list[float], list[float]]:
    from trl import GRPOConfig, GRPOTrainer

    from rlsr.config import resolve_model_path
    from rlsr.method.methods import resolve
    from rlsr.method.run_plan import plan_run
    from rlsr.method.trainer import RLSRTrainer
    from rlsr.train.training import load_train_dataset, trainer_kwargs

    with tempfile.TemporaryDirectory() as out:
        s = _settings(out, steps)
        args = GRPOConfig(**trainer_kwargs(plan_run(s)))
        path = resolve_model_path(s.model.name_or_path)
        from peft import LoraConfig
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(path, padding_side="left")
        data = load_train_dataset(s, tok)
        peft = LoraConfig(r=1, lora_alpha=32, lora_dropout=0.0, target_modules="all-linear",
                          task_type="CAUSAL_LM")  # fmt: skip
        common = dict(
            model=path, args=args, train_dataset=data, processing_class=tok, peft_config=peft
        )
        if kind == "rlsr":
            trainer = _timed(RLSRTrainer)(
                method=resolve(s.method), verifier="exact_match", **common
            )
        else:
            trainer = _timed(GRPOTrainer)(reward_funcs=_plain_reward_funcs(), **common)
        trainer.reward_seconds = []
        trainer.train()
        step_times = [h["step_time"] for h in trainer.state.log_history if "step_time" in h]
    return step_times[1:], trainer.reward_seconds[1:]  # first step includes warm-up


def main(argv=None) -> int:
    import torch

    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=4)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    results = {"grpo": ([], []), "rlsr": ([], [])}
    for _ in range(args.rounds):
        for kind in ("grpo", "rlsr"):
            steps, rewards = _run(kind, args.steps)
            results[kind][0].extend(steps)
            results[kind][1].extend(rewards)
    med = {k: (statistics.median(v[0]), statistics.median(v[1])) for k, v in results.items()}
    step_over = 100 * (med["rlsr"][0] / med["grpo"][0] - 1)
    reward_over_ms = 1000 * (med["rlsr"][1] - med["grpo"][1])
    print(f"steps measured per trainer: {len(results['rlsr'][0])}")
    print(
        f"plain GRPOTrainer : step {med['grpo'][0] * 1000:8.1f} ms, rewards {med['grpo'][1] * 1000:7.2f} ms"
    )
    print(
        f"RLSRTrainer       : step {med['rlsr'][0] * 1000:8.1f} ms, rewards {med['rlsr'][1] * 1000:7.2f} ms"
    )
    print(f"step-time overhead: {step_over:+.1f} %  (reward computation {reward_over_ms:+.2f} ms/step, "
          f"{100 * (med['rlsr'][1] - med['grpo'][1]) / med['grpo'][0]:+.2f} % of a step)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())

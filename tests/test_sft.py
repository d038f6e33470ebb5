"""SFT-Answer-Only (paper Sec. D.3, Tab. 6): ``train.py method=sft`` and ``rlsr evaluate
--response-format plain --scorers consistency`` end to end on the tiny model.

Real components: ``train.py`` through Hydra (recipe=tiny method=sft), TRL's SFTTrainer with PEFT
LoRA r=1, the transformers evaluation backend. Nothing is mocked. A job killed after step 1 is
simulated by deleting what step 2 wrote (checkpoint-2 and the final adapter) from a finished
2-step run; ``resume=auto`` must train step 2 again and end with the same adapter.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.timeout(900)


def _train(out: Path, *extra: str) -> subprocess.CompletedProcess:
    from rlsr.data.tiny_models import tiny_warm_model_path

    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, str(ROOT / "train.py"), "recipe=tiny", "method=sft",
           f"model.name_or_path={tiny_warm_model_path()}", f"output_dir={out}",
           "sft.max_steps=2", "sft.save_steps=1", "sft.warmup_steps=0",
           "sft.per_device_train_batch_size=4", "sft.gradient_accumulation_steps=1",
           "sft.disable_tqdm=true", *extra]  # fmt: skip
    return subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)


def _adapter(path: Path):
    from safetensors.torch import load_file

    return load_file(str(path / "adapter_model.safetensors"))


def _sft_example_rows():
    from rlsr.data.loading import load_examples
    from rlsr.method.sft_trainer import sft_examples

    rows = load_examples("tiny", split="train", limit=3, system_prompt="none")
    return rows, sft_examples(rows)


def test_sft_examples_are_question_answer_pairs_without_system_prompt():
    rows, examples = _sft_example_rows()
    assert examples.column_names == ["prompt", "completion"]
    for row, ex in zip(rows, examples, strict=True):
        assert [m["role"] for m in ex["prompt"]] == ["user"]  # no tag-format system prompt
        assert row["question"] in ex["prompt"][0]["content"]
        assert ex["completion"] == [{"role": "assistant", "content": row["answer"]}]


def _compose(*overrides):
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from rlsr.config import from_dict

    with initialize_config_dir(config_dir=str(ROOT / "recipes"), version_base="1.3"):
        cfg = compose(config_name="config", overrides=["recipe=tiny", *overrides])
    values = OmegaConf.to_container(cfg, resolve=True)
    values.pop("hydra", None)
    return from_dict(values)


def test_sft_and_grpo_trainers_share_save_and_resume():
    """Both trainers take save (training_args.json, no pickle) and the multi-process CPU resume
    fix (optimizer state mapped to ``cpu``, not ``cpu:0``; exercised by tests/test_multinode.py
    for GRPO) from one mixin. Catches the SFT trainer losing either when the mixin is split."""
    from rlsr.method.sft_trainer import SFTAnswerTrainer
    from rlsr.method.trainer import RLSRTrainer, RunCheckpoints

    for trainer in (SFTAnswerTrainer, RLSRTrainer):
        for hook in ("_save", "_load_optimizer_and_scheduler"):
            assert getattr(trainer, hook) is getattr(RunCheckpoints, hook), (trainer, hook)


def test_sft_recipe_reads_the_sft_section_and_checks_it():
    from rlsr.config import ConfigError
    from rlsr.method.run_plan import plan_run
    from rlsr.train.training import trainer_kwargs

    s = _compose("method=sft")
    kwargs = trainer_kwargs(plan_run(s, world_size=1))
    # machine settings follow the recipe's grpo section; no GRPO-only field leaks in
    assert kwargs["use_cpu"] is True and kwargs["bf16"] is False
    assert kwargs["max_steps"] == s.grpo["max_steps"] == 40  # recipe=tiny's grpo.max_steps
    assert "num_generations" not in kwargs and "reward_weights" not in kwargs
    assert s.data.system_prompt == "none"
    s.sft["learnig_rate"] = 1e-4
    with pytest.raises(ConfigError, match="sft.learnig_rate: not a trl.SFTConfig field. Did you"):
        plan_run(s, world_size=1)
    # a GRPO method given sft settings says they would be ignored
    s = _compose("method=rlsr")
    s.sft = {"learning_rate": 1e-4}
    with pytest.raises(ConfigError, match="sft.learning_rate: the sft section is read by"):
        plan_run(s, world_size=1)


@pytest.mark.slow
def test_sft_trains_resumes_and_evaluates_with_consistency_on_plain_answers(tmp_path, capsys):
    import torch

    from rlsr.cli import main as rlsr_main
    from rlsr.data.tiny_models import tiny_warm_model_path
    from rlsr.evaluation.run.samples_io import read_samples
    from rlsr.verifiers import normalize_answer

    out = tmp_path / "sft"
    first = _train(out)
    assert first.returncode == 0, first.stderr[-3000:]
    # the GRPO runs' output layout
    assert (out / "config.yaml").is_file() and "name: sft" in (out / "config.yaml").read_text()
    for folder in (out / "checkpoint-1", out / "checkpoint-2", out):
        assert (folder / "adapter_model.safetensors").is_file(), folder
        assert (folder / "training_args.json").is_file(), folder
        assert not (folder / "training_args.bin").exists(), folder
    state = json.loads((out / "checkpoint-2" / "trainer_state.json").read_text())
    losses = [h["loss"] for h in state["log_history"] if "loss" in h]
    assert len(losses) == 2 and all(v > 0 for v in losses)
    final = _adapter(out)
    assert any(k.endswith("lora_B.weight") and v.abs().max() > 0 for k, v in final.items())

    # kill after step 1: remove what step 2 wrote, then resume=auto
    shutil.rmtree(out / "checkpoint-2")
    for name in ("adapter_model.safetensors", "adapter_config.json"):
        (out / name).unlink()
    resumed = _train(out)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resuming from" in resumed.stdout and "checkpoint-1" in resumed.stdout
    # it trained step 2 only (one loss log, where the first run logged two) and, with the
    # optimizer and scheduler state of checkpoint-1, ended where the uninterrupted run ended
    assert first.stdout.count("'loss'") == 2 and resumed.stdout.count("'loss'") == 1
    again = _adapter(out)
    assert again.keys() == final.keys()
    for key in final:
        torch.testing.assert_close(again[key], final[key], rtol=0, atol=1e-6, msg=key)
    # a rerun of the finished run trains nothing
    rerun = _train(out)
    assert rerun.returncode == 0 and "already reached the last step" in rerun.stdout

    # evaluate: plain answers, self-consistency (K = 2 here; paper K = 8 at T = 0.7)
    ev = tmp_path / "eval"
    argv = ["evaluate", "--model", str(tiny_warm_model_path()), "--adapter", str(out),
            "--tasks", "tiny", "--output-dir", str(ev), "--limit", "6", "--batch-size", "3",
            "--system-prompt", "none", "--response-format", "plain",
            "--consistency-k", "2", "--max-new-tokens", "8", "--bootstrap", "0",
            "--no-progress"]  # fmt: skip
    assert rlsr_main(argv) == 0
    records = read_samples(ev / "tiny" / "samples.jsonl")
    metrics = json.loads((ev / "tiny" / "metrics.json").read_text())
    assert metrics["primary_scorer"] == "consistency" and set(metrics["scorers"]) == {"consistency"}
    assert metrics["fallbacks"] == {"answer": 0, "confidence": 0}
    assert len(records) == 6
    for r in records:
        assert [m["role"] for m in r["prompt"]] == ["user"]
        lines = [line.strip() for line in r["response"].splitlines() if line.strip()]
        assert r["answer"] == (lines[0] if lines else None)
        assert r["confidence"] is None and r["fallbacks"] == []
        samples = r["consistency_answers"]
        assert len(samples) == 2
        if r["answer"] is None:
            assert r["scores"]["consistency"] is None
            continue
        agree = sum(s is not None and normalize_answer(s) == normalize_answer(r["answer"])
                    for s in samples)  # fmt: skip
        assert r["scores"]["consistency"] == agree / 2
    # verbalized confidence makes no sense for plain answers: a one-line error, exit 2
    assert rlsr_main([*argv, "--scorers", "verbalized,consistency"]) == 2
    assert "plain answers state no confidence" in capsys.readouterr().err

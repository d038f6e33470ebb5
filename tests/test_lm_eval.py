"""The lm-eval task pack end to end: `rlsr lm-eval tasks`, lm-evaluation-harness's own CLI (its
``hf`` model, greedy, on CPU) on a shipped tiny model, then lm-eval's logged generations scored
by `rlsr evaluate --from-samples` and the same model run by `rlsr evaluate`. Skipped where
lm_eval is not installed (the ``lm-eval`` extra)."""

from __future__ import annotations

import glob
import importlib.util
import json
import os
import subprocess
import sys

import pytest

from rlsr.cli import main as rlsr_main
from rlsr.data.tiny_models import tiny_warm_model_path
from rlsr.evaluation.run.samples_io import read_samples
from rlsr.metrics.selective import ranking_gain_from_aurc

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("lm_eval") is None,
    reason="lm_eval is not installed (pip install -e '.[lm-eval]')",
)

N, TOKENS = 4, 32  # the tiny-warm model answers in 27 tokens


def test_lm_eval_metrics_equal_rlsr_evaluate(tmp_path):
    """lm-eval's aggregated metrics equal metrics.json of the same generations scored by
    --from-samples (to 1e-9), its per-item verdicts equal samples.jsonl's, and its greedy
    responses equal `rlsr evaluate --backend transformers --no-fallbacks`'s on the same model,
    task and budget (then so do the metrics)."""
    model = str(tiny_warm_model_path())
    pack = tmp_path / "pack"
    assert rlsr_main(["lm-eval", "tasks", "--tasks", "tiny", "--limit", str(N),
                      "--max-new-tokens", str(TOKENS), "--output-dir", str(pack)]) == 0  # fmt: skip
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    run = subprocess.run(
        [sys.executable, "-m", "lm_eval", "--model", "hf",
         "--model_args", f"pretrained={model},dtype=float32", "--device", "cpu",
         "--batch_size", "1", "--apply_chat_template", "--include_path", str(pack),
         "--tasks", "rlsr_tiny", "--gen_kwargs", "do_sample=False", "--log_samples",
         "--output_path", str(tmp_path / "lm")],
        capture_output=True, text=True, env=env, timeout=600,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    [results] = glob.glob(str(tmp_path / "lm" / "*" / "results_*.json"))
    [samples] = glob.glob(str(tmp_path / "lm" / "*" / "samples_rlsr_tiny_*.jsonl"))
    lm = json.loads(open(results).read())["results"]["rlsr_tiny"]
    logged = sorted((json.loads(line) for line in open(samples)), key=lambda r: r["doc_id"])

    assert rlsr_main(["evaluate", "--from-samples", samples, "--tasks", "tiny",
                      "--output-dir", str(tmp_path / "scored"), "--bootstrap", "0"]) == 0  # fmt: skip
    scored = json.loads((tmp_path / "scored" / "tiny" / "metrics.json").read_text())
    m = scored["scorers"]["verbalized"]
    expected = {"aurc": m["aurc"], "ece": m["ece"], "acc_at_10": m["acc@10"],
                "acc_at_25": m["acc@25"], "acc_at_50": m["acc@50"],
                "accuracy": scored["accuracy"], "format_rate": scored["format_ok_rate"],
                "missing_confidence": m["missing_confidence"],
                "ranking_gain": ranking_gain_from_aurc(m["aurc"], 1 - scored["accuracy"])}  # fmt: skip
    for name, value in expected.items():
        assert lm[f"{name},none"] == pytest.approx(value, abs=1e-9), name
    records = read_samples(tmp_path / "scored" / "tiny" / "samples.jsonl")
    assert [r["correct"] for r in records] == [s["accuracy"]["correct"] for s in logged]
    assert [r["response"] for r in records] == [s["resps"][0][0] for s in logged]

    assert rlsr_main(["evaluate", "--model", model, "--tasks", "tiny", "--limit", str(N),
                      "--output-dir", str(tmp_path / "ev"), "--no-fallbacks", "--max-new-tokens",
                      str(TOKENS), "--batch-size", "1", "--dtype", "float32", "--bootstrap", "0",
                      "--no-progress"]) == 0  # fmt: skip
    generated = read_samples(tmp_path / "ev" / "tiny" / "samples.jsonl")
    assert [r["response"] for r in generated] == [r["response"] for r in records]
    assert [r["correct"] for r in generated] == [r["correct"] for r in records]
    ours = json.loads((tmp_path / "ev" / "tiny" / "metrics.json").read_text())
    assert ours["scorers"]["verbalized"]["aurc"] == pytest.approx(lm["aurc,none"], abs=1e-9)

"""README command 1, ``train.py recipe=tiny``, ends with the run's summary (issue 31 item 5):
where the adapter, checkpoints, held-out metrics and pool files are, the held-out AURC at the
first and last evaluated step, and next commands that run as printed."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from test_trainer_support import TEST_THREADS

from rlsr.cli import main as rlsr_main
from rlsr.evaluation.history import read_history
from rlsr.pool_log import pool_path, pool_steps, read_pool
from rlsr.training import rlsr_program

REPO = Path(__file__).resolve().parents[1]
# The recipe, shortened: 4 steps, held-out and checkpoints every 2 (the summary's shape and its
# commands, not the learning; that is scripts/tiny_seeds.py's table, docs/training.md).
SHORT = ["grpo.max_steps=4", "eval.every=2", "grpo.save_steps=2"]
DATASET = "tiny-missing"


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_train_py_recipe_tiny_ends_with_a_summary_whose_commands_run(tmp_path, monkeypatch):
    out = tmp_path / "run"
    env = {**os.environ, "OMP_NUM_THREADS": str(TEST_THREADS)}
    done = subprocess.run(
        [sys.executable, str(REPO / "train.py"), "recipe=tiny", f"output_dir={out}",
         "grpo.disable_tqdm=true", *SHORT],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=580,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = done.stdout.rstrip().splitlines()
    start = max(i for i, line in enumerate(lines) if line.startswith("[rlsr] 4 optimizer steps"))
    summary = lines[start:]
    text = "\n".join(summary)
    assert summary[0].endswith(f"Run folder: {out}")  # the summary is the end of the output
    assert f"adapter      {out / 'adapter_model.safetensors'}" in text
    assert f"checkpoints  {out / 'checkpoint-2'}, {out / 'checkpoint-4'}" in text

    # Held-out AURC at the first and last evaluated step, as eval/ holds them.
    history = read_history(out)
    assert [h["step"] for h in history] == [0, 2, 4]
    first, last = history[0], history[-1]
    # ranking gain by its definition (error rate - AURC), not through the summary's helper
    gain = [round((1 - h["accuracy"]) - h["aurc"], 3) + 0.0 for h in (first, last)]
    assert (
        f"{DATASET}: AURC {first['aurc']:.4f} at step 0 -> {last['aurc']:.4f} at step 4 "
        f"(lower is better); error rate {1 - first['accuracy']:.3f} -> {1 - last['accuracy']:.3f}; "
        f"ranking gain (error rate - AURC, 0 = no ranking) {gain[0]:+.3f} -> "
        f"{gain[1]:+.3f}; format rate {last['format_rate']:.2f}" in text
    )

    # Every pool of the 4 steps once, 32 rows each (8 prompts x G = 4).
    assert pool_steps(out) == list(range(4))
    assert f"pools        {out / 'pools'} (4 files, step-0.jsonl ... step-3.jsonl)" in text
    assert all(len(read_pool(pool_path(out, s))) == 32 for s in range(4))

    # The next commands, run as printed: rlsr evaluate on the final adapter reproduces the last
    # held-out step (the final adapter is checkpoint-4's), the reports read the run.
    # The program is the `rlsr` beside this interpreter (.venv/bin/rlsr after install) unless
    # that one is on PATH, so the commands run as printed without activating the venv; the
    # in-process calls below run this checkout's CLI.
    monkeypatch.chdir(tmp_path)  # where train.py ran: a relative program is relative to it
    commands = [shlex.split(line.strip()) for line in summary[summary.index("next:") + 1 :]]
    assert {c[0] for c in commands} == {rlsr_program()}
    assert Path(rlsr_program()).name == "rlsr" and shutil.which(rlsr_program())
    assert [c[1] for c in commands] == ["evaluate", "report", "report"]
    assert [c[2] for c in commands[1:]] == ["--curves", "--pools"]
    for command in commands:
        assert rlsr_main(command[1:]) == 0, command
    metrics = json.loads((out / "evaluate" / DATASET / "metrics.json").read_text())
    assert metrics["scorers"][metrics["primary_scorer"]]["aurc"] == pytest.approx(last["aurc"])
    assert (out / "report_curves.png").is_file() and (out / "report_pools.csv").is_file()

    # `rlsr compare` reads both real layouts of this run: its held-out history (steps 0-4) and
    # the final adapter's evaluate folder (step 4: checkpoint-4's trainer_state.json); method
    # and seed from its config.yaml; values recomputed from samples.jsonl equal the history's.
    for use, first in (("held-out", 0), ("evaluate", 4)):
        compared = tmp_path / f"compare-{use}"
        assert rlsr_main(["compare", str(out), "--use", use, "--output-dir", str(compared)]) == 0
        block = json.loads((compared / "compare.json").read_text())["datasets"][DATASET]
        assert (block["first_step"], block["last_step"]) == (first, 4)
        assert block["methods"]["rlsr"]["seeds"]["42"]["aurc"] == pytest.approx(last["aurc"])

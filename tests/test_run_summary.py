"""README command 1, ``train.py recipe=tiny``, ends with the run's summary:
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
import yaml
from test_trainer_support import TEST_THREADS

from rlsr.cli import main as rlsr_main
from rlsr.evaluation.heldout.history import read_history
from rlsr.method.pool_log import read_pool
from rlsr.method.run_plan import plan_run
from rlsr.run.run_layout import pool_path, pool_steps
from rlsr.train.training import rlsr_program, run_summary

REPO = Path(__file__).resolve().parents[1]
# The recipe, shortened: 4 steps, held-out and checkpoints every 2 (the summary's shape and its
# commands, not the learning; that is tools/tiny/seeds.py's table, docs/results.md).
SHORT = ["grpo.max_steps=4", "heldout.every=2", "grpo.save_steps=2"]
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
    report = out / "report"  # the summary's --output-dir
    assert (report / "report_curves.png").is_file() and (report / "report_pools.csv").is_file()

    # `rlsr compare` reads both real layouts of this run: its held-out history (steps 0-4) and
    # the final adapter's evaluate folder (step 4: checkpoint-4's trainer_state.json); method
    # and seed from its config.yaml; values recomputed from samples.jsonl equal the history's.
    # compare refuses one seed per method, so a second seed is this run's copy recorded as seed
    # 7 (its config.yaml and its evaluate folder's run.json pointing at the copy).
    twin = tmp_path / "twin"
    shutil.copytree(out, twin)
    config = yaml.safe_load((twin / "config.yaml").read_text())
    config.update(seed=7, output_dir=str(twin))
    (twin / "config.yaml").write_text(yaml.safe_dump(config))
    for run_file in twin.rglob("run.json"):
        run_file.write_text(run_file.read_text().replace(str(out), str(twin)))
    for use, first in (("held-out", 0), ("evaluate", 4)):
        compared = tmp_path / f"compare-{use}"
        argv = ["compare", str(out), str(twin), "--use", use, "--output-dir", str(compared)]
        assert rlsr_main(argv) == 0
        block = json.loads((compared / "compare.json").read_text())["datasets"][DATASET]
        assert (block["first_step"], block["last_step"]) == (first, 4)
        seeds = block["methods"]["rlsr"]["seeds"]
        assert seeds["42"]["aurc"] == pytest.approx(last["aurc"]) == seeds["7"]["aurc"]
    # without --use, as README's `rlsr compare runs`: the held-out histories, each run's own
    # evaluate folder (the summary's command) left out with a note naming --use evaluate
    compared = tmp_path / "compare-default"
    assert rlsr_main(["compare", str(out), str(twin), "--output-dir", str(compared)]) == 0
    result = json.loads((compared / "compare.json").read_text())
    assert result["evaluations"] == "held-out"
    assert any("left out 2 `rlsr evaluate` folder(s)" in note for note in result["notes"])


# --- the summary's commands and `rlsr report --curves` on a run folder written by hand (fast) ---


def _fake_run(out: Path, history, *, checkpoints=(), max_steps=None, pool_steps_=()) -> Path:
    """A finished run's folder as train.py leaves it, without training: ``history`` is
    ``[(step, aurc, accuracy), ...]`` written as eval/step-N/<DATASET>/metrics.json; a
    checkpoint-N folder per ``checkpoints`` (its trainer_state.json: global_step N of
    ``max_steps``); the final adapter; a 4-row pool file per ``pool_steps_``."""
    for step, aurc, accuracy in history:
        folder = out / "eval" / f"step-{step}" / DATASET
        folder.mkdir(parents=True)
        scores = {"aurc": aurc, "ece": 0.1, "acc@10": 1.0, "acc@25": 1.0, "acc@50": 0.9,
                  "confidence_gap": 0.2}  # fmt: skip
        metrics = {"n": 100, "accuracy": accuracy, "format_ok_rate": 1.0,
                   "primary_scorer": "verbalized", "scorers": {"verbalized": scores}}  # fmt: skip
        (folder / "metrics.json").write_text(json.dumps(metrics))
    for step in checkpoints:
        (out / f"checkpoint-{step}").mkdir(parents=True)
        state = {"global_step": step, "max_steps": max_steps}
        (out / f"checkpoint-{step}" / "trainer_state.json").write_text(json.dumps(state))
    (out / "adapter_model.safetensors").write_bytes(b"weights")
    for step in pool_steps_:
        rows = [{"step": step, "correct": ok, "confidence": c, "format_ok": True, "reward": 0.0,
                 "advantage": 0.0} for ok, c in ((True, 0.9), (False, 0.2), (True, 0.6), (False, None))]  # fmt: skip
        pool_path(out, step).parent.mkdir(parents=True, exist_ok=True)
        pool_path(out, step).write_text("".join(json.dumps(r) + "\n" for r in rows))
    return out


def test_the_summary_reports_write_into_one_report_folder(tmp_path, monkeypatch):
    """The summary's `rlsr report --curves` / `--pools` lines use the commands' one output
    convention, `--output-dir RUN/report`, and run as printed: the files land inside that folder
    (with `--output RUN/report` they were written beside the run as RUN/report_curves.png)."""
    from rlsr.config.compose import compose_config

    out = _fake_run(tmp_path / "run", [(0, 0.5, 0.45), (2, 0.4, 0.5)], pool_steps_=(0, 1))
    text = run_summary(plan_run(compose_config(["recipe=tiny", f"output_dir={out}"])))
    lines = text.splitlines()
    reports = [shlex.split(line) for line in lines[lines.index("next:") + 1 :]][1:]
    assert [c[1:3] for c in reports] == [["report", "--curves"], ["report", "--pools"]]
    assert all(c[-2:] == ["--output-dir", str(out / "report")] for c in reports)
    monkeypatch.chdir(tmp_path)
    for command in reports:
        assert rlsr_main(command[1:]) == 0, command
    written = sorted(p.name for p in (out / "report").iterdir())
    assert written == ["report_curves.csv", "report_curves.png", "report_pools.csv"]


def test_report_curves_names_the_best_and_the_final_step_with_their_weights(tmp_path, capsys):
    """`rlsr report --curves` names the best step by AURC and the final (last evaluated) step,
    each with its AURC and where its weights are; the final adapter in the run folder is named
    only when the newest checkpoint's trainer_state.json says training ended at that step
    (naming only the best checkpoint left the summary's final-adapter AURC unexplained)."""
    ended = _fake_run(tmp_path / "ended", [(0, 0.5, 0.43), (20, 0.3367, 0.44), (40, 0.37, 0.45)],
                      checkpoints=(20, 40), max_steps=40)  # fmt: skip
    assert rlsr_main(["report", "--curves", str(ended), "--output-dir", str(tmp_path / "r")]) == 0
    text = capsys.readouterr().out
    assert f"ended {DATASET}: best  AURC 0.3367 at step 20: {ended / 'checkpoint-20'}\n" in text
    assert (
        f"ended {DATASET}: final AURC 0.3700 at step 40: {ended / 'checkpoint-40'} (= the final "
        f"adapter in {ended})\n" in text
    )
    # The newest checkpoint (step 20 of 40) does not say training ended at step 40: the run
    # folder's adapter is not claimed for it.
    open_end = _fake_run(tmp_path / "open", [(0, 0.5, 0.43), (20, 0.3367, 0.44), (40, 0.37, 0.45)],
                         checkpoints=(20,), max_steps=40)  # fmt: skip
    assert (
        rlsr_main(["report", "--curves", str(open_end), "--output-dir", str(tmp_path / "o")]) == 0
    )
    text = capsys.readouterr().out
    assert f"open {DATASET}: final AURC 0.3700 at step 40: no checkpoint was saved" in text


def test_curve_panels_do_not_magnify_one_question(tmp_path):
    """An accuracy that moves 0.43 -> 0.45 (two questions of 100) gets a y-axis at least
    MIN_Y_SPAN wide, inside [0, 1], holding every value (autoscaling drew that change across
    the whole panel); y_limits keeps a wide range and moves a narrow one inside [0, 1]."""
    from rlsr.evaluation.reports import curves

    run = _fake_run(tmp_path / "run", [(0, 0.5, 0.43), (20, 0.34, 0.44), (40, 0.37, 0.45)])
    rows = curves.curve_rows([run])
    fig = curves._figure(rows, curves.best_steps(rows))
    for ax, values in zip(
        fig.axes, ([0.5, 0.34, 0.37], [0.43, 0.44, 0.45], [0.1] * 3), strict=True
    ):
        lo, hi = ax.get_ylim()
        assert hi - lo >= curves.MIN_Y_SPAN - 1e-12 and 0.0 <= lo and hi <= 1.0
        assert lo <= min(values) and max(values) <= hi
    assert curves.y_limits([0.0, 0.01]) == pytest.approx((0.0, 0.2))
    assert curves.y_limits([0.99, 1.0]) == pytest.approx((0.8, 1.0))
    assert curves.y_limits([0.1, 0.9]) == pytest.approx((0.06, 0.94))
    assert curves.y_limits([float("nan")]) == (0.0, 1.0)

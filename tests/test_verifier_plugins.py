"""Verifier plugins (rlsr.verifiers.plugin, docs/tasks.md "Verifier plugins"): a user's
``package.module:function`` from a module in a temporary folder outside the repository, run in
the math verifier's worker pool one item per call under a time limit. A plugin that hangs, raises,
exits or returns the wrong length or type ends as counted per-item statuses with what went wrong,
never a crash or a hang; past ``max_failed_fraction`` (5 %) of a run's items the run stops naming
the plugin, the first failing item and its problem: in one real training step (format-warm tiny
model, RLSRTrainer) and in a real ``rlsr evaluate``, whose fixed rerun resumes.
"""

from __future__ import annotations

import json
import re
import shutil
import textwrap
from pathlib import Path

import datasets
import pytest
import torch
from test_trainer_support import TEST_THREADS, format_warm_model, tiny_settings

from rlsr.cli import main as rlsr_main
from rlsr.data import TaskError, load_task_file, task_names, unregister_task
from rlsr.data.loading import FIXTURES_DIR, load_examples
from rlsr.method.run_plan import plan_run
from rlsr.train.training import build_trainer
from rlsr.verifiers import PluginVerifier, get_verifier, load_plugin
from rlsr.verifiers.base import VerifierFailure

pytestmark = pytest.mark.timeout(600)
datasets.disable_progress_bars()

PLUGIN_SOURCE = """\
import signal
import time


def verify(predictions, golds, *, questions=None, options=None):
    return [p.strip().lower() == g.strip().lower() for p, g in zip(predictions, golds)]


def sleepy(predictions, golds, *, questions=None, options=None):
    time.sleep(60)  # interrupted by the per-item time limit (SIGALRM)
    return [True] * len(predictions)


def stuck(predictions, golds, *, questions=None, options=None):
    # As a call stuck in C code: the alarm cannot interrupt it, so the pool kills the worker.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
    time.sleep(60)
    return [True] * len(predictions)


def boom(predictions, golds, *, questions=None, options=None):
    raise RuntimeError("the checker broke")


def too_many(predictions, golds, *, questions=None, options=None):
    return [True] * (len(predictions) + 1)


def unsure(predictions, golds, *, questions=None, options=None):
    return [None] * len(predictions)


def numbers(predictions, golds, *, questions=None, options=None):
    return [1] * len(predictions)


def exits(predictions, golds, *, questions=None, options=None):
    import os

    os._exit(3)


FAIL_QUESTIONS = set()  # the tests set it: a fault of the environment, not of this file


def flaky(predictions, golds, *, questions=None, options=None):
    if questions[0] in FAIL_QUESTIONS:
        raise ConnectionError("checker service down")
    return [p.strip().lower() == g.strip().lower() for p, g in zip(predictions, golds)]


def sees(predictions, golds, *, questions=None, options=None):
    # Correct when the question and the options reach the plugin.
    return [q is not None and o == {"A": "Mars", "B": "Venus"}
            for q, o in zip(questions, options)]
"""


@pytest.fixture
def plugin_module(tmp_path, monkeypatch):
    """A plugin module in a temporary folder, on sys.path (as PYTHONPATH would put it)."""
    folder = tmp_path / "user_code"
    folder.mkdir()
    (folder / "rlsr_test_checks.py").write_text(PLUGIN_SOURCE)
    monkeypatch.syspath_prepend(str(folder))
    yield "rlsr_test_checks"
    for name in task_names():
        unregister_task(name)


PREDICTIONS = ["Paris", None, " rome ", "Lima"]
GOLDS = ["paris", "x", "Rome", "Quito"]


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_good_plugin_verifies_in_workers_and_in_process(plugin_module, num_workers):
    with get_verifier(f"{plugin_module}:verify", num_workers=num_workers, timeout_s=5) as v:
        result = v.verify_batch(PREDICTIONS, GOLDS)
    assert result.status == ("correct", "missing", "correct", "incorrect")
    assert (result.timeouts, result.errors) == (0, 0)


@pytest.mark.parametrize(
    "function, status, counts, problem",
    [
        ("sleepy", "timeout", (3, 0, 0), "no verdict within timeout_s 0.5 s"),
        ("stuck", "timeout", (3, 0, 0), "no verdict within 1 s (timeout_s 0.5 + grace_s 0.5)"),
        ("boom", "error", (0, 3, 0), "raised RuntimeError: the checker broke"),
        ("too_many", "error", (0, 3, 0), "returned 2 values for 1 item"),
        ("numbers", "error", (0, 3, 0), "returned 1 (int), not True / False / None"),
        ("exits", "error", (0, 3, 0), "called os._exit(3)"),
        ("unsure", "unjudged", (0, 0, 3), "returned None (could not judge)"),
    ],
)
def test_bad_plugins_end_as_counted_per_item_statuses(
    plugin_module, function, status, counts, problem
):
    verifier = PluginVerifier(
        f"{plugin_module}:{function}", num_workers=2, timeout_s=0.5, grace_s=0.5, chunk_size=2
    )
    with verifier:
        result = verifier.verify_batch(PREDICTIONS, GOLDS)
        assert result.status == (status, "missing", status, status)
        # timeouts, errors and "could not judge" apart, each with what went wrong
        assert (result.timeouts, result.errors, result.unjudged) == counts
        assert sorted(result.problems) == [0, 2, 3]
        assert problem in result.problems[0]
        assert not result.correct.any()
        # The pool survives: the next batch of a good kind is still answered.
        assert len(verifier.verify_batch(["a"], ["a"])) == 1
    if function == "stuck":
        assert verifier.restarts >= 3  # each stuck item cost its worker


@pytest.mark.parametrize("function, status, problem", [
    ("sleepy", "timeout", "timeout_s"), ("boom", "error", "RuntimeError: the checker broke"),
    ("too_many", "error", "2 values"), ("exits", "error", "os._exit(3)"),
])  # fmt: skip
def test_in_process_plugin_failures_are_statuses_too(plugin_module, function, status, problem):
    # num_workers=0: an os._exit in the plugin is the item's error, not the end of this process
    verifier = PluginVerifier(f"{plugin_module}:{function}", num_workers=0, timeout_s=0.3)
    result = verifier.verify_batch(["x"], ["x"])
    assert result.status == (status,) and problem in result.problems[0]


def test_max_failed_fraction_is_checked(plugin_module):
    assert PluginVerifier(f"{plugin_module}:verify", num_workers=0).max_failed_fraction == 0.05
    with pytest.raises(ValueError, match=r"max_failed_fraction must be a number in \[0, 1\]"):
        PluginVerifier(f"{plugin_module}:verify", num_workers=0, max_failed_fraction=5)


def test_the_plugin_sees_questions_and_options(plugin_module):
    options = [{"A": "Mars", "B": "Venus"}, {"A": "Mars"}]
    with PluginVerifier(f"{plugin_module}:sees", num_workers=1) as verifier:
        result = verifier.verify_batch(["A", "A"], ["A", "A"], questions=["q", "q"],
                                       options=options)  # fmt: skip
    assert result.status == ("correct", "incorrect")


def test_plugin_names_that_cannot_load(plugin_module):
    with pytest.raises(ValueError, match="expected 'package.module:function'"):
        load_plugin("rlsr_test_checks:")
    with pytest.raises(ValueError, match=r"has no function 'nope'; it defines \[.*'boom'"):
        load_plugin(f"{plugin_module}:nope")
    with pytest.raises(ValueError, match=r"module 'not_here_rlsr' does not import .*sys.path is"):
        get_verifier("not_here_rlsr:verify")


# --- a task with a bad plugin: one training step and one rlsr evaluate ---------------------------


def tiny_plugin_task(folder: Path, plugin: str, name: str, options: str = "") -> Path:
    """The bundled tiny data as a task verified by ``plugin`` (the format-warm model answers it
    in the tag format, so answers reach the plugin); ``options``: more verifier options."""
    data = folder / "tiny_data"
    if not data.exists():
        shutil.copytree(FIXTURES_DIR / "tiny", data)
    task = folder / f"{name}.yaml"
    extra = f", {options}" if options else ""
    task.write_text(textwrap.dedent(f"""\
        name: {name}
        data: {{path: tiny_data}}
        splits: {{train: train, eval: test}}
        verifier: {{name: "{plugin}", timeout_s: 0.5, grace_s: 0.5, num_workers: 2{extra}}}
        system_prompt: simple
    """))  # fmt: skip
    return task


def one_training_step(plugin_module, tmp_path, function, options=""):
    torch.set_num_threads(TEST_THREADS)
    name = f"tiny_{function}"
    load_task_file(tiny_plugin_task(tmp_path, f"{plugin_module}:{function}", name, options))
    settings = tiny_settings(tmp_path / "run", max_steps=1, save_steps=1000)
    settings.data.task = name
    plan_run(settings)
    pools = []
    trainer = build_trainer(plan_run(settings), pool_hook=pools.append)
    trainer.train()
    return trainer, pools


@pytest.mark.parametrize("function, problem", [("boom", "RuntimeError: the checker broke"),
                                               ("unsure", "returned None")])  # fmt: skip
def test_a_training_step_with_a_bad_plugin_stops_the_run(
    plugin_module, tmp_path, function, problem
):
    # Before: the step scored every item wrong, logged rlsr/verifier_errors 16/16 and trained on.
    with pytest.raises(VerifierFailure) as stopped:
        one_training_step(plugin_module, tmp_path, function)
    message = str(stopped.value)
    assert f"verifier {plugin_module}:{function} gave no verdict on" in message
    assert "of 16 items of the train pool of optimizer step 1" in message
    assert "max_failed_fraction 0.05" in message and problem in message
    assert re.search(r"first failing item: id '[\w-]+' \(", message)
    assert not (tmp_path / "run" / "adapter_model.safetensors").exists()


def test_a_step_under_the_limit_trains_and_counts_unjudged_apart(plugin_module, tmp_path):
    # max_failed_fraction: 1 (never stop): the unjudged rollouts are rewarded as wrong and
    # counted as rlsr/verifier_unjudged, not as errors
    trainer, pools = one_training_step(plugin_module, tmp_path, "unsure", "max_failed_fraction: 1")
    (pool,) = [p for p in pools if p["mode"] == "train"]
    assert not pool["correct"].any() and pool["unjudged"] > 0 and pool["errors"] == 0
    (logged,) = [h for h in trainer.state.log_history if "rlsr/verifier_unjudged" in h]
    assert logged["rlsr/verifier_unjudged"] == pool["unjudged"]
    assert logged["rlsr/verifier_errors"] == 0 and logged["rlsr/accuracy"] == 0


def evaluate_argv(task: Path, name: str, out: Path, *extra: str) -> list[str]:
    return ["evaluate", "--model", str(format_warm_model()), "--tasks", name, "--tasks-dir",
            str(task), "--max-new-tokens", "40", "--no-fallbacks", "--bootstrap", "0",
            "--no-progress", "--output-dir", str(out), *extra]  # fmt: skip


@pytest.mark.parametrize("function, workers, problem", [
    ("sleepy", 2, "timeout: no verdict within"), ("too_many", 2, "error: returned 2 values"),
    ("numbers", 2, "error: returned 1 (int)"), ("unsure", 2, "unjudged: returned None"),
    ("exits", 0, "error: called os._exit(3)"),
])  # fmt: skip
def test_rlsr_evaluate_stops_on_a_bad_plugin(
    plugin_module, tmp_path, capsys, function, workers, problem
):
    # Before: exit 0 with acc=0.000 AURC=1.000 (os._exit with num_workers 0: exit 1, no message)
    name = f"tiny_{function}"
    task = tiny_plugin_task(tmp_path, f"{plugin_module}:{function}", name)
    task.write_text(task.read_text().replace("num_workers: 2", f"num_workers: {workers}"))
    out = tmp_path / "ev"
    assert rlsr_main(evaluate_argv(task, name, out, "--limit", "4")) == 1
    err = capsys.readouterr().err
    assert f"rlsr: error: verifier {plugin_module}:{function} gave no verdict on" in err
    assert f"of 4 items of task {name}" in err and problem in err
    assert f"first failing item: id '{name}-test-" in err
    assert not (out / name / "samples.jsonl").exists()  # nothing of the failed group written


def test_a_fixed_rerun_resumes_after_a_stop(plugin_module, tmp_path, capsys):
    import rlsr_test_checks  # the plugin, imported in this process (num_workers: 0)

    name = "tiny_flaky"
    task = tiny_plugin_task(tmp_path, f"{plugin_module}:flaky", name)
    task.write_text(task.read_text().replace("num_workers: 2", "num_workers: 0"))
    load_task_file(task)
    rows = list(load_examples(name, limit=8))
    out = tmp_path / "ev"
    argv = evaluate_argv(task, name, out, "--limit", "8", "--batch-size", "4")
    # the checker's service is down for the second group: it stops there, the first is saved
    rlsr_test_checks.FAIL_QUESTIONS.update(r["question"] for r in rows[4:])
    try:
        assert rlsr_main(argv) == 1
    finally:
        rlsr_test_checks.FAIL_QUESTIONS.clear()
    err = capsys.readouterr().err
    first = re.search(r"first failing item: id '([\w-]+)' \(error: raised ConnectionError", err)
    assert first and first[1] in {r["id"] for r in rows[4:]}
    saved = [json.loads(x) for x in (out / name / "samples.jsonl").read_text().splitlines()]
    assert [r["id"] for r in saved] == [r["id"] for r in rows[:4]]
    # fixed (the service is back): the same command resumes and generates the other 4 only
    assert rlsr_main(argv) == 0
    metrics = json.loads((out / name / "metrics.json").read_text())
    assert metrics["n"] == 8 and metrics["throughput"]["new_samples"] == 4
    assert metrics["verifier_failures"] == 0 and metrics["unjudged"] == 0


def test_rlsr_evaluate_counts_unjudged_apart(plugin_module, tmp_path, capsys):
    # max_failed_fraction: 1: a run of unjudged items ends, and says how many were not judged
    name = "tiny_unsure"
    task = tiny_plugin_task(tmp_path, f"{plugin_module}:unsure", name, "max_failed_fraction: 1")
    out = tmp_path / "ev"
    assert rlsr_main(evaluate_argv(task, name, out, "--limit", "4")) == 0
    samples = [json.loads(x) for x in (out / name / "samples.jsonl").read_text().splitlines()]
    answered = [s for s in samples if s["verify_status"] != "missing"]
    assert answered and all(s["verify_status"] == "unjudged" and not s["correct"]
                            and s["verify_problem"] == "returned None (could not judge)"
                            for s in answered)  # fmt: skip
    metrics = json.loads((out / name / "metrics.json").read_text())
    assert metrics["unjudged"] == len(answered) and metrics["verifier_failures"] == 0
    assert "judge_invalid" not in metrics
    summary = json.loads((out / "summary.json").read_text())[name]
    assert summary["unjudged"] == len(answered)
    assert f"({len(answered)} of 4 unjudged, counted wrong;" in capsys.readouterr().out


def test_a_task_with_a_bad_plugin_option_is_refused(plugin_module, tmp_path):
    task = tiny_plugin_task(tmp_path, f"{plugin_module}:verify", "tiny_opts")
    task.write_text(task.read_text().replace("grace_s", "grace"))
    with pytest.raises(TaskError, match=r"'grace' is not an option of verifier .*Did you mean "
                       "'grace_s'"):  # fmt: skip
        load_task_file(task)

"""Verifier plugins (rlsr.verifiers.plugin, docs/tasks.md "Verifier plugins"): a user's
``package.module:function`` from a module in a temporary folder outside the repository, run in
the math verifier's worker pool one item per call under a time limit. A plugin that hangs, raises
or returns the wrong length ends as counted per-item statuses, never a crash or a hang: in the
verifier itself, in one real training step (format-warm tiny model, RLSRTrainer) and in a real
``rlsr evaluate``.
"""

from __future__ import annotations

import json
import shutil
import textwrap
from pathlib import Path

import datasets
import pytest
import torch
from test_trainer_support import TEST_THREADS, format_warm_model, tiny_settings

from rlsr.cli import main as rlsr_main
from rlsr.data import TaskError, load_task_file, task_names, unregister_task
from rlsr.data.loading import FIXTURES_DIR
from rlsr.training import build_trainer, validate
from rlsr.verifiers import PluginVerifier, get_verifier, load_plugin

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
    "function, status, timeouts, errors",
    [
        ("sleepy", "timeout", 3, 0),
        ("stuck", "timeout", 3, 0),
        ("boom", "error", 0, 3),
        ("too_many", "error", 0, 3),
        ("numbers", "error", 0, 3),
        ("unsure", "invalid", 0, 3),
    ],
)
def test_bad_plugins_end_as_counted_per_item_statuses(
    plugin_module, function, status, timeouts, errors
):
    verifier = PluginVerifier(
        f"{plugin_module}:{function}", num_workers=2, timeout_s=0.5, grace_s=0.5, chunk_size=2
    )
    with verifier:
        result = verifier.verify_batch(PREDICTIONS, GOLDS)
        assert result.status == (status, "missing", status, status)
        assert (result.timeouts, result.errors) == (timeouts, errors)
        assert not result.correct.any()
        # The pool survives: the next batch of a good kind is still answered.
        assert len(verifier.verify_batch(["a"], ["a"])) == 1
    if function == "stuck":
        assert verifier.restarts >= 3  # each stuck item cost its worker


@pytest.mark.parametrize("function, status", [("sleepy", "timeout"), ("boom", "error"),
                                              ("too_many", "error")])  # fmt: skip
def test_in_process_plugin_failures_are_statuses_too(plugin_module, function, status):
    verifier = PluginVerifier(f"{plugin_module}:{function}", num_workers=0, timeout_s=0.3)
    assert verifier.verify_batch(["x"], ["x"]).status == (status,)


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


def tiny_plugin_task(folder: Path, plugin: str, name: str) -> Path:
    """The bundled tiny data as a task verified by ``plugin`` (the format-warm model answers it
    in the tag format, so answers reach the plugin)."""
    data = folder / "tiny_data"
    if not data.exists():
        shutil.copytree(FIXTURES_DIR / "tiny", data)
    task = folder / f"{name}.yaml"
    task.write_text(textwrap.dedent(f"""\
        name: {name}
        data: {{path: tiny_data}}
        splits: {{train: train, eval: test}}
        verifier: {{name: "{plugin}", timeout_s: 0.5, grace_s: 0.5, num_workers: 2}}
        system_prompt: simple
    """))  # fmt: skip
    return task


@pytest.mark.parametrize("function", ["sleepy", "boom", "too_many"])
def test_a_training_step_counts_a_bad_plugins_items_and_finishes(plugin_module, tmp_path, function):
    torch.set_num_threads(TEST_THREADS)
    name = f"tiny_{function}"
    load_task_file(tiny_plugin_task(tmp_path, f"{plugin_module}:{function}", name))
    settings = tiny_settings(tmp_path / "run", max_steps=1, save_steps=1000)
    settings.data.dataset = name
    validate(settings)
    pools = []
    trainer = build_trainer(settings, pool_hook=pools.append)
    trainer.train()
    (pool,) = [p for p in pools if p["mode"] == "train"]
    assert not pool["correct"].any()  # every item unverifiable, so scored wrong
    # The step's log: the unverifiable items counted by kind (formatted answers reach the plugin).
    (logged,) = [h for h in trainer.state.log_history if "rlsr/verifier_errors" in h]
    key = "rlsr/verifier_timeouts" if function == "sleepy" else "rlsr/verifier_errors"
    other = "rlsr/verifier_errors" if function == "sleepy" else "rlsr/verifier_timeouts"
    assert logged[key] > 0 and logged[other] == 0
    assert logged["rlsr/accuracy"] == 0


@pytest.mark.parametrize("function, status", [("sleepy", "timeout"), ("boom", "error"),
                                              ("too_many", "error")])  # fmt: skip
def test_rlsr_evaluate_counts_a_bad_plugins_items(plugin_module, tmp_path, function, status):
    name = f"tiny_{function}"
    task = tiny_plugin_task(tmp_path, f"{plugin_module}:{function}", name)
    out = tmp_path / "ev"
    argv = ["evaluate", "--model", str(format_warm_model()), "--datasets", name, "--tasks-dir",
            str(task), "--limit", "4", "--max-new-tokens", "40", "--no-fallbacks",
            "--bootstrap", "0", "--no-progress", "--output-dir", str(out)]  # fmt: skip
    assert rlsr_main(argv) == 0
    samples = [json.loads(x) for x in (out / name / "samples.jsonl").read_text().splitlines()]
    answered = [s for s in samples if s["verify_status"] != "missing"]
    assert answered and all(s["verify_status"] == status and not s["correct"] for s in answered)
    metrics = json.loads((out / name / "metrics.json").read_text())
    assert metrics["verify_status"][status] == len(answered)


def test_a_task_with_a_bad_plugin_option_is_refused(plugin_module, tmp_path):
    task = tiny_plugin_task(tmp_path, f"{plugin_module}:verify", "tiny_opts")
    task.write_text(task.read_text().replace("grace_s", "grace"))
    with pytest.raises(TaskError, match=r"'grace' is not an option of verifier .*Did you mean "
                       "'grace_s'"):  # fmt: skip
        load_task_file(task)

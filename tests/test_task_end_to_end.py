"""A task defined only in a temporary folder, used as a new user would:
a CSV with columns ``prompt`` / ``solution``, a verifier plugin in a temporary module (found
through PYTHONPATH), a custom system prompt text. ``train.py`` at recipe=tiny size with held-out
evaluation on the task's eval split, ``rlsr evaluate``, ``rlsr deploy``, ``rlsr serve`` answering
with the task's prompt; a threshold computed on another version of the task file is refused.

And the bundled ``tiny`` written as a task file gives the same ``rlsr evaluate`` samples and
metrics as the built-in ``tiny`` (the samples differ only in the dataset-name field, which names
the task) and the same pool rewards in one training step.

Real components throughout: train.py, the rlsr CLI, the format-warm tiny model, TRL, PEFT. The one
TEST DOUBLE is the upstream of ``rlsr serve`` (vLLM cannot run in this venv), the scripted
OpenAI-compatible server of tests/test_serving.py; it records the prompt it is sent.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx
import openai
import pytest
import torch
from test_serving import FakeUpstream, _free_port, running
from test_trainer_support import TEST_THREADS, format_warm_model, tiny_settings

from rlsr.cli import main as rlsr_main
from rlsr.core.prompts import FORMAT_INSTRUCTIONS
from rlsr.core.tokenization import load_tokenizer
from rlsr.data import load_task_file, task_names, unregister_task
from rlsr.data.loading import FIXTURES_DIR
from rlsr.evaluation.heldout.history import read_history
from rlsr.method.run_plan import plan_run
from rlsr.run.run_layout import step_dir
from rlsr.train.training import build_trainer

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

REPO = Path(__file__).resolve().parents[1]
PROMPT_TEXT = "You answer questions about the colors of things in a short list of facts."
TASK = """\
name: colors
description: the tiny facts as a CSV of the user's, with its own column names
data: {path: ../colors.csv}
splits: {eval_fraction: 0.2, seed: 0}
columns: {question: prompt, answer: solution, id: uid}
verifier: {name: "color_checks:verify", num_workers: 1, timeout_s: 5}
system_prompt: {text: "PROMPT_TEXT", append_format: true}
""".replace("PROMPT_TEXT", PROMPT_TEXT)
PLUGIN = '''\
def verify(predictions, golds, *, questions=None, options=None):
    """Right when the answer names the gold color, in any case."""
    return [g.strip().lower() in p.strip().lower().split() for p, g in zip(predictions, golds)]
'''
FAST_EVAL = ["--max-new-tokens", "48", "--bootstrap", "0", "--no-progress"]


@pytest.fixture(scope="module")
def user(tmp_path_factory):
    """The user's folder: colors.csv, tasks/colors.yaml, plugins/color_checks.py."""
    root = tmp_path_factory.mktemp("user")
    rows = []
    for split in ("train", "test"):
        rows += [json.loads(x) for x in (FIXTURES_DIR / "tiny" / f"{split}.jsonl").open()]
    lines = ["uid,prompt,solution"] + [f'{r["id"]},"{r["question"]}",{r["answer"]}' for r in rows]
    (root / "colors.csv").write_text("\n".join(lines) + "\n")
    (root / "tasks").mkdir()
    (root / "tasks" / "colors.yaml").write_text(TASK)
    (root / "plugins").mkdir()
    (root / "plugins" / "color_checks.py").write_text(PLUGIN)
    env = {**os.environ, "PYTHONPATH": str(root / "plugins"), "OMP_NUM_THREADS": str(TEST_THREADS),
           "PYTHONUNBUFFERED": "1"}  # fmt: skip
    # The task in this process too (the tests read its splits), its plugin folder on sys.path.
    sys.path.insert(0, str(root / "plugins"))
    load_task_file(root / "tasks" / "colors.yaml")
    yield {"root": root, "tasks": root / "tasks", "env": env}
    for name in task_names():
        unregister_task(name)
    sys.path.remove(str(root / "plugins"))


def rlsr(user, *argv, check=True) -> subprocess.CompletedProcess:
    """``rlsr ARGV`` as a user runs it (a new process, the plugin folder on PYTHONPATH)."""
    proc = subprocess.run([sys.executable, "-m", "rlsr.cli", *argv], env=user["env"], cwd=REPO,
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    if check:
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return proc


@pytest.fixture(scope="module")
def trained(user) -> Path:
    """train.py at recipe=tiny size on the task, held-out evaluation on the task's eval split:
    data.task named on the command line and heldout.tasks not, so the held-out evaluation
    follows the data, not the recipe's held-out set tiny-missing."""
    out = user["root"] / "run"
    argv = [sys.executable, str(REPO / "train.py"), "recipe=tiny", f"output_dir={out}",
            f"tasks_dir={user['tasks']}", "data.task=colors", "grpo.max_steps=2",
            "grpo.save_steps=2", "heldout.every=2", "heldout.at_start=false",
            "heldout.limit=6", "pool_log.every=0", "grpo.disable_tqdm=true"]  # fmt: skip
    done = subprocess.run(argv, cwd=REPO, env=user["env"], capture_output=True, text=True,
                          timeout=900)  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "held-out evaluation every 2 steps on colors" in done.stdout
    (user["root"] / "train.stdout").write_text(done.stdout)
    return out


def test_train_py_on_the_task_with_held_out_evaluation_on_its_eval_split(trained):
    assert (trained / "adapter_config.json").is_file()
    assert [h["step"] for h in read_history(trained)] == [2]
    samples = [json.loads(x) for x in (step_dir(trained, 2) / "colors" / "samples.jsonl").open()]
    assert len(samples) == 6
    eval_ids = {r["id"] for r in _task_rows("eval")}
    assert {s["id"] for s in samples} <= eval_ids  # the task's eval split, not its train split
    system = samples[0]["prompt"][0]["content"]
    assert system == PROMPT_TEXT + "\n\n" + FORMAT_INSTRUCTIONS  # the task's own prompt
    assert all(s["verify_status"] in ("correct", "incorrect", "missing") for s in samples)
    assert any(s["verify_status"] != "missing" for s in samples)  # answers reached the plugin


def test_the_summarys_evaluate_command_names_the_task_and_runs_as_printed(user, trained):
    # Before: `--tasks tiny-missing` without --tasks-dir (and `--tasks ''` with
    # heldout.tasks=[]), so `--tasks colors` failed "unknown dataset".
    stdout = (user["root"] / "train.stdout").read_text()
    line = next(x for x in stdout.splitlines() if " evaluate " in x and "--adapter" in x)
    argv = shlex.split(line)
    assert argv[argv.index("--tasks") + 1] == "colors"
    assert argv[argv.index("--tasks-dir") + 1] == str(user["tasks"].absolute())
    done = subprocess.run(argv, cwd=REPO, env=user["env"], capture_output=True, text=True,
                          timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    metrics = json.loads((trained / "evaluate" / "colors" / "metrics.json").read_text())
    assert metrics["n"] == len(_task_rows("eval"))


def _task_rows(split: str) -> list[dict]:
    from rlsr.data.loading import load_examples

    return load_examples("colors", split=split).to_list()


@pytest.fixture(scope="module")
def evaluated(user, trained) -> Path:
    """rlsr evaluate on the task's eval split and (for the threshold) part of its train split."""
    out = user["root"] / "evals"
    common = ["evaluate", "--model", str(format_warm_model()), "--adapter", str(trained),
              "--tasks", "colors", "--tasks-dir", str(user["tasks"]), "--output-dir", str(out),
              *FAST_EVAL]  # fmt: skip
    rlsr(user, *common, "--limit", "16")
    rlsr(user, *common, "--split", "train", "--limit", "24")
    return out


def test_rlsr_evaluate_records_the_task_and_its_file_hash(user, evaluated):
    run = json.loads((evaluated / "run.json").read_text())
    digest = hashlib.sha256((user["tasks"] / "colors.yaml").read_bytes())
    (recorded,) = run["tasks"].values()
    assert run["tasks"] == {"colors": {"file": str((user["tasks"] / "colors.yaml").resolve()),
                                       "sha256": digest.hexdigest(),
                                       "definition_sha256": recorded["definition_sha256"]}}  # fmt: skip
    assert len(recorded["definition_sha256"]) == 64 and run["versions"]["colors"]["data"] == {
        "colors.csv": hashlib.sha256((user["root"] / "colors.csv").read_bytes()).hexdigest()}  # fmt: skip
    assert run["verifiers"] == {"colors": "color_checks:verify"}
    assert run["system_prompt"] is None  # each dataset its own prompt: the task's
    metrics = json.loads((evaluated / "colors" / "metrics.json").read_text())
    assert metrics["n"] == 16 and sum(metrics["verify_status"].values()) == 16
    held = {r["id"] for r in _task_rows("eval")}
    ids = [json.loads(x)["id"] for x in (evaluated / "colors" / "samples.jsonl").open()]
    assert set(ids) <= held
    train_ids = [json.loads(x)["id"] for x in (evaluated / "colors@train" / "samples.jsonl")
                 .open()]  # fmt: skip
    assert not set(train_ids) & held


def test_rlsr_report_tabulates_the_task(user, evaluated, capsys):
    assert rlsr_main(["report", str(evaluated), "--output-dir", str(user["root"] / "report"),
                      "--tasks-dir", str(user["tasks"])]) == 0  # fmt: skip
    table = capsys.readouterr().out
    assert "| colors | evals |" in table and "| colors@train | evals |" in table
    assert "| colors | evals |" in (user["root"] / "report" / "report.md").read_text()


def test_deploy_and_serve_answer_with_the_tasks_prompt(user, evaluated, trained, tiny_model_dir):
    deployment = user["root"] / "deployment"  # --output-dir's deployment.json, less .json
    # The task has train and eval splits only: tau is chosen on the rows the adapter trained
    # on, which deploy refuses unless told, and then marks in every output.
    refused = rlsr(user, "deploy", "--validation", str(evaluated / "colors@train"), "--test",
                   str(evaluated / "colors"), "--deployment-target", "0.05", "--output-dir",
                   str(user["root"]), "--tasks-dir", str(user["tasks"]), check=False)  # fmt: skip
    assert refused.returncode == 2 and "--allow-train-split" in refused.stderr, refused.stderr
    assert not deployment.with_suffix(".json").exists()
    rlsr(user, "deploy", "--validation", str(evaluated / "colors@train"), "--test",
         str(evaluated / "colors"), "--deployment-target", "0.05", "--output-dir", str(user["root"]),
         "--tasks-dir", str(user["tasks"]), "--allow-train-split")  # fmt: skip
    assert "NOT HELD OUT" in deployment.with_suffix(".md").read_text()
    record = json.loads(deployment.with_suffix(".json").read_text())
    prov = record["provenance"]
    assert prov["threshold_on_training_rows"] is True
    assert prov["system_prompt"] == "colors"
    assert prov["task"]["name"] == "colors" and len(prov["task"]["sha256"]) == 64
    assert prov["validation_source"] == "colors@train" and prov["test_source"] == "colors@eval"

    # rlsr serve, a new process, the model served by the scripted upstream (TEST DOUBLE).
    upstream = FakeUpstream(load_tokenizer(format_warm_model()))
    with running(upstream.app()) as upstream_url:
        port = _free_port()
        argv = [sys.executable, "-m", "rlsr.cli", "serve", "--model", str(format_warm_model()),
                "--adapter", str(trained), "--threshold", str(deployment.with_suffix(".json")),
                "--rule", "plain", "--tasks-dir", str(user["tasks"]), "--upstream", upstream_url,
                "--upstream-model", "up-model", "--port", str(port)]  # fmt: skip
        proc = subprocess.Popen(argv, env=user["env"], cwd=REPO, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)  # fmt: skip
        try:
            url = f"http://127.0.0.1:{port}"
            while True:  # until it answers or dies; a hang is the pytest-timeout guard's
                assert proc.poll() is None, proc.communicate()
                with contextlib.suppress(httpx.HTTPError):
                    if httpx.get(url + "/health", timeout=5).status_code == 200:
                        break
                time.sleep(0.3)
            client = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0)
            reply = client.chat.completions.create(
                model=str(format_warm_model()), messages=[{"role": "user", "content": "sure"}]
            )
        finally:
            proc.terminate()
            proc.communicate(timeout=60)
    assert reply.choices[0].model_extra["rlsr"]["decision"] == "answered"
    sent = upstream.calls[-1]["prompt_text"]
    assert PROMPT_TEXT + "\n\n" + FORMAT_INSTRUCTIONS in sent and "PROBLEM: sure" in sent


def test_serve_refuses_a_threshold_of_another_version_of_the_task(
    user, evaluated, trained, tmp_path, capsys
):
    deployment = user["root"] / "deployment.json"
    if not deployment.is_file():
        rlsr(user, "deploy", "--validation", str(evaluated / "colors@train"), "--test",
             str(evaluated / "colors"), "--deployment-target", "0.05", "--output-dir",
             str(deployment.parent), "--tasks-dir", str(user["tasks"]),
             "--allow-train-split")  # fmt: skip
    edited = tmp_path / "tasks"
    shutil.copytree(user["tasks"], edited)
    (edited / "colors.yaml").write_text(TASK.replace("seed: 0", "seed: 1"))  # other eval split
    shutil.copy(user["root"] / "colors.csv", tmp_path / "colors.csv")
    unregister_task("colors")  # this process then loads the edited version, as a user would
    try:
        code = rlsr_main(["serve", "--model", str(format_warm_model()), "--adapter", str(trained),
                          "--threshold", str(deployment), "--rule", "plain", "--tasks-dir",
                          str(edited)])  # fmt: skip
    finally:
        unregister_task("colors")
        load_task_file(user["tasks"] / "colors.yaml")
    err = capsys.readouterr().err
    assert code == 2 and "was computed for another model, adapter or task" in err
    assert "task: the threshold was computed on 'colors' with task file sha256" in err


# --- the bundled tiny dataset as a task file ------------------------------------------------------

TINY_TASK = """\
name: tiny_task
data: {path: tiny_data}
splits: {train: train, eval: test}
columns: {question: question, answer: answer, id: id}
verifier: exact_match
system_prompt: simple
"""


@pytest.fixture
def tiny_task(tmp_path) -> Path:
    shutil.copytree(FIXTURES_DIR / "tiny", tmp_path / "tiny_data")
    path = tmp_path / "tiny_task.yaml"
    path.write_text(TINY_TASK)
    yield path
    for name in task_names():
        unregister_task(name)


def _without_timing(metrics: dict) -> dict:
    """metrics.json without its timing field (``throughput``: seconds, samples per second)."""
    return {k: v for k, v in metrics.items() if k != "throughput"}


def test_tiny_as_a_task_file_evaluates_to_the_same_samples_and_metrics(tiny_task, tmp_path):
    outs = {}
    for name in ("tiny", "tiny_task"):
        outs[name] = tmp_path / f"ev-{name}"
        argv = ["evaluate", "--model", str(format_warm_model()), "--tasks", name,
                "--tasks-dir", str(tiny_task), "--limit", "12", "--output-dir",
                str(outs[name]), "--max-new-tokens", "48", "--bootstrap", "50",
                "--no-progress"]  # fmt: skip
        assert rlsr_main(argv) == 0
    built_in = (outs["tiny"] / "tiny" / "samples.jsonl").read_bytes()
    as_task = (outs["tiny_task"] / "tiny_task" / "samples.jsonl").read_bytes()
    assert len(built_in.splitlines()) == 12
    # Byte for byte, once the dataset-name field (the task's own name) is set to the built-in's.
    assert as_task.replace(b'"dataset": "tiny_task"', b'"dataset": "tiny"') == built_in
    assert as_task.count(b'"dataset": "tiny_task"') == 12
    metrics = {n: json.loads((outs[n] / n / "metrics.json").read_text()) for n in outs}
    assert metrics["tiny_task"]["throughput"]["new_samples"] == 12
    if "dataset" in metrics["tiny"]:
        assert metrics["tiny_task"]["dataset"] == "tiny_task"
        metrics["tiny_task"]["dataset"] = "tiny"
    assert _without_timing(metrics["tiny_task"]) == _without_timing(metrics["tiny"])


def test_tiny_as_a_task_file_gives_the_same_pool_rewards_in_one_training_step(tiny_task, tmp_path):
    load_task_file(tiny_task)
    torch.set_num_threads(TEST_THREADS)
    pools = {}
    for name in ("tiny", "tiny_task"):
        settings = tiny_settings(tmp_path / name, max_steps=1, save_steps=1000)
        settings.data.task = name
        plan_run(settings)
        seen = []
        build_trainer(plan_run(settings), pool_hook=seen.append).train()
        (pools[name],) = [p for p in seen if p["mode"] == "train"]
    a, b = pools["tiny"], pools["tiny_task"]
    assert a["texts"] == b["texts"] and a["golds"] == b["golds"]
    assert (a["rewards"] == b["rewards"]).all() and (a["correct"] == b["correct"]).all()
    assert a["correct"].any() and not a["correct"].all()  # a mixed pool: the rewards carry signal

"""Resume cannot mix versions (docs/tasks.md, "Resuming"). ``rlsr evaluate``'s
run.json and a training run's ``versions.json`` record the SHA-256 of a task's data files, of its
verifier plugin's module file and the verifier options that decide a verdict; a rerun into the
same folder with any of them changed is refused naming what changed, once results of the old
version are on disk. Execution options (timeout_s, num_workers) may change; a folder written
before the record existed resumes and is recorded from then on.

Before: a rerun after editing the plugin (v1 always right, v2 always wrong) or the data file kept
the old verdicts and added new ones, exit 0 (accuracy 0.5).
"""

from __future__ import annotations

import json
import shutil
import textwrap
from pathlib import Path

import pytest
import torch
from test_trainer_support import TEST_THREADS, format_warm_model, tiny_settings

from rlsr.cli import main as rlsr_main
from rlsr.config import ConfigError
from rlsr.data import load_task_file, task_names, unregister_task
from rlsr.data.loading import FIXTURES_DIR
from rlsr.method.run_plan import plan_run
from rlsr.train.training import run_training

pytestmark = pytest.mark.timeout(600)

RIGHT = "def verify(predictions, golds, *, questions=None, options=None):\n    return [True]\n"
WRONG = "def verify(predictions, golds, *, questions=None, options=None):\n    return [False] * 1\n"
BROKEN = (
    "def verify(predictions, golds, *, questions=None, options=None):\n    raise KeyError('x')\n"
)


@pytest.fixture
def task(tmp_path, monkeypatch, request):
    """A task on a copy of the bundled tiny data, verified by a plugin module of its own
    (a unique module name per test: nothing is shared through sys.modules)."""
    code = tmp_path / "code"
    code.mkdir()
    module = f"rlsr_versions_{request.node.name.split('[')[0][5:]}"
    (code / f"{module}.py").write_text(RIGHT)
    monkeypatch.syspath_prepend(str(code))
    shutil.copytree(FIXTURES_DIR / "tiny", tmp_path / "data")
    file = tmp_path / "vt.yaml"
    file.write_text(textwrap.dedent(f"""\
        name: vt
        data: {{path: data}}
        splits: {{train: train, eval: test}}
        verifier: {{name: "{module}:verify", num_workers: 1, timeout_s: 5}}
    """))  # fmt: skip
    yield file, code / f"{module}.py"
    for name in task_names():
        unregister_task(name)


def evaluate(task_file: Path, out: Path, limit: int) -> int:
    return rlsr_main(["evaluate", "--model", str(format_warm_model()), "--tasks", "vt",
                      "--tasks-dir", str(task_file), "--limit", str(limit), "--max-new-tokens",
                      "40", "--no-fallbacks", "--bootstrap", "0", "--no-progress",
                      "--output-dir", str(out)])  # fmt: skip


def rewrite(path: Path, text: str) -> None:
    path.write_text(text)
    shutil.rmtree(path.parent / "__pycache__", ignore_errors=True)


def edit_data(task_file: Path) -> None:
    data = task_file.parent / "data" / "test.jsonl"
    rows = [json.loads(x) for x in data.read_text().splitlines()]
    rows[-1]["answer"] = "purple"  # a row past --limit: the file changed, not a stored row
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))


@pytest.mark.parametrize("change, named", [
    ("plugin", "verifier plugin rlsr_versions_"),
    ("data", "data file test.jsonl of vt: "),
    ("options", "verifier options of vt: {} -> {'strict': True}"),
])  # fmt: skip
def test_a_rerun_on_another_version_is_refused(task, tmp_path, capsys, change, named):
    task_file, plugin = task
    out = tmp_path / "ev"
    if change == "options":  # a built-in verifier's option that decides verdicts
        task_file.write_text(task_file.read_text().replace(
            'name: "' + plugin.stem + ':verify", num_workers: 1, timeout_s: 5', "name: exact_match"))  # fmt: skip
    assert evaluate(task_file, out, 4) == 0
    unregister_task("vt")
    if change == "plugin":
        rewrite(plugin, WRONG)
    elif change == "data":
        edit_data(task_file)
    else:
        task_file.write_text(
            task_file.read_text().replace("exact_match", "exact_match, strict: true")
        )
    capsys.readouterr()
    assert evaluate(task_file, out, 8) == 2
    err = capsys.readouterr().err
    assert "holds results of another configuration" in err and named in err
    assert "give a new --output-dir" in err
    assert len((out / "vt" / "samples.jsonl").read_text().splitlines()) == 4  # nothing added


def test_how_the_verifier_runs_may_change_and_an_old_folder_resumes(task, tmp_path, capsys):
    task_file, _ = task
    out = tmp_path / "ev"
    assert evaluate(task_file, out, 4) == 0
    # how the plugin runs (timeout_s) is not what it decides: the rerun resumes
    unregister_task("vt")
    task_file.write_text(task_file.read_text().replace("timeout_s: 5", "timeout_s: 9"))
    assert evaluate(task_file, out, 5) == 0
    # run.json as the version before wrote it (no versions, the task file's hash only): it
    # resumes, says it cannot check, and records the versions from now on
    run = json.loads((out / "run.json").read_text())
    versions = run.pop("versions")
    assert versions["vt"]["plugin"]["sha256"] and set(versions["vt"]["data"]) == {
        "test.jsonl", "train.jsonl"}  # fmt: skip
    del run["tasks"]["vt"]["definition_sha256"]
    (out / "run.json").write_text(json.dumps(run))
    unregister_task("vt")
    capsys.readouterr()
    assert evaluate(task_file, out, 6) == 0
    assert "without the versions of the data files and verifiers" in capsys.readouterr().err
    assert json.loads((out / "run.json").read_text())["versions"] == versions
    assert len((out / "vt" / "samples.jsonl").read_text().splitlines()) == 6


def test_a_plugin_fixed_before_any_sample_was_saved_runs(task, tmp_path):
    task_file, plugin = task
    rewrite(plugin, BROKEN)
    out = tmp_path / "ev"
    assert evaluate(task_file, out, 4) == 1  # stopped: no verdict on any item, nothing saved
    unregister_task("vt")
    rewrite(plugin, RIGHT)
    assert evaluate(task_file, out, 4) == 0  # no sample of the old version to mix with
    metrics = json.loads((out / "vt" / "metrics.json").read_text())
    assert metrics["verifier_failures"] == 0 and metrics["n"] == 4


def test_training_does_not_resume_on_another_version(task, tmp_path, capsys):
    """A run with a checkpoint and held-out step folders, resumed after the plugin file (then
    the data file) changed, is refused before the model loads; the old folder stays as it was."""
    torch.set_num_threads(TEST_THREADS)
    task_file, plugin = task
    load_task_file(task_file)
    run = tmp_path / "run"
    settings = tiny_settings(run, max_steps=1, save_steps=1)
    settings.data.task = "vt"
    settings.heldout.every, settings.heldout.tasks, settings.heldout.limit = 1, ["vt"], 4
    settings.heldout.max_new_tokens = 40
    run_training(plan_run(settings))
    assert (run / "checkpoint-1").is_dir() and (run / "eval" / "step-1").is_dir()
    settings.grpo["max_steps"] = 2
    rewrite(plugin, WRONG)
    with pytest.raises(ConfigError, match=r"output_dir: .* holds a run made with another version "
                       r"of its data or verifier \(verifier plugin rlsr_versions_.*resume=.*"
                       "checkpoint-1 output_dir=NEW"):  # fmt: skip
        run_training(plan_run(settings))
    rewrite(plugin, RIGHT)
    edit_data(task_file)
    with pytest.raises(ConfigError, match="data file test.jsonl of vt"):
        run_training(plan_run(settings))
    assert not (run / "checkpoint-2").exists()
    recorded = json.loads((run / "versions.json").read_text())  # as the first run wrote it
    assert set(recorded) == {"train", "eval"} and recorded["eval"]["vt"]["plugin"]["sha256"]
    step_run = json.loads((run / "eval" / "step-1" / "run.json").read_text())
    assert step_run["versions"] == recorded["eval"]  # the refused attempts wrote nothing

"""User tasks (rlsr.data.tasks, docs/tasks.md): task files and the Python API register real
registry entries; bad input fails with the file, the key and the fix, before any model loads.

Every task lives in ``tmp_path`` (data, task file, plugin module); nothing of the repository is
edited. Tasks registered by a test are removed after it (``clean_tasks``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import datasets
import pytest
from test_config import compose
from test_slurm import SLURM, base_env, run_sweep

from rlsr.cli import main
from rlsr.config import ConfigError, from_dict, resolve_heldout
from rlsr.core.prompts import FORMAT_INSTRUCTIONS, SIMPLE_SYSTEM_PROMPT, get_system_prompt
from rlsr.data import (
    REGISTRY,
    TASKS_PATH_ENV,
    Task,
    TaskError,
    get_spec,
    load_task_file,
    load_tasks,
    register_task,
    resolve_tasks,
    task_names,
    unregister_task,
)
from rlsr.data import tasks as tasks_module
from rlsr.data.loading import FIXTURES_DIR, load_examples, task_split_rows, verification_inputs
from rlsr.method.run_plan import plan_run
from rlsr.train.training import build_trainer

datasets.disable_progress_bars()

CAPS = [
    {"prompt": "Capital of France?", "solution": "Paris", "uid": "fr"},
    {"prompt": "Capital of Italy?", "solution": "Rome", "uid": "it"},
    {"prompt": "Capital of Spain?", "solution": "Madrid", "uid": "es"},
    {"prompt": "Capital of Peru?", "solution": "Lima", "uid": "pe"},
    {"prompt": "Capital of Chile?", "solution": "Santiago", "uid": "cl"},
    {"prompt": "Capital of Japan?", "solution": "Tokyo", "uid": "jp"},
    {"prompt": "Capital of Kenya?", "solution": "Nairobi", "uid": "ke"},
    {"prompt": "Capital of Egypt?", "solution": "Cairo", "uid": "eg"},
    {"prompt": "Capital of Chad?", "solution": "N'Djamena", "uid": "td"},
    {"prompt": "Capital of Fiji?", "solution": "Suva", "uid": "fj"},
]

CUSTOM_PROMPT = (
    "You answer questions about capitals. Think inside <think></think>, give the city inside "
    "<answer></answer>, discuss doubts inside <analysis></analysis> and end with a number between "
    "0 and 1 inside <confidence></confidence>."
)


@pytest.fixture(autouse=True)
def clean_tasks(monkeypatch):
    monkeypatch.delenv(TASKS_PATH_ENV, raising=False)
    yield
    for name in task_names():
        unregister_task(name)
    tasks_module._LOADED_ENV.clear()


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def write_task(folder: Path, body: str, name: str = "caps.yaml") -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(body))
    return path


CAPS_TASK = """\
    name: caps
    description: capitals, from a file with its own column names
    data: {path: caps.jsonl}
    splits: {eval_fraction: 0.3, seed: 7}
    columns: {question: prompt, answer: solution, id: uid}
    verifier: exact_match
    system_prompt: simple
"""


@pytest.fixture
def caps_dir(tmp_path) -> Path:
    write_jsonl(tmp_path / "caps.jsonl", CAPS)
    write_task(tmp_path, CAPS_TASK)
    return tmp_path


# --- task files and the registry ----------------------------------------------------------------


def test_task_file_registers_a_dataset_with_seeded_fraction_splits(caps_dir):
    assert load_tasks(caps_dir) == ["caps"]
    spec = get_spec("caps")
    assert REGISTRY["caps"] is spec and resolve_tasks("caps") == ["caps"]
    assert (spec.split, spec.train_split, spec.verifier, spec.system_prompt) == (
        "eval",
        "train",
        "exact_match",
        "simple",
    )
    assert spec.task.file == str((caps_dir / "caps.yaml").resolve())
    train = load_examples("caps", split="train")
    held_out = load_examples("caps")  # the default (evaluation) split
    assert len(held_out) == 3 and len(train) == 7  # round(0.3 * 10)
    assert set(train["id"]) | set(held_out["id"]) == {r["uid"] for r in CAPS}
    assert not set(train["id"]) & set(held_out["id"])
    # The seed decides the split, the same way every time; rows keep file order.
    assert held_out["id"] == [CAPS[i]["uid"] for i in task_split_rows(10, 0.3, 7, "eval")]
    row = held_out[0]
    source = next(r for r in CAPS if r["uid"] == row["id"])
    assert row["question"] == source["prompt"] and row["answer"] == source["solution"]
    assert row["prompt"][0] == {"role": "system", "content": SIMPLE_SYSTEM_PROMPT}
    assert source["prompt"] in row["prompt"][1]["content"]
    assert verification_inputs(held_out)["golds"] == [[a] for a in held_out["answer"]]


def test_python_api_registers_and_unregisters(tmp_path):
    write_jsonl(tmp_path / "caps.jsonl", CAPS)
    spec = register_task(
        Task(
            name="caps_api",
            path=tmp_path / "caps.jsonl",
            columns={"question": "prompt", "answer": "solution"},
            system_prompt_text=CUSTOM_PROMPT,
        )
    )
    assert get_spec("caps_api") is spec and spec.task.file is None and len(spec.task.sha256) == 64
    assert spec.system_prompt == "caps_api" and get_system_prompt("caps_api") == CUSTOM_PROMPT
    rows = load_examples("caps_api")  # no eval split: the whole file
    assert len(rows) == 10 and rows["id"][0] == "caps_api-train-0"
    assert rows[0]["prompt"][0]["content"] == CUSTOM_PROMPT
    # The same task again is a no-op; another task under that name is refused.
    assert register_task(Task(name="caps_api", path=tmp_path / "caps.jsonl",
                              columns={"question": "prompt", "answer": "solution"},
                              system_prompt_text=CUSTOM_PROMPT)) is spec  # fmt: skip
    with pytest.raises(TaskError, match="already registered"):
        register_task(Task(name="caps_api", path=tmp_path / "caps.jsonl"))
    unregister_task("caps_api")
    assert "caps_api" not in REGISTRY
    with pytest.raises(ValueError, match="unknown system prompt"):
        get_system_prompt("caps_api")


def test_tasks_path_env_is_read_on_lookup(caps_dir, monkeypatch):
    monkeypatch.setenv(TASKS_PATH_ENV, str(caps_dir / "caps.yaml"))
    assert "caps" not in REGISTRY
    assert get_spec("caps").name == "caps"  # a lookup of an unknown name reads the path


def test_folder_layout_with_named_splits_options_and_aliases(tmp_path):
    data = tmp_path / "quiz"
    data.mkdir()
    rows = [
        {"q": "Largest planet?", "a": "B", "opts": ["Mars", "Jupiter"], "alt": []},
        {"q": "Red planet?", "a": "Mars", "opts": ["Mars", "Venus"], "alt": ["the red one"]},
    ]
    write_jsonl(data / "dev.jsonl", rows)
    write_jsonl(data / "held.jsonl", rows[::-1])
    write_task(tmp_path, """\
        name: quiz
        data: {path: quiz}
        splits: {train: dev, eval: held}
        columns: {question: q, answer: a, options: opts, aliases: alt}
        verifier: {name: mcq}
    """)  # fmt: skip
    load_tasks(tmp_path)
    spec = get_spec("quiz")
    assert (spec.train_split, spec.split) == ("dev", "held")
    held = load_examples("quiz")
    assert held["answer_letter"] == ["A", "B"] and held["question"] == ["Red planet?",
                                                                        "Largest planet?"]  # fmt: skip
    assert json.loads(held["options"][0]) == {"A": "Mars", "B": "Venus"}
    assert "the red one" in held["answers"][0] and "A) Mars" in held["prompt"][0][1]["content"]
    inputs = verification_inputs(held)
    assert inputs["golds"] == ["A", "B"]


def test_builtin_verifier_options_reach_the_spec(tmp_path):
    write_jsonl(tmp_path / "m.jsonl", [{"question": "1+1", "answer": "2"}])
    write_task(tmp_path, """\
        name: sums
        data: {path: m.jsonl}
        verifier: {name: math, timeout_s: 9, num_workers: 0}
    """)  # fmt: skip
    load_tasks(tmp_path)
    assert dict(get_spec("sums").verifier_options) == {"timeout_s": 9, "num_workers": 0}


# --- the system prompt must carry the tags the parser needs (item 4) -----------------------------


def test_custom_prompt_without_tags_is_refused_with_the_fix(caps_dir):
    body = CAPS_TASK.replace("system_prompt: simple", 'system_prompt: {text: "Name the city."}')
    write_task(caps_dir, body)
    with pytest.raises(TaskError) as err:
        load_tasks(caps_dir)
    message = str(err.value)
    assert "caps.yaml: system_prompt.text: does not ask for <think> </think> <answer>" in message
    assert "append_format: true" in message and "caps" not in REGISTRY


def test_append_format_appends_rlsrs_tag_instructions(caps_dir):
    body = CAPS_TASK.replace(
        "system_prompt: simple", 'system_prompt: {text: "Name the city.", append_format: true}'
    )
    write_task(caps_dir, body)
    load_tasks(caps_dir)
    expected = "Name the city.\n\n" + FORMAT_INSTRUCTIONS
    assert get_system_prompt("caps") == expected
    assert load_examples("caps")[0]["prompt"][0]["content"] == expected


def test_custom_prompt_with_every_tag_is_used_verbatim(caps_dir):
    body = CAPS_TASK.replace(
        "system_prompt: simple",
        f"system_prompt: {{text: {json.dumps(CUSTOM_PROMPT)}, append_format: true}}",
    )
    write_task(caps_dir, body)
    load_tasks(caps_dir)
    assert load_examples("caps")[0]["prompt"][0]["content"] == CUSTOM_PROMPT


# --- bad input (item 5) --------------------------------------------------------------------------


def test_unknown_keys_are_refused_with_a_suggestion(caps_dir):
    write_task(caps_dir, CAPS_TASK.replace("columns:", "colums:"))
    with pytest.raises(TaskError, match=r"caps.yaml: colums: unknown key. Did you mean 'columns'"):
        load_tasks(caps_dir)
    write_task(caps_dir, CAPS_TASK.replace("answer: solution", "anwser: solution"))
    with pytest.raises(TaskError, match=r"columns.anwser: unknown key. Did you mean 'answer'"):
        load_tasks(caps_dir)
    write_task(caps_dir, CAPS_TASK.replace("{eval_fraction", "{eval_fracton"))
    with pytest.raises(TaskError, match=r"splits.eval_fracton: unknown key. Did you mean"):
        load_tasks(caps_dir)
    write_task(caps_dir, CAPS_TASK.replace("verifier: exact_match", "verifier: exact_mach"))
    with pytest.raises(TaskError, match=r"unknown verifier 'exact_mach'. Did you mean 'exact_"):
        load_tasks(caps_dir)
    write_task(caps_dir, CAPS_TASK.replace("verifier: exact_match", "verifier: {name: math, "
                                           "timeout: 3}"))  # fmt: skip
    with pytest.raises(TaskError, match=r"'timeout' is not an option of verifier 'math'. Did you "
                       r"mean 'timeout_s'"):  # fmt: skip
        load_tasks(caps_dir)


def test_unknown_column_names_the_columns_present_and_the_fix(caps_dir):
    write_task(caps_dir, CAPS_TASK.replace("question: prompt", "question: text"))
    load_tasks(caps_dir)
    with pytest.raises(ValueError) as err:
        load_examples("caps")
    message = str(err.value)
    assert "task caps: no column 'text' for question" in message
    assert "the data has the columns ['prompt', 'solution', 'uid']" in message
    assert "Set columns.question: <one of them> in" in message and "caps.yaml" in message


def test_missing_default_column_says_which_default_was_tried(caps_dir):
    write_task(caps_dir, CAPS_TASK.replace("question: prompt, ", ""))
    load_tasks(caps_dir)
    with pytest.raises(ValueError, match=r"no column 'question' for question .*\(columns.question "
                       r"defaults to 'question'\).*\['prompt', 'solution', 'uid'\]"):  # fmt: skip
        load_examples("caps", split="train")


def test_empty_split_is_refused(tmp_path):
    write_jsonl(tmp_path / "caps.jsonl", CAPS[:1])  # round(0.3 * 1) = 0 rows held out
    write_task(tmp_path, CAPS_TASK)
    load_tasks(tmp_path)
    assert len(load_examples("caps", split="train")) == 1
    with pytest.raises(
        ValueError,
        match=r"task caps: splits.eval_fraction 0.3 of the 1 rows of "
        r".*caps.jsonl rounds to 0 rows .*one row cannot be split",
    ):
        load_examples("caps")


def test_duplicate_ids_are_refused(tmp_path):
    write_jsonl(tmp_path / "caps.jsonl", [*CAPS, {**CAPS[0], "solution": "Lyon"}])
    write_task(tmp_path, CAPS_TASK.replace("eval_fraction: 0.3", "eval_fraction: 0.05"))
    load_tasks(tmp_path)
    with pytest.raises(
        ValueError, match=r"id 'fr' occurs twice in column 'uid' .*rows 0 and 10, split 'train'"
    ):
        load_examples("caps", split="train")


def test_a_task_cannot_shadow_a_builtin(caps_dir):
    write_task(caps_dir, CAPS_TASK.replace("name: caps", "name: tiny"))
    with pytest.raises(TaskError, match="name: 'tiny' is a built-in task of rlsr"):
        load_tasks(caps_dir)
    write_task(caps_dir, CAPS_TASK.replace("name: caps", "name: hotpot-id"))
    with pytest.raises(TaskError, match="'hotpot-id' is a task group"):
        load_tasks(caps_dir)
    assert get_spec("tiny").task is None


def test_a_plugin_that_does_not_import_names_module_and_sys_path(caps_dir):
    write_task(caps_dir, CAPS_TASK.replace("exact_match", "no_such_pkg_rlsr.checks:verify"))
    with pytest.raises(TaskError) as err:
        load_tasks(caps_dir)
    message = str(err.value)
    assert "module 'no_such_pkg_rlsr.checks' does not import (ModuleNotFoundError" in message
    assert f"sys.path is {sys.path}" in message and "PYTHONPATH" in message


def test_a_plugin_without_the_function_lists_what_the_module_defines(caps_dir, monkeypatch):
    (caps_dir / "caps_checks_a.py").write_text("def check(p, g, **kw):\n    return [True]\n")
    monkeypatch.syspath_prepend(str(caps_dir))
    write_task(caps_dir, CAPS_TASK.replace("exact_match", "caps_checks_a:verify"))
    with pytest.raises(TaskError, match=r"has no function 'verify'; it defines \['check'\]"):
        load_tasks(caps_dir)


def test_yaml_error_names_file_and_line(caps_dir):
    (caps_dir / "caps.yaml").write_text("name: caps\ndata: {path: caps.jsonl\ncolumns: {}\n")
    with pytest.raises(TaskError, match=r"caps.yaml: line \d+, column \d+: not valid YAML"):
        load_tasks(caps_dir)
    (caps_dir / "caps.yaml").write_text("name: caps\n  data: x\n")
    with pytest.raises(TaskError, match=r"caps.yaml: line 2, column 7: not valid YAML"):
        load_tasks(caps_dir)


@pytest.mark.parametrize("fraction", [0, 1, 1.5, -0.2, "half", True])
def test_split_fraction_outside_0_1_is_refused(caps_dir, fraction):
    write_task(caps_dir, CAPS_TASK.replace("eval_fraction: 0.3", f"eval_fraction: {fraction}"))
    with pytest.raises(TaskError, match=r"splits.eval_fraction: must be a number in \(0, 1\)"):
        load_tasks(caps_dir)


def test_a_single_file_cannot_have_two_named_splits(caps_dir):
    write_task(caps_dir, CAPS_TASK.replace("{eval_fraction: 0.3, seed: 7}", "{eval: test}"))
    with pytest.raises(TaskError, match=r"is one file, so it has one split; hold out part of it "
                       "with splits.eval_fraction"):  # fmt: skip
        load_tasks(caps_dir)


def test_other_schema_errors(caps_dir):
    cases = {
        CAPS_TASK.replace("data: {path: caps.jsonl}", "data: {path: nope.jsonl}"): "does not exist",
        CAPS_TASK.replace("data: {path: caps.jsonl}", "data: {}"): "exactly one of path",
        CAPS_TASK.replace("name: caps", "name: simple"): "built-in system prompt",
        CAPS_TASK.replace("    name: caps\n", ""): "name: missing",
        CAPS_TASK.replace("exact_match", "mcq"): "map the options column",
        CAPS_TASK.replace("system_prompt: simple", "system_prompt: short"): "unknown prompt",
        "- just\n- a list\n": "holds one mapping",
    }
    for body, expected in cases.items():
        write_task(caps_dir, body)
        with pytest.raises(TaskError, match=expected):
            load_tasks(caps_dir)
    with pytest.raises(TaskError, match="tasks path .* does not exist"):
        load_tasks(caps_dir / "missing")


# --- the bundled tiny dataset as a task file gives the same rows ---------------------------------


def tiny_task(folder: Path, name: str = "tiny_task") -> Path:
    """The built-in ``tiny`` written as a task file (its data copied beside it)."""
    shutil.copytree(FIXTURES_DIR / "tiny", folder / "tiny_data")
    return write_task(folder, f"""\
        name: {name}
        data: {{path: tiny_data}}
        splits: {{train: train, eval: test}}
        columns: {{question: question, answer: answer, id: id}}
        verifier: exact_match
        system_prompt: simple
    """, name=f"{name}.yaml")  # fmt: skip


def test_tiny_as_a_task_file_gives_the_same_examples(tmp_path):
    load_task_file(tiny_task(tmp_path))
    for split in ("train", "test"):
        built_in = load_examples("tiny", split=split)
        as_task = load_examples("tiny_task", split=split)
        assert as_task.features == built_in.features
        assert as_task.to_list() == built_in.to_list()
    assert get_spec("tiny_task").split == get_spec("tiny").split == "test"
    assert os.path.isabs(get_spec("tiny_task").task.data_path)


# --- discovery from the commands -----------------------------------------------------------------


def test_rlsr_datasets_lists_a_task_with_its_file_and_data(caps_dir, capsys):
    assert main(["tasks", "--tasks-dir", str(caps_dir)]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("caps "))
    assert f"task {(caps_dir / 'caps.yaml').resolve()}" in line and "train, eval*" in line
    assert f"yes: {(caps_dir / 'caps.jsonl').resolve()}" in line
    unregister_task("caps")
    # A broken task file is a one-line usage error of any command.
    write_task(caps_dir, CAPS_TASK.replace("columns:", "colums:"))
    assert main(["tasks", "show", "caps", "--tasks-dir", str(caps_dir)]) == 2
    assert "rlsr: error: " in capsys.readouterr().err


def test_train_config_tasks_dir_registers_before_validation(caps_dir):
    cfg = plan_run(from_dict(compose("recipe=tiny", f"tasks_dir={caps_dir}", "data.task=caps",
                                     "heldout.every=1", "heldout.tasks=[]")), world_size=1).settings  # fmt: skip
    assert get_spec("caps").task is not None
    held = resolve_heldout(cfg)  # no heldout.tasks: the task's own eval split
    assert held.jobs == (("caps", "caps", "eval"),) and held.system_prompt == "simple"
    unregister_task("caps")
    write_task(caps_dir, CAPS_TASK.replace("eval_fraction: 0.3", "eval_fraction: 2"))
    with pytest.raises(ConfigError, match=r"^tasks_dir: .*caps.yaml: splits.eval_fraction: must"):
        plan_run(from_dict(compose("recipe=tiny", f"tasks_dir={caps_dir}",
                                   "data.task=caps")), world_size=1)  # fmt: skip


def test_a_recipe_trained_on_a_task_evaluates_the_task_and_prints_a_runnable_command(
    caps_dir, tmp_path
):
    """A recipe's held-out datasets belong to the dataset it trains on (heldout.tasks_for);
    naming heldout.tasks still wins. Catches `train.py recipe=tiny data.task=caps` evaluating
    held-out on the recipe's own data (its heldout.tasks winning) and printing `--tasks tiny`
    without `--tasks-dir` (or `--tasks ''` with heldout.tasks=[])."""
    import shlex

    from rlsr.cli import build_parser
    from rlsr.train.training import _evaluate_command

    base = ("recipe=tiny", f"tasks_dir={caps_dir}", f"output_dir={tmp_path}", "heldout.every=1")
    own = resolve_heldout(plan_run(from_dict(compose("recipe=tiny")), world_size=1).settings)
    assert own.tasks == ["tiny-missing"]  # the recipe's choice for its own data
    for extra in ((), ("heldout.tasks=[]",)):
        plan = plan_run(from_dict(compose(*base, "data.task=caps", *extra)), world_size=1)
        held = resolve_heldout(plan.settings)
        assert held.jobs == (("caps", "caps", "eval"),), extra
        assert plan.heldout.jobs == held.jobs  # what the printed command reads
        argv = shlex.split(_evaluate_command(plan, tmp_path))
        args = build_parser().parse_args(argv[1:])  # parses as printed
        assert args.tasks == "caps" and args.tasks_dir == [str(Path(caps_dir).absolute())]
    named = plan_run(
        from_dict(compose(*base, "data.task=caps", "heldout.tasks=[tiny]")), world_size=1
    ).settings
    assert resolve_heldout(named).tasks == ["tiny"]  # named: wins
    unregister_task("caps")


# --- slurm/sweep.py and the judge check of evaluate.slurm ----------------------------------------


def test_sweep_passes_the_tasks_to_every_job(caps_dir):
    jobs = run_sweep(["--recipes", "tiny", "--methods", "rlsr", "--seeds", "0", "--tasks-dir",
                      str(caps_dir), "--eval-tasks", "caps", "--dry-run", "--",
                      "data.task=caps"]).stdout.splitlines()  # fmt: skip
    commands = [line for line in jobs if line.startswith("  sbatch: ")]
    assert len(commands) == 2  # train, then evaluate
    for command in commands:
        assert f"--export=ALL,RLSR_TASKS_PATH={caps_dir.resolve()}" in command
    assert "data.task=caps" in commands[0] and "--tasks caps" in commands[1]
    # A broken task file stops the sweep before anything is submitted.
    write_task(caps_dir, CAPS_TASK.replace("columns:", "colums:"))
    proc = subprocess.run([sys.executable, str(SLURM / "sweep.py"), "--recipes", "tiny",
                           "--tasks-dir", str(caps_dir), "--eval-tasks", "caps", "--dry-run"],
                          env=base_env(), capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 2 and "colums: unknown key" in proc.stderr


@pytest.mark.parametrize("verifier, judged", [("exact_match", []), ("llm_judge", ["caps"])])
def test_needs_judge_knows_a_tasks_verifier(caps_dir, verifier, judged):
    write_task(caps_dir, CAPS_TASK.replace("verifier: exact_match", f"verifier: {verifier}"))
    proc = subprocess.run([sys.executable, str(SLURM / "needs_judge.py"), "caps", "tiny"],
                          env=base_env(RLSR_TASKS_PATH=str(caps_dir)), capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == judged


def test_evaluate_refuses_a_rerun_on_another_version_of_the_task(caps_dir, tiny_model_dir, capsys):
    out = caps_dir / "ev"
    argv = ["evaluate", "--model", str(tiny_model_dir), "--tasks", "caps", "--tasks-dir",
            str(caps_dir), "--limit", "2", "--max-new-tokens", "4", "--no-fallbacks",
            "--bootstrap", "0", "--no-progress", "--output-dir", str(out)]  # fmt: skip
    assert main(argv) == 0
    run = json.loads((out / "run.json").read_text())
    assert run["tasks"]["caps"]["sha256"] == get_spec("caps").task.sha256
    unregister_task("caps")
    write_task(caps_dir, CAPS_TASK.replace("seed: 7", "seed: 8"))  # another eval split
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "holds results of another configuration (task file of caps: " in err


def test_evaluate_takes_a_tasks_prompt_name_and_refuses_an_unknown_one(caps_dir, tiny_model_dir,
                                                                       capsys):  # fmt: skip
    write_task(caps_dir, CAPS_TASK.replace("system_prompt: simple",
                                           f"system_prompt: {{text: {json.dumps(CUSTOM_PROMPT)}}}"))  # fmt: skip
    out = caps_dir / "ev"
    argv = ["evaluate", "--model", str(tiny_model_dir), "--tasks", "tiny", "--tasks-dir",
            str(caps_dir), "--limit", "1", "--max-new-tokens", "4", "--no-fallbacks",
            "--bootstrap", "0", "--no-progress", "--output-dir", str(out)]  # fmt: skip
    assert main([*argv, "--system-prompt", "caps"]) == 0  # tiny, asked with the task's prompt
    sample = json.loads((out / "tiny" / "samples.jsonl").read_text().splitlines()[0])
    assert sample["prompt"][0]["content"] == CUSTOM_PROMPT
    capsys.readouterr()
    assert main([*argv, "--system-prompt", "cpas", "--output-dir", str(caps_dir / "x")]) == 2
    assert "--system-prompt must be one of ['simple', 'long', 'caps', 'none']" in (
        capsys.readouterr().err
    )


def test_a_hub_task_reads_its_local_copy_offline(tmp_path, monkeypatch):
    """data.hub: the hub is unreachable here, so the task reads the copy `rlsr tasks download`
    leaves under $RLSR_DATA_DIR/<name> (one file per split), as built-in hub datasets do."""
    copy = tmp_path / "data" / "caps_hub"
    copy.mkdir(parents=True)
    write_jsonl(copy / "train.jsonl", CAPS[:6])
    write_jsonl(copy / "test.jsonl", CAPS[6:])
    write_task(tmp_path, """\
        name: caps_hub
        data: {hub: someone/caps, revision: 0123abc}
        splits: {train: train, eval: test}
        columns: {question: prompt, answer: solution, id: uid}
    """)  # fmt: skip
    load_tasks(tmp_path / "caps.yaml")
    spec = get_spec("caps_hub")
    assert (spec.hf_id, spec.revision, spec.split) == ("someone/caps", "0123abc", "test")
    monkeypatch.setenv("RLSR_DATA_DIR", str(tmp_path / "data"))
    assert load_examples("caps_hub")["id"] == [r["uid"] for r in CAPS[6:]]
    assert len(load_examples("caps_hub", split="train")) == 6


def test_train_stops_on_a_tasks_data_errors_with_config_errors(caps_dir, tmp_path):
    """build_trainer loads the train split and the task's held-out split before the model."""
    overrides = ["recipe=tiny", f"tasks_dir={caps_dir}", "data.task=caps", "heldout.tasks=[]",
                 f"output_dir={tmp_path / 'run'}"]  # fmt: skip
    write_task(caps_dir, CAPS_TASK.replace("question: prompt", "question: text"))
    settings = plan_run(from_dict(compose(*overrides, "heldout.every=0")), world_size=1).settings
    with pytest.raises(ConfigError, match=r"^data.task: task caps: no column 'text'"):
        build_trainer(plan_run(settings))
    unregister_task("caps")
    write_jsonl(caps_dir / "caps.jsonl", CAPS[:1])  # round(0.3 x 1) = 0 rows held out
    write_task(caps_dir, CAPS_TASK)
    settings = plan_run(from_dict(compose(*overrides, "heldout.every=1")), world_size=1).settings
    with pytest.raises(
        ConfigError, match=r"^heldout.tasks: task caps: .* split 'eval' has no rows"
    ):
        build_trainer(plan_run(settings))


def test_slurm_resolve_config_accepts_a_tasks_own_prompt_in_method_evaluate(tmp_path):
    """slurm/resolve_config.py turns method.evaluate into evaluate.slurm's flags; a task's own
    prompt name is valid there once the task is registered, as train.py registers it (catches
    a resolution that registers the tasks only as a side effect of the vLLM context
    computation, and refuses the prompt when that does not run)."""
    write_jsonl(tmp_path / "caps.jsonl", CAPS)
    write_task(tmp_path, CAPS_TASK.replace(
        "    system_prompt: simple\n",
        "    system_prompt: {text: 'You name capitals.', append_format: true}\n",
    ))  # fmt: skip
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run(
        [sys.executable, str(root / "slurm" / "resolve_config.py"), "recipe=tiny",
         f"tasks_dir={tmp_path}", "data.task=caps", "+method.evaluate.system_prompt=caps"],
        capture_output=True, text=True, timeout=120, cwd=root,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    line = next(x for x in done.stdout.splitlines() if x.startswith("evaluate_args="))
    assert "--system-prompt caps" in line, line

"""A user task's data is read as written or refused before any model loads (docs/tasks.md,
"Reading your data").

Each test writes a task and its data into ``tmp_path`` and loads it with the real loader
(``load_examples``, ``load_tasks``) or the real CLI; no model is loaded, so every test takes
well under a second.
"""

from __future__ import annotations

import json
import re
import textwrap
import traceback
from pathlib import Path

import datasets
import pytest
from test_config import compose

from rlsr.cli import evaluate_cli, main
from rlsr.config import ConfigError, from_dict, resolve_model_path
from rlsr.core.tokenization import load_tokenizer, model_context_length, prompt_token_counter
from rlsr.data import TaskError, load_tasks, task_names, unregister_task
from rlsr.data import tasks as tasks_module
from rlsr.data.loading import PromptRoom, load_examples
from rlsr.data.tasks import TASKS_PATH_ENV
from rlsr.method.run_plan import plan_run
from rlsr.train.training import build_trainer

datasets.disable_progress_bars()


@pytest.fixture(autouse=True)
def clean_tasks(monkeypatch):
    monkeypatch.delenv(TASKS_PATH_ENV, raising=False)
    yield
    for name in task_names():
        unregister_task(name)
    tasks_module._LOADED_ENV.clear()


def task(folder: Path, data: str, extra: str = "", name: str = "quiz") -> Path:
    (folder / f"{name}.yaml").write_text(
        textwrap.dedent(f"""\
            name: {name}
            data: {{path: {data}}}
        """)
        + textwrap.dedent(extra)
    )
    load_tasks(folder / f"{name}.yaml")
    return folder / f"{name}.yaml"


def jsonl(path: Path, rows) -> str:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path.name


# --- 1. list-valued answers: gold + aliases; other non-strings refused ------------------------


def test_a_list_answer_is_the_gold_and_its_aliases(tmp_path):
    name = jsonl(
        tmp_path / "q.jsonl", [{"question": "Colour of snow?", "answer": ["white", "WHITE"]}]
    )
    task(tmp_path, name)
    ex = load_examples("quiz")
    assert ex["answer"] == ["white"] and ex["answers"] == [["white", "WHITE"]]


def test_a_parquet_list_answer_is_the_gold_and_its_aliases(tmp_path):
    datasets.Dataset.from_list(
        [{"question": "Colour of snow?", "answer": ["white", "snow-white"]}]
    ).to_parquet(str(tmp_path / "q.parquet"))
    task(tmp_path, "q.parquet")
    assert load_examples("quiz")["answers"] == [["white", "snow-white"]]


@pytest.mark.parametrize(
    "answer, problem",
    [({"value": "white"}, "holds a dict"), (True, "holds the boolean True"), ([["a"]], "a list")],
)
def test_a_non_text_answer_is_refused_with_file_row_and_column(tmp_path, answer, problem):
    rows = [{"question": "ok?", "answer": "yes"}, {"question": "Snow?", "answer": answer}]
    task(tmp_path, jsonl(tmp_path / "q.jsonl", rows))
    with pytest.raises(ValueError, match=r"task quiz: .*q.jsonl, row 1, column 'answer'") as err:
        load_examples("quiz")
    assert problem in str(err.value) and "Fix:" in str(err.value)


# --- 2. answers as written: no type inference --------------------------------------------------


def test_csv_cells_are_read_as_written(tmp_path):
    """pandas would make the column float (a blank cell) and drop the leading zero."""
    (tmp_path / "q.csv").write_text("question,answer\nA,4\nB,0123\nC,\nD,40\n")
    task(tmp_path, "q.csv", "skip_empty: true\n")
    with pytest.warns(UserWarning, match=r"skip_empty: skipped 1 of 4 rows .*row 2"):
        ex = load_examples("quiz")
    assert ex["answer"] == ["4", "0123", "40"]
    assert ex["id"] == ["quiz-train-0", "quiz-train-1", "quiz-train-3"]  # stable numbering


def test_csv_na_is_text_and_an_unquoted_comma_is_refused(tmp_path):
    (tmp_path / "q.csv").write_text("question,answer\nSodium symbol?,NA\nNull?,null\n")
    task(tmp_path, "q.csv")
    assert load_examples("quiz")["answer"] == ["NA", "null"]  # pandas would read both as blank
    (tmp_path / "bad.csv").write_text("question,answer\nWhere?,Paris, France\n")
    task(tmp_path, "bad.csv", name="bad")
    with pytest.raises(ValueError, match=r"bad.csv: row 0: 3 cells under a header of 2 columns"):
        load_examples("bad")


def test_csv_text_that_looks_like_a_list_is_one_answer(tmp_path):
    (tmp_path / "q.csv").write_text('question,answer\nInterval?,"[0, 1]"\n')
    task(tmp_path, "q.csv")
    assert load_examples("quiz")["answers"] == [["[0, 1]"]]


def test_json_numbers_are_the_text_they_were_written_as(tmp_path):
    name = jsonl(
        tmp_path / "q.jsonl",
        ['{"question": "2+2?", "answer": 4}', '{"question": "Half of 9?", "answer": 4.50}',
         '{"question": 7, "answer": "seven"}'],
    )  # fmt: skip
    task(tmp_path, name)
    ex = load_examples("quiz")
    assert ex["answer"] == ["4", "4.50", "seven"] and ex["question"][2] == "7"


def test_typed_formats_integers_are_digits_floats_are_refused(tmp_path):
    datasets.Dataset.from_dict({"question": ["a", "b"], "answer": [4, 123]}).to_parquet(
        str(tmp_path / "ints.parquet")
    )
    task(tmp_path, "ints.parquet", name="ints")
    assert load_examples("ints")["answer"] == ["4", "123"]
    datasets.Dataset.from_dict({"question": ["a", "b"], "answer": [4.0, 0.5]}).to_parquet(
        str(tmp_path / "floats.parquet")
    )
    task(tmp_path, "floats.parquet", name="floats")
    with pytest.raises(ValueError, match=r"floats.parquet, row 0, column 'answer' holds the float "
                       r"4.0, whose text as written .* is lost\. Fix: store the column as strings"):  # fmt: skip
        load_examples("floats")


# --- 4. empty questions and answers ------------------------------------------------------------


@pytest.mark.parametrize(
    "row, column",
    [
        ({"question": "Snow?", "answer": ""}, "answer"),
        ({"question": "Snow?", "answer": None}, "answer"),
        ({"question": "Snow?", "answer": []}, "answer"),
        ({"question": "Snow?", "answer": "  "}, "answer"),
        ({"question": "", "answer": "white"}, "question"),
        ({"question": None, "answer": "white"}, "question"),
        ({"answer": "white"}, "question"),
    ],
)
def test_an_empty_question_or_answer_is_refused_with_the_fix(tmp_path, row, column):
    rows = [{"question": "Sky?", "answer": "blue"}, row, {"question": "Grass?", "answer": "green"}]
    path = task(tmp_path, jsonl(tmp_path / "q.jsonl", rows))
    with pytest.raises(ValueError) as err:
        load_examples("quiz")
    message = str(err.value)
    assert f"q.jsonl, row 1, column '{column}' is empty" in message
    assert f"set skip_empty: true in {path}" in message


def test_skip_empty_skips_and_counts(tmp_path):
    rows = [{"question": "Sky?", "answer": "blue"}, {"question": "Snow?", "answer": None},
            {"question": "", "answer": "x"}, {"question": "Grass?", "answer": "green"}]  # fmt: skip
    task(tmp_path, jsonl(tmp_path / "q.jsonl", rows), "skip_empty: true\n")
    with pytest.warns(UserWarning, match=r"task quiz: skip_empty: skipped 2 of 4 rows"):
        ex = load_examples("quiz")
    assert ex["answer"] == ["blue", "green"]


def test_skip_empty_must_be_a_boolean(tmp_path):
    jsonl(tmp_path / "q.jsonl", [{"question": "a", "answer": "b"}])
    with pytest.raises(TaskError, match=r"skip_empty: must be true or false; got 'yes'"):
        task(tmp_path, "q.jsonl", "skip_empty: 'yes'\n")


def test_evaluate_refuses_an_empty_answer_before_any_model(tmp_path, capsys):
    rows = [{"question": "Sky?", "answer": "blue"}, {"question": "Snow?", "answer": ""}]
    jsonl(tmp_path / "q.jsonl", rows)
    (tmp_path / "quiz.yaml").write_text("name: quiz\ndata: {path: q.jsonl}\n")
    code = main(["evaluate", "--model", "no-such-org/no-such-model", "--tasks", "quiz",
                 "--tasks-dir", str(tmp_path), "--output-dir", str(tmp_path / "out")])  # fmt: skip
    assert code == 2
    assert "row 1, column 'answer' is empty" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


# --- 7. multiple choice ------------------------------------------------------------------------


def test_a_repeated_option_text_is_refused(tmp_path):
    rows = [{"question": "Snow?", "answer": "white", "opts": ["white", "white", "red", "blue"]}]
    task(tmp_path, jsonl(tmp_path / "q.jsonl", rows), "columns: {options: opts}\n")
    with pytest.raises(ValueError, match=r"task quiz: .*q.jsonl, row 0, column 'opts' \(options\) "
                       r"repeats an option: A\) 'white' and B\) 'white'"):  # fmt: skip
        load_examples("quiz")


def test_options_keyed_by_digits_are_refused_with_row_and_fix(tmp_path):
    rows = [{"question": "Snow?", "answer": "1", "opts": {"1": "white", "2": "red"}}]
    task(tmp_path, jsonl(tmp_path / "q.jsonl", rows), "columns: {options: opts}\n")
    with pytest.raises(ValueError, match=r"task quiz: .*q.jsonl, row 0, column 'opts' \(options\) "
                       r"is keyed by \['1', '2'\].*Fix: key the options A, B, C"):  # fmt: skip
        load_examples("quiz")


def test_a_gold_that_is_not_an_option_names_the_row(tmp_path):
    rows = [{"question": "Sky?", "answer": "A", "opts": ["blue", "red"]},
            {"question": "Snow?", "answer": "black", "opts": ["white", "red"]}]  # fmt: skip
    task(tmp_path, jsonl(tmp_path / "q.jsonl", rows), "columns: {options: opts}\n")
    with pytest.raises(ValueError, match=r"q.jsonl, row 1, column 'answer' is 'black', neither "
                       r"an option letter"):  # fmt: skip
        load_examples("quiz")


# --- unclear messages made clear ---------------------------------------------------------------


def test_an_id_column_the_task_does_not_name_is_not_used(tmp_path):
    rows = [{"id": 1, "question": "a", "answer": "b"}, {"id": 1, "question": "c", "answer": "d"}]
    task(tmp_path, jsonl(tmp_path / "q.jsonl", rows))
    assert load_examples("quiz")["id"] == ["quiz-train-0", "quiz-train-1"]


def test_a_named_id_column_with_duplicates_names_file_rows_and_a_fix_that_works(tmp_path):
    rows = [{"k": 1, "question": "a", "answer": "b"}, {"k": 1, "question": "c", "answer": "d"}]
    path = task(tmp_path, jsonl(tmp_path / "q.jsonl", rows), "columns: {id: k}\n")
    with pytest.raises(ValueError, match=r"id '1' occurs twice in column 'k' of .*q.jsonl "
                       rf"\(rows 0 and 1, .*remove columns.id from {path}"):  # fmt: skip
        load_examples("quiz")
    unregister_task("quiz")
    task(tmp_path, "q.jsonl")  # the fix: columns.id removed
    assert len(load_examples("quiz")) == 2


def test_an_eval_fraction_that_rounds_to_no_rows_says_so_and_what_works(tmp_path):
    rows = [{"question": str(i), "answer": str(i)} for i in range(40)]
    task(tmp_path, jsonl(tmp_path / "q.jsonl", rows), "splits: {eval_fraction: 0.001}\n")
    with pytest.raises(ValueError, match=r"eval_fraction 0.001 of the 40 rows .* rounds to 0 rows "
                       r"for split 'eval' .*use splits.eval_fraction: 0.025 \(1 of the 40 rows\)"):  # fmt: skip
        load_examples("quiz")


def test_an_empty_tasks_dir_is_refused(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    with pytest.raises(TaskError, match=r"holds no task files \(\*\.yaml / \*\.yml\)"):
        load_tasks(tmp_path / "empty")
    assert main(["tasks", "--tasks-dir", str(tmp_path / "empty")]) == 2
    assert "holds no task files" in capsys.readouterr().err


def test_a_plugin_that_raises_on_import_is_one_clean_error(tmp_path, monkeypatch):
    (tmp_path / "broken_checks.py").write_text("raise RuntimeError('no config')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    jsonl(tmp_path / "q.jsonl", [{"question": "a", "answer": "b"}])
    (tmp_path / "quiz.yaml").write_text(
        "name: quiz\ndata: {path: q.jsonl}\nverifier: broken_checks:verify\n"
    )
    with pytest.raises(TaskError) as err:
        load_tasks(tmp_path)
    text = "".join(traceback.format_exception(err.value))
    assert "During handling of the above exception" not in text
    message = str(err.value)
    assert "quiz.yaml: verifier:" in message and "RuntimeError: no config" in message
    assert f"The module's file: {tmp_path / 'broken_checks.py'}" in message


# --- 5. a prompt that cannot fit the model's context with the generation budget ----------------

LONG = "Which word repeats here? " + "word " * 4000  # ~20,000 characters


def long_task(folder: Path, extra: str = "") -> Path:
    rows = [{"question": "Sky?", "answer": "blue"}, {"question": LONG, "answer": "word"},
            {"question": "Grass?", "answer": "green"}]  # fmt: skip
    return task(folder, jsonl(folder / "q.jsonl", rows), extra)


def tiny_room(budget: int = 256) -> PromptRoom:
    path = resolve_model_path("tiny")
    context, where = model_context_length(path)
    return PromptRoom(
        count=prompt_token_counter(load_tokenizer(path)), context=context, budget=budget,
        context_name=where, budget_name="--max-new-tokens", fix="lower --max-new-tokens",
    )  # fmt: skip


def test_a_prompt_longer_than_the_context_is_refused_with_the_numbers(tmp_path):
    path = long_task(tmp_path)
    room = tiny_room()
    assert room.context == 2048
    with pytest.raises(ValueError) as err:
        load_examples("quiz", room=room)
    message = str(err.value)
    tokens = int(re.search(r"the prompt is (\d+) tokens", message).group(1))
    assert (
        tokens > 2048 and f"needs {tokens + 256}, more than the model's context of 2048" in message
    )
    assert "q.jsonl, row 1:" in message and "max_position_embeddings in" in message
    assert f"set too_long: skip in {path}" in message
    assert len(load_examples("quiz")) == 3  # without a room (no model named) nothing is checked


def test_too_long_skip_skips_and_counts(tmp_path):
    long_task(tmp_path, "too_long: skip\n")
    with pytest.warns(UserWarning, match=r"too_long: skip: skipped 1 rows .*row 1: the prompt is"):
        ex = load_examples("quiz", room=tiny_room())
    assert ex["answer"] == ["blue", "green"]


def test_evaluate_refuses_a_too_long_prompt_before_loading_weights(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(evaluate_cli, "make_backend", lambda *a, **k: pytest.fail("model loaded"))
    long_task(tmp_path)
    unregister_task("quiz")
    code = main(["evaluate", "--model", "tiny", "--tasks", "quiz", "--max-new-tokens", "64",
                 "--tasks-dir", str(tmp_path), "--output-dir", str(tmp_path / "out")])  # fmt: skip
    err = capsys.readouterr().err
    assert (
        code == 2
        and "row 1: the prompt is" in err
        and " new tokens (--max-new-tokens 64 + " in err
        and "use a model with a longer context (the prompt alone fills this one)" in err
    )
    assert not (tmp_path / "out").exists()


def test_a_task_under_the_default_budget_gets_the_budget_that_fits(tmp_path, capsys, monkeypatch):
    """The paper's 4,096 new tokens on the tiny model's 2,048 positions: every row of a task of
    short questions is refused before weights with the largest --max-new-tokens that fits them
    all (the budget check's own fix, as for a built-in dataset); with that budget the run gets
    to the model loader, with one more token it is refused again."""

    class Loaded(Exception):
        pass

    def loader(*args, **kwargs):
        raise Loaded

    monkeypatch.setattr(evaluate_cli, "make_backend", loader)
    rows = [{"question": "Sky?", "answer": "blue"}, {"question": "Grass?", "answer": "green"}]
    task(tmp_path, jsonl(tmp_path / "q.jsonl", rows))
    argv = ["evaluate", "--model", "tiny", "--tasks", "quiz", "--tasks-dir", str(tmp_path),
            "--output-dir", str(tmp_path / "out")]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "row 0: the prompt is" in err and "(1 more rows too)" in err
    fits = int(re.search(r"pass --max-new-tokens <= (\d+)", err).group(1))
    assert main([*argv, "--max-new-tokens", str(fits + 1)]) == 2
    assert ": the prompt is" in capsys.readouterr().err
    with pytest.raises(Loaded):
        main([*argv, "--max-new-tokens", str(fits)])
    assert not (tmp_path / "out").exists()


def test_training_refuses_a_too_long_prompt_before_the_model(tmp_path):
    long_task(tmp_path)
    overrides = ["recipe=tiny", f"tasks_dir={tmp_path}", "data.task=quiz", "heldout.every=0",
                 f"output_dir={tmp_path / 'run'}"]  # fmt: skip
    settings = plan_run(from_dict(compose(*overrides)), world_size=1).settings
    with pytest.raises(ConfigError, match=r"^data.task: task quiz: .*row 1: the prompt is \d+ "
                       r"tokens; with \d+ new tokens \(grpo.max_completion_length\)"):  # fmt: skip
        build_trainer(plan_run(settings))


def test_a_json_list_of_non_objects_is_refused(tmp_path):
    (tmp_path / "q.json").write_text('[{"question": "a", "answer": "b"}, ["c", "d"]]')
    task(tmp_path, "q.json")
    with pytest.raises(ValueError, match=r"q.json: row 1: expected a JSON object .*got list"):
        load_examples("quiz")


def test_a_json_document_of_rows_or_columns_reads_as_written(tmp_path):
    (tmp_path / "rows.json").write_text('[{"question": "a", "answer": 7}]')
    task(tmp_path, "rows.json", name="rows")
    assert load_examples("rows")["answer"] == ["7"]
    (tmp_path / "cols.json").write_text('{"question": ["a", "b"], "answer": ["0123", 1.50]}')
    task(tmp_path, "cols.json", name="cols")
    assert load_examples("cols")["answer"] == ["0123", "1.50"]

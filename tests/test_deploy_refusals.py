"""``rlsr deploy`` (and ``rlsr evaluate --deployment-target``) refuses what it cannot certify,
each time with one ``rlsr: error:`` line naming the file and the fix, exit 2, and nothing written
or overwritten; and a run that never gives a confidence says so (n/a, a warning) wherever its
numbers are shown: evaluate's lines and summary.json, ``rlsr report``, train.py's run summary.

The samples are the bundled ``tiny-missing`` rows written as ``rlsr evaluate`` writes them
(``samples.jsonl``, ``metrics.json`` with its settings, ``run.json``)."""

from __future__ import annotations

import json
from pathlib import Path

import datasets
import pytest

from rlsr.cli import evaluate_cli, main
from rlsr.data.loading import load_examples
from rlsr.evaluation.reports.report import render_markdown, report_rows
from rlsr.evaluation.run.samples_io import append_samples
from rlsr.evaluation.run.summary import (
    CONFIDENCE_METRICS,
    compute_metrics,
    no_confidence,
    scorer_value,
)
from rlsr.method.run_plan import plan_run
from rlsr.train.training import run_summary

DATASET = "tiny-missing"
SETTINGS = {"max_new_tokens": 32, "temperature": 0.0, "top_p": 1.0, "seed": 0, "fallbacks": True,
            "fallback_max_new_tokens": 64, "response_format": "tags",
            "scorers": ["verbalized"]}  # fmt: skip


def _records(split: str, n: int = 40, *, confidence=True) -> list[dict]:
    """``n`` bundled rows of ``split`` as samples: listed facts right at confidence 0.9, missing
    ones wrong at 0.1 (every rule reaches 75 %); ``confidence=False``: none stated."""
    out = []
    for row in load_examples(DATASET, split=split, limit=n):
        listed = "Facts: none." not in row["question"]
        conf = (0.9 if listed else 0.1) if confidence else None
        out.append({"id": row["id"], "dataset": f"{DATASET}@{split}", "prompt": row["prompt"],
                    "question": row["question"], "confidence": conf,
                    "scores": {"verbalized": conf}, "correct": listed,
                    "format_ok": confidence})  # fmt: skip
    return out


def _evaluation(root: Path, split: str, *, run=None, settings=None, records=None) -> Path:
    """``root/<dataset>/`` as ``rlsr evaluate --output-dir root`` leaves it: samples.jsonl,
    metrics.json (``settings`` over ``SETTINGS``), and root/run.json (``run`` over model m, no
    adapter). Returns the dataset folder."""
    folder = root / f"{DATASET}@{split}"
    folder.mkdir(parents=True)
    records = _records(split) if records is None else records
    append_samples(folder / "samples.jsonl", records)
    extra = {"settings": {**SETTINGS, **(settings or {})}}
    metrics = compute_metrics(records, n_resamples=0, extra=extra)
    (folder / "metrics.json").write_text(json.dumps(metrics))
    (root / "run.json").write_text(json.dumps({"model": "m", "adapter": None, **(run or {})}))
    return folder


def _deploy(tmp_path, val, test, *extra) -> int:
    argv = ["deploy", "--validation", str(val), "--test", str(test), "--deployment-target", "0.75",
            "--output-dir", str(tmp_path / "out"), *extra]  # fmt: skip
    return main(argv)


@pytest.fixture(autouse=True)
def _quiet_datasets():
    """No progress bars of the datasets loader (loading the rows) among the lines checked."""
    was = datasets.is_progress_bar_enabled()
    datasets.disable_progress_bars()
    yield
    if was:
        datasets.enable_progress_bars()


def _refusal(capsys) -> str:
    """The one line a refusal prints (no traceback, nothing on stdout)."""
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("rlsr: error: "), captured.err
    assert captured.out == ""
    return lines[0]


@pytest.fixture
def splits(tmp_path):
    """A finished evaluation of the validation and test splits (one run.json)."""
    root = tmp_path / "evals"
    return _evaluation(root, "validation"), _evaluation(root, "test")


def test_an_unknown_scorer_and_a_scorer_the_samples_lack_are_refused(tmp_path, splits, capsys):
    """``--scorer bogus`` and ``--scorer logprob`` on samples without it gave every answer
    confidence 0 and a "feasible" tau = 0, exit 0. Now: one line naming the scorers there are."""
    val, test = splits
    assert _deploy(tmp_path, val, test, "--scorer", "bogus") == 2
    assert "--scorer bogus: unknown scorer; choose one of verbalized, logprob" in _refusal(capsys)
    assert _deploy(tmp_path, val, test, "--scorer", "logprob") == 2
    line = _refusal(capsys)
    assert str(val / "samples.jsonl") in line and "no logprob confidence" in line
    assert "(their scorers: verbalized)" in line
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "field, test_run, test_settings, shown",
    [
        ("model", {"model": "other-model"}, {}, ("m", "other-model")),
        ("adapter", {"adapter": "/a", "adapter_sha256": "f" * 64}, {}, ("none", "f" * 64)),
        ("protocol temperature", {}, {"temperature": 0.7}, ("0.0", "0.7")),
        ("protocol max_new_tokens", {}, {"max_new_tokens": 64}, ("32", "64")),
    ],
)
def test_validation_and_test_of_different_runs_are_refused(
    tmp_path, capsys, field, test_run, test_settings, shown
):
    """Validation from one model / adapter / protocol and test from another were accepted (the
    provenance named only validation's). Now refused, naming both values and both files."""
    val = _evaluation(tmp_path / "a", "validation")
    test = _evaluation(tmp_path / "b", "test", run=test_run, settings=test_settings)
    assert _deploy(tmp_path, val, test) == 2
    line = _refusal(capsys)
    assert f"validation and test differ in {field}: " in line
    assert (
        f"{val / 'samples.jsonl'} has {shown[0]}, {test / 'samples.jsonl'} has {shown[1]}" in line
    )
    assert not (tmp_path / "out").exists()


def test_validation_and_test_of_different_tasks_or_prompts_are_refused(tmp_path, capsys):
    """Another task's test samples, or the same task asked under another system prompt."""
    val = _evaluation(tmp_path / "a", "validation")
    other = [{**r, "dataset": "tiny@test"} for r in _records("test")]
    test = _evaluation(tmp_path / "b", "test", records=other)
    assert _deploy(tmp_path, val, test) == 2
    line = _refusal(capsys)
    assert "differ in task: " in line and "has tiny-missing," in line and "has tiny;" in line
    prompted = [{**r, "prompt": [{"role": "system", "content": "Be brief."}, *r["prompt"][1:]]}
                for r in _records("test")]  # fmt: skip
    test = _evaluation(tmp_path / "c", "test", records=prompted)
    assert _deploy(tmp_path, val, test) == 2
    assert "differ in system prompt: " in _refusal(capsys)


def test_the_same_rows_in_validation_and_test_are_refused(tmp_path, splits, capsys):
    """The same file as validation and test gave test figures equal to validation's, no note;
    so did a copy of the validation rows in another folder. Both refused."""
    val, test = splits
    assert _deploy(tmp_path, val, val) == 2
    assert "validation and test are the same file" in _refusal(capsys)
    copy = _evaluation(tmp_path / "copy", "validation")
    assert _deploy(tmp_path, val, copy) == 2
    line = _refusal(capsys)
    assert "40 of the 40 test questions" in line and "also in the validation samples" in line
    assert not (tmp_path / "out").exists()


def test_training_rows_as_test_are_refused_or_marked_on_screen_and_in_the_md(
    tmp_path, splits, capsys
):
    """Test samples from the split the adapter trained on were flagged only inside the JSON.
    Now refused; with --allow-train-split written, and NOT HELD OUT printed and in the .md."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text(f"data:\n  task: {DATASET}\n  split: null\n")
    (run / "adapter_config.json").write_text('{"r": 1}')
    val = splits[0]
    test = _evaluation(tmp_path / "t", "train")
    assert _deploy(tmp_path, val, test, "--adapter", str(run)) == 2
    line = _refusal(capsys)
    assert "the test samples (tiny-missing@train) are the split the adapter trained on" in line
    assert "--allow-train-split" in line and str(run / "config.yaml") in line
    assert _deploy(tmp_path, val, test, "--adapter", str(run), "--allow-train-split") == 0
    mark = "NOT HELD OUT: the test figures come from tiny-missing@train"
    assert mark in capsys.readouterr().out
    assert mark in (tmp_path / "out" / "deployment.md").read_text()


def test_unfinished_or_wrong_inputs_are_named(tmp_path, splits, capsys):
    """A test samples.jsonl cut mid-line gave n_test 39 without a word; an empty one said "no
    samples in A or B"; metrics.json as --test was called corrupt; --model /nonexistent was
    recorded as is. Each is now one line naming the file, and a deployment already written
    is left as it was."""
    val, test = splits
    assert _deploy(tmp_path, val, test) == 0
    written = (tmp_path / "out" / "deployment.json").read_text()
    capsys.readouterr()
    text = (test / "samples.jsonl").read_text()
    (test / "samples.jsonl").write_text(text[: len(text) - 20])
    assert _deploy(tmp_path, val, test) == 2
    line = _refusal(capsys)
    assert f"--test {test / 'samples.jsonl'}: its last line is cut off after 39" in line
    assert "rerun the same `rlsr evaluate` command" in line
    (test / "samples.jsonl").write_text(text.split("\n", 1)[1])  # whole lines, one fewer
    assert _deploy(tmp_path, val, test) == 2
    assert "holds 39 samples but" in _refusal(capsys)
    (test / "samples.jsonl").write_text("")
    assert _deploy(tmp_path, val, test) == 2
    assert f"--test {test / 'samples.jsonl'}: no samples in it" in _refusal(capsys)
    assert _deploy(tmp_path, val, test / "metrics.json") == 2
    line = _refusal(capsys)
    assert "is a metrics file; give the samples.jsonl beside it" in line
    assert "corrupt" not in line
    assert _deploy(tmp_path, val, val, "--model", "/nonexistent/model") == 2
    assert "--model /nonexistent/model: no such folder" in _refusal(capsys)
    assert (tmp_path / "out" / "deployment.json").read_text() == written


def test_samples_without_any_confidence_are_not_certified(tmp_path, capsys):
    """With no confidence parsed, deploy showed tau = 0 "the highest validation confidence"
    and exit 0; rlsr evaluate --deployment-target the same. Both refuse, naming the file."""
    root = tmp_path / "evals"
    val = _evaluation(root, "validation", records=_records("validation", confidence=False))
    test = _evaluation(root, "test")
    assert _deploy(tmp_path, val, test) == 2
    line = _refusal(capsys)
    assert f"{val / 'samples.jsonl'}: no verbalized confidence in any of its 40 samples" in line
    assert not (tmp_path / "out").exists()
    args = type("Args", (), dict(deployment_splits="validation,test", deployment_task=DATASET,
                                 deployment_target=0.75, deployment_delta=0.1,
                                 allow_train_split=False))  # fmt: skip
    jobs = [(f"{DATASET}@validation", DATASET, "validation"), (f"{DATASET}@test", DATASET, "test")]
    with pytest.raises(ValueError, match="validation split .*no verbalized confidence in any"):
        evaluate_cli._deploy_from_dirs(root, args, jobs)
    assert not (root / "deployment.json").exists()


def test_confidence_metrics_are_na_only_when_no_confidence_was_given():
    """The n/a rule (``summary.no_confidence``): with no confidence at all every confidence
    metric is n/a (it was AURC = error rate, ECE = accuracy); accuracy stays. With one
    confidence among ties at 0 the numbers are metrics.json's, unchanged."""
    none = _records("validation", 20, confidence=False)
    metrics = compute_metrics(none, n_resamples=0)
    assert no_confidence(metrics)
    assert all(scorer_value(metrics, key) is None for key in CONFIDENCE_METRICS)
    assert scorer_value(metrics, "missing_confidence") == 20
    one = [{**none[0], "scores": {"verbalized": 0.5}}, *none[1:]]
    metrics = compute_metrics(one, n_resamples=0)
    assert not no_confidence(metrics)
    block = metrics["scorers"]["verbalized"]
    assert all(scorer_value(metrics, k) == block[k] for k in ("aurc", "ece", "acc@10"))


def test_the_report_shows_na_for_a_run_without_confidence(tmp_path):
    """The report row of a model that never gave a confidence showed ECE 0.05 (its accuracy).
    Now n/a in the per-dataset and average tables; a run with confidences beside it keeps its
    numbers."""
    quiet = _evaluation(tmp_path / "quiet", "test", records=_records("test", confidence=False))
    talks = _evaluation(tmp_path / "talks", "test")
    rows = report_rows([str(quiet.parent), str(talks.parent)])
    text = render_markdown(rows, "f.png", "d.png")
    metrics = json.loads((talks / "metrics.json").read_text())
    acc, block = f"{100 * metrics['accuracy']:.1f}", metrics["scorers"]["verbalized"]
    assert f"| quiet | 40 | {acc} | n/a | n/a | n/a | n/a | n/a |" in text
    assert "| quiet | n/a | n/a | n/a | n/a | n/a |" in text
    assert f"| talks | 40 | {acc} | {block['aurc']:.3f} | {block['ece']:.3f} |" in text


def test_train_py_summary_says_na_and_warns_when_the_held_out_model_gave_no_confidence(tmp_path):
    """The run summary printed AURC 1.0000 -> 1.0000 and nothing else for a run whose held-out
    answers never carried a confidence. Now n/a, and a warning line naming the step."""
    from rlsr.config.compose import compose_config

    out = tmp_path / "run"
    for step in (0, 2):
        folder = out / "eval" / f"step-{step}" / DATASET
        folder.mkdir(parents=True)
        metrics = compute_metrics(_records("validation", 10, confidence=step == 0), n_resamples=0)
        (folder / "metrics.json").write_text(json.dumps(metrics))
        if step == 0:
            aurc = metrics["scorers"]["verbalized"]["aurc"]
            gain = round(1 - metrics["accuracy"] - aurc, 3) + 0.0
    text = run_summary(plan_run(compose_config(["recipe=tiny", f"output_dir={out}"])))
    assert f"{DATASET}: AURC {aurc:.4f} at step 0 -> n/a at step 2" in text
    assert f"ranking gain (error rate - AURC, 0 = no ranking) {gain:+.3f} -> n/a" in text
    assert (
        f"warning: {DATASET} at step 2: no verbalized confidence in any of the 10 answers "
        "(format rate 0.00): AURC, ECE and Acc@k are n/a" in text
    )


def test_rlsr_evaluate_warns_and_deploy_refuses_a_model_that_gives_no_confidence(tmp_path, capsys):
    """The untrained ``tiny`` model never writes the tags: rlsr evaluate printed AURC 1.000 and
    --deployment-target wrote tau = 0. Now its lines say AURC=n/a, a warning goes to stderr and
    summary.json, and the deployment is refused with the samples kept."""
    out = tmp_path / "ev"
    argv = ["evaluate", "--model", "tiny", "--tasks", DATASET, "--limit", "3", "--max-new-tokens",
            "4", "--no-fallbacks", "--bootstrap", "0", "--system-prompt", "simple", "--no-progress",
            "--deployment-task", DATASET, "--deployment-target", "0.75", "--output-dir", str(out)]  # fmt: skip
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert f"{DATASET}: n=3 acc=0.000 AURC=n/a" in captured.out
    assert f"rlsr: warning: {DATASET}: no verbalized confidence in any of the 3" in captured.err
    assert "no threshold can be certified" in captured.err.strip().splitlines()[-1]
    summary = json.loads((out / "summary.json").read_text())
    assert (
        summary[DATASET]["aurc"] is None
        and "AURC, ECE and Acc@k are n/a" in (summary[DATASET]["warning"])
    )
    assert (out / DATASET / "samples.jsonl").is_file() and not (out / "deployment.json").exists()

"""``rlsr evaluate --from-samples`` (rlsr.evaluation.run.external) and the lm-eval task pack's
hooks (rlsr.lm_eval.hooks) on small files of the bundled task ``tiny``: no model runs."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rlsr.cli import main as rlsr_main
from rlsr.data import unregister_task
from rlsr.data.loading import load_examples
from rlsr.evaluation.run.samples_io import read_samples
from rlsr.evaluation.run.summary import compute_metrics
from rlsr.lm_eval import hooks
from rlsr.lm_eval.pack import pack_rows
from rlsr.metrics import selective as M

ROWS = list(load_examples("tiny"))


def _response(answer, confidence) -> str:
    tail = "" if confidence is None else f"<confidence>{confidence}</confidence>"
    return f"<think>t</think><answer>{answer}</answer><analysis>a</analysis>{tail}"


# (answer right?, confidence): ties at 0.5 and 0.9 across right and wrong answers, a missing
# confidence, and two responses with no answer tag at all
PLAN = [(True, 0.9), (False, 0.9), (True, 0.5), (False, 0.5), (True, None), (False, 0.2),
        (True, 0.5), (None, 0.7), (None, None), (True, 0.9)]  # fmt: skip


def _responses() -> list[str]:
    out = []
    for row, (right, conf) in zip(ROWS, PLAN, strict=False):
        if right is None:
            out.append(
                "I do not know" if conf is None else f"maybe <confidence>{conf}</confidence>"
            )
        else:
            out.append(_response(row["answer"] if right else "purple", conf))
    return out


def _write_plain(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _plain_rows(with_id: bool = True) -> list[dict]:
    return [
        {**({"id": row["id"]} if with_id else {}), "question": row["question"],
         "response": text, "gold": row["answer"]}
        for row, text in zip(ROWS, _responses(), strict=False)
    ]  # fmt: skip


def _score(tmp_path, path, *extra) -> int:
    return rlsr_main(["evaluate", "--from-samples", str(path), "--tasks", "tiny",
                      "--output-dir", str(tmp_path / "out"), "--bootstrap", "0", *extra])  # fmt: skip


def test_plain_samples_are_scored_like_a_generation_run(tmp_path, capsys):
    """A plain JSONL (matched by question text, no id) gives samples.jsonl with the task's own
    prompt and gold per row, the verifier's verdicts, the parsed confidences (a missing one kept
    as None, counted), and a metrics.json that compute_metrics rebuilds from the file; the
    responses without an answer are counted on the summary line, not dropped."""
    path = _write_plain(tmp_path / "plain.jsonl", _plain_rows(with_id=False))
    assert _score(tmp_path, path) == 0
    line = capsys.readouterr().out
    assert "n=10 of 50 task rows" in line and "2 without an answer" in line
    records = read_samples(tmp_path / "out" / "tiny" / "samples.jsonl")
    assert [r["id"] for r in records] == [r["id"] for r in ROWS[:10]]
    assert [r["prompt"] for r in records] == [r["prompt"] for r in ROWS[:10]]
    assert [r["correct"] for r in records] == [p[0] is True for p in PLAN]
    assert [r["confidence"] for r in records] == [
        None if p[0] is None and p[1] is None else p[1] for p in PLAN
    ]
    assert all(r["fallbacks"] == [] for r in records)
    metrics = json.loads((tmp_path / "out" / "tiny" / "metrics.json").read_text())
    again = compute_metrics(records, n_resamples=0)
    assert metrics["scorers"] == json.loads(json.dumps(again["scorers"]))
    assert (
        metrics["answer_missing"] == 2
        and metrics["scorers"]["verbalized"]["missing_confidence"] == 2
    )
    assert metrics["from_samples"]["format"] == "plain"
    run = json.loads((tmp_path / "out" / "run.json").read_text())
    assert run["backend"] == "from-samples" and run["fallbacks"] is False


def test_lm_eval_samples_equal_the_hooks_aggregations(tmp_path):
    """The lm-eval path's numbers equal --from-samples' on the same responses (to 1e-9): the
    rows as `rlsr lm-eval tasks` writes them, each response through ``process_results`` and
    every aggregation, against metrics.json of the same responses written as lm-eval's
    --log_samples rows (the fields lm-eval 0.4 writes; the real file: tests/test_lm_eval.py).
    The plan holds ties and invalid answers."""
    docs = pack_rows(ROWS[:10], "tiny", "exact_match", "tags")
    items = [hooks.process_results(d, [t])["aurc"] for d, t in zip(docs, _responses(), strict=True)]
    path = tmp_path / "samples_rlsr_tiny_2026-12-07T10-00-00.000001.jsonl"
    _write_plain(path, [
        {"doc_id": k, "doc": d, "target": d["answer"], "arguments": {}, "resps": [[t]],
         "filtered_resps": [t], "filter": "none", "metrics": list(hooks.METRICS)}
        for k, (d, t) in enumerate(zip(docs, _responses(), strict=True))
    ])  # fmt: skip
    assert _score(tmp_path, path) == 0
    metrics = json.loads((tmp_path / "out" / "tiny" / "metrics.json").read_text())
    primary = metrics["scorers"]["verbalized"]
    expected = {
        "aurc": primary["aurc"], "ece": primary["ece"], "acc_at_10": primary["acc@10"],
        "acc_at_25": primary["acc@25"], "acc_at_50": primary["acc@50"],
        "accuracy": metrics["accuracy"], "format_rate": metrics["format_ok_rate"],
        "missing_confidence": primary["missing_confidence"],
        "ranking_gain": M.ranking_gain_from_aurc(primary["aurc"], 1 - metrics["accuracy"]),
    }  # fmt: skip
    for name, (aggregate, _) in hooks.METRICS.items():
        assert aggregate(items) == pytest.approx(expected[name], abs=1e-9), name
    records = read_samples(tmp_path / "out" / "tiny" / "samples.jsonl")
    assert [it["correct"] for it in items] == [r["correct"] for r in records]
    # AURC with ties: the brute-force expectation over every ordering of tied confidences
    conf = np.array([0.0 if it["confidence"] is None else it["confidence"] for it in items])
    ok = np.array([it["correct"] for it in items])
    assert hooks.aurc(items) == pytest.approx(_brute_aurc(conf, ok), abs=1e-12)


def _brute_aurc(conf, ok) -> float:
    """Mean over every tie-breaking of the confidences of (1/n) sum_k error rate of the top k."""
    from itertools import permutations

    n = len(conf)
    groups = {}
    for i, c in enumerate(conf):
        groups.setdefault(-c, []).append(i)
    orders = [[]]
    for key in sorted(groups):
        orders = [o + list(p) for o in orders for p in permutations(groups[key])]
    total = 0.0
    for order in orders:
        errors = np.cumsum(~ok[order])
        total += float(np.mean(errors / np.arange(1, n + 1)))
    return total / len(orders)


@pytest.mark.parametrize(
    "row, message",
    [
        ({"question": "q", "gold": "x"}, "line 2: field 'response' is missing"),
        ({"id": "nope", "question": "q", "response": "r", "gold": "x"},
         "line 2: id 'nope' is not a row of task tiny"),
        ({"question": ROWS[1]["question"], "response": "r", "gold": "not-the-gold"},
         "line 2: gold 'not-the-gold' is not task tiny's answer"),
        ({"question": ROWS[0]["question"], "response": "r", "gold": ROWS[0]["answer"]},
         "line 2: answers the same question as line 1"),
    ],
)  # fmt: skip
def test_bad_rows_are_refused_with_file_and_line(tmp_path, capsys, row, message):
    """A missing field, a row of another task, a gold the task does not give, a question
    answered twice: one line naming the file and the line, exit 2, nothing written."""
    path = _write_plain(tmp_path / "bad.jsonl", [_plain_rows()[0], row])
    assert _score(tmp_path, path) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]  # after the datasets progress bar
    assert err.startswith("rlsr: error: ") and str(path) in err and message in err, err
    assert not (tmp_path / "out").exists()


def test_lm_eval_file_of_another_task_and_existing_results_are_refused(tmp_path, capsys):
    """An lm-eval samples file of rlsr task tiny-missing scored as tiny is refused, and so is
    scoring into a folder that holds results: the earlier samples.jsonl stays as it was."""
    path = _write_plain(tmp_path / "samples_rlsr_tiny-missing_2026-12-07T10-00-00.1.jsonl",
                        [{"doc_id": 0, "doc": {"id": ROWS[0]["id"]}, "resps": [["x"]]}])  # fmt: skip
    assert _score(tmp_path, path) == 2
    assert "lm-eval task rlsr_tiny-missing is not task tiny" in capsys.readouterr().err
    plain = _write_plain(tmp_path / "plain.jsonl", _plain_rows())
    assert _score(tmp_path, plain) == 0
    before = (tmp_path / "out" / "tiny" / "samples.jsonl").read_bytes()
    assert _score(tmp_path, plain) == 2
    assert "already holds tiny/samples.jsonl" in capsys.readouterr().err
    assert (tmp_path / "out" / "tiny" / "samples.jsonl").read_bytes() == before
    assert _score(tmp_path, plain, "--overwrite") == 0


def test_lm_eval_samples_without_the_chat_template_are_refused(tmp_path, capsys):
    """lm-eval run without --apply_chat_template sends the system and user messages as one
    plain text (its `arguments`), not the prompt rlsr evaluate renders: refused, with the flag."""
    [doc] = pack_rows(ROWS[:1], "tiny", "exact_match", "tags")
    plain_prompt = doc["rlsr_system"] + doc["rlsr_user"]
    path = _write_plain(tmp_path / "samples_rlsr_tiny_2026-12-07T10-00-00.1.jsonl", [
        {"doc_id": 0, "doc": doc, "target": doc["answer"], "resps": [["x"]],
         "arguments": {"gen_args_0": {"arg_0": plain_prompt, "arg_1": {}}}}])  # fmt: skip
    assert _score(tmp_path, path) == 2
    assert "line 1: lm-eval sent the task's messages as plain text" in capsys.readouterr().err


def test_lm_eval_tasks_writes_rlsr_prompts(tmp_path, capsys):
    """`rlsr lm-eval tasks` writes each task's rows with rlsr evaluate's system and user
    messages, a YAML naming the hooks, and prints the lm_eval command; an LLM-judge task is
    refused with the way to score it."""
    out = tmp_path / "pack"
    assert rlsr_main(["lm-eval", "tasks", "--tasks", "tiny", "--output-dir", str(out),
                      "--max-new-tokens", "64", "--limit", "3"]) == 0  # fmt: skip
    assert "--include_path" in capsys.readouterr().out
    docs = [json.loads(line) for line in (out / "rlsr_tiny.jsonl").read_text().splitlines()]
    assert [[{"role": "system", "content": d["rlsr_system"]},
             {"role": "user", "content": d["rlsr_user"]}] for d in docs] == [
        r["prompt"] for r in ROWS[:3]]  # fmt: skip
    text = (out / "rlsr_tiny.yaml").read_text()
    assert "max_gen_toks: 64" in text and "!function rlsr_lm_eval_utils.aurc" in text
    assert (out / "rlsr_lm_eval_utils.py").is_file()
    assert rlsr_main(["lm-eval", "tasks", "--tasks", "trivia", "--output-dir", str(out)]) == 2
    assert "--verifier trivia=exact_match" in capsys.readouterr().err


def test_model_is_needed_only_to_generate_and_generation_flags_are_refused(tmp_path, capsys):
    """Without --from-samples, --model is still required (one line, exit 2); with it, a flag
    that asks for generation (--adapter, --dcs, a second scorer) is refused by name, nothing
    written."""
    out = tmp_path / "out"
    assert rlsr_main(["evaluate", "--tasks", "tiny", "--output-dir", str(out)]) == 2
    assert "--model is required (or --from-samples FILE" in capsys.readouterr().err
    path = _write_plain(tmp_path / "plain.jsonl", _plain_rows())
    for extra, flag in ((["--adapter", "x"], "--adapter"), (["--dcs"], "--dcs"),
                        (["--scorers", "verbalized,logprob"], "--scorers")):  # fmt: skip
        assert _score(tmp_path, path, *extra) == 2
        assert capsys.readouterr().err.strip().splitlines()[-1].startswith(f"rlsr: error: {flag}")
    assert not out.exists()


def test_lm_eval_samples_of_another_system_prompt_are_refused(tmp_path, capsys):
    """Samples of a task pack made with --system-prompt long, scored with task tiny's own
    prompt (simple), would record a prompt the model never saw: refused, naming the line;
    scored with --system-prompt long they are accepted."""
    [doc] = pack_rows(load_examples("tiny", limit=1, system_prompt="long"), "tiny",
                      "exact_match", "tags")  # fmt: skip
    path = _write_plain(tmp_path / "samples_rlsr_tiny_2026-12-07T10-00-00.1.jsonl", [
        {"doc_id": 0, "doc": doc, "target": doc["answer"], "resps": [[_responses()[0]]]}])  # fmt: skip
    assert _score(tmp_path, path) == 2
    assert "line 1: lm-eval sent other messages than rlsr evaluate sends" in capsys.readouterr().err
    assert _score(tmp_path, path, "--system-prompt", "long") == 0


def test_a_failing_verifier_stops_before_anything_is_written(tmp_path, monkeypatch, capsys):
    """A user task whose plugin verifier judges nothing (None for every item) is past its
    max_failed_fraction (5 %): exit 1 with the verifier's failure message, as a generation run
    stops, and nothing is written (no samples.jsonl, no run.json, no folder)."""
    code = tmp_path / "code"
    code.mkdir()
    (code / "rlsr_fs_checks.py").write_text(
        "def unsure(predictions, golds, *, questions=None, options=None):\n"
        "    return [None] * len(predictions)\n"
    )
    monkeypatch.syspath_prepend(str(code))
    rows = [{"id": f"u{i}", "question": f"q{i}?", "answer": f"a{i}"} for i in range(4)]
    _write_plain(tmp_path / "rows.jsonl", rows)
    (tmp_path / "unsure.yaml").write_text(
        "name: unsure-task\ndata: {path: rows.jsonl}\n"
        "verifier: {name: 'rlsr_fs_checks:unsure', num_workers: 0}\n"
    )
    samples = _write_plain(tmp_path / "s.jsonl", [
        {"id": r["id"], "question": r["question"], "response": _response(r["answer"], 0.5),
         "gold": r["answer"]} for r in rows])  # fmt: skip
    out = tmp_path / "out"
    try:
        code_ = rlsr_main(["--tasks-dir", str(tmp_path / "unsure.yaml"), "evaluate",
                           "--from-samples", str(samples), "--tasks", "unsure-task",
                           "--output-dir", str(out), "--bootstrap", "0"])  # fmt: skip
    finally:
        unregister_task("unsure-task")
    assert code_ == 1
    err = capsys.readouterr().err
    assert (
        "gave no verdict on 4 of 4 items of task unsure-task" in err
        and "Nothing was written" in err
    )
    assert not out.exists()

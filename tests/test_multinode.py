"""Two "nodes" on one machine, started by slurm/train.slurm itself: RLSR training, pooled over
both nodes, then a requeue (both nodes killed, the batch script rerun) that resumes.

What runs for real: slurm/train.slurm (not in dry-run mode), slurm/node_exec.sh on each "node",
the ``accelerate launch ... --num_machines 2 --machine_rank R --main_process_ip 127.0.0.1
--rdzv_backend c10d`` line that train.slurm builds (one process per node, gloo, CPU), Hydra,
validation, TRL, PEFT and the pooled reward. The one test double is ``srun`` (no Slurm here):
FAKE_SRUN below runs the step's command once per node of ``--nodelist`` on this machine with
``SLURMD_NODENAME``/``SLURM_PROCID`` set, as srun does on each node.

The training script is train.py itself, run through this file (``RLSR_TRAIN_SCRIPT``, a setting
of train.slurm): the ``__main__`` branch adds a ``pool_hook`` that dumps each rank's gathered pool
and then runs train.py as ``__main__`` (the real entry point) with the overrides train.slurm passed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from ports import free_port as _free_port  # one OS-given port helper for the suite

ROOT = Path(__file__).resolve().parents[1]
PER_DEVICE, ACCUM, NODES, G, STEPS = 4, 2, 2, 4, 3

# Test double for srun, as tests/test_slurm.py's FAKE_SRUN (the step's command once per node of
# --nodelist, here, with SLURMD_NODENAME/SLURM_PROCID), plus one accommodation for sharing a host:
# node 1 starts first and the others once the rendezvous port ($FAKE_SRUN_WAIT_PORT) listens.
# On separate hosts order does not matter, but here accelerate's pre-launch check on machine
# rank 0 ("another process is utilizing" the port) would see the store of a faster node 2.
FAKE_SRUN = """#!/usr/bin/env bash
nodes=$(hostname -s)
while [[ $1 == --* ]]; do
    case $1 in --nodelist=*) nodes=${1#--nodelist=} ;; esac
    shift
done
IFS=, read -r -a list <<<"$nodes"
pids=()
trap 'kill -TERM "${pids[@]}" 2>/dev/null' TERM INT
for i in "${!list[@]}"; do
    if ((i > 0)); then
        until (exec 3<>"/dev/tcp/127.0.0.1/$FAKE_SRUN_WAIT_PORT") 2>/dev/null; do sleep 0.2; done
    fi
    SLURMD_NODENAME=${list[i]} SLURM_PROCID=$i "$@" &
    pids+=($!)
done
status=0
for p in "${pids[@]}"; do wait "$p" || status=$?; done
exit $status
"""


def _worker() -> None:
    """train.py with a pool hook: dumps ``pools-<rank>-<restart>.json`` into $RLSR_TEST_DIR."""
    import torch

    torch.set_num_threads(1)
    import runpy

    import rlsr.train.training

    rank = int(os.environ["RANK"])
    restart = os.environ.get("SLURM_RESTART_COUNT", "0")
    out = Path(os.environ["RLSR_TEST_DIR"]) / f"pools-{rank}-{restart}.json"
    pools: list[dict] = []

    from test_trainer_support import pool_record

    def hook(pool: dict) -> None:
        pools.append(pool_record(pool))
        out.write_text(json.dumps(pools))  # written at once: the run may be killed

    run_training = rlsr.train.training.run_training
    rlsr.train.training.run_training = lambda settings, **kw: run_training(
        settings, pool_hook=hook, **kw
    )
    sys.argv[0] = str(ROOT / "train.py")
    runpy.run_path(sys.argv[0], run_name="__main__")  # train.py exactly as `python train.py`


def _train_slurm(env: dict, args: list[str], log: Path) -> subprocess.Popen:
    """train.slurm in its own session (a job), output to ``log`` (a file: a pipe nobody reads
    while training runs would fill up and block the nodes)."""
    with log.open("w") as out:
        return subprocess.Popen(
            ["bash", str(ROOT / "slurm" / "train.slurm"), *args],
            env=env,
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _leftover_workers(marker: str) -> list[int]:
    """Pids of processes still running this test's worker for this run (marker: its tmp dir)."""
    listing = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True)
    return [int(p) for p in listing.stdout.split() if int(p) != os.getpid()]


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_two_nodes_from_train_slurm_pool_both_and_resume_after_requeue(tmp_path):
    from test_slurm import base_env, free_job_id
    from test_trainer_support import assert_pools_recomputed, format_warm_model

    model = format_warm_model()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text(FAKE_SRUN)
    (bin_dir / "srun").chmod(0o755)
    out_dir = tmp_path / "run"
    port = _free_port()
    env = base_env(
        PATH=f"{bin_dir}:{Path(sys.executable).parent}:{os.environ['PATH']}",
        PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        OMP_NUM_THREADS="1",
        HF_HUB_OFFLINE="1",
        RLSR_TEST_DIR=str(tmp_path),
        SLURM_JOB_ID=free_job_id(),
        SLURM_JOB_NAME="mn",
        SLURM_JOB_NODELIST="n[1-2]",
        SLURM_JOB_NUM_NODES="2",
        RLSR_GPUS_PER_NODE="1",  # one process per "node"
        RLSR_USE_VLLM="0",  # every node trains (no vLLM on CPU here)
        RLSR_MAIN_ADDR="127.0.0.1",
        # A port the OS hands out: job-id ports can collide with other test runs on this machine.
        RLSR_MAIN_PORT=str(port),
        FAKE_SRUN_WAIT_PORT=str(port),
        RLSR_TRAIN_SCRIPT=__file__,
        RLSR_MONITOR_INTERVAL="0.5",
    )
    args = [
        "recipe=tiny-format",
        f"model.name_or_path={model}",
        f"output_dir={out_dir}",
        f"grpo.max_steps={STEPS}",
        "grpo.save_steps=1",
        f"grpo.per_device_train_batch_size={PER_DEVICE}",
        f"grpo.gradient_accumulation_steps={ACCUM}",
        f"grpo.num_generations={G}",
        "grpo.max_completion_length=40",
        "grpo.warmup_steps=0",
    ]

    # --- first allocation: killed (SIGTERM to the batch script, as Slurm does) after step 1
    first = _train_slurm(env, args, tmp_path / "job-0.log")
    try:
        while not (out_dir / "checkpoint-1" / "trainer_state.json").is_file():
            assert first.poll() is None, (tmp_path / "job-0.log").read_text()[-6000:]
            time.sleep(0.2)
        os.killpg(first.pid, signal.SIGTERM)
        first.wait(timeout=120)
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
    log_first = (tmp_path / "job-0.log").read_text()
    assert "SIGTERM (cancelled or pre-empted)" in log_first, log_first[-3000:]
    deadline = time.time() + 60
    while _leftover_workers(str(tmp_path)) and time.time() < deadline:
        time.sleep(0.5)
    assert not _leftover_workers(str(tmp_path)), "training processes survived the kill"

    checkpoints = sorted(int(p.name.split("-")[1]) for p in out_dir.glob("checkpoint-*"))
    last = checkpoints[-1]
    assert last < STEPS, "the first allocation finished before it was killed; nothing to resume"
    for rank in range(NODES):  # both ranks of the killed run pooled the same completions
        assert (tmp_path / f"pools-{rank}-0.json").is_file()

    # --- requeue: the same batch script and arguments, restart count 1
    second = _train_slurm({**env, "SLURM_RESTART_COUNT": "1"}, args, tmp_path / "job-1.log")
    try:
        second.wait(timeout=600)
    finally:
        if second.poll() is None:
            os.killpg(second.pid, signal.SIGKILL)
    log_second = (tmp_path / "job-1.log").read_text()
    assert second.returncode == 0, log_second[-6000:]
    assert "[rlsr] launch: DDP (2 processes)" in log_second  # both nodes form one run
    assert f"[rlsr] resuming from {out_dir / f'checkpoint-{last}'}" in log_second

    # Both nodes, one process each, are ranks of one run: the pool spans both.
    expected_pool = PER_DEVICE * NODES * ACCUM
    resumed = [json.loads((tmp_path / f"pools-{r}-1.json").read_text()) for r in range(NODES)]
    assert [p["step"] for p in resumed[0]] == list(range(last, STEPS))  # steps last+1 .. STEPS
    assert all(p["num_processes"] == NODES for p in resumed[0])
    assert_pools_recomputed(resumed, expected_pool, G)
    killed = [json.loads((tmp_path / f"pools-{r}-0.json").read_text()) for r in range(NODES)]
    n = min(len(k) for k in killed)  # a rank may have dumped one more pool before the kill
    assert_pools_recomputed([k[:n] for k in killed], expected_pool, G)

    state = json.loads((out_dir / f"checkpoint-{STEPS}" / "trainer_state.json").read_text())
    logs = [h for h in state["log_history"] if "rlsr/pool_size" in h]
    assert [h["step"] for h in logs] == list(range(1, STEPS + 1))
    assert all(h["rlsr/pool_size"] == expected_pool for h in logs)
    assert (out_dir / "adapter_model.safetensors").is_file()


if __name__ == "__main__":
    _worker()

"""slurm/ under a real Slurm: a one-node cluster (tests/slurm_cluster.sh: munged, slurmctld,
slurmd from Debian's slurm-wlm 22.05, state in a temp folder, stopped by pid at the end) on
which the sweep, a pre-emption, a failed run and an evaluation array run for real on CPUs.

No test doubles: sbatch, the scheduler (afterok dependencies, requeue, arrays, scancel), srun,
train.slurm / evaluate.slurm, accelerate, train.py and `rlsr evaluate` are the real ones; the
model is the shipped tiny one (recipe=tiny, 4 steps). Multi-node, GPU and vLLM plans stay with
the dry-run tests (tests/test_slurm.py). Skipped when slurm-wlm/munge are not installed or not
root (.ci/slurm_setup.sh installs them). All jobs are submitted at once by the module fixture so
that both CPUs stay busy; each test waits for its own jobs.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CLUSTER = ROOT / "tests" / "slurm_cluster.sh"
sys.path.insert(0, str(ROOT / "slurm"))

from sweep_status import parse_scontrol  # noqa: E402  (a script beside sweep.py)

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(900)]

# recipe=tiny cut to 4 optimizer steps of 8 completions, a checkpoint every 2, no held-out eval.
TRAIN_OVERRIDES = ["grpo.max_steps=4", "grpo.save_steps=2", "grpo.per_device_train_batch_size=8",
                   "grpo.gradient_accumulation_steps=1", "heldout.every=0", "heldout.at_start=false"]  # fmt: skip
EVAL_LIMIT = 8
JOB_TIMEOUT = 600


def _daemon(name: str) -> str | None:
    return shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin")


def _cluster_env(conf: str) -> dict[str, str]:
    """The environment jobs inherit (sbatch --export=ALL): this venv first on PATH, rlsr from
    this checkout, one thread per process, no inherited SLURM_*/RLSR_* settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "RLSR_", "SBATCH_"))}
    env.update(
        SLURM_CONF=conf,
        PATH=os.pathsep.join([str(Path(sys.executable).parent), env["PATH"], "/usr/sbin"]),
        PYTHONPATH=os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]),
        RLSR_PYTHON=sys.executable,
        OMP_NUM_THREADS="1",
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
    )
    return env


@pytest.fixture(scope="session")
def slurm_env():
    """A running one-node Slurm: an existing one that answers (SLURM_CONF / /etc/slurm), else
    tests/slurm_cluster.sh's in a temp folder, stopped (by pid) and removed at the end."""
    missing = [d for d in ("munged", "slurmctld", "slurmd", "sbatch") if _daemon(d) is None]
    if missing:
        pytest.skip(f"slurm-wlm/munge not installed ({', '.join(missing)} missing): "
                    "apt-get install -y slurm-wlm munge (.ci/slurm_setup.sh)")  # fmt: skip
    existing = os.environ.get("SLURM_CONF") or ("/etc/slurm/slurm.conf"
                                                if Path("/etc/slurm/slurm.conf").is_file() else "")  # fmt: skip
    if existing:
        probe = subprocess.run(["sinfo", "-h"], env=_cluster_env(existing), capture_output=True,
                               timeout=30)  # fmt: skip
        if probe.returncode == 0:
            yield _cluster_env(existing)
            return
    if os.geteuid() != 0:
        pytest.skip("starting a test Slurm needs root (slurmd runs jobs as their user)")
    state = tempfile.mkdtemp(prefix="rlsr-slurm-")
    started = subprocess.run(["bash", str(CLUSTER), "start", state], capture_output=True,
                             text=True, timeout=120)  # fmt: skip
    try:
        assert started.returncode == 0, started.stderr
        yield _cluster_env(f"{state}/slurm.conf")
    finally:
        subprocess.run(["bash", str(CLUSTER), "stop", state], capture_output=True, timeout=120)
        shutil.rmtree(state, ignore_errors=True)


def _run(cmd: list[str], env: dict[str, str], check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert not check or proc.returncode == 0, f"{cmd}: {proc.stdout}\n{proc.stderr}"
    return proc


def job_rows(job_id: str, env: dict[str, str]) -> list[dict[str, str]]:
    """scontrol's view of a job (one row per array task)."""
    return parse_scontrol(_run(["scontrol", "-o", "show", "job", job_id], env, check=False).stdout)


def wait_until_done(job_ids: list[str], env: dict[str, str], timeout: float = JOB_TIMEOUT) -> None:
    """Waits until none of the jobs (or their array tasks) is pending or running."""
    deadline = time.time() + timeout
    while True:
        queued = _run(["squeue", "-h", "-o", "%i %T %r", "-j", ",".join(job_ids)], env, False)
        if not queued.stdout.strip():
            return
        assert time.time() < deadline, f"jobs still queued after {timeout}s:\n{queued.stdout}"
        time.sleep(2)


def sweep(args: list[str], env: dict[str, str]) -> tuple[list[list[str]], Path]:
    """Runs slurm/sweep.py; returns its job lines (kind, name, id, ...) and its record."""
    out = _run([sys.executable, str(ROOT / "slurm" / "sweep.py"), *args], env).stdout
    jobs = [line.split() for line in out.splitlines() if line.startswith(("train ", "evaluate "))]
    record = next(line.split()[1] for line in out.splitlines() if line.startswith("record: "))
    return jobs, Path(record)


@pytest.fixture(scope="module")
def submitted(slurm_env):
    """Everything this module runs, submitted at once (the pre-empted run first, so its
    checkpoint comes early): a 2x2 sweep, a pre-empted run, a sweep whose training fails."""
    work = Path(tempfile.mkdtemp(prefix="rlsr-slurm-work-"))
    cpu = ["--gpus-per-node", "0", "--eval-gpus-per-node", "0", "--eval-tasks", "tiny-missing",
           f"--eval-arg=--limit={EVAL_LIMIT}"]  # fmt: skip
    preempt_dir = work / "preempted"
    preempt_env = {**slurm_env, "RLSR_TRAIN_SCRIPT": str(ROOT / "tests" / "slurm_blocking_train.py"),
                   "RLSR_TEST_BLOCK_AT": "2", "RLSR_TEST_BLOCK_MARKER": str(work / "blocked")}  # fmt: skip
    preempt_id = _run(["sbatch", "--parsable", "--gpus-per-node=0", "--job-name=rlsr-test-preempt",
                       "slurm/train.slurm", "recipe=tiny", "method=rlsr", "seed=0",
                       *TRAIN_OVERRIDES, f"output_dir={preempt_dir}"], preempt_env).stdout.strip()  # fmt: skip
    failing = sweep(["--recipes", "tiny", "--methods", "rlvr", "--seeds", "0", *cpu,
                     "--runs-dir", str(work / "failing-runs"), "--evals-dir",
                     str(work / "failing-evals"), "--", *TRAIN_OVERRIDES,
                     "model.name_or_path=/nonexistent/model"], slurm_env)  # fmt: skip
    main = sweep(["--recipes", "tiny", "--methods", "rlsr,rlcr", "--seeds", "0,1", *cpu,
                  "--runs-dir", str(work / "runs"), "--evals-dir", str(work / "evals"), "--",
                  *TRAIN_OVERRIDES], slurm_env)  # fmt: skip
    info = {"work": work, "preempt": (preempt_id, preempt_dir, preempt_env), "failing": failing,
            "main": main, "extra_logs": []}  # fmt: skip
    yield info
    logs = [ROOT / "logs" / f"rlsr-test-preempt-{preempt_id}.out"]
    for _, record in (failing, main):
        for job in json.loads(record.read_text())["jobs"]:
            # %j of a one-task array is the array's id: every log is <name>-<job id>.out
            logs.append(ROOT / "logs" / f"{job['name']}-{job['job_id']}.out")
        logs.append(record)
    for pattern in info["extra_logs"]:  # names only these tests use
        logs += (ROOT / "logs").glob(pattern)
    for path in logs:
        path.unlink(missing_ok=True)
    shutil.rmtree(work, ignore_errors=True)


def adapter_tensors(folder: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(folder / "adapter_model.safetensors")


def test_preempted_run_requeues_resumes_and_matches_the_uninterrupted_run(slurm_env, submitted):
    """A training job signalled as Slurm does before a time limit or pre-emption (USR1 to the
    batch shell, --signal=B:USR1@300) right after checkpoint-2: train.slurm requeues it, the
    requeued job (same id, restart 1) resumes from checkpoint-2, and its final adapter is
    bit-identical to the sweep's uninterrupted run of the same seed and settings. Catches a
    requeue that restarts from scratch, resumes from the wrong checkpoint, or a resume that
    changes the training (data order, RNG, optimizer state)."""
    job_id, out_dir, env = submitted["preempt"]
    marker = Path(env["RLSR_TEST_BLOCK_MARKER"])
    deadline = time.time() + JOB_TIMEOUT
    while not marker.exists():
        assert time.time() < deadline, "the pre-empted run never reached checkpoint-2"
        assert job_rows(job_id, env)[0]["JobState"] in {"PENDING", "RUNNING"}
        time.sleep(1)
    assert (out_dir / "checkpoint-2" / "trainer_state.json").is_file()
    _run(["scancel", "--signal=USR1", "--batch", job_id], env)
    # Slurm holds a requeued batch job back (BeginTime, ~2 min); release it now.
    deadline = time.time() + 120
    while job_rows(job_id, env)[0].get("Restarts", "0") == "0":
        assert time.time() < deadline, "the job was not requeued after USR1"
        time.sleep(1)
    _run(["scontrol", "update", f"JobId={job_id}", "StartTime=now"], env)
    wait_until_done([job_id], env)
    (row,) = job_rows(job_id, env)
    log = (ROOT / "logs" / f"rlsr-test-preempt-{job_id}.out").read_text()
    assert row["JobState"] == "COMPLETED", log[-4000:]
    assert row["Restarts"] == "1"
    assert "time limit near (SIGUSR1): requeueing job" in log
    assert f"[rlsr] resuming from {out_dir / 'checkpoint-2'}" in log
    # the uninterrupted run: the sweep's rlsr seed 0, same overrides
    (main_jobs, _) = submitted["main"]
    reference = next(j for j in main_jobs if j[:2] == ["train", "rlsr-tiny-rlsr-s0"])
    wait_until_done([reference[2]], env)
    uninterrupted = adapter_tensors(submitted["work"] / "runs" / "tiny-rlsr-tiny-seed0")
    resumed = adapter_tensors(out_dir)
    assert resumed.keys() == uninterrupted.keys() and resumed
    for name, tensor in uninterrupted.items():
        assert resumed[name].dtype == tensor.dtype and resumed[name].equal(tensor), name


def test_sweep_trains_then_evaluates_each_run_after_its_training(slurm_env, submitted):
    """`slurm/sweep.py --gpus-per-node 0 --eval-gpus-per-node 0` on CPU nodes: every training
    job completes with its adapter, every evaluation array task starts only after its own
    training job ended (afterok) and writes its samples, --status reports all of them
    completed, and `rlsr compare` over the sweep's evaluations groups them by recorded method and
    seed. Catches a sweep refused on CPU nodes, evaluations that start before (or without) their
    adapter, a dependency wired to the wrong job, and sweep outputs compare cannot read."""
    jobs, record = submitted["main"]
    wait_until_done([j[2] for j in jobs], slurm_env)
    trained = {}
    for kind, name, job_id, *rest in jobs:
        rows = job_rows(job_id, slurm_env)
        assert {r["JobState"] for r in rows} == {"COMPLETED"}, (name, rows)
        if kind == "train":
            trained[job_id] = rows[0]
            continue
        after = rest[0].strip("(").split(":")[1]  # "(afterok:<id>"
        assert after in trained
        for row in rows:  # an array task starts after its training job ended
            assert row["StartTime"] >= trained[after]["EndTime"], (row, trained[after])
    runs = sorted(p.name for p in (submitted["work"] / "runs").iterdir())
    assert runs == [f"tiny-{m}-tiny-seed{s}" for m in ("rlcr", "rlsr") for s in (0, 1)]
    for run in runs:
        assert (submitted["work"] / "runs" / run / "adapter_model.safetensors").is_file()
        samples = submitted["work"] / "evals" / run / "tiny-missing" / "samples.jsonl"
        assert len(samples.read_text().splitlines()) == EVAL_LIMIT, run
    # `rlsr compare` over the sweep's evaluations (what docs/slurm.md tells a user to run after a
    # sweep): grouped by the method and seed each run recorded, two seeds per method.
    compared = submitted["work"] / "compare"
    done = _run([sys.executable, "-m", "rlsr.cli", "compare", str(submitted["work"] / "evals"),
                 "--use", "evaluate", "--output-dir", str(compared)], slurm_env)  # fmt: skip
    result = json.loads((compared / "compare.json").read_text())
    methods = result["datasets"]["tiny-missing"]["methods"]
    assert sorted(methods) == ["rlcr", "rlsr"], done.stdout
    assert all(sorted(methods[m]["seeds"]) == ["0", "1"] for m in methods), methods
    status = _run([sys.executable, "slurm/sweep.py", "--status", str(record)], slurm_env)
    assert status.stdout.count(": COMPLETED") == len(jobs), status.stdout


def test_failed_training_cancels_its_evaluation_and_the_status_says_why(slurm_env, submitted):
    """A training run that fails (a model path that does not exist): its evaluation never
    starts (cancelled by Slurm, --kill-on-invalid-dep=yes), and `sweep.py --status` exits 1,
    naming the failed run with the end of its log (the missing model) and the evaluation that
    never started. Catches evaluations run on a missing adapter, or a status that hides why."""
    jobs, record = submitted["failing"]
    (train, evaluate) = jobs
    wait_until_done([train[2], evaluate[2]], slurm_env)
    assert {r["JobState"] for r in job_rows(train[2], slurm_env)} == {"FAILED"}
    eval_rows = job_rows(evaluate[2], slurm_env)
    assert {r["JobState"] for r in eval_rows} == {"CANCELLED"}, eval_rows
    # never started: cancelled for its dependency with no node ever allocated (RunTime is no
    # proof: a job cancelled while pending had a RunTime other than 00:00:00 in one CI run)
    assert all(
        r["Reason"] == "DependencyNeverSatisfied"
        and r.get("NodeList") in ("", "(null)")
        and "BatchHost" not in r
        for r in eval_rows
    ), eval_rows
    status = _run([sys.executable, "slurm/sweep.py", "--status", str(record)], slurm_env, False)
    assert status.returncode == 1, status.stderr
    assert f"train {train[1]} {train[2]}: FAILED" in status.stdout
    assert "/nonexistent/model" in status.stdout  # the tail of its log says why
    assert f"never started: its training run {train[1]} {train[2]} failed" in status.stdout


def test_evaluate_array_over_checkpoints_resumes_after_a_cancelled_task(slurm_env, submitted):
    """evaluate.slurm as a job array over a finished run's checkpoints (checkpoint-2,
    checkpoint-4, final adapter): one task cancelled with scancel leaves the others' results;
    resubmitting that task index completes it, and every checkpoint ends with its samples.
    Catches an array index mapped to the wrong checkpoint or output folder, and a rerun that
    cannot finish a cancelled task."""
    jobs, _ = submitted["main"]
    train = next(j for j in jobs if j[:2] == ["train", "rlsr-tiny-rlcr-s1"])
    wait_until_done([train[2]], slurm_env)
    run = submitted["work"] / "runs" / "tiny-rlcr-tiny-seed1"
    out = submitted["work"] / "array-evals"
    checkpoints = [run / "checkpoint-2", run / "checkpoint-4", run]
    args = ["slurm/evaluate.slurm", "--checkpoints", ",".join(map(str, checkpoints)),
            "--tasks", "tiny-missing", "--output-dir", str(out), "--", f"--limit={EVAL_LIMIT}",
            # the recipe's held-out protocol (rlsr evaluate's default 4,096 new tokens is refused
            # on the tiny model's 2,048 positions)
            "--max-new-tokens=32", "--system-prompt=simple"]  # fmt: skip
    common = ["sbatch", "--parsable", "--gpus-per-node=0", "--job-name=rlsr-test-array"]
    array_id = _run([*common, "--array=0-2", *args], slurm_env).stdout.strip()
    submitted["extra_logs"].append("rlsr-test-array-*.out")
    _run(["scancel", f"{array_id}_1"], slurm_env)
    wait_until_done([array_id], slurm_env)
    states = {r["ArrayTaskId"]: r["JobState"] for r in job_rows(array_id, slurm_env)}
    # a task cancelled while pending is never split off the array: scontrol lists no row for it
    assert (states["0"], states["2"], states.get("1", "CANCELLED")) == (
        "COMPLETED", "COMPLETED", "CANCELLED"
    ), states  # fmt: skip
    results = [out / run.name / "checkpoint-2", out / run.name / "checkpoint-4", out / run.name]
    assert not (results[1] / "tiny-missing" / "metrics.json").exists()
    rerun = _run([*common, "--array=1", *args], slurm_env).stdout.strip()
    wait_until_done([rerun], slurm_env)
    assert {r["JobState"] for r in job_rows(rerun, slurm_env)} == {"COMPLETED"}
    for folder in results:
        samples = (folder / "tiny-missing" / "samples.jsonl").read_text().splitlines()
        assert len(samples) == EVAL_LIMIT, folder

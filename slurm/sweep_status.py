"""``slurm/sweep.py --status RECORD``: the state of every job of a submitted sweep.

RECORD is the ``logs/sweep-<first job id>.json`` that sweep.py writes while it submits. States
come from ``scontrol show job`` (the controller keeps finished jobs for MinJobAge, 300 s by
default), else from ``sacct`` (clusters with accounting); a training run that failed is shown
with Slurm's reason and the tail of its log, and an evaluation that never started names the
training run it waited for.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

FAILED = {"FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL",
          "DEADLINE"}  # fmt: skip
LOG_TAIL_LINES = 15


def parse_scontrol(text: str) -> list[dict[str, str]]:
    """``scontrol -o show job`` output (one job or array task a line, ``Key=Value`` words) ->
    one dict a line. Values with spaces keep only their first word (never needed here)."""
    rows = []
    for line in text.splitlines():
        fields = dict(word.split("=", 1) for word in line.split() if "=" in word)
        if "JobState" in fields:
            rows.append(fields)
    return rows


def job_states(job_id: str) -> list[dict[str, str]]:
    """The job's rows (one per array task): JobState, Reason, ExitCode, StdOut where known."""
    if shutil.which("scontrol"):
        result = subprocess.run(["scontrol", "-o", "show", "job", job_id], capture_output=True,
                                text=True, check=False)  # fmt: skip
        rows = parse_scontrol(result.stdout) if result.returncode == 0 else []
        if rows:
            return rows
    if shutil.which("sacct"):
        result = subprocess.run(["sacct", "-n", "-X", "-P", "-j", job_id, "-o",
                                 "JobID,State,ExitCode,Reason"], capture_output=True, text=True,
                                check=False)  # fmt: skip
        rows = []
        for line in result.stdout.splitlines():
            parts = line.split("|")
            if len(parts) == 4:
                rows.append({"JobId": parts[0], "JobState": parts[1].split()[0],
                             "ExitCode": parts[2], "Reason": parts[3]})  # fmt: skip
        return rows
    return []


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> list[str]:
    if not path.is_file():
        return [f"(no log at {path})"]
    return path.read_text(errors="replace").splitlines()[-lines:]


def describe(job: dict, rows: list[dict[str, str]], root: Path, waited: dict | None) -> str:
    """One job's report (possibly several lines). ``waited``: the training job an evaluation
    waits for, with its ``failed`` flag, or None."""
    head = f"{job['kind']} {job['name']} {job['job_id']}"
    if not rows:
        return f"{head}: unknown (no longer known to scontrol, and no sacct)"
    states = sorted({row["JobState"] for row in rows})
    line = f"{head}: {','.join(states)}"
    if len(rows) > 1:
        line += f" ({len(rows)} array tasks)"
    reasons = sorted({row.get("Reason", "None") for row in rows} - {"None", ""})
    if reasons:
        line += f" reason={','.join(reasons)}"
    if job["kind"] == "train":
        adapter = Path(job.get("output_dir", "")) / "adapter_model.safetensors"
        if adapter.is_file():
            line += f"; adapter {adapter}"
    if waited is not None and waited["failed"] and set(states) <= {"PENDING", "CANCELLED"}:
        return (
            line + f"; never started: its training run {waited['name']} {waited['job_id']} failed"
        )
    for row in rows:
        if row["JobState"] not in FAILED:
            continue
        task_id = row.get("JobId", job["job_id"])
        stdout = row.get("StdOut") or job["log"].replace("%j", task_id)
        path = Path(stdout) if Path(stdout).is_absolute() else root / stdout
        line += f"\n  {task_id} exit {row.get('ExitCode', '?')}; the end of {path}:"
        line += "".join(f"\n    | {text}" for text in log_tail(path))
    return line


def report(record: Path) -> int:
    """Prints every job's state; returns 1 when a job failed, 2 for an unreadable record."""
    try:
        data = json.loads(record.read_text())
    except (OSError, ValueError) as err:
        print(f"sweep: --status {record}: cannot read the record ({err}); give the "
              "logs/sweep-<id>.json that the sweep printed", file=sys.stderr)  # fmt: skip
        return 2
    jobs = data.get("jobs") if isinstance(data, dict) else None
    keys = ("kind", "name", "job_id", "log")
    if not isinstance(jobs, list) or not all(
        isinstance(job, dict) and all(key in job for key in keys) for job in jobs
    ):
        print(f"sweep: --status {record}: not a sweep record (sweep.py writes {{\"root\": ..., "
              f"\"jobs\": [...]}}, each job with {', '.join(keys)}); give the "
              "logs/sweep-<id>.json that the sweep printed", file=sys.stderr)  # fmt: skip
        return 2
    root = Path(data.get("root", "."))
    by_id = {}
    any_failed = False
    for job in jobs:
        rows = job_states(job["job_id"])
        failed = bool(FAILED & {row["JobState"] for row in rows})
        by_id[job["job_id"]] = {**job, "failed": failed}
        any_failed |= failed
        print(describe(job, rows, root, by_id.get(job.get("after"))))
    return 1 if any_failed else 0

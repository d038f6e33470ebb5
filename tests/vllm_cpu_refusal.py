"""The one-line refusal both vLLM CPU entry points (``rlsr serve``, ``rlsr evaluate --backend
vllm``) give when the KV cache asked for cannot fit in free memory (docs/vllm_cpu.md)."""

from __future__ import annotations

import os
import subprocess
import sys


def assert_oversized_kv_cache_refused(argv: list[str], env: dict[str, str]) -> None:
    """Run ``python -m rlsr.cli ARGV`` with a 100,000 GiB ``VLLM_CPU_KVCACHE_SPACE``: exit 2, no
    traceback, and a last stderr line naming the variable and the free memory."""
    proc = subprocess.run(
        [sys.executable, "-m", "rlsr.cli", *argv], capture_output=True, text=True, timeout=300,
        env={**os.environ, **env, "VLLM_CPU_KVCACHE_SPACE": "100000"},
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("rlsr: error: VLLM_CPU_KVCACHE_SPACE=100000 GiB") and "free" in last

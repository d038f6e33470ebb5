"""train.py's one-line errors for TRL's vLLM server mode, from real exceptions (no vLLM needed).

The exceptions are the ones TRL's ``VLLMClient`` raises: a ``requests`` session with the same
urllib3 retry policy posting to a closed port (back-off shortened), its ``check_server``
message, its ``Exception("Request failed: ...")`` and its NotImplementedError for a CPU device.
tests/test_vllm_server_cpu.py checks the same lines end to end against a real server.
"""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest

# requests comes with vLLM (TRL's client needs it); CI runs this file in .venv-vllm.
requests = pytest.importorskip("requests")
from requests.adapters import HTTPAdapter  # noqa: E402
from urllib3.util.retry import Retry  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from train import vllm_server_failure  # noqa: E402


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # closed again when the block ends


def _grpo(port: int) -> dict:
    return {"use_vllm": True, "vllm_mode": "server", "vllm_server_host": "127.0.0.1",
            "vllm_server_port": port}  # fmt: skip


def _dead_server_error(port: int) -> BaseException:
    session = requests.Session()
    retry = Retry(total=5, connect=5, read=5, backoff_factor=0.01, allowed_methods=["POST"])
    session.mount("http://", HTTPAdapter(max_retries=retry))
    try:
        session.post(f"http://127.0.0.1:{port}/v1/completions", json={})
    except requests.exceptions.ConnectionError as err:
        try:  # raised from inside another frame, as TRL's _post does
            raise RuntimeError("wrapped by the trainer") from err
        except RuntimeError as outer:
            return outer
    raise AssertionError("the closed port answered")


def test_dead_server_is_one_line_with_url_cause_and_checkpoint(tmp_path):
    port = _closed_port()
    (tmp_path / "checkpoint-2").mkdir()
    (tmp_path / "checkpoint-10").mkdir()
    line = vllm_server_failure(_dead_server_error(port), _grpo(port), str(tmp_path))
    assert "\n" not in line
    assert line.startswith(
        f"the vLLM server at http://127.0.0.1:{port} stopped answering (/v1/completions): "
        "ConnectionError: [Errno 111] Connection refused, after TRL's retries."
    )
    assert f"the newest checkpoint is {tmp_path / 'checkpoint-10'}" in line  # numeric, not lexical


def test_no_checkpoint_http_error_and_startup_timeout(tmp_path):
    grpo = _grpo(8000)
    line = vllm_server_failure(Exception("Request failed: 500, boom"), grpo, str(tmp_path))
    assert "answered with an error: Request failed: 500, boom" in line
    assert "no checkpoint was saved yet" in line
    unreachable = requests.ConnectionError(
        "The vLLM server can't be reached at http://127.0.0.1:8000 after 240.0 seconds."
    )
    line = vllm_server_failure(unreachable, {**grpo, "vllm_server_timeout": 240}, str(tmp_path))
    assert line.startswith("no vLLM server answered at http://127.0.0.1:8000/health within "
                           "grpo.vllm_server_timeout=240 s.")  # fmt: skip
    cpu = NotImplementedError("... which needs a CUDA device, got 'cpu'. ...")
    assert "needs a CUDA GPU in the training process" in vllm_server_failure(cpu, grpo, "x")


@pytest.mark.parametrize(
    "grpo", [{"use_vllm": True, "vllm_mode": "colocate"}, {"use_vllm": False}, {}]
)
def test_other_modes_and_other_errors_keep_their_traceback(grpo, tmp_path):
    port = _closed_port()
    assert vllm_server_failure(_dead_server_error(port), grpo, str(tmp_path)) is None
    assert vllm_server_failure(ValueError("a bug"), _grpo(port), str(tmp_path)) is None

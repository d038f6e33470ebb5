"""``rlsr serve``: every Chat Completions parameter honoured or refused, never silently ignored;
streaming that respects abstention; the generation's own finish_reason; usage over every engine
call; a fallback whose context does not fit; a lone surrogate; ``GET /v1/models/{id}``.

Real: the FastAPI app under uvicorn, the ``openai`` client and httpx, the tiny model's tokenizer
and chat template, the parser and the Sec. C.3 fallbacks. The upstream ``vllm serve`` is a TEST
DOUBLE AT THE BOUNDARY (vLLM cannot run in this venv): a small FastAPI app answering
``/v1/completions`` with scripted text chosen by the question in the (token-id) prompt.
"""

import json

import httpx
import openai
import pytest
from test_serving import running  # uvicorn on a free loopback port, in a thread

from rlsr.core.prompts import ANSWER_FALLBACK_SUFFIX, CONFIDENCE_FALLBACK_SUFFIX
from rlsr.core.tokenization import load_tokenizer
from rlsr.serving.app import create_app
from rlsr.serving.decision_log import DecisionLog, read_decision_log
from rlsr.serving.engine import upstream_engine
from rlsr.serving.policy import ServeSettings
from rlsr.serving.protocol import PARAMETERS

pytestmark = pytest.mark.timeout(300)

FULL = "<think>t</think><answer>Paris</answer><analysis>x</analysis><confidence>0.9</confidence>"
CAP = 32  # the served (certified) max_new_tokens


class ScriptedUpstream:
    """TEST DOUBLE of ``vllm serve``: a scripted completion per question; records every call."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self.calls: list[dict] = []

    def app(self):
        from fastapi import FastAPI, Request
        from fastapi.responses import JSONResponse

        app = FastAPI()

        @app.post("/v1/completions")
        async def completions(request: Request):
            body = await request.json()
            text = self.tokenizer.decode(body["prompt"])
            self.calls.append({**body, "prompt_text": text})
            question = text.split("PROBLEM: ", 1)[1].split("\n", 1)[0]
            finish = "stop"
            if text.endswith(ANSWER_FALLBACK_SUFFIX):
                if question == "overflow":  # what vLLM answers when the context is too long
                    return JSONResponse(
                        {"error": {"message": "maximum context length exceeded"}}, status_code=400
                    )
                out = " Rome.\nand more"
            elif text.endswith(CONFIDENCE_FALLBACK_SUFFIX):
                out = " 0.65 since"
            elif question in ("tagless", "overflow"):
                out = "It might be Rome"
            elif question == "unsure":
                out = FULL.replace("0.9", "0.2")
            elif body["max_tokens"] < 10:  # a client's small max_tokens cuts the completion
                out, finish = FULL[:12], "length"
            else:
                out = FULL
            return {
                "id": "cmpl-1", "object": "text_completion", "created": 0, "model": body["model"],
                "choices": [{"index": 0, "text": out, "finish_reason": finish, "logprobs": None}],
                "usage": {"prompt_tokens": len(body["prompt"]), "completion_tokens": 5,
                          "total_tokens": len(body["prompt"]) + 5},
            }  # fmt: skip

        return app


@pytest.fixture(scope="module")
def served(tiny_model_dir, tmp_path_factory):
    fake = ScriptedUpstream(load_tokenizer(tiny_model_dir))
    log_path = tmp_path_factory.mktemp("log") / "decisions.jsonl"
    with running(fake.app()) as up_url:
        engine = upstream_engine(up_url, "up-model", str(tiny_model_dir), timeout=30)
        settings = ServeSettings(
            tau=0.5, rule="plain", model_name="tiny", system_prompt="simple",
            max_new_tokens=CAP, fallback_max_new_tokens=8,
        )  # fmt: skip
        with running(create_app(engine, settings, decision_log=DecisionLog(log_path))) as url:
            yield url, fake, log_path


def _post(url, **fields):
    body = {"model": "tiny", "messages": [{"role": "user", "content": "sure"}], **fields}
    return httpx.post(f"{url}/v1/chat/completions", json=body, timeout=60)


OK, REFUSED = 200, 400
# Every parameter of PARAMETERS (the test below checks the list covers them all), with a value
# the server must honour and/or one it must refuse with a 400 naming that parameter.
WALK = [
    ("n", 1, OK), ("n", 2, REFUSED),
    ("stream", False, OK), ("stream", True, OK), ("stream", "yes", REFUSED),
    ("stream_options", {"include_usage": True}, REFUSED),  # without stream=true
    ("max_tokens", 5, OK), ("max_tokens", CAP, OK), ("max_tokens", CAP + 1, REFUSED),
    ("max_tokens", 0, REFUSED), ("max_tokens", -1, REFUSED), ("max_tokens", 2.5, REFUSED),
    ("max_completion_tokens", 5, OK), ("max_completion_tokens", 4096, REFUSED),
    ("temperature", 0.0, OK), ("temperature", 1.0, REFUSED), ("temperature", -1, REFUSED),
    ("top_p", 1.0, OK), ("top_p", 0.5, REFUSED), ("top_p", 2, REFUSED),
    ("seed", 1, OK), ("seed", "x", REFUSED),
    ("frequency_penalty", 0, OK), ("frequency_penalty", 0.5, REFUSED),
    ("presence_penalty", 0.0, OK), ("presence_penalty", 1, REFUSED),
    ("logit_bias", {}, OK), ("logit_bias", {"42": 100}, REFUSED),
    ("logprobs", False, OK), ("logprobs", True, REFUSED), ("top_logprobs", 2, REFUSED),
    ("stop", "\n", REFUSED), ("stop", ["</answer>"], REFUSED),
    ("tools", [{"type": "function", "function": {"name": "f", "parameters": {}}}], REFUSED),
    ("tool_choice", "none", OK), ("tool_choice", "required", REFUSED),
    ("functions", [{"name": "f", "parameters": {}}], REFUSED), ("function_call", "auto", REFUSED),
    ("parallel_tool_calls", True, REFUSED),
    ("response_format", {"type": "text"}, OK), ("response_format", {"type": "json_object"}, REFUSED),
    ("modalities", ["text"], OK), ("modalities", ["text", "audio"], REFUSED),
    ("audio", {"voice": "alloy", "format": "wav"}, REFUSED),
    ("prediction", {"type": "content", "content": "x"}, REFUSED),
    ("reasoning_effort", "low", REFUSED), ("web_search_options", {}, REFUSED),
    ("verbosity", "low", REFUSED),
    ("repetition_penalty", 1.0, OK), ("repetition_penalty", 1.2, REFUSED),
    ("top_k", -1, OK), ("top_k", 5, REFUSED), ("min_p", 0.0, OK), ("min_p", 0.1, REFUSED),
    ("min_tokens", 0, OK), ("min_tokens", 3, REFUSED),
    ("user", "u-1", OK), ("metadata", {"k": "v"}, OK), ("store", False, OK),
    ("service_tier", "auto", OK), ("safety_identifier", "s", OK), ("prompt_cache_key", "c", OK),
    ("no_such_parameter", 1, REFUSED), ("guided_json", {"type": "object"}, REFUSED),
]  # fmt: skip


def test_the_walk_covers_every_listed_parameter():
    walked = {name for name, _, _ in WALK}
    assert set(PARAMETERS) - {"model", "messages"} <= walked


def test_every_parameter_is_honoured_or_refused(served):
    url, _, _ = served
    for name, value, want in WALK:
        resp = _post(url, **{name: value})
        assert resp.status_code == want, (name, value, resp.text)
        if want == REFUSED:
            err = resp.json()["error"]
            assert err["param"] == name, (name, err)
            assert name in err["message"]


def test_max_tokens_is_applied_and_finish_reason_is_the_generations(served):
    url, fake, _ = served
    n = len(fake.calls)
    cut = _post(url, max_tokens=5).json()
    assert fake.calls[n]["max_tokens"] == 5
    (choice,) = cut["choices"]
    assert choice["finish_reason"] == "length" == choice["rlsr"]["finish_reason"]
    full = _post(url, max_completion_tokens=20, max_tokens=30).json()
    assert fake.calls[-1]["max_tokens"] == 20  # the smaller of the two
    assert full["choices"][0]["finish_reason"] == "stop"
    default = _post(url).json()
    assert fake.calls[-1]["max_tokens"] == CAP and default["choices"][0]["message"]["content"]


def test_usage_counts_every_engine_call_including_fallbacks(served):
    url, fake, _ = served
    n = len(fake.calls)
    resp = _post(url, messages=[{"role": "user", "content": "tagless"}]).json()
    calls = fake.calls[n:]
    assert len(calls) == 3  # the answer and the confidence fallbacks
    assert resp["usage"]["prompt_tokens"] == sum(len(c["prompt"]) for c in calls)
    assert resp["usage"]["completion_tokens"] == 15
    assert resp["usage"]["total_tokens"] == sum(len(c["prompt"]) for c in calls) + 15


def test_a_fallback_that_does_not_fit_abstains_and_is_logged(served):
    url, _, log_path = served
    before = len(read_decision_log(log_path))
    resp = _post(url, messages=[{"role": "user", "content": "overflow"}])
    assert resp.status_code == 200, resp.text
    ext = resp.json()["choices"][0]["rlsr"]
    assert ext["decision"] == "abstained" and ext["answer"] is None
    assert "context" in ext["fallback_error"]
    records = read_decision_log(log_path)
    assert len(records) == before + 1 and records[-1]["decision"] == "abstained"


def test_lone_surrogate_is_a_400_and_keeps_the_connection(served):
    url, _, _ = served
    raw = b'{"model": "tiny", "messages": [{"role": "user", "content": "\\ud800"}]}'
    with httpx.Client(timeout=60) as client:
        bad = client.post(f"{url}/v1/chat/completions", content=raw,
                          headers={"content-type": "application/json"})  # fmt: skip
        assert bad.status_code == 400 and bad.json()["error"]["param"] == "messages"
        assert bad.headers.get("connection") != "close"
        good = client.post(f"{url}/v1/chat/completions",
                           json={"model": "tiny", "messages": [{"role": "user", "content": "sure"}]})  # fmt: skip
        assert good.status_code == 200
    assert json.loads(raw)  # the body is valid JSON: the refusal is about the text


def test_models_retrieve(served):
    url, _, _ = served
    client = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=30)
    assert client.models.retrieve("tiny").id == "tiny"
    with pytest.raises(openai.NotFoundError, match="model_not_found|does not exist"):
        client.models.retrieve("other")


@pytest.mark.parametrize("question,decision", [("sure", "answered"), ("unsure", "abstained")])
@pytest.mark.parametrize("include_usage", [False, True])
def test_streamed_chunks_join_to_the_non_streamed_response(served, question, decision,
                                                           include_usage):  # fmt: skip
    """With the openai client's streaming API: the joined deltas equal the non-streamed message,
    exactly one finish_reason, the decision in the last choice chunk's `rlsr` field, usage when
    asked (and equal to the non-streamed usage); an abstention never streams the answer text."""
    url, _, _ = served
    client = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=60)
    messages = [{"role": "user", "content": question}]
    whole = client.chat.completions.create(model="tiny", messages=messages)
    extra = {"stream_options": {"include_usage": True}} if include_usage else {}
    chunks = list(client.chat.completions.create(model="tiny", messages=messages, stream=True,
                                                 **extra))  # fmt: skip
    with_choice = [c for c in chunks if c.choices]
    text = "".join(c.choices[0].delta.content or "" for c in with_choice)
    assert text == whole.choices[0].message.content
    finishes = [c.choices[0].finish_reason for c in with_choice if c.choices[0].finish_reason]
    assert finishes == [whole.choices[0].finish_reason]
    last = with_choice[-1].choices[0].model_extra["rlsr"]
    assert last["decision"] == decision == whole.choices[0].model_extra["rlsr"]["decision"]
    assert {c.id for c in chunks} == {chunks[0].id} and chunks[0].object == "chat.completion.chunk"
    if decision == "abstained":
        assert "Paris" not in text  # the withheld answer is not in any delta
    if include_usage:
        assert chunks[-1].choices == [] and chunks[-1].usage == whole.usage
        assert all(c.usage is None for c in chunks[:-1])
    else:
        assert all(c.usage is None for c in chunks)


def test_raw_sse_framing(served):
    url, _, _ = served
    body = {"model": "tiny", "messages": [{"role": "user", "content": "sure"}], "stream": True}
    resp = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=60)
    assert resp.headers["content-type"].startswith("text/event-stream")
    events = [e for e in resp.text.split("\n\n") if e]
    assert all(e.startswith("data: ") for e in events) and events[-1] == "data: [DONE]"
    assert [json.loads(e[6:])["object"] for e in events[:-1]] == ["chat.completion.chunk"] * 3

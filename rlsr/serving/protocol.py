"""OpenAI chat-completions protocol of ``rlsr serve``: request validation, response and error
bodies (pure functions; docs/serving.md lists what is accepted).

A request holds exactly one ``user`` message (the problem, rendered with the training system
prompt and template, as the model was trained); a client ``system`` / ``developer`` message is
replaced by the training system prompt; assistant or tool turns are refused. Decoding is the one
the threshold was certified under: every parameter is honoured or refused with a 400 naming it,
never silently ignored (``PARAMETERS``); ``stream`` is honoured once the decision is taken.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rlsr.serving.policy import ServeSettings

__all__ = [
    "PARAMETERS",
    "check_parameters",
    "EXTENSION_FIELD",
    "completion_chunks",
    "RequestError",
    "ChatRequest",
    "parse_chat_request",
    "error_body",
    "chat_completion",
    "model_list",
]

EXTENSION_FIELD = "rlsr"  # per choice: confidence, tau, decision, raw_completion, answer, ...
_IGNORED_ROLES = ("system", "developer")
_REFUSED_ROLES = ("assistant", "tool", "function")


class RequestError(ValueError):
    """A client error: HTTP ``status`` with an OpenAI-shaped body (``error_body``)."""

    def __init__(
        self,
        message: str,
        *,
        status: int = 400,
        param: str | None = None,
        code: str | None = None,
        type: str = "invalid_request_error",
    ) -> None:
        super().__init__(message)
        self.message, self.status, self.param, self.code, self.type = (
            message, status, param, code, type,
        )  # fmt: skip

    def body(self) -> dict:
        return error_body(self.message, self.type, param=self.param, code=self.code)


def error_body(message: str, type: str, *, param: str | None = None, code=None) -> dict:
    """``{"error": {"message", "type", "param", "code"}}``, as OpenAI's API answers errors; the
    message and ``param`` may quote the client's input, so lone surrogates are escaped (else the
    400 itself fails as a 500) and they are cut to ``_QUOTE_LIMIT`` characters."""
    return {
        "error": {"message": _bounded(utf8_safe(message)), "type": type,
                  "param": _bounded(utf8_safe(param)), "code": code}
    }  # fmt: skip


_QUOTE_LIMIT = 2000  # characters of an error message or param; the client's input may be MBs


def _bounded(text: str | None) -> str | None:
    """``text`` cut to ``_QUOTE_LIMIT`` characters, saying how long it was."""
    if text is None or len(text) <= _QUOTE_LIMIT:
        return text
    return f"{text[:_QUOTE_LIMIT]}... ({len(text)} characters in all)"


def utf8_safe(text: str | None) -> str | None:
    """``text`` with every character UTF-8 cannot encode (lone surrogates) as ``\\udXXX``."""
    if text is None:
        return None
    text = str(text)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


@dataclass(frozen=True)
class ChatRequest:
    question: str
    model: str
    user: str | None = None
    max_tokens: int | None = None  # the client's cap (<= the certified one); None: the server's
    stream: bool = False
    include_usage: bool = False  # stream_options.include_usage


_VOIDS = "it would change the decoding the threshold was certified under ({}), so the threshold "
_VOIDS += "would no longer mean what it promises"
# Every Chat Completions parameter (OpenAI's reference, plus vLLM's common extras) and what rlsr
# serve does with it. "honoured": validated and applied; "no effect": accepted, cannot change
# the answer (bookkeeping fields); "refused unless default": 400 unless absent / null / the
# default; "refused": 400 unless absent / null. Anything not listed: 400 (unknown parameter).
PARAMETERS: dict[str, str] = {
    "model": "honoured", "messages": "honoured", "n": "honoured (1 only)",
    "stream": "honoured", "stream_options": "honoured (include_usage, with stream)",
    "max_tokens": "honoured", "max_completion_tokens": "honoured",
    "temperature": "refused unless default", "top_p": "refused unless default",
    "seed": "honoured",  # deterministic already under greedy serving; refused otherwise
    "frequency_penalty": "refused unless default", "presence_penalty": "refused unless default",
    "logit_bias": "refused unless default", "logprobs": "refused unless default",
    "top_logprobs": "refused", "stop": "refused", "tools": "refused",
    "tool_choice": "refused unless default", "functions": "refused", "function_call": "refused",
    "parallel_tool_calls": "refused", "response_format": "refused unless default",
    "modalities": "refused unless default", "audio": "refused", "prediction": "refused",
    "reasoning_effort": "refused", "web_search_options": "refused", "verbosity": "refused",
    "repetition_penalty": "refused unless default", "top_k": "refused unless default",
    "min_p": "refused unless default", "min_tokens": "refused unless default",
    "user": "no effect", "metadata": "no effect", "store": "no effect",
    "service_tier": "no effect", "safety_identifier": "no effect",
    "prompt_cache_key": "no effect",
}  # fmt: skip
_DEFAULTS: dict[str, tuple] = {  # accepted values of the "refused unless default" parameters
    "frequency_penalty": (0, 0.0), "presence_penalty": (0, 0.0),
    "logit_bias": ({},), "logprobs": (False,), "tool_choice": ("none",),
    "response_format": ({"type": "text"},), "modalities": (["text"],),
    "repetition_penalty": (1, 1.0), "top_k": (-1, 0), "min_p": (0, 0.0), "min_tokens": (0,),
}  # fmt: skip
_WHY_REFUSED: dict[str, str] = {
    "stop": "a stop string could cut the completion before the confidence the decision needs",
    "logprobs": "log-probabilities are not returned by this server",
    "top_logprobs": "log-probabilities are not returned by this server",
    "tools": "the model answers questions in its trained format, it does not call tools",
    "tool_choice": "the model answers questions in its trained format, it does not call tools",
    "functions": "the model answers questions in its trained format, it does not call tools",
    "function_call": "the model answers questions in its trained format, it does not call tools",
    "parallel_tool_calls": "the model does not call tools",
    "response_format": "the answer comes in the trained tag format, not as JSON",
    "modalities": "text only", "audio": "text only",
    "prediction": "predicted outputs are not supported",
    "reasoning_effort": "the model's reasoning length is what it was trained and certified with",
    "web_search_options": "no web search", "verbosity": "not supported",
}  # fmt: skip


def _number(body: Mapping, name: str, lo: float, hi: float) -> float | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not lo <= value <= hi:
        raise RequestError(f"'{name}' must be a number in [{lo}, {hi}]; got {value!r}.", param=name)
    return float(value)


def check_parameters(body: Mapping, decoding: ServeSettings) -> int | None:
    """Every parameter of ``body`` honoured or refused (``PARAMETERS``); returns the client's
    token cap (``max_completion_tokens``, else ``max_tokens``; None: the server's). ``decoding``:
    what the threshold was certified under, the most a request may ask for."""
    for name in body:
        if name not in PARAMETERS:
            raise RequestError(
                f"unknown parameter {name!r}: rlsr serve refuses what it cannot honour "
                "(docs/serving.md, 'Request parameters').",
                param=name,
            )
    served = f"temperature {decoding.sampling_temperature:g}, top_p {decoding.top_p:g}"
    for name, value in ((n, body[n]) for n in body if body[n] is not None):
        policy = PARAMETERS[name]
        if policy == "refused" or (
            policy == "refused unless default"
            and name in _DEFAULTS
            and value not in _DEFAULTS[name]
        ):
            why = _WHY_REFUSED.get(name) or _VOIDS.format(served)
            raise RequestError(f"'{name}' is not supported here: {why}.", param=name)
    for name, hi, served_value in (
        ("temperature", 2.0, decoding.sampling_temperature),
        ("top_p", 1.0, decoding.top_p),
    ):
        value = _number(body, name, 0.0, hi)
        if value is not None and value != served_value:
            raise RequestError(
                f"'{name}' {value:g} is not supported here: {_VOIDS.format(served)}; leave it "
                "out or send the served value.",
                param=name,
            )
    for name in ("frequency_penalty", "presence_penalty"):
        _number(body, name, -2.0, 2.0)
    seed = body.get("seed")
    if seed is not None:
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise RequestError(f"'seed' must be an integer; got {seed!r}.", param="seed")
        if decoding.sampling_temperature != 0.0:
            raise RequestError(
                "'seed' is not supported here: this server samples at temperature "
                f"{decoding.sampling_temperature:g} with the engine's own seeds; leave it out.",
                param="seed",
            )  # under greedy decoding every seed gives the same answer: honoured as is
    cap = None
    for name in ("max_tokens", "max_completion_tokens"):
        value = body.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise RequestError(f"'{name}' must be an integer >= 1; got {value!r}.", param=name)
        if value > decoding.max_new_tokens:
            raise RequestError(
                f"'{name}' {value} is above this server's certified cap of "
                f"{decoding.max_new_tokens} new tokens (the threshold was chosen at that "
                f"length); send at most {decoding.max_new_tokens}, or leave it out.",
                param=name,
            )
        cap = value if cap is None else min(cap, value)
    return cap


def _text_content(content: Any, where: str) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for k, part in enumerate(content):
            if not isinstance(part, Mapping) or part.get("type") != "text":
                kind = part.get("type") if isinstance(part, Mapping) else type(part).__name__
                raise RequestError(
                    f"{where}.content[{k}]: only text parts are accepted, got {kind!r}.",
                    param=f"{where}.content",
                )
            text = part.get("text")
            if not isinstance(text, str):
                raise RequestError(
                    f"{where}.content[{k}].text must be a string.", param=f"{where}.content"
                )
            parts.append(text)
        return "\n".join(parts)
    raise RequestError(
        f"{where}.content must be a string or a list of text parts.", param=f"{where}.content"
    )


def parse_chat_request(
    body: Any,
    served_model: str,
    decoding: ServeSettings | None = None,
    *,
    max_message_chars: int | None = None,
) -> ChatRequest:
    """Validate a ``/v1/chat/completions`` body (``RequestError`` naming the bad field); with
    ``decoding`` every parameter too, with ``max_message_chars`` each message's length."""
    if not isinstance(body, Mapping):
        raise RequestError("the request body must be a JSON object.")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise RequestError(f"'model' is required: a string, e.g. {served_model!r}.", param="model")
    if model != served_model:
        raise RequestError(
            f"the model {model!r} does not exist here; this server serves {served_model!r}.",
            status=404, param="model", code="model_not_found",
        )  # fmt: skip
    n = body.get("n", 1)
    if n is not None and (isinstance(n, bool) or n != 1):
        raise RequestError(f"'n' must be 1 (one answer per question); got {n!r}.", param="n")
    user = body.get("user")
    if user is not None and not isinstance(user, str):
        raise RequestError("'user' must be a string.", param="user")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RequestError(
            "'messages' is required: a non-empty list of {role, content} objects.",
            param="messages",
        )
    questions = []
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(message, Mapping):
            raise RequestError(f"{where} must be an object with role and content.", param=where)
        role = message.get("role")
        if role in _REFUSED_ROLES:
            raise RequestError(
                f"{where}: role {role!r} is not accepted; the model answers single questions "
                "as it was trained: send one user message.",
                param=where,
            )
        if role not in ("user", *_IGNORED_ROLES):
            raise RequestError(
                f"{where}.role must be 'user' or 'system'; got {role!r}.", param=where
            )
        text = _text_content(message.get("content"), where)
        if max_message_chars is not None and len(text) > max_message_chars:
            raise RequestError(
                f"{where}.content has {len(text)} characters, more than this server's bound of "
                f"{max_message_chars} per message (--max-message-chars); send a shorter question.",
                param=f"{where}.content", code="message_too_long",
            )  # fmt: skip
        if role == "user":
            questions.append(text)
    if len(questions) != 1:
        raise RequestError(
            f"send exactly one user message (the question); got {len(questions)}.",
            param="messages",
        )
    if not questions[0].strip():
        raise RequestError("the user message is empty; send a question.", param="messages")
    try:
        questions[0].encode("utf-8")
    except UnicodeEncodeError as err:  # e.g. a lone surrogate "\ud800" in the JSON
        raise RequestError(
            f"the user message is not valid Unicode text ({err.reason} at character "
            f"{err.start}); send UTF-8 text.",
            param="messages",
        ) from None
    max_tokens = None if decoding is None else check_parameters(body, decoding)
    stream, include_usage = _stream_settings(body)
    return ChatRequest(
        question=questions[0], model=model, user=user, max_tokens=max_tokens, stream=stream,
        include_usage=include_usage,
    )  # fmt: skip


def _stream_settings(body: Mapping) -> tuple[bool, bool]:
    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise RequestError(f"'stream' must be true or false; got {stream!r}.", param="stream")
    options = body.get("stream_options")
    if options is None:
        return bool(stream), False
    if not stream:
        raise RequestError(
            "'stream_options' is only allowed with stream=true.", param="stream_options"
        )
    if not isinstance(options, Mapping) or set(options) - {"include_usage"}:
        raise RequestError(
            "'stream_options' accepts only {\"include_usage\": true|false} here.",
            param="stream_options",
        )
    usage = options.get("include_usage", False)
    if not isinstance(usage, bool):
        raise RequestError("'stream_options.include_usage' must be true or false.",
                           param="stream_options")  # fmt: skip
    return True, usage


def chat_completion(
    *, request_id: str, created: int, model: str, content: str, extension: dict,
    prompt_tokens: int, completion_tokens: int, finish_reason: str = "stop",
) -> dict:  # fmt: skip
    """A ``chat.completion`` object with one choice carrying the ``EXTENSION_FIELD``."""
    return {
        "id": request_id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": finish_reason,
                "logprobs": None,
                EXTENSION_FIELD: extension,
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def completion_chunks(completion: Mapping, include_usage: bool = False) -> list[dict]:
    """The ``chat.completion.chunk`` objects of a streamed answer, from the finished
    ``chat_completion``: role, content, ``finish_reason`` with the ``EXTENSION_FIELD``, then with
    ``include_usage`` the usage (OpenAI's order). Nothing is sent before the decision (it needs
    the confidence, generated last), so a withheld answer's text never reaches the client."""
    (choice,) = completion["choices"]
    head = {k: completion[k] for k in ("id", "created", "model")}
    head["object"] = "chat.completion.chunk"

    def chunk(delta: dict, finish_reason=None, **extra) -> dict:
        c = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        out = {**head, "choices": [{**c, **extra}]}
        if include_usage:
            out["usage"] = None
        return out

    chunks = [
        chunk({"role": "assistant", "content": ""}),
        chunk({"content": choice["message"]["content"]}),
        chunk({}, choice["finish_reason"], **{EXTENSION_FIELD: choice[EXTENSION_FIELD]}),
    ]
    if include_usage:
        chunks.append({**head, "choices": [], "usage": completion["usage"]})
    return chunks


def model_list(model: str, created: int) -> dict:
    """``/v1/models``: the one served model."""
    return {
        "object": "list",
        "data": [{"id": model, "object": "model", "created": created, "owned_by": "rlsr"}],
    }

"""OpenAI chat-completions protocol of ``rlsr serve``: request validation, response and error
bodies (pure functions; docs/serving.md lists what is accepted).

The model answers single questions, as it was trained: a request holds exactly one ``user``
message (its text is the problem, rendered with the training system prompt and user template);
a client ``system`` / ``developer`` message is replaced by the training system prompt; earlier
assistant or tool turns are refused. Decoding is fixed by the server to the settings the
threshold was certified under, so sampling fields (``temperature``, ``max_tokens`` ...) are
ignored; ``n`` > 1 and ``stream`` are refused (the decision needs the whole completion).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "EXTENSION_FIELD",
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
    """``{"error": {"message", "type", "param", "code"}}``, as OpenAI's API answers errors."""
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


@dataclass(frozen=True)
class ChatRequest:
    question: str
    model: str
    user: str | None = None


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


def parse_chat_request(body: Any, served_model: str) -> ChatRequest:
    """Validate a ``/v1/chat/completions`` body; raise ``RequestError`` naming the bad field."""
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
    if body.get("stream"):
        raise RequestError(
            "stream=true is not supported: the answer-or-abstain decision needs the whole "
            "completion; send stream=false.",
            param="stream",
        )
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
        if role == "user":
            questions.append(text)
    if len(questions) != 1:
        raise RequestError(
            f"send exactly one user message (the question); got {len(questions)}.",
            param="messages",
        )
    if not questions[0].strip():
        raise RequestError("the user message is empty; send a question.", param="messages")
    return ChatRequest(question=questions[0], model=model, user=user)


def chat_completion(
    *, request_id: str, created: int, model: str, content: str, extension: dict,
    prompt_tokens: int, completion_tokens: int,
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
                "finish_reason": "stop",
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


def model_list(model: str, created: int) -> dict:
    """``/v1/models``: the one served model."""
    return {
        "object": "list",
        "data": [{"id": model, "object": "model", "created": created, "owned_by": "rlsr"}],
    }

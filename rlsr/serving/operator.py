"""What an operator puts in front of ``rlsr serve`` (docs/serving.md, "Operating it"), as one pure
ASGI middleware (no per-request task or body buffering; a streamed body passes through):

* API keys, deny by default: every request but ``/health`` (a load balancer's probe) needs
  ``Authorization: Bearer <key>``, compared with every key in constant time; a missing or wrong
  key gets 401 before routing, so a path added later is covered too. Keys are never logged.
* Back-pressure: at most ``max_queued_requests`` chat completions at once (this process's count);
  one more gets 429 with ``Retry-After`` instead of an unbounded queue.
* Errors counted once: every chat completion answered 4xx / 5xx, whoever answered it (this
  middleware, the app, the router, an exception escaping the app as a 500), calls
  ``on_chat_error``; 499 (the client went away) is the app's ``cancelled``.
* Request ids: a client's ``X-Request-Id`` (``[A-Za-z0-9._:-]``, at most 128) is kept, else
  ``req-<32 hex>``; in ``scope["state"]`` (the decision log) and the response header.

CORS is Starlette's ``CORSMiddleware`` outside this one, so a browser's pre-flight ``OPTIONS`` is
answered without a key, as in ``vllm serve``.
"""

from __future__ import annotations

import hmac
import json
import re
import uuid
from collections.abc import Sequence

from rlsr.serving.protocol import error_body

__all__ = ["OperatorMiddleware", "Occupancy", "OPEN_PATHS", "CHAT_PATH", "request_id_of"]

OPEN_PATHS = frozenset({"/health"})  # answered without a key (as vllm serve)
CHAT_PATH = "/v1/chat/completions"
_REQUEST_ID = re.compile(r"[A-Za-z0-9._:\-]{1,128}")
_CLIENT_GONE = 499  # the app's status for a client that went away (counted as cancelled)


class Occupancy:
    """Chat completions accepted and not yet answered (shared with ``/metrics``)."""

    def __init__(self) -> None:
        self.in_flight = 0


def request_id_of(scope) -> str | None:
    """The request id ``OperatorMiddleware`` gave this request (None outside it)."""
    return scope.get("state", {}).get("request_id")


class OperatorMiddleware:
    """API keys (empty: none needed), a bound on queued chat completions (None: none), request
    ids. ``retry_after``: a 429's ``Retry-After`` seconds; ``occupancy``: the count of accepted
    chat completions (read by ``/metrics``); ``on_chat_error``: called once per error answer."""

    def __init__(
        self,
        app,
        *,
        api_keys: Sequence[str] = (),
        max_queued_requests: int | None = None,
        retry_after: int = 1,
        occupancy: Occupancy | None = None,
        on_chat_error=None,
    ) -> None:
        if any(not k for k in api_keys):
            raise ValueError("an API key must not be empty (--api-key / RLSR_API_KEY).")
        if max_queued_requests is not None and max_queued_requests < 1:
            raise ValueError(
                f"--max-queued-requests must be >= 1 (or unset for no bound); got "
                f"{max_queued_requests}."
            )
        self.app = app
        self._keys = tuple(k.encode() for k in api_keys)
        self.max_queued_requests = max_queued_requests
        self.retry_after = retry_after
        self.occupancy = occupancy or Occupancy()
        self._on_chat_error = on_chat_error or (lambda: None)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or ())
        given = headers.get(b"x-request-id", b"").decode("latin-1")
        request_id = given if _REQUEST_ID.fullmatch(given) else f"req-{uuid.uuid4().hex}"
        scope.setdefault("state", {})["request_id"] = request_id
        id_header = (b"x-request-id", request_id.encode())

        async def send_with_id(message):
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", ()), id_header]
            await send(message)

        chat = scope["path"] == CHAT_PATH
        open_probe = scope["path"] in OPEN_PATHS and scope["method"] in ("GET", "HEAD")
        if self._keys and not open_probe:
            if not self._authorised(headers.get(b"authorization", b"")):
                if chat:
                    self._on_chat_error()
                await _json(
                    send_with_id,
                    401,
                    error_body(
                        "missing or invalid API key: send the header 'Authorization: Bearer "
                        "<key>' with a key this server was started with (--api-key / "
                        "RLSR_API_KEY)",
                        "invalid_request_error",
                        code="invalid_api_key",
                    ),
                    extra=[(b"www-authenticate", b"Bearer")],
                )
                return
        if not chat:
            await self.app(scope, receive, send_with_id)
            return
        occupancy = self.occupancy
        if self.max_queued_requests is not None and occupancy.in_flight >= self.max_queued_requests:
            self._on_chat_error()
            await _json(
                send_with_id,
                429,
                error_body(
                    f"the server is at its bound of {self.max_queued_requests} queued requests "
                    f"(--max-queued-requests); retry after {self.retry_after} s",
                    "rate_limit_error",
                    code="queue_full",
                ),
                extra=[(b"retry-after", str(self.retry_after).encode())],
            )
            return
        started = False

        async def send_counted(message):
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                if message["status"] >= 400 and message["status"] != _CLIENT_GONE:
                    self._on_chat_error()
            await send_with_id(message)

        occupancy.in_flight += 1
        try:
            await self.app(scope, receive, send_counted)
        except Exception:
            if not started:  # Starlette's outermost handler answers it 500, past this middleware
                self._on_chat_error()
            raise
        finally:
            occupancy.in_flight -= 1

    def _authorised(self, header: bytes) -> bool:
        scheme, _, token = header.partition(b" ")
        token = token.strip()
        ok = False
        for key in self._keys:  # every key, no early exit: the time does not say which matched
            ok |= hmac.compare_digest(token, key)
        return ok and scheme.lower() == b"bearer"


async def _json(send, status: int, body: dict, extra=()) -> None:
    payload = json.dumps(body).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(payload)).encode()),
                *extra,
            ],
        }
    )
    await send({"type": "http.response.body", "body": payload})

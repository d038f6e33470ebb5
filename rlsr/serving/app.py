"""The FastAPI application of ``rlsr serve`` (docs/serving.md): ``POST /v1/chat/completions``
(answer or abstain, the ``rlsr`` extension field per choice), ``GET /v1/models``, ``/health``
(503 unless the engine can serve), ``/metrics``. Handlers hold no lock: concurrent requests await
the engine together and vLLM batches them. Errors answer in OpenAI's shape: malformed requests
4xx, a failing upstream 502 (504 on timeout), a stopped engine 503, anything else 500; none
stops the server.
"""

import asyncio
import contextlib
import dataclasses
import json
import logging
import time
import uuid
from collections.abc import Mapping, Sequence

from rlsr.evaluation.deploy.decisions import ANSWERED
from rlsr.generation.backends import EngineRejected, EngineUnavailable
from rlsr.serving.decision_log import DecisionLog, decision_record
from rlsr.serving.engine import Engine
from rlsr.serving.metrics import ServeMetrics
from rlsr.serving.operator import Occupancy, OperatorMiddleware, request_id_of
from rlsr.serving.policy import ServeSettings, request_hash
from rlsr.serving.protocol import (
    RequestError,
    chat_completion,
    completion_chunks,
    error_body,
    model_list,
    parse_chat_request,
)
from rlsr.serving.respond import answer_or_abstain

__all__ = ["create_app", "extension_fields"]

logger = logging.getLogger("rlsr.serve")


def extension_fields(item: dict, settings: ServeSettings) -> dict:
    """The per-choice ``rlsr`` field: what was decided and from what (docs/serving.md)."""
    return {
        "decision": item["decision"],
        "confidence": item["confidence"],
        "score": item["score"],
        "tau": settings.tau,
        "rule": settings.rule,
        "answer": item["answer"],
        "format_ok": item["format_ok"],
        "fallbacks": item["fallbacks"],
        "finish_reason": item["finish_reason"],
        "fallback_error": item.get("fallback_error"),
        "raw_completion": item["generated"],
    }


def create_app(
    engine: Engine,
    settings: ServeSettings,
    *,
    decision_log: DecisionLog | None = None,
    api_keys: Sequence[str] = (),
    max_queued_requests: int | None = None,
    max_request_bytes: int | None = None,
    max_message_chars: int | None = None,
    cors: Mapping | None = None,
    certified_coverage: float | None = None,
):
    """The application; closes the engine (and the log) on shutdown. ``api_keys``,
    ``max_queued_requests``: ``OperatorMiddleware``; ``cors``: Starlette's ``CORSMiddleware``
    keywords (None: no CORS); ``max_request_bytes`` / ``max_message_chars``: 413 / 400 before
    parsing / rendering (None: no bound); ``certified_coverage``: exported on ``/metrics``."""
    from contextlib import asynccontextmanager  # fastapi: optional dependency (serve extra)

    from fastapi import FastAPI, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse, Response, StreamingResponse
    from starlette.exceptions import HTTPException as StarletteHTTPException
    from starlette.requests import ClientDisconnect

    started = int(time.time())

    @asynccontextmanager
    async def lifespan(app):
        yield
        await engine.close()
        if decision_log is not None:
            decision_log.close()

    app = FastAPI(title="rlsr serve", lifespan=lifespan, docs_url=None, redoc_url=None)
    occupancy = Occupancy()
    metrics = ServeMetrics(
        tau=settings.tau, certified_coverage=certified_coverage,
        in_flight=lambda: occupancy.in_flight, max_queued_requests=max_queued_requests,
        engine_requests=getattr(engine, "running", None),
    )  # fmt: skip
    # The last added runs first: CORS answers a browser's pre-flight before the key check.
    app.add_middleware(
        OperatorMiddleware, api_keys=tuple(api_keys), max_queued_requests=max_queued_requests,
        occupancy=occupancy, on_chat_error=metrics.error,
    )  # fmt: skip
    if cors is not None:
        from starlette.middleware.cors import CORSMiddleware

        app.add_middleware(CORSMiddleware, **cors)

    def error(status: int, message: str, type: str, **kw) -> JSONResponse:
        return JSONResponse(error_body(message, type, **kw), status_code=status)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException):
        kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
        return error(exc.status_code, str(exc.detail), kind)

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError):
        return error(400, str(exc), "invalid_request_error")

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception):
        logger.exception("unexpected error in %s", request.url.path)
        return error(500, f"internal error: {type(exc).__name__}: {exc}", "internal_error")

    @app.api_route("/health", methods=["GET", "HEAD"])
    async def health():
        try:
            await engine.check()
        except EngineUnavailable as err:
            return error(503, str(err), "service_unavailable")
        return {"status": "ok", "model": settings.model_name, "tau": settings.tau}

    @app.get("/metrics")
    async def prometheus_metrics():
        body, content_type = metrics.exposition()
        return Response(body, media_type=content_type)

    @app.get("/v1/models")
    async def models():
        return model_list(settings.model_name, started)

    @app.get("/v1/models/{model_id:path}")
    async def model(model_id: str):
        if model_id != settings.model_name:
            return error(
                404, f"the model {model_id!r} does not exist here; this server serves "
                f"{settings.model_name!r}.", "invalid_request_error", param="model",
                code="model_not_found",
            )  # fmt: skip
        return model_list(settings.model_name, started)["data"][0]

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        start = time.perf_counter()
        if not _is_json(request.headers.get("content-type")):
            # As vllm serve: a form or text/plain POST (which a browser sends cross-origin with no
            # CORS pre-flight) is refused before the body is read or any compute is spent.
            return error(
                415, "the request needs the header 'Content-Type: application/json' (got "
                f"{request.headers.get('content-type')!r})", "invalid_request_error",
                code="unsupported_media_type",
            )  # fmt: skip
        try:
            raw = await _read_bounded(request, max_request_bytes)
        except ClientDisconnect:  # gone while sending its body: nothing was started for it
            metrics.cancelled()
            return Response(status_code=499)
        if raw is None:
            return error(
                413, f"the request body is larger than this server's bound of {max_request_bytes} "
                "bytes (--max-request-bytes)", "invalid_request_error", code="request_too_large",
            )  # fmt: skip
        # A client that goes away cancels its work: the engine call is cancelled, which aborts the
        # request in vLLM (AsyncLLM.generate) or closes the connection to the upstream (vllm serve
        # aborts on disconnect), fallbacks included.
        work = asyncio.ensure_future(answer(request, raw))
        gone = asyncio.ensure_future(_disconnected(request))
        await asyncio.wait((work, gone), return_when=asyncio.FIRST_COMPLETED)
        if not work.done():
            work.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await work
            metrics.cancelled()
            return Response(status_code=499)  # nobody reads it (nginx's "client closed")
        gone.cancel()
        response, item = work.result()
        if item is not None:
            metrics.decided(item["decision"], item["score"], time.perf_counter() - start)
        if isinstance(response, StreamingResponse):
            metrics.first_chunk(time.perf_counter() - start)  # sent as soon as this returns
        return response

    def parse_body(raw: bytes):
        too_deep = RequestError(
            "the request body is nested too deeply to parse (JSON nesting over Python's "
            "recursion limit); a chat request needs a few levels"
        )
        try:
            body = json.loads(raw)
        except ValueError as err:  # not JSON, not UTF-8, or an integer of over 4,300 digits
            raise RequestError(f"the request body is not valid JSON: {err}") from None
        except RecursionError:
            raise too_deep from None
        try:
            return parse_chat_request(
                body, settings.model_name, settings, max_message_chars=max_message_chars
            )
        except RecursionError:  # quoting a value nested just under the limit in an error
            raise too_deep from None

    async def answer(request, raw: bytes):
        """(response, the decided item or None)."""
        try:
            chat = parse_body(raw)
        except RequestError as err:
            return JSONResponse(err.body(), status_code=err.status), None
        asked = settings
        if chat.max_tokens is not None:
            asked = dataclasses.replace(settings, max_new_tokens=chat.max_tokens)
        try:
            item = await answer_or_abstain(engine, chat.question, asked)
        except EngineRejected as err:
            return error(400, str(err), "invalid_request_error"), None
        except EngineUnavailable as err:
            kind = "service_unavailable" if err.status == 503 else "upstream_error"
            return error(err.status, str(err), kind), None
        except Exception as err:  # noqa: BLE001 - answered here, so the connection stays open
            logger.exception("unexpected error answering a chat completion")
            return error(
                500, f"internal error: {type(err).__name__}: {err}", "internal_error"
            ), None
        if decision_log is not None:
            decision_log.write(
                decision_record(
                    item,
                    question_hash=request_hash(chat.question),
                    tau=settings.tau,
                    rule=settings.rule,
                    request_id=request_id_of(request.scope),
                )  # fmt: skip
            )
        content = item["answer"] if item["decision"] == ANSWERED else settings.abstain_message
        completion = chat_completion(
            request_id=f"chatcmpl-{uuid.uuid4().hex}", created=int(time.time()),
            model=settings.model_name, content=content,
            extension=extension_fields(item, settings),
            prompt_tokens=item["prompt_tokens"], completion_tokens=item["completion_tokens"],
            finish_reason=item["finish_reason"],
        )  # fmt: skip
        if chat.stream:
            chunks = completion_chunks(completion, chat.include_usage)
            return StreamingResponse(_sse(chunks), media_type="text/event-stream"), item
        return JSONResponse(completion), item

    return app


async def _read_bounded(request, limit: int | None) -> bytes | None:
    """The body, or None as soon as it is known to exceed ``limit`` bytes (Content-Length, else
    while it arrives), so a huge body costs neither parsing nor memory."""
    if limit is None:
        return await request.body()
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        return None
    parts, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            return None
        parts.append(chunk)
    return b"".join(parts)


def _is_json(content_type: str | None) -> bool:
    """``application/json`` (any parameters, e.g. ``; charset=utf-8``), as vllm serve accepts."""
    return (content_type or "").split(";")[0].strip().lower() == "application/json"


async def _sse(chunks):
    """Server-sent events: one ``data:`` line per chunk, then ``data: [DONE]``."""
    for chunk in chunks:
        yield f"data: {json.dumps(chunk)}\n\n"
    yield "data: [DONE]\n\n"


async def _disconnected(request) -> None:
    """Returns when the client has gone (its body already read: only a disconnect can come)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass

"""rlsr's one OpenAI-compatible client (httpx): ``rlsr evaluate --backend openai-*``
(``rlsr.generation.endpoint``), ``rlsr serve --upstream`` and the LLM judge.

Settings as lm-evaluation-harness and OpenAI's clients take them: ``--base-url``, ``--model``, the
key from the environment variable ``--api-key-env`` names (never the command line, never
written), ``--concurrency``, ``--request-timeout``, ``--max-retries``.

``EndpointClient``: one prompt per request, at most ``concurrency`` in flight over one
``httpx.AsyncClient``; usable from synchronous code (``run``: an event loop of its own) and from
async code (``call`` on the caller's loop: rlsr serve). Retries with exponential backoff on 429,
5xx, timeouts, dropped connections and malformed bodies (``Retry-After`` is waited out); other 4xx
fail at once with the server's message (401/403 name the key's variable, never the key). Every
finished request is appended to ``requests.jsonl`` (``RequestJournal``) before its sample is
built, so a rerun after a kill asks nothing finished again and counts what the run cost.
"""

from __future__ import annotations

import asyncio
import email.utils
import hashlib
import json
import os
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "EndpointError",
    "EndpointSettings",
    "RequestJournal",
    "EndpointClient",
    "api_base",
    "request_key",
]

_RETRY_STATUSES = {408, 409, 429, 500, 502, 503, 504}
_MAX_WAIT_S = 60.0


class EndpointError(OSError):
    """A request failed for good. The message names the URL, what the server said and what to
    do, never the key. ``status``: the last HTTP status (None: no answer); ``reason``: how the
    last try failed (``refused``: a 4xx not retried; ``status``: a retried 429/5xx; ``timeout``;
    ``connection``; ``malformed``); ``detail``: that failure in a few words."""

    def __init__(
        self, message: str, status: int | None = None, reason: str = "refused", detail: str = ""
    ) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.detail = detail or message


@dataclass(frozen=True)
class EndpointSettings:
    """How to reach an OpenAI-compatible endpoint (``rlsr evaluate --backend openai-*``)."""

    base_url: str  # the API root, e.g. http://localhost:8000/v1 (a full .../completions URL is cut)
    model: str  # the served model id, sent as ``model`` in every request
    kind: str = "completions"  # or "chat"
    api_key_env: str = "OPENAI_API_KEY"  # the key's variable (unset: no Authorization header)
    concurrency: int = 16  # requests in flight at most
    request_timeout: float = 600.0  # seconds per HTTP request before it fails (and is retried)
    max_retries: int = 8
    retry_backoff: float = 1.0  # seconds before the first retry, doubled after each (<= 60 s)

    def __post_init__(self) -> None:
        if not self.base_url.startswith(("http://", "https://")):
            raise ValueError(
                f"--base-url {self.base_url!r} must start with http:// or https://, e.g. "
                "http://localhost:8000/v1."
            )
        if self.kind not in ("completions", "chat"):
            raise ValueError(f"endpoint kind must be completions or chat; got {self.kind!r}.")
        if self.concurrency < 1:
            raise ValueError(f"--concurrency must be >= 1; got {self.concurrency}.")
        if not self.request_timeout > 0:
            raise ValueError(f"--request-timeout must be > 0 seconds; got {self.request_timeout}.")
        if self.max_retries < 0 or self.retry_backoff < 0:
            raise ValueError("--max-retries and the retry backoff must be >= 0.")
        if not self.api_key_env.replace("_", "").isalnum():
            raise ValueError(
                f"--api-key-env {self.api_key_env!r}: give the NAME of an environment variable "
                "(e.g. OPENAI_API_KEY), not the key."
            )


def api_base(url: str) -> str:
    """``url`` without a trailing slash or a trailing ``/completions`` / ``/chat/completions``."""
    base = url.rstrip("/")
    for tail in ("/chat/completions", "/completions"):
        if base.endswith(tail):
            return base[: -len(tail)]
    return base


def request_key(path: str, body: dict) -> str:
    """The journal key of a request: sha256 of its path and canonical JSON body."""
    text = path + "\n" + json.dumps(body, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


class RequestJournal:
    """``requests.jsonl``: one line ``{"key", "attempts", "response"}`` per finished request,
    flushed as each finishes (a line cut by a kill is dropped on reading); no request body (its
    hash), no header."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self._done: dict[str, dict] = {}
        self.attempts = 0
        self.prompt_tokens = 0
        self.completion_tokens = 0
        if self.path.is_file():
            raw = self.path.read_bytes()
            keep = raw[: raw.rfind(b"\n") + 1]  # a line cut by a kill has no newline
            if len(keep) != len(raw):
                self.path.write_bytes(keep)
            for number, line in enumerate(keep.decode("utf-8").splitlines(), 1):
                try:
                    if line.strip():
                        self._add(json.loads(line))
                except (ValueError, KeyError, TypeError, AttributeError):
                    raise ValueError(
                        f"{self.path}, line {number}: not a journal entry; delete the line (its "
                        "request is sent again) or pass --overwrite."
                    ) from None
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - closed by close()

    def _add(self, entry: dict) -> None:
        self._done[entry["key"]] = entry["response"]
        self.attempts += int(entry.get("attempts", 1))
        usage = entry["response"].get("usage") or {}
        self.prompt_tokens += int(usage.get("prompt_tokens") or 0)
        self.completion_tokens += int(usage.get("completion_tokens") or 0)

    def __len__(self) -> int:
        return len(self._done)

    def get(self, key: str) -> dict | None:
        return self._done.get(key)

    def put(self, key: str, response: dict, attempts: int) -> None:
        entry = {"key": key, "attempts": attempts, "response": response}
        self._fh.write(json.dumps(entry, ensure_ascii=False) + "\n")
        self._fh.flush()
        self._add(entry)

    def close(self) -> None:
        self._fh.close()


@dataclass
class _Counters:
    requests: int = 0  # HTTP requests sent by this process, retries included
    retries: int = 0
    replayed: int = 0  # answered from the journal (finished in an earlier run)
    finished: int = 0  # finished by this process


def _retry_after(headers) -> float | None:
    """Seconds from a ``Retry-After`` header (a number, or an HTTP date), None if absent/bad."""
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _server_message(response) -> str:
    try:
        error = response.json().get("error")
        text = error.get("message") if isinstance(error, dict) else str(error)
    except (ValueError, AttributeError):
        text = response.text
    return " ".join(str(text).split())[:300]


class EndpointClient:
    """Bounded, retrying, journaled POSTs to one endpoint, on an event loop of its own."""

    def __init__(self, settings: EndpointSettings, *, journal: RequestJournal | None = None):
        try:
            import httpx  # optional dependency (endpoint, serve and judge extras)
        except ImportError as err:  # pragma: no cover - depends on the install
            raise ImportError("this needs httpx: pip install 'rlsr[endpoint]'.") from err

        self._httpx = httpx
        self.settings = settings
        self.base = api_base(settings.base_url)
        self.journal = journal
        self.counters = _Counters()
        self._loop: asyncio.AbstractEventLoop | None = None  # made by the first ``run``
        key = os.environ.get(settings.api_key_env)
        headers = {"Content-Type": "application/json"}
        if key:
            headers["Authorization"] = f"Bearer {key}"
        self._key_set = bool(key)
        # the semaphore bounds what is in flight; the pool keeps httpx's default of 20 idle
        # connections (measured: keeping one per slot, 64, cut requests/s to a quarter against
        # uvicorn on loopback; benchmarks/RESULTS.md)
        limits = httpx.Limits(
            max_connections=max(100, settings.concurrency), max_keepalive_connections=20
        )
        self._client = httpx.AsyncClient(
            headers=headers, timeout=settings.request_timeout, limits=limits
        )
        self._semaphore = asyncio.Semaphore(settings.concurrency)

    def run(self, coro):
        """Run ``coro`` to its end on this client's own event loop (for callers without one)."""
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
        return self._loop.run_until_complete(coro)

    def close(self) -> None:
        """Close a client used through ``run``."""
        if self._loop is None or not self._loop.is_closed():
            self.run(self.aclose())
            self._loop.close()

    async def aclose(self) -> None:
        """Close the connections and the journal (a client used on the caller's event loop)."""
        await self._client.aclose()
        if self.journal is not None:
            self.journal.close()

    def use_journal(self, path: str | os.PathLike) -> None:
        """Journal finished requests in ``path`` from now on (the previous journal is closed)
        and count this process's requests afresh."""
        if self.journal is not None:
            self.journal.close()
        self.journal = RequestJournal(path)
        self.counters = _Counters()

    def _refused(self, method: str, path: str, response) -> EndpointError:
        status = response.status_code
        said = _server_message(response)
        where = f"{self.base}{path}"
        detail = f"HTTP {status}: {said}"
        if status in (401, 403):
            var = self.settings.api_key_env
            state = "is set" if self._key_set else "is not set"
            message = (
                f"{where} refused the API key (HTTP {status}: {said}); the key comes from the "
                f"environment variable {var}, which {state}: export {var}=<your key>, or name "
                "another variable with --api-key-env NAME."
            )
        elif status == 404 and "model" in said.lower():
            message = (
                f"{where}: the server does not serve model {self.settings.model!r} (HTTP 404: "
                f"{said}); give --model one of the ids GET {self.base}/models lists."
            )
        elif status == 404:
            message = (
                f"{where} answered HTTP 404 ({said}): no such route; --base-url must be the API "
                "root, e.g. http://localhost:8000/v1."
            )
        else:
            message = f"{where} answered {method} with HTTP {status}: {said}"
        return EndpointError(message, status, "refused", detail)

    async def _send(self, method: str, path: str, body: dict | None):
        if method == "GET":
            return await self._client.get(self.base + path)
        return await self._client.post(self.base + path, content=json.dumps(body))

    async def call(
        self,
        method: str,
        path: str,
        body: dict | None = None,
        *,
        check: Callable[[dict], Any] = lambda r: r,
        retries: int | None = None,
    ) -> tuple[dict, Any]:
        """``(response JSON, check(response JSON))``, sent at most ``1 + retries`` times; a
        ``check`` that raises (malformed answer) is retried like a 5xx. A POST in the journal is
        answered from it; one that succeeds is journaled before this returns."""
        key = request_key(path, body) if (method == "POST" and self.journal is not None) else None
        if key is not None and (stored := self.journal.get(key)) is not None:
            self.counters.replayed += 1
            return stored, check(stored)
        retries = self.settings.max_retries if retries is None else retries
        httpx = self._httpx
        where = f"{self.base}{path}"
        attempt, last, status, reason = 0, "", None, ""
        while True:
            attempt += 1
            wait = None
            async with self._semaphore:
                self.counters.requests += 1
                try:
                    response = await self._send(method, path, body)
                except httpx.TimeoutException:
                    status, reason = None, "timeout"
                    last = f"no answer within --request-timeout {self.settings.request_timeout} s"
                except (httpx.TransportError, httpx.DecodingError) as err:
                    # connection refused / reset, a body cut short: the server may come back
                    status, reason = None, "connection"
                    last = f"{type(err).__name__}: {err}"
                else:
                    status = response.status_code
                    if status == 200:
                        try:
                            data = response.json()
                            result = check(data)
                        except (ValueError, KeyError, TypeError, IndexError, AttributeError) as err:
                            reason = "malformed"
                            last = f"a malformed answer ({type(err).__name__}: {err})"
                        else:
                            if key is not None:
                                self.journal.put(key, data, attempt)
                            self.counters.finished += 1
                            return data, result
                    elif status in _RETRY_STATUSES:
                        reason = "status"
                        last = f"HTTP {status}: {_server_message(response)}"
                        wait = _retry_after(response.headers)
                    else:
                        raise self._refused(method, path, response)
            if attempt > retries:
                raise EndpointError(
                    f"{where} failed {attempt} time(s), last with {last}; is the server up at "
                    "that address and the model loaded? A rate limit: lower --concurrency or "
                    "raise --max-retries.",
                    status, reason, last,
                )  # fmt: skip
            self.counters.retries += 1
            if wait is None:
                base = self.settings.retry_backoff * 2 ** (attempt - 1)
                wait = min(_MAX_WAIT_S, base) * (0.5 + random.random() / 2)
            await asyncio.sleep(min(wait, _MAX_WAIT_S))

    async def call_all(self, calls: Sequence[tuple]) -> list:
        """``call(*c)`` for each of ``calls`` at once (bounded by ``concurrency``), results in
        order. The first failure cancels the rest (already journaled ones stay) and is raised."""
        tasks = [asyncio.ensure_future(self.call(*c[:3], check=c[3])) for c in calls]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
            for task in tasks:
                if task.done() and task.exception() is not None:
                    raise task.exception()
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        return [t.result()[1] for t in tasks]

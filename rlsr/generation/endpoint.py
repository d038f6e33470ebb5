"""``rlsr evaluate --backend openai-completions|openai-chat``: any model behind an
OpenAI-compatible endpoint (a hosted API, ``vllm serve`` on one node or many, ``rlsr serve``).

The flags follow lm-evaluation-harness (``local-completions`` / ``local-chat-completions``) and
OpenAI's clients: ``--base-url`` (``http://host:8000/v1``), ``--model`` (the served model id),
the key read from the environment variable ``--api-key-env`` names (``OPENAI_API_KEY``), never
from the command line, and never written anywhere; ``--concurrency``, ``--request-timeout``,
``--max-retries``.

How requests are made (``EndpointClient``):

* one prompt per HTTP request, at most ``concurrency`` in flight (an ``asyncio.Semaphore`` over
  one ``httpx.AsyncClient`` with as many pooled connections); the backend keeps its own event
  loop, so the runner calls it like any other backend;
* retries with exponential backoff (``retry_backoff``, doubled per try, capped at 60 s) on 429,
  5xx, timeouts, dropped connections and malformed or partial bodies; a ``Retry-After`` header
  (seconds or an HTTP date) is waited out instead; 4xx other than 429 fail at once with the
  server's message (401/403 name the key's variable, never the key);
* every finished request is appended to ``OUT/<dataset>/requests.jsonl`` (the journal: request
  hash, the server's answer, tries) before its sample is built; a rerun after a kill, a dead
  server or a failed request answers those from the journal, so nothing finished is asked again
  and nothing paid for is lost; the journal also counts what the run cost (``usage``).

What the server can do decides the protocol (``rlsr.generation.openai_api.server_kind``):
``vllm serve`` gets token-id prompts and returns token ids, so ``openai-completions`` equals
``--backend vllm`` sample for sample (Sec. C.3 fallbacks as prompt + response + suffix, the
log-prob scorer through ``prompt_logprobs``); ``openai-chat`` continues the assistant message
for the fallbacks (``continue_final_message``) where the server is vLLM, elsewhere the fallbacks
are off and ``fallbacks_off`` says why (run.json, summary.json). ``rlsr serve`` runs them itself
and answers its decision, which the deployment audit reads (``rlsr.evaluation.audit``).
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
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from rlsr.data.formatting import USER_PROMPT_TEMPLATE
from rlsr.generation.backends import (
    Generation,
    Sampling,
    encode_prompt,
    generation_eos_ids,
    load_chat_tokenizer,
    render_chat,
)
from rlsr.generation.openai_api import (
    RLSR_SERVE,
    chat_body,
    chat_generation,
    completion_generation,
    completions_body,
    continuation_logprobs_of,
    score_body,
    server_kind,
)

__all__ = [
    "ENDPOINT_BACKENDS",
    "EndpointError",
    "EndpointSettings",
    "RequestJournal",
    "EndpointClient",
    "EndpointBackend",
    "api_base",
]

# --backend values: which endpoint of the server generates.
ENDPOINT_BACKENDS = {"openai-completions": "completions", "openai-chat": "chat"}
_RETRY_STATUSES = {408, 409, 429, 500, 502, 503, 504}
_MAX_WAIT_S = 60.0


class EndpointError(OSError):
    """A request to the endpoint failed for good (after the retries its kind allows). The message
    names the URL, what the server said and what to do; it never holds the API key. ``status``:
    the HTTP status that refused it (None: no answer, or retries exhausted)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class EndpointSettings:
    """How to reach an OpenAI-compatible endpoint (``rlsr evaluate --backend openai-*``)."""

    base_url: str
    """The API root, e.g. ``http://localhost:8000/v1`` (``/completions`` etc. are appended; a
    full ``.../v1/completions`` URL, as lm-evaluation-harness takes it, is cut back to it)."""
    model: str
    """The served model id (``/v1/models``), sent as ``model`` in every request."""
    kind: str = "completions"
    """``completions`` (``/v1/completions`` with the rendered prompt) or ``chat``."""
    api_key_env: str = "OPENAI_API_KEY"
    """Name of the environment variable holding the key (unset: no Authorization header)."""
    concurrency: int = 16
    """Requests in flight at most."""
    request_timeout: float = 600.0
    """Seconds one HTTP request may take before it counts as failed (and is retried)."""
    max_retries: int = 8
    """Retries of one request (429, 5xx, timeout, dropped connection, malformed body)."""
    retry_backoff: float = 1.0
    """Seconds before the first retry, doubled after each (capped at 60 s); Retry-After wins."""

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
    """``requests.jsonl``: one line per finished request ``{"key", "attempts", "response"}``,
    appended and flushed as each finishes (a killed process keeps every line written; a line cut
    by the kill is dropped on reading). The request itself is not stored (its hash is), nor any
    header."""

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
            import httpx  # optional dependency (endpoint extra; the openai package pulls it)
        except ImportError as err:  # pragma: no cover - depends on the install
            raise ImportError(
                "--backend openai-completions/openai-chat needs httpx: pip install 'rlsr[endpoint]'."
            ) from err

        self._httpx = httpx
        self.settings = settings
        self.base = api_base(settings.base_url)
        self.journal = journal
        self.counters = _Counters()
        self._loop = asyncio.new_event_loop()
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
        return self._loop.run_until_complete(coro)

    def close(self) -> None:
        if not self._loop.is_closed():
            self._loop.run_until_complete(self._client.aclose())
            self._loop.close()
        if self.journal is not None:
            self.journal.close()

    def _refused(self, method: str, path: str, response) -> EndpointError:
        status = response.status_code
        said = _server_message(response)
        where = f"{self.base}{path}"
        if status in (401, 403):
            var = self.settings.api_key_env
            state = "is set" if self._key_set else "is not set"
            return EndpointError(
                f"{where} refused the API key (HTTP {status}: {said}); the key comes from the "
                f"environment variable {var}, which {state}: export {var}=<your key>, or name "
                "another variable with --api-key-env NAME."
            )
        if status == 404 and "model" in said.lower():
            return EndpointError(
                f"{where}: the server does not serve model {self.settings.model!r} (HTTP 404: "
                f"{said}); give --model one of the ids GET {self.base}/models lists."
            )
        if status == 404:
            return EndpointError(
                f"{where} answered HTTP 404 ({said}): no such route; --base-url must be the API "
                "root, e.g. http://localhost:8000/v1."
            )
        return EndpointError(f"{where} answered {method} with HTTP {status}: {said}", status)

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
        """``(response JSON, check(response JSON))``: sent until it succeeds, at most
        ``1 + retries`` times. ``check`` raises (KeyError, TypeError, ValueError...) on a
        malformed answer, which is retried like a 5xx. A POST answered from the journal is not
        sent; one that succeeds is journaled before this returns."""
        key = request_key(path, body) if (method == "POST" and self.journal is not None) else None
        if key is not None and (stored := self.journal.get(key)) is not None:
            self.counters.replayed += 1
            return stored, check(stored)
        retries = self.settings.max_retries if retries is None else retries
        httpx = self._httpx
        where = f"{self.base}{path}"
        attempt, last = 0, ""
        while True:
            attempt += 1
            wait = None
            async with self._semaphore:
                self.counters.requests += 1
                try:
                    response = await self._send(method, path, body)
                except httpx.TimeoutException:
                    last = f"no answer within --request-timeout {self.settings.request_timeout} s"
                except (httpx.TransportError, httpx.DecodingError) as err:
                    # connection refused / reset, a body cut short: the server may come back
                    last = f"{type(err).__name__}: {err}"
                else:
                    if response.status_code == 200:
                        try:
                            data = response.json()
                            result = check(data)
                        except (ValueError, KeyError, TypeError, IndexError, AttributeError) as err:
                            last = f"a malformed answer ({type(err).__name__}: {err})"
                        else:
                            if key is not None:
                                self.journal.put(key, data, attempt)
                            self.counters.finished += 1
                            return data, result
                    elif response.status_code in _RETRY_STATUSES:
                        last = f"HTTP {response.status_code}: {_server_message(response)}"
                        wait = _retry_after(response.headers)
                    else:
                        raise self._refused(method, path, response)
            if attempt > retries:
                raise EndpointError(
                    f"{where} failed {attempt} time(s), last with {last}; is the server up at "
                    "that address and the model loaded? A rate limit: lower --concurrency or "
                    "raise --max-retries."
                )
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


_CHAT_PREFIX = "\x00rlsr-chat:"


def chat_prompt_text(messages: list[dict]) -> str:
    """The runner's prompt text for a chat endpoint: the messages as JSON between two NUL
    characters (``json.dumps`` escapes any NUL inside, so the second one ends the JSON). The
    runner appends a fallback context to a prompt text; ``split_chat_prompt`` gets it back as
    the assistant message to continue."""
    return _CHAT_PREFIX + json.dumps(messages, ensure_ascii=False) + "\x00"


def split_chat_prompt(text: str) -> tuple[list[dict], str]:
    """``(messages, continuation)`` of ``chat_prompt_text(messages) + continuation``."""
    if not text.startswith(_CHAT_PREFIX):
        raise ValueError("not a chat prompt text (rlsr.generation.endpoint.chat_prompt_text)")
    end = text.index("\x00", len(_CHAT_PREFIX))
    return json.loads(text[len(_CHAT_PREFIX) : end]), text[end + 1 :]


def served_question(messages: list[dict]) -> str:
    """The problem text ``rlsr serve`` expects as the user message: it renders the question with
    its own system prompt and ``USER_PROMPT_TEMPLATE`` (``rlsr.serving.respond``), so the
    template around the dataset's formatted user message is taken off (the system message is
    the server's to choose: it was certified with one)."""
    user = [m["content"] for m in messages if m.get("role") == "user"][-1]
    head, tail = USER_PROMPT_TEMPLATE.split("{problem}")
    if user.startswith(head) and user.endswith(tail) and len(user) >= len(head) + len(tail):
        return user[len(head) : len(user) - len(tail)]
    return user


@dataclass
class _Served:
    """What ``/v1/models`` said about the model: its entry and the server kind."""

    entry: dict
    kind: str
    max_model_len: int | None = field(default=None)


class EndpointBackend:
    """The ``Backend`` interface (``render``, ``generate``, ``score``) on an endpoint.

    ``connect`` checks everything a run needs before anything is written: the server answers,
    accepts the key, serves ``model``; then ``fallbacks_off`` / ``scoring_off`` say what it
    cannot do (None when it can)."""

    eval_batch_size = 256  # prompts per runner window; --concurrency bounds what is in flight

    def __init__(self, settings: EndpointSettings, tokenizer_path: str | None = None) -> None:
        self.settings = settings
        self.client = EndpointClient(settings)
        try:
            self.served = self._models()
        except BaseException:
            self.client.close()
            raise
        self.kind = self.served.kind
        self.n_by_requests = False  # set when the server refused n > 1 (generate)
        self.tokenizer = None
        self.eos_ids: set[int] = set()
        if settings.kind == "completions" and self.kind != RLSR_SERVE:
            path = tokenizer_path or settings.model
            try:
                self.tokenizer = load_chat_tokenizer(path)
            except (OSError, ValueError) as err:
                self.client.close()
                raise ValueError(
                    f"--backend openai-completions renders each prompt with the model's chat "
                    f"template here, but no tokenizer loads from {path!r} "
                    f"({type(err).__name__}); give --tokenizer PATH (a folder or hub id with "
                    "the served model's tokenizer), or use --backend openai-chat."
                ) from None
            self.eos_ids = generation_eos_ids(path, self.tokenizer)

    # ------------------------------------------------------------------ what the server can do

    def _models(self) -> _Served:
        data, _ = self.client.run(self.client.call("GET", "/models", retries=0))
        try:
            entries = list(data["data"])
            ids = [e["id"] for e in entries]
        except (KeyError, TypeError) as err:
            raise EndpointError(
                f"{self.client.base}/models did not answer an OpenAI model list ({err}); "
                "--base-url must be the API root, e.g. http://localhost:8000/v1."
            ) from None
        if self.settings.model not in ids:
            shown = ", ".join(repr(i) for i in ids[:10]) + (" ..." if len(ids) > 10 else "")
            raise EndpointError(
                f"{self.client.base} does not serve model {self.settings.model!r}; it serves "
                f"{shown}: give one of them as --model."
            )
        entry = entries[ids.index(self.settings.model)]
        limit = entry.get("max_model_len")
        return _Served(entry, server_kind(entry), int(limit) if limit else None)

    @property
    def fallbacks_off(self) -> str | None:
        """Why this endpoint cannot run the Sec. C.3 fallbacks (None: it can)."""
        if self.kind == RLSR_SERVE:
            return "rlsr serve applies the Sec. C.3 fallbacks itself (recorded per sample)"
        if self.settings.kind == "chat" and self.kind != "vllm":
            return (
                "the chat endpoint cannot continue an assistant message (vLLM's "
                "continue_final_message); the server is not vLLM"
            )
        if self.settings.kind == "completions" and self.kind == RLSR_SERVE:
            return "rlsr serve has no /v1/completions"
        return None

    @property
    def scoring_off(self) -> str | None:
        """Why the log-prob scorer / DCS cannot run here (None: they can)."""
        if self.settings.kind == "completions" and self.kind == "vllm":
            return None
        return (
            "the log-prob scorer and DCS need teacher-forced log-probs of the answer tokens "
            "(vLLM's prompt_logprobs on /v1/completions); "
            + (f"this endpoint ({self.settings.kind}, server {self.kind!r}) does not return them")
            + ": drop logprob from --scorers (and --dcs), or use --backend openai-completions "
            "against vllm serve"
        )

    def record(self) -> dict:
        """run.json's ``endpoint`` entry (no key: only the variable's name)."""
        return {
            "base_url": self.client.base,
            "api": self.settings.kind,
            "server": self.kind,
            "served_model": {
                k: self.served.entry.get(k) for k in ("id", "root", "owned_by", "max_model_len")
            },
            "api_key_env": self.settings.api_key_env,
            "concurrency": self.settings.concurrency,
            "token_ids": self.kind == "vllm",
        }

    # ------------------------------------------------------------------ journal and usage

    def use_journal(self, path: str | os.PathLike) -> None:
        """Journal finished requests in ``path`` (one per dataset folder; the runner sets it)."""
        if self.client.journal is not None:
            self.client.journal.close()
        self.client.journal = RequestJournal(path)
        self.client.counters = _Counters()

    def usage(self) -> dict:
        """What the endpoint was asked, for metrics.json: this process's HTTP requests and
        retries, requests answered from the journal, and the journal's totals (every finished
        request of the run, all reruns together: tries and tokens the server reported)."""
        c, j = self.client.counters, self.client.journal
        return {
            "http_requests": c.requests,
            "retries": c.retries,
            "finished_requests": c.finished,
            "replayed_from_journal": c.replayed,
            "journal": None if j is None else {
                "finished_requests": len(j), "tries": j.attempts,
                "prompt_tokens": j.prompt_tokens, "completion_tokens": j.completion_tokens,
            },
        }  # fmt: skip

    def close(self) -> None:
        self.client.close()

    # ------------------------------------------------------------------ Backend interface

    def render(self, messages: list[dict]) -> str:
        if self.kind == RLSR_SERVE:
            return chat_prompt_text([{"role": "user", "content": served_question(messages)}])
        if self.settings.kind == "chat":
            return chat_prompt_text(messages)
        return render_chat(self.tokenizer, messages)

    def check_fits(self, prompt_tokens: int, max_tokens: int) -> None:
        """``ValueError`` when the server's ``max_model_len`` (if it says) cannot hold the
        request: vLLM would refuse it, or cut the answer at the context limit."""
        limit = self.served.max_model_len
        if limit is not None and prompt_tokens + max_tokens > limit:
            raise ValueError(
                f"a request of {prompt_tokens} prompt tokens + {max_tokens} new tokens exceeds "
                f"the server's maximum context length {limit} (vllm serve --max-model-len); "
                "start it with a larger --max-model-len or lower --max-new-tokens."
            )

    def _request(self, text: str, sampling: Sampling) -> tuple[str, dict]:
        model = self.settings.model
        if self.settings.kind == "chat":
            messages, continuation = split_chat_prompt(text)
            return "/chat/completions", chat_body(model, messages, continuation, sampling,
                                                  self.kind)  # fmt: skip
        if self.kind == "vllm":
            ids = encode_prompt(self.tokenizer, text)
            self.check_fits(len(ids), sampling.max_new_tokens)
            return "/completions", completions_body(model, ids, sampling, "vllm")
        return "/completions", completions_body(model, text, sampling, self.kind)

    def _reader(self, n: int, logprobs: bool) -> Callable[[dict], list[Generation]]:
        chat = self.settings.kind == "chat"
        read = chat_generation if chat else completion_generation
        eos, served = self.eos_ids, self.kind == RLSR_SERVE

        def check(data: dict) -> list[Generation]:
            choices = sorted(data["choices"], key=lambda c: c["index"])
            if len(choices) != n:
                raise ValueError(f"{len(choices)} choices for n={n}")
            gens = [read(c, eos, logprobs) for c in choices]
            if served:  # rlsr serve: the full text it decided on, and its decision
                for g, c in zip(gens, choices, strict=True):
                    ext = c["rlsr"]
                    g.text = ext["raw_completion"]
                    g.served = {k: ext[k] for k in _SERVED_FIELDS}
            return gens

        return check

    def generate(self, prompts: Sequence[str], sampling: Sampling) -> list[list[Generation]]:
        """``sampling.n`` samples per prompt: one request with ``n`` (vLLM, OpenAI), or, where
        the server refuses ``n > 1`` with a 400, ``n`` requests of one sample each with seeds
        ``seed, seed + 1, ...`` (``n_by_requests``, then used for the rest of the run)."""
        if not prompts:
            return []
        if sampling.n > 1 and not self.n_by_requests:
            try:
                return self._generate(prompts, sampling)
            except EndpointError as err:
                if err.status != 400:
                    raise
                self.n_by_requests = True
        if sampling.n > 1:
            base = sampling.seed or 0
            singles = [replace(sampling, n=1, seed=base + j) for j in range(sampling.n)]
            per_seed = [self._generate(prompts, s) for s in singles]
            return [[gens[p][0] for gens in per_seed] for p in range(len(prompts))]
        return self._generate(prompts, sampling)

    def _generate(self, prompts: Sequence[str], sampling: Sampling) -> list[list[Generation]]:
        check = self._reader(sampling.n, sampling.logprobs)
        calls = [("POST", *self._request(p, sampling), check) for p in prompts]
        return self.client.run(self.client.call_all(calls))

    def score(self, contexts: Sequence[str], continuations: Sequence[str]) -> list[list[float]]:
        """Per-token log p(continuation | context), teacher-forced by a vLLM server
        (``prompt_logprobs``), tokenised as ``VLLMBackend.score`` does."""
        if self.scoring_off:
            raise ValueError(self.scoring_off)
        calls = []
        for context, continuation in zip(contexts, continuations, strict=True):
            a = encode_prompt(self.tokenizer, context)
            b = encode_prompt(self.tokenizer, continuation)
            self.check_fits(len(a) + len(b), 1)

            def check(data, a=a, b=b):
                (choice,) = data["choices"]
                if choice.get("prompt_logprobs") is None:
                    raise ValueError("no prompt_logprobs in the answer")
                return continuation_logprobs_of(choice, a, b)

            calls.append(("POST", "/completions", score_body(self.settings.model, a + b), check))
        return self.client.run(self.client.call_all(calls))


# The ``rlsr`` extension fields a sample keeps from ``rlsr serve`` (its decision and from what).
_SERVED_FIELDS = ("decision", "answer", "confidence", "score", "tau", "rule", "format_ok",
                  "fallbacks", "fallback_error")  # fmt: skip

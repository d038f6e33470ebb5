"""``rlsr evaluate --backend openai-completions|openai-chat`` and ``rlsr serve --upstream``: any
model behind an OpenAI-compatible endpoint, through ``rlsr.generation.http_client``.

The server's kind (``rlsr.generation.openai_api.server_kind``) decides the protocol: ``vllm
serve`` gets token-id prompts and returns token ids, so ``openai-completions`` equals ``--backend
vllm`` sample for sample (fallbacks as prompt + response + suffix, the log-prob scorer through
``prompt_logprobs``); ``openai-chat`` continues the assistant message for the fallbacks
(``continue_final_message``) where the server is vLLM, elsewhere ``fallbacks_off`` says why.
``rlsr serve`` runs the fallbacks itself and answers its decision (read by
``rlsr.evaluation.deploy.audit``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from rlsr.config import resolve_model_path
from rlsr.data.formatting import USER_PROMPT_TEMPLATE
from rlsr.generation import ENDPOINT_BACKENDS
from rlsr.generation.backends import (
    Completion,
    EngineRejected,
    EngineUnavailable,
    Generation,
    Sampling,
    check_context,
    encode_prompt,
    generation_eos_ids,
    load_chat_tokenizer,
    render_chat,
)
from rlsr.generation.http_client import EndpointClient, EndpointError, EndpointSettings
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
    "EndpointBackend",
    "chat_prompt_text",
    "split_chat_prompt",
    "served_question",
]


_CHAT_PREFIX = "\x00rlsr-chat:"


def chat_prompt_text(messages: list[dict]) -> str:
    """The runner's prompt text for a chat endpoint: the messages as JSON between two NULs
    (``json.dumps`` escapes any NUL inside); a fallback context appended to it comes back from
    ``split_chat_prompt`` as the assistant message to continue."""
    return _CHAT_PREFIX + json.dumps(messages, ensure_ascii=False) + "\x00"


def split_chat_prompt(text: str) -> tuple[list[dict], str]:
    """``(messages, continuation)`` of ``chat_prompt_text(messages) + continuation``."""
    if not text.startswith(_CHAT_PREFIX):
        raise ValueError("not a chat prompt text (rlsr.generation.endpoint.chat_prompt_text)")
    end = text.index("\x00", len(_CHAT_PREFIX))
    return json.loads(text[len(_CHAT_PREFIX) : end]), text[end + 1 :]


def served_question(messages: list[dict]) -> str:
    """The problem text ``rlsr serve`` expects as the user message (it applies its own system
    prompt and ``USER_PROMPT_TEMPLATE``, so the dataset's template is taken off)."""
    user = [m["content"] for m in messages if m.get("role") == "user"][-1]
    head, tail = USER_PROMPT_TEMPLATE.split("{problem}")
    if user.startswith(head) and user.endswith(tail) and len(user) >= len(head) + len(tail):
        return user[len(head) : len(user) - len(tail)]
    return user


@dataclass
class _Served:  # what /v1/models said about the model
    entry: dict
    kind: str
    max_model_len: int | None = field(default=None)


class EndpointBackend:
    """The ``Backend`` interface on an endpoint: synchronous ``generate``/``score`` (``rlsr
    evaluate``) and asynchronous ``complete`` (``rlsr serve``) over one client. Construction
    checks, before anything is written, that the server answers, accepts the key and serves
    ``model``; ``fallbacks_off`` / ``scoring_off`` say what it cannot do (None: it can)."""

    eval_batch_size = 256  # prompts per runner window; --concurrency bounds what is in flight

    def __init__(
        self,
        settings: EndpointSettings,
        tokenizer_path: str | None = None,
        *,
        server: str | None = None,
        trust_remote_code: bool = False,
    ) -> None:
        """``server``: the server's kind when known (``rlsr serve --upstream``: ``vllm``), which
        skips asking ``/v1/models`` now (it may be down yet; ``check`` asks later)."""
        self.settings = settings
        self.client = EndpointClient(settings)
        try:
            self.served = self._models() if server is None else _Served({}, server)
        except BaseException:
            self.client.close()
            raise
        self.kind = self.served.kind
        self.n_by_requests = False  # set when the server refused n > 1 (generate)
        self._calls = 0  # ``complete`` calls waiting on the server
        self.tokenizer = None
        self.eos_ids: set[int] = set()
        if settings.kind == "completions" and self.kind != RLSR_SERVE:
            # the served name stays as given (the server knows the model by it); a shipped alias
            # (tiny-warm, ...) renders with the tokenizer of the folder it names
            path = resolve_model_path(tokenizer_path or settings.model)
            try:
                self.tokenizer = load_chat_tokenizer(path, trust_remote_code)
            except (OSError, ValueError) as err:
                self.client.close()
                raise ValueError(
                    f"--backend openai-completions renders each prompt with the model's chat "
                    f"template here, but no tokenizer loads from {path!r} "
                    f"({type(err).__name__}); give --tokenizer PATH (a folder or hub id with "
                    "the served model's tokenizer), or use --backend openai-chat."
                ) from None
            self.eos_ids = generation_eos_ids(path, self.tokenizer, trust_remote_code)

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
        return None

    @property
    def scoring_off(self) -> str | None:
        """Why the log-prob scorer / DCS cannot run here (None: they can)."""
        if self.settings.kind == "completions" and self.kind == "vllm":
            return None
        return (
            "the logprob and expected scorers and DCS need teacher-forced log-probs of the "
            "model's own text (vLLM's prompt_logprobs on /v1/completions); this endpoint "
            f"({self.settings.kind}, server {self.kind!r}) does not return them: drop logprob and "
            "expected from --scorers (and --dcs), or use --backend openai-completions against "
            "vllm serve"
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
        """Journal finished requests in ``path`` (one per dataset folder)."""
        self.client.use_journal(path)

    def usage(self) -> dict:
        """metrics.json's record of what was asked: this process's requests and retries, those
        answered from the journal, and the journal's totals over all reruns."""
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
        check_context(
            prompt_tokens,
            max_tokens,
            self.served.max_model_len,
            "the server (vllm serve "
            "--max-model-len); start it with a larger --max-model-len or lower --max-new-tokens.",
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
        """``sampling.n`` samples per prompt: one request with ``n``, or, once the server refused
        ``n > 1`` with a 400, ``n`` requests with seeds ``seed, seed + 1, ...``."""
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
        """Per-token log p(continuation | context) from a vLLM server's ``prompt_logprobs``."""
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

    # ------------------------------------------------------------------ asynchronous (rlsr serve)

    def unavailable(self, err: EndpointError) -> EngineUnavailable:
        """``rlsr serve``'s answer to a failed request: 504 on a timeout, else 502."""
        base = self.client.base
        if err.reason == "timeout":
            return EngineUnavailable(f"the upstream {base} timed out", 504)
        if err.reason == "connection":
            return EngineUnavailable(f"the upstream {base} is unreachable: {err.detail}", 502)
        if err.status is not None and err.status != 200:
            said = err.detail.removeprefix(f"HTTP {err.status}: ")
            return EngineUnavailable(f"the upstream {base} answered {err.status}: {said}", 502)
        return EngineUnavailable(f"the upstream {base} failed: {err.detail}", 502)

    async def complete(self, ids: list[int], sampling: Sampling) -> Completion:
        """One prompt (token ids) on the caller's event loop, as ``generate`` sends it to vLLM; a
        4xx but 401/403/404/429 is ``EngineRejected``, any other failure ``EngineUnavailable``."""
        body = completions_body(self.settings.model, ids, sampling, self.kind)
        self._calls += 1
        try:
            resp, (gen,) = await self.client.call(
                "POST", "/completions", body, check=self._reader(1, False)
            )
        except EndpointError as err:
            if err.reason == "refused" and err.status not in (401, 403, 404, 429):
                raise EngineRejected(f"the upstream refused the request: {err.detail}") from err
            raise self.unavailable(err) from err
        finally:
            self._calls -= 1
        usage = resp.get("usage") or {}
        return Completion(
            gen.text,
            gen.finish_reason,
            usage.get("prompt_tokens") or len(ids),
            usage.get("completion_tokens") or len(gen.token_ids),
        )

    def running(self) -> int:
        return self._calls

    async def check(self) -> None:
        try:
            await self.client.call("GET", "/models")
        except EndpointError as err:
            raise self.unavailable(err) from err

    async def aclose(self) -> None:
        await self.client.aclose()


# The ``rlsr`` extension fields a sample keeps from ``rlsr serve`` (its decision and from what).
_SERVED_FIELDS = ("decision", "answer", "confidence", "score", "tau", "rule", "format_ok",
                  "fallbacks", "fallback_error")  # fmt: skip

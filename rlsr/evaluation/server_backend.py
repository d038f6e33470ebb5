"""Generation through TRL's vLLM server (``grpo.vllm_mode=server``, slurm/train.slurm on several
nodes): the held-out evaluation's backend when the rollouts come from a server.

After a weight sync the server holds exactly the policy's weights, so the held-out evaluation
asks it, as ``rlsr evaluate --backend vllm`` asks its own engine on checkpoint-N:

* the endpoint and request fields are TRL's (``trl.generation.vllm_client.VLLMClient.generate``:
  ``POST /v1/completions`` with token-id prompts, ``n``, ``temperature``, ``top_p``, ``top_k``,
  ``min_p``, ``repetition_penalty``, ``max_tokens``, ``logprobs``, ``return_token_ids``), sent on
  the trainer's own ``VLLMClient`` session (its retries, its server URL). TRL's ``generate``
  returns token ids only; the held-out protocol also needs vLLM's ``text`` and
  ``finish_reason`` (what ``VLLMBackend`` reads from its ``CompletionOutput``), which the same
  response carries, so the choices are read here.
* the request equals ``VLLMBackend``'s: prompts tokenised with ``encode_prompt`` (no special
  tokens added), ``vllm_sampling_kwargs``' values, and every field the server would otherwise
  fill from the model's ``generation_config.json`` (``top_k``, ``min_p``, ``repetition_penalty``)
  sent explicitly, since ``vllm.LLM.generate`` with explicit ``SamplingParams`` does not apply
  those defaults.
* Sec. C.3 fallbacks are ordinary requests (prompt + response + suffix, as token ids).
* ``score`` is TRL's ``get_sequence_logprobs`` request (``prompt_logprobs``, ``max_tokens`` 1,
  greedy), read as ``VLLMBackend.score`` reads ``prompt_logprobs``.
* every request is checked against the server's ``max_model_len`` (``GET /v1/models``) first:
  the server answers an over-long request with HTTP 400, and the evaluation must not lose an
  answer to the context limit (``check_fits``).

Each HTTP request is complete when it returns: no request of the evaluation stays on the server
to be mixed into TRL's next rollouts (which come back on their own HTTP responses anyway).
Sampled (``temperature > 0``) per-token log-probs differ from ``VLLMBackend``'s: train.slurm
starts the server with ``--logprobs-mode processed_logprobs`` (after temperature), the offline
engine returns raw ones; greedy ones and ``score`` are the same (the held-out protocol uses
neither sampled log-probs).
"""

from __future__ import annotations

from collections.abc import Sequence

from rlsr.generation.backends import Generation, Sampling, encode_prompt, render_chat
from rlsr.generation.openai_api import (
    completion_generation,
    completions_body,
    continuation_logprobs_of,
    score_body,
)

__all__ = ["ServerBackend", "server_request", "server_generation"]


def server_request(model: str, prompts: list[list[int]], sampling: Sampling) -> dict:
    """The ``/v1/completions`` body for ``prompts`` (token ids): TRL's fields
    (``VLLMClient.generate``) with ``VLLMBackend``'s values (``rlsr.generation.openai_api.
    completions_body`` for a vLLM server)."""
    return completions_body(model, prompts, sampling, kind="vllm")


# One ``/v1/completions`` choice read back as ``vllm_generation`` reads the offline engine's.
server_generation = completion_generation


class ServerBackend:
    """Generation and scoring on a running vLLM server (``vllm serve`` with TRL's flags, as
    slurm/train.slurm starts it) through a TRL ``VLLMClient`` (``base_url``, ``model``,
    ``session``). Same interface and same outputs as ``VLLMBackend`` on the same weights."""

    # Prompts per runner call when eval.batch_size is not set: as VLLMBackend, the server
    # schedules them itself (continuous batching); one HTTP request per call.
    eval_batch_size = 256

    def __init__(self, client, tokenizer, eos_ids: set[int]) -> None:
        self.client = client
        self.tokenizer = tokenizer
        self.eos_ids = set(eos_ids)
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
        """``ValueError`` with the numbers when ``prompt_tokens + max_tokens`` exceeds the
        server's ``max_model_len`` (it would refuse the request with HTTP 400)."""
        limit = self.max_model_len
        if prompt_tokens + max_tokens > limit:
            raise ValueError(
                f"a request of {prompt_tokens} prompt tokens + {max_tokens} new tokens exceeds "
                f"the vLLM server's maximum context length {limit} (its --max-model-len); "
                "start the server with a larger --max-model-len (slurm/train.slurm: "
                "RLSR_VLLM_MAX_MODEL_LEN) or lower eval.max_new_tokens."
            )

    def _call(self, method: str, path: str, body: dict | None = None) -> dict:
        url = f"{self.client.base_url}{path}"
        if method == "GET":
            response = self.client.session.get(url)
        else:
            response = self.client.session.post(url, json=body)
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
        body = server_request(self.client.model, ids, sampling)
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
                server_generation(c, self.eos_ids, sampling.logprobs)
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
        body = score_body(self.client.model, prompts)
        choices = sorted(self._call("POST", "/v1/completions", body)["choices"],
                         key=lambda c: c["index"])  # fmt: skip
        return [
            continuation_logprobs_of(choice, a, b)
            for choice, a, b in zip(choices, ctx, cont, strict=True)
        ]

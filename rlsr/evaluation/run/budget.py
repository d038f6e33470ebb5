"""Whether ``rlsr evaluate``'s generation budget fits the model, checked before weights load,
on every backend and for every dataset:

    longest prompt + --max-new-tokens + reserve <= context,

``reserve``: what an answer may add beyond its budget (the Sec. C.3 fallbacks with their
suffixes, one log-prob position; ``rlsr.config.heldout.heldout_answer_tokens``); ``context``:
transformers: the model's ``max_position_embeddings``; vLLM: ``--max-model-len``, else the
model's; an endpoint: the server's ``max_model_len`` (``GET /v1/models``), else the model's when
its config is here. A refusal names the numbers and a fix that works (the largest
``--max-new-tokens`` that fits; ``--max-model-len`` only up to the model's positions). RoPE-scaled
models are left to the engine's own check. A user task's rows are checked as they load
(``rlsr.data.PromptRoom``, ``too_long: skip``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from rlsr.config import resolve_model_path
from rlsr.config.heldout import heldout_answer_tokens
from rlsr.core.tokenization import model_context_length, prompt_token_counter
from rlsr.data.loading import PromptRoom
from rlsr.generation.backends import encode_prompts, load_chat_tokenizer, render_chat
from rlsr.generation.endpoint import ENDPOINT_BACKENDS, EndpointBackend
from rlsr.generation.openai_api import RLSR_SERVE

__all__ = [
    "ModelContext",
    "evaluation_context",
    "answer_reserve",
    "budget_fix",
    "budget_refusal",
    "token_bound",
    "GenerationBudget",
    "generation_budget",
]

BUDGET_FLAG = "--max-new-tokens"


@dataclass(frozen=True)
class ModelContext:
    """The context a prompt and its answer must fit: ``tokens``, what it is, where it was read,
    the model's own ``positions`` and ``raise_flag``, the setting that could lengthen it."""

    tokens: int
    label: str
    source: str
    positions: int | None = None
    raise_flag: str | None = None

    def describe(self) -> str:
        return f"{self.label} ({self.source})"


def evaluation_context(
    backend: str,
    model: str,
    positions: tuple[int, str] | None,
    *,
    max_model_len: int | None = None,
    served_max_model_len: int | None = None,
) -> ModelContext | None:
    """The context of ``rlsr evaluate --backend BACKEND --model MODEL`` (module doc); None when
    nothing says."""
    own = None if positions is None else positions[0]
    if backend == "vllm" and max_model_len is not None:
        return ModelContext(max_model_len, f"the vLLM engine's context of {max_model_len} tokens",
                            "--max-model-len", own, "--max-model-len")  # fmt: skip
    if backend in ENDPOINT_BACKENDS and served_max_model_len is not None:
        return ModelContext(
            served_max_model_len, f"the server's context of {served_max_model_len} tokens",
            "its max_model_len, GET /v1/models", own, "the server's --max-model-len (vllm serve)",
        )  # fmt: skip
    if positions is None:
        return None
    return ModelContext(own, f"{model}'s context of {own} positions", positions[1], own)


def answer_reserve(settings) -> int:
    """Tokens an answer may need beyond ``max_new_tokens`` (the Sec. C.3 fallbacks with their
    suffixes, one log-prob position): ``heldout_answer_tokens`` minus the budget."""
    return heldout_answer_tokens(settings) - settings.max_new_tokens


def _reserve_text(reserve: int) -> str:
    if reserve > 1:
        return f" + {reserve} for the Sec. C.3 fallbacks and a log-prob position"
    return f" + {reserve} for a log-prob position" if reserve else ""


def budget_fix(context: ModelContext, longest: int, budget: int, reserve: int) -> str:
    """What makes ``longest`` + ``budget`` + ``reserve`` fit ``context``: the largest budget that
    fits, and, where the model's positions allow it, the longer context needed."""
    need = longest + budget + reserve
    fits = context.tokens - longest - reserve
    fixes = [f"pass {BUDGET_FLAG} <= {fits}"] if fits >= 1 else []
    room = context.positions
    if context.raise_flag and room is not None and room > context.tokens:
        if need <= room:
            fixes.append(f"raise {context.raise_flag} to >= {need} (the model has {room} "
                         "positions)")  # fmt: skip
        elif not fixes and room - longest - reserve >= 1:
            fixes.append(f"raise {context.raise_flag} to {room} (the model's positions) and pass "
                         f"{BUDGET_FLAG} <= {room - longest - reserve}")  # fmt: skip
    if not fixes:
        fixes.append("use a model with a longer context (the prompt alone fills this one)")
    return ", or ".join(fixes)


def budget_refusal(
    context: ModelContext, longest: int | None, budget: int, reserve: int, what: str = ""
) -> str | None:
    """The one-line refusal when the ``longest`` prompt (None: not countable) + ``budget`` +
    ``reserve`` exceeds ``context``, else None; ``what`` (the dataset) goes first."""
    head = f"{what}: " if what else ""
    extra = _reserve_text(reserve)
    if longest is None:  # no tokenizer here: only a budget that leaves no room at all is known
        if budget + reserve < context.tokens:
            return None
        return (f"{head}{BUDGET_FLAG} {budget}{extra} leaves no room for a prompt in "
                f"{context.describe()}: pass {BUDGET_FLAG} below {context.tokens - reserve} "
                "by at least the longest prompt's tokens.")  # fmt: skip
    need = longest + budget + reserve
    if need <= context.tokens:
        return None
    return (f"{head}{BUDGET_FLAG} {budget} + the longest prompt ({longest} tokens){extra} = "
            f"{need} tokens, more than {context.describe()}: "
            f"{budget_fix(context, longest, budget, reserve)}.")  # fmt: skip


@dataclass
class GenerationBudget:
    """The budget check of one ``rlsr evaluate`` run (``tokenizer`` None: none here)."""

    context: ModelContext
    budget: int
    reserve: int
    tokenizer: object | None = None

    @property
    def room(self) -> PromptRoom | None:
        """What a user task's rows must fit, each checked as it loads."""
        if self.tokenizer is None:
            return None
        return PromptRoom(
            count=prompt_token_counter(self.tokenizer), context=self.context.tokens,
            budget=self.budget + self.reserve, context_name=self.context.source,
            budget_name=f"{BUDGET_FLAG} {self.budget}{_reserve_text(self.reserve)}",
            fix=self._task_fix,
        )  # fmt: skip

    def _task_fix(self, too_long: Sequence[int]) -> str:
        """The fix of a task's too-long rows: a budget that fits every one that can fit at all."""
        fitting = [n for n in too_long if n + self.reserve < self.context.tokens]
        return budget_fix(self.context, max(fitting or too_long), self.budget, self.reserve)

    def longest(self, prompts: Mapping[str, Sequence[list[dict]]]) -> tuple[int, str] | None:
        """(most prompt tokens, its dataset) among ``prompts`` (dataset -> conversations), as
        the backends render and tokenise them; None without a tokenizer, or when every prompt
        fits by ``token_bound`` (then nothing is tokenised)."""
        if self.tokenizer is None:
            return None
        texts = {name: [render_chat(self.tokenizer, m) for m in rows]
                 for name, rows in prompts.items()}  # fmt: skip
        bound = max((token_bound(t) for rows in texts.values() for t in rows), default=0)
        if bound + self.budget + self.reserve <= self.context.tokens:
            return None
        best = None
        for name, rows in texts.items():
            counts = [len(ids) for ids in encode_prompts(self.tokenizer, rows)]
            if counts and (best is None or max(counts) > best[0]):
                best = (max(counts), name)
        return best

    def check(self, prompts: Mapping[str, Sequence[list[dict]]]) -> None:
        """``ValueError`` (``budget_refusal``) when the longest prompt does not fit."""
        if self.tokenizer is None:
            message = budget_refusal(self.context, None, self.budget, self.reserve)
        else:
            longest, where = self.longest(prompts) or (0, "")
            message = budget_refusal(self.context, longest, self.budget, self.reserve, where)
        if message is not None:
            raise ValueError(message)


def token_bound(text: str) -> int:
    """An upper bound on the tokens of ``text``: its UTF-8 bytes + 1 (a byte-level BPE or
    byte-fallback SentencePiece token covers at least one byte, a word-level one a character;
    the 1 is SentencePiece's prefix space)."""
    return len(text.encode("utf-8")) + 1


def generation_budget(args, settings, endpoint: EndpointBackend | None) -> GenerationBudget | None:
    """The budget check of ``rlsr evaluate`` ARGS, read before any weights load; None when the
    context is unknown, or for ``rlsr serve`` (it decodes with the budget it was certified
    with)."""
    if endpoint is not None and endpoint.kind == RLSR_SERVE:
        return None
    path = resolve_model_path((args.tokenizer if endpoint else None) or args.model)
    context = evaluation_context(
        args.backend, args.model, model_context_length(path), max_model_len=args.max_model_len,
        served_max_model_len=endpoint.served.max_model_len if endpoint else None,
    )  # fmt: skip
    if context is None:
        return None
    tokenizer = endpoint.tokenizer if endpoint else None
    # an endpoint's chat API renders on the server; its model's template counts if it is here
    if tokenizer is None and (endpoint is None or Path(path).expanduser().is_dir()):
        try:
            tokenizer = load_chat_tokenizer(path, trust_remote_code=args.trust_remote_code)
        except (OSError, ValueError):  # the backend reports an unloadable model itself
            tokenizer = None
    return GenerationBudget(context, settings.max_new_tokens, answer_reserve(settings), tokenizer)

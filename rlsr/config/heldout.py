"""The held-out plan: evaluation during training (``eval.*``, ``HeldOutSettings``) resolved
against the rest of the run's settings (``resolve_heldout`` -> ``ResolvedHeldOut``): which
datasets, which backend, which answer budget and scorers. ``rlsr.evaluation.in_training`` runs
it; ``rlsr.config.check_settings`` calls ``resolve_heldout`` so a held-out setting that cannot
work stops the run before training starts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rlsr.config.checks import ConfigError, check, is_int, is_number
from rlsr.data import VERIFIERS as VERIFIER_NAMES
from rlsr.data import get_spec, resolve_datasets
from rlsr.engines import engine_from_env
from rlsr.prompts import (
    ANSWER_FALLBACK_SUFFIX,
    CONFIDENCE_FALLBACK_SUFFIX,
    NO_SYSTEM_PROMPT,
    system_prompt_names,
)
from rlsr.verifiers import is_plugin_name

__all__ = [
    "HELDOUT_BACKENDS",
    "HeldOutSettings",
    "ResolvedHeldOut",
    "heldout_engine_tokens",
    "resolve_heldout",
]

# eval.backend: auto = the colocated vLLM engine when the rollouts use one, else transformers.
HELDOUT_BACKENDS = ("auto", "transformers", "vllm")


@dataclass
class HeldOutSettings:
    """Held-out evaluation during training (``rlsr.evaluation.in_training``): the current policy
    answers held-out questions with the code of ``rlsr evaluate`` (prompts, Sec. C.3 fallbacks,
    verifiers, metrics) every ``every`` optimizer steps, into ``output_dir/eval/step-N/<dataset>``.
    Each field mirrors the ``rlsr evaluate`` flag of the same name (docs/training.md, "Watch a
    run")."""

    # Optimizer steps between evaluations (steps N, 2N, ...); 0: no held-out evaluation.
    every: int = 0
    # Also evaluate the last step when it is not a multiple of ``every`` (needs every > 0).
    at_end: bool = True
    # Also evaluate step 0 (the model before any update: the baseline of the curves).
    at_start: bool = False
    # Dataset names or groups, as `rlsr evaluate --datasets` (`rlsr datasets` lists them).
    datasets: list[str] = field(default_factory=list)
    # Split of every dataset; null: each dataset's evaluation split (as `rlsr evaluate`).
    split: str | None = None
    # First N questions of each dataset (null: all of them).
    limit: int | None = 200
    # {dataset: local path}, as `rlsr evaluate --data-path NAME=PATH`.
    data_path: dict[str, str] = field(default_factory=dict)
    # {dataset: verifier}, as `rlsr evaluate --verifier NAME=VERIFIER` (default: the dataset's).
    verifiers: dict[str, str] = field(default_factory=dict)
    # null: the training dataset's system prompt (paper Sec. C.5: evaluate with the training
    # domain's prompt); or "simple" | "long" | "none".
    system_prompt: str | None = None
    # auto: the colocated vLLM engine (weights synced first) when grpo.use_vllm with
    # vllm_mode=colocate, else transformers on a merged inference copy of the policy.
    backend: str = "auto"
    # New tokens per answer; null: method.evaluate_args' --max-new-tokens, else
    # grpo.max_completion_length (what the policy is trained to).
    max_new_tokens: int | None = None
    temperature: float = 0.0  # 0: greedy (paper Sec. C.5)
    top_p: float = 1.0
    seed: int = 0  # sampling and bootstrap seed
    batch_size: int | None = None  # null: the backend's (transformers 8, vLLM 256 in flight)
    fallbacks: bool = True  # the Sec. C.3 answer / confidence fallbacks
    fallback_max_new_tokens: int = 64
    # Confidence scorers; null: the --scorers of method.evaluate_args, else ["verbalized"].
    scorers: list[str] | None = None
    bootstrap: int = 1000  # bootstrap resamples of the metrics' confidence intervals
    # The LLM judge of judge-verified datasets: an OpenAI-compatible server (a second model in
    # the training processes would not fit); required when such a dataset is evaluated.
    judge_base_url: str | None = None
    judge_model: str | None = None  # null: rlsr evaluate's default judge model
    judge_timeout: float = 60.0
    judge_max_retries: int = 4
    judge_max_answer_chars: int = 1000


def heldout_engine_tokens(
    max_new_tokens: int, fallbacks: bool, fallback_max_new_tokens: int, response_format: str
) -> int:
    """Tokens one held-out answer may need on the engine beyond its prompt: the answer; with the
    Sec. C.3 fallbacks (``tags`` format), for each of the two a separator, its suffix and a
    continuation; and one more position for the log-prob scorer's pass over all of it. A suffix
    is counted as its UTF-8 bytes + 2, a bound on its tokens for byte-level (and byte-fallback)
    tokenizers, so no tokenizer is needed here. The answer's text, re-tokenised inside a fallback
    context, is counted as ``max_new_tokens``: ``VLLMBackend`` refuses, with the numbers, any
    request that would still exceed the engine (it never lets vLLM cut one short)."""
    need = int(max_new_tokens) + 1
    if fallbacks and response_format != "plain":
        for suffix in (ANSWER_FALLBACK_SUFFIX, CONFIDENCE_FALLBACK_SUFFIX):
            need += len(suffix.encode()) + 2 + int(fallback_max_new_tokens)
    return need


def _task_with_eval(name: str) -> bool:
    """True when ``name`` is a user task with its own evaluation split (docs/tasks.md)."""
    try:
        spec = get_spec(name)
    except ValueError:
        return False
    return spec.task is not None and spec.task.has_eval


@dataclass(frozen=True)
class ResolvedHeldOut:
    """``eval.*`` with every default filled in (``resolve_heldout``): what the in-training
    evaluator runs. ``jobs``: ``(folder, dataset, split)`` as ``rlsr evaluate`` names its output
    folders (the dataset's name; ``name@split`` when ``eval.split`` is set)."""

    every: int
    at_end: bool
    at_start: bool
    jobs: tuple[tuple[str, str, str], ...]
    verifiers: dict[str, str]
    backend: str
    system_prompt: str | None
    max_new_tokens: int
    scorers: tuple[str, ...]
    response_format: str
    settings: HeldOutSettings
    # tokens an answer may need beyond its prompt on the engine (``heldout_engine_tokens``)
    engine_tokens: int = 0


def _flag(args: Sequence[str], name: str) -> str | None:
    """The value after ``name`` in a list of command-line flags (``method.evaluate_args``)."""
    args = list(args)
    return args[args.index(name) + 1] if name in args and args.index(name) + 1 < len(args) else None


def resolve_heldout(cfg, trainer_section: str = "grpo") -> ResolvedHeldOut | None:
    """Check ``cfg.eval`` against the rest of ``cfg`` and fill in its defaults; None when off
    (``eval.every == 0``). Raises ``ConfigError`` naming the ``eval.*`` field and the fix, so a
    setting that cannot work stops the run before training starts, not at its first evaluation.
    ``cfg`` is a ``rlsr.config.TrainSettings`` (not imported: this module sits below it)."""
    e = cfg.eval
    check(
        is_int(e.every) and e.every >= 0,
        "eval.every",
        f"must be an integer >= 0 (optimizer steps between evaluations; 0: off); got {e.every!r}.",
    )
    if e.every == 0:
        return None
    check(isinstance(e.at_end, bool), "eval.at_end", "must be true or false.")
    check(isinstance(e.at_start, bool), "eval.at_start", "must be true or false.")
    datasets = e.datasets
    if isinstance(datasets, list | tuple) and not datasets and _task_with_eval(cfg.data.dataset):
        datasets = [cfg.data.dataset]  # a task trained on is evaluated on its eval split
    check(
        isinstance(datasets, list | tuple) and len(datasets) > 0,
        "eval.datasets",
        "eval.every > 0 needs datasets to evaluate, e.g. eval.datasets=[tiny] (`rlsr datasets` "
        "lists them), or set eval.every=0.",
    )
    try:
        names = resolve_datasets(list(datasets))
    except (KeyError, ValueError) as err:
        raise ConfigError("eval.datasets", str(err).strip("'\"")) from None
    for name in e.data_path or {}:
        check(
            name in names,
            f"eval.data_path.{name}",
            f"{name!r} is not among eval.datasets {names}.",
        )
        check(
            Path(e.data_path[name]).exists(),
            f"eval.data_path.{name}",
            f"{e.data_path[name]!r} does not exist; point it at a local copy of the dataset.",
        )
    for name in ("limit", "batch_size", "max_new_tokens"):
        value = getattr(e, name)
        check(
            value is None or (is_int(value) and value >= 1),
            f"eval.{name}",
            f"must be a positive integer or null; got {value!r}.",
        )
    check(
        is_int(e.fallback_max_new_tokens) and e.fallback_max_new_tokens >= 1,
        "eval.fallback_max_new_tokens",
        f"must be a positive integer; got {e.fallback_max_new_tokens!r}.",
    )
    check(
        is_number(e.temperature) and e.temperature >= 0,
        "eval.temperature",
        f"must be >= 0 (0: greedy); got {e.temperature!r}.",
    )
    check(
        is_number(e.top_p) and 0 < e.top_p <= 1,
        "eval.top_p",
        f"must be in (0, 1]; got {e.top_p!r}.",
    )
    check(is_int(e.seed), "eval.seed", f"must be an integer; got {e.seed!r}.")
    check(
        is_int(e.bootstrap) and e.bootstrap >= 0,
        "eval.bootstrap",
        f"must be an integer >= 0; got {e.bootstrap!r}.",
    )
    check(
        e.system_prompt in (None, *system_prompt_names(), NO_SYSTEM_PROMPT),
        "eval.system_prompt",
        f"got {e.system_prompt!r}; choose 'simple', 'long', 'none', a task's prompt name or null "
        "(the training dataset's).",
    )
    split = e.split
    jobs = tuple(
        (name if split is None else f"{name}@{split}", name, split or get_spec(name).split)
        for name in names
    )
    for name, vname in (e.verifiers or {}).items():
        check(
            name in names,
            f"eval.verifiers.{name}",
            f"{name!r} is not among eval.datasets {names}.",
        )
        check(
            vname in VERIFIER_NAMES or is_plugin_name(vname),
            f"eval.verifiers.{name}",
            f"unknown verifier {vname!r}; choose one of {VERIFIER_NAMES} or a plugin "
            "'package.module:function'.",
        )
    verifiers = {name: (e.verifiers or {}).get(name, get_spec(name).verifier) for name in names}
    judged = [n for n, v in verifiers.items() if v == "llm_judge"]
    check(
        not judged or bool(e.judge_base_url),
        "eval.judge_base_url",
        f"{', '.join(judged)} {'is' if len(judged) == 1 else 'are'} verified by an LLM judge; "
        "set eval.judge_base_url=http://HOST:PORT/v1 (an OpenAI-compatible server, e.g. "
        "`vllm serve meta-llama/Llama-3.1-8B-Instruct`) or evaluate other datasets.",
    )
    check(
        is_int(e.judge_max_retries) and e.judge_max_retries >= 0,
        "eval.judge_max_retries",
        f"must be an integer >= 0; got {e.judge_max_retries!r}.",
    )
    check(
        is_number(e.judge_timeout) and e.judge_timeout > 0,
        "eval.judge_timeout",
        f"must be > 0 seconds; got {e.judge_timeout!r}.",
    )
    section = getattr(cfg, trainer_section)
    colocated = bool(section.get("use_vllm")) and section.get("vllm_mode", "colocate") == "colocate"
    check(
        e.backend in HELDOUT_BACKENDS,
        "eval.backend",
        f"got {e.backend!r}; choose one of {HELDOUT_BACKENDS}.",
    )
    backend = e.backend if e.backend != "auto" else ("vllm" if colocated else "transformers")
    if backend == "vllm":
        check(
            colocated,
            "eval.backend",
            "vllm evaluates on the training processes' own colocated engine; it needs "
            "grpo.use_vllm=true with grpo.vllm_mode=colocate. Use eval.backend=transformers "
            "(or auto).",
        )
        check(
            section.get("vllm_tensor_parallel_size", 1) == 1,
            "eval.backend",
            "the colocated engine is split over a tensor-parallel group "
            "(grpo.vllm_tensor_parallel_size > 1), whose ranks must generate together; use "
            "eval.backend=transformers.",
        )
    else:
        engine = engine_from_env()
        server = bool(section.get("use_vllm")) and section.get("vllm_mode") == "server"
        fix = (
            "the vLLM server of grpo.vllm_mode=server is not used for held-out evaluation; set "
            "eval.every=0 and evaluate the checkpoints with `rlsr evaluate` (e.g. --backend vllm)"
            if server else
            "set grpo.use_vllm=true (the colocated engine gets the gathered weights) or "
            "eval.every=0 and evaluate checkpoints with `rlsr evaluate`"
        )  # fmt: skip
        check(
            not (engine.name == "fsdp" or (engine.name == "deepspeed" and engine.zero_stage == 3)),
            "eval.backend",
            f"transformers evaluation copies the whole policy per process, and {engine.label} "
            f"shards it; {fix}.",
        )
    completion = section.get("max_completion_length", 256)
    method_args = list(cfg.method.evaluate_args or [])
    method_tokens = _flag(method_args, "--max-new-tokens")  # e.g. method=sft's plain answers
    max_new = e.max_new_tokens or (int(method_tokens) if method_tokens else completion)
    response_format = _flag(method_args, "--response-format") or "tags"
    engine_tokens = heldout_engine_tokens(
        max_new, bool(e.fallbacks), e.fallback_max_new_tokens, response_format
    )
    length, prompt = section.get("vllm_max_model_length"), cfg.data.max_prompt_length
    if backend == "vllm" and length is not None and prompt is not None:
        check(
            length >= prompt + engine_tokens,
            "grpo.vllm_max_model_length",
            f"{length} tokens cannot hold a held-out answer after a prompt of "
            f"data.max_prompt_length={prompt} tokens: it needs {prompt} + {engine_tokens} "
            f"(eval.max_new_tokens {max_new}"
            + (f" + two Sec. C.3 fallbacks of eval.fallback_max_new_tokens "
               f"{e.fallback_max_new_tokens} with their suffixes" if engine_tokens > max_new + 1
               else "")
            + f" + 1) = {prompt + engine_tokens}; raise it to {prompt + engine_tokens} or remove "
            "it (the default sizes the engine for both), or set eval.backend=transformers.",
        )  # fmt: skip
    scorers = e.scorers
    if scorers is None:
        method_scorers = _flag(method_args, "--scorers")
        scorers = method_scorers.split(",") if method_scorers else ["verbalized"]
    check(
        isinstance(scorers, list | tuple) and scorers and all(isinstance(x, str) for x in scorers),
        "eval.scorers",
        f"must be a list of scorers, e.g. [verbalized, logprob]; got {scorers!r}.",
    )
    system_prompt = (
        e.system_prompt or cfg.data.system_prompt or get_spec(cfg.data.dataset).system_prompt
    )
    return ResolvedHeldOut(
        every=e.every,
        at_end=e.at_end,
        at_start=e.at_start,
        jobs=jobs,
        verifiers=verifiers,
        backend=backend,
        system_prompt=system_prompt,
        max_new_tokens=int(max_new),
        scorers=tuple(s.strip() for s in scorers),
        response_format=response_format,
        settings=e,
        engine_tokens=engine_tokens,
    )

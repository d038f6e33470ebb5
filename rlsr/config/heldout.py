"""The ``heldout:`` section (``HeldOutSettings``): evaluation during training, checked against
the rest of the run when it is planned (``resolve_heldout``: a copy with every default filled in),
so a setting that cannot work stops the run before training starts. ``rlsr.evaluation.heldout``
runs it; docs/heldout.md describes every key.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

from rlsr.config.trainer_args import grpo_get
from rlsr.core.checks import ConfigError, check, is_int, is_number
from rlsr.core.launch import launch_from_env
from rlsr.core.prompts import ANSWER_FALLBACK_SUFFIX, CONFIDENCE_FALLBACK_SUFFIX
from rlsr.data import VERIFIERS as VERIFIER_NAMES
from rlsr.data import get_spec, resolve_tasks
from rlsr.run.eval_protocol import (
    PROTOCOL_FIELDS,
    EvalProtocol,
    ProtocolError,
    check_mapping,
    protocol_from_sources,
    protocol_keys,
)
from rlsr.verifiers import is_plugin_name
from rlsr.verifiers.llm_judge import JUDGE_MAX_ANSWER_CHARS, JUDGE_MAX_RETRIES, JUDGE_TIMEOUT_S

__all__ = [
    "ASSUMED_SERVER_TOKENS_PER_S",
    "ENGINE_BACKENDS",
    "HELDOUT_BACKENDS",
    "HeldOutSettings",
    "check_server_eval_fits",
    "declared_variants",
    "heldout_answer_tokens",
    "heldout_protocol",
    "resolve_heldout",
    "server_eval_bound",
    "server_eval_tokens",
]

# auto = the vLLM engine the rollouts use (colocated: vllm; TRL's server: vllm_server), else
# transformers on a merged inference copy of the policy.
HELDOUT_BACKENDS = ("auto", "transformers", "vllm", "vllm_server")
# Held-out backends that answer on a vLLM engine: its context must hold prompt + answer.
ENGINE_BACKENDS = ("vllm", "vllm_server")

# vllm_server: the main process alone sends the requests while the others wait in a collective
# that grpo.ddp_timeout ends, so the requests get this share of it, minus a reserve for what the
# main process does after the last one (verify, write, summarise) and for clock skew.
EVAL_SHARE_OF_DDP_TIMEOUT = 0.8
EVAL_RESERVE_S = 60.0
# The server's generation rate (new tokens/s, all requests together) assumed at plan time when
# heldout.server_tokens_per_s is null. High on purpose, so only what cannot fit even at this rate
# is refused: one GPU decoding a 7-8B model at full batch should be slower (an assumption, not
# measured).
ASSUMED_SERVER_TOKENS_PER_S = 20_000.0


def _checked(accepts, message: str, **default):
    """A ``heldout`` field with its own check (``HeldOutSettings.validate``): ``accepts(value)``,
    else ``ConfigError("heldout.<name>", message.format(value))``."""
    return field(**default, metadata={"check": (accepts, message)})


_BOOL = (lambda v: isinstance(v, bool), "must be true or false.")


@dataclass
@protocol_keys
class HeldOutSettings:
    """``heldout.*``: every ``every`` optimizer steps the policy answers held-out questions with
    ``rlsr evaluate``'s code, into ``output_dir/eval/step-N/<dataset>``. Every protocol field
    (``EvalProtocol``) is a key here too, null = unset: then ``method.evaluate``'s, else the
    run's default, else the protocol's (``heldout_protocol``)."""

    every: int = 0  # optimizer steps between evaluations; 0: off
    at_end: bool = _checked(*_BOOL, default=True)  # also the last step, not a multiple of every
    at_start: bool = _checked(*_BOOL, default=False)  # also step 0 (the baseline of the curves)
    # Task names or groups, as `rlsr evaluate --tasks`. Empty: ``tasks_for[data.task]``, else
    # the trained task's own evaluation split.
    tasks: list[str] = field(default_factory=list)
    tasks_for: dict[str, list[str]] = _checked(  # data.task -> held-out tasks
        lambda v: isinstance(v, dict) and all(isinstance(t, list | tuple) for t in v.values()),
        "must map a training task to a list of held-out tasks; got {!r}.",
        default_factory=dict,
    )
    split: str | None = None  # null: each task's evaluation split
    limit: int | None = _checked(  # first N questions of each task (null: all)
        lambda v: v is None or (is_int(v) and v >= 1),
        "must be a positive integer or null; got {!r}.",
        default=200,
    )
    data_path: dict[str, str] = field(default_factory=dict)  # {task: local path of its rows}
    verifiers: dict[str, str] = field(default_factory=dict)  # {task: verifier}
    backend: str = _checked(
        lambda v: v in HELDOUT_BACKENDS,
        f"got {{!r}}; choose one of {HELDOUT_BACKENDS}.",
        default="auto",
    )
    # The LLM judge of judge-verified tasks: an OpenAI-compatible server, required when one is
    # evaluated (a second model in the training processes would not fit). null: the judge's
    # default (rlsr.verifiers.llm_judge).
    judge_base_url: str | None = None
    judge_model: str | None = None
    judge_timeout: float | None = _checked(
        lambda v: is_number(v) and v > 0, "must be > 0 seconds; got {!r}.", default=JUDGE_TIMEOUT_S
    )
    judge_max_retries: int | None = _checked(
        lambda v: is_int(v) and v >= 0,
        "must be an integer >= 0; got {!r}.",
        default=JUDGE_MAX_RETRIES,
    )
    judge_max_answer_chars: int | None = JUDGE_MAX_ANSWER_CHARS
    # vllm_server: the server's new tokens/s for the plan-time time check (null: assumed rate)
    server_tokens_per_s: float | None = _checked(
        lambda v: v is None or (is_number(v) and v > 0),
        "must be a number of tokens per second > 0, or null (the assumed rate); got {!r}.",
        default=None,
    )
    # {name: {protocol field: value}}: an evaluation that deliberately differs names its variant
    # (``heldout_protocol(cfg, variant=NAME)``; ``paper``: the paper tables' 4,096 tokens).
    variants: dict[str, dict] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name, default in (("judge_timeout", JUDGE_TIMEOUT_S),
                              ("judge_max_retries", JUDGE_MAX_RETRIES),
                              ("judge_max_answer_chars", JUDGE_MAX_ANSWER_CHARS)):  # fmt: skip
            if getattr(self, name) is None:
                setattr(self, name, default)

    def validate(self) -> None:
        """Check each field that stands on its own (``resolve_heldout`` checks the rest against
        the run); with ``every`` 0 the others are unused and not checked."""
        check(
            is_int(self.every) and self.every >= 0,
            "heldout.every",
            "must be an integer >= 0 (optimizer steps between evaluations; 0: off); got "
            f"{self.every!r}.",
        )
        if self.every == 0:
            return
        for f in fields(self):
            if "check" in f.metadata:
                accepts, message = f.metadata["check"]
                value = getattr(self, f.name)
                check(accepts(value), f"heldout.{f.name}", message.format(value))
        for name, vname in (self.verifiers or {}).items():
            check(
                vname in VERIFIER_NAMES or is_plugin_name(vname),
                f"heldout.verifiers.{name}",
                f"unknown verifier {vname!r}; choose one of {VERIFIER_NAMES} or a plugin "
                "'package.module:function'.",
            )

    # What ``resolve_heldout`` fills in: ``tasks`` are task names, ``verifiers`` one per task,
    # ``backend`` is not auto and every protocol key is set.
    @property
    def jobs(self) -> tuple[tuple[str, str, str], ...]:
        """``(folder, task, split)`` per task, folders named as ``rlsr evaluate`` names them
        (``name@split`` when ``heldout.split`` is set)."""
        split = self.split
        return tuple(
            (name if split is None else f"{name}@{split}", name, split or get_spec(name).split)
            for name in self.tasks
        )

    @property
    def protocol(self) -> EvalProtocol:
        return EvalProtocol(**{name: getattr(self, name) for name in PROTOCOL_FIELDS})

    @property
    def answer_tokens(self) -> int:
        return heldout_answer_tokens(self.protocol)


def heldout_answer_tokens(protocol: EvalProtocol) -> int:
    """Tokens one answer of ``protocol`` may need on the engine beyond its prompt: the answer,
    with the Sec. C.3 fallbacks (``tags``) a separator, suffix and continuation for each of the
    two, and one position for the log-prob scorer. A suffix counts as its UTF-8 bytes + 2, a bound
    on its tokens for byte-level tokenizers, so no tokenizer is needed (``VLLMBackend`` still
    refuses a request that would exceed the engine)."""
    need = int(protocol.max_new_tokens) + 1
    if protocol.fallbacks and protocol.response_format != "plain":
        for suffix in (ANSWER_FALLBACK_SUFFIX, CONFIDENCE_FALLBACK_SUFFIX):
            need += len(suffix.encode()) + 2 + int(protocol.fallback_max_new_tokens)
    return need


def declared_variants(cfg) -> dict:
    """``heldout.variants`` ({} when none); ``ConfigError`` when it is not a mapping."""
    variants = cfg.heldout.variants if cfg.heldout.variants is not None else {}
    check(
        isinstance(variants, dict),
        "heldout.variants",
        f"must be a mapping {{name: {{protocol field: value}}}}; got {variants!r}.",
    )
    return variants


def heldout_protocol(
    cfg, trainer_section: str = "grpo", variant: str | None = None
) -> EvalProtocol:
    """The run's evaluation protocol, the one source of every evaluation of a run (held-out
    steps, the printed ``rlsr evaluate`` command, Slurm's flags, the toy's): each field from
    ``heldout.variants.<variant>``, else ``heldout``, else ``method.evaluate``, else the run's
    default (``max_new_tokens``: the trainer's ``max_completion_length``; ``system_prompt``: the
    training data's, Sec. C.5), else ``EvalProtocol``'s. ``ConfigError`` names the key that set
    a bad value."""
    named = []
    if variant is not None:
        heldout_protocol(cfg, trainer_section)  # the run's own values: a variant may hide a bad one
        variants = declared_variants(cfg)
        if variant not in variants:
            known = ", ".join(sorted(variants)) or "none"
            raise ConfigError(
                "heldout.variants",
                f"has no variant {variant!r} (this recipe declares: {known}); add "
                f"heldout.variants.{variant}={{max_new_tokens: ...}} or name a declared variant.",
            )
        named = [(f"heldout.variants.{variant}", variants[variant])]
    system_prompt = cfg.data.system_prompt or get_spec(cfg.data.task).system_prompt
    sources = [
        *named,
        ("heldout", {name: getattr(cfg.heldout, name) for name in PROTOCOL_FIELDS}),
        ("method.evaluate", cfg.method.evaluate or {}),
        (trainer_section, {"max_new_tokens": grpo_get(getattr(cfg, trainer_section),
                                                      "max_completion_length")}),
        ("data", {"system_prompt": system_prompt}),
    ]  # fmt: skip
    try:
        check_mapping(cfg.method.evaluate, "method.evaluate")
        for where, values in named:
            check_mapping(values, where)
        return protocol_from_sources(sources)
    except ProtocolError as err:
        field_name = err.field.replace(f"{trainer_section}.max_new_tokens",
                                       f"{trainer_section}.max_completion_length")  # fmt: skip
        raise ConfigError(field_name, err.message) from None


def resolve_heldout(
    cfg, trainer_section: str = "grpo", *, here: bool = True
) -> HeldOutSettings | None:
    """Check ``cfg.heldout`` (its own fields, then against the rest of the ``TrainSettings``
    ``cfg``): a copy with its defaults filled in, None when ``heldout.every`` is 0. ``here=False``:
    the run starts on another machine, so ``heldout.data_path`` and the launch are not read."""
    e = cfg.heldout
    e.validate()
    if e.every == 0:
        return None
    names = _tasks(e, cfg.data.task, here=here)
    protocol = heldout_protocol(cfg, trainer_section)
    verifiers = _verifiers(e, names)
    section = getattr(cfg, trainer_section)
    backend = _backend(e.backend, section, here=here)
    resolved = replace(e, tasks=names, verifiers=verifiers, backend=backend, **protocol.values())
    if backend in ENGINE_BACKENDS:
        _check_engine_room(
            section.get("vllm_max_model_length"), cfg.data.max_prompt_length, resolved
        )
    if backend == "vllm_server":
        timeout = grpo_get(section, "ddp_timeout")
        check(
            is_number(timeout) and timeout > 0,
            f"{trainer_section}.ddp_timeout",
            f"must be a number of seconds > 0; got {timeout!r}.",
        )
        k = protocol.consistency_k if "consistency" in protocol.scorers else 0
        check_server_eval_fits(
            _countable_items(e, resolved.jobs),
            1 + k,
            protocol.max_new_tokens,
            timeout,
            e.server_tokens_per_s,
            section=trainer_section,
            samples_note=f" (1 answer + heldout.consistency_k {k})" if k else "",
        )
    return resolved


def _tasks(e: HeldOutSettings, training_task: str, *, here: bool = True) -> list[str]:
    """``heldout.tasks`` as task names (else ``tasks_for``'s, else the trained task when it has
    an evaluation split of its own); ``heldout.data_path`` checked against them."""
    tasks = e.tasks
    if isinstance(tasks, list | tuple) and not tasks:
        if training_task in e.tasks_for:
            tasks = list(e.tasks_for[training_task])
        else:
            try:
                task = get_spec(training_task).task
            except ValueError:
                task = None
            if task is not None and task.has_eval:
                tasks = [training_task]
    check(
        isinstance(tasks, list | tuple) and len(tasks) > 0,
        "heldout.tasks",
        f"heldout.every > 0 needs tasks to evaluate and none is set for data.task="
        f"{training_task!r}: name them, e.g. heldout.tasks=[tiny] (`rlsr tasks` lists "
        "them), give the task an evaluation split (docs/tasks.md), or set heldout.every=0.",
    )
    try:
        names = resolve_tasks(list(tasks))
    except (KeyError, ValueError) as err:
        raise ConfigError("heldout.tasks", str(err).strip("'\"")) from None
    for name in e.data_path or {}:
        check(
            name in names,
            f"heldout.data_path.{name}",
            f"{name!r} is not among heldout.tasks {names}.",
        )
        check(
            not here or Path(e.data_path[name]).exists(),
            f"heldout.data_path.{name}",
            f"{e.data_path[name]!r} does not exist; point it at a local copy of the dataset.",
        )
    return names


def _verifiers(e: HeldOutSettings, names: list[str]) -> dict[str, str]:
    """``{task: verifier}``: ``heldout.verifiers`` over each task's own; a judged task needs
    ``heldout.judge_base_url``."""
    for name in e.verifiers or {}:
        check(
            name in names,
            f"heldout.verifiers.{name}",
            f"{name!r} is not among heldout.tasks {names}.",
        )
    verifiers = {name: (e.verifiers or {}).get(name, get_spec(name).verifier) for name in names}
    judged = [n for n, v in verifiers.items() if v == "llm_judge"]
    check(
        not judged or bool(e.judge_base_url),
        "heldout.judge_base_url",
        f"{', '.join(judged)} {'is' if len(judged) == 1 else 'are'} verified by an LLM judge; "
        "set heldout.judge_base_url=http://HOST:PORT/v1 (an OpenAI-compatible server, e.g. "
        "`vllm serve meta-llama/Llama-3.1-8B-Instruct`) or evaluate other tasks.",
    )
    return verifiers


def _backend(requested: str, section: dict, *, here: bool = True) -> str:
    """``heldout.backend`` (``auto``: the rollouts' engine, else transformers), checked against
    the trainer's engine and the distributed launch."""
    colocated = bool(section.get("use_vllm")) and grpo_get(section, "vllm_mode") == "colocate"
    server = bool(section.get("use_vllm")) and section.get("vllm_mode") == "server"
    auto = "vllm" if colocated else "vllm_server" if server else "transformers"
    backend = requested if requested != "auto" else auto
    check(
        backend != "vllm_server" or server,
        "heldout.backend",
        "vllm_server evaluates through TRL's vLLM server; it needs grpo.use_vllm=true with "
        "grpo.vllm_mode=server. Use heldout.backend=auto.",
    )
    if backend == "vllm":
        check(
            colocated,
            "heldout.backend",
            "vllm evaluates on the training processes' own colocated engine; it needs "
            "grpo.use_vllm=true with grpo.vllm_mode=colocate. Use heldout.backend=transformers "
            "(or auto).",
        )
        check(
            section.get("vllm_tensor_parallel_size", 1) == 1,
            "heldout.backend",
            "the colocated engine is split over a tensor-parallel group "
            "(grpo.vllm_tensor_parallel_size > 1), whose ranks must generate together; use "
            "heldout.backend=transformers.",
        )
    elif backend == "transformers" and here:
        launch = launch_from_env()
        fix = (
            "set heldout.backend=vllm_server (or auto: the held-out questions go to the vLLM server "
            "of grpo.vllm_mode=server after a weight sync)"
            if server else
            "set grpo.use_vllm=true (the colocated engine gets the gathered weights) or "
            "heldout.every=0 and evaluate checkpoints with `rlsr evaluate`"
        )  # fmt: skip
        check(
            not (launch.name == "fsdp" or (launch.name == "deepspeed" and launch.zero_stage == 3)),
            "heldout.backend",
            f"transformers evaluation copies the whole policy per process, and {launch.label} "
            f"shards it; {fix}.",
        )
    return backend


def _check_engine_room(length: int | None, prompt: int | None, heldout: HeldOutSettings) -> None:
    """A set ``grpo.vllm_max_model_length`` must hold a prompt of ``data.max_prompt_length``
    tokens plus a held-out answer (``heldout.answer_tokens``)."""
    if length is None or prompt is None:
        return
    answer_tokens = heldout.answer_tokens
    max_new, fallback_tokens = heldout.max_new_tokens, heldout.fallback_max_new_tokens
    check(
        length >= prompt + answer_tokens,
        "grpo.vllm_max_model_length",
        f"{length} tokens cannot hold a held-out answer after a prompt of "
        f"data.max_prompt_length={prompt} tokens: it needs {prompt} + {answer_tokens} "
        f"(heldout.max_new_tokens {max_new}"
        + (f" + two Sec. C.3 fallbacks of heldout.fallback_max_new_tokens "
           f"{fallback_tokens} with their suffixes" if answer_tokens > max_new + 1
           else "")
        + f" + 1) = {prompt + answer_tokens}; raise it to {prompt + answer_tokens} or remove "
        "it (the default sizes the engine for both), or set heldout.backend=transformers.",
    )  # fmt: skip


def _countable_items(e: HeldOutSettings, jobs) -> dict[str, int]:
    """Questions per job countable without loading anything (``heldout.limit``, or the split's
    registered size when smaller); a job with no known count is left out, towards accepting."""
    items = {}
    for folder, name, split in jobs:
        size = None if name in (e.data_path or {}) else get_spec(name).sizes.get(split)
        counts = [n for n in (e.limit, size) if n is not None]
        if counts:
            items[folder] = min(counts)
    return items


def server_eval_bound(ddp_timeout_s: float) -> float:
    """Seconds the vllm_server evaluation's requests may take in all: ``0.8 * ddp_timeout - 60``
    (1,380 s for TRL's default 1,800 s). ``ValueError`` when that leaves nothing."""
    bound = EVAL_SHARE_OF_DDP_TIMEOUT * float(ddp_timeout_s) - EVAL_RESERVE_S
    if bound <= 0:
        raise ValueError(
            f"grpo.ddp_timeout={ddp_timeout_s} s leaves no time for the server-mode held-out "
            f"evaluation (its requests get {EVAL_SHARE_OF_DDP_TIMEOUT} x ddp_timeout - "
            f"{EVAL_RESERVE_S:.0f} s); raise grpo.ddp_timeout"
        )
    return bound


def server_eval_tokens(items: int, samples_per_item: int, max_new_tokens: int) -> int:
    """The worst case of one evaluation in new tokens (every answer ``max_new_tokens`` long, as an
    untrained policy can do); the fallbacks and log-prob prefills are not counted."""
    return int(items) * int(samples_per_item) * int(max_new_tokens)


def check_server_eval_fits(
    items: Mapping[str, int],
    samples_per_item: int,
    max_new_tokens: int,
    ddp_timeout_s: float,
    tokens_per_s: float | None,
    *,
    section: str = "grpo",
    samples_note: str = "",
) -> None:
    """Refuse a vllm_server evaluation whose worst case (``server_eval_tokens`` over ``items``,
    questions per countable dataset) at ``tokens_per_s`` (None: the assumed rate) takes longer
    than ``server_eval_bound``."""
    timeout_field = f"{section}.ddp_timeout"
    try:
        bound = server_eval_bound(ddp_timeout_s)
    except ValueError as err:
        raise ConfigError(timeout_field, f"{err} (heldout.backend=vllm_server).") from None
    rate = ASSUMED_SERVER_TOKENS_PER_S if tokens_per_s is None else float(tokens_per_s)
    total_items = sum(items.values())
    tokens = server_eval_tokens(total_items, samples_per_item, max_new_tokens)
    seconds = tokens / rate
    if seconds <= bound:
        return
    per_dataset = ", ".join(f"{name} {n}" for name, n in items.items())
    rate_note = (
        "heldout.server_tokens_per_s" if tokens_per_s is not None
        else "the assumed rate of one vLLM server; declare a measured one with "
        "heldout.server_tokens_per_s"
    )  # fmt: skip
    need_timeout = (seconds + EVAL_RESERVE_S) / EVAL_SHARE_OF_DDP_TIMEOUT  # 0.8 T - 60 >= seconds
    raise ConfigError(
        "heldout.limit",
        f"the held-out evaluation through the vLLM server (heldout.backend=vllm_server) cannot fit "
        f"its time bound: {total_items:,} questions ({per_dataset}) x {samples_per_item} "
        f"sample(s) per question{samples_note} x heldout.max_new_tokens {max_new_tokens:,} = "
        f"{tokens:,} new tokens at most; at {rate:,.0f} tokens/s ({rate_note}) that is "
        f"{seconds:,.0f} s > {bound:,.0f} s, the bound of {EVAL_SHARE_OF_DDP_TIMEOUT} x "
        f"{timeout_field} {ddp_timeout_s:,.0f} s - {EVAL_RESERVE_S:.0f} s (the other processes "
        f"wait that long for the main one). Lower heldout.limit or heldout.max_new_tokens (or "
        f"heldout.consistency_k), raise {timeout_field} to at least {need_timeout:,.0f}, or set "
        "heldout.every=0 and evaluate the checkpoints with `rlsr evaluate`.",
    )

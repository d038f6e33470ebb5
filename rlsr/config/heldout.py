"""The held-out plan: evaluation during training (``heldout.*``, ``HeldOutSettings``) resolved
against the rest of the run's settings (``resolve_heldout`` -> ``ResolvedHeldOut``): which
tasks, which backend, which answer budget and scorers. ``rlsr.evaluation.heldout.evaluator`` runs
it; the run plan (``rlsr.method.run_plan.plan_run``) calls ``resolve_heldout`` so a held-out setting
that cannot work stops the run before training starts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from rlsr.config.server_eval import check_server_eval_fits
from rlsr.config.trainer_args import grpo_get
from rlsr.core.checks import ConfigError, check, is_int, is_number
from rlsr.core.launch import launch_from_env
from rlsr.core.prompts import (
    ANSWER_FALLBACK_SUFFIX,
    CONFIDENCE_FALLBACK_SUFFIX,
)
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
from rlsr.verifiers.llm_judge import (
    JUDGE_MAX_ANSWER_CHARS,
    JUDGE_MAX_RETRIES,
    JUDGE_TIMEOUT_S,
)

__all__ = [
    "ENGINE_BACKENDS",
    "HELDOUT_BACKENDS",
    "HeldOutSettings",
    "ResolvedHeldOut",
    "heldout_answer_tokens",
    "declared_variants",
    "heldout_protocol",
    "protocol_variant",
    "resolve_heldout",
]

# heldout.backend: auto = the vLLM engine the rollouts use (colocated: vllm; TRL's server:
# vllm_server, rlsr.generation.server_backend), else transformers.
HELDOUT_BACKENDS = ("auto", "transformers", "vllm", "vllm_server")
# Held-out backends that answer on a vLLM engine: its context must hold prompt + answer.
ENGINE_BACKENDS = ("vllm", "vllm_server")


@dataclass
@protocol_keys
class HeldOutSettings:
    """Held-out evaluation during training (``rlsr.evaluation.heldout.evaluator``): the current policy
    answers held-out questions with the code of ``rlsr evaluate`` (prompts, Sec. C.3 fallbacks,
    verifiers, metrics) every ``every`` optimizer steps, into ``output_dir/eval/step-N/<dataset>``.

    Besides the fields below, every field of the evaluation protocol
    (``rlsr.run.eval_protocol.EvalProtocol``: max_new_tokens, temperature, top_p, seed, batch_size,
    fallbacks, fallback_max_new_tokens, scorers, response_format, consistency_k,
    consistency_temperature, system_prompt, dcs, bootstrap, keep_token_ids) is a key here, null
    by default: unset, it comes from ``method.evaluate``, else the run's default
    (``max_new_tokens``: the trainer's ``max_completion_length``; ``system_prompt``: the training
    data's), else the protocol's (``rlsr.run.eval_protocol.protocol_from_sources``; docs/heldout.md, "Watch a
    run")."""

    # Optimizer steps between evaluations (steps N, 2N, ...); 0: no held-out evaluation.
    every: int = 0
    # Also evaluate the last step when it is not a multiple of ``every`` (needs every > 0).
    at_end: bool = True
    # Also evaluate step 0 (the model before any update: the baseline of the curves).
    at_start: bool = False
    # Task names or groups, as `rlsr evaluate --tasks` (`rlsr tasks` lists them).
    # Empty: the recipe's choice for the task trained on (``tasks_for``), else that task's own
    # evaluation split; naming tasks here (heldout.tasks=[...]) always wins.
    tasks: list[str] = field(default_factory=list)
    # A recipe's held-out tasks per training task (data.task -> names or groups), used
    # while heldout.tasks is empty: `recipe=hotpot` evaluates hotpot-id when it trains on
    # hotpot_modified, and a task given as data.task=TASK is evaluated on the task, not on the
    # recipe's own data.
    tasks_for: dict[str, list[str]] = field(default_factory=dict)
    # Split of every task; null: each task's evaluation split (as `rlsr evaluate`).
    split: str | None = None
    # First N questions of each task (null: all of them).
    limit: int | None = 200
    # {task: local path of its rows}, as `rlsr evaluate --data-path NAME=PATH`.
    data_path: dict[str, str] = field(default_factory=dict)
    # {task: verifier}, as `rlsr evaluate --verifier NAME=VERIFIER` (default: the task's).
    verifiers: dict[str, str] = field(default_factory=dict)
    # auto: the vLLM engine of the rollouts, weights synced first (vllm_mode=colocate: vllm;
    # vllm_mode=server: vllm_server, TRL's server), else transformers on a merged inference
    # copy of the policy.
    backend: str = "auto"
    # The LLM judge of judge-verified tasks: an OpenAI-compatible server (a second model in
    # the training processes would not fit); required when such a task is evaluated.
    judge_base_url: str | None = None
    judge_model: str | None = None  # null: rlsr evaluate's default judge model
    # null (recipes/config.yaml): the judge's one default, rlsr.verifiers.llm_judge's
    judge_timeout: float | None = JUDGE_TIMEOUT_S
    judge_max_retries: int | None = JUDGE_MAX_RETRIES
    judge_max_answer_chars: int | None = JUDGE_MAX_ANSWER_CHARS
    # heldout.backend=vllm_server: new tokens per second the vLLM server generates, all requests
    # together, for the plan-time check that a held-out evaluation fits the time the other
    # processes wait (grpo.ddp_timeout); null: rlsr.config.server_eval's assumed 20,000.
    server_tokens_per_s: float | None = None
    # Named protocol variants: {name: {protocol field: value}}. An evaluation that deliberately
    # differs from the held-out protocol names its variant, which sets those fields on top of
    # everything else (``heldout_protocol(cfg, variant=NAME)``): ``paper`` (recipes/config.yaml) is
    # the paper tables' 4,096-token budget that slurm/sweep.py evaluates with; ``toy`` the toy
    # table's short greedy answers. Printed in the run summary; `rlsr evaluate --protocol-variant`
    # records the name in run.json.
    variants: dict[str, dict] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name, default in (("judge_timeout", JUDGE_TIMEOUT_S),
                              ("judge_max_retries", JUDGE_MAX_RETRIES),
                              ("judge_max_answer_chars", JUDGE_MAX_ANSWER_CHARS)):  # fmt: skip
            if getattr(self, name) is None:
                setattr(self, name, default)

    def validate(self) -> None:
        """Check the fields that stand on their own (``resolve_heldout`` checks them against the
        rest of the run: the datasets, the trainer's engine, the launch); raises ``ConfigError``
        naming the field and the fix. With ``every`` 0 the others are unused and not checked."""
        check(
            is_int(self.every) and self.every >= 0,
            "heldout.every",
            "must be an integer >= 0 (optimizer steps between evaluations; 0: off); got "
            f"{self.every!r}.",
        )
        if self.every == 0:
            return
        check(isinstance(self.at_end, bool), "heldout.at_end", "must be true or false.")
        check(isinstance(self.at_start, bool), "heldout.at_start", "must be true or false.")
        check(
            isinstance(self.tasks_for, dict)
            and all(isinstance(v, list | tuple) for v in self.tasks_for.values()),
            "heldout.tasks_for",
            f"must map a training task to a list of held-out tasks; got {self.tasks_for!r}.",
        )
        check(
            self.limit is None or (is_int(self.limit) and self.limit >= 1),
            "heldout.limit",
            f"must be a positive integer or null; got {self.limit!r}.",
        )
        for name, vname in (self.verifiers or {}).items():
            check(
                vname in VERIFIER_NAMES or is_plugin_name(vname),
                f"heldout.verifiers.{name}",
                f"unknown verifier {vname!r}; choose one of {VERIFIER_NAMES} or a plugin "
                "'package.module:function'.",
            )
        check(
            is_int(self.judge_max_retries) and self.judge_max_retries >= 0,
            "heldout.judge_max_retries",
            f"must be an integer >= 0; got {self.judge_max_retries!r}.",
        )
        check(
            is_number(self.judge_timeout) and self.judge_timeout > 0,
            "heldout.judge_timeout",
            f"must be > 0 seconds; got {self.judge_timeout!r}.",
        )
        check(
            self.backend in HELDOUT_BACKENDS,
            "heldout.backend",
            f"got {self.backend!r}; choose one of {HELDOUT_BACKENDS}.",
        )


def heldout_answer_tokens(
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
    """``heldout.*`` with every default filled in (``resolve_heldout``): what the in-training
    evaluator runs. ``jobs``: ``(folder, task, split)`` as ``rlsr evaluate`` names its output
    folders (the task's name; ``name@split`` when ``heldout.split`` is set)."""

    every: int
    at_end: bool
    at_start: bool
    jobs: tuple[tuple[str, str, str], ...]
    verifiers: dict[str, str]
    backend: str
    # how each answer is generated and scored: heldout.* > method.evaluate > the run's defaults
    protocol: EvalProtocol
    settings: HeldOutSettings
    # tokens an answer may need beyond its prompt on the engine (``heldout_answer_tokens``)
    answer_tokens: int = 0

    @property
    def system_prompt(self) -> str | None:
        return self.protocol.system_prompt

    @property
    def tasks(self) -> list[str]:
        """The tasks evaluated, by name (groups expanded), in order."""
        return list(dict.fromkeys(task for _, task, _ in self.jobs))

    @property
    def max_new_tokens(self) -> int:
        return self.protocol.max_new_tokens

    @property
    def scorers(self) -> tuple[str, ...]:
        return self.protocol.scorers

    @property
    def response_format(self) -> str:
        return self.protocol.response_format


def declared_variants(cfg) -> dict:
    """``heldout.variants``, the recipe's named protocol variants ({} when none); ``ConfigError`` when
    it is not a mapping ``{name: {protocol field: value}}``."""
    variants = cfg.heldout.variants if cfg.heldout.variants is not None else {}
    check(
        isinstance(variants, dict),
        "heldout.variants",
        f"must be a mapping {{name: {{protocol field: value}}}}; got {variants!r}.",
    )
    return variants


def protocol_variant(cfg, variant: str) -> dict:
    """The named protocol variant ``heldout.variants.<variant>``, checked (a mapping of protocol fields).
    Raises ``ConfigError`` naming ``heldout.variants`` and the variants the recipe declares."""
    variants = declared_variants(cfg)
    if variant not in variants:
        known = ", ".join(sorted(variants)) or "none"
        raise ConfigError(
            "heldout.variants",
            f"has no variant {variant!r} (this recipe declares: {known}); add "
            f"heldout.variants.{variant}={{max_new_tokens: ...}} or name a declared variant.",
        )
    try:
        return check_mapping(variants[variant], f"heldout.variants.{variant}")
    except ProtocolError as err:
        raise ConfigError(err.field, err.message) from None


def heldout_protocol(
    cfg, trainer_section: str = "grpo", variant: str | None = None
) -> EvalProtocol:
    """The run's evaluation protocol, the one source of every evaluation of a run (the held-out
    steps, train.py's printed ``rlsr evaluate`` command, slurm/resolve_config.py's flags, the
    toy's): each field from ``heldout.<field>`` when set, else ``method.evaluate.<field>``, else the
    run's default (``max_new_tokens``: the trainer's ``max_completion_length``, what the policy
    is trained to; ``system_prompt``: the training data's, paper Sec. C.5), else
    ``EvalProtocol``'s default. ``variant``: a named variant (``heldout.variants.<variant>``, e.g. ``paper``)
    whose fields win over all of these: an evaluation that deliberately differs, declared in the
    recipe, not a second default. Raises ``ConfigError`` naming the key that set a bad value."""
    if variant is not None:  # the run's own values are checked too: a variant may hide a bad one
        heldout_protocol(cfg, trainer_section)
    e = cfg.heldout
    section = getattr(cfg, trainer_section)
    named = (
        [] if variant is None else [(f"heldout.variants.{variant}", protocol_variant(cfg, variant))]
    )
    sources = [
        *named,
        ("heldout", {name: getattr(e, name) for name in PROTOCOL_FIELDS}),
        ("method.evaluate", cfg.method.evaluate or {}),
        (trainer_section, {"max_new_tokens": grpo_get(section, "max_completion_length")}),
        ("data", {"system_prompt": cfg.data.system_prompt
                  or get_spec(cfg.data.task).system_prompt}),
    ]  # fmt: skip
    try:
        check_mapping(cfg.method.evaluate, "method.evaluate")
        return protocol_from_sources(sources)
    except ProtocolError as err:
        field_name = err.field.replace(f"{trainer_section}.max_new_tokens",
                                       f"{trainer_section}.max_completion_length")  # fmt: skip
        raise ConfigError(field_name, err.message) from None


def resolve_heldout(
    cfg, trainer_section: str = "grpo", *, here: bool = True
) -> ResolvedHeldOut | None:
    """Check ``cfg.heldout`` (``HeldOutSettings.validate``, then against the rest of ``cfg``)
    and fill in its defaults; None when off
    (``heldout.every == 0``). Raises ``ConfigError`` naming the ``heldout.*`` field and the fix, so a
    setting that cannot work stops the run before training starts, not at its first evaluation.
    ``cfg`` is a ``rlsr.config.TrainSettings`` (not imported: this module sits below it).
    ``here=False``: the run starts on another machine, so ``heldout.data_path`` is not looked for
    and the distributed launch (accelerate's environment) not read on this one."""
    e = cfg.heldout
    e.validate()  # its own fields (TrainSettings.validate calls it too, with the other sections')
    if e.every == 0:
        return None
    names = _tasks(e, cfg.data.task, here=here)
    protocol = heldout_protocol(cfg, trainer_section)
    verifiers = _verifiers(e, names)
    section = getattr(cfg, trainer_section)
    backend = _backend(e.backend, section, here=here)
    answer_tokens = heldout_answer_tokens(
        protocol.max_new_tokens, protocol.fallbacks, protocol.fallback_max_new_tokens,
        protocol.response_format,
    )  # fmt: skip
    if backend in ENGINE_BACKENDS:
        _check_engine_room(section.get("vllm_max_model_length"), cfg.data.max_prompt_length,
                           answer_tokens, protocol)  # fmt: skip
    jobs = tuple(
        (name if e.split is None else f"{name}@{e.split}", name, e.split or get_spec(name).split)
        for name in names
    )  # (folder, dataset, split), as `rlsr evaluate` names its output folders
    if backend == "vllm_server":
        _check_server_time(e, jobs, protocol, section, trainer_section)
    return ResolvedHeldOut(
        every=e.every,
        at_end=e.at_end,
        at_start=e.at_start,
        jobs=jobs,
        verifiers=verifiers,
        backend=backend,
        protocol=protocol,
        settings=e,
        answer_tokens=answer_tokens,
    )


def _tasks(e: HeldOutSettings, training_task: str, *, here: bool = True) -> list[str]:
    """``heldout.tasks`` resolved to task names (a task trained on, with an evaluation split
    of its own, when none are named), ``heldout.data_path`` and ``heldout.limit`` checked."""
    tasks = e.tasks
    if isinstance(tasks, list | tuple) and not tasks:
        if training_task in e.tasks_for:  # the recipe's choice for what it trains on
            tasks = list(e.tasks_for[training_task])
        elif _task_with_eval(training_task):
            tasks = [training_task]  # a task trained on is evaluated on its eval split
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
    """``{task: verifier}``: ``heldout.verifiers`` over each task's own; the LLM judge's
    server settings checked when a task needs it."""
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
    """``heldout.backend`` resolved against the trainer's rollout engine (``auto``: the engine the
    rollouts use, else transformers) and checked against it and the distributed launch."""
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


def _check_engine_room(
    length: int | None, prompt: int | None, answer_tokens: int, protocol: EvalProtocol
) -> None:
    """A set ``grpo.vllm_max_model_length`` must hold a prompt of ``data.max_prompt_length``
    tokens plus what a held-out answer needs beyond it (``heldout_answer_tokens``): no held-out
    answer is cut by the engine's context."""
    if length is None or prompt is None:
        return
    max_new, fallback_tokens = protocol.max_new_tokens, protocol.fallback_max_new_tokens
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
    """Questions per held-out job that can be counted without loading anything: ``heldout.limit``,
    or fewer when the dataset's registered size of that split is smaller; a job whose count is
    unknown (``heldout.limit`` null and no registered size, or a local copy in ``heldout.data_path``)
    is left out, so the time check errs towards accepting."""
    items = {}
    for folder, name, split in jobs:
        size = None if name in (e.data_path or {}) else get_spec(name).sizes.get(split)
        counts = [n for n in (e.limit, size) if n is not None]
        if counts:
            items[folder] = min(counts)
    return items


def _check_server_time(e, jobs, protocol: EvalProtocol, section, trainer_section: str) -> None:
    """heldout.backend=vllm_server: the worst case of one evaluation must fit the time the other
    processes wait (``rlsr.config.server_eval.check_server_eval_fits``)."""
    rate = e.server_tokens_per_s
    check(
        rate is None or (is_number(rate) and rate > 0),
        "heldout.server_tokens_per_s",
        f"must be a number of tokens per second > 0, or null (the assumed rate); got {rate!r}.",
    )
    timeout = grpo_get(section, "ddp_timeout")
    check(
        is_number(timeout) and timeout > 0,
        f"{trainer_section}.ddp_timeout",
        f"must be a number of seconds > 0; got {timeout!r}.",
    )
    k = protocol.consistency_k if "consistency" in protocol.scorers else 0
    check_server_eval_fits(
        _countable_items(e, jobs), 1 + k, protocol.max_new_tokens, timeout, rate,
        section=trainer_section,
        samples_note=f" (1 answer + heldout.consistency_k {k})" if k else "",
    )  # fmt: skip

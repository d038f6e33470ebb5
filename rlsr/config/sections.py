"""The small settings sections of ``train.py``'s config, each a dataclass that checks its own
fields where they are declared (``validate``, through ``rlsr.core.checks.check``):

* ``model``: which weights, in which dtype and attention implementation, and the LoRA adapter
  trained on them (paper: r = 1, alpha = 32, all linear layers); ``resolve_model_path`` maps the
  ``tiny`` aliases to the shipped tiny models;
* ``method``: which method (``rlsr.method.methods`` holds each one's own checks), its reward weights,
  where the confidence comes from, and how a model trained this way is evaluated;
* ``pool_size``: one pool = one optimizer step. ``resolve_pool`` derives the pool of B x G
  completions ranked together and the gradient accumulation that gives it from ``pool_size`` and
  ``grpo.*`` (RLSR paper Sec. 3: every completion of one optimizer step across all processes is
  ranked together);
* ``pool_log``: every training pool on disk (``rlsr.method.pool_log`` writes them);
* ``data``: the training task (a built-in or a task file's), its split, system prompt,
  prompt-length cap and verifier (``training_verifier``).

The larger sections have modules of their own: ``heldout`` (``heldout.py``), ``grpo`` / ``sft``
(``trainer_args.py``). ``TrainSettings`` holds them all and checks each with its own
``validate``; ``from_dict`` builds it from the composed config, rejecting unknown keys;
``register_tasks`` loads the task files it names (``tasks_dir``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlsr.config.heldout import ENGINE_BACKENDS, HeldOutSettings, ResolvedHeldOut
from rlsr.config.trainer_args import (
    TRAINER_SECTIONS,
    check_grpo,
    check_launch,
    check_sft,
    check_vllm_length,
    grpo_get,
)
from rlsr.core import launch  # the machine's probes, looked up here so a test can stand in for them
from rlsr.core.checks import ConfigError, closest_hint, is_number
from rlsr.core.checks import check as _check
from rlsr.core.checks import is_int as _is_int
from rlsr.core.prompts import NO_SYSTEM_PROMPT, system_prompt_names
from rlsr.data import TaskError, get_spec, load_env_tasks, load_tasks
from rlsr.data.tiny_models import (
    TinyModelsMissing,
    shipped_manifest,
    shipped_model_path,
    tiny_candidates_model_path,
    tiny_missing_model_path,
    tiny_model_path,
    tiny_warm_model_path,
)
from rlsr.run.eval_protocol import ProtocolError, check_mapping, evaluate_mapping_of
from rlsr.verifiers import is_plugin_name

# --------------------------------------------------------------------------- model


DTYPES = ("bfloat16", "float16", "float32", "auto")
ATTN_IMPLEMENTATIONS = ("auto", "flash_attention_2", "sdpa", "eager")


TINY_MODEL_ALIAS = "tiny"
TINY_WARM_MODEL_ALIAS = "tiny-warm"
TINY_MISSING_MODEL_ALIAS = "tiny-missing-warm"
TINY_CANDIDATES_MODEL_ALIAS = "tiny-candidates-warm"
TINY_SPLIT_MODEL_ALIAS = "tiny-candidates-split"
TINY_MODEL_ALIASES = (
    TINY_MODEL_ALIAS,
    TINY_WARM_MODEL_ALIAS,
    TINY_MISSING_MODEL_ALIAS,
    TINY_CANDIDATES_MODEL_ALIAS,
    TINY_SPLIT_MODEL_ALIAS,
)


@dataclass
class LoraSettings:
    enabled: bool = True
    r: int = 1
    alpha: float = 32
    dropout: float = 0.0
    target_modules: Any = "all-linear"

    def validate(self) -> None:
        """Check this section (``model.lora``); raises ``ConfigError`` naming the field."""
        _check(isinstance(self.enabled, bool), "model.lora.enabled", "must be true or false.")
        if self.enabled:
            _check(
                _is_int(self.r) and self.r >= 1,
                "model.lora.r",
                f"LoRA rank must be an integer >= 1; got {self.r!r} (paper: 1).",
            )
            _check(
                is_number(self.alpha) and self.alpha > 0,
                "model.lora.alpha",
                f"must be > 0; got {self.alpha!r} (paper: 32).",
            )
            _check(
                is_number(self.dropout) and 0.0 <= self.dropout < 1.0,
                "model.lora.dropout",
                f"must be in [0, 1); got {self.dropout!r} (paper: 0).",
            )
            tm = self.target_modules
            _check(
                (isinstance(tm, str) and tm != "")
                or (isinstance(tm, list | tuple) and tm and all(isinstance(t, str) for t in tm)),
                "model.lora.target_modules",
                f"must be 'all-linear' or a list of module names; got {tm!r}.",
            )


@dataclass
class ModelSettings:
    name_or_path: str = "Qwen/Qwen2.5-7B"
    short_name: str | None = None  # used in the default output_dir only
    dtype: str = "bfloat16"
    attn_implementation: str = "auto"
    trust_remote_code: bool = False
    lora: LoraSettings = field(default_factory=LoraSettings)

    def validate(self, *, here: bool = True) -> None:
        """Check this section; raises ``ConfigError`` naming the field and the fix.
        ``here=False``: for a launch on another machine (flash-attn not looked for here)."""
        _check(
            isinstance(self.name_or_path, str) and self.name_or_path != "",
            "model.name_or_path",
            "set a hub id or local folder, e.g. model.name_or_path=Qwen/Qwen2.5-7B (or 'tiny').",
        )
        _check(
            self.dtype in DTYPES,
            "model.dtype",
            f"got {self.dtype!r}; choose one of {DTYPES}.{closest_hint(str(self.dtype), DTYPES)}",
        )
        _check(
            self.attn_implementation in ATTN_IMPLEMENTATIONS,
            "model.attn_implementation",
            f"got {self.attn_implementation!r}; choose one of {ATTN_IMPLEMENTATIONS}.",
        )
        if here and self.name_or_path in TINY_MODEL_ALIASES:
            # the tiny models live in a clone (tools/tiny/weights), not in an installed wheel
            try:
                shipped_manifest()
            except TinyModelsMissing as err:
                raise ConfigError("model.name_or_path", str(err)) from None
        if here and self.attn_implementation == "flash_attention_2":
            _check(
                launch.module_available("flash_attn"),
                "model.attn_implementation",
                "flash_attention_2 requested but flash-attn is not installed; `pip install rlsr[flash]` "
                "(needs CUDA + nvcc) or set model.attn_implementation=auto (falls back to sdpa).",
            )
        _check(
            isinstance(self.trust_remote_code, bool),
            "model.trust_remote_code",
            "must be true or false.",
        )
        self.lora.validate()


def resolve_model_path(name_or_path: str) -> str:
    """Map the aliases ``tiny`` (random), ``tiny-warm`` (format fine-tuned),
    ``tiny-missing-warm`` (recipe=tiny's), ``tiny-candidates-warm`` (recipe=tiny-candidates's) and
    ``tiny-candidates-split`` (recipe=tiny-split's) to the tiny models of the clone
    (rlsr.data.tiny_models: hash-checked folders, never built here); other names are returned
    unchanged."""
    if name_or_path == TINY_MISSING_MODEL_ALIAS:
        return str(tiny_missing_model_path())
    if name_or_path == TINY_CANDIDATES_MODEL_ALIAS:
        return str(tiny_candidates_model_path())
    if name_or_path == TINY_SPLIT_MODEL_ALIAS:
        return str(shipped_model_path(TINY_SPLIT_MODEL_ALIAS))
    if name_or_path == TINY_WARM_MODEL_ALIAS:
        return str(tiny_warm_model_path())
    if name_or_path == TINY_MODEL_ALIAS:
        return str(tiny_model_path())
    return name_or_path


# --------------------------------------------------------------------------- method


# Where RLSR's pooled ranking reads each completion's confidence (method.confidence).
CONFIDENCE_SOURCES = ("verbalized", "logprob")


@dataclass
class MethodSettings:
    name: str = "rlsr"
    # Reward weights: the authors' released configs (sun-umn/RLSR) use 0.5 / 0.5; the paper text
    # writes R_total = R_method + R_format (1 / 1). docs/methods.md, "Paper text vs released code".
    format_weight: float = 0.5
    method_weight: float = 0.5
    # A completion whose format check fails counts as wrong in the reward (RLCR's reference
    # accuracy_reward, which the RLSR authors' code also uses); false: the verifier alone decides.
    correct_requires_format: bool = True
    correct_scale: float = 1.0
    weight_cap: float | None = None
    max_coverage: float = 1.0
    label: str | None = None  # a variant's name in the default output_dir (None: name)
    # A reward method from outside rlsr: "package.module:NAME" of a rlsr.method.methods.MethodEntry
    # whose name is `name` (docs/methods.md); None: `name` is one of rlsr's methods.
    plugin: str | None = None
    # verbalized: the <confidence> tag; logprob: the answer's length-normalised log-probability
    # (rlsr.equations.logprob; paper Sec. D.4, Tab. 7). Only methods that rank by confidence accept logprob.
    confidence: str = "verbalized"
    # How a model trained this way is evaluated: a mapping of evaluation protocol fields
    # (rlsr.run.eval_protocol.EvalProtocol, e.g. method=sft: {response_format: plain, scorers:
    # [consistency], ...}). The held-out evaluation uses them unless heldout.<field> is set;
    # slurm/sweep.py and the toy pass them to `rlsr evaluate` as flags (to_flags).
    evaluate: dict[str, Any] = field(default_factory=dict)
    # Replaced by ``evaluate``; set, it is refused with the mapping to write instead.
    evaluate_args: list[str] | None = None

    def validate(self) -> None:
        """Checks shared by every method; each method's own are in its ``rlsr.method.methods`` entry."""
        _check(
            isinstance(self.name, str) and self.name != "",
            "method.name",
            f"must name a method, e.g. method=rlsr; got {self.name!r}.",
        )
        for name in ("format_weight", "method_weight"):
            value = getattr(self, name)
            _check(
                is_number(value) and value >= 0,
                f"method.{name}",
                f"must be a number >= 0; got {value!r} (the authors' released configs: 0.5).",
            )
        _check(
            isinstance(self.correct_requires_format, bool),
            "method.correct_requires_format",
            f"must be true or false; got {self.correct_requires_format!r}.",
        )
        _check(
            self.confidence in CONFIDENCE_SOURCES,
            "method.confidence",
            f"got {self.confidence!r}; choose one of {CONFIDENCE_SOURCES}.",
        )
        _check(
            not self.evaluate_args,
            "method.evaluate_args",
            "replaced by method.evaluate, a mapping of evaluation settings; write "
            f"{evaluate_mapping_of(self.evaluate_args)} instead (docs/evaluation.md).",
        )
        try:
            check_mapping(self.evaluate, "method.evaluate")
        except ProtocolError as err:
            raise ConfigError(err.field, err.message) from None
        _check(
            self.format_weight + self.method_weight > 0,
            "method.method_weight",
            "format_weight and method_weight are both 0, so every reward is 0; set method_weight=0.5.",
        )


# --------------------------------------------------------------------------- pool


@dataclass(frozen=True)
class PoolPlan:
    """How one optimizer step's pool is laid out: ``pool = per_device x world_size x accumulation``
    completions = ``pool / G`` prompts x G, generated at once and ranked together."""

    pool: int
    per_device: int
    world_size: int
    accumulation: int
    num_generations: int

    def describe(self) -> str:
        return (
            f"pool {self.pool} completions per optimizer step = {self.pool // self.num_generations}"
            f" prompts x {self.num_generations} = {self.per_device} per device x "
            f"{self.world_size} processes x {self.accumulation} accumulation steps"
        )


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def resolve_pool(grpo: dict, pool: int | None, world_size: int) -> PoolPlan:
    """The pool of one optimizer step and the gradient accumulation that gives it.

    ``pool`` (top-level ``pool_size``) set: accumulation = pool / (per_device x world_size),
    an error listing the per-device sizes that divide when it does not. ``pool`` None: the pool
    is per_device x world_size x ``grpo.gradient_accumulation_steps``. Either way TRL must
    generate exactly one optimizer step per generation (``steps_per_generation`` =
    accumulation, ``generation_batch_size`` = pool) and the pool must hold whole groups of G.
    ``num_iterations > 1`` (several optimizer passes over one pool) keeps the invariant.
    """
    G = grpo_get(grpo, "num_generations")
    per_device = grpo_get(grpo, "per_device_train_batch_size")
    accum = grpo.get("gradient_accumulation_steps")
    if pool is not None:
        _check(
            _is_int(pool) and pool >= 1,
            "pool_size",
            f"must be a positive integer (completions per optimizer step) or null; got {pool!r}.",
        )
        _check(
            pool % G == 0,
            "pool_size",
            f"{pool} is not divisible by grpo.num_generations={G}; every prompt needs all its G "
            f"completions in one pool (paper: 1536 = 48 prompts x 32).",
        )
        if pool % world_size != 0:
            raise ConfigError(
                "pool_size",
                f"{pool} completions cannot be split over {world_size} processes; use a process "
                f"count that divides {pool} or change pool_size.",
            )
        if pool % (per_device * world_size) != 0:
            valid = _divisors(pool // world_size)
            raise ConfigError(
                "grpo.per_device_train_batch_size",
                f"{per_device} x {world_size} processes does not divide pool_size={pool}; "
                f"valid per-device sizes for {world_size} processes: {valid}.",
            )
        derived = pool // (per_device * world_size)
        _check(
            accum is None or accum == derived,
            "grpo.gradient_accumulation_steps",
            f"is derived from pool_size={pool} ({pool} / ({per_device} x {world_size} processes) "
            f"= {derived}) but set to {accum!r}; remove it, or set pool_size=null to use it.",
        )
        accum = derived
    else:
        accum = 1 if accum is None else accum
        pool = per_device * world_size * accum
        _check(
            pool % G == 0,
            "grpo.per_device_train_batch_size",
            f"the pool per_device_train_batch_size x processes x gradient_accumulation_steps = "
            f"{per_device} x {world_size} x {accum} = {pool} is not divisible by "
            f"grpo.num_generations={G}; every prompt needs all its G completions in one pool. "
            f"Set pool_size (e.g. pool_size={G * max(1, pool // G)}) or change "
            f"per_device_train_batch_size / gradient_accumulation_steps.",
        )
    steps = grpo.get("steps_per_generation")
    _check(
        steps is None or steps == accum,
        "grpo.steps_per_generation",
        f"={steps!r} with {accum} gradient accumulation steps would make one generation span "
        f"several optimizer steps or one step hold several separately ranked pools (RLSR ranks one "
        f"optimizer step's completions together); remove it (TRL then uses "
        f"gradient_accumulation_steps) and set pool_size instead.",
    )
    gbs = grpo.get("generation_batch_size")
    _check(
        gbs is None or gbs == pool,
        "grpo.generation_batch_size",
        f"={gbs!r} differs from the optimizer step's {pool} completions (per device x processes x "
        f"accumulation), so pools and optimizer steps would not coincide; remove it and set "
        f"pool_size={gbs!r} instead.",
    )
    return PoolPlan(pool, per_device, world_size, accum, G)


# --------------------------------------------------------------------------- pool_log


@dataclass
class PoolLogSettings:
    """Every training pool on disk (``rlsr.method.pool_log``; docs/training.md, "Every pool on disk"):
    one JSONL row per completion of the pooled B x G batch, into
    ``output_dir/pools/step-N.jsonl``, written by the main process only.

    Parameters:
        every (`int`, defaults to `0`):
            Write the pool generated after N optimizer steps when ``N % every == 0`` (so the first
            pool, step 0, always); 0: off. ``recipe=tiny`` sets 1; on big runs take e.g. 10.
        max_chars (`int` or `None`, defaults to `2000`):
            Keep the first ``max_chars`` characters of each completion text (the row keeps the
            full length in ``completion_chars``); null: the whole text.
    """

    every: int = field(
        default=0,
        metadata={"help": "Optimizer steps between written pools (N % every == 0); 0: off."},
    )
    max_chars: int | None = field(
        default=2000,
        metadata={"help": "Characters of each completion kept in the file; null: all."},
    )

    def validate(self) -> None:
        """Check this section; raises ``ConfigError`` naming the field and the fix."""
        _check(
            _is_int(self.every) and self.every >= 0,
            "pool_log.every",
            f"must be an integer >= 0 (optimizer steps between written pools; 0: off); got "
            f"{self.every!r}.",
        )
        _check(
            self.max_chars is None or (_is_int(self.max_chars) and self.max_chars >= 0),
            "pool_log.max_chars",
            f"must be an integer >= 0 (characters of each completion kept) or null (all); got "
            f"{self.max_chars!r}.",
        )


# --------------------------------------------------------------------------- data


@dataclass
class DataSettings:
    task: str = "tiny"
    path: str | None = None
    split: str | None = None  # default: the spec's train split
    system_prompt: str | None = None  # default: the spec's ("simple" | "long")
    limit: int | None = None
    max_prompt_length: int | None = None  # prompts longer than this (tokens) are dropped
    verifier: str | None = None  # default: the spec's verifier

    def validate(self, *, here: bool = True) -> None:
        """Check this section (``training_verifier``); raises ``ConfigError`` naming the field
        and the fix. ``here=False``: for a launch on another machine (``data.path`` unchecked)."""
        training_verifier(self, here=here)


def training_verifier(d: DataSettings, *, here: bool = True) -> str:
    """Validate the data section; returns the verifier the trainer will use. ``here=False``:
    the run starts on another machine, so ``data.path`` is not looked for on this one."""
    try:
        spec = get_spec(d.task)
    except (KeyError, ValueError) as err:
        raise ConfigError("data.task", str(err).strip("'\"")) from None
    _check(
        d.system_prompt in (None, *system_prompt_names(), NO_SYSTEM_PROMPT),
        "data.system_prompt",
        f"got {d.system_prompt!r}; choose 'simple', 'long', 'none' (no system message), a task's "
        "prompt name or null (the task's own).",
    )
    _check(
        d.limit is None or (_is_int(d.limit) and d.limit >= 1),
        "data.limit",
        f"must be a positive integer or null; got {d.limit!r}.",
    )
    _check(
        d.max_prompt_length is None or (_is_int(d.max_prompt_length) and d.max_prompt_length >= 1),
        "data.max_prompt_length",
        f"must be a positive integer (tokens) or null; got {d.max_prompt_length!r}.",
    )
    verifier = d.verifier or spec.verifier
    _check(
        verifier in ("exact_match", "math", "mcq") or is_plugin_name(verifier),
        "data.verifier",
        f"{verifier!r} cannot score rollouts inside the trainer (the LLM judge needs a second "
        "model); set data.verifier to exact_match, math, mcq or a plugin "
        "'package.module:function'"
        + (f" (this task supports {list(spec.alt_verifiers)})." if spec.alt_verifiers else "."),
    )
    _check(
        not here or d.path is None or Path(d.path).exists(),
        "data.path",
        f"{d.path!r} does not exist; point it at a local copy of the dataset or set it to null.",
    )
    return verifier


# --------------------------------------------------------------------------- the whole config


# The largest seed transformers' set_seed accepts: it seeds numpy, whose seeds are 32-bit.
MAX_SEED = 2**32 - 1


@dataclass
class TrainSettings:
    model: ModelSettings = field(default_factory=ModelSettings)
    data: DataSettings = field(default_factory=DataSettings)
    method: MethodSettings = field(default_factory=MethodSettings)
    grpo: dict[str, Any] = field(default_factory=dict)
    pool_size: int | None = None
    sft: dict[str, Any] = field(default_factory=dict)  # trl.SFTConfig fields (method=sft)
    heldout: HeldOutSettings = field(default_factory=HeldOutSettings)
    pool_log: PoolLogSettings = field(default_factory=PoolLogSettings)
    # Task files (docs/tasks.md): a folder of *.yaml files, one file, or a list of them; their
    # tasks are registered before data.task / heldout.tasks are looked up.
    tasks_dir: Any = None
    output_dir: str = "runs/default"
    seed: int = 42
    resume: str = "auto"

    def validate(self, *, here: bool = True, trainer_section: str = "grpo") -> None:
        """Check the top-level fields, then each section with its own ``validate`` (declared
        beside its fields) and the trainer section ``trainer_section`` (``grpo`` or ``sft``:
        ``rlsr.method.methods.args_section``; only that one is checked) with
        ``rlsr.config.trainer_args``. Reads the settings only, loads no model or dataset; raises
        ``ConfigError`` naming the field and the fix. The method's own checks are its registry
        entry's (``rlsr.method.methods.check_method``); ``rlsr.method.run_plan.plan_run`` runs both.
        ``here=False``: for a launch on another machine (a Slurm job planned on the login node):
        what this machine offers (a GPU, vLLM, flash-attn, accelerate's distributed launch, the
        files named by ``data.path`` / ``heldout.data_path`` / ``resume``) is not asked."""
        if trainer_section not in TRAINER_SECTIONS:
            raise ValueError(
                f"trainer_section must be one of {TRAINER_SECTIONS}; got {trainer_section!r}."
            )
        _check(
            isinstance(self.output_dir, str) and self.output_dir.strip() != "",
            "output_dir",
            "must be a folder path, e.g. output_dir=runs/hotpot-rlsr.",
        )
        _check(
            _is_int(self.seed) and 0 <= self.seed <= MAX_SEED,
            "seed",
            f"must be an integer in 0..{MAX_SEED} (2**32 - 1: numpy's seed range, which "
            f"transformers' set_seed uses); got {self.seed!r}.",
        )
        resume = self.resume
        _check(
            isinstance(resume, str) and resume != "",
            "resume",
            "choose 'auto' (newest checkpoint in output_dir, if any), 'never', or a checkpoint "
            "path.",
        )
        if here and resume not in ("auto", "never"):
            _check(
                (Path(resume) / "trainer_state.json").is_file(),
                "resume",
                f"{resume!r} is not a checkpoint folder (no trainer_state.json); use resume=auto, "
                "resume=never or the path of a checkpoint-<step> folder.",
            )
        self.method.validate()
        self.model.validate(here=here)
        self.data.validate(here=here)
        self.heldout.validate()
        if trainer_section == TRAINER_SECTIONS[0]:
            check_grpo(self.grpo, here=here)
            check_vllm_length(self.grpo, self.data.max_prompt_length)
            if here:
                check_launch(self.grpo, self.model.lora.enabled)
        else:
            check_sft(self.sft, here=here)
        self.pool_log.validate()


# --------------------------------------------------------------------------- building


_NESTED = {
    ("TrainSettings", "model"): ModelSettings,
    ("TrainSettings", "data"): DataSettings,
    ("TrainSettings", "method"): MethodSettings,
    ("TrainSettings", "heldout"): HeldOutSettings,
    ("TrainSettings", "pool_log"): PoolLogSettings,
    ("ModelSettings", "lora"): LoraSettings,
}


def _build(cls, values: dict | None, prefix: str):
    """Instantiate dataclass ``cls`` from ``values``, rejecting unknown keys by dotted name."""
    known = {f.name for f in dataclasses.fields(cls)}
    kwargs = {}
    for key, value in dict(values or {}).items():
        if key not in known:
            raise ConfigError(
                f"{prefix}{key}",
                f"unknown key.{closest_hint(key, known)} Known keys: {sorted(known)}.",
            )
        if value == "???":  # OmegaConf's mandatory marker, left unset by the recipe
            raise ConfigError(
                f"{prefix}{key}", f"required but not set; pass {prefix}{key}=<value>."
            )
        nested = _NESTED.get((cls.__name__, key))
        if nested is not None:
            if value is not None and not isinstance(value, dict):
                raise ConfigError(f"{prefix}{key}", f"must be a mapping; got {value!r}.")
            value = _build(nested, value, f"{prefix}{key}.")
        kwargs[key] = value
    return cls(**kwargs)


def from_dict(values: dict) -> TrainSettings:
    """Build ``TrainSettings`` from a plain dict (e.g. ``OmegaConf.to_container(cfg, resolve=True)``).

    Keys that are not part of the schema raise ``ConfigError`` naming the key and the closest
    field. Top-level keys starting with ``_`` or named ``recipe_name`` are bookkeeping of the
    recipes and are ignored.
    """
    values = {k: v for k, v in dict(values).items() if not k.startswith("_") and k != "recipe_name"}
    settings = _build(TrainSettings, values, "")
    for section, cls in (("grpo", "GRPOConfig"), ("sft", "SFTConfig")):
        if getattr(settings, section) is None:
            setattr(settings, section, {})
        if not isinstance(getattr(settings, section), dict):
            raise ConfigError(
                section, f"must be a mapping of {cls} fields; got {getattr(settings, section)!r}."
            )
    return settings


# --------------------------------------------------------------------------- helpers


def vllm_context_length(cfg: TrainSettings, heldout: ResolvedHeldOut | None) -> int | None:
    """vLLM's context per sequence: ``data.max_prompt_length + grpo.max_completion_length``, or,
    when the held-out evaluation runs on a vLLM engine (``heldout``, the resolved plan: the
    colocated engine, or TRL's server, whose ``--max-model-len`` slurm/resolve_config.py takes
    from here),
    ``data.max_prompt_length +`` the larger of the completion length and what a held-out answer
    needs beyond its prompt (``ResolvedHeldOut.answer_tokens``: the answer plus the two Sec. C.3
    fallbacks), so a held-out prompt as long as a training prompt is never cut by the engine.

    Without it vLLM reserves the model's whole context (131,072 tokens for Llama-3.1-8B, ~16 GiB
    of KV cache per sequence slot) and the colocated engine may not start. (The KV cache itself is
    sized by ``grpo.vllm_gpu_memory_utilization``, not by this length.) None when the prompt limit
    is not set (then vLLM's default applies) or when ``grpo.vllm_max_model_length`` is set.
    """
    if cfg.grpo.get("vllm_max_model_length") is not None:
        return None
    prompt = cfg.data.max_prompt_length
    completion = grpo_get(cfg.grpo, "max_completion_length")
    if prompt is None or completion is None:
        return None
    beyond = int(completion)
    if heldout is not None and heldout.backend in ENGINE_BACKENDS:  # colocated or TRL's server
        beyond = max(beyond, heldout.answer_tokens)
    return int(prompt) + beyond


def resolve_resume(resume: str, output_dir: str) -> str | None:
    """Checkpoint to resume from: ``auto`` -> newest ``checkpoint-*`` in output_dir (or None);
    ``never`` -> None; anything else is a checkpoint path."""
    if resume == "never":
        return None
    if resume == "auto":
        if not Path(output_dir).is_dir():
            return None
        from transformers.trainer_utils import get_last_checkpoint

        return get_last_checkpoint(output_dir)
    return resume


# --------------------------------------------------------------------------- task files


def register_tasks(cfg: TrainSettings) -> list[str]:
    """Load the tasks of ``$RLSR_TASKS_PATH`` and ``tasks_dir`` (docs/tasks.md) into the task
    registry, so ``data.task`` / ``heldout.tasks`` and a task's prompt name resolve: the load
    step before planning (``rlsr.method.run_plan.plan_run``), not a check. Idempotent (a task already
    registered from the same file is kept). A task file that is wrong raises ``ConfigError`` on
    ``tasks_dir`` naming the file, the key and the fix."""
    value = cfg.tasks_dir
    _check(
        value is None
        or isinstance(value, str)
        or (isinstance(value, list | tuple) and all(isinstance(v, str) for v in value)),
        "tasks_dir",
        f"must be a folder of task files, a task file, or a list of them; got {value!r}.",
    )
    try:
        return load_env_tasks() + load_tasks(value)
    except TaskError as err:
        raise ConfigError("tasks_dir", str(err)) from None

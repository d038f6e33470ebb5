"""Training configuration: typed dataclasses built from the Hydra tree, validated before loading.

Schema (top-level keys of ``recipes/config.yaml``)::

    model:  {name_or_path, dtype, attn_implementation, trust_remote_code, lora: {enabled, r, alpha,
             dropout, target_modules}}
    data:   {dataset, path, split, system_prompt, limit, max_prompt_length, verifier}
    method: {name: rlsr|rlcr|rlvr|sft, format_weight, method_weight, correct_requires_format,
             correct_scale, weight_cap, max_coverage, label, confidence: verbalized|logprob,
             evaluate_args}
    grpo:   any field of trl.GRPOConfig (num_generations, per_device_train_batch_size, ...)
    sft:    any field of trl.SFTConfig (method=sft only; recipes/method/sft.yaml)
    eval:   {every, at_end, at_start, datasets, split, limit, data_path, verifiers, system_prompt, backend,
             max_new_tokens, temperature, top_p, seed, batch_size, fallbacks, scorers, bootstrap,
             judge_base_url, judge_model, judge_timeout, judge_max_retries,
             judge_max_answer_chars}: held-out
             evaluation during training (``HeldOutSettings``)
    pool_size: completions ranked together per optimizer step (null: from grpo.*)
    pool_log: {every, max_chars}: every training pool on disk (``PoolLogSettings``)
    tasks_dir: a folder of task files or one file (or a list): your own datasets (docs/tasks.md)
    output_dir, seed, resume: auto|never|<checkpoint path>

One pool = one optimizer step (``resolve_pool``): RLSR ranks the B x G completions of one
optimizer step together, so settings that make a generation span several optimizer steps or an
optimizer step hold several generations (``grpo.steps_per_generation``,
``grpo.generation_batch_size``) are rejected. ``pool_size`` states the pool as intent; the
gradient accumulation is then derived from the real world size at start-up.

``check_settings(cfg)`` checks every section without touching a model or a dataset and raises
``ConfigError`` whose message names the offending field and the fix; the method's own checks
live in its registry entry (``rlsr.methods``), which also names the section holding its
trainer's arguments (``grpo`` or ``sft``), and ``rlsr.training.validate`` runs both (``train.py``
prints the message and exits with status 2). This module sits below the method registry and the
trainer: it knows nothing about individual methods.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import logging
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlsr.config.checks import ConfigError, closest_hint, is_number
from rlsr.config.checks import check as _check
from rlsr.config.checks import is_int as _is_int
from rlsr.data import VERIFIERS as VERIFIER_NAMES
from rlsr.data import TaskError, get_spec, load_env_tasks, load_tasks, resolve_datasets
from rlsr.engines import engine_from_env, engine_problems
from rlsr.prompts import (
    ANSWER_FALLBACK_SUFFIX,
    CONFIDENCE_FALLBACK_SUFFIX,
    NO_SYSTEM_PROMPT,
    system_prompt_names,
)
from rlsr.tiny_models import tiny_model_path, tiny_warm_model_path
from rlsr.verifiers import is_plugin_name

__all__ = [
    "ConfigError",
    "CONFIDENCE_SOURCES",
    "NO_SYSTEM_PROMPT",
    "TRAINER_SECTIONS",
    "LoraSettings",
    "ModelSettings",
    "DataSettings",
    "MethodSettings",
    "HeldOutSettings",
    "PoolLogSettings",
    "HELDOUT_BACKENDS",
    "TrainSettings",
    "from_dict",
    "check_settings",
    "closest_hint",
    "is_number",
    "PoolPlan",
    "resolve_pool",
    "default_vllm_max_model_length",
    "world_size_from_env",
    "resolve_attn_implementation",
    "resolve_model_path",
    "resolve_resume",
    "resolve_heldout",
    "ResolvedHeldOut",
    "register_tasks",
    "training_verifier",
    "force_add_overrides",
    "describe_hydra_error",
]

DTYPES = ("bfloat16", "float16", "float32", "auto")
ATTN_IMPLEMENTATIONS = ("auto", "flash_attention_2", "sdpa", "eager")
VLLM_MODES = ("colocate", "server")
TINY_MODEL_ALIAS = "tiny"
TINY_WARM_MODEL_ALIAS = "tiny-warm"
# GRPOConfig fields rlsr sets itself from other sections; a value in grpo.* would be ignored.
MANAGED_GRPO_FIELDS = ("output_dir", "seed", "reward_weights", "model_init_kwargs")
# SFTConfig fields rlsr sets itself.
MANAGED_SFT_FIELDS = ("output_dir", "seed", "model_init_kwargs")
# Sections holding a trainer's arguments (a method's registry entry names its own; GRPO first).
TRAINER_SECTIONS = ("grpo", "sft")
# Where RLSR's pooled ranking reads each completion's confidence (method.confidence).
CONFIDENCE_SOURCES = ("verbalized", "logprob")
# eval.backend: auto = the colocated vLLM engine when the rollouts use one, else transformers.
HELDOUT_BACKENDS = ("auto", "transformers", "vllm")


@dataclass
class LoraSettings:
    enabled: bool = True
    r: int = 1
    alpha: float = 32
    dropout: float = 0.0
    target_modules: Any = "all-linear"


@dataclass
class ModelSettings:
    name_or_path: str = "Qwen/Qwen2.5-7B"
    short_name: str | None = None  # used in the default output_dir only
    dtype: str = "bfloat16"
    attn_implementation: str = "auto"
    trust_remote_code: bool = False
    lora: LoraSettings = field(default_factory=LoraSettings)


@dataclass
class DataSettings:
    dataset: str = "tiny"
    path: str | None = None
    split: str | None = None  # default: the spec's train split
    system_prompt: str | None = None  # default: the spec's ("simple" | "long")
    limit: int | None = None
    max_prompt_length: int | None = None  # prompts longer than this (tokens) are dropped
    verifier: str | None = None  # default: the spec's verifier


@dataclass
class MethodSettings:
    name: str = "rlsr"
    # Reward weights: the authors' released configs (sun-umn/RLSR) use 0.5 / 0.5; the paper text
    # writes R_total = R_method + R_format (1 / 1). docs/training.md, "Paper text vs released code".
    format_weight: float = 0.5
    method_weight: float = 0.5
    # A completion whose format check fails counts as wrong in the reward (RLCR's reference
    # accuracy_reward, which the RLSR authors' code also uses); false: the verifier alone decides.
    correct_requires_format: bool = True
    correct_scale: float = 1.0
    weight_cap: float | None = None
    max_coverage: float = 1.0
    label: str | None = None  # a variant's name in the default output_dir (None: name)
    # verbalized: the <confidence> tag; logprob: the answer's length-normalised log-probability
    # (rlsr.logprob; paper Sec. D.4, Tab. 7). Only methods that rank by confidence accept logprob.
    confidence: str = "verbalized"
    # `rlsr evaluate` flags a model trained this way needs (e.g. method=sft: plain answers and the
    # consistency scorer); slurm/sweep.py passes them to every evaluation of the run.
    evaluate_args: list[str] = field(default_factory=list)


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


@dataclass
class PoolLogSettings:
    """Every training pool on disk (``rlsr.pool_log``; docs/training.md, "Every pool on disk"):
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


@dataclass
class TrainSettings:
    model: ModelSettings = field(default_factory=ModelSettings)
    data: DataSettings = field(default_factory=DataSettings)
    method: MethodSettings = field(default_factory=MethodSettings)
    grpo: dict[str, Any] = field(default_factory=dict)
    pool_size: int | None = None
    sft: dict[str, Any] = field(default_factory=dict)  # trl.SFTConfig fields (method=sft)
    eval: HeldOutSettings = field(default_factory=HeldOutSettings)
    pool_log: PoolLogSettings = field(default_factory=PoolLogSettings)
    # Task files (docs/tasks.md): a folder of *.yaml files, one file, or a list of them; their
    # tasks are registered as datasets before data.dataset / eval.datasets are looked up.
    tasks_dir: Any = None
    output_dir: str = "runs/default"
    seed: int = 42
    resume: str = "auto"


# --------------------------------------------------------------------------- building


_NESTED = {
    ("TrainSettings", "model"): ModelSettings,
    ("TrainSettings", "data"): DataSettings,
    ("TrainSettings", "method"): MethodSettings,
    ("TrainSettings", "eval"): HeldOutSettings,
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

    Keys that are not part of the schema raise ``ConfigError`` naming the key. Top-level keys
    starting with ``_`` or named ``recipe_name`` are bookkeeping of the recipes and are ignored.
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


def world_size_from_env() -> int:
    """Number of processes of this launch (``WORLD_SIZE`` as set by accelerate/torchrun; else 1)."""
    try:
        return max(1, int(os.environ.get("WORLD_SIZE", "1")))
    except ValueError:
        return 1


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
    G = grpo.get("num_generations", 8)
    per_device = grpo.get("per_device_train_batch_size", 8)
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


def default_vllm_max_model_length(cfg: TrainSettings) -> int | None:
    """vLLM's context per sequence: ``data.max_prompt_length + grpo.max_completion_length``, or,
    when the held-out evaluation runs on the colocated engine, ``data.max_prompt_length +`` the
    larger of the completion length and what a held-out answer needs beyond its prompt
    (``ResolvedHeldOut.engine_tokens``: the answer plus the two Sec. C.3 fallbacks), so a
    held-out prompt as long as a training prompt is never cut by the engine's context.

    Without it vLLM reserves the model's whole context (131,072 tokens for Llama-3.1-8B, ~16 GiB
    of KV cache per sequence slot) and the colocated engine may not start. (The KV cache itself is
    sized by ``grpo.vllm_gpu_memory_utilization``, not by this length.) None when the prompt limit
    is not set (then vLLM's default applies) or when ``grpo.vllm_max_model_length`` is set.
    """
    if cfg.grpo.get("vllm_max_model_length") is not None:
        return None
    prompt = cfg.data.max_prompt_length
    completion = cfg.grpo.get("max_completion_length", 256)
    if prompt is None or completion is None:
        return None
    heldout = resolve_heldout(cfg)
    beyond = int(completion)
    if heldout is not None and heldout.backend == "vllm":
        beyond = max(beyond, heldout.engine_tokens)
    return int(prompt) + beyond


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


def _module_available(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def _flash_attn_loads() -> bool:
    """True when ``flash_attn`` is installed *and* imports. The ``flash`` extra builds from source
    against the installed torch; a build for another torch is found by ``find_spec`` but fails
    to import (undefined symbol), and the model load would then crash. Logs one line then."""
    if not _module_available("flash_attn"):
        return False
    try:
        import flash_attn  # noqa: F401  (heavy optional dependency: only to check it loads)
    except Exception as err:  # ImportError, OSError (undefined symbol), RuntimeError
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        logging.getLogger("rlsr").warning(
            "[rlsr] flash_attn is installed but does not import (%s); using sdpa. Rebuild it "
            "for this torch (pip install flash-attn --no-build-isolation) to use FlashAttention-2.",
            first,
        )
        return False
    return True


def resolve_attn_implementation(requested: str, *, on_gpu: bool | None = None) -> str:
    """``auto`` -> ``flash_attention_2`` when a GPU is present and flash-attn is installed and
    imports (``_flash_attn_loads``), else ``sdpa``."""
    if requested != "auto":
        return requested
    gpu = _cuda_available() if on_gpu is None else on_gpu
    return "flash_attention_2" if gpu and _flash_attn_loads() else "sdpa"


def resolve_model_path(name_or_path: str) -> str:
    """Map the aliases ``tiny`` (random) and ``tiny-warm`` (format fine-tuned) to the locally built
    tiny models of rlsr.tiny_models; other names are returned unchanged."""
    if name_or_path == TINY_WARM_MODEL_ALIAS:
        return str(tiny_warm_model_path())
    if name_or_path == TINY_MODEL_ALIAS:
        return str(tiny_model_path())
    return name_or_path


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


# --------------------------------------------------------------------------- command line

_PLAIN_OVERRIDE = re.compile(r"^(?P<key>[A-Za-z_][\w\-]*(?:\.[A-Za-z_][\w\-]*)*)=")


def force_add_overrides(argv: Sequence[str], groups: Sequence[str]) -> list[str]:
    """Rewrite plain ``key=value`` overrides to Hydra's ``++key=value`` (set or add).

    Hydra rejects a key that the composed tree lacks with a multi-line struct error and no
    suggestion, so ``grpo.top_p=0.95`` (a real GRPOConfig field the recipes do not list) would fail
    and ``grpo.learnig_rate=1`` would not say ``learning_rate``. With ``++`` every key reaches
    ``from_dict``/``validate``, which accept GRPOConfig fields and reject typos with the closest
    known name. Left alone: config-group choices (a bare name in ``groups``, e.g. ``method=rlcr``),
    ``hydra.*``, prefixed overrides (``+``, ``++``, ``~``) and flags.
    """
    out: list[str] = []
    for arg in argv:
        match = _PLAIN_OVERRIDE.match(arg)
        key = match["key"] if match else None
        if key is None or key in groups or key.split(".")[0] == "hydra":
            out.append(arg)
        else:
            out.append("++" + arg)
    return out


def describe_hydra_error(err: BaseException) -> str:
    """One line for a Hydra/OmegaConf composition error (unknown recipe, bad override syntax)."""
    missing = getattr(err, "missing_cfg_file", None)
    if missing and "/" in str(missing):
        group, choice = str(missing).rsplit("/", 1)
        options = list(getattr(err, "options", None) or [])
        hint = f"; choose one of {', '.join(options)}" if options else ""
        example = f" (e.g. {group}={options[0]})" if options else ""
        return f"{group}: no config {choice!r} in recipes/{group}/{hint}{example}."
    override = getattr(err, "override", None)
    if override is not None and getattr(err, "message", None):  # OverrideParseException
        detail = " ".join(str(err.message).split())
        return (
            f"{str(override).lstrip('+')}: cannot parse this override ({detail}); "
            "quote values that hold brackets, commas or spaces, e.g. 'key=\"a,b\"'."
        )
    full_key = getattr(err, "full_key", None)
    if type(err).__name__ == "MissingMandatoryValue" and full_key:
        return f"{full_key}: required but not set; pass {full_key}=<value> on the command line."
    parts = [str(err)]
    if err.__cause__ is not None:
        parts.append(str(err.__cause__))
    text = " ".join(" ".join(parts).split())
    return f"{full_key}: {text}" if full_key and not text.startswith(str(full_key)) else text


# --------------------------------------------------------------------------- validation


def _validate_model(m: ModelSettings) -> None:
    _check(
        isinstance(m.name_or_path, str) and m.name_or_path != "",
        "model.name_or_path",
        "set a hub id or local folder, e.g. model.name_or_path=Qwen/Qwen2.5-7B (or 'tiny').",
    )
    _check(
        m.dtype in DTYPES,
        "model.dtype",
        f"got {m.dtype!r}; choose one of {DTYPES}.{closest_hint(str(m.dtype), DTYPES)}",
    )
    _check(
        m.attn_implementation in ATTN_IMPLEMENTATIONS,
        "model.attn_implementation",
        f"got {m.attn_implementation!r}; choose one of {ATTN_IMPLEMENTATIONS}.",
    )
    if m.attn_implementation == "flash_attention_2":
        _check(
            _module_available("flash_attn"),
            "model.attn_implementation",
            "flash_attention_2 requested but flash-attn is not installed; `pip install rlsr[flash]` "
            "(needs CUDA + nvcc) or set model.attn_implementation=auto (falls back to sdpa).",
        )
    _check(
        isinstance(m.trust_remote_code, bool),
        "model.trust_remote_code",
        "must be true or false.",
    )
    lora = m.lora
    _check(isinstance(lora.enabled, bool), "model.lora.enabled", "must be true or false.")
    if lora.enabled:
        _check(
            _is_int(lora.r) and lora.r >= 1,
            "model.lora.r",
            f"LoRA rank must be an integer >= 1; got {lora.r!r} (paper: 1).",
        )
        _check(
            is_number(lora.alpha) and lora.alpha > 0,
            "model.lora.alpha",
            f"must be > 0; got {lora.alpha!r} (paper: 32).",
        )
        _check(
            is_number(lora.dropout) and 0.0 <= lora.dropout < 1.0,
            "model.lora.dropout",
            f"must be in [0, 1); got {lora.dropout!r} (paper: 0).",
        )
        tm = lora.target_modules
        _check(
            (isinstance(tm, str) and tm != "")
            or (isinstance(tm, list | tuple) and tm and all(isinstance(t, str) for t in tm)),
            "model.lora.target_modules",
            f"must be 'all-linear' or a list of module names; got {tm!r}.",
        )


def training_verifier(d: DataSettings) -> str:
    """Validate the data section; returns the verifier the trainer will use."""
    try:
        spec = get_spec(d.dataset)
    except (KeyError, ValueError) as err:
        raise ConfigError("data.dataset", str(err).strip("'\"")) from None
    _check(
        d.system_prompt in (None, *system_prompt_names(), NO_SYSTEM_PROMPT),
        "data.system_prompt",
        f"got {d.system_prompt!r}; choose 'simple', 'long', 'none' (no system message), a task's "
        "prompt name or null (the dataset's own).",
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
        + (f" (this dataset supports {list(spec.alt_verifiers)})." if spec.alt_verifiers else "."),
    )
    _check(
        d.path is None or Path(d.path).exists(),
        "data.path",
        f"{d.path!r} does not exist; point it at a local copy of the dataset or set it to null.",
    )
    return verifier


def _validate_method(m: MethodSettings) -> None:
    """Checks shared by every method; each method's own are in its ``rlsr.methods`` entry."""
    _check(
        isinstance(m.name, str) and m.name != "",
        "method.name",
        f"must name a method, e.g. method=rlsr; got {m.name!r}.",
    )
    for name in ("format_weight", "method_weight"):
        value = getattr(m, name)
        _check(
            is_number(value) and value >= 0,
            f"method.{name}",
            f"must be a number >= 0; got {value!r} (the authors' released configs: 0.5).",
        )
    _check(
        isinstance(m.correct_requires_format, bool),
        "method.correct_requires_format",
        f"must be true or false; got {m.correct_requires_format!r}.",
    )
    _check(
        m.confidence in CONFIDENCE_SOURCES,
        "method.confidence",
        f"got {m.confidence!r}; choose one of {CONFIDENCE_SOURCES}.",
    )
    _check(
        isinstance(m.evaluate_args, list | tuple)
        and all(isinstance(a, str) for a in m.evaluate_args),
        "method.evaluate_args",
        f"must be a list of `rlsr evaluate` flags, e.g. ['--scorers', 'logprob']; "
        f"got {m.evaluate_args!r}.",
    )
    _check(
        m.format_weight + m.method_weight > 0,
        "method.method_weight",
        "format_weight and method_weight are both 0, so every reward is 0; set method_weight=0.5.",
    )


def _validate_grpo(g: dict, world_size: int, pool: int | None = None) -> None:
    from trl import GRPOConfig

    fields = {f.name for f in dataclasses.fields(GRPOConfig)}
    for key in g:
        _check(
            key in fields,
            f"grpo.{key}",
            f"not a trl.GRPOConfig field.{closest_hint(key, fields)}"
            + (
                " TRL 1.16 has no prompt truncation; use data.max_prompt_length."
                if key == "max_prompt_length"
                else ""
            ),
        )
        _check(
            key not in MANAGED_GRPO_FIELDS,
            f"grpo.{key}",
            "is set by rlsr from other sections (output_dir, seed, method.*_weight, model.*); "
            "set it there instead.",
        )
    G = g.get("num_generations", 8)
    _check(
        _is_int(G) and G >= 2,
        "grpo.num_generations",
        f"GRPO needs at least 2 completions per prompt; got {G!r} (paper: 32).",
    )
    for name in ("per_device_train_batch_size", "gradient_accumulation_steps"):
        value = g.get(name, 1)
        _check(
            _is_int(value) and value >= 1,
            f"grpo.{name}",
            f"must be an integer >= 1; got {value!r}.",
        )
    resolve_pool(g, pool, world_size)
    lr = g.get("learning_rate", 1e-6)
    _check(is_number(lr) and lr > 0, "grpo.learning_rate", f"must be > 0; got {lr!r}.")
    temp = g.get("temperature", 1.0)
    _check(is_number(temp) and temp > 0, "grpo.temperature", f"must be > 0; got {temp!r}.")
    mcl = g.get("max_completion_length", 256)
    _check(
        mcl is None or (_is_int(mcl) and mcl >= 1),
        "grpo.max_completion_length",
        f"must be a positive integer; got {mcl!r}.",
    )
    warm = g.get("warmup_steps", 0)
    _check(
        is_number(warm) and warm >= 0,
        "grpo.warmup_steps",
        f"must be >= 0 (a float < 1 is a fraction of all steps, e.g. 0.05); got {warm!r}.",
    )
    if g.get("scale_rewards", "group") not in ("group", "batch", "none", True, False):
        raise ConfigError("grpo.scale_rewards", "choose 'none' (paper), 'group' or 'batch'.")
    if g.get("use_vllm", False):
        mode = g.get("vllm_mode", "colocate")
        _check(
            mode in VLLM_MODES,
            "grpo.vllm_mode",
            f"got {mode!r}; choose 'colocate' (vLLM inside each training process) or 'server' "
            "(a separate `trl vllm-serve`/`vllm serve`; see docs/training.md).",
        )
        _check(
            _module_available("vllm"),
            "grpo.use_vllm",
            "vLLM rollouts requested but vllm is not installed; `pip install rlsr[vllm]` "
            "(GPU), or set grpo.use_vllm=false to generate with transformers.",
        )
    _validate_precision(g, "grpo")


def _validate_precision(g: dict, section: str) -> None:
    use_cpu = bool(g.get("use_cpu", False))
    on_gpu = not use_cpu and _cuda_available()
    bf16 = g.get("bf16", True) and not g.get("fp16", False)
    _check(
        not (bf16 and not on_gpu),
        f"{section}.bf16",
        f"bf16 mixed precision needs a GPU and none is in use; set {section}.bf16=false "
        "(and model.dtype=float32) for CPU runs, or use recipe=tiny.",
    )
    if g.get("use_vllm", False):
        _check(
            not (g.get("vllm_enable_sleep_mode", False) and not on_gpu),
            "grpo.vllm_enable_sleep_mode",
            "vLLM's sleep mode needs a CUDA/ROCm GPU (vLLM refuses it elsewhere: 'Sleep mode is "
            "not supported on current platform'); set grpo.vllm_enable_sleep_mode=false.",
        )
    if g.get("use_liger_kernel", False):
        _validate_liger(g, on_gpu)


LIGER_MIN_VERSION = "0.8.2"  # trl.import_utils.LIGER_KERNEL_MIN_VERSION in TRL 1.16


def _validate_liger(g: dict, on_gpu: bool) -> None:
    """``grpo.use_liger_kernel`` (the paper's "Triton kernels shipped with TRL"; optional).

    TRL 1.16's GRPOTrainer applies only Liger's layer kernels (RMSNorm, RoPE, SwiGLU) through
    transformers' ``apply_liger_kernel``, which unwraps a PEFT model, so LoRA works; it has no
    Liger GRPO loss any more, so every ``loss_type`` works; it rejects
    ``liger_kernel_config={"fused_linear_cross_entropy": true}`` (its own fused LM head). The
    kernels are Triton: they need a GPU.
    """
    from importlib.metadata import PackageNotFoundError, version

    from packaging.version import Version

    try:
        installed = version("liger-kernel")
    except PackageNotFoundError:
        installed = None
    _check(
        installed is not None and Version(installed) >= Version(LIGER_MIN_VERSION),
        "grpo.use_liger_kernel",
        f"needs liger-kernel >= {LIGER_MIN_VERSION} (found {installed or 'none'}); "
        "`pip install rlsr[liger]` or set grpo.use_liger_kernel=false.",
    )
    _check(
        on_gpu,
        "grpo.use_liger_kernel",
        "Liger's kernels are Triton GPU kernels and no GPU is in use; set "
        "grpo.use_liger_kernel=false for CPU runs.",
    )
    kernel_config = g.get("liger_kernel_config") or {}
    _check(
        not (isinstance(kernel_config, dict) and kernel_config.get("fused_linear_cross_entropy")),
        "grpo.liger_kernel_config",
        "fused_linear_cross_entropy replaces the model's forward, which TRL 1.16's GRPOTrainer "
        "patches with its own fused LM head; remove it (TRL applies only the layer kernels).",
    )


def _validate_vllm_length(cfg: TrainSettings) -> None:
    g = cfg.grpo
    length = g.get("vllm_max_model_length")
    prompt, completion = cfg.data.max_prompt_length, g.get("max_completion_length", 256)
    if not g.get("use_vllm", False) or length is None:
        return
    _check(
        _is_int(length) and length >= 1,
        "grpo.vllm_max_model_length",
        f"must be a positive integer (tokens) or null; got {length!r}.",
    )
    if prompt is not None and completion is not None:
        _check(
            length >= prompt + completion,
            "grpo.vllm_max_model_length",
            f"{length} tokens cannot hold data.max_prompt_length + grpo.max_completion_length = "
            f"{prompt} + {completion}; remove it (the default is their sum) or raise it.",
        )


def _validate_sft(g: dict) -> None:
    """The ``sft`` section (method=sft): trl.SFTConfig fields, minus the ones rlsr fills in."""
    from trl import SFTConfig

    fields = {f.name for f in dataclasses.fields(SFTConfig)}
    for key in g:
        _check(
            key in fields,
            f"sft.{key}",
            f"not a trl.SFTConfig field.{closest_hint(key, fields)}",
        )
        _check(
            key not in MANAGED_SFT_FIELDS,
            f"sft.{key}",
            "is set by rlsr from other sections (output_dir, seed, model.*); set it there instead.",
        )
    for name in ("per_device_train_batch_size", "gradient_accumulation_steps"):
        value = g.get(name, 1)
        _check(
            _is_int(value) and value >= 1,
            f"sft.{name}",
            f"must be an integer >= 1; got {value!r}.",
        )
    lr = g.get("learning_rate", 2e-5)
    _check(is_number(lr) and lr > 0, "sft.learning_rate", f"must be > 0; got {lr!r}.")
    max_length = g.get("max_length", 1024)
    _check(
        max_length is None or (_is_int(max_length) and max_length >= 1),
        "sft.max_length",
        f"must be a positive integer (tokens) or null (no truncation); got {max_length!r}.",
    )
    _validate_precision(g, "sft")


def _validate_engine(g: dict, lora: bool) -> None:
    """The launch's engine (DDP / FSDP / DeepSpeed, from accelerate's environment variables,
    ``rlsr.engines``) against the grpo settings: the first problem becomes a ConfigError."""
    for field_name, message in engine_problems(engine_from_env(), g, lora=lora):
        raise ConfigError(field_name, message)


def _validate_top(cfg: TrainSettings) -> None:
    _check(
        isinstance(cfg.output_dir, str) and cfg.output_dir.strip() != "",
        "output_dir",
        "must be a folder path, e.g. output_dir=runs/hotpot-rlsr.",
    )
    _check(_is_int(cfg.seed), "seed", f"must be an integer; got {cfg.seed!r}.")
    resume = cfg.resume
    _check(
        isinstance(resume, str) and resume != "",
        "resume",
        "choose 'auto' (newest checkpoint in output_dir, if any), 'never', or a checkpoint path.",
    )
    if resume not in ("auto", "never"):
        _check(
            (Path(resume) / "trainer_state.json").is_file(),
            "resume",
            f"{resume!r} is not a checkpoint folder (no trainer_state.json); use resume=auto, "
            "resume=never or the path of a checkpoint-<step> folder.",
        )


def _validate_pool_log(p: PoolLogSettings) -> None:
    _check(
        _is_int(p.every) and p.every >= 0,
        "pool_log.every",
        f"must be an integer >= 0 (optimizer steps between written pools; 0: off); got "
        f"{p.every!r}.",
    )
    _check(
        p.max_chars is None or (_is_int(p.max_chars) and p.max_chars >= 0),
        "pool_log.max_chars",
        f"must be an integer >= 0 (characters of each completion kept) or null (all); got "
        f"{p.max_chars!r}.",
    )


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


def resolve_heldout(cfg: TrainSettings, trainer_section: str = "grpo") -> ResolvedHeldOut | None:
    """Check ``cfg.eval`` against the rest of ``cfg`` and fill in its defaults; None when off
    (``eval.every == 0``). Raises ``ConfigError`` naming the ``eval.*`` field and the fix, so a
    setting that cannot work stops the run before training starts, not at its first evaluation."""
    e = cfg.eval
    _check(
        _is_int(e.every) and e.every >= 0,
        "eval.every",
        f"must be an integer >= 0 (optimizer steps between evaluations; 0: off); got {e.every!r}.",
    )
    if e.every == 0:
        return None
    _check(isinstance(e.at_end, bool), "eval.at_end", "must be true or false.")
    _check(isinstance(e.at_start, bool), "eval.at_start", "must be true or false.")
    datasets = e.datasets
    if isinstance(datasets, list | tuple) and not datasets and _task_with_eval(cfg.data.dataset):
        datasets = [cfg.data.dataset]  # a task trained on is evaluated on its eval split
    _check(
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
        _check(
            name in names,
            f"eval.data_path.{name}",
            f"{name!r} is not among eval.datasets {names}.",
        )
        _check(
            Path(e.data_path[name]).exists(),
            f"eval.data_path.{name}",
            f"{e.data_path[name]!r} does not exist; point it at a local copy of the dataset.",
        )
    for name in ("limit", "batch_size", "max_new_tokens"):
        value = getattr(e, name)
        _check(
            value is None or (_is_int(value) and value >= 1),
            f"eval.{name}",
            f"must be a positive integer or null; got {value!r}.",
        )
    _check(
        _is_int(e.fallback_max_new_tokens) and e.fallback_max_new_tokens >= 1,
        "eval.fallback_max_new_tokens",
        f"must be a positive integer; got {e.fallback_max_new_tokens!r}.",
    )
    _check(
        is_number(e.temperature) and e.temperature >= 0,
        "eval.temperature",
        f"must be >= 0 (0: greedy); got {e.temperature!r}.",
    )
    _check(
        is_number(e.top_p) and 0 < e.top_p <= 1,
        "eval.top_p",
        f"must be in (0, 1]; got {e.top_p!r}.",
    )
    _check(_is_int(e.seed), "eval.seed", f"must be an integer; got {e.seed!r}.")
    _check(
        _is_int(e.bootstrap) and e.bootstrap >= 0,
        "eval.bootstrap",
        f"must be an integer >= 0; got {e.bootstrap!r}.",
    )
    _check(
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
        _check(
            name in names,
            f"eval.verifiers.{name}",
            f"{name!r} is not among eval.datasets {names}.",
        )
        _check(
            vname in VERIFIER_NAMES or is_plugin_name(vname),
            f"eval.verifiers.{name}",
            f"unknown verifier {vname!r}; choose one of {VERIFIER_NAMES} or a plugin "
            "'package.module:function'.",
        )
    verifiers = {name: (e.verifiers or {}).get(name, get_spec(name).verifier) for name in names}
    judged = [n for n, v in verifiers.items() if v == "llm_judge"]
    _check(
        not judged or bool(e.judge_base_url),
        "eval.judge_base_url",
        f"{', '.join(judged)} {'is' if len(judged) == 1 else 'are'} verified by an LLM judge; "
        "set eval.judge_base_url=http://HOST:PORT/v1 (an OpenAI-compatible server, e.g. "
        "`vllm serve meta-llama/Llama-3.1-8B-Instruct`) or evaluate other datasets.",
    )
    _check(
        _is_int(e.judge_max_retries) and e.judge_max_retries >= 0,
        "eval.judge_max_retries",
        f"must be an integer >= 0; got {e.judge_max_retries!r}.",
    )
    _check(
        is_number(e.judge_timeout) and e.judge_timeout > 0,
        "eval.judge_timeout",
        f"must be > 0 seconds; got {e.judge_timeout!r}.",
    )
    section = getattr(cfg, trainer_section)
    colocated = bool(section.get("use_vllm")) and section.get("vllm_mode", "colocate") == "colocate"
    _check(
        e.backend in HELDOUT_BACKENDS,
        "eval.backend",
        f"got {e.backend!r}; choose one of {HELDOUT_BACKENDS}.",
    )
    backend = e.backend if e.backend != "auto" else ("vllm" if colocated else "transformers")
    if backend == "vllm":
        _check(
            colocated,
            "eval.backend",
            "vllm evaluates on the training processes' own colocated engine; it needs "
            "grpo.use_vllm=true with grpo.vllm_mode=colocate. Use eval.backend=transformers "
            "(or auto).",
        )
        _check(
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
        _check(
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
        _check(
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
    _check(
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


def register_tasks(cfg: TrainSettings) -> list[str]:
    """Register the tasks of ``$RLSR_TASKS_PATH`` and ``tasks_dir`` (docs/tasks.md); a task file
    that is wrong raises ``ConfigError`` on ``tasks_dir`` naming the file, the key and the fix."""
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


def check_settings(
    cfg: TrainSettings, *, world_size: int | None = None, trainer_section: str = "grpo"
) -> TrainSettings:
    """Check every section of ``cfg`` without loading any model or dataset, except the method's
    own checks (``rlsr.methods``; ``rlsr.training.validate`` runs both). Raises ``ConfigError``;
    returns ``cfg``.

    ``trainer_section`` is the section holding the method's trainer arguments (its registry
    entry's ``args_section``: ``grpo`` or ``sft``); only that one is checked (and used).
    ``world_size`` defaults to ``$WORLD_SIZE`` (set by ``accelerate launch``/torchrun), else 1.
    """
    ws = world_size_from_env() if world_size is None else world_size
    register_tasks(cfg)
    _validate_top(cfg)
    _validate_method(cfg.method)
    _validate_model(cfg.model)
    training_verifier(cfg.data)
    if trainer_section not in TRAINER_SECTIONS:
        raise ValueError(
            f"trainer_section must be one of {TRAINER_SECTIONS}; got {trainer_section!r}."
        )
    if trainer_section == TRAINER_SECTIONS[0]:
        _validate_grpo(cfg.grpo, ws, cfg.pool_size)
        _validate_vllm_length(cfg)
        _validate_engine(cfg.grpo, cfg.model.lora.enabled)
    else:
        _validate_sft(cfg.sft)
    resolve_heldout(cfg, trainer_section)
    _validate_pool_log(cfg.pool_log)
    return cfg

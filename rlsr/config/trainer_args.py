"""What TRL gets: the trainer sections ``grpo`` (any ``trl.GRPOConfig`` field) and ``sft`` (any
``trl.SFTConfig`` field, method=sft), checked against TRL's own fields and defaults, this
machine (precision, vLLM, Liger) and the distributed launch (DDP / FSDP / DeepSpeed).

TRL's fields and defaults are read from TRL's config dataclasses, never restated here, so a TRL
upgrade cannot leave a stale copy behind (``grpo_default``). They are read from the installed
source (``ast``) instead of importing ``trl``, which imports torch and transformers (5-8 s on a
2-core machine) — more than a config typo should cost. A default that is not a literal, or a
class laid out in a way this reader does not follow, is read from the imported class instead:
slower, never different (``tests/test_trl_defaults.py`` compares them).
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import importlib.util
from functools import cache
from pathlib import Path
from typing import Any

from rlsr.core import launch  # the machine's probes, looked up here so a test can stand in for them
from rlsr.core.checks import ConfigError, closest_hint, is_number
from rlsr.core.checks import check as _check
from rlsr.core.checks import is_int as _is_int

# ------------------------------------------------------------------ TRL's own fields and defaults


# Where each class of the chain is declared: (installed package, file inside it, importable
# module). A base outside this table sends the reader to the imported class.
_DECLARED = {
    "GRPOConfig": ("trl", "trainer/grpo_config.py", "trl"),
    "SFTConfig": ("trl", "trainer/sft_config.py", "trl"),
    "_BaseConfig": ("trl", "trainer/base_config.py", "trl.trainer.base_config"),
    "TrainingArguments": ("transformers", "training_args.py", "transformers"),
}
_NOT_LITERAL = object()  # a default this reader cannot evaluate without running TRL's code


class _Unreadable(Exception):
    """The source is not laid out as this reader expects (read the imported class instead)."""


def _package_dir(package: str) -> Path:
    spec = importlib.util.find_spec(package)  # a top-level name: locates without importing
    if spec is None or not spec.submodule_search_locations:
        raise _Unreadable(f"{package} is not installed as a package")
    return Path(next(iter(spec.submodule_search_locations)))


def _default_of(value: ast.expr | None) -> Any:
    """The default a dataclass field declares (``dataclasses.MISSING`` for none)."""
    if value is None:
        return dataclasses.MISSING
    if isinstance(value, ast.Call) and getattr(value.func, "id", None) == "field":
        keywords = {k.arg: k.value for k in value.keywords}
        if "default" in keywords:
            return _literal(keywords["default"])
        factory = keywords.get("default_factory")
        if factory is None:
            return dataclasses.MISSING
        if isinstance(factory, ast.Name) and factory.id in ("list", "dict"):
            return {"list": [], "dict": {}}[factory.id]
        if isinstance(factory, ast.Lambda):
            return _literal(factory.body)
        return _NOT_LITERAL
    return _literal(value)


def _literal(node: ast.expr) -> Any:
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return _NOT_LITERAL


@cache
def _declared_fields(class_name: str) -> dict[str, Any]:
    """``{field: default}`` of ``class_name`` and its bases, read from source (bases first)."""
    if class_name not in _DECLARED:
        raise _Unreadable(f"no known source for {class_name}")
    package, relative, _ = _DECLARED[class_name]
    path = _package_dir(package) / relative
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    except (OSError, SyntaxError) as err:
        raise _Unreadable(str(err)) from None
    found = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == class_name]
    if len(found) != 1:
        raise _Unreadable(f"{class_name} not declared once in {path}")
    node = found[0]
    out: dict[str, Any] = {}
    for base in node.bases:
        name = getattr(base, "id", None) or getattr(base, "attr", None)
        if name != "object":
            out.update(_declared_fields(name))
    for item in node.body:
        if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
            if "ClassVar" in ast.unparse(item.annotation):
                continue
            out[item.target.id] = _default_of(item.value)
    return out


@cache
def _imported_fields(class_name: str) -> dict[str, Any]:
    """``{field: default}`` of the imported class (imports trl: torch, transformers)."""
    module = importlib.import_module(_DECLARED[class_name][2])
    out = {}
    for f in dataclasses.fields(getattr(module, class_name)):
        if f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = f.default_factory()
        else:
            out[f.name] = dataclasses.MISSING
    return out


def _fields(class_name: str) -> dict[str, Any]:
    try:
        return _declared_fields(class_name)
    except _Unreadable:
        return _imported_fields(class_name)


def _value(class_name: str, name: str, value: Any) -> Any:
    return _imported_fields(class_name)[name] if value is _NOT_LITERAL else value


def config_fields(class_name: str) -> dict[str, Any]:
    """``{field: default}`` of ``trl.<class_name>`` (``GRPOConfig``/``SFTConfig``), every
    dataclass field included; ``dataclasses.MISSING`` for a field without a default."""
    return {k: _value(class_name, k, v) for k, v in _fields(class_name).items()}


def config_field_names(class_name: str) -> frozenset[str]:
    """The field names of ``trl.<class_name>``, read without importing TRL."""
    return frozenset(_fields(class_name))


def _default(class_name: str, name: str) -> Any:
    value = _value(class_name, name, _fields(class_name)[name])
    if value is dataclasses.MISSING:
        raise KeyError(name)
    return value


def grpo_default(name: str) -> Any:
    """``trl.GRPOConfig``'s default for field ``name`` (KeyError for a name it lacks)."""
    return _default("GRPOConfig", name)


def sft_default(name: str) -> Any:
    """``trl.SFTConfig``'s default for field ``name`` (KeyError for a name it lacks)."""
    return _default("SFTConfig", name)


def grpo_get(section, name: str) -> Any:
    """``section[name]`` when the recipe sets it, else TRL's ``GRPOConfig`` default."""
    if section is not None and name in section:
        return section[name]
    return grpo_default(name)


# --------------------------------------------------------------------------- the trainer sections


VLLM_MODES = ("colocate", "server")
# GRPOConfig fields rlsr sets itself from other sections; a value in grpo.* would be ignored.
MANAGED_GRPO_FIELDS = ("output_dir", "seed", "reward_weights", "model_init_kwargs")
# SFTConfig fields rlsr sets itself.
MANAGED_SFT_FIELDS = ("output_dir", "seed", "model_init_kwargs")
# Sections holding a trainer's arguments (a method's registry entry names its own; GRPO first).
TRAINER_SECTIONS = ("grpo", "sft")


def _check_keys(g: dict, section: str, class_name: str, managed: tuple[str, ...], from_: str):
    """Every key of a trainer section is a field of ``trl.<class_name>`` that rlsr does not set
    (``managed``, set from the sections ``from_``)."""
    fields = config_field_names(class_name)
    for key in g:
        if key not in fields:  # the hint only for a wrong key: difflib over ~190 names per key
            raise ConfigError(
                f"{section}.{key}",
                f"not a trl.{class_name} field.{closest_hint(key, fields)}"
                + (
                    " TRL 1.16 has no prompt truncation; use data.max_prompt_length."
                    if key == "max_prompt_length" and section == "grpo"
                    else ""
                ),
            )
        _check(
            key not in managed,
            f"{section}.{key}",
            f"is set by rlsr from other sections ({from_}); set it there instead.",
        )


def _check_batch_sizes(g: dict, section: str) -> None:
    """The per-device batch and the gradient accumulation of a trainer section (integers >= 1)
    and its step cap ``max_steps`` (>= 1, or TRL's -1: train ``num_train_epochs``)."""
    for name in ("per_device_train_batch_size", "gradient_accumulation_steps"):
        value = g.get(name, 1)
        _check(
            _is_int(value) and value >= 1,
            f"{section}.{name}",
            f"must be an integer >= 1; got {value!r}.",
        )
    # TRL's -1 (its default) means: no step cap, train num_train_epochs over the dataset; the
    # Trainer takes other values <= 0 without a word (0: one step, -5: the epochs).
    steps = g.get("max_steps", -1)
    _check(
        _is_int(steps) and (steps >= 1 or steps == -1),
        f"{section}.max_steps",
        f"must be a number of optimizer steps >= 1, or -1 (no cap: train "
        f"{section}.num_train_epochs epochs over the data); got {steps!r}.",
    )


def check_grpo(g: dict, *, here: bool = True) -> None:
    """The ``grpo`` section's own fields (the pool they make is
    ``rlsr.config.sections.resolve_pool``'s, run once by ``rlsr.method.run_plan.plan_run``).
    ``here=False``: the run starts on another machine, so what this one offers (vLLM installed, a
    GPU: ``check_precision``) is not asked."""
    _check_keys(
        g, "grpo", "GRPOConfig", MANAGED_GRPO_FIELDS, "output_dir, seed, method.*_weight, model.*"
    )
    G = grpo_get(g, "num_generations")
    _check(
        _is_int(G) and G >= 2,
        "grpo.num_generations",
        f"GRPO needs at least 2 completions per prompt; got {G!r} (paper: 32).",
    )
    _check_batch_sizes(g, "grpo")
    lr = grpo_get(g, "learning_rate")
    _check(is_number(lr) and lr > 0, "grpo.learning_rate", f"must be > 0; got {lr!r}.")
    temp = grpo_get(g, "temperature")
    _check(is_number(temp) and temp > 0, "grpo.temperature", f"must be > 0; got {temp!r}.")
    mcl = grpo_get(g, "max_completion_length")
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
        mode = grpo_get(g, "vllm_mode")
        _check(
            mode in VLLM_MODES,
            "grpo.vllm_mode",
            f"got {mode!r}; choose 'colocate' (vLLM inside each training process) or 'server' "
            "(a separate `trl vllm-serve`/`vllm serve`; see docs/distributed.md).",
        )
        _check(
            not here or launch.module_available("vllm"),
            "grpo.use_vllm",
            "vLLM rollouts requested but vllm is not installed; `pip install rlsr[vllm]` "
            "(GPU), or set grpo.use_vllm=false to generate with transformers.",
        )
    if here:
        check_precision(g, "grpo")


def check_precision(g: dict, section: str) -> None:
    use_cpu = bool(g.get("use_cpu", False))
    on_gpu = not use_cpu and launch.cuda_available()
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
        check_liger(g, on_gpu)


LIGER_MIN_VERSION = "0.8.2"  # trl.import_utils.LIGER_KERNEL_MIN_VERSION in TRL 1.16


def check_liger(g: dict, on_gpu: bool) -> None:
    """``grpo.use_liger_kernel`` (the paper's "Triton kernels shipped with TRL"; optional):
    TRL 1.16 applies only Liger's layer kernels (LoRA and every ``loss_type`` work) and rejects
    its fused LM head; the kernels are Triton, so they need a GPU."""
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


def check_vllm_length(g: dict, prompt: int | None) -> None:
    """``grpo.vllm_max_model_length`` against ``data.max_prompt_length`` (``prompt``) + the
    completion length (the held-out answer's need is checked with the held-out plan)."""
    length = g.get("vllm_max_model_length")
    completion = grpo_get(g, "max_completion_length")
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


def check_sft(g: dict, *, here: bool = True) -> None:
    """The ``sft`` section (method=sft): trl.SFTConfig fields, minus the ones rlsr fills in.
    ``here=False``: as ``check_grpo``'s (no GPU asked for on this machine)."""
    _check_keys(g, "sft", "SFTConfig", MANAGED_SFT_FIELDS, "output_dir, seed, model.*")
    _check_batch_sizes(g, "sft")
    lr = g.get("learning_rate", sft_default("learning_rate"))
    _check(is_number(lr) and lr > 0, "sft.learning_rate", f"must be > 0; got {lr!r}.")
    max_length = g.get("max_length", 1024)
    _check(
        max_length is None or (_is_int(max_length) and max_length >= 1),
        "sft.max_length",
        f"must be a positive integer (tokens) or null (no truncation); got {max_length!r}.",
    )
    if here:
        check_precision(g, "sft")


def check_launch(g: dict, lora: bool) -> None:
    """The distributed launch (DDP / FSDP / DeepSpeed, from accelerate's environment variables,
    ``rlsr.core.launch``) against the grpo settings: the first problem becomes a ConfigError."""
    for field_name, message in launch.launch_problems(launch.launch_from_env(), g, lora=lora):
        raise ConfigError(field_name, message)

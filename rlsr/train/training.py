"""Assembling a training run from the launch's plan (``rlsr.method.run_plan.plan_from_config``,
made once by ``train.py``; nothing here plans again): load the dataset, build the trainer of the
method's section (``TRAINERS``), resume or stop when already final, save the final weights, and
``run_summary``, the account ``train.py`` ends with.
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import shutil
import sys
from pathlib import Path
from typing import Any

from peft import LoraConfig
from trl import GRPOConfig, SFTConfig

from rlsr.config import (
    ENGINE_BACKENDS,
    ConfigError,
    HeldOutSettings,
    TrainSettings,
    resolve_model_path,
    resolve_resume,
    training_verifier,
)
from rlsr.core.launch import launch_from_env, resolve_attn_implementation
from rlsr.core.tokenization import load_tokenizer, model_context_length, prompt_token_counter
from rlsr.data import get_spec, version_differences, version_records
from rlsr.data.loading import (
    DatasetUnavailableError,
    PromptRoom,
    build_verifier,
    download_command,
    load_examples,
)
from rlsr.evaluation.heldout.evaluator import HeldOutEvaluator
from rlsr.evaluation.heldout.history import read_history
from rlsr.evaluation.run.summary import NOT_AVAILABLE, confidence_defined, metric_text, rate_warning
from rlsr.method.pool import HookObserver
from rlsr.method.pool_log import PoolLogObserver, PoolLogWriter
from rlsr.method.run_plan import RunPlan
from rlsr.method.sft_trainer import SFTAnswerTrainer, sft_examples
from rlsr.method.trainer import RLSRTrainer
from rlsr.metrics.selective import ranking_gain_from_aurc
from rlsr.run.eval_protocol import protocol_flags, to_flags
from rlsr.run.run_layout import (
    EVAL_DIR,
    FINAL_WEIGHT_FILES,
    POOLS_DIR,
    STEP_PREFIX,
    VERSIONS_FILE,
    checkpoint_folders,
    pool_path,
    pool_steps,
    step_folders,
)

logger = logging.getLogger(__name__)

# Per trainer section (``args_section``): the trainer, its TRL config and what turns the loaded
# rows into what it trains on (None: the GRPO prompts as loaded).
TRAINERS = {
    "grpo": (RLSRTrainer, GRPOConfig, None),
    "sft": (SFTAnswerTrainer, SFTConfig, sft_examples),
}

__all__ = [
    "trainer_kwargs",
    "load_train_dataset",
    "build_trainer",
    "checkpoint_is_final",
    "export_final_from_checkpoint",
    "run_training",
    "run_summary",
]


def trainer_kwargs(plan: RunPlan) -> dict[str, Any]:
    """The plan's ``trainer_args`` (for ``GRPOConfig`` / ``SFTConfig``) with
    ``model.attn_implementation=auto`` resolved on this machine, the one answer that depends on
    where the trainer runs."""
    _settings_of(plan, "trainer_kwargs")
    kwargs = dict(plan.trainer_args)
    init = dict(kwargs["model_init_kwargs"])
    init["attn_implementation"] = resolve_attn_implementation(
        init["attn_implementation"], on_gpu=False if kwargs.get("use_cpu") else None
    )
    kwargs["model_init_kwargs"] = init
    return kwargs


def _settings_of(plan: RunPlan, caller: str) -> TrainSettings:
    """The plan's settings; bare settings are refused (planning them here could disagree with
    the launch's plan)."""
    if not isinstance(plan, RunPlan):
        raise TypeError(
            f"{caller} takes the launch's run plan (rlsr.method.run_plan.plan_run(settings)), not "
            f"{type(plan).__name__}."
        )
    return plan.settings


def load_train_dataset(cfg, tokenizer=None, room=None):
    """Training examples of ``cfg.data``, prompts above ``data.max_prompt_length`` tokens dropped
    and counted: TRL 1.16 never truncates prompts, and cutting a chat prompt's left would remove
    the system prompt. ``room``: what a user task's prompts must fit (``_prompt_room``)."""
    spec = get_spec(cfg.data.task)
    split = cfg.data.split or spec.train_split or spec.split
    try:
        dataset = load_examples(
            cfg.data.task,
            path=cfg.data.path,
            split=split,
            limit=cfg.data.limit,
            system_prompt=cfg.data.system_prompt,
            room=room,
        )
    except ValueError as err:  # a user task's data: missing column, empty split, duplicate ids
        if spec.task is None:
            raise
        raise ConfigError("data.task", str(err)) from None
    except DatasetUnavailableError:
        raise ConfigError(
            "data.task",
            f"{cfg.data.task!r} (split {split!r}) is not on this machine and the Hugging Face "
            f"hub ({spec.hf_id}) is unreachable; on a connected machine run "
            f"`{download_command(cfg.data.task)}`, copy DIR here and set "
            f"data.path=DIR/{cfg.data.task} (or export RLSR_DATA_DIR=DIR).",
        ) from None
    if cfg.data.path and spec.task is None:  # the built-in task's columns apply: say so
        logger.warning(
            "data.path=%s is read as the built-in task %r: its columns, system prompt, "
            "verifier and held-out sets. For data of your own, write a task file "
            "(docs/tasks.md) and train with data.task=<its name>.",
            cfg.data.path, cfg.data.task,
        )  # fmt: skip
    limit = cfg.data.max_prompt_length
    if limit is not None and tokenizer is not None:
        before, count = len(dataset), prompt_token_counter(tokenizer)
        dataset = dataset.filter(lambda example: count(example["prompt"]) <= limit)
        dropped = before - len(dataset)
        if dropped:
            logger.warning(
                "data.max_prompt_length=%d: dropped %d of %d prompts that are longer.",
                limit,
                dropped,
                before,
            )
        if len(dataset) == 0:
            raise ConfigError(
                "data.max_prompt_length",
                f"every prompt is longer than {limit} tokens; raise data.max_prompt_length.",
            )
    return dataset


def _training_verifier(cfg):
    """A built-in dataset's verifier by name (the trainer builds it); a user task's built now, so
    a plugin that does not import stops the run before the model loads."""
    name = training_verifier(cfg.data)
    if get_spec(cfg.data.task).task is None:
        return name
    return build_verifier(cfg.data.task, name)


def _prompt_room(tokenizer, model_path, budget, budget_name, engine_length=None):
    """``budget`` new tokens within the vLLM engine's ``engine_length`` when set, else the model's
    context; None when that is unknown."""
    if engine_length is not None:
        context = (int(engine_length), "grpo.vllm_max_model_length")
        fix = f"lower {budget_name} or raise grpo.vllm_max_model_length"
    else:
        context = model_context_length(model_path)
        fix = f"lower {budget_name} or use a model with a longer context"
    if context is None or budget is None:
        return None
    return PromptRoom(
        count=prompt_token_counter(tokenizer),
        context=context[0],
        budget=int(budget),
        context_name=context[1],
        budget_name=budget_name,
        fix=fix,
    )


def _train_room(cfg, args, tokenizer, model_path):
    """None with ``data.max_prompt_length`` set (longer prompts are dropped) or without rollouts;
    else ``grpo.max_completion_length`` within the rollout engine's context."""
    budget = getattr(args, "max_completion_length", None)
    if cfg.data.max_prompt_length is not None or budget is None:
        return None
    engine = args.vllm_max_model_length if getattr(args, "use_vllm", False) else None
    return _prompt_room(tokenizer, model_path, budget, "grpo.max_completion_length", engine)


def _load_task_heldout(heldout: HeldOutSettings | None, tokenizer, model_path, args):
    """Load user tasks' held-out splits before the model, so bad data or a prompt that cannot fit
    with ``heldout.max_new_tokens`` is a ``ConfigError`` now, not after the model loaded."""
    if heldout is None:
        return
    engine = None
    if heldout.backend in ENGINE_BACKENDS and getattr(args, "use_vllm", False):
        engine = args.vllm_max_model_length
    room = _prompt_room(
        tokenizer, model_path, heldout.max_new_tokens, "heldout.max_new_tokens", engine
    )
    e = heldout
    for _, name, split in heldout.jobs:
        if get_spec(name).task is None:
            continue
        try:
            load_examples(
                name, path=(e.data_path or {}).get(name), split=split, limit=e.limit,
                system_prompt=heldout.system_prompt, room=room,
            )  # fmt: skip
        except (ValueError, OSError) as err:
            raise ConfigError("heldout.tasks", str(err)) from None


def build_trainer(plan: RunPlan, *, callbacks=None, pool_hook=None, train_dataset=None):
    """The trainer of the method's section (``TRAINERS``) from the launch's plan;
    ``train_dataset`` (rows of the ``rlsr.data`` contract) replaces the recipe's dataset."""
    cfg = _settings_of(plan, "build_trainer")
    method = plan.method
    if pool_hook is not None and method is None:
        raise ValueError(f"pool_hook: method {cfg.method.name!r} has no reward pool to report.")
    trainer_class, args_class, train_examples = TRAINERS[plan.section]
    kwargs = trainer_kwargs(plan)
    try:
        args = args_class(**kwargs)
    except (ValueError, TypeError) as err:
        raise ConfigError(plan.section, str(err)) from None
    pool = plan.pool
    if pool is not None:
        # The pool was planned for $WORLD_SIZE; the launcher's real process count (accelerate's
        # state) must be the same, or each optimizer step would rank another number of rollouts.
        if args.world_size != plan.world_size:
            raise ConfigError(
                "pool_size",
                f"the run was planned for {plan.world_size} processes ($WORLD_SIZE or an MPI "
                f"launcher's count) but the launch has {args.world_size}; start the run with "
                "accelerate launch or torchrun so both agree.",
            )
        if (
            not args.generation_batch_size
            == pool.pool
            == args.steps_per_generation * (args.per_device_train_batch_size * args.world_size)
        ):  # rlsr.config.resolve_pool rejected every way this could differ; a TRL change would
            raise RuntimeError(
                f"TRL's generation batch {args.generation_batch_size} != pool {pool}"
            )

    def say(text: str) -> None:  # the main process tells what the run will do
        if args.process_index == 0:
            print(f"[rlsr] {text}", flush=True)

    say(f"attention implementation: {kwargs['model_init_kwargs']['attn_implementation']}")
    if pool is not None:
        say(pool.describe())
    if getattr(args, "use_vllm", False):
        say(f"vllm_max_model_length: {args.vllm_max_model_length}")
    say(f"launch: {launch_from_env().label} ({args.world_size} processes)")

    model_path = resolve_model_path(cfg.model.name_or_path)
    try:
        tokenizer = load_tokenizer(
            model_path,
            padding_side="left",
            truncation_side="left",
            trust_remote_code=cfg.model.trust_remote_code,
        )
    except OSError as err:  # not a local folder and the hub is unreachable, or no such repo
        reason = " ".join(str(err).split())[:300]
        raise ConfigError(
            "model.name_or_path",
            f"cannot load {cfg.model.name_or_path!r} ({reason}); on a machine without hub access "
            "download it first (`hf download REPO --local-dir DIR`) and set "
            "model.name_or_path=DIR.",
        ) from None
    if train_dataset is None:
        train_dataset = load_train_dataset(
            cfg, tokenizer, _train_room(cfg, args, tokenizer, model_path)
        )
    if train_examples is not None:
        train_dataset = train_examples(train_dataset)

    peft_config = None
    if cfg.model.lora.enabled:
        tm = cfg.model.lora.target_modules
        peft_config = LoraConfig(
            r=cfg.model.lora.r,
            lora_alpha=cfg.model.lora.alpha,
            lora_dropout=cfg.model.lora.dropout,
            target_modules=tm if isinstance(tm, str) else list(tm),
            task_type="CAUSAL_LM",
        )
    extra, pool_log = {}, None
    if method is not None:
        observers = [] if pool_hook is None else [HookObserver(pool_hook)]
        if plan.pool_log.every:
            pool_log = PoolLogWriter(cfg.output_dir, plan.pool_log.every, plan.pool_log.max_chars)
            observers.append(PoolLogObserver(pool_log, method))
            say(f"pool log every {plan.pool_log.every} steps -> {Path(cfg.output_dir) / POOLS_DIR}")
        extra = dict(method=method, verifier=_training_verifier(cfg), observers=observers)
    _load_task_heldout(plan.heldout, tokenizer, model_path, args)  # data errors: before the model
    trainer = trainer_class(
        model=model_path,
        args=args,
        train_dataset=train_dataset,
        processing_class=tokenizer,
        peft_config=peft_config,
        callbacks=callbacks,
        **extra,
    )
    heldout = plan.heldout
    if heldout is not None:  # heldout.every > 0: datasets load now, so a missing one stops us here
        evaluator = HeldOutEvaluator(
            heldout,
            model_path=model_path,
            output_dir=cfg.output_dir,
            trust_remote_code=cfg.model.trust_remote_code,
        ).bind(trainer)
        jobs = ", ".join(job for job, _, _ in heldout.jobs)
        say(
            f"held-out evaluation every {heldout.every} steps on {jobs} ({heldout.backend}) -> "
            f"{Path(cfg.output_dir) / 'eval'}"
        )
        trainer.heldout_evaluator = evaluator
        if pool_log is not None:  # each pool names the held-out step its update first shows at
            pool_log.heldout_due = evaluator.due
    return trainer


# Checkpoint files that are training state, not the model: not copied as the final model.
_STATE_FILES = ("optimizer.pt", "scheduler.pt", "trainer_state.json", "training_args.bin")


def checkpoint_is_final(checkpoint: str | os.PathLike, max_steps: int | None) -> bool:
    """True when ``checkpoint`` reached ``max_steps`` (None or <= 0: trainer_state.json's). HF
    Trainer resumed from it would run one more step and overwrite the final adapter."""
    state_path = Path(checkpoint) / "trainer_state.json"
    if not state_path.is_file():
        return False
    state = json.loads(state_path.read_text())
    end = max_steps if max_steps is not None and max_steps > 0 else state.get("max_steps", 0)
    return bool(end) and int(state.get("global_step", 0)) >= int(end)


def export_final_from_checkpoint(checkpoint: str | os.PathLike, output_dir: str | os.PathLike):
    """Copy the model files of a final checkpoint to ``output_dir`` unless a final adapter/model
    is already there (a job stopped between its last checkpoint and ``save_model``)."""
    out = Path(output_dir)
    if (out / "adapter_config.json").is_file() or (out / "config.json").is_file():
        return
    for item in Path(checkpoint).iterdir():
        state = item.name in _STATE_FILES or item.name.startswith("rng_state")
        if item.is_file() and not state:
            shutil.copy2(item, out / item.name)


def check_versions(cfg, heldout: HeldOutSettings | None) -> None:
    """Refuse to continue a run whose files came from another version of its data, plugin or
    verifier options (``OUTPUT_DIR/versions.json``, docs/tasks.md "Resuming"); else (re)write it."""
    out = Path(cfg.output_dir)
    # what decides the run's verdicts: the training and held-out datasets with their verifiers
    paths = {cfg.data.task: cfg.data.path} if cfg.data.path else None
    train = version_records({cfg.data.task: training_verifier(cfg.data)}, paths)
    held = {} if heldout is None else version_records(heldout.verifiers, heldout.data_path)
    now = {"train": train, "eval": held}
    checkpoints = checkpoint_folders(out)
    earlier = bool(checkpoints or step_folders(out) or pool_steps(out))
    path = out / VERSIONS_FILE
    main = int(os.environ.get("RANK", "0")) == 0
    if earlier and path.is_file():
        was = json.loads(path.read_text())
        diffs = version_differences(was.get("train") or {}, now["train"])
        diffs += version_differences(was.get("eval") or {}, now["eval"])
        if diffs:
            again = (f"; to continue from a checkpoint with the new version on purpose, "
                     f"resume={checkpoints[-1][1]} output_dir=NEW"
                     if checkpoints else "")  # fmt: skip
            raise ConfigError(
                "output_dir",
                f"{out} holds a run made with another version of its data or verifier "
                f"({'; '.join(diffs)}); continuing would mix the two versions in one run "
                f"(checkpoints, {EVAL_DIR}/ curves, {POOLS_DIR}/). Give a new output_dir{again}.",
            )
    elif earlier and main:
        print(f"[rlsr] {out} has no {VERSIONS_FILE} (written by an older rlsr), so this resume "
              "cannot check the versions of its data and verifier; recorded from now on.",
              flush=True)  # fmt: skip
    if main:
        out.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(now, indent=2) + "\n")


def run_training(plan: RunPlan, *, callbacks=None, pool_hook=None):
    """Build, train (resuming per ``resume``) and save the final weights of the launch's plan;
    None, without loading the model, when the checkpoint to resume from is already final."""
    cfg = _settings_of(plan, "run_training")
    checkpoint = resolve_resume(cfg.resume, cfg.output_dir)
    check_versions(cfg, plan.heldout)
    if checkpoint and checkpoint_is_final(checkpoint, getattr(cfg, plan.section).get("max_steps")):
        if int(os.environ.get("RANK", "0")) == 0:
            export_final_from_checkpoint(checkpoint, cfg.output_dir)
            print(
                f"[rlsr] {checkpoint} already reached the last step; nothing to train. "
                "Set resume=never or a new output_dir to train again, or raise grpo.max_steps "
                "to continue.",
                flush=True,
            )
        return None
    trainer = build_trainer(plan, callbacks=callbacks, pool_hook=pool_hook)
    if checkpoint and trainer.args.process_index == 0:
        print(f"[rlsr] resuming from {checkpoint}", flush=True)
    trainer.train(resume_from_checkpoint=checkpoint)
    trainer.save_model(cfg.output_dir)
    return trainer


def rlsr_program() -> str:
    """``rlsr`` when the one on PATH is this interpreter's, else the script beside it (relative
    to the working directory when under it), so the printed commands run without activating the
    venv."""
    beside = Path(sys.executable).parent / "rlsr"
    on_path = shutil.which("rlsr")
    if not beside.is_file() or (on_path and Path(on_path).absolute() == beside.absolute()):
        return "rlsr"
    try:
        return str(beside.absolute().relative_to(Path.cwd()))
    except ValueError:
        return str(beside)


def _dataset_lines(dataset: str, first: dict, last: dict) -> list[str]:
    """AURC, error rate and ranking gain (error rate - AURC; both n/a at a step that gave no
    confidence) at the first and last evaluated step, the last step's format rate, and a warning
    when its answers rarely carry a confidence or the format."""
    aurc, gain = [], []
    for h in (first, last):
        missing = h.get("missing_confidence")
        value = h["aurc"] if missing is None or confidence_defined(h["n"], missing) else None
        aurc.append(metric_text(value, 4))
        # + 0.0 after rounding: a gain of -1e-16 (float noise of a constant confidence) is 0.000
        gain.append(
            NOT_AVAILABLE
            if value is None
            else f"{round(ranking_gain_from_aurc(value, 1 - h['accuracy']), 3) + 0.0:+.3f}"
        )
    lines = [
        f"    {dataset}: AURC {aurc[0]} at step {first['step']} -> {aurc[1]} "
        f"at step {last['step']} (lower is better); error rate {1 - first['accuracy']:.3f} -> "
        f"{1 - last['accuracy']:.3f}; ranking gain (error rate - AURC, 0 = no ranking) "
        f"{gain[0]} -> {gain[1]}; format rate {last['format_rate']:.2f}"
    ]
    warning = rate_warning(last["n"], last.get("missing_confidence") or 0, last.get("format_rate"))
    if warning is not None:
        lines.append(f"    warning: {dataset} at step {last['step']}: {warning}")
    return lines


def _engine_flags(heldout: HeldOutSettings) -> list[str]:
    """``rlsr evaluate`` flags for the held-out evaluation's engine: with vLLM, TRL pushes merged
    LoRA weights into it, so ``--backend vllm --merge-adapter`` (TRL merges in the training
    dtype, rlsr evaluate in float32: bfloat16 weights may differ in the last bit)."""
    if heldout.backend in ("vllm", "vllm_server"):
        return ["--backend", "vllm", "--merge-adapter"]
    return []


def _tasks_flags(tasks_dir) -> list[str]:
    """``--tasks-dir`` (absolute) for each ``tasks_dir`` entry; ``rlsr evaluate`` reads
    ``$RLSR_TASKS_PATH`` itself."""
    if not tasks_dir:
        return []
    entries = [tasks_dir] if isinstance(tasks_dir, str) else list(tasks_dir)
    return [arg for entry in entries for arg in ("--tasks-dir", str(Path(entry).absolute()))]


def _evaluate_command(plan: RunPlan, output_dir: Path) -> str:
    """``rlsr evaluate`` of the final weights on the held-out tasks (else the training task) with
    the held-out evaluation's protocol, so it reproduces the last held-out step's numbers."""
    cfg, heldout = plan.settings, plan.heldout
    tasks = heldout.tasks if heldout is not None else [cfg.data.task]
    args = [
        rlsr_program(),
        "evaluate",
        "--model",
        cfg.model.name_or_path,
        "--adapter",
        str(output_dir),
        "--tasks",
        ",".join(tasks),
        "--output-dir",
        str(output_dir / "evaluate"),
    ]
    args += _tasks_flags(cfg.tasks_dir)
    if heldout is not None:
        return shlex.join(args + protocol_flags(heldout.protocol) + _engine_flags(heldout))
    return shlex.join(args + protocol_flags(plan.protocol()))


def _variant_lines(plan: RunPlan) -> list[str]:
    """Per named protocol variant: what it changes on top of the run's protocol, as flags."""
    base = plan.protocol().values()
    lines = []
    for name in sorted(plan.variants):
        changed = {k: v for k, v in plan.protocol(name).values().items() if v != base[k]}
        text = " ".join(to_flags(changed)) or "nothing (same as held-out)"
        lines.append(f"  variant {name:<7}{text}  (rlsr evaluate ... --protocol-variant {name})")
    return lines


def run_summary(plan: RunPlan, *, seconds: float | None = None, steps: int | None = None) -> str:
    """What ``train.py`` prints at the end, read from the finished run's folder: where its files
    are, each held-out dataset's AURC and accuracy at the first and last evaluated step, and the
    next commands (``rlsr evaluate`` of the final adapter, ``rlsr report``)."""
    out = Path(_settings_of(plan, "run_summary").output_dir)
    done = f"{steps} optimizer steps" if steps is not None else "training finished"
    took = f" in {seconds:.0f} s" if seconds is not None else ""
    lines = [f"[rlsr] {done}{took}. Run folder: {out}"]
    final = [name for name in FINAL_WEIGHT_FILES if (out / name).is_file()]
    lines.append(f"  adapter      {out / final[0] if final else 'none saved'}")
    ckpts = checkpoint_folders(out)
    lines.append(
        "  checkpoints  " + (", ".join(str(folder) for _, folder in ckpts) if ckpts else "none")
    )
    history = [h for h in read_history(out) if "failed" not in h]
    failed = [h["step"] for h in read_history(out) if "failed" in h]
    if history:
        evaluated = ", ".join(str(n) for n in sorted({h["step"] for h in history}))
        lines.append(f"  held-out     {out / EVAL_DIR} (steps {evaluated})")
        for dataset in dict.fromkeys(h["dataset"] for h in history):
            rows = sorted((h for h in history if h["dataset"] == dataset), key=lambda h: h["step"])
            lines += _dataset_lines(dataset, rows[0], rows[-1])
        if failed:
            lines.append(
                f"    failed evaluations at steps {failed} ({out / EVAL_DIR}/{STEP_PREFIX}N)"
            )
    else:
        lines.append("  held-out     none (heldout.every=0)")
    pools = pool_steps(out)
    if pools:
        lines.append(
            f"  pools        {out / POOLS_DIR} ({len(pools)} files, "
            f"{pool_path(out, pools[0]).name} ... {pool_path(out, pools[-1]).name})"
        )
    else:
        lines.append("  pools        none (pool_log.every=0)")
    lines += _variant_lines(plan)
    lines.append("next:")
    if final:
        lines.append(f"  {_evaluate_command(plan, out)}")
    report = shlex.quote(str(out / "report"))
    rlsr = shlex.quote(rlsr_program())
    if history:
        lines.append(f"  {rlsr} report --curves {shlex.quote(str(out))} --output-dir {report}")
    if pools:
        lines.append(f"  {rlsr} report --pools {shlex.quote(str(out))} --output-dir {report}")
    return "\n".join(lines)

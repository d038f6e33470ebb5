"""RLSRTrainer: TRL's GRPOTrainer with rewards computed over the pooled batch of every process.

What pooling means (RLSR paper Sec. 2.2, C.4.2; DESIGN.md). One optimizer step generates
B x G completions spread over all processes and gradient-accumulation steps (TRL 1.16 generates
the whole effective batch at once: ``steps_per_generation = gradient_accumulation_steps``). The
lifted-AURC reward of a completion depends on its confidence *rank within that whole pool*, so
it cannot be computed per process or per micro-batch.

The only hook overridden is ``GRPOTrainer._calculate_rewards``. TRL 1.16 calls it from
``_generate_and_score_completions`` with the process's LOCAL prompts/completions and expects the
GLOBAL ``(N_global, n_reward_funcs)`` tensor back, rows in process order (its own implementation
ends with ``accelerate.utils.gather``); it then weights the columns with ``reward_weights``,
subtracts group means over ``view(-1, G)`` and slices out this process's rows. We therefore:

1. parse (``rlsr.parsing``) and verify (``rlsr.verifiers``) the local completions;
2. gather ``(correct, confidence [NaN = missing], format_ok)`` from every process, process-ordered;
3. compute the reward columns on the whole pool with ``rlsr.rewards`` (identical on every rank);
4. log pool statistics (``rlsr/*``) from the gathered arrays, so all ranks agree.

Reward columns and their ``reward_weights`` (paper: 0.5 format + 0.5 method reward):

=======  =====================================================================
rlsr     format_reward (w_f), lifted_aurc_reward (w_m)
rlcr     format_reward (w_f), correctness_reward (w_m), brier_reward (w_m)
rlvr     format_reward (w_f), correctness_reward (w_m)
=======  =====================================================================

GRPOTrainer receives one placeholder reward function per column so its bookkeeping (names in
``rewards/<name>/mean`` logs, weight count checks) stays consistent; the placeholders are never
called.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from accelerate.utils import gather, gather_object
from trl import GRPOTrainer

from rlsr import rewards as R

logger = logging.getLogger(__name__)

__all__ = [
    "RLSRTrainer",
    "reward_columns",
    "compute_reward_columns",
    "completion_text",
    "pool_statistics",
    "build_trainer",
    "load_train_dataset",
    "run_training",
]


# --------------------------------------------------------------------------- pure pieces


def reward_columns(method) -> list[tuple[str, float]]:
    """``[(column name, reward weight), ...]`` of a method (``rlsr.config.MethodSettings``)."""
    fw, mw = float(method.format_weight), float(method.method_weight)
    if method.name == "rlsr":
        return [("format_reward", fw), ("lifted_aurc_reward", mw)]
    if method.name == "rlcr":
        return [("format_reward", fw), ("correctness_reward", mw), ("brier_reward", mw)]
    if method.name == "rlvr":
        return [("format_reward", fw), ("correctness_reward", mw)]
    raise ValueError(f"method.name: unknown method {method.name!r}; choose rlsr, rlcr or rlvr.")


def compute_reward_columns(method, correct, confidence, format_ok) -> np.ndarray:
    """Unweighted reward columns ``(n, n_columns)`` for one pooled batch (order of ``reward_columns``).

    ``confidence`` uses NaN for a missing confidence. All rank-based terms are computed over the
    whole pool passed in; the caller must pass every completion of the optimizer step.
    """
    correct = np.asarray(correct, dtype=bool)
    format_ok = np.asarray(format_ok, dtype=bool)
    cols: list[np.ndarray] = []
    for name, _ in reward_columns(method):
        if name == "format_reward":
            cols.append(R.format_reward(format_ok))
        elif name == "lifted_aurc_reward":
            cols.append(
                R.lifted_aurc_rewards(
                    correct,
                    confidence,
                    correct_scale=method.correct_scale,
                    weight_cap=method.weight_cap,
                    max_coverage=method.max_coverage,
                )
            )
        elif name == "correctness_reward":
            cols.append(R.correctness_reward(correct))
        elif name == "brier_reward":
            cols.append(R.brier_reward(correct, confidence, format_ok))
    return np.stack(cols, axis=1)


def completion_text(completion: Any) -> str:
    """Text of a completion: a plain string, or the assistant message(s) of a conversational one."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        completion = [completion]
    parts: list[str] = []
    for message in completion:
        if message.get("role", "assistant") != "assistant":
            continue
        content = message.get("content", "")
        if isinstance(content, list):  # content blocks
            content = "".join(b.get("text", "") for b in content if isinstance(b, dict))
        parts.append(content or "")
    return "".join(parts)


def pool_statistics(
    correct: np.ndarray, confidence: np.ndarray, format_ok: np.ndarray, timeouts: int
) -> dict[str, float]:
    """``rlsr/*`` log values for one pool. Missing confidences count as 0 (as in the ranking)."""
    from rlsr import metrics as M

    ok = np.asarray(correct, dtype=bool)
    conf = R.confidence_for_ranking(confidence)
    n = int(ok.shape[0])
    stats = {
        "rlsr/pool_size": float(n),
        "rlsr/aurc": M.aurc(conf, ok),
        "rlsr/ece": M.ece(conf, ok),
        "rlsr/accuracy": float(ok.mean()),
        "rlsr/mean_confidence": float(conf.mean()),
        "rlsr/confidence_gap": M.confidence_gap(conf, ok),
        "rlsr/format_rate": float(np.asarray(format_ok, dtype=bool).mean()),
        "rlsr/confidence_parsed_rate": float(np.mean(~np.isnan(np.asarray(confidence, float)))),
        "rlsr/verifier_timeouts": float(timeouts),
    }
    return stats


def _verifier_inputs(inputs: Sequence[dict], verifier_name: str) -> dict[str, list]:
    """Keyword arguments for ``verify_batch`` from the dataset columns passed through ``inputs``.

    Same rules as ``rlsr.data.verification_inputs``: exact_match -> golds = ``answers`` lists;
    math -> ``answer``; mcq -> ``answer_letter`` with ``options`` (JSON) decoded.
    """
    if verifier_name == "exact_match":
        golds = [list(x["answers"]) if x.get("answers") else [x["answer"]] for x in inputs]
        return {"golds": golds}
    if verifier_name == "mcq":
        return {
            "golds": [x["answer_letter"] for x in inputs],
            "options": [
                json.loads(x["options"]) if isinstance(x["options"], str) else x["options"]
                for x in inputs
            ],
        }
    return {"golds": [x["answer"] for x in inputs]}


def _placeholder(name: str) -> Callable:
    def reward(*args, **kwargs):  # pragma: no cover - RLSRTrainer never calls it
        raise RuntimeError(
            f"{name} is a placeholder; RLSRTrainer computes pooled rewards in _calculate_rewards."
        )

    reward.__name__ = reward.__qualname__ = name
    return reward


# --------------------------------------------------------------------------- trainer


class RLSRTrainer(GRPOTrainer):
    """GRPOTrainer whose rewards are ranked over the whole pooled batch (see module docstring).

    Args (beyond GRPOTrainer's, which are passed through; do not pass ``reward_funcs``):
        method: ``rlsr.config.MethodSettings`` (name, weights, lifted-AURC options).
        verifier: verifier name for ``rlsr.verifiers.get_verifier`` or a verifier object.
        parse_spec: ``rlsr.parsing.FormatSpec`` of the response format (default FULL_FORMAT).
        pool_hook: optional ``f(pool: dict)`` called on every rank after each pooled reward
            computation with the gathered arrays (for tests and debugging). When set, it must be
            set on all ranks: completion texts and golds are gathered for it (a collective).
    """

    def __init__(
        self,
        *args,
        method,
        verifier: str | Any = "exact_match",
        parse_spec=None,
        pool_hook: Callable[[dict], None] | None = None,
        **kwargs,
    ):
        if kwargs.get("reward_funcs") is not None:
            raise ValueError(
                "reward_funcs: RLSRTrainer builds its reward columns from `method`; do not pass "
                "reward_funcs."
            )
        self.method = method
        self.columns = reward_columns(method)
        kwargs["reward_funcs"] = [_placeholder(name) for name, _ in self.columns]
        args_obj = kwargs.get("args")
        if args_obj is not None:
            weights = [w for _, w in self.columns]
            if args_obj.reward_weights is None:
                args_obj.reward_weights = weights
            elif [float(w) for w in args_obj.reward_weights] != weights:
                raise ValueError(
                    f"args.reward_weights={args_obj.reward_weights} disagree with the method's "
                    f"{weights}; set method.format_weight / method.method_weight instead."
                )
        super().__init__(*args, **kwargs)
        if parse_spec is None:
            from rlsr.parsing import FULL_FORMAT

            parse_spec = FULL_FORMAT
        self.parse_spec = parse_spec
        self._verifier_spec = verifier
        self._verifier = None if isinstance(verifier, str) else verifier
        self.pool_hook = pool_hook

    # -- verifier lifetime: created on first use, closed when training ends
    @property
    def verifier(self):
        if self._verifier is None:
            from rlsr.verifiers import get_verifier

            self._verifier = get_verifier(self._verifier_spec)
        return self._verifier

    @property
    def verifier_name(self) -> str:
        if isinstance(self._verifier_spec, str):
            return self._verifier_spec
        return getattr(self._verifier_spec, "name", type(self._verifier_spec).__name__)

    def close_verifier(self) -> None:
        """Shut down verifier worker processes (the math verifier's pool)."""
        if self._verifier is not None and hasattr(self._verifier, "close"):
            self._verifier.close()
        if isinstance(self._verifier_spec, str):
            self._verifier = None

    def train(self, *args, **kwargs):
        try:
            return super().train(*args, **kwargs)
        finally:
            self.close_verifier()

    # -- saving: no pickles beside the weights
    def _save(self, output_dir: str | None = None, state_dict=None) -> None:
        """HF Trainer's save, with ``training_args.json`` instead of the pickled
        ``training_args.bin``: loading a pickle runs code, nothing reads that file back (resume
        uses ``trainer_state.json``), and the JSON masks token fields (``hub_token``)."""
        super()._save(output_dir, state_dict=state_dict)
        folder = Path(output_dir if output_dir is not None else self.args.output_dir)
        (folder / "training_args.bin").unlink(missing_ok=True)
        (folder / "training_args.json").write_text(self.args.to_json_string())

    # -- the pooled reward
    def _score_local(self, inputs, completions) -> tuple[np.ndarray, list[str], int]:
        """(n_local, 3) float64 [correct, confidence (NaN missing), format_ok], texts, timeouts."""
        from rlsr.parsing import parse_response

        texts = [completion_text(c) for c in completions]
        parsed = [parse_response(t, self.parse_spec) for t in texts]
        result = self.verifier.verify_batch(
            [p.answer for p in parsed], **_verifier_inputs(inputs, self.verifier_name)
        )
        local = np.stack(
            [
                np.asarray(result.correct, dtype=np.float64),
                np.array(
                    [np.nan if p.confidence is None else p.confidence for p in parsed],
                    dtype=np.float64,
                ),
                np.array([p.format_ok for p in parsed], dtype=np.float64),
            ],
            axis=1,
        )
        return local, texts, int(result.timeouts)

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        device = self.accelerator.device
        mode = "train" if self.model.training else "eval"
        local, texts, timeouts = self._score_local(inputs, completions)

        # Process-ordered gather: the same row order TRL uses for its own gather of rewards.
        pooled = gather(torch.as_tensor(local, dtype=torch.float64, device=device)).cpu().numpy()
        total_timeouts = int(gather(torch.tensor([timeouts], device=device)).sum().item())
        correct = pooled[:, 0] > 0.5
        confidence = pooled[:, 1]
        format_ok = pooled[:, 2] > 0.5

        columns = compute_reward_columns(self.method, correct, confidence, format_ok)
        for name, value in pool_statistics(correct, confidence, format_ok, total_timeouts).items():
            if not math.isnan(value):
                self._metrics[mode][name].append(value)

        if self.pool_hook is not None:
            golds = _verifier_inputs(inputs, self.verifier_name)["golds"]
            self.pool_hook(
                {
                    "mode": mode,
                    "global_step": self.state.global_step,
                    "process_index": self.accelerator.process_index,
                    "num_processes": self.accelerator.num_processes,
                    "correct": correct,
                    "confidence": confidence,
                    "format_ok": format_ok,
                    "rewards": columns.astype(np.float32),
                    "texts": gather_object(texts),
                    "golds": gather_object(golds),
                    "timeouts": total_timeouts,
                }
            )
        return torch.as_tensor(columns, dtype=torch.float32, device=device)


# --------------------------------------------------------------------------- assembling a run


def load_train_dataset(cfg, tokenizer=None):
    """Training examples of ``cfg.data`` (``rlsr.data.load_examples``), prompts above
    ``data.max_prompt_length`` tokens dropped.

    TRL 1.16 has no ``max_prompt_length`` (it never truncates prompts); cutting the left of a
    chat prompt would remove the system prompt, so over-long prompts are dropped and counted.
    """
    from rlsr.config import ConfigError
    from rlsr.data import get_spec, load_examples
    from rlsr.data.loading import DatasetUnavailableError, download_command

    spec = get_spec(cfg.data.dataset)
    split = cfg.data.split or spec.train_split or spec.split
    try:
        dataset = load_examples(
            cfg.data.dataset,
            path=cfg.data.path,
            split=split,
            limit=cfg.data.limit,
            system_prompt=cfg.data.system_prompt,
        )
    except DatasetUnavailableError:
        raise ConfigError(
            "data.dataset",
            f"{cfg.data.dataset!r} (split {split!r}) is not on this machine and the Hugging Face "
            f"hub ({spec.hf_id}) is unreachable; on a connected machine run "
            f"`{download_command(cfg.data.dataset)}`, copy DIR here and set "
            f"data.path=DIR/{cfg.data.dataset} (or export RLSR_DATA_DIR=DIR).",
        ) from None
    limit = cfg.data.max_prompt_length
    if limit is not None and tokenizer is not None:
        before = len(dataset)

        def short_enough(example) -> bool:
            ids = tokenizer.apply_chat_template(
                example["prompt"], add_generation_prompt=True, tokenize=True
            )
            if isinstance(ids, dict) or hasattr(ids, "keys"):
                ids = ids["input_ids"]
            return len(ids) <= limit

        dataset = dataset.filter(short_enough)
        dropped = before - len(dataset)
        if dropped:
            logger.warning(
                "data.max_prompt_length=%d: dropped %d of %d prompts that are longer.",
                limit,
                dropped,
                before,
            )
        if len(dataset) == 0:
            from rlsr.config import ConfigError

            raise ConfigError(
                "data.max_prompt_length",
                f"every prompt is longer than {limit} tokens; raise data.max_prompt_length.",
            )
    return dataset


def build_trainer(cfg, *, callbacks=None, pool_hook=None, train_dataset=None) -> RLSRTrainer:
    """Create the RLSRTrainer for validated settings ``cfg`` (``rlsr.config.TrainSettings``)."""
    from trl import GRPOConfig

    from rlsr.config import ConfigError, grpo_kwargs, resolve_model_path
    from rlsr.tokenization import load_tokenizer

    kwargs = grpo_kwargs(cfg)
    try:
        args = GRPOConfig(**kwargs)
    except (ValueError, TypeError) as err:
        raise ConfigError("grpo", str(err)) from None
    attn = kwargs["model_init_kwargs"]["attn_implementation"]
    if args.process_index == 0:
        print(f"[rlsr] attention implementation: {attn}", flush=True)

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
        train_dataset = load_train_dataset(cfg, tokenizer)

    peft_config = None
    if cfg.model.lora.enabled:
        from peft import LoraConfig

        tm = cfg.model.lora.target_modules
        peft_config = LoraConfig(
            r=cfg.model.lora.r,
            lora_alpha=cfg.model.lora.alpha,
            lora_dropout=cfg.model.lora.dropout,
            target_modules=tm if isinstance(tm, str) else list(tm),
            task_type="CAUSAL_LM",
        )
    from rlsr.config import training_verifier

    verifier = training_verifier(cfg.data)
    return RLSRTrainer(
        model=model_path,
        args=args,
        method=cfg.method,
        verifier=verifier,
        train_dataset=train_dataset,
        processing_class=tokenizer,
        peft_config=peft_config,
        callbacks=callbacks,
        pool_hook=pool_hook,
    )


# Checkpoint files that are training state, not the model: not copied as the final model.
_STATE_FILES = ("optimizer.pt", "scheduler.pt", "trainer_state.json", "training_args.bin")


def checkpoint_is_final(checkpoint: str | os.PathLike, max_steps: int | None) -> bool:
    """True when ``checkpoint`` already reached the end of training.

    ``max_steps`` is ``grpo.max_steps`` (None or <= 0: the run is epoch based and the
    ``max_steps`` HF Trainer stored in ``trainer_state.json`` is the end). HF Trainer resumed
    from such a checkpoint runs one more optimizer step before it checks ``max_steps``, so a
    requeued or rerun finished job would train past its end and overwrite the final adapter.
    """
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
        if (
            item.is_file()
            and item.name not in _STATE_FILES
            and not item.name.startswith("rng_state")
        ):
            shutil.copy2(item, out / item.name)


def run_training(cfg, *, callbacks=None, pool_hook=None) -> RLSRTrainer | None:
    """Validate, build, train (resuming per ``cfg.resume``) and save the final adapter/model.

    Returns None without loading the model when the checkpoint to resume from is already final.
    """
    from rlsr.config import resolve_resume, validate

    validate(cfg)
    checkpoint = resolve_resume(cfg.resume, cfg.output_dir)
    if checkpoint and checkpoint_is_final(checkpoint, cfg.grpo.get("max_steps")):
        if int(os.environ.get("RANK", "0")) == 0:
            export_final_from_checkpoint(checkpoint, cfg.output_dir)
            print(
                f"[rlsr] {checkpoint} already reached the last step; nothing to train. "
                "Set resume=never or a new output_dir to train again, or raise grpo.max_steps "
                "to continue.",
                flush=True,
            )
        return None
    trainer = build_trainer(cfg, callbacks=callbacks, pool_hook=pool_hook)
    if checkpoint and trainer.args.process_index == 0:
        print(f"[rlsr] resuming from {checkpoint}", flush=True)
    trainer.train(resume_from_checkpoint=checkpoint)
    trainer.save_model(cfg.output_dir)
    return trainer

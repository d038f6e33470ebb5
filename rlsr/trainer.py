"""RLSRTrainer: TRL's GRPOTrainer with rewards computed over the pooled batch of every process.

What pooling means (RLSR paper Sec. 2.2, C.4.2; DESIGN.md). One optimizer step generates
B x G completions spread over all processes and gradient-accumulation steps (TRL 1.16 generates
the whole effective batch at once: ``steps_per_generation = gradient_accumulation_steps``). The
lifted-AURC reward of a completion depends on its confidence *rank within that whole pool*, so
it cannot be computed per process or per micro-batch.

The reward hook overridden is ``GRPOTrainer._calculate_rewards`` (the LoRA weight sync to vLLM
is ``rlsr.weight_sync``: out-of-place merged tensors, the base is never written). TRL 1.16 calls
it from
``_generate_and_score_completions`` with the process's LOCAL prompts/completions and expects the
GLOBAL ``(N_global, n_reward_funcs)`` tensor back, rows in process order (its own implementation
ends with ``accelerate.utils.gather``); it then weights the columns with ``reward_weights``,
subtracts group means over ``view(-1, G)`` and slices out this process's rows. We therefore:

1. parse (``rlsr.parsing``) and verify (``rlsr.verifiers``) the local completions; with the
   log-probability selector (``method.confidence=logprob``, paper Sec. D.4) the confidence is the
   answer's length-normalised log-probability under the current policy (``rlsr.logprob``: one
   extra no-grad forward of prompt + response up to the answer; TRL's own log-probs at this point
   are temperature-scaled or absent, see ``_logprob_confidences``) instead of the tag;
2. gather ``(correct, confidence [NaN = missing], format_ok)`` from every process, process-ordered;
3. compute the method's reward columns on the whole pool (identical on every rank);
4. log pool statistics (``rlsr/*``) from the gathered arrays, so all ranks agree;
5. for the pool's observers (``pool_hook`` on every pool, ``pool_log`` on its steps): gather the
   texts, golds, answers, prompt ids and verifier statuses too, once for both (``_gather_rows``),
   and, for the ``pool_log`` (``rlsr.pool_log``), once TRL has computed the advantages
   (``_generate_and_score_completions``, which returns this process's slice), gather those and
   write one row per completion of the pool from the main process.

The reward columns, their ``reward_weights`` and the function computing them come from the
method's registry entry (``rlsr.methods``), passed in as ``method``; this module knows no method.
Runs are assembled (dataset, model, resume, export) by ``rlsr.training``.

GRPOTrainer receives one placeholder reward function per column so its bookkeeping (names in
``rewards/<name>/mean`` logs, weight count checks) stays consistent; the placeholders are never
called.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from accelerate.utils import gather, gather_object
from trl import GRPOTrainer

from rlsr import metrics as M
from rlsr import rewards as R
from rlsr.data import row_verification_inputs
from rlsr.logprob import answer_logprob_confidences
from rlsr.parsing import FULL_FORMAT, parse_response
from rlsr.pool_log import PoolLogWriter, pool_rows
from rlsr.run_layout import checkpoint_folders
from rlsr.tokenization import render_chat_prompt
from rlsr.verifiers import get_verifier
from rlsr.verifiers.base import (
    CORRECT,
    ERROR,
    INCORRECT,
    INVALID,
    MISSING,
    NO_VERDICT,
    TIMEOUT,
    UNJUDGED,
    VerifierFailure,
    failure_message,
    over_budget,
)
from rlsr.weight_sync import install_out_of_place_lora_sync

__all__ = ["RLSRTrainer", "RunCheckpoints", "completion_text", "pool_statistics"]

logger = logging.getLogger(__name__)


# --------------------------------------------------------------------------- pure pieces


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
    correct: np.ndarray,
    confidence: np.ndarray,
    format_ok: np.ndarray,
    timeouts: int,
    errors: int = 0,
    unjudged: int = 0,
) -> dict[str, float]:
    """``rlsr/*`` log values for one pool. Missing confidences count as 0 (as in the ranking).
    ``timeouts`` / ``errors`` / ``unjudged``: items without a verdict (time limit; a crash, a
    raise or a wrong return value of a plugin; the verifier could not judge, a plugin's None),
    each scored and rewarded as wrong (docs/training.md)."""
    ok = np.asarray(correct, dtype=bool)
    conf = R.confidence_for_ranking(confidence)
    n = int(ok.shape[0])
    return {
        "rlsr/pool_size": float(n),
        "rlsr/aurc": M.aurc(conf, ok),
        "rlsr/ece": M.ece(conf, ok),
        "rlsr/accuracy": float(ok.mean()),
        "rlsr/mean_confidence": float(conf.mean()),
        "rlsr/confidence_gap": M.confidence_gap(conf, ok),
        "rlsr/format_rate": float(np.asarray(format_ok, dtype=bool).mean()),
        "rlsr/confidence_parsed_rate": float(np.mean(~np.isnan(np.asarray(confidence, float)))),
        "rlsr/verifier_timeouts": float(timeouts),
        "rlsr/verifier_errors": float(errors),
        "rlsr/verifier_unjudged": float(unjudged),
    }


def _placeholder(name: str) -> Callable:
    def reward(*args, **kwargs):  # pragma: no cover - RLSRTrainer never calls it
        raise RuntimeError(
            f"{name} is a placeholder; RLSRTrainer computes pooled rewards in _calculate_rewards."
        )

    reward.__name__ = reward.__qualname__ = name
    return reward


# --------------------------------------------------------------------------- trainer


class RunCheckpoints:
    """Trainer mixin every rlsr trainer (GRPO and SFT methods) shares, so that all write the same
    output layout and resume the same way:

    - save: HF Trainer's, with ``training_args.json`` instead of the pickled ``training_args.bin``
      (loading a pickle runs code, nothing reads that file back: resume uses
      ``trainer_state.json``; the JSON masks token fields such as ``hub_token``);
    - resume: the optimizer state of a multi-process CPU run loads (see
      ``_load_optimizer_and_scheduler``)."""

    def _save(self, output_dir: str | None = None, state_dict=None) -> None:
        super()._save(output_dir, state_dict=state_dict)
        folder = Path(output_dir if output_dir is not None else self.args.output_dir)
        (folder / "training_args.bin").unlink(missing_ok=True)
        (folder / "training_args.json").write_text(self.args.to_json_string())

    def _load_optimizer_and_scheduler(self, checkpoint):
        """HF Trainer's load, with the optimizer state mapped to ``cpu`` instead of ``cpu:0``.

        transformers 5.17 loads ``optimizer.pt`` with ``map_location=args.device`` when more than
        one process trains; for gloo processes on the CPU accelerate's device is
        ``torch.device("cpu", 0)``, which torch 2.13's ``torch.load`` rejects ("don't know how to
        restore data location ... (tagged with cpu:0)"), so a multi-process CPU run could not
        resume (found by tests/test_multinode.py). Same device, spelled the way torch.load knows.
        """
        device = self.args.device
        if checkpoint is None or device.type != "cpu" or device.index is None:
            return super()._load_optimizer_and_scheduler(checkpoint)
        cached = self.args.__dict__  # TrainingArguments.device reads the cached _setup_devices
        cached["_setup_devices"] = torch.device("cpu")
        try:
            return super()._load_optimizer_and_scheduler(checkpoint)
        finally:
            cached["_setup_devices"] = device


class RLSRTrainer(RunCheckpoints, GRPOTrainer):
    """GRPOTrainer whose rewards are ranked over the whole pooled batch (see module docstring).

    Args (beyond GRPOTrainer's, which are passed through; do not pass ``reward_funcs``):
        method: ``rlsr.methods.Method`` (``rlsr.methods.resolve(settings)``): a registry entry
            bound to its ``MethodSettings``; gives ``columns`` ([(name, weight)]) and
            ``rewards(correct, confidence, format_ok)``.
        verifier: verifier name for ``rlsr.verifiers.get_verifier`` or a verifier object.
        parse_spec: ``rlsr.parsing.FormatSpec`` of the response format (default: the method's,
            ``Method.parse_spec``; FULL_FORMAT without a method that says otherwise).
        pool_hook: optional ``f(pool: dict)`` called on every rank after each pooled reward
            computation with the gathered arrays and the gathered rows (``texts``, ``golds``,
            ``answers``, ``prompt_ids``, ``status``: the same single gather the ``pool_log``
            reads on its steps) (for tests and debugging). When set, it must be set on all
            ranks: the rows are gathered for it (a collective).
        pool_log: optional ``rlsr.pool_log.PoolLogWriter`` (``pool_log.every > 0``): writes the
            pools of its steps to ``output_dir/pools/step-N.jsonl`` with TRL's advantages. Set on
            all ranks (the rows are gathered); only the main process writes.
    """

    def __init__(
        self,
        *args,
        method,
        verifier: str | Any = "exact_match",
        parse_spec=None,
        pool_hook: Callable[[dict], None] | None = None,
        pool_log: PoolLogWriter | None = None,
        **kwargs,
    ):
        if kwargs.get("reward_funcs") is not None:
            raise ValueError(
                "reward_funcs: RLSRTrainer builds its reward columns from `method`; do not pass "
                "reward_funcs."
            )
        self.method = method
        self.columns = method.columns
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
        install_out_of_place_lora_sync(self)  # vLLM syncs merged copies; base never written
        if parse_spec is None:
            parse_spec = getattr(self.method, "parse_spec", FULL_FORMAT)
        self.parse_spec = parse_spec
        self.confidence_source = getattr(self.method, "confidence_source", "verbalized")
        self._verifier_spec = verifier
        self._verifier = None if isinstance(verifier, str) else verifier
        self.pool_hook = pool_hook
        self.pool_log = pool_log
        self._pool_log_begun = False  # stale files of a killed attempt removed (main process)
        self._pending_pool: dict | None = None  # this generation's rows, waiting for advantages

    # -- verifier lifetime: created on first use, closed when training ends
    @property
    def verifier(self):
        if self._verifier is None:
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

    # -- the pooled reward
    def _score_local(self, inputs, prompts, completions):
        """(n_local, 3) float64 [correct, confidence (NaN missing), format_ok], texts, the
        verification result, parsed answers and the verifier's per-item status codes."""
        texts = [completion_text(c) for c in completions]
        parsed = [parse_response(t, self.parse_spec) for t in texts]
        result = self.verifier.verify_batch(
            [p.answer for p in parsed], **row_verification_inputs(inputs, self.verifier_name)
        )
        if self.confidence_source == "logprob":
            confidences = self._logprob_confidences(prompts, texts, parsed)
        else:
            confidences = [p.confidence for p in parsed]
        local = np.stack(
            [
                np.asarray(result.correct, dtype=np.float64),
                np.array([np.nan if c is None else c for c in confidences], dtype=np.float64),
                np.array([p.format_ok for p in parsed], dtype=np.float64),
            ],
            axis=1,
        )
        status = list(result.status)
        if len(status) != len(parsed):  # a verifier that reports verdicts only
            status = [
                MISSING if p.answer is None else CORRECT if ok else INCORRECT
                for p, ok in zip(parsed, result.correct, strict=True)
            ]
        return local, texts, result, [p.answer for p in parsed], status

    def _logprob_confidences(self, prompts, texts, parsed) -> list[float | None]:
        """The log-prob selector score of each local completion (``rlsr.logprob``), from one
        no-grad forward of the current policy, ``per_device_train_batch_size`` rows at a time.

        Why not reuse TRL's log-probs: at this point (TRL 1.16 ``_generate_and_score_completions``)
        the vLLM sampling log-probs and ``old_per_token_logps`` (computed before the rewards, but
        only with vLLM importance sampling or misaligned generation steps) are divided by the
        sampling temperature, are neither passed to ``_calculate_rewards`` nor defined for the
        greedy evaluation, and cover the sampled token ids, not the answer string the
        evaluation scores. The cost of the forward is in benchmarks/RESULTS.md.
        """
        tokenizer = self.processing_class
        return answer_logprob_confidences(
            self.model,
            tokenizer,
            [render_chat_prompt(tokenizer, p) for p in prompts],
            texts,
            [p.answer for p in parsed],
            [p.answer_start for p in parsed],
            batch_size=self.args.per_device_train_batch_size,
        )

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        device = self.accelerator.device
        mode = "train" if self.model.training else "eval"
        local, texts, result, answers, status = self._score_local(inputs, prompts, completions)

        # Process-ordered gather: the same row order TRL uses for its own gather of rewards.
        pooled = gather(torch.as_tensor(local, dtype=torch.float64, device=device)).cpu().numpy()
        kinds = [sum(s == TIMEOUT for s in status), sum(s == ERROR for s in status),
                 sum(s in (UNJUDGED, INVALID) for s in status)]  # fmt: skip
        total_timeouts, total_errors, total_unjudged = (
            int(v) for v in gather(torch.tensor([kinds], device=device)).sum(dim=0).tolist()
        )
        correct = pooled[:, 0] > 0.5
        confidence = pooled[:, 1]
        format_ok = pooled[:, 2] > 0.5
        self._check_verdicts(
            inputs, status, result.problems, mode,
            {TIMEOUT: total_timeouts, ERROR: total_errors, UNJUDGED: total_unjudged},
            len(correct),
        )  # fmt: skip

        columns = self.method.rewards(correct, confidence, format_ok)
        statistics = pool_statistics(
            correct, confidence, format_ok, total_timeouts, total_errors, total_unjudged
        )
        for name, value in statistics.items():
            if not math.isnan(value):
                self._metrics[mode][name].append(value)

        rewards = columns.astype(np.float32)
        step = self.state.global_step
        log_due = self.pool_log is not None and mode == "train" and self.pool_log.due(step)
        if self.pool_hook is not None or log_due:
            pool = {
                "mode": mode,
                "global_step": step,
                "process_index": self.accelerator.process_index,
                "num_processes": self.accelerator.num_processes,
                "correct": correct,
                "confidence": confidence,
                "format_ok": format_ok,
                "rewards": columns.astype(np.float32),  # the hook's own copy
                "timeouts": total_timeouts,
                "errors": total_errors,
                "unjudged": total_unjudged,
                **self._gather_rows(inputs, texts, answers, status),
            }
            if self.pool_hook is not None:
                self.pool_hook(dict(pool))
            if log_due:  # written by the main process once TRL has the advantages
                self._pending_pool = {
                    "step": step,
                    **{k: pool[k] for k in ("prompt_ids", "golds", "texts", "answers", "status")},
                    "correct": correct,
                    "confidence": confidence,
                    "format_ok": format_ok,
                    "credited_correct": self.method.credited_correct(correct, format_ok),
                    "next_heldout_step": self.pool_log.next_heldout(step, self.state.max_steps),
                    "columns": rewards,
                }
        return torch.as_tensor(rewards, dtype=torch.float32, device=device)

    def _gather_rows(self, inputs, texts, answers, status) -> dict[str, list]:
        """The pool's per-completion strings, process-ordered as the gathered rewards: prompt ids,
        golds, completion texts, parsed answers and verifier statuses, in ONE collective
        (``gather_object`` of this process's row tuples), shared by every pool observer of the
        step (``pool_hook``, ``pool_log``). Called on every rank."""
        golds = row_verification_inputs(inputs, self.verifier_name)["golds"]
        ids = [x.get("id") for x in inputs]
        local = list(zip(ids, golds, texts, answers, status, strict=True))
        rows = gather_object(local)
        names = ("prompt_ids", "golds", "texts", "answers", "status")
        return {name: [row[i] for row in rows] for i, name in enumerate(names)}

    def _check_verdicts(self, inputs, status, problems, mode, counts, pool_size) -> None:
        """Stop the run when more of this pool's rollouts than the verifier's
        ``max_failed_fraction`` got no verdict (``counts``: gathered, so every process decides
        the same; docs/training.md): ``VerifierFailure`` naming the verifier, the step and the
        first failing rollout's prompt id and problem. Under the limit, one warning line."""
        failed = sum(counts.values())
        if not failed:
            return
        local = next(((x.get("id"), st, problems.get(i)) for i, (x, st) in
                      enumerate(zip(inputs, status, strict=False)) if st in NO_VERDICT), None)  # fmt: skip
        step = self.state.global_step + 1  # the optimizer step this pool is for
        limit = getattr(self.verifier, "max_failed_fraction", None)
        if not over_budget(failed, pool_size, limit):
            if local is not None:
                logger.warning(
                    "step %d: verifier %s gave no verdict on %d of %d rollouts (first on this "
                    "process: prompt id %r, %s: %s); rewarded as wrong", step,
                    self.verifier_name, failed, pool_size, *local,
                )  # fmt: skip
            return
        first = next((f for f in gather_object([local]) if f is not None), None)
        newest = checkpoint_folders(self.args.output_dir)
        saved = (
            f"checkpoints saved so far are kept (newest: {newest[-1][1]})"
            if newest else "no checkpoint was saved yet"
        )  # fmt: skip
        raise VerifierFailure(failure_message(
            self.verifier_name, counts, pool_size, limit,
            f"the {mode} pool of optimizer step {step}", first,
            f"The run stopped before this step's update; {saved}. Fix the verifier, then rerun "
            "the same command: it resumes from the newest checkpoint (a plugin's file changed "
            "since a checkpoint was saved is refused: docs/tasks.md); or set the verifier "
            "option max_failed_fraction in the task file.",
        ))  # fmt: skip

    def _generate_and_score_completions(self, inputs):
        """TRL's, then (``pool_log``) the pool's rows written with the advantages TRL computed.

        TRL returns this process's slice of the advantages (``process_index * n_local`` onwards),
        so gathering them gives the pool's, in the order of the gathered rewards."""
        mode = "train" if self.model.training else "eval"
        if self.pool_log is not None and mode == "train" and not self._pool_log_begun:
            self._pool_log_begun = True  # first pool of this process: the step it starts at
            if self.accelerator.is_main_process:
                self.pool_log.begin(self.state.global_step)
        self._pending_pool = None
        output = super()._generate_and_score_completions(inputs)
        pool, self._pending_pool = self._pending_pool, None
        if pool is not None:
            advantages = gather(output["advantages"].detach()).float().cpu().numpy()
            if self.accelerator.is_main_process:
                rows = pool_rows(
                    step=pool.pop("step"),
                    num_generations=self.num_generations,
                    names=[name for name, _ in self.columns],
                    weights=[w for _, w in self.columns],
                    advantages=advantages,
                    max_chars=self.pool_log.max_chars,
                    **pool,
                )
                self.pool_log.write(rows[0]["step"], rows)
        return output

"""RLSRTrainer: TRL's GRPOTrainer with rewards computed over the pooled batch of every process.

What pooling means (RLSR paper Sec. 2.2, C.4.2; docs/methods.md). One optimizer step generates
B x G completions spread over all processes and gradient-accumulation steps (TRL 1.16 generates
the whole effective batch at once: ``steps_per_generation = gradient_accumulation_steps``). The
lifted-AURC reward of a completion depends on its confidence *rank within that whole pool*, so
it cannot be computed per process or per micro-batch.

The hook overridden is ``GRPOTrainer._calculate_rewards`` (the LoRA weight sync to vLLM is
``rlsr.method.weight_sync``). TRL 1.16 calls it from ``_generate_and_score_completions`` with the
process's LOCAL prompts/completions and expects the GLOBAL ``(N_global, n_reward_funcs)`` tensor
back, rows in process order (its own implementation ends with ``accelerate.utils.gather``); it
then weights the columns with ``reward_weights``, subtracts group means over ``view(-1, G)`` and
slices out this process's rows. ``_calculate_rewards`` therefore:

1. scores this process's completions (``_score_local``): parse (``rlsr.core.parsing``), verify
   (``rlsr.verifiers``), and read the confidence: the tag, or with ``method.confidence=logprob``
   (paper Sec. D.4) the answer's length-normalised log-probability under the current policy
   (``_logprob_confidences``);
2. gathers the pool (``rlsr.method.pool.Pool``: correct, confidence [NaN = missing], format_ok and the
   verifier's no-verdict counts, process-ordered), whose verdict budget
   (``rlsr.verifiers.budget``) may stop the run;
3. calls the method on it: ``method(pool)`` (``rlsr.method.methods``; this module knows no method),
   identical on every rank, and logs the pool's ``rlsr/*`` statistics;
4. hands the pool to its observers (``rlsr.method.pool.PoolObserver``: the ``pool_hook``, the pool
   files of ``rlsr.method.pool_log``), gathering the per-completion strings once when one needs them;
   ``_generate_and_score_completions`` then gathers TRL's advantages for those that need them.

GRPOTrainer receives one placeholder reward function per column so its bookkeeping (names in
``rewards/<name>/mean`` logs, weight count checks) stays consistent; the placeholders are never
called. Runs are assembled (dataset, model, resume, export) by ``rlsr.train.training``.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from accelerate.utils import gather, gather_object
from trl import GRPOTrainer

from rlsr.core.parsing import FULL_FORMAT, completion_text, parse_response
from rlsr.core.tokenization import render_chat_prompt
from rlsr.data.loading import row_verification_inputs
from rlsr.equations.logprob import answer_logprob_confidences
from rlsr.method.pool import ROW_FIELDS, Pool, PoolObserver
from rlsr.method.run_checkpoints import RunCheckpoints
from rlsr.method.weight_sync import install_out_of_place_lora_sync
from rlsr.run.run_layout import checkpoint_folders
from rlsr.verifiers import get_verifier
from rlsr.verifiers.base import CORRECT, INCORRECT, MISSING
from rlsr.verifiers.budget import check_pool_verdicts, first_without_verdict, no_verdict_counts

__all__ = ["RLSRTrainer", "RunCheckpoints", "completion_text"]

logger = logging.getLogger(__name__)


@dataclass
class LocalScores:
    """This process's completions, scored (``RLSRTrainer._score_local``)."""

    values: np.ndarray  # (n_local, 3) float64: correct, confidence (NaN: missing), format_ok
    ids: list  # prompt ids
    golds: list
    texts: list[str]
    answers: list[str | None]
    status: list[str]  # the verifier's per-item codes
    problems: dict[int, str]  # what went wrong on an item without a verdict


def _placeholder(name: str) -> Callable:
    def reward(*args, **kwargs):  # pragma: no cover - RLSRTrainer never calls it
        raise RuntimeError(
            f"{name} is a placeholder; RLSRTrainer computes pooled rewards in _calculate_rewards."
        )

    reward.__name__ = reward.__qualname__ = name
    return reward


# --------------------------------------------------------------------------- trainer


class RLSRTrainer(RunCheckpoints, GRPOTrainer):
    """GRPOTrainer whose rewards are ranked over the whole pooled batch (see module docstring).

    Args (beyond GRPOTrainer's, which are passed through; do not pass ``reward_funcs``):
        method: ``rlsr.method.methods.Method`` (``rlsr.method.methods.resolve(settings)``): a registry entry
            bound to its ``MethodSettings``; gives ``columns`` ([(name, weight)]) and, called on
            a pool, its unweighted reward columns.
        verifier: verifier name for ``rlsr.verifiers.get_verifier`` or a verifier object.
        parse_spec: ``rlsr.core.parsing.FormatSpec`` of the response format (default: the method's,
            ``Method.parse_spec``; FULL_FORMAT without a method that says otherwise).
        observers: ``rlsr.method.pool.PoolObserver`` objects handed every pool (``rlsr.method.pool.
            HookObserver`` for a ``pool_hook``, ``rlsr.method.pool_log.PoolLogObserver`` for the pool
            files). Give the same observers on every rank: what they need is gathered.
    """

    def __init__(
        self,
        *args,
        method,
        verifier: str | Any = "exact_match",
        parse_spec=None,
        observers: Sequence[PoolObserver] = (),
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
        self.observers = list(observers)
        self._awaiting: list[PoolObserver] = []  # observers of this generation's advantages
        self._observed: Pool | None = None

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
    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        """The pool's unweighted reward columns, ``(N_global, n_columns)`` in process order."""
        local = self._score_local(inputs, prompts, completions)
        pool = self._gather_pool(local)
        self._check_verdicts(local, pool)
        pool.rewards = self.method(pool)
        for name, value in pool.statistics().items():
            if not math.isnan(value):
                self._metrics[pool.mode][name].append(value)
        self._observe(pool, local)
        rewards = pool.rewards.astype(np.float32)
        return torch.as_tensor(rewards, dtype=torch.float32, device=self.accelerator.device)

    def _score_local(self, inputs, prompts, completions) -> LocalScores:
        """Parse, verify and read the confidence of this process's completions."""
        texts = [completion_text(c) for c in completions]
        parsed = [parse_response(t, self.parse_spec) for t in texts]
        row_inputs = row_verification_inputs(inputs, self.verifier_name)
        result = self.verifier.verify_batch([p.answer for p in parsed], **row_inputs)
        if self.confidence_source == "logprob":
            confidences = self._logprob_confidences(prompts, texts, parsed)
        else:
            confidences = [p.confidence for p in parsed]
        values = np.stack(
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
        ids = [x.get("id") for x in inputs]
        answers = [p.answer for p in parsed]
        return LocalScores(
            values, ids, row_inputs["golds"], texts, answers, status, result.problems
        )

    def _logprob_confidences(self, prompts, texts, parsed) -> list[float | None]:
        """The log-prob selector score of each local completion (``rlsr.equations.logprob``), from one
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

    def _gather_pool(self, local: LocalScores) -> Pool:
        """Every process's ``local`` values, gathered in process order (the row order of TRL's
        own gather of rewards), and the verifier's no-verdict counts summed over processes."""
        device = self.accelerator.device
        values = torch.as_tensor(local.values, dtype=torch.float64, device=device)
        pooled = gather(values).cpu().numpy()
        counts = gather(torch.tensor([no_verdict_counts(local.status)], device=device))
        timeouts, errors, unjudged = (int(v) for v in counts.sum(dim=0).tolist())
        return Pool(
            mode="train" if self.model.training else "eval",
            global_step=self.state.global_step,
            max_steps=self.state.max_steps,
            num_generations=self.num_generations,
            process_index=self.accelerator.process_index,
            num_processes=self.accelerator.num_processes,
            correct=pooled[:, 0] > 0.5,
            confidence=pooled[:, 1],
            format_ok=pooled[:, 2] > 0.5,
            timeouts=timeouts,
            errors=errors,
            unjudged=unjudged,
        )

    def _check_verdicts(self, local: LocalScores, pool: Pool) -> None:
        """The verifier's verdict budget for this pool (``rlsr.verifiers.budget``)."""
        check_pool_verdicts(
            pool.no_verdict, pool.size,
            first_without_verdict(local.ids, local.status, local.problems),
            verifier=self.verifier_name,
            limit=getattr(self.verifier, "max_failed_fraction", None),
            step=pool.global_step + 1,  # the optimizer step this pool is for
            mode=pool.mode, gather=gather_object, log=logger,
            newest_checkpoint=lambda: next(
                (folder for _, folder in reversed(checkpoint_folders(self.args.output_dir))), None
            ),
        )  # fmt: skip

    def _observe(self, pool: Pool, local: LocalScores) -> None:
        """Hand ``pool`` to the observers, its rows gathered once when one needs them, and keep
        it for those that need TRL's advantages (``_generate_and_score_completions``)."""
        if any(observer.needs_rows(pool) for observer in self.observers):
            pool.rows = self._gather_rows(local)
        for observer in self.observers:
            observer.observe(pool)
        self._awaiting = [o for o in self.observers if o.needs_advantages(pool)]
        self._observed = pool

    def _gather_rows(self, local: LocalScores) -> dict[str, list]:
        """The pool's per-completion strings (``rlsr.method.pool.ROW_FIELDS``: prompt ids, golds,
        completion texts, parsed answers, verifier statuses), process-ordered as the gathered
        rewards, in ONE collective (``gather_object`` of this process's row tuples) shared by
        every observer of the pool. Called on every rank."""
        rows = zip(local.ids, local.golds, local.texts, local.answers, local.status, strict=True)
        gathered = gather_object(list(rows))
        return {name: [row[i] for row in gathered] for i, name in enumerate(ROW_FIELDS)}

    def _generate_and_score_completions(self, inputs):
        """TRL's, then TRL's advantages to the observers of this pool that need them: TRL
        returns this process's slice (``process_index * n_local`` onwards), so gathering it
        gives the pool's, in the order of the gathered rewards."""
        self._awaiting, self._observed = [], None
        output = super()._generate_and_score_completions(inputs)
        if self._awaiting:
            advantages = gather(output["advantages"].detach()).float().cpu().numpy()
            for observer in self._awaiting:
                observer.observe_advantages(self._observed, advantages)
        self._awaiting, self._observed = [], None
        return output

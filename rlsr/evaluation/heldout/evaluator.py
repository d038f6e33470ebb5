"""Held-out evaluation during training (docs/heldout.md): ``HeldOutEvaluator``, a
``TrainerCallback``, runs ``rlsr evaluate``'s ``evaluate_dataset`` on the live policy at every
``heldout.every``-th optimizer step (before its checkpoint) into ``OUTPUT_DIR/eval/step-N/``,
rebuilds ``eval/history.jsonl`` and sends the metrics to every tracker. The policy answers on an
inference copy (``transformers``: the numbers of ``rlsr evaluate`` on checkpoint-N), on TRL's
colocated engine (``vllm``) or TRL's vLLM server (``vllm_server``: every process takes part in
the weight sync, the main process alone sends the requests within ``server_eval_bound``). With
several processes each evaluates a contiguous shard and rank 0 joins them. A step is written to
``step-N.partial/`` and renamed when complete (a resumed run reuses it); one that raises writes
``failed.json`` and training goes on, with the requests it left on an engine aborted first.
"""

from __future__ import annotations

import contextlib
import gc
import json
import logging
import os
import random
import shutil
import time
import traceback
from pathlib import Path

import numpy as np
import torch
from accelerate.utils import broadcast_object_list, gather_object, is_peft_model
from transformers import AutoModelForCausalLM, TrainerCallback

from rlsr.config.heldout import HeldOutSettings, server_eval_bound
from rlsr.core.checks import ConfigError
from rlsr.data import version_records
from rlsr.data.loading import build_verifier, load_examples
from rlsr.evaluation.heldout.history import tracker_scalars, write_history
from rlsr.evaluation.run.judge import DEFAULT_JUDGE_MODEL, RecordingJudge, openai_judge_fn
from rlsr.evaluation.run.runner import EvalSettings, evaluate_dataset, summarise
from rlsr.evaluation.run.samples_io import append_samples, read_samples
from rlsr.evaluation.run.summary import confidence_warning, metric_text, scorer_value
from rlsr.generation.backends import (
    TransformersBackend,
    VLLMBackend,
    abort_engine_requests,
    encode_prompt,
    engine_requests,
    generation_eos_ids,
    load_chat_tokenizer,
    render_chat,
)
from rlsr.generation.server_backend import ServerBackend
from rlsr.method.weight_sync import out_of_place_named_params
from rlsr.run.run_layout import (
    FAILED_FILE,
    PLOT_FILE,
    RUN_FILE,
    SAMPLES_FILE,
    checkpoint_dir,
    partial_dir,
    step_dir,
)
from rlsr.verifiers import get_verifier

logger = logging.getLogger(__name__)

__all__ = ["HeldOutEvaluator", "inference_copy", "preserved_rng"]


@torch.no_grad()
def inference_copy(model: torch.nn.Module) -> torch.nn.Module:
    """A model for generation with the live policy's weights, built without writing the policy:
    with PEFT every LoRA layer merged out of place (``(W.float() + s·B A).to(W.dtype)``, what
    ``merge_and_unload`` gives on a fresh base); every other tensor is the policy's own, shared."""
    peft = is_peft_model(model)
    base = model.get_base_model() if peft else model
    if peft:
        tensors = dict(out_of_place_named_params(model))
    else:
        tensors = {name: p.data for name, p in base.named_parameters()}
    with torch.device("meta"):
        copy = AutoModelForCausalLM.from_config(
            base.config, dtype=next(base.parameters()).dtype, trust_remote_code=False
        )
    missing, unexpected = copy.load_state_dict(tensors, strict=False, assign=True)
    for name, buffer in base.named_buffers():  # e.g. rotary inv_freq (not in a state dict)
        owner, _, leaf = name.rpartition(".")
        copy.get_submodule(owner)._buffers[leaf] = buffer
    copy.tie_weights()
    if unexpected:
        raise RuntimeError(f"inference copy: unexpected tensors {unexpected[:5]}")
    left = [n for n, p in copy.named_parameters() if p.device.type == "meta"]
    left += [n for n, b in copy.named_buffers() if b.device.type == "meta"]
    if left:
        raise RuntimeError(f"inference copy: tensors not filled {left[:5]} (missing {missing[:5]})")
    copy.generation_config = base.generation_config
    return copy.eval()


@contextlib.contextmanager
def preserved_rng():
    """Leave Python's, NumPy's and torch's (CPU and CUDA) random states as they were:
    ``TransformersBackend.generate`` seeds torch's global generator, which would otherwise
    restart the rollout sampler's stream at every evaluation."""
    py_state, np_state = random.getstate(), np.random.get_state()
    devices = list(range(torch.cuda.device_count())) if torch.cuda.is_initialized() else []
    with torch.random.fork_rng(devices=devices):
        try:
            yield
        finally:
            random.setstate(py_state)
            np.random.set_state(np_state)


def _one_line(err: BaseException, limit: int) -> str:
    return f"{type(err).__name__}: {' '.join(str(err).split())[:limit]}"


def _gather(acc, value) -> list:
    """Every process's ``value``, on every process."""
    return [value] if acc.num_processes == 1 else list(gather_object([value]))


def _broadcast(acc, value):
    """The main process's ``value`` on every process."""
    return value if acc.num_processes == 1 else broadcast_object_list([value], from_process=0)[0]


class HeldOutEvaluator(TrainerCallback):
    """Evaluate the policy on held-out questions during training (module docstring). ``bind``
    loads every dataset and the tokenizer before ``train()``, so one that cannot load stops the
    run before its first step."""

    def __init__(
        self,
        resolved: HeldOutSettings,
        *,
        model_path: str,
        output_dir: str | os.PathLike,
        trust_remote_code: bool = False,
    ) -> None:
        self.resolved = resolved
        self.model_path = model_path
        self.output_dir = Path(output_dir)
        self.trust_remote_code = trust_remote_code
        # as rlsr evaluate builds them from the same flags; no progress bars in a training log
        self.settings = EvalSettings(**resolved.protocol.values(), progress=False)
        self.trainer = None
        self.examples: dict[str, object] = {}
        self.tokenizer = None

    def bind(self, trainer) -> HeldOutEvaluator:
        """Attach to ``trainer``; load the datasets and the tokenizer ``rlsr evaluate`` uses."""
        self.trainer = trainer
        e = self.resolved
        for job, name, split in self.resolved.jobs:
            try:
                self.examples[job] = load_examples(
                    name, path=(e.data_path or {}).get(name), split=split, limit=e.limit,
                    system_prompt=self.resolved.system_prompt,
                )  # fmt: skip
            except Exception as err:  # noqa: BLE001 - any load failure: one line naming the field
                raise ConfigError(
                    "heldout.tasks",
                    f"cannot load {name!r} split {split!r} for the held-out evaluation "
                    f"({' '.join(str(err).split())[:300]}); set heldout.data_path.{name}=PATH, "
                    "remove it from heldout.tasks, or train without held-out evaluation "
                    "(heldout.every=0).",
                ) from None
        self.tokenizer = load_chat_tokenizer(self.model_path, self.trust_remote_code)
        self._check_engine_context(trainer)
        trainer.add_callback(self)
        return self

    def _server_context(self, trainer) -> int:
        """vllm_server: the server's ``max_model_len``, asked by the main process within
        ``server_eval_bound`` (the others wait in a collective) and sent to every process, so all
        of them refuse or none."""
        acc = trainer.accelerator
        limit = error = None
        if acc.is_main_process:
            client = trainer.vllm_generation.vllm_client
            deadline = time.monotonic() + server_eval_bound(trainer.args.ddp_timeout)
            try:
                limit = ServerBackend(
                    client, self.tokenizer, set(), deadline=deadline
                ).max_model_len
            except (TimeoutError, RuntimeError, OSError, KeyError, ValueError) as err:
                error = _one_line(err, 500)
        limit, error = _broadcast(acc, (limit, error))
        if error is not None:
            raise ConfigError(
                "heldout.backend",
                f"the held-out evaluation goes through TRL's vLLM server (vllm_server), which did "
                f"not tell its context length (GET /v1/models): {error}. Check the server, or "
                "set heldout.every=0.",
            )
        return limit

    def _check_engine_context(self, trainer) -> None:
        """vllm, vllm_server: refuse now (before step 1) a held-out prompt the engine cannot
        answer in full: prompt + ``answer_tokens`` must fit its ``max_model_len``. Held-out
        prompts are not filtered by ``data.max_prompt_length`` (the evaluation sees every question
        ``rlsr evaluate`` sees)."""
        if self.resolved.backend == "vllm":  # pragma: no cover - needs a vLLM engine
            limit = trainer.vllm_generation.llm.llm_engine.model_config.max_model_len
            engine = "the colocated vLLM engine"
            setting = (
                "grpo.vllm_max_model_length={need} (a context cap; the KV cache is sized by "
                "grpo.vllm_gpu_memory_utilization)"
            )
        elif self.resolved.backend == "vllm_server":
            limit, engine = self._server_context(trainer), "the vLLM server"
            setting = (
                "the server's --max-model-len to {need} (slurm/train.slurm: "
                "RLSR_VLLM_MAX_MODEL_LEN={need}; its default is data.max_prompt_length + "
                "what an answer needs)"
            )
        else:
            return
        reserve = self.resolved.answer_tokens
        for job, _, _ in self.resolved.jobs:
            lengths = [
                len(encode_prompt(self.tokenizer, render_chat(self.tokenizer, row["prompt"])))
                for row in self.examples[job]
            ]
            over = [n for n in lengths if n + reserve > limit]
            if over:
                need = max(over) + reserve
                raise ConfigError(
                    "heldout.tasks",
                    f"{len(over)} of {len(lengths)} held-out prompts of {job} are too long for "
                    f"{engine}: the longest has {max(over)} tokens, and an "
                    f"answer needs {reserve} more (heldout.max_new_tokens "
                    f"{self.resolved.max_new_tokens}, the Sec. C.3 fallbacks, a log-prob "
                    f"position): {need} > its max_model_len {limit}. Set "
                    f"{setting.format(need=need)}, or heldout.backend=transformers, or a lower "
                    "heldout.max_new_tokens.",
                )

    def _verifier(self, name: str):
        vname = self.resolved.verifiers[name]
        if vname != "llm_judge":
            return build_verifier(name, vname), None  # with a task's verifier options
        e = self.resolved
        judge = RecordingJudge(
            openai_judge_fn(
                e.judge_base_url,
                e.judge_model or DEFAULT_JUDGE_MODEL,
                timeout_s=e.judge_timeout,
                max_retries=e.judge_max_retries,
            )
        )
        verifier = get_verifier(vname, judge_fn=judge, max_answer_chars=e.judge_max_answer_chars)
        return verifier, judge

    def due(self, step: int, max_steps: int) -> bool:
        """Whether step ``step`` (of ``max_steps``) is evaluated."""
        every = self.resolved.every
        return step > 0 and (step % every == 0 or (self.resolved.at_end and step == max_steps))

    def on_train_begin(self, args, state, control, **kwargs):
        if self.resolved.at_start and state.global_step == 0:  # not again after a resume
            self.evaluate_step(0)
        return control

    def on_step_end(self, args, state, control, **kwargs):
        if self.due(state.global_step, state.max_steps):
            self.evaluate_step(state.global_step)
        return control

    def _backend(self):
        """The backend of one evaluation. vllm, vllm_server: TRL's engine or server first brought
        to the current weights (TRL syncs only when it next generates; every process takes part:
        under ZeRO-3/FSDP the sync gathers shards collectively)."""
        trainer, kind = self.trainer, self.resolved.backend
        if kind == "transformers":
            model = inference_copy(trainer.accelerator.unwrap_model(trainer.model))
            return TransformersBackend.from_model(
                model, self.tokenizer, batch_size=self.settings.batch_size
            )
        generation, step = trainer.vllm_generation, trainer.state.global_step
        if trainer._last_loaded_step != step or getattr(generation, "_llm_weights_sleeping", False):
            generation.sync_weights()
            trainer._last_loaded_step = step
        if kind == "vllm_server" and not trainer.accelerator.is_main_process:
            return None  # the main process sends the requests
        eos = generation_eos_ids(self.model_path, self.tokenizer, self.trust_remote_code)
        if kind == "vllm_server":
            # the others now wait in a collective bounded by ddp_timeout: stop well before it
            deadline = time.monotonic() + server_eval_bound(trainer.args.ddp_timeout)
            return ServerBackend(generation.vllm_client, self.tokenizer, eos, deadline=deadline)
        if generation.enable_sleep_mode:  # pragma: no cover - needs a vLLM engine
            generation.llm.wake_up(tags=["kv_cache"])
        return VLLMBackend.from_engine(generation.llm, self.tokenizer, eos)  # pragma: no cover

    def _release(self, backend, held: set[str]) -> None:
        """After an evaluation, however it ended. vllm: abort every request it left on the engine
        (``held``: those there before), then sleep as TRL does, before TRL's next generate (a
        stale request would come back with its rollouts, or loop forever once sleep's
        ``pause_scheduler`` dropped it). transformers: free the inference copy. vllm_server:
        nothing stays on the server."""
        if self.resolved.backend == "vllm_server":
            return
        if self.resolved.backend == "vllm":  # pragma: no cover - needs a vLLM engine
            generation = self.trainer.vllm_generation
            try:
                stale = abort_engine_requests(
                    generation.llm, engine_requests(generation.llm) - held
                )
                if stale:
                    logger.info("held-out evaluation: aborted %d request(s) it left", len(stale))
            finally:
                if generation.enable_sleep_mode:
                    generation.llm.sleep(level=2)  # as TRL after a generation: the next re-syncs
                    generation._llm_weights_sleeping = True
            return
        if backend is not None:
            del backend.model
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()

    def _evaluate_shards(self, folder: Path, rank: int, world: int) -> None:
        """This process's shard of every dataset into ``folder/<job>`` (``rank-R/`` below it when
        several processes share the work); every exit goes through ``_release``."""
        vllm = self.resolved.backend == "vllm"
        held = engine_requests(self.trainer.vllm_generation.llm) if vllm else set()
        backend = None
        try:
            backend = self._backend()
            if backend is None:  # vllm_server, not the main process: nothing to send
                return
            for job, name, _ in self.resolved.jobs:
                examples, out = self.examples[job], folder / job
                if world > 1:
                    examples = examples.shard(num_shards=world, index=rank, contiguous=True)
                    out = out / f"rank-{rank}"
                verifier, judge = self._verifier(name)
                try:
                    evaluate_dataset(
                        backend, examples, out, verifier=verifier,
                        verifier_name=self.resolved.verifiers[name], settings=self.settings,
                        judge=judge, dataset_name=job,
                    )  # fmt: skip
                finally:
                    getattr(verifier, "close", lambda: None)()
        finally:
            self._release(backend, held)

    def _join_shards(self, folder: Path, world: int, step: int, seconds: float) -> dict[str, dict]:
        """Rank 0: each dataset's shards in rank (= dataset) order, then ``summarise`` once."""
        results = {}
        for job, _, _ in self.resolved.jobs:
            out = folder / job
            shard_sizes = [len(self.examples[job])]
            if world > 1:
                shards = [read_samples(out / f"rank-{r}" / SAMPLES_FILE) for r in range(world)]
                shard_sizes = [len(shard) for shard in shards]
                (out / SAMPLES_FILE).unlink(missing_ok=True)
                append_samples(out / SAMPLES_FILE, [rec for shard in shards for rec in shard])
                for r in range(world):
                    shutil.rmtree(out / f"rank-{r}")
            extra = {
                "in_training": {
                    "step": step,
                    "seconds": seconds,
                    "processes": world,
                    "shard_sizes": shard_sizes,
                }
            }
            results[job] = summarise(out, self.settings, job, extra=extra)
        return results

    def _run_record(self, step: int) -> dict:
        """``step-N/run.json``: the model and checkpoint of these samples, in the fields
        ``rlsr deploy`` reads from an ``rlsr evaluate`` folder."""
        args = self.trainer.args
        saved = step > 0 and args.save_strategy == "steps" and bool(args.save_steps)
        saved = saved and step % args.save_steps == 0
        return {
            "model": self.model_path,
            "adapter": str(checkpoint_dir(self.output_dir, step).resolve()) if saved else None,
            "step": step,
            "backend": self.resolved.backend,
            "system_prompt": self.resolved.system_prompt,
            "datasets": [job for job, _, _ in self.resolved.jobs],
            "settings": {k: v for k, v in vars(self.settings).items() if k != "extra_metadata"},
            # the data files / plugin file / verifier options these verdicts came from
            "versions": version_records(self.resolved.verifiers, self.resolved.data_path),
        }

    def evaluate_step(self, step: int) -> dict[str, float] | None:
        """Evaluate step ``step`` (or reuse its finished folder); the tracker scalars logged, the
        same on every process (None when reused or failed)."""
        acc = self.trainer.accelerator
        # vllm_server: one shard, the main process's (the others only take part in the sync)
        shards = 1 if self.resolved.backend == "vllm_server" else acc.num_processes
        final = step_dir(self.output_dir, step)
        partial = partial_dir(final)
        if final.is_dir():  # finished before a restart: keep it, do not log it twice
            if acc.is_main_process:
                print(f"[rlsr] held-out evaluation of step {step}: reusing {final}", flush=True)
            return None
        if acc.is_main_process and partial.exists():
            shutil.rmtree(partial)  # half-written before a restart: its weights are gone
        acc.wait_for_everyone()
        started = time.perf_counter()
        error = None
        try:
            with preserved_rng():
                self._evaluate_shards(partial, acc.process_index if shards > 1 else 0, shards)
        except Exception as err:  # noqa: BLE001 - a failed evaluation must not end the run
            error = _one_line(err, 500)
            logger.debug("held-out evaluation failed:\n%s", traceback.format_exc())
        errors = _gather(acc, error)
        seconds = time.perf_counter() - started
        scalars = None
        if acc.is_main_process:
            failures = [f"rank {r}: {e}" for r, e in enumerate(errors) if e]
            partial.mkdir(parents=True, exist_ok=True)
            if failures:
                (partial / FAILED_FILE).write_text(
                    json.dumps({"step": step, "error": "; ".join(failures)}, indent=2) + "\n"
                )
                print(
                    f"[rlsr] held-out evaluation of step {step} failed ({failures[0]}); recorded "
                    f"in {final / FAILED_FILE}; training continues.",
                    flush=True,
                )
            else:
                results = self._join_shards(partial, shards, step, seconds)
                (partial / RUN_FILE).write_text(json.dumps(self._run_record(step), indent=2) + "\n")
                scalars = {}
                for job, metrics in results.items():
                    scalars.update(tracker_scalars(job, metrics, seconds))
            os.replace(partial, final)
            write_history(self.output_dir)
            if scalars is not None:
                self._report(step, scalars, results)
        scalars = _broadcast(acc, scalars)
        acc.wait_for_everyone()
        return scalars

    def _report(self, step: int, scalars: dict[str, float], results: dict[str, dict]) -> None:
        """One line per dataset on stdout; the scalars to every tracker (the trainer's on_log
        callbacks, as ``Trainer.log`` sends them) and the risk-coverage figures as images."""
        for job, metrics in results.items():
            aurc, ece = scorer_value(metrics, "aurc"), scorer_value(metrics, "ece")
            print(
                f"[rlsr] held-out step {step} {job}: n={metrics['n']} "
                f"AURC={metric_text(aurc, 4)} accuracy={metrics['accuracy']:.4f} "
                f"ECE={metric_text(ece, 4)} ({scalars[f'eval/{job}/seconds']:.1f} s)",
                flush=True,
            )
            warning = confidence_warning(metrics)
            if warning:
                print(f"[rlsr] warning: held-out step {step} {job}: {warning}", flush=True)
        trainer = self.trainer
        # transformers' trackers rename "eval_X" to "eval/X" (anything else to "train/X"):
        # "eval_<job>/aurc" is shown as "eval/<job>/aurc", beside the pool's "train/rlsr/aurc".
        logs = {"eval_" + k.removeprefix("eval/"): v for k, v in scalars.items()}
        trainer.state.log_history.append({**logs, "step": step})
        # Figures first: wandb holds an uncommitted image until the next committed log, so sent
        # before the scalars it lands in their row, not in whatever the trainer logs next.
        for job in results:
            _log_image(trainer, f"eval/{job}/risk_coverage", step_dir(self.output_dir, step) / job)
        # on_log clears control.should_log, which would drop this step's own training log (the
        # rlsr/* pool metrics) that the trainer writes right after on_step_end.
        should_log = trainer.control.should_log
        trainer.control = trainer.callback_handler.on_log(
            trainer.args, trainer.state, trainer.control, logs
        )
        trainer.control.should_log = should_log


def _log_image(trainer, tag: str, folder: Path) -> None:
    """The risk-coverage PNG to TensorBoard / Weights & Biases, when one of them is a callback."""
    path = folder / PLOT_FILE
    if not path.is_file():
        return
    for callback in trainer.callback_handler.callbacks:
        kind = type(callback).__name__
        try:
            if kind == "TensorBoardCallback" and getattr(callback, "tb_writer", None) is not None:
                from PIL import Image

                image = np.asarray(Image.open(path).convert("RGB"))
                callback.tb_writer.add_image(
                    tag, image, trainer.state.global_step, dataformats="HWC"
                )
                callback.tb_writer.flush()
            elif kind == "WandbCallback" and getattr(callback, "_wandb", None) is not None:
                run = callback._wandb.run
                if run is not None:
                    run.log({tag: callback._wandb.Image(str(path))}, commit=False)
        except Exception as err:  # noqa: BLE001 - a figure must never stop training
            logger.warning("could not log %s to %s: %s", tag, kind, err)

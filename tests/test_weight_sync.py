"""LoRA weight sync to vLLM (rlsr.method.weight_sync): the frozen base is never written.

Real pieces: TRL 1.16's ``VLLMGeneration.sync_weights`` (colocate and server branches) and its
``_iter_named_params`` (the stock control), PEFT 0.21.2 LoRA on the bf16 tiny Qwen2 of
rlsr.data.tiny_models, fp32 adapters (PEFT's default autocast, as under DDP/ZeRO-2).

TEST DOUBLE, engine boundary only: no vLLM engine can run in this venv, so ``_init_vllm`` is
replaced by a recorder standing where the engine is — ``llm...model.load_weights`` (colocate) and
``vllm_client.update_named_params`` (server) store copies of the tensors TRL pushes. Everything up
to that call is TRL's and PEFT's code. tests/test_vllm_cpu.py repeats the check on a real engine.

Expected tensors are computed here from the adapter weights with the formula
``(W.float() + s * B @ A).to(W.dtype)``, and vLLM's names from the plain HF model, not from
rlsr.method.weight_sync.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest
import torch
from ports import free_port

N_SYNCS = 1000
ALPHA, R = 32, 1


class _Recorder:
    """Stands where vLLM is: receives ``(name, tensor)`` pairs and keeps copies of the last sync."""

    def __init__(self):
        self.pushed: dict[str, torch.Tensor] = {}
        self.order: list[str] = []
        # colocate: llm.llm_engine.model_executor.driver_worker.model_runner.model.load_weights
        runner = types.SimpleNamespace(model=types.SimpleNamespace(load_weights=self._receive))
        worker = types.SimpleNamespace(model_runner=runner)
        self.llm_engine = types.SimpleNamespace(
            model_executor=types.SimpleNamespace(driver_worker=worker)
        )

    def start(self):
        self.pushed, self.order = {}, []

    def _receive(self, weights):
        for name, tensor in weights:
            self.order.append(name)
            self.pushed[name] = tensor.detach().clone()

    def update_named_params(self, metadata, named_params):  # server: VLLMClient's method
        for (meta_name, dtype, shape), (name, tensor) in zip(metadata, named_params, strict=True):
            assert meta_name == name and list(tensor.shape) == shape, (meta_name, name)
            assert str(tensor.dtype).removeprefix("torch.") == dtype
            self._receive([(name, tensor)])

    def reset_prefix_cache(self):
        pass


def _generation(model, mode: str, ours: bool):
    """TRL's VLLMGeneration on ``model`` with the recorder in place of the engine/client."""
    from accelerate import Accelerator
    from trl.generation.vllm_generation import VLLMGeneration

    from rlsr.method.weight_sync import install_out_of_place_lora_sync

    recorder = _Recorder()

    class NoEngine(VLLMGeneration):
        def _init_vllm(self):  # the engine boundary: nothing else of TRL is replaced
            if self.mode == "colocate":
                self.llm = recorder
            else:
                self.vllm_client = recorder

    gen = NoEngine(model=model, accelerator=Accelerator(cpu=True), processing_class=None, mode=mode)
    if ours:  # the same call RLSRTrainer.__init__ makes
        install_out_of_place_lora_sync(types.SimpleNamespace(vllm_generation=gen))
        assert type(gen).__name__ == "OutOfPlaceLoraVLLMGeneration"
    return gen, recorder


def _bf16_lora_model(seed: int = 0):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from rlsr.data.tiny_models import tiny_model_path

    base = AutoModelForCausalLM.from_pretrained(tiny_model_path(), dtype=torch.bfloat16)
    vllm_names = [n for n, _ in base.named_parameters()]  # the checkpoint names vLLM loads
    cfg = LoraConfig(r=R, lora_alpha=ALPHA, lora_dropout=0.0, target_modules="all-linear")
    model = get_peft_model(base, cfg)
    torch.manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_" in name:
                assert p.dtype == torch.float32, "PEFT should keep adapters in fp32"
                p.normal_(0, 0.02 if "lora_A" in name else 0.01)  # B = 0 would make ΔW = 0
    return model, vllm_names


def _lora_layers(model) -> dict[str, torch.nn.Module]:
    """vLLM name of the base weight -> PEFT LoRA layer (from PEFT's own module tree)."""
    from peft.tuners.lora import Linear

    return {
        name.removeprefix("base_model.model.") + ".weight": m
        for name, m in model.named_modules()
        if isinstance(m, Linear)
    }


def _expected_merge(layer) -> torch.Tensor:
    W = layer.base_layer.weight.detach()
    A = layer.lora_A["default"].weight.detach()
    B = layer.lora_B["default"].weight.detach()
    delta = torch.zeros(W.shape, dtype=torch.float32)
    for k in range(A.shape[0]):  # sum of rank-one outer products, independent of B @ A
        delta += torch.outer(B[:, k], A[k, :])
    return (W.float() + (ALPHA / R) * delta).to(W.dtype)


def _nudge_adapters(adapter_params, gen: torch.Generator) -> None:
    """An optimizer-step-sized change of every adapter weight (the adapter moves between syncs)."""
    with torch.no_grad():
        for p in adapter_params:
            p.add_(torch.randn(p.shape, generator=gen) * 1e-3)


@pytest.mark.parametrize("mode", ["colocate", "server"])
@pytest.mark.parametrize("sync", ["rlsr", "trl_stock"])
def test_lora_sync_never_writes_the_base(sync, mode):
    """1,000 syncs (colocate; 100 in server mode) through TRL's sync_weights, adapters moved
    between syncs.

    rlsr: base bitwise equal throughout; every pushed tensor = the out-of-place merge (LoRA
    layers) or the parameter itself (embeddings, norms), under the HF checkpoint names.
    trl_stock (control, proves the bug is real): TRL + PEFT's in-place merge/unmerge pushes the
    same first merge but the bf16 base drifts — this is the assertion that fails without the fix
    if the control were run with ``sync == "rlsr"``.
    """
    torch.set_num_threads(1)
    model, vllm_names = _bf16_lora_model()
    layers = _lora_layers(model)
    assert len(layers) == 2 * 7  # q k v o gate up down in each of the 2 layers
    base0 = {n: p.detach().clone() for n, p in model.named_parameters() if "lora_" not in n}
    gen, recorder = _generation(model, mode, ours=(sync == "rlsr"))
    rng = torch.Generator().manual_seed(1)
    # server mode consumes the same iterator through update_named_params: 100 syncs suffice there;
    # the stock control shows its drift within 200
    n_syncs = (N_SYNCS if mode == "colocate" else 100) if sync == "rlsr" else 200
    params = {  # vLLM name -> the PEFT model's parameter, for the tensors pushed as they are
        n.removeprefix("base_model.model.").replace(".base_layer", ""): p
        for n, p in model.named_parameters()
    }

    adapter_params = [p for n, p in model.named_parameters() if "lora_" in n]
    for step in range(n_syncs):
        expected = {n: _expected_merge(m) for n, m in layers.items()}  # from the current base
        recorder.start()
        gen.sync_weights()
        assert recorder.order == vllm_names
        # stock server mode walks the parameters twice at the first sync (metadata pass, then the
        # push), so its first push already comes from a drifted base: compare colocate only
        if sync == "rlsr" or (step == 0 and mode == "colocate"):
            for name, tensor in recorder.pushed.items():
                want = expected[name] if name in layers else params[name].detach()
                assert tensor.dtype == torch.bfloat16 and torch.equal(tensor, want), (step, name)
        _nudge_adapters(adapter_params, rng)

    changed = {
        n: (p.detach() != base0[n]).float().mean().item()
        for n, p in model.named_parameters()
        if "lora_" not in n and not torch.equal(p.detach(), base0[n])
    }
    if sync == "rlsr":
        assert changed == {}, changed
    else:
        assert set(changed) == {_peft_name(n) for n in layers}, "every LoRA base should drift"
        assert max(changed.values()) > 0.01, changed


def _peft_name(vllm_weight_name: str) -> str:
    return "base_model.model." + vllm_weight_name.removesuffix(".weight") + ".base_layer.weight"


# --------------------------------------------------------------------------- the equations


def test_lora_delta_and_merge_match_brute_force():
    """ΔW = s·B·A (transposed for fan_in_fan_out) summed entry by entry; W is only read."""
    from rlsr.method.weight_sync import lora_delta, merge_out_of_place

    g = torch.Generator().manual_seed(0)
    A, B = torch.randn(3, 5, generator=g), torch.randn(4, 3, generator=g)
    brute = torch.tensor(
        [
            [sum(B[i, k].item() * A[k, j].item() for k in range(3)) for j in range(5)]
            for i in range(4)
        ]
    )
    assert torch.allclose(lora_delta(A, B, 2.5), 2.5 * brute, atol=1e-5)
    assert torch.allclose(lora_delta(A, B, 2.5, fan_in_fan_out=True), 2.5 * brute.T, atol=1e-5)

    for dtype in (torch.bfloat16, torch.float32):
        W = torch.randn(4, 5, generator=g).to(dtype)
        W0 = W.clone()
        d1, d2 = torch.randn(4, 5, generator=g) * 1e-2, torch.randn(4, 5, generator=g) * 1e-2
        merged = merge_out_of_place(W, [d1, d2])
        assert torch.equal(W, W0) and merged.data_ptr() != W.data_ptr()
        assert merged.dtype == dtype
        assert torch.equal(merged, ((W0.float() + d1) + d2).to(dtype))  # the documented formula
        brute = torch.tensor(  # exact sums in float64, entry by entry
            [
                [W0[i, j].item() + d1[i, j].item() + d2[i, j].item() for j in range(5)]
                for i in range(4)
            ],
            dtype=torch.float64,
        )
        ulp = 2.0 ** (-7 if dtype == torch.bfloat16 else -23) * brute.abs()
        assert ((merged.double() - brute).abs() <= ulp).all()  # within one rounding


def test_vllm_param_name_follows_trl():
    from rlsr.method.weight_sync import vllm_param_name

    assert vllm_param_name("base_model.model.model.layers.0.mlp.up_proj.base_layer.weight") == (
        "model.layers.0.mlp.up_proj.weight"
    )
    assert (
        vllm_param_name("base_model.model.model.layers.0.mlp.up_proj.lora_A.default.weight") is None
    )
    assert vllm_param_name("base_model.model.lm_head.original_module.weight") is None
    assert vllm_param_name("base_model.model.model.norm.weight") == "model.norm.weight"


# --------------------------------------------------------------------------- other layer shapes


def test_conv1d_two_adapters_bias_and_modules_to_save_match_formula_and_trl_names():
    """GPT-2 style Conv1D bases (fan_in_fan_out), two active adapters with different scalings, one
    with ``lora_bias``, and a ``modules_to_save`` copy: pushed = formula, names = TRL's stock
    iterator's, base untouched."""
    from peft import LoraConfig, get_peft_model
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    base = GPT2LMHeadModel(
        GPT2Config(vocab_size=64, n_positions=16, n_embd=32, n_layer=1, n_head=2)
    ).to(torch.bfloat16)
    cfg_a = LoraConfig(r=2, lora_alpha=8, target_modules="all-linear", fan_in_fan_out=True,
                       modules_to_save=["ln_f"])  # fmt: skip
    cfg_b = LoraConfig(r=1, lora_alpha=32, target_modules="all-linear", fan_in_fan_out=True,
                       lora_bias=True)  # fmt: skip
    model = get_peft_model(base, cfg_a, adapter_name="default")
    model.add_adapter("other", cfg_b)
    model.base_model.set_adapter(["default", "other"])
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_" in name or "modules_to_save" in name:
                p.normal_(0, 0.05)
                p.requires_grad_(True)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}

    stock, stock_rec = _generation(model, "colocate", ours=False)
    stock_rec.start()
    stock.sync_weights()  # one stock sync (its drift is not what this test is about)
    with torch.no_grad():  # undo the stock sync's drift so both runs start from the same base
        for n, p in model.named_parameters():
            p.copy_(before[n])
    ours, rec = _generation(model, "colocate", ours=True)
    rec.start()
    ours.sync_weights()
    assert rec.order == stock_rec.order
    assert "transformer.ln_f.weight" in rec.order  # the modules_to_save copy, renamed like TRL

    from peft.tuners.lora import Linear

    n_checked = 0
    for name, m in model.named_modules():
        if not isinstance(m, Linear):
            continue
        key = name.removeprefix("base_model.model.")
        W, b = m.base_layer.weight.detach(), m.base_layer.bias.detach()
        delta = torch.zeros(W.shape)
        for adapter in ("default", "other"):
            A, B = m.lora_A[adapter].weight.detach(), m.lora_B[adapter].weight.detach()
            delta += m.scaling[adapter] * (B @ A).T  # Conv1D stores W as (in, out)
        assert m.scaling == {"default": 8 / 2, "other": 32 / 1}
        assert torch.equal(rec.pushed[key + ".weight"], (W.float() + delta).to(W.dtype)), key
        b_delta = m.scaling["other"] * m.lora_B["other"].bias.detach()
        assert torch.equal(rec.pushed[key + ".bias"], (b.float() + b_delta).to(b.dtype)), key
        n_checked += 1
    assert n_checked == 4  # c_attn, c_proj (attention), c_fc, c_proj (MLP)
    saved = model.base_model.model.transformer.ln_f.modules_to_save["default"].weight.detach()
    assert torch.equal(rec.pushed["transformer.ln_f.weight"], saved)
    for n, p in model.named_parameters():
        assert torch.equal(p.detach(), before[n]), n


def test_dora_is_refused_when_installed():
    """A LoRA variant the out-of-place merge does not implement fails at trainer build, by name."""
    from peft import LoraConfig, get_peft_model
    from transformers import GPT2Config, GPT2LMHeadModel

    from rlsr.config import ConfigError

    base = GPT2LMHeadModel(
        GPT2Config(vocab_size=64, n_positions=16, n_embd=32, n_layer=1, n_head=2)
    )
    model = get_peft_model(base, LoraConfig(r=1, target_modules=["c_fc"], use_dora=True,
                                            fan_in_fan_out=True))  # fmt: skip
    with pytest.raises(ConfigError, match=r"model\.lora: .*c_fc \(LoRA variant"):
        _generation(model, "colocate", ours=True)


# --------------------------------------------------------------------------- DeepSpeed ZeRO-3


def _zero3_child(out: str) -> None:
    """ZeRO-3 on CPU (gloo; one process, or each rank of ``torchrun``): tiny bf16 Qwen2
    partitioned by ``deepspeed.zero.Init(module=...)``, LoRA all-linear; 30 syncs with each
    iterator through TRL's real ``gather_params`` = ``deepspeed.zero.GatheredParameters``.
    Writes this rank's result to ``out.<rank>``."""
    import json
    import os

    if "RANK" not in os.environ:  # a single process without a launcher
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), RANK="0",
                          WORLD_SIZE="1", LOCAL_RANK="0")  # fmt: skip
    import deepspeed
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from rlsr.data.tiny_models import tiny_model_path
    from rlsr.method.weight_sync import install_out_of_place_lora_sync

    torch.set_num_threads(1)
    deepspeed.init_distributed(dist_backend="gloo")
    ds_config = {
        "zero_optimization": {"stage": 3},
        "train_micro_batch_size_per_gpu": 1,
        "bf16": {"enabled": True},
    }
    result = {"world_size": int(os.environ["WORLD_SIZE"])}
    for sync in ("trl_stock", "rlsr"):
        torch.manual_seed(0)
        base = AutoModelForCausalLM.from_pretrained(tiny_model_path(), dtype=torch.bfloat16)
        deepspeed.zero.Init(module=base, config_dict_or_path=ds_config)  # partition in place
        model = get_peft_model(base, LoraConfig(r=R, lora_alpha=ALPHA, target_modules="all-linear"))
        adapters = [p for n, p in model.named_parameters() if "lora_" in n]
        with torch.no_grad():
            for p in adapters:
                p.normal_(0, 0.02)
        shards0 = {
            n: p.ds_tensor.clone() for n, p in model.named_parameters() if hasattr(p, "ds_id")
        }
        layers = _lora_layers(model)

        # TRL's VLLMGeneration reads only the DeepSpeed stage from accelerate's state: a stand-in
        # for the state a ZeRO-3 `accelerate launch` builds (the rest of the engine is not needed).
        from trl.generation.vllm_generation import VLLMGeneration

        recorder = _Recorder()

        class NoEngine(VLLMGeneration):
            def _init_vllm(self, recorder=recorder):  # the engine boundary
                self.llm = recorder

        state = types.SimpleNamespace(deepspeed_plugin=types.SimpleNamespace(zero_stage=3))
        acc = types.SimpleNamespace(state=state, is_main_process=True)
        gen = NoEngine(model=model, accelerator=acc, processing_class=None, mode="colocate")
        assert gen._dist.is_zero3
        if sync == "rlsr":
            install_out_of_place_lora_sync(types.SimpleNamespace(vllm_generation=gen))
        rng = torch.Generator().manual_seed(1)
        pushed_ok = []
        for _ in range(30):
            with deepspeed.zero.GatheredParameters(list(model.parameters())):
                expected = {n: _expected_merge(m) for n, m in layers.items()}
            recorder.start()
            gen.sync_weights()
            pushed_ok.append(all(torch.equal(recorder.pushed[n], t) for n, t in expected.items()))
            _nudge_adapters(adapters, rng)
        shards_equal = all(
            torch.equal(p.ds_tensor, shards0[n])
            for n, p in model.named_parameters()
            if hasattr(p, "ds_id")
        )
        result[sync] = {
            "partitioned": len(shards0),
            "shards_equal": shards_equal,
            "pushed_ok": pushed_ok,
            "class": type(gen).__name__,
        }
    with open(f"{out}.{os.environ['RANK']}", "w") as f:
        json.dump(result, f)
    # Tear the process group down before exit: without it a ZeRO-3 rank occasionally aborts in a
    # destructor at interpreter exit ("terminate called without an active exception", seen in a
    # fresh-clone CI run), after its results were written (as in tests/test_trainer_sharded.py).
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()


@pytest.mark.slow
@pytest.mark.parametrize("world_size", [1, 2])
def test_zero3_sync(tmp_path, world_size):
    """ZeRO-3 (docs/distributed.md, "LoRA weight sync"). TRL gathers with
    ``GatheredParameters(modifier_rank=None)``, which re-partitions without writing back. With 2
    ranks the gathered tensor is a fresh all-gather buffer, so stock TRL's in-place
    merge/unmerge is discarded and the shards stay bitwise equal. With 1 rank DeepSpeed's
    ``NoGatherHandle`` makes the "gathered" tensor a view of the shard itself, so the stock sync
    drifts it. rlsr's sync leaves the shards equal and pushes the out-of-place merge in both.
    Children (torch.distributed is initialised there), gloo on CPU; DeepSpeed's engine itself is
    not built — TRL reads only the ZeRO stage from accelerate's state (a stand-in)."""
    import json
    import os
    import subprocess

    pytest.importorskip("deepspeed")
    out = tmp_path / "zero3.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    if world_size == 1:
        cmd = [sys.executable, __file__, "zero3", str(out)]
    else:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
               "--master_port", str(free_port()), __file__, "zero3", str(out)]  # fmt: skip
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    for rank in range(world_size):
        result = json.loads(Path(f"{out}.{rank}").read_text())
        assert result["world_size"] == world_size
        for sync in ("trl_stock", "rlsr"):
            assert result[sync]["partitioned"] > 20, result  # the base really is ZeRO-3 managed
        assert result["rlsr"]["class"] == "OutOfPlaceLoraVLLMGeneration"
        assert result["rlsr"]["shards_equal"] and all(result["rlsr"]["pushed_ok"]), result
        assert result["trl_stock"]["pushed_ok"][0], "stock's first push should be the same merge"
        assert result["trl_stock"]["shards_equal"] == (world_size > 1), result


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "zero3":
        raise SystemExit("usage: python tests/test_weight_sync.py zero3 OUT_JSON")
    _zero3_child(sys.argv[2])


class _NonMainRank:
    """Rank 1 of a multi-process launch, which cannot exist in this process: the accelerator's
    answers with ``is_main_process`` False (TRL's server branch only walks the parameters there,
    to take part in the ZeRO-3 gathers)."""

    def __init__(self, accelerator):
        self._acc = accelerator

    is_main_process = False

    def __getattr__(self, name):
        return getattr(self._acc, name)


@pytest.mark.parametrize("mode", ["colocate", "server"])
def test_each_sync_merges_each_lora_layer_once_and_only_where_it_is_sent(monkeypatch, mode):
    """Merges counted per sync: rank 0 computes one out-of-place merge per LoRA
    layer per sync, also on server mode's first sync, where TRL walks the parameters twice (a
    metadata pass for names, dtypes and shapes, then the stream); a non-main rank in server mode
    sends nothing and merges nothing. The metadata still matches what is streamed
    (``_Recorder.update_named_params`` checks name, dtype and shape pairwise), and what is sent
    is the formula's merge."""
    import rlsr.method.weight_sync as weight_sync

    model, _ = _bf16_lora_model()
    layers = _lora_layers(model)
    merges: list[int] = []
    real = weight_sync.merge_out_of_place  # the fp32 work: one call per merged tensor
    monkeypatch.setattr(
        weight_sync, "merge_out_of_place", lambda *a, **k: merges.append(1) or real(*a, **k)
    )
    gen, recorder = _generation(model, mode, ours=True)
    for _ in range(2):
        merges.clear()
        recorder.start()
        gen.sync_weights()
        assert len(merges) == len(layers)
        for name, layer in layers.items():
            assert torch.equal(recorder.pushed[name], _expected_merge(layer)), name

    other, other_recorder = _generation(model, mode, ours=True)
    other.accelerator = _NonMainRank(other.accelerator)
    merges.clear()
    other.sync_weights()
    other.sync_weights()
    if mode == "server":
        assert merges == [] and other_recorder.pushed == {}
    else:  # colocate: every rank loads its own engine
        assert len(merges) == 2 * len(layers)

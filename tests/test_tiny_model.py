"""The tiny offline models that tests and the tiny recipe use: the committed copies in the clone
(tools/tiny/weights), found and checked by rlsr.data.tiny_models (in the library), and their builders,
warm-up and probes (tools.tiny.models, outside it)."""

from __future__ import annotations

import ast
import importlib.util
import json
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerFast


def test_tiny_model_reloads_with_identical_token_ids(tiny_model_dir):
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    raw = PreTrainedTokenizerFast(tokenizer_file=str(tiny_model_dir / "tokenizer.json"))
    text = "<think> héllo 12 345\n</think>\t<answer>Paris</answer><confidence>0.85</confidence>"
    assert tok(text)["input_ids"] == raw(text)["input_ids"]
    assert tok.decode(tok(text)["input_ids"]) == text


def test_tiny_model_has_chat_template_and_vllm_compatible_shape(tiny_model_dir):
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    messages = [{"role": "system", "content": "S"}, {"role": "user", "content": "Q?"}]
    rendered = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert rendered.endswith("<|im_start|>assistant\n")
    assert tok.eos_token == "<|im_end|>" and tok.pad_token_id != tok.eos_token_id
    cfg = json.loads((tiny_model_dir / "config.json").read_text())
    assert cfg["hidden_size"] // cfg["num_attention_heads"] >= 32  # vLLM CPU backend minimum
    assert (tiny_model_dir / "model.safetensors").exists()
    assert not list(tiny_model_dir.glob("*.bin"))


def test_tiny_model_generates_offline(tiny_model_dir):
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    ids = tok("What is 2+2?", return_tensors="pt")
    out = model.generate(**ids, max_new_tokens=5, do_sample=False)
    assert out.shape[1] == ids["input_ids"].shape[1] + 5 or out[0, -1] == tok.eos_token_id
    with torch.no_grad():
        assert torch.isfinite(model(**ids).logits).all()


def test_tiny_llama_builds_from_scratch_and_generates(tmp_path):
    """Built into an empty folder, not read from the machine's cache (a cached copy hid a builder
    that returned no tokenizer). Llama-3.1 shape: untied head, llama3 RoPE, BOS, <|eot_id|> stop."""
    from tools.tiny.models import build_tiny_llama_model

    out = build_tiny_llama_model(tmp_path / "llama")
    model = AutoModelForCausalLM.from_pretrained(out)
    tok = AutoTokenizer.from_pretrained(out)
    assert type(model).__name__ == "LlamaForCausalLM" and not model.config.tie_word_embeddings
    assert model.config.rope_scaling["rope_type"] == "llama3"
    text = tok.apply_chat_template([{"role": "user", "content": "q: c"}], tokenize=False,
                                   add_generation_prompt=True)  # fmt: skip
    ids = tok(text, return_tensors="pt", add_special_tokens=False).input_ids
    assert ids[0, 0].item() == tok.bos_token_id
    eot = tok.convert_tokens_to_ids("<|eot_id|>")
    assert eot in model.generation_config.eos_token_id
    with torch.no_grad():
        gen = model.generate(ids, max_new_tokens=4, do_sample=False)
    assert gen.shape[1] > ids.shape[1]


# --------------------------------------------------------------------------- shipped copies


def test_shipped_models_are_the_manifests_bytes():
    """The shipped tiny models are the files MANIFEST.json names, byte for byte (sha256), and
    the default settings resolve to them (not to a copy built on this machine)."""
    from rlsr.data import tiny_models as tm
    from tools.tiny.models import TINY_MODEL_DEFAULTS

    manifest = tm.shipped_manifest()
    assert set(manifest["models"]) == set(tm.SHIPPED_MODELS)
    assert manifest["settings"] == TINY_MODEL_DEFAULTS
    for name in tm.SHIPPED_MODELS:
        folder = tm.shipped_model_path(name)
        files = manifest["models"][name]["files"]
        assert {"config.json", "model.safetensors", "tokenizer.json"} <= set(files)
        on_disk = {p.name for p in folder.iterdir() if p.is_file()}
        assert on_disk == set(files), f"{folder}: files not in the manifest"
        for fname, sha in files.items():
            assert tm.file_sha256(folder / fname) == sha, f"{name}/{fname} differs"
        total = sum((folder / f).stat().st_size for f in files)
        assert total < 4 * 2**20, f"{name}: {total} bytes, more than a test fixture should hold"
    assert tm.tiny_model_path() == ROOT / "tools" / "tiny" / "weights" / "tiny-qwen2"
    assert tm.tiny_warm_model_path() == ROOT / "tools" / "tiny" / "weights" / "tiny-format-warm"
    for alias, name in tm.ALIASES.items():
        assert tm.shipped_model_path(alias) == ROOT / "tools" / "tiny" / "weights" / name


def test_a_changed_shipped_file_is_refused_with_the_fix(tmp_path, monkeypatch):
    import shutil

    from rlsr.data import tiny_models as tm

    copy = tmp_path / "models"
    shutil.copytree(tm.CHECKOUT_DIR, copy)
    weights = copy / "tiny-format-warm" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1  # one bit of one weight
    weights.write_bytes(bytes(data))
    monkeypatch.setenv("RLSR_TINY_MODELS", str(copy))
    monkeypatch.setattr(tm, "_VERIFIED", set())
    assert tm.shipped_model_path("tiny-qwen2") == copy / "tiny-qwen2"
    with pytest.raises(RuntimeError, match=r"tools\.tiny\.build"):
        tm.tiny_warm_model_path()


def test_format_warm_model_writes_the_format_and_mixes_right_and_wrong():
    """The format-warm model, sampled at temperature 1 on every tiny train prompt (200 x 4):
    the tag format in >= 90 % of completions, right in 30-70 % (tools.tiny.models.WARM_BANDS), and
    varied confidences. The trainer tests' preconditions rest on this model; their chances of a
    vacuous pool are computed from its per-prompt accuracy (0.16-0.97 at the recipe's
    temperature) in test_trainer.py, next to ONE_STEP_POOL."""
    from rlsr.data import tiny_models as shipped
    from tools.tiny import models as tm

    torch.set_num_threads(1)
    got = tm.sampled_behaviour(shipped.tiny_warm_model_path(), samples_per_prompt=4)
    assert got["completions"] == 800
    for key, (lo, hi) in tm.WARM_BANDS.items():
        assert lo <= got[key] <= hi, (key, got)
    assert len(got["confidences"]) >= 3, got
    # the manifest's figures are this model's (8 samples per prompt at build time)
    manifest = shipped.shipped_manifest()["models"]["tiny-format-warm"]["behaviour_temperature_1"]
    assert abs(manifest["accuracy"] - got["accuracy"]) < 0.08, (manifest, got)


def test_format_warm_greedy_choices_win_by_more_than_float_noise():
    """Greedy (top-1) texts are compared across process counts and batch layouts
    (test_trainer_distributed.py): on every one of the recipe's 64 prompts each greedy decision
    beats the runner-up by >= 1e-3 in logit, ~100x the float noise between layouts or CPUs, so
    those texts are a property of the shipped weights, not of the machine."""
    from rlsr.data.tiny_models import tiny_warm_model_path
    from tools.tiny import models as tm

    torch.set_num_threads(1)
    margins = tm.greedy_margins(tiny_warm_model_path(), limit=tm.GREEDY_PROMPTS)
    assert len(margins) == 64
    assert min(margins) >= tm.WARM_MIN_GREEDY_MARGIN, sorted(margins)[:5]


def test_missing_warm_model_passes_its_gate_greedy_confidence_does_not_rank():
    """recipe=tiny's model (tiny-missing-warm), greedy on the 100 tiny-missing validation prompts
    (objects neither its warm-up nor recipe=tiny's training names, and not the held-out test
    recipe=tiny reports): the tag format everywhere, listed facts looked up and missing ones
    guessed, its thought ("look" / "not") saying which, and ONE confidence whatever the answer:
    ranking gain 0 at step 0, so the held-out AURC drop recipe=tiny reports is learnt
    (tools.tiny.models.MISSING_GATE). Every greedy decision wins by >= 1e-3 in logit (not the
    machine's rounding), and the manifest's figures are this model's. Catches a rebuilt model
    whose greedy confidence already ranks, or a gate measured on the split the runs report."""
    from rlsr.data import tiny_models as shipped
    from tools.tiny import models as tm

    torch.set_num_threads(1)
    got = tm.missing_gate(shipped.shipped_model_path("tiny-missing-warm"), split="validation")
    assert got["prompts"] == 100
    for key, (lo, hi) in tm.MISSING_GATE.items():
        assert lo <= got[key] <= hi, (key, got)
    assert len(got["confidences"]) == 1, got
    assert abs(got["ranking_gain"]) < 1e-9 and got["aurc"] == pytest.approx(got["error_rate"])
    assert got["greedy_margin_min"] >= tm.WARM_MIN_GREEDY_MARGIN, got
    entry = shipped.shipped_manifest()["models"]["tiny-missing-warm"]
    built = entry["greedy_tiny_missing_validation"]
    for key in ("format_rate", "accuracy_listed", "accuracy_missing", "confidences"):
        assert got[key] == built[key], (key, got, built)
    # the lean docs/training.md states is the one recorded for this model, sampled on the same split
    lean = entry["sampled_tiny_missing_validation"]
    assert lean["split"] == "validation" and lean["lean"] > 0, lean


def test_candidates_warm_model_passes_its_gate_greedy_confidence_does_not_rank():
    """recipe=tiny-candidates's model (tiny-candidates-warm), greedy on the 80 tiny-candidates validation
    prompts (facts and "none" objects neither its warm-up nor recipe=tiny-candidates's training
    names, and not the held-out test): the tag format everywhere, the first candidate answered,
    its thought naming the tier, and ONE confidence on every prompt: ranking gain 0 at step 0
    (tools.tiny.models.CANDIDATES_GATE). Every greedy decision wins by >= 1e-3 in logit, and the
    manifest's figures (and its recorded sampled lean) are this model's. Catches a rebuilt model
    whose greedy confidence already ranks the tiers, or whose warm-up targets depended on the
    tier."""
    from rlsr.data import tiny_models as shipped
    from tools.tiny import models as tm

    torch.set_num_threads(1)
    got = tm.candidates_gate(shipped.shipped_model_path("tiny-candidates-warm"), split="validation")
    assert got["prompts"] == 80
    for key, (lo, hi) in tm.CANDIDATES_GATE.items():
        assert lo <= got[key] <= hi, (key, got)
    assert len(got["confidences"]) == 1, got
    assert abs(got["ranking_gain"]) < 1e-9 and got["aurc"] == pytest.approx(got["error_rate"])
    assert got["greedy_margin_min"] >= tm.WARM_MIN_GREEDY_MARGIN, got
    entry = shipped.shipped_manifest()["models"]["tiny-candidates-warm"]
    built = entry["greedy_tiny_candidates_validation"]
    for key in ("format_rate", "answers_first_candidate", "accuracy_per_tier", "confidences"):
        assert got[key] == built[key], (key, got, built)
    assert entry["training"]["confidence_weights_every_row"] == list(
        tm.CANDIDATES_CONFIDENCE_WEIGHTS
    )
    assert entry["sampled_tiny_candidates_validation"]["split"] == "validation"


def test_candidates_split_model_passes_its_gate_confidence_reads_the_tier_between_the_reports():
    """recipe=tiny-split's model (tiny-candidates-split) on the 80 tiny-candidates validation
    prompts, measured again: greedy, the tag format everywhere, the first candidate answered, the
    thought naming the tier (tools.tiny.models.SPLIT_GATE); sampled at temperature 1 (8 per
    prompt, seed 0), each of the two levels of k=2 (0.9 / 0.7) and k=4 (0.3 / 0.1) holds
    30-70 % of its tier and few confidences are unparsed (SPLIT_SHARE_BAND, SPLIT_MAX_UNPARSED),
    so both rewards have mass to move. The manifest's greedy figures are this model's. Catches a
    rebuilt model whose confidence ignores the tier or already sits at one reward's report."""
    from rlsr.data import tiny_models as shipped
    from tools.tiny import models as tm

    torch.set_num_threads(1)
    path = shipped.shipped_model_path("tiny-candidates-split")
    greedy = tm.candidates_gate(path, split="validation")
    sampled = tm.sampled_candidates_lean(path, split="validation")
    assert greedy["prompts"] == 80
    assert tm.split_gate_failures(greedy, sampled) == [], (greedy, sampled)
    entry = shipped.shipped_manifest()["models"]["tiny-candidates-split"]
    built = entry["greedy_tiny_candidates_validation"]
    for key in ("format_rate", "answers_first_candidate", "accuracy_per_tier"):
        assert greedy[key] == built[key], (key, greedy, built)
    assert entry["training"]["confidences_per_tier"] == {
        k: list(v) for k, v in tm.SPLIT_CONFIDENCES.items()
    }


# --------------------------------------------------------------------------- library vs tools

ROOT = Path(__file__).resolve().parents[1]
BUILDERS_FILE = ROOT / "tools" / "tiny" / "models.py"


def _builders_copy(tmp_path, name: str, edit: tuple[str, str] | None = None):
    """tools/tiny/models.py loaded as a separate module from a copy of its text, ``edit``
    (old, new) applied: the module as it would be after that edit."""
    text = BUILDERS_FILE.read_text()
    if edit is not None:
        assert text.count(edit[0]) == 1, edit[0]
        text = text.replace(*edit)
    path = tmp_path / f"{name}.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _cache_folder(module, monkeypatch, tmp_path) -> str:
    """The cache folder ``tiny_llama_model_path`` names (nothing is built)."""
    monkeypatch.setenv("RLSR_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(module, "_cached_build", lambda target, build: target)
    return module.tiny_llama_model_path().name


# Edits that do not change a cached model's bytes: a probe's docstring and code, the warm-up's
# learning rate, a builder's docstring. The key must not move (it covered the whole module's
# text, so any of these rebuilt every cached model).
KEEPS_KEY = {
    "probe docstring": (
        "completions per tiny train prompt at temperature 1 and",
        "completions per tiny train prompt (sampled) at temperature 1 and",
    ),
    "probe code": (
        "return [gap for _, gap in greedy_completions(path, limit=limit)]",
        "return [g for _, g in greedy_completions(path, limit=limit)]",
    ),
    "warm-up constant": ("WARM_LR = 3e-3", "WARM_LR = 2e-3"),
    "builder docstring": (
        "scaling, untied LM head) with a Llama-3-shaped tokenizer",
        "scaling, untied LM head) with its Llama-3-shaped tokenizer",
    ),
}
# Edits that change the files built: the model's config, the tokenizer's pre-tokenizer.
MOVES_KEY = {
    "model builder code": ("rope_theta=500000.0,", "rope_theta=250000.0,"),
    "tokenizer regex": (r"\p{N}{1,3}", r"\p{N}{1,2}"),
}


def test_cache_key_follows_the_builders_code_not_the_probes(tmp_path, monkeypatch):
    """A cached tiny model's folder is keyed by the code that decides its bytes: editing a probe,
    the warm-up or a docstring keeps it; editing the model or tokenizer builder changes it."""
    base = _cache_folder(_builders_copy(tmp_path, "tiny_base"), monkeypatch, tmp_path)
    assert base.startswith("tiny-llama-")
    for i, (what, edit) in enumerate(KEEPS_KEY.items()):
        module = _builders_copy(tmp_path, f"tiny_keep{i}", edit)
        assert _cache_folder(module, monkeypatch, tmp_path) == base, what
    for i, (what, edit) in enumerate(MOVES_KEY.items()):
        module = _builders_copy(tmp_path, f"tiny_move{i}", edit)
        assert _cache_folder(module, monkeypatch, tmp_path) != base, what


def test_tiny_models_outside_a_clone_are_refused_in_one_line_with_the_fix(tmp_path, monkeypatch):
    """Where the clone's tools/tiny/weights is absent (an installed wheel: rlsr's parent folder
    holds no tools/), a tiny alias is refused in one line that names the clone and
    RLSR_TINY_MODELS, at config time (model.name_or_path) and at resolution (an OSError, which
    the CLIs print as one line)."""
    from rlsr.config import ConfigError, resolve_model_path
    from rlsr.config.sections import ModelSettings
    from rlsr.data import tiny_models as tm

    monkeypatch.delenv("RLSR_TINY_MODELS", raising=False)
    monkeypatch.setattr(
        tm, "CHECKOUT_DIR", tmp_path / "site-packages" / "tools" / "tiny" / "weights"
    )
    monkeypatch.setattr(tm, "_VERIFIED", set())
    with pytest.raises(
        ConfigError, match=r"^model\.name_or_path: .*clone.*RLSR_TINY_MODELS"
    ) as err:
        ModelSettings(name_or_path="tiny-missing-warm").validate()
    assert "\n" not in str(err.value)
    with pytest.raises(OSError, match="RLSR_TINY_MODELS"):
        resolve_model_path("tiny")
    ModelSettings(name_or_path="Qwen/Qwen2.5-7B").validate()  # other names are not looked up
    monkeypatch.setenv("RLSR_TINY_MODELS", str(tmp_path / "nowhere"))
    with pytest.raises(OSError, match=r"\$RLSR_TINY_MODELS=.*nowhere"):
        tm.tiny_warm_model_path()


def test_the_package_carries_no_demo_weights_and_no_toy():
    """The installed package (rlsr/ and its package-data) holds no model weights and no toy: they
    live in the clone, tools/tiny/weights and examples/toy, where rlsr.data.tiny_models looks."""
    from rlsr.data import tiny_models as tm

    assert tm.CHECKOUT_DIR == ROOT / "tools" / "tiny" / "weights"
    assert (tm.CHECKOUT_DIR / tm.MANIFEST_NAME).is_file()
    weights = [p for p in (ROOT / "rlsr").rglob("*") if p.suffix in {".safetensors", ".bin"}]
    assert not weights, weights
    assert not (ROOT / "rlsr" / "toy").exists()
    assert (ROOT / "examples" / "toy" / "repro.py").is_file()


def test_the_library_imports_nothing_from_tools():
    """tools/ and examples/ are not installed with the package: an import of either from rlsr/
    would break every installed copy."""
    offenders = []
    for path in sorted((ROOT / "rlsr").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = (
                [a.name for a in node.names] if isinstance(node, ast.Import)
                else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level
                else []
            )  # fmt: skip
            offenders += [f"{path.relative_to(ROOT)}: {n}" for n in names
                          if n.split(".")[0] in {"tools", "examples"}]  # fmt: skip
    assert not offenders, offenders

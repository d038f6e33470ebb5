"""The method registry (rlsr/methods.py): what every entry must provide, and that a new method
is one entry plus its reward function."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import numpy as np
import pytest
from transformers import Trainer

from rlsr import methods
from rlsr import rewards as R
from rlsr.config import ConfigError, MethodSettings
from rlsr.methods import MethodEntry, get_entry, register, resolve
from rlsr.trainer import RLSRTrainer

ROOT = Path(__file__).resolve().parents[1]
SETTINGS_FIELDS = {f.name for f in dataclasses.fields(MethodSettings)}


def _pool(n: int = 40, seed: int = 0):
    rng = np.random.default_rng(seed)
    correct = rng.random(n) < 0.5
    confidence = rng.choice([0.1, 0.3, 0.5, 0.7, 0.9, np.nan], size=n)
    format_ok = rng.random(n) < 0.8
    return correct, confidence, format_ok


def _fake_rewards(correct, confidence, format_ok, settings):
    return np.stack([R.format_reward(format_ok), 2.0 * R.correctness_reward(correct)], axis=1)


def _fake(**changes) -> MethodEntry:
    parts = dict(
        name="fakevr",
        columns=(("format_reward", "format_weight"), ("double_correctness", "method_weight")),
        rewards=_fake_rewards,
        trainer=RLSRTrainer,
        validate=lambda settings: None,
        needs_confidence=False,
        summary="format + 2 x correctness (a test method)",
    )
    return MethodEntry(**{**parts, **changes})


@pytest.fixture
def registry(monkeypatch):
    """A copy of the registry, so test entries do not leak into other tests."""
    monkeypatch.setattr(methods, "REGISTRY", dict(methods.REGISTRY))
    return methods.REGISTRY


def test_the_paper_methods_are_registered():
    assert set(methods.method_names()) >= {"rlsr", "rlcr", "rlvr", "sft"}


REWARDED = sorted(n for n, e in methods.REGISTRY.items() if e.rewarded)


def test_every_recipe_method_file_names_a_registered_method():
    import yaml

    for path in (ROOT / "recipes" / "method").glob("*.yaml"):
        values = yaml.safe_load(path.read_text())
        name = values.get("name") or values.get("method", {}).get("name")  # @package _global_
        assert name in methods.REGISTRY, path


def test_the_supervised_entry_declares_its_trainer_config_and_data():
    from trl import SFTConfig, SFTTrainer

    entry = get_entry("sft")
    assert not entry.rewarded and entry.columns == () and entry.rewards is None
    assert issubclass(entry.trainer, SFTTrainer) and entry.args_class is SFTConfig
    assert entry.args_section == "sft" and callable(entry.train_examples)
    entry.validate(MethodSettings("sft"))
    with pytest.raises(ValueError, match="supervised"):
        resolve(MethodSettings("sft")).rewards(*_pool())
    with pytest.raises(ConfigError) as info:
        methods.validate_method(MethodSettings("sft", confidence="logprob"))
    assert info.value.field == "method.confidence"


@pytest.mark.parametrize("name", REWARDED)
def test_every_entry_provides_every_part(name):
    entry = get_entry(name)
    assert entry.name == name and entry.summary
    assert entry.columns and all(w in SETTINGS_FIELDS for _, w in entry.columns)
    assert issubclass(entry.trainer, Trainer)
    assert isinstance(entry.needs_confidence, bool)
    entry.validate(MethodSettings(name))  # the recipe defaults pass its own checks
    # weights are read from the settings, column by column
    settings = MethodSettings(name, format_weight=0.25, method_weight=0.75)
    expected = [(c, 0.25 if w == "format_weight" else 0.75) for c, w in entry.columns]
    assert resolve(settings).columns == expected
    # one unweighted value per completion and column
    correct, confidence, format_ok = _pool()
    out = resolve(settings).rewards(correct, confidence, format_ok)
    assert out.shape == (40, len(entry.columns)) and np.isfinite(out).all()
    # needs_confidence says whether the reward reads the confidence
    changed = resolve(settings).rewards(correct, np.roll(confidence, 1), format_ok)
    assert entry.needs_confidence == (not np.array_equal(out, changed))


def test_the_methods_columns_are_the_papers_equations():
    correct, confidence, format_ok = _pool()
    fmt = format_ok.astype(float)
    # A format failure counts as wrong (RLCR's reference accuracy_reward; docs/training.md).
    scored = correct & format_ok
    assert (scored != correct).any()
    rlsr = resolve(MethodSettings("rlsr", correct_scale=2.0, weight_cap=3.0, max_coverage=0.5))
    lifted = R.lifted_aurc_rewards(
        scored, confidence, correct_scale=2.0, weight_cap=3.0, max_coverage=0.5
    )
    np.testing.assert_array_equal(rlsr.rewards(correct, confidence, format_ok), np.c_[fmt, lifted])
    # RLCR's Brier term, written out: 0 where the format fails or the confidence is missing
    valid = format_ok & ~np.isnan(confidence)
    brier = np.where(valid, 1.0 - (scored - np.nan_to_num(confidence)) ** 2, 0.0)
    rlcr = resolve(MethodSettings("rlcr")).rewards(correct, confidence, format_ok)
    np.testing.assert_allclose(rlcr, np.c_[fmt, scored.astype(float), brier], rtol=0, atol=1e-15)
    rlvr = resolve(MethodSettings("rlvr")).rewards(correct, confidence, format_ok)
    np.testing.assert_array_equal(rlvr, np.c_[fmt, scored.astype(float)])
    # correct_requires_format=false: the verifier's verdict alone.
    loose = resolve(MethodSettings("rlvr", correct_requires_format=False))
    np.testing.assert_array_equal(
        loose.rewards(correct, confidence, format_ok), np.c_[fmt, correct.astype(float)]
    )


def test_unknown_method_is_a_config_error_with_the_closest_name():
    with pytest.raises(ConfigError) as info:
        get_entry("rlsrr")
    assert info.value.field == "method.name"
    assert "Did you mean 'rlsr'?" in str(info.value) and "'rlcr'" in str(info.value)
    with pytest.raises(ConfigError, match="method.name"):
        resolve(MethodSettings("ppo"))


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"trainer": None}, "trainer must be a trainer class"),
        ({"rewards": None}, "a supervised one neither"),
        ({"rewards": "yes"}, "rewards must be a function"),
        ({"validate": "yes"}, "validate must be a function"),
        ({"columns": ()}, "a supervised one neither"),
        ({"rewards": None, "columns": ()}, None),
        ({"args_section": "ppo"}, "args_section must be 'grpo' or 'sft'"),
        ({"confidence_sources": ("entropy",)}, "confidence_sources"),
        ({"train_examples": "rows"}, "train_examples must be a function"),
        (
            {"columns": (("format_reward", "fmt_weight"),)},
            "'fmt_weight' .* is not a MethodSettings",
        ),
        ({"columns": (("a", "format_weight"), ("a", "method_weight"))}, "distinct"),
        ({"needs_confidence": None}, "needs_confidence"),
        ({"summary": ""}, "summary"),
        ({"name": "rlsr"}, "already registered"),
        ({"name": "my method"}, "name must be an identifier"),
    ],
)
def test_an_incomplete_entry_is_refused_naming_the_missing_part(registry, changes, message):
    before = dict(registry)
    if message is None:  # a complete supervised entry is accepted
        register(_fake(**changes))
        assert set(registry) - set(before) == {"fakevr"}
        return
    with pytest.raises(ValueError, match=message):
        register(_fake(**changes))
    assert registry == before


def test_an_entry_without_a_part_cannot_be_built():
    with pytest.raises(TypeError, match="trainer"):
        MethodEntry(
            name="x",
            columns=(("format_reward", "format_weight"),),
            rewards=_fake_rewards,
            validate=lambda s: None,
            needs_confidence=False,
            summary="x",
        )


def test_a_reward_function_of_the_wrong_shape_is_caught(registry):
    register(_fake(rewards=lambda c, conf, f, s: np.zeros((len(c), 3))))
    with pytest.raises(ValueError, match="expected .*one column per declared column"):
        resolve(MethodSettings("fakevr")).rewards(*_pool())


def test_adding_a_method_is_one_entry_and_its_reward_function(registry, tmp_path):
    """A registered method validates, gets its reward weights into GRPOConfig and its columns
    computed by the trainer's path, with no other change."""
    from test_trainer_support import tiny_settings

    from rlsr.training import grpo_kwargs, validate

    calls = []
    register(_fake(validate=lambda s: calls.append(s.name)))
    settings = tiny_settings(tmp_path)
    settings.method = MethodSettings("fakevr", format_weight=0.2, method_weight=0.8)
    validate(settings, world_size=1)
    assert calls == ["fakevr"]
    assert grpo_kwargs(settings)["reward_weights"] == [0.2, 0.8]
    correct, confidence, format_ok = _pool()
    out = methods.compute_reward_columns(settings.method, correct, confidence, format_ok)
    # the registry hands every method the format-gated verdict (method.correct_requires_format)
    np.testing.assert_array_equal(out[:, 1], 2.0 * (correct & format_ok))


def test_a_method_check_names_the_field():
    with pytest.raises(ConfigError) as info:
        methods.validate_method(MethodSettings("rlsr", max_coverage=1.5))
    assert info.value.field == "method.max_coverage"
    with pytest.raises(ConfigError) as info:
        methods.validate_method(MethodSettings("rlvr", weight_cap=2.0))
    assert info.value.field == "method.max_coverage" and "only apply to method=rlsr" in str(
        info.value
    )


def test_no_module_branches_on_a_method_name():
    """Methods are looked up in the registry, never compared by name elsewhere."""
    names = "|".join(sorted(methods.REGISTRY))
    pattern = re.compile(rf"""[=!]=\s*["']({names})["']|["']({names})["']\s*[=!]=""")
    hits = [
        f"{p.relative_to(ROOT)}:{i}"
        for p in sorted((ROOT / "rlsr").rglob("*.py"))
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if pattern.search(line)
    ]
    assert hits == []

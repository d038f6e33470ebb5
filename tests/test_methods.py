"""The method registry (rlsr/method/methods.py): what every entry must provide, that a new method
is one entry plus its reward function, and the supervised baseline's own entry point."""

from __future__ import annotations

import dataclasses
import re
import sys
from pathlib import Path

import numpy as np
import pytest

from rlsr.config import ConfigError, MethodSettings
from rlsr.equations import rewards as R
from rlsr.method import methods
from rlsr.method.methods import MethodEntry, args_section, get_entry, register, resolve

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
        columns=("format_reward", "double_correctness"),
        reward=_fake_rewards,
        weights=("format_weight", "method_weight"),
        validate=lambda settings, grpo: None,
    )
    return MethodEntry(**{**parts, **changes})


@pytest.fixture
def registry(monkeypatch):
    """A copy of the registry, so test entries do not leak into other tests."""
    monkeypatch.setattr(methods, "REGISTRY", dict(methods.REGISTRY))
    return methods.REGISTRY


def test_the_paper_methods_are_registered():
    assert set(methods.method_names()) >= {"rlsr", "rlcr", "rlvr", "sft"}


REWARDED = sorted(methods.REGISTRY)
# The methods whose reward reads the confidence (the others' columns ignore it).
READS_CONFIDENCE = {"rlsr", "rlsr_marginal", "rlcr"}
# The recipes' trainer section (recipes/config.yaml): what a method's checks see in a launch.
GRPO = {"scale_rewards": "none"}


def test_every_recipe_method_file_names_a_registered_method():
    import yaml

    for path in (ROOT / "recipes" / "method").glob("*.yaml"):
        values = yaml.safe_load(path.read_text())
        name = values.get("name") or values.get("method", {}).get("name")  # @package _global_
        assert name in methods.method_names(), path


def test_the_supervised_baseline_has_its_own_trainer_config_and_data():
    from trl import GRPOConfig, GRPOTrainer, SFTConfig, SFTTrainer

    from rlsr.train.training import TRAINERS

    assert "sft" not in methods.REGISTRY and "sft" in methods.method_names()
    assert args_section(MethodSettings("sft")) == "sft"
    assert {args_section(MethodSettings(n)) for n in REWARDED} == {"grpo"}
    trainer, config, examples = TRAINERS["sft"]
    assert issubclass(trainer, SFTTrainer) and config is SFTConfig and callable(examples)
    trainer, config, examples = TRAINERS["grpo"]
    assert issubclass(trainer, GRPOTrainer) and config is GRPOConfig and examples is None
    methods.validate_method(MethodSettings("sft"))
    with pytest.raises(ValueError, match="supervised"):
        resolve(MethodSettings("sft"))
    with pytest.raises(ConfigError) as info:
        methods.validate_method(MethodSettings("sft", weight_cap=2.0))
    assert info.value.field == "method.max_coverage"
    with pytest.raises(ConfigError) as info:
        methods.validate_method(MethodSettings("sft", confidence="logprob"))
    assert info.value.field == "method.confidence"


@pytest.mark.parametrize("name", REWARDED)
def test_every_entry_provides_every_part(name):
    entry = get_entry(name)
    assert entry.name == name and entry.reward.__doc__  # its docstring describes the method
    assert entry.columns and len(entry.weights) == len(entry.columns)
    assert all(w in SETTINGS_FIELDS for w in entry.weights)
    entry.validate(MethodSettings(name), GRPO)  # the recipe defaults pass its own checks
    # weights are read from the settings, column by column
    settings = MethodSettings(name, format_weight=0.25, method_weight=0.75)
    pairs = zip(entry.columns, entry.weights, strict=True)
    expected = [(c, 0.25 if w == "format_weight" else 0.75) for c, w in pairs]
    assert resolve(settings).columns == expected
    # one unweighted value per completion and column
    correct, confidence, format_ok = _pool()
    out = resolve(settings).rewards(correct, confidence, format_ok)
    assert out.shape == (40, len(entry.columns)) and np.isfinite(out).all()
    # READS_CONFIDENCE says whether the reward reads the confidence
    changed = resolve(settings).rewards(correct, np.roll(confidence, 1), format_ok)
    assert (name in READS_CONFIDENCE) == (not np.array_equal(out, changed))


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
        ({"reward": None}, "reward must be a function"),
        ({"reward": "yes"}, "reward must be a function"),
        ({"reward": lambda c, conf, f: c}, r"reward <lambda>\(c, conf, f\) cannot be called"),
        ({"validate": "yes"}, "validate must be a function"),
        ({"validate": lambda s: None}, r"validate <lambda>\(s\) cannot be called"),
        ({"columns": ()}, "at least one column"),
        ({"weights": ("format_weight",)}, "one MethodSettings field per column"),
        ({"weights": ("fmt_weight", "method_weight")}, "'fmt_weight' .* is not a MethodSettings"),
        ({"columns": ("a", "a")}, "distinct"),
        ({"name": "rlsr"}, "already registered"),
        ({"name": "sft"}, "supervised baseline"),
        ({"name": "my method"}, "name must be an identifier"),
        ({}, None),
    ],
)
def test_an_incomplete_entry_is_refused_naming_the_missing_part(registry, changes, message):
    before = dict(registry)
    if message is None:  # a complete entry is accepted
        register(_fake(**changes))
        assert set(registry) - set(before) == {"fakevr"}
        return
    with pytest.raises(ValueError, match=message):
        register(_fake(**changes))
    assert registry == before


def test_an_entry_without_a_part_cannot_be_built():
    with pytest.raises(TypeError, match="reward"):
        MethodEntry(
            name="x",
            columns=("format_reward",),
            weights=("format_weight",),
            validate=lambda s, grpo: None,
        )


def test_a_reward_function_of_the_wrong_shape_is_caught(registry):
    register(_fake(reward=lambda c, conf, f, s: np.zeros((len(c), 3))))
    with pytest.raises(ValueError, match="expected .*one column per declared column"):
        resolve(MethodSettings("fakevr")).rewards(*_pool())


def test_adding_a_method_is_one_entry_and_its_reward_function(registry, tmp_path):
    """A registered method validates, gets its reward weights into GRPOConfig and its columns
    computed by the trainer's path, with no other change."""
    from test_trainer_support import tiny_settings

    from rlsr.method.run_plan import plan_run
    from rlsr.train.training import trainer_kwargs

    calls = []
    register(_fake(validate=lambda s, grpo: calls.append(s.name)))
    settings = tiny_settings(tmp_path)
    settings.method = MethodSettings("fakevr", format_weight=0.2, method_weight=0.8)
    plan_run(settings, world_size=1)
    assert calls == ["fakevr"]
    assert trainer_kwargs(plan_run(settings))["reward_weights"] == [0.2, 0.8]
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


# --------------------------------------------------------------------------- method plugins

EXAMPLE = ROOT / "examples" / "my_method"


def test_a_plugin_method_is_its_modules_entry_with_its_columns_and_reward(monkeypatch):
    """``method.plugin`` names a MethodEntry in a user's module (examples/my_method): resolved,
    it has that entry's columns and weights, and its reward is the entry's function applied to
    the format-gated verdict, as for a built-in method. A plugin read from the registry instead
    (no import), or its reward given the raw verdict, fails."""
    monkeypatch.syspath_prepend(str(EXAMPLE))
    settings = MethodSettings("brier_only", plugin="brier_method:METHOD", method_weight=0.7)
    method = resolve(settings)
    assert method.columns == [("format_reward", 0.5), ("brier_reward", 0.7)]
    assert "brier_only" not in methods.REGISTRY  # loading does not change the registry
    correct, confidence, format_ok = _pool()
    scored = correct & format_ok
    expected = np.c_[format_ok.astype(float), R.brier_reward(scored, confidence, format_ok)]
    np.testing.assert_array_equal(method.rewards(correct, confidence, format_ok), expected)
    methods.validate_method(settings)
    with pytest.raises(ConfigError) as info:
        methods.validate_method(dataclasses.replace(settings, weight_cap=2.0))
    assert info.value.field == "method.max_coverage"


@pytest.mark.parametrize(
    ("spec", "module", "field", "message"),
    [
        ("brier_method", None, "method.plugin", "expected 'package.module:MethodEntry'"),
        ("no_such_rlsr_method:METHOD", None, "method.plugin",
         r"module 'no_such_rlsr_method' does not import \(ModuleNotFoundError.*PYTHONPATH"),
        ("brier_method:brier_only", None, "method.plugin",
         r"has no MethodEntry 'brier_only'; it defines \['METHOD'\]"),
        ("bad_rlsr_method:METHOD", "two_args", "method.plugin",
         r"reward two_args\(correct, confidence\) cannot be called as reward\(correct, "
         r"confidence, format_ok, settings\)"),
        ("bad_rlsr_method:METHOD", "no_columns", "method.plugin", "at least one column"),
        ("bad_rlsr_method:METHOD", "builtin_name", "method.plugin", "a built-in method of rlsr"),
        ("bad_rlsr_method:OTHER", "other_name", "method.name",
         "declares the method 'other', not 'brier_only'; set method.name=other"),
    ],
)  # fmt: skip
def test_a_bad_plugin_is_a_config_error_naming_the_field(
    tmp_path, monkeypatch, spec, module, field, message
):
    """Each way a method plugin can be wrong (no colon, a module that does not import, a name
    that is no MethodEntry, a reward of the wrong signature, an incomplete entry, a built-in's
    name, an entry of another name than method.name) is one ConfigError naming the field and the
    fix, before anything loads; a deep traceback or a plugin that silently replaces a built-in
    method fails."""
    monkeypatch.syspath_prepend(str(EXAMPLE))
    bodies = {
        "two_args": "def two_args(correct, confidence):\n    return correct\n"
        "METHOD = MethodEntry('mine', ('a',), two_args, ('method_weight',), check_plain_reward)\n",
        "no_columns": "METHOD = MethodEntry('mine', (), len, (), check_plain_reward)\n",
        "builtin_name": "from brier_method import METHOD as B\n"
        "METHOD = MethodEntry('rlvr', B.columns, B.reward, B.weights, B.validate)\n",
        "other_name": "from brier_method import METHOD as B\n"
        "OTHER = MethodEntry('other', B.columns, B.reward, B.weights, B.validate)\n",
    }
    if module is not None:
        (tmp_path / "bad_rlsr_method.py").write_text(
            "from rlsr.method.methods import MethodEntry, check_plain_reward\n" + bodies[module]
        )
        monkeypatch.syspath_prepend(str(tmp_path))
        monkeypatch.delitem(sys.modules, "bad_rlsr_method", raising=False)
    name = "other" if field == "method.plugin" and module == "other_name" else "brier_only"
    with pytest.raises(ConfigError) as info:
        methods.validate_method(MethodSettings(name, plugin=spec))
    assert info.value.field == field
    assert re.search(message, str(info.value)), str(info.value)

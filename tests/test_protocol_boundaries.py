"""One resolved protocol crosses every boundary. The held-out steps,
train.py's printed `rlsr evaluate` command, slurm/resolve_config.py's evaluation flags and the
toy's all come from ``rlsr.config.heldout_protocol``; an evaluation that deliberately differs
(the paper tables' 4,096 tokens, the toy's short answers) is a named variant of the recipe
(``heldout.variants``), not a second default. Configuration only: Hydra compose, no model loads."""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import shlex
from pathlib import Path

import pytest

from examples.toy import repro
from rlsr.cli import evaluate as evaluate_flags
from rlsr.config import ConfigError, heldout_protocol, resolve_heldout
from rlsr.config.compose import compose_config
from rlsr.method.methods import args_section
from rlsr.method.run_plan import plan_run
from rlsr.run.eval_protocol import protocol_from_args
from rlsr.train.training import _evaluate_command, run_summary

ROOT = Path(__file__).resolve().parents[1]
RECIPES = sorted(p.stem for p in (ROOT / "recipes" / "recipe").glob("*.yaml"))
METHODS = sorted(p.stem for p in (ROOT / "recipes" / "method").glob("*.yaml"))
# recipe=toy leaves its model and data to the caller (???): any value composes
PLACEHOLDERS = ["model.name_or_path=BASE", "data.path=DATA"]


def _resolve_config():
    spec = importlib.util.spec_from_file_location(
        "resolve_config", ROOT / "slurm" / "resolve_config.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


RESOLVE = _resolve_config()


def _parsed(flags: list[str]):
    """The protocol and the arguments `rlsr evaluate` parses from ``flags``."""
    parser = argparse.ArgumentParser()
    evaluate_flags.register(parser.add_subparsers(dest="command"))
    common = ["evaluate", "--model", "m", "--tasks", "tiny", "--output-dir", "o"]
    args = parser.parse_args([*common, *flags])
    return protocol_from_args(args), args


def _overrides(recipe: str, method: str, tmp_path, *extra: str) -> list[str]:
    placeholders = PLACEHOLDERS if recipe == "toy" else []
    return [f"recipe={recipe}", f"method={method}", f"output_dir={tmp_path}", *placeholders,
            *extra]  # fmt: skip


def _four_translations(overrides: list[str], tmp_path):
    """(run protocol, held-out step's, printed command's, Slurm's with its variant, that variant)."""
    settings = compose_config(overrides)
    section = args_section(settings.method)
    run = heldout_protocol(settings, section)
    held = settings.heldout  # switched on (a recipe without held-out steps: its training dataset)
    held = dataclasses.replace(held, every=1, tasks=held.tasks or [settings.data.task])
    on = dataclasses.replace(settings, heldout=held)
    heldout = resolve_heldout(on, section).protocol
    own = dataclasses.replace(plan_run(settings, here=False), heldout=None)  # the run's protocol
    printed = _parsed(shlex.split(_evaluate_command(own, tmp_path))[2:])[0]
    slurm_flags = RESOLVE.resolve(overrides)["evaluate_args"]
    slurm, args = _parsed(slurm_flags)
    variant = args.protocol_variant
    assert variant == ("paper" if "paper" in settings.heldout.variants else None)
    return run, heldout, printed, slurm, heldout_protocol(settings, section, variant)


@pytest.mark.parametrize("recipe", RECIPES)
def test_every_evaluation_of_a_run_is_its_protocol_or_a_named_variant_of_it(recipe, tmp_path):
    """For every recipe x method: the held-out step, the printed command and Slurm's evaluation
    give the run's protocol (Slurm: with the recipe's `paper` variant, exactly that variant's fields
    changed); the toy's is the run's protocol with its `toy` variant. On the code before, Slurm
    passed only method.evaluate (4,096 tokens by accident of the default, each dataset's own
    prompt) and the toy hard-coded its flags."""
    for method in METHODS:
        run, heldout, printed, slurm, variant_run = _four_translations(
            _overrides(recipe, method, tmp_path), tmp_path
        )
        assert heldout == run and printed == run, (recipe, method)
        assert slurm == variant_run, (recipe, method)
        changed = {k for k, v in variant_run.values().items() if v != run.values()[k]}
        assert changed <= {"max_new_tokens"}, (recipe, method, changed)
        if recipe == "toy":
            settings = compose_config(_overrides("toy", method, tmp_path))
            toy = heldout_protocol(settings, args_section(settings.method), "toy")
            assert repro.toy_protocol(method) == toy
            assert _parsed(list(repro.toy_evaluate_args(method)))[0] == toy
            assert (toy.fallbacks, toy.bootstrap) == (False, 0)
            assert toy.max_new_tokens == (64 if method == "sft" else 12)  # the method's budget


def test_the_paper_variant_is_the_only_difference_of_slurms_evaluation(tmp_path):
    """recipe=hotpot method=rlsr: held-out and printed command use the trained 1,536 tokens and
    the training data's prompt `long`; Slurm's evaluation the same prompt and the paper variant's
    4,096 tokens (before: each dataset's own prompt)."""
    run, heldout, printed, slurm, _ = _four_translations(
        _overrides("hotpot", "rlsr", tmp_path), tmp_path
    )
    assert (run.max_new_tokens, run.system_prompt) == (1536, "long")
    assert (slurm.max_new_tokens, slurm.system_prompt) == (4096, "long")


def test_a_system_prompt_is_stated_once_and_every_evaluation_follows_it(tmp_path):
    """method=sft with data.system_prompt=long trains on `long`; before, method.evaluate restated
    `system_prompt: none` and every evaluation used none."""
    for recipe in ("tiny", "hotpot"):
        found = _four_translations(
            _overrides(recipe, "sft", tmp_path, "data.system_prompt=long"), tmp_path
        )
        assert {p.system_prompt for p in found} == {"long"}, recipe
    default = _four_translations(_overrides("tiny", "sft", tmp_path), tmp_path)
    assert {p.system_prompt for p in default} == {"none"}  # sft.yaml's data.system_prompt


def test_a_named_variant_is_checked_and_an_unknown_one_is_refused(tmp_path):
    settings = compose_config(_overrides("hotpot", "rlsr", tmp_path))
    with pytest.raises(ConfigError, match=r"heldout\.variants.*no variant 'papr'.*declares: paper"):
        heldout_protocol(settings, "grpo", "papr")
    bad = compose_config(
        _overrides("hotpot", "rlsr", tmp_path, "+heldout.variants.paper.top_p=2.0")
    )
    with pytest.raises(ConfigError, match=r"heldout\.variants\.paper\.top_p"):
        heldout_protocol(bad, "grpo", "paper")
    # a variants value that is not a mapping is named, not a TypeError from deep inside
    with pytest.raises(ConfigError, match=r"^heldout\.variants: must be a mapping"):
        plan_run(compose_config(_overrides("tiny", "rlsr", tmp_path, "heldout.variants=5")))
    # a variant does not hide a bad value of the run's own (the paper variant sets max_new_tokens)
    hidden = compose_config(_overrides("hotpot", "rlsr", tmp_path, "heldout.max_new_tokens=-5"))
    with pytest.raises(ConfigError, match=r"^heldout\.max_new_tokens: must be >= 1"):
        heldout_protocol(hidden, "grpo", "paper")
    # Slurm without the paper variant: the held-out protocol itself, and no --protocol-variant
    flags = RESOLVE.resolve(_overrides("tiny", "rlsr", tmp_path))["evaluate_args"]
    assert "--protocol-variant" not in flags


def test_the_run_summary_prints_each_named_variant(tmp_path):
    settings = compose_config(_overrides("hotpot", "rlsr", tmp_path))
    text = run_summary(plan_run(settings, here=False))
    assert (
        "variant paper  --max-new-tokens 4096  (rlsr evaluate ... --protocol-variant paper)" in text
    )

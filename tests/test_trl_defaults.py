"""TRL's fields and defaults read from TRL's source (rlsr/config/trainer_args.py) equal the
imported dataclasses', and checking a config imports no torch, transformers, TRL or datasets.

A reader that missed a base class, an override or a default would make the config check accept a
field TRL rejects (or refuse one it takes) and plan pools, held-out budgets and vLLM contexts from
a wrong default; a heavy import creeping back into the config layer would make every config typo
cost the 5-10 s of importing the trainer again.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from trl import GRPOConfig, SFTConfig

from rlsr.config import trainer_args as T

ROOT = Path(__file__).resolve().parents[1]
CLASSES = {"GRPOConfig": GRPOConfig, "SFTConfig": SFTConfig}


def _imported(cls) -> dict:
    out = {}
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = f.default_factory()
        else:
            out[f.name] = dataclasses.MISSING
    return out


@pytest.mark.parametrize("name", sorted(CLASSES))
def test_every_field_and_literal_default_read_from_source_equals_the_dataclass(name):
    """The source reader follows the installed TRL's class chain (GRPOConfig/SFTConfig ->
    _BaseConfig -> TrainingArguments) without falling back to the import, and finds the same
    field names, in the same order, with the same defaults: a missed base or a subclass
    override read as the base's value fails here."""
    declared = T._declared_fields(name)  # raises _Unreadable if the layout is not followed
    imported = _imported(CLASSES[name])
    assert list(declared) == list(imported)
    literal = {k: v for k, v in declared.items() if v is not T._NOT_LITERAL}
    assert len(literal) >= len(declared) - 2  # only a computed default or two (optim) fall back
    assert literal == {k: imported[k] for k in literal}
    assert T.config_fields(name) == imported  # the non-literal ones from the import, exactly
    assert T.config_field_names(name) == {f.name for f in dataclasses.fields(CLASSES[name])}


def test_the_defaults_rlsr_plans_with_are_trls():
    """The defaults the pool, the held-out budget and the checks read (grpo_get, sft_default)
    are the imported classes' own, and a field TRL lacks is a KeyError, not a guess."""
    grpo, sft = _imported(GRPOConfig), _imported(SFTConfig)
    for field_name in ("max_completion_length", "num_generations", "per_device_train_batch_size",
                       "learning_rate", "temperature", "vllm_mode", "ddp_timeout", "optim"):  # fmt: skip
        assert T.grpo_default(field_name) == grpo[field_name]
        assert T.grpo_get({}, field_name) == grpo[field_name]
    assert T.grpo_get({"num_generations": 3}, "num_generations") == 3
    assert T.sft_default("learning_rate") == sft["learning_rate"]
    with pytest.raises(KeyError):
        T.grpo_default("learning_rat")


def test_a_layout_the_reader_does_not_follow_falls_back_to_the_imported_class(monkeypatch):
    """A TRL release that moves GRPOConfig's file (or renames a base) must cost time, never a
    wrong field list: the reader then reads the imported class."""
    moved = {**T._DECLARED, "GRPOConfig": ("trl", "trainer/moved_grpo_config.py", "trl")}
    monkeypatch.setattr(T, "_DECLARED", moved)
    T._declared_fields.cache_clear()
    try:
        assert T.config_field_names("GRPOConfig") == set(_imported(GRPOConfig))
        assert T.grpo_default("max_completion_length") == GRPOConfig.max_completion_length
    finally:
        T._declared_fields.cache_clear()


def test_checking_a_config_imports_no_torch_transformers_trl_or_datasets():
    """train.py's check path: compose recipe=tiny, build the settings, plan the run (every
    section's checks and the method registry's), and refuse a typo, in a fresh interpreter;
    none of the heavy packages may be imported by then. An import of the trainer, TRL's config
    classes or the dataset loader from rlsr.config / rlsr.method.methods / rlsr.data fails here."""
    script = textwrap.dedent(
        """
        import sys
        from rlsr.config import ConfigError
        from rlsr.config.compose import compose_config
        from rlsr.method.run_plan import plan_run

        plan_run(compose_config(["recipe=tiny"]), world_size=1)
        try:
            plan_run(compose_config(["recipe=tiny", "++grpo.learning_rat=1"]), world_size=1)
        except ConfigError as err:
            print(err)
        heavy = ("torch", "transformers", "trl", "datasets", "peft", "accelerate")
        print(sorted(m for m in heavy if m in sys.modules))
        """
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.strip().splitlines()
    assert lines[-2].startswith("grpo.learning_rat: not a trl.GRPOConfig field.")
    assert "Did you mean 'learning_rate'?" in lines[-2]
    assert lines[-1] == "[]", lines[-1]

"""The evaluation protocol declared once (rlsr/run/eval_protocol.py): `rlsr evaluate`'s flags, the
runner's EvalSettings, the held-out `heldout.*` keys and a method's `method.evaluate` all come from
EvalProtocol's fields. Pure configuration: no model, no dataset."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import pytest
import yaml

from rlsr.cli import evaluate as evaluate_flags
from rlsr.config import ConfigError, HeldOutSettings, MethodSettings
from rlsr.evaluation.run.runner import EvalSettings
from rlsr.run.eval_protocol import (
    PROTOCOL_FIELDS,
    EvalProtocol,
    ProtocolError,
    check_mapping,
    flag_of,
    protocol_flags,
    protocol_from_args,
    protocol_from_sources,
    to_flags,
)

ROOT = Path(__file__).resolve().parents[1]
COMMON = ["evaluate", "--model", "m", "--tasks", "tiny", "--output-dir", "o"]


def _parser():
    parser = argparse.ArgumentParser()
    evaluate_flags.register(parser.add_subparsers(dest="command"))
    return parser


def test_every_protocol_field_is_an_evaluate_flag_with_the_declared_default_and_help():
    evaluate = _parser()._subparsers._group_actions[0].choices["evaluate"]
    by_dest = {a.dest: a for a in evaluate._actions}
    for f in dataclasses.fields(EvalProtocol):
        action = by_dest[f.name]
        assert action.option_strings == [flag_of(f.name)]
        assert action.default == f.default and action.help == f.metadata["help"], f.name
    assert EvalSettings().values() == EvalProtocol().values()  # no second copy of the defaults
    held = HeldOutSettings()
    assert all(
        getattr(held, name) is None for name in PROTOCOL_FIELDS
    )  # unset: protocol_from_sources


def test_a_methods_mapping_and_its_flags_give_the_same_protocol():
    """to_flags(mapping) parsed by the real `rlsr evaluate` parser is the protocol the held-out
    evaluation builds from the same mapping (the slurm and toy path vs the training path)."""
    for method in ("sft", "rlsr-logprob"):
        text = (ROOT / "recipes" / "method" / f"{method}.yaml").read_text()
        declared = yaml.safe_load(text)
        needs = check_mapping(declared.get("method", declared)["evaluate"], "method.evaluate")
        args = _parser().parse_args([*COMMON, *to_flags(needs)])
        assert protocol_from_args(args) == protocol_from_sources([("method.evaluate", needs)]), (
            method
        )
    odd = {"fallbacks": False, "dcs": True, "scorers": ["logprob"], "top_p": 0.5, "seed": 3}
    args = _parser().parse_args([*COMMON, *to_flags(odd)])
    assert protocol_from_args(args) == protocol_from_sources([("m", odd)])
    p = protocol_from_sources([("m", odd)])
    assert protocol_from_args(_parser().parse_args([*COMMON, *protocol_flags(p)])) == p


def test_layers_take_the_first_value_set_and_errors_name_that_layer():
    p = protocol_from_sources([("eval", {"consistency_k": None, "top_p": 0.9}),
                 ("method.evaluate", {"consistency_k": 3, "top_p": 0.5})])  # fmt: skip
    assert (p.consistency_k, p.top_p, p.consistency_temperature) == (3, 0.9, 0.7)
    with pytest.raises(ProtocolError) as err:
        protocol_from_sources([("eval", {}), ("method.evaluate", {"consistency_k": 0})])
    assert err.value.field == "method.evaluate.consistency_k" and "must be >= 1" in str(err.value)


def test_unknown_keys_and_the_old_evaluate_args_are_refused_with_the_fix():
    with pytest.raises(ProtocolError) as err:
        check_mapping({"consistency_K": 8}, "method.evaluate")
    assert err.value.field == "method.evaluate.consistency_K"
    assert "Did you mean 'consistency_k'?" in str(err.value) and "scorers" in str(err.value)
    with pytest.raises(ConfigError) as err:
        MethodSettings(evaluate_args=["--scorers", "logprob"]).validate()
    assert err.value.field == "method.evaluate_args"
    assert "method.evaluate={scorers: [logprob]}" in str(err.value)
    with pytest.raises(ConfigError) as err:
        MethodSettings(evaluate={"response_format": "plain", "scorers": ["verbalized"]}).validate()
    assert err.value.field == "method.evaluate.scorers"


def test_a_bad_flag_value_names_the_flag():
    args = _parser().parse_args([*COMMON, "--top-p", "2"])
    with pytest.raises(ValueError, match=r"^--top-p must be in \(0, 1\]; got 2.0."):
        protocol_from_args(args)


def test_the_evaluate_command_a_run_prints_reproduces_its_held_out_protocol(tmp_path):
    """The `rlsr evaluate` command at the end of a run (training._evaluate_command) carries the
    held-out protocol's flags: parsed by the real parser it gives the same EvalProtocol (here
    method=sft with a non-default K and an heldout.* value)."""
    import shlex

    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from rlsr.config import from_dict
    from rlsr.method.run_plan import plan_run
    from rlsr.train.training import _evaluate_command

    with initialize_config_dir(config_dir=str(ROOT / "recipes"), version_base="1.3"):
        cfg = compose(
            config_name="config",
            overrides=["recipe=tiny", "method=sft", f"output_dir={tmp_path}", "heldout.top_p=0.5"],
        )
    values = OmegaConf.to_container(cfg, resolve=True)
    values.pop("hydra", None)
    settings = from_dict(values)
    settings.method.evaluate["consistency_k"] = 3
    plan = plan_run(settings, world_size=1)
    heldout = plan.heldout
    argv = shlex.split(_evaluate_command(plan, tmp_path))
    assert Path(argv[0]).name == "rlsr" and argv[1] == "evaluate"
    assert protocol_from_args(_parser().parse_args(argv[1:])) == heldout.protocol
    assert (heldout.protocol.consistency_k, heldout.protocol.top_p) == (3, 0.5)
    assert "--backend" not in argv  # transformers: rlsr evaluate's default backend


def test_the_printed_command_runs_the_engine_the_held_out_evaluation_used(tmp_path):
    """vllm / vllm_server held-out evaluations answer from merged weights (TRL syncs them into
    the engine): the printed command asks rlsr evaluate for the same (--backend vllm
    --merge-adapter), not LoRA kernels on the unmerged adapter."""
    import shlex

    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from rlsr.config import from_dict
    from rlsr.method.run_plan import plan_run
    from rlsr.train.training import _engine_flags, _evaluate_command

    with initialize_config_dir(config_dir=str(ROOT / "recipes"), version_base="1.3"):
        cfg = compose(config_name="config", overrides=["recipe=tiny", f"output_dir={tmp_path}"])
    values = OmegaConf.to_container(cfg, resolve=True)
    values.pop("hydra", None)
    settings = from_dict(values)
    plan = plan_run(settings, world_size=1)
    heldout = plan.heldout
    for backend in ("vllm", "vllm_server"):
        engine = dataclasses.replace(heldout, backend=backend)
        argv = shlex.split(_evaluate_command(dataclasses.replace(plan, heldout=engine), tmp_path))
        args = _parser().parse_args(argv[1:])
        assert (args.backend, args.merge_adapter, args.dtype) == ("vllm", True, "auto")
        assert protocol_from_args(args) == heldout.protocol
    assert _engine_flags(dataclasses.replace(heldout, backend="transformers")) == []

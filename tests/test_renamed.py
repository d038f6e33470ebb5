"""Old spellings keep reading, with one ``deprecated:`` line: the config key ``eval.layers`` (now
``eval.variants``) in a recipe file and as an override (Hydra's compose and train.py), the flag
``--protocol-layer`` (now ``--protocol-variant``) of ``rlsr evaluate`` and ``slurm/sweep.py``, and
run.json's ``protocol_layer`` (now ``protocol_variant``) in a run folder an older rlsr wrote, and
the names from when the distributed launch was an "engine" (``rlsr.launch.engine_from_env``) and
a registered task a "dataset" (``rlsr.data.DatasetSpec``).

Real Hydra compose on the shipped recipes, the real parsers and ``rlsr compare``; no model loads.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from test_compare import CONF, _answers, _compare, _correct, _settings, _write_evaluation

from rlsr import data, deprecation, launch
from rlsr.config import heldout_protocol
from rlsr.config.compose import RECIPES_DIR, compose_config
from rlsr.config.renamed import fold_renamed, renamed_overrides
from rlsr.data import registry, version_records
from rlsr.evaluation import evaluate_cli
from rlsr.run_layout import checkpoint_dir

ROOT = Path(__file__).resolve().parents[1]
OLD_KEY_LINE = "deprecated: eval.layers is now eval.variants ("


@pytest.fixture(autouse=True)
def _fresh_notes(monkeypatch):
    """Each test starts with no deprecation said yet (they are said once per process)."""
    monkeypatch.setattr(deprecation, "_SAID", set())


def _lines(err: str, start: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith(start)]


def test_old_overrides_are_spelled_the_new_way_in_every_hydra_form(capsys):
    """``eval.layers`` and a key under it become ``eval.variants`` with Hydra's prefixes kept and
    the value untouched; other keys (also one that only starts alike) are left as they are. One
    line for all of them. Catches an override left under the old key (Hydra refuses it) or a
    rewritten value."""
    old = ["eval.layers.paper.top_p=0.5", "+eval.layers.x.seed=1", "++eval.layers={}",
           "~eval.layers", "eval.layersx=1", "eval.every=2", "data.path=eval.layers=a"]  # fmt: skip
    assert renamed_overrides(old) == [
        "eval.variants.paper.top_p=0.5", "+eval.variants.x.seed=1", "++eval.variants={}",
        "~eval.variants", "eval.layersx=1", "eval.every=2", "data.path=eval.layers=a",
    ]  # fmt: skip
    assert len(_lines(capsys.readouterr().err, OLD_KEY_LINE)) == 1


def test_a_folded_old_key_yields_to_the_new_one_field_by_field(capsys):
    """A recipe file's ``eval.layers`` moves under ``eval.variants``: into the shipped ``{}``
    whole, and where both set the same variant's field the new spelling wins while the old one's
    other fields stay. The caller's tree is not changed. Catches an old key dropped, a new value
    overwritten by the old file, or a tree changed in place."""
    tree = {"eval": {"every": 2, "variants": {"paper": {"top_p": 0.5}}, "layers": {
        "paper": {"top_p": 0.9, "seed": 3}, "mine": {"max_new_tokens": 7}}}}  # fmt: skip
    folded = fold_renamed(tree)
    assert folded["eval"] == {"every": 2, "variants": {
        "paper": {"top_p": 0.5, "seed": 3}, "mine": {"max_new_tokens": 7}}}  # fmt: skip
    assert "layers" in tree["eval"] and tree["eval"]["variants"] == {"paper": {"top_p": 0.5}}
    assert fold_renamed({"eval": {"variants": {}, "layers": {"a": {}}}})["eval"] == {
        "variants": {"a": {}}
    }
    assert len(_lines(capsys.readouterr().err, OLD_KEY_LINE)) == 1
    assert fold_renamed({"eval": {"every": 1}}) == {"eval": {"every": 1}}  # nothing to fold


def test_an_old_recipe_file_composes_with_its_variants_and_one_line(tmp_path, capsys):
    """A user's recipe file with an ``eval: layers:`` section (Hydra's real compose on a copy of
    recipes/) gives the same variant as ``eval.variants`` would, and says so once. Catches an
    old section refused as an unknown key or silently dropped."""
    recipes = tmp_path / "recipes"
    shutil.copytree(RECIPES_DIR, recipes)
    text = (recipes / "recipe" / "tiny.yaml").read_text()
    assert text.count("\neval:\n") == 1
    old_section = "\neval:\n  layers:\n    mine: {max_new_tokens: 7, top_p: 0.5}\n"
    text = text.replace("\neval:\n", old_section).replace("recipe_name: tiny", "recipe_name: old")
    (recipes / "recipe" / "old.yaml").write_text(text)
    settings = compose_config(["recipe=old", f"output_dir={tmp_path / 'run'}"], recipes)
    assert settings.eval.variants == {"mine": {"max_new_tokens": 7, "top_p": 0.5}}
    protocol = heldout_protocol(settings, "grpo", "mine")
    assert (protocol.max_new_tokens, protocol.top_p) == (7, 0.5)
    assert len(_lines(capsys.readouterr().err, OLD_KEY_LINE)) == 1


def test_an_old_override_changes_the_shipped_variant(tmp_path, capsys):
    """``eval.layers.paper.max_new_tokens=2048`` on recipe=hotpot (which declares
    ``variants.paper`` with 4,096) sets the paper variant's budget, as the new spelling does, and
    ``+eval.layers.<new>`` adds one. Catches an old override that loses to the recipe (folded
    under the shipped value instead of rewritten before compose)."""
    settings = compose_config([
        "recipe=hotpot", f"output_dir={tmp_path}", "eval.layers.paper.max_new_tokens=2048",
        "+eval.layers.short.max_new_tokens=64",
    ])  # fmt: skip
    assert settings.eval.variants == {"paper": {"max_new_tokens": 2048},
                                      "short": {"max_new_tokens": 64}}  # fmt: skip
    assert heldout_protocol(settings, "grpo", "paper").max_new_tokens == 2048
    assert len(_lines(capsys.readouterr().err, OLD_KEY_LINE)) == 1


def test_train_py_reads_an_old_override_and_names_the_new_key(tmp_path):
    """train.py's own command line: an old key is rewritten before Hydra (which would refuse
    it) and a bad value is refused under the new name, exit 2, with the deprecation line once.
    Catches train.py composing the old key as an unknown one."""
    proc = subprocess.run(
        [sys.executable, str(ROOT / "train.py"), "recipe=tiny", f"output_dir={tmp_path}",
         "eval.layers=5"],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert len(_lines(proc.stderr, OLD_KEY_LINE)) == 1, proc.stderr
    assert "config error: eval.variants: must be a mapping" in proc.stderr


def test_the_old_protocol_flag_of_rlsr_evaluate_still_records_the_variant(capsys):
    """``rlsr evaluate --protocol-layer paper`` parses into ``protocol_variant`` (what run.json
    records) with one note naming the new flag."""
    parser = argparse.ArgumentParser()
    evaluate_cli.register(parser.add_subparsers(dest="command"))
    common = ["evaluate", "--model", "m", "--datasets", "tiny", "--output-dir", "o"]
    args = parser.parse_args([*common, "--protocol-layer", "paper"])
    assert args.protocol_variant == "paper"
    err = capsys.readouterr().err
    assert (
        err.strip()
        == "rlsr evaluate: note: --protocol-layer is deprecated; use --protocol-variant."
    )
    assert parser.parse_args(common).protocol_variant is None


def test_the_old_protocol_flag_of_the_sweep_still_picks_the_variant(capsys):
    """``slurm/sweep.py --protocol-layer none`` chooses the same as ``--protocol-variant none``,
    with one note."""
    sys.path.insert(0, str(ROOT / "slurm"))
    try:
        import sweep
    finally:
        sys.path.remove(str(ROOT / "slurm"))
    assert sweep.parse_args(["--protocol-layer", "none"]).protocol_variant == "none"
    assert "--protocol-layer is deprecated; use --protocol-variant" in capsys.readouterr().err
    assert sweep.parse_args([]).protocol_variant == "paper"


def _evaluate_folder(
    root: Path, name: str, method: str, variant_field: dict, seed: int = 1
) -> None:
    """An `rlsr evaluate` folder of run ``name``'s checkpoint-10, its run.json holding
    ``variant_field`` (the old or the new spelling)."""
    run = root / "runs" / name
    run.mkdir(parents=True)
    (run / "config.yaml").write_text(
        f"output_dir: {run}\nseed: {seed}\nmethod: {{name: {method}}}\n"
    )
    ckpt = checkpoint_dir(run, 10)
    ckpt.mkdir()
    (ckpt / "trainer_state.json").write_text('{"global_step": 10, "max_steps": 20}')
    record = {"model": "tiny-missing-warm", "adapter": str(ckpt),
              **{k: v for k, v in _settings().items() if k != "progress"},
              "system_prompt": "simple", **variant_field,
              "versions": version_records({"tiny-missing": "exact_match"})}  # fmt: skip
    answers = _answers(CONF, _correct("1111011000"))
    _write_evaluation(root / "evals" / name / "checkpoint-10", answers, record)


def test_an_old_run_folder_compares_with_a_new_one_under_the_same_variant(tmp_path, capsys):
    """run.json's old ``protocol_layer`` reads as ``protocol_variant``: an older folder of the
    paper variant compares with a new one of it (one deprecation line), and is refused beside a
    new folder of no variant, under the new field's name. Catches the old field dropped (the
    two paper folders would differ) or compared under its old name."""
    _evaluate_folder(tmp_path, "a", "rlsr", {"protocol_layer": "paper"})  # old spelling
    _evaluate_folder(tmp_path, "b", "rlcr", {"protocol_variant": "paper"})
    _evaluate_folder(tmp_path, "c", "rlcr", {"protocol_variant": "paper"}, seed=2)
    code, _, err = _compare(capsys, tmp_path / "evals", "--output-dir", tmp_path / "cmp")
    assert code == 0, err
    assert _lines(err, "deprecated: run.json's protocol_layer is now protocol_variant (") != []
    assert len(_lines(err, "deprecated:")) == 1, err

    shutil.rmtree(tmp_path / "evals" / "b")
    shutil.rmtree(tmp_path / "runs" / "b")
    _evaluate_folder(tmp_path, "b", "rlcr", {"protocol_variant": None})
    code, _, err = _compare(capsys, tmp_path / "evals", "--output-dir", tmp_path / "cmp2")
    assert code == 2 and "protocol_variant" in err and "'paper'" in err, err


@pytest.mark.parametrize(
    ("old", "new"),
    [("LaunchEngine", "Launch"), ("engine_from_env", "launch_from_env"),
     ("engine_from_accelerate_config", "launch_from_accelerate_config"),
     ("engine_problems", "launch_problems")],
)  # fmt: skip
def test_the_launchs_old_names_still_import_with_a_warning(old, new):
    """Code written when the distributed launch was an "engine" (``from rlsr.launch import
    engine_from_env``) gets the same object with one DeprecationWarning naming the new name; an
    unknown name is still an AttributeError."""
    with pytest.warns(DeprecationWarning, match=re.escape(f"rlsr.launch.{new}")):
        assert getattr(launch, old) is getattr(launch, new)
    with pytest.raises(AttributeError):
        launch.engine_of_nothing  # noqa: B018


@pytest.mark.parametrize(
    ("old", "new"),
    [("DatasetSpec", "TaskSpec"), ("BUILTIN_DATASETS", "BUILTIN_TASKS"),
     ("resolve_datasets", "resolve_tasks"), ("datasets_system_prompt", "tasks_system_prompt")],
)  # fmt: skip
def test_the_registrys_old_names_still_import_with_a_warning(old, new):
    """A registered entry is a task (``TaskSpec``, ``resolve_tasks``); code that imports the names
    from when it was a "dataset", from ``rlsr.data`` or ``rlsr.data.registry``, gets the same
    object with one DeprecationWarning naming the new name. An unknown name stays an error."""
    for module in (data, registry):
        with pytest.warns(DeprecationWarning, match=re.escape(f"{module.__name__}.{new}")):
            assert getattr(module, old) is getattr(registry, new)
        with pytest.raises(AttributeError):
            module.resolve_nothing  # noqa: B018

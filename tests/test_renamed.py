"""Old spellings keep reading, with one ``deprecated:`` line or note: the config section
``eval`` (now ``heldout``), its keys ``eval.layers`` / ``eval.datasets`` / ``eval.datasets_for``
(now ``heldout.variants`` / ``heldout.tasks`` / ``heldout.tasks_for``) and ``data.dataset`` (now
``data.task``) in a recipe file and as an override (Hydra's compose and train.py), a recipe
file's old key ordered exactly between the shipped files and the command line; the flags
``--protocol-layer`` (now ``--protocol-variant``) of ``rlsr evaluate`` and ``slurm/sweep.py`` and
``--datasets`` (now ``--tasks``) of ``rlsr evaluate``, the command ``rlsr datasets`` (now ``rlsr
tasks``); run.json's ``protocol_layer`` (now ``protocol_variant``) and config.yaml's
``data.dataset`` in a run folder an older rlsr wrote; and the names from when the distributed
launch was an "engine" (``rlsr.launch.engine_from_env``) and a registered task a "dataset"
(``rlsr.data.DatasetSpec``, ``ResolvedHeldOut.datasets``).

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
from rlsr.cli import evaluate as evaluate_flags
from rlsr.cli import main as cli_main
from rlsr.config import ConfigError, heldout_protocol
from rlsr.config.compose import RECIPES_DIR, compose_config, compose_tree
from rlsr.config.heldout import ResolvedHeldOut
from rlsr.config.renamed import fold_renamed, renamed_overrides
from rlsr.data import registry, version_records
from rlsr.run_layout import checkpoint_dir

ROOT = Path(__file__).resolve().parents[1]
OLD_KEY_LINE = "deprecated: eval.layers is now heldout.variants ("
OLD_SECTION_LINE = "deprecated: eval is now heldout ("


@pytest.fixture(autouse=True)
def _fresh_notes(monkeypatch):
    """Each test starts with no deprecation said yet (they are said once per process)."""
    monkeypatch.setattr(deprecation, "_SAID", set())


def _lines(err: str, start: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith(start)]


def test_old_overrides_are_spelled_the_new_way_in_every_hydra_form(capsys):
    """``eval.layers`` and a key under it become ``heldout.variants``, any other ``eval.*`` key
    ``heldout.*`` (the longest old key decides), with Hydra's prefixes kept and the value
    untouched; keys that only start alike are left as they are. One line per old key. Catches an
    override left under the old key (Hydra refuses it), one renamed by the shorter old key
    (``heldout.layers``) or a rewritten value."""
    old = ["eval.layers.paper.top_p=0.5", "+eval.layers.x.seed=1", "++eval.layers={}",
           "~eval.layers", "eval.layersx=1", "eval.every=2", "~eval", "evaluate.x=1",
           "data.path=eval.layers=a"]  # fmt: skip
    assert renamed_overrides(old) == [
        "heldout.variants.paper.top_p=0.5", "+heldout.variants.x.seed=1",
        "++heldout.variants={}", "~heldout.variants", "heldout.layersx=1", "heldout.every=2",
        "~heldout", "evaluate.x=1", "data.path=eval.layers=a",
    ]  # fmt: skip
    err = capsys.readouterr().err
    assert len(_lines(err, OLD_KEY_LINE)) == 1 and len(_lines(err, OLD_SECTION_LINE)) == 1
    assert len(_lines(err, "deprecated:")) == 2


SHIPPED = {"every": 0, "limit": 200, "variants": {"paper": {"top_p": 0.5}}}  # new-spelled files


def test_an_old_section_beats_the_files_and_loses_to_the_command_line(capsys):
    """The fold's rule, leaf by leaf: an old-spelled value from a file beats the new-spelled one
    of any file (the shipped defaults fill every field), an override on the command line beats
    both (re-applied as Hydra applies it: a mapping merges, ``~`` deletes), and what neither
    spelling sets stays. The caller's tree is not changed. Catches the shipped default winning
    over the user's old file, the old file winning over the command line, or a merge that drops
    the new spelling's other fields."""
    tree = {"heldout": {**SHIPPED, "every": 7},  # 7: the command line's heldout.every=7
            "eval": {"every": 2, "limit": 5, "layers": {"paper": {"top_p": 0.9, "seed": 3},
                                                        "mine": {"max_new_tokens": 7}}}}  # fmt: skip
    folded = fold_renamed(tree, ["recipe=old", "++heldout.every=7"])
    assert folded == {"heldout": {"every": 7, "limit": 5, "variants": {
        "paper": {"top_p": 0.9, "seed": 3}, "mine": {"max_new_tokens": 7}}}}  # fmt: skip
    assert "eval" in tree and tree["heldout"]["variants"] == {"paper": {"top_p": 0.5}}
    err = capsys.readouterr().err
    assert len(_lines(err, OLD_KEY_LINE)) == 1 and len(_lines(err, OLD_SECTION_LINE)) == 1

    old = {"eval": {"variants": {"paper": {"seed": 3}}, "limit": 5}}
    cli = ["heldout.variants.paper={top_p: 0.1}", "~heldout.limit"]  # as Hydra left them
    tree = {"heldout": {**SHIPPED, "variants": {"paper": {"top_p": 0.1}}}, **old}
    tree["heldout"].pop("limit")
    assert fold_renamed(tree, cli)["heldout"] == {
        "every": 0, "variants": {"paper": {"top_p": 0.1, "seed": 3}}}  # fmt: skip
    assert fold_renamed({"heldout": {"every": 1}}, []) == {"heldout": {"every": 1}}  # nothing


def test_a_fold_that_cannot_order_two_spellings_refuses(capsys):
    """Without the command line (``from_dict`` on a tree composed elsewhere) a field that both
    spellings set to different values is refused naming both, while a field only one sets, or
    both to the same value, folds; two old spellings of one field that differ are refused too.
    Catches a guess (either value kept silently)."""
    with pytest.raises(ConfigError, match=r"^heldout\.every: set both as eval\.every: 2 .*"
                                          r"heldout\.every: 0.*command line is not known"):  # fmt: skip
        fold_renamed({"heldout": SHIPPED, "eval": {"every": 2}})
    assert fold_renamed({"heldout": SHIPPED, "eval": {"every": 0, "split": "test"}}) == {
        "heldout": {**SHIPPED, "split": "test"}}  # fmt: skip
    assert fold_renamed({"eval": {"every": 2}}) == {"heldout": {"every": 2}}  # an old run's file
    with pytest.raises(ConfigError, match=r"^heldout\.variants\.a\.seed: set twice in old "
                                          r"spellings \(eval\.variants\.a\.seed: 1, "
                                          r"eval\.layers\.a\.seed: 2\)"):  # fmt: skip
        fold_renamed({"eval": {"variants": {"a": {"seed": 1}}, "layers": {"a": {"seed": 2}}}}, [])


def _old_recipe(tmp_path: Path, old_section: str) -> Path:
    """A copy of recipes/ with recipe ``old``: recipe=tiny with ``old_section`` (lines of YAML)
    in place of its ``heldout:`` header, as a user's recipe file written before the rename."""
    recipes = tmp_path / "recipes"
    shutil.copytree(RECIPES_DIR, recipes)
    text = (recipes / "recipe" / "tiny.yaml").read_text()
    assert text.count("\nheldout:\n") == 1
    text = text.replace("\nheldout:\n", "\n" + old_section).replace(
        "recipe_name: tiny", "recipe_name: old"
    )
    (recipes / "recipe" / "old.yaml").write_text(text)
    return recipes


def test_an_old_recipe_file_composes_with_its_variants_and_one_line(tmp_path, capsys):
    """A user's recipe file with an ``eval: layers:`` section (Hydra's real compose on a copy of
    recipes/) gives the same variant as ``heldout.variants`` would, and says so once. Catches an
    old section refused as an unknown key or silently dropped."""
    old_section = "eval:\n  layers:\n    mine: {max_new_tokens: 7, top_p: 0.5}\nheldout:\n"
    recipes = _old_recipe(tmp_path, old_section)
    settings = compose_config(["recipe=old", f"output_dir={tmp_path / 'run'}"], recipes)
    assert settings.heldout.variants == {"mine": {"max_new_tokens": 7, "top_p": 0.5}}
    protocol = heldout_protocol(settings, "grpo", "mine")
    assert (protocol.max_new_tokens, protocol.top_p) == (7, 0.5)
    assert len(_lines(capsys.readouterr().err, OLD_KEY_LINE)) == 1


def test_an_old_eval_section_in_a_file_is_ordered_between_the_defaults_and_the_command_line(
    tmp_path, capsys
):
    """Hydra's real compose of a user's recipe written with ``eval:`` (every: 3, at_start: false,
    limit: 9) on top of recipes/config.yaml's ``heldout:`` defaults: alone, the file's values
    win over the shipped defaults (limit 200) and over recipe=tiny's own new-spelled
    ``heldout:`` lines (every 20, at_start true, limit null); ``heldout.every=5`` or ``eval.every=5`` on the command line wins over the
    file for that field only; one line each. Catches the shipped default beating the user's old
    value (a "new wins" fold) or the old file beating the command line."""
    recipes = _old_recipe(tmp_path, "eval:\n  every: 3\n  at_start: false\n  limit: 9\nheldout:\n")
    out = f"output_dir={tmp_path / 'run'}"
    held = compose_config(["recipe=old", out], recipes).heldout
    assert (held.every, held.at_start, held.limit) == (3, False, 9)
    assert held.tasks_for == {"tiny-missing": ["tiny-missing"]}  # the file's new spelling
    assert len(_lines(capsys.readouterr().err, OLD_SECTION_LINE)) == 1
    for cli in ("heldout.every=5", "++heldout.every=5", "eval.every=5"):
        held = compose_config(["recipe=old", out, cli], recipes).heldout
        assert (held.every, held.at_start, held.limit) == (5, False, 9), cli
    tree = compose_tree(["recipe=old", out, "~heldout.at_start"], recipes)
    assert "at_start" not in tree.heldout and "eval" not in tree  # deleted on the command line
    new = compose_config(["recipe=tiny", out, "heldout.every=3"], recipes).heldout
    assert (new.every, new.at_start, new.limit) == (
        3,
        True,
        None,
    )  # the new spelling: no fold, no line
    assert _lines(capsys.readouterr().err, "deprecated:") == []


def test_both_spellings_in_one_file_take_the_old_ones_value(tmp_path, capsys):
    """A file that writes a field both ways (``eval: {split: a}`` and ``heldout: {split: b}``):
    the files cannot be told apart from the shipped ones, so the documented rule holds (the old
    spelling wins over every file's new one) and the line says to write one. Catches an order
    that depends on where in the file the keys stand."""
    recipes = _old_recipe(tmp_path, "eval:\n  split: a\nheldout:\n  split: b\n")
    held = compose_config(["recipe=old", f"output_dir={tmp_path}"], recipes).heldout
    assert held.split == "a"
    assert len(_lines(capsys.readouterr().err, OLD_SECTION_LINE)) == 1


def test_the_task_keys_old_names_read_in_a_file_and_on_the_command_line(tmp_path, capsys):
    """A registered entry is a task: ``data.dataset``, ``eval.datasets`` and
    ``eval.datasets_for`` are now ``data.task``, ``heldout.tasks`` and ``heldout.tasks_for``. A
    recipe file written the old way throughout (one that interpolates ``${data.dataset}`` too)
    composes to the same settings, each old key said once; ``data.dataset=tiny`` on the command
    line wins over the file and reaches the interpolation. Catches an old key refused, dropped
    or read under a shorter old name (``heldout.datasets``), or an interpolation left pointing at
    a key that no longer exists."""
    assert renamed_overrides(["eval.datasets=[a]", "+eval.datasets_for={}", "data.dataset=x",
                              "data.datasetx=1"]) == [
        "heldout.tasks=[a]", "+heldout.tasks_for={}", "data.task=x", "data.datasetx=1"]  # fmt: skip
    recipes = tmp_path / "recipes"
    shutil.copytree(RECIPES_DIR, recipes)
    text = (recipes / "recipe" / "tiny.yaml").read_text()
    for new, old in (("\n  task: tiny-missing", "\n  dataset: tiny-missing"),
                     ("\nheldout:\n", "\neval:\n  datasets: ['${data.dataset}']\n"),
                     ("\n  tasks_for:", "\n  datasets_for:"),
                     ("recipe_name: tiny", "recipe_name: old")):  # fmt: skip
        assert text.count(new) == 1, new
        text = text.replace(new, old)
    (recipes / "recipe" / "old.yaml").write_text(text)
    out = f"output_dir={tmp_path / 'run'}"
    settings = compose_config(["recipe=old", out], recipes)
    assert settings.data.task == "tiny-missing" and settings.heldout.tasks == ["tiny-missing"]
    assert settings.heldout.tasks_for == {"tiny-missing": ["tiny-missing"]}
    assert settings.heldout.every == 20  # the rest of the old section
    err = capsys.readouterr().err
    for old, new in (("data.dataset", "data.task"), ("eval.datasets", "heldout.tasks"),
                     ("eval.datasets_for", "heldout.tasks_for"), ("eval", "heldout")):  # fmt: skip
        assert len(_lines(err, f"deprecated: {old} is now {new} (")) == 1, (old, err)
    settings = compose_config(["recipe=old", out, "data.dataset=tiny"], recipes)
    assert settings.data.task == "tiny" and settings.heldout.tasks == ["tiny"]


def test_an_old_override_changes_the_shipped_variant(tmp_path, capsys):
    """``eval.layers.paper.max_new_tokens=2048`` on recipe=hotpot (which declares
    ``variants.paper`` with 4,096) sets the paper variant's budget, as the new spelling does, and
    ``+eval.layers.<new>`` adds one. Catches an old override that loses to the recipe (folded
    under the shipped value instead of rewritten before compose)."""
    settings = compose_config([
        "recipe=hotpot", f"output_dir={tmp_path}", "eval.layers.paper.max_new_tokens=2048",
        "+eval.layers.short.max_new_tokens=64",
    ])  # fmt: skip
    assert settings.heldout.variants == {"paper": {"max_new_tokens": 2048},
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
    assert "config error: heldout.variants: must be a mapping" in proc.stderr


def test_train_py_orders_an_old_file_between_the_defaults_and_its_command_line(tmp_path):
    """train.py with a user's recipe folder (``--config-dir``) whose recipe writes ``eval:
    {every: -1}``: the old value beats recipe=tiny's ``every: 20`` (refused as -1) and loses to
    ``heldout.every=-2`` on train.py's own command line (refused as -2, read back from Hydra's
    record of the overrides). Catches train.py planning the unfolded tree (the shipped 20 would
    pass) or folding without its command line."""
    (tmp_path / "mine" / "recipe").mkdir(parents=True)
    text = (RECIPES_DIR / "recipe" / "tiny.yaml").read_text()
    text = text.replace("\nheldout:\n", "\neval:\n  every: -1\nheldout:\n")
    (tmp_path / "mine" / "recipe" / "old.yaml").write_text(text)
    base = [sys.executable, str(ROOT / "train.py"), "--config-dir", str(tmp_path / "mine"),
            "recipe=old", f"output_dir={tmp_path / 'run'}"]  # fmt: skip
    for extra, got in (([], "-1"), (["heldout.every=-2"], "-2")):
        proc = subprocess.run([*base, *extra], capture_output=True, text=True, timeout=120,
                              cwd=tmp_path)  # fmt: skip
        assert proc.returncode == 2, proc.stderr
        assert "config error: heldout.every: must be an integer >= 0" in proc.stderr
        assert f"got {got}." in proc.stderr, proc.stderr
        assert len(_lines(proc.stderr, OLD_SECTION_LINE)) == 1, proc.stderr


def test_the_old_protocol_flag_of_rlsr_evaluate_still_records_the_variant(capsys):
    """``rlsr evaluate --protocol-layer paper`` parses into ``protocol_variant`` (what run.json
    records) with one note naming the new flag."""
    parser = argparse.ArgumentParser()
    evaluate_flags.register(parser.add_subparsers(dest="command"))
    common = ["evaluate", "--model", "m", "--tasks", "tiny", "--output-dir", "o"]
    args = parser.parse_args([*common, "--protocol-layer", "paper"])
    assert args.protocol_variant == "paper"
    err = capsys.readouterr().err
    assert (
        err.strip()
        == "rlsr evaluate: note: --protocol-layer is deprecated; use --protocol-variant."
    )
    assert parser.parse_args(common).protocol_variant is None


def test_the_old_tasks_flag_of_rlsr_evaluate_still_names_the_tasks(capsys):
    """``rlsr evaluate --datasets tiny`` parses as ``--tasks tiny`` with one note naming the new
    flag; giving both is refused, giving neither still is. Catches the old flag dropped (every
    script that passes it would stop) or silently overriding the new one."""
    parser = argparse.ArgumentParser()
    evaluate_flags.register(parser.add_subparsers(dest="command"))
    common = ["evaluate", "--model", "m", "--output-dir", "o"]
    assert parser.parse_args([*common, "--datasets", "tiny"]).tasks == "tiny"
    assert capsys.readouterr().err.strip() == (
        "rlsr evaluate: note: --datasets is deprecated; use --tasks."
    )
    assert parser.parse_args([*common, "--tasks", "tiny"]).tasks == "tiny"
    assert capsys.readouterr().err == ""
    for extra in (["--tasks", "a", "--datasets", "b"], []):
        with pytest.raises(SystemExit):
            parser.parse_args([*common, *extra])
    assert "--tasks" in capsys.readouterr().err


def test_rlsr_datasets_still_runs_rlsr_tasks(capsys):
    """``rlsr datasets`` (and its ``list`` / ``show``) prints what ``rlsr tasks`` prints, with
    one note naming the new command. Catches the old command removed or run without saying so."""
    assert cli_main(["tasks", "show", "tiny"]) == 0
    new = capsys.readouterr()
    assert "note:" not in new.err  # (stderr may hold the datasets library's progress bar)
    assert cli_main(["datasets", "show", "tiny"]) == 0
    old = capsys.readouterr()
    assert old.out == new.out
    assert _lines(old.err, "rlsr datasets: note:") == [
        "rlsr datasets: note: rlsr datasets is deprecated; use rlsr tasks."
    ]


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
    root: Path, name: str, method: str, variant_field: dict, seed: int = 1, config: str = ""
) -> None:
    """An `rlsr evaluate` folder of run ``name``'s checkpoint-10, its run.json holding
    ``variant_field`` (the old or the new spelling), its run's config.yaml ending in
    ``config``."""
    run = root / "runs" / name
    run.mkdir(parents=True)
    (run / "config.yaml").write_text(
        f"output_dir: {run}\nseed: {seed}\nmethod: {{name: {method}}}\n{config}"
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


def test_the_resolved_held_out_plans_old_datasets_name_reads_its_tasks():
    """``ResolvedHeldOut.tasks`` lists the evaluated tasks of its jobs once each, in order; the old
    name ``.datasets`` gives the same list with one DeprecationWarning naming ``tasks``. Catches
    the old name dropped (code reading it breaks) or answering without saying so."""
    held = ResolvedHeldOut(every=1, at_end=True, at_start=False, verifiers={}, backend="vllm",
                           jobs=(("b", "b", "eval"), ("a@test", "a", "test"), ("b2", "b", "x")),
                           protocol=None, settings=None)  # fmt: skip
    assert held.tasks == ["b", "a"]
    with pytest.warns(DeprecationWarning, match=re.escape("ResolvedHeldOut.tasks")):
        assert held.datasets == ["b", "a"]


def test_an_older_runs_config_compares_under_the_new_keys(tmp_path, capsys):
    """Two seeds of one method, one trained before the rename (config.yaml ``eval:`` and
    ``data.dataset``) and one after (``heldout:``, ``data.task``), same values: ``rlsr compare``
    reads the older one's keys under the new names (one line each, naming a run folder's file),
    so it notes no config difference between them; a value that really differs is still noted.
    Catches every renamed key listed as a difference between old and new runs."""
    old = "eval: {every: 2, datasets: [tiny]}\ndata: {dataset: tiny}\n"
    new = "heldout: {every: 2, tasks: [tiny]}\ndata: {task: tiny}\n"
    _evaluate_folder(tmp_path, "a", "rlsr", {}, seed=1, config=old)
    _evaluate_folder(tmp_path, "b", "rlsr", {}, seed=2, config=new)
    _evaluate_folder(tmp_path, "c", "rlcr", {}, seed=1, config=new)
    _evaluate_folder(tmp_path, "d", "rlcr", {}, seed=2, config=new.replace("every: 2", "every: 3"))
    code, _, err = _compare(capsys, tmp_path / "evals", "--output-dir", tmp_path / "cmp")
    assert code == 0, err
    assert "the runs of rlsr differ" not in err, err
    differ = "the runs of rlcr differ in their recorded config (config.yaml) beyond the seed: "
    assert differ + "heldout.every\n" in err, err
    for line in ("data.dataset is now data.task", "eval is now heldout",
                 "eval.datasets is now heldout.tasks"):  # fmt: skip
        assert len(_lines(err, f"deprecated: {line} (a run folder's config.yaml")) == 1, err


def test_the_old_deployment_flag_of_rlsr_evaluate_still_names_the_task(capsys):
    """``rlsr evaluate --deployment-dataset caps`` parses as ``--deployment-task caps`` with one
    note naming the new flag, and the default (medqa) is unchanged. Catches the old flag dropped
    (a deployment script that passes it would stop) or landing in another field than the one the
    deployment's evaluation reads."""
    parser = argparse.ArgumentParser()
    evaluate_flags.register(parser.add_subparsers(dest="command"))
    common = ["evaluate", "--model", "m", "--output-dir", "o", "--tasks", "caps"]
    assert parser.parse_args([*common, "--deployment-dataset", "caps"]).deployment_task == "caps"
    assert capsys.readouterr().err.strip() == (
        "rlsr evaluate: note: --deployment-dataset is deprecated; use --deployment-task."
    )
    assert parser.parse_args([*common, "--deployment-task", "caps"]).deployment_task == "caps"
    assert parser.parse_args(common).deployment_task == "medqa"
    assert capsys.readouterr().err == ""

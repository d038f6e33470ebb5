"""``rlsr deploy`` against the run that made the adapter: a threshold chosen on the split the
adapter trained on (the run's ``config.yaml``) is refused, or with ``--allow-train-split`` marked
in every output (table, deployment.json, serve's start-up line)."""

from __future__ import annotations

import json

import pytest

from rlsr.cli import main
from rlsr.data.loading import load_examples
from rlsr.evaluation.deploy.deployment import training_record
from rlsr.serving.threshold import load_threshold, promise

DATASET = "tiny-missing"


def _samples(folder, split: str, n: int = 40):
    """``folder/samples.jsonl`` of ``n`` bundled rows of ``split``, as ``rlsr evaluate`` writes
    them (dataset ``tiny-missing@split``): the listed questions right at confidence 0.9, the
    missing ones wrong at 0.1, so every rule reaches a 75 % target."""
    folder.mkdir(parents=True)
    lines = []
    for row in load_examples(DATASET, split=split, limit=n):
        listed = "Facts: none." not in row["question"]
        conf = 0.9 if listed else 0.1
        lines.append(json.dumps({
            "id": row["id"], "dataset": f"{DATASET}@{split}", "prompt": row["prompt"],
            "question": row["question"], "confidence": conf, "scores": {"verbalized": conf},
            "correct": listed, "format_ok": True,
        }) + "\n")  # fmt: skip
    (folder / "samples.jsonl").write_text("".join(lines))
    return folder


@pytest.fixture
def run(tmp_path):
    """A train.py output dir: its resolved config (data.task=tiny-missing, split null = the
    dataset's train split) and a checkpoint holding a LoRA adapter config."""
    out = tmp_path / "run"
    (out / "checkpoint-40").mkdir(parents=True)
    (out / "config.yaml").write_text(f"data:\n  task: {DATASET}\n  split: null\nseed: 42\n")
    (out / "checkpoint-40" / "adapter_config.json").write_text('{"r": 1}')
    return out


def _deploy(tmp_path, run, val_split: str, *extra: str) -> tuple[int, str]:
    val = _samples(tmp_path / f"val-{val_split}", val_split)
    test = _samples(tmp_path / "test", "test")
    argv = ["deploy", "--validation", str(val), "--test", str(test), "--deployment-target",
            "0.75", "--adapter", str(run / "checkpoint-40"), "--output-dir", str(tmp_path / "dep"),
            *extra]  # fmt: skip
    return main(argv)


def test_training_record_reads_the_runs_config_beside_the_adapter(run):
    """The final adapter sits in output_dir, a checkpoint one level below: both find the run's
    config.yaml; the split defaults to the dataset's train split, ``data.split`` sets it.
    Catches a reader that looks only in the adapter folder (every checkpoint would pass
    unchecked)."""
    got = training_record(run / "checkpoint-40")
    assert (got["dataset"], got["split"]) == (DATASET, "train")
    assert training_record(run) == got
    (run / "config.yaml").write_text(f"data:\n  task: {DATASET}\n  split: validation\n")
    assert training_record(run / "checkpoint-40")["split"] == "validation"
    assert training_record(run.parent) is None  # no config.yaml: not a train.py run


def test_deploy_refuses_a_threshold_chosen_on_the_adapters_training_split(tmp_path, run, capsys):
    """Validation samples from tiny-missing@train with an adapter trained on tiny-missing's train
    split: exit 2, one line naming the run's config.yaml and the flag, and no deployment file
    written. Catches a threshold (and its "at least 75 % accurate" sentence) certified on rows
    the model was fit to."""
    assert _deploy(tmp_path, run, "train") == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("rlsr:")]
    assert len(err) == 1, err  # one line, no traceback
    err = err[0]
    assert "config.yaml" in err and "--allow-train-split" in err and "tiny-missing@train" in err
    assert (
        not (tmp_path / "dep" / "deployment.json").exists()
        and not (tmp_path / "dep" / "deployment.md").exists()
    )


def test_allowed_threshold_on_training_rows_is_marked_in_every_output(tmp_path, run, capsys):
    """With --allow-train-split the deployment is written, and the printed table, deploy.md,
    every row's guarantee in deployment.json and serve's start-up promise all say NOT HELD OUT.
    Catches a flag that silently turns the check off."""
    assert _deploy(tmp_path, run, "train", "--allow-train-split") == 0
    assert "NOT HELD OUT" in capsys.readouterr().out
    assert "NOT HELD OUT" in (tmp_path / "dep" / "deployment.md").read_text()
    record = json.loads((tmp_path / "dep" / "deployment.json").read_text())
    assert record["provenance"]["threshold_on_training_rows"] is True
    assert record["provenance"]["trained_on"]["split"] == "train"
    assert all(row["guarantee"].startswith("NOT HELD OUT") for row in record["rows"])
    assert "NOT HELD OUT" in promise(
        load_threshold(tmp_path / "dep" / "deployment.json", "clopper_pearson")
    )


def test_deploy_on_the_held_out_validation_split_is_not_marked(tmp_path, run, capsys):
    """The bundled validation split (objects the training split never names) is accepted
    unmarked. Catches a check that refuses every deployment of a trained adapter."""
    assert _deploy(tmp_path, run, "validation") == 0
    assert "NOT HELD OUT" not in capsys.readouterr().out
    record = json.loads((tmp_path / "dep" / "deployment.json").read_text())
    assert record["provenance"]["threshold_on_training_rows"] is False
    assert not any("NOT HELD OUT" in row["guarantee"] for row in record["rows"])

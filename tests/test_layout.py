"""The output layout is spelled once (rlsr.evaluation.layout): file names, step folders, the
run.json comparison. Reads source and small folders only."""

from __future__ import annotations

import ast
from pathlib import Path

from rlsr.evaluation import layout

PACKAGE = Path(__file__).resolve().parents[1] / "rlsr"
NAMES = {
    layout.SAMPLES_FILE,
    layout.METRICS_FILE,
    layout.PLOT_FILE,
    layout.RUN_FILE,
    layout.FAILED_FILE,
    layout.HISTORY_FILE,
}


def _string_constants(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, value) of every str constant that is not a docstring."""
    docstrings = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            if isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
                docstrings.add(id(body[0].value))
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
        and id(node) not in docstrings
    ]  # fmt: skip


def test_output_file_names_are_spelled_only_in_the_layout_module():
    """Before the layout module, ``run.json`` was spelled in three modules (evaluate's CLI, the
    in-training history, deployment), each with its own copy: a rename in one would have
    silently split writers from readers."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == Path(layout.__file__).resolve():
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        found += [f"{path.relative_to(PACKAGE.parent)}:{line}: {value!r}"
                  for line, value in _string_constants(tree) if value in NAMES]  # fmt: skip
    assert not found, "use rlsr.evaluation.layout's names:\n" + "\n".join(found)


def test_step_folders_skip_partial_and_foreign_folders(tmp_path):
    for name in ("step-0", "step-12", "step-3", "step-5.partial", "step-x", "other"):
        (layout.step_dir(tmp_path, 0).parent / name).mkdir(parents=True)
    (tmp_path / "eval" / "step-7").write_text("a file, not a folder")
    assert [step for step, _ in layout.step_folders(tmp_path)] == [0, 3, 12]
    assert layout.step_of(layout.partial_dir(layout.step_dir(tmp_path, 5))) is None
    assert layout.step_folders(tmp_path / "missing") == []


def test_config_differences_name_each_changed_field():
    old = {
        "model": "m",
        "seed": 0,
        "verifiers": {"tiny": "exact_match"},
        "adapter_sha256": "a" * 64,
    }
    new = {**old, "seed": 1, "verifiers": {"tiny": "llm_judge"}, "adapter_sha256": "b" * 64}
    assert layout.config_differences(old, new) == [
        "adapter_sha256: aaaaaaaaaaaa… -> bbbbbbbbbbbb…",
        "seed: 0 -> 1",
        "verifier of tiny: 'exact_match' -> 'llm_judge'",
    ]
    # a field an older run.json lacks is not compared
    assert layout.config_differences({"verifiers": {}}, {**new, "top_p": 0.5}) == []


def test_run_json_compares_the_protocols_sample_deciding_fields():
    """The fields a rerun must agree on come from the protocol's declaration (``decides_samples``),
    so a new protocol field is compared unless it says it does not decide a sample."""
    from rlsr.eval_protocol import PROTOCOL_FIELDS, SAMPLE_FIELDS

    assert set(layout.CONFIG_FIELDS) & set(PROTOCOL_FIELDS) == set(SAMPLE_FIELDS)
    assert set(PROTOCOL_FIELDS) - set(SAMPLE_FIELDS) == {
        "batch_size",
        "bootstrap",
        "keep_token_ids",
    }

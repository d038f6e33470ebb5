"""The output layout is spelled once (rlsr.run.run_layout): file names, step and checkpoint
folders, the run.json comparison. Reads source and small folders only."""

from __future__ import annotations

import ast
import importlib.util
import re
from pathlib import Path

import pytest

from rlsr.run import run_layout as layout

REPO = Path(__file__).resolve().parents[1]
# Where code that reads or writes an output folder lives: Python is read with ast (docstrings may
# mention a name, comments are not in the tree), shell scripts as text (comments skipped).
SCANNED = ("rlsr", "scripts", "benchmarks", "slurm", "tools", "examples", "train.py")
SHELL_SUFFIXES = (".sh", ".slurm")
# Every file name the layout declares (a new *_FILE constant is guarded without editing this test)
FILE_NAMES = sorted(getattr(layout, n) for n in layout.__all__ if n.endswith("_FILE"))
PREFIXES = (layout.STEP_PREFIX, layout.CHECKPOINT_PREFIX)
# a file name as a whole word (inside a path, a sentence, an f-string); a folder prefix followed by
# its number: a digit, an f-string field ({}), a glob (*), a shell variable ($), the placeholder N,
# or the end of the piece ("checkpoint-" + str(n))
_SPELLED = re.compile(
    "|".join(
        [rf"(?<![\w.-]){re.escape(name)}(?!\w)" for name in FILE_NAMES]
        + [rf"(?<![\w-]){re.escape(prefix)}(?=[0-9{{*$]|N\b|\Z)" for prefix in PREFIXES]
    )
)


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            if isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
                found.add(id(body[0].value))
    return found


def _text(node: ast.AST, used: set[int]) -> str | None:
    """The text a string expression builds, ``{}`` for each part only known at run time:
    a str constant, an f-string (its constant parts and fields), a ``+`` of such pieces.
    None for anything else. Adds the ids of the nodes read to ``used``."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        used.add(id(node))
        return node.value
    if isinstance(node, ast.JoinedStr):
        used.update(id(v) for v in node.values)
        return "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        pieces = _text(node.left, used), _text(node.right, used)
        if pieces == (None, None):
            return None
        used.add(id(node))
        return "".join("{}" if piece is None else piece for piece in pieces)
    return None


def _python_spellings(source: str) -> list[tuple[int, str]]:
    tree = ast.parse(source)
    read = _docstrings(tree)  # docstrings may mention a name; so do comments (not in the tree)
    found = []
    for node in ast.walk(
        tree
    ):  # outer nodes first: a + chain is read whole, then its pieces skipped
        if id(node) in read:
            continue
        text = _text(node, read)
        if text is not None and _SPELLED.search(text):
            found.append((node.lineno, text))
    return found


def _shell_spellings(source: str) -> list[tuple[int, str]]:
    found = []
    for line_no, line in enumerate(source.splitlines(), 1):
        code = re.sub(r"(^|\s)#.*$", "", line)  # a comment line or a trailing comment
        if _SPELLED.search(code):
            found.append((line_no, code.strip()))
    return found


def spelled_layout_names(root: Path) -> list[str]:
    """``path:line: text`` of each place under ``root``'s SCANNED folders that spells an output
    file name or a step/checkpoint folder prefix instead of taking it from
    rlsr.run.run_layout (which is the one place allowed to)."""
    own = Path(layout.__file__).resolve()
    files = []
    for top in SCANNED:
        path = root / top
        files += sorted(path.rglob("*")) if path.is_dir() else [path] if path.is_file() else []
    found = []
    for path in files:
        if path.resolve() == own or "__pycache__" in path.parts:
            continue
        if path.suffix == ".py":
            hits = _python_spellings(path.read_text(encoding="utf-8"))
        elif path.suffix in SHELL_SUFFIXES:
            hits = _shell_spellings(path.read_text(encoding="utf-8"))
        else:
            continue
        found += [f"{path.relative_to(root)}:{line}: {text!r}" for line, text in hits]
    return found


def test_output_names_are_spelled_only_in_the_layout_module():
    """Before the layout module, ``run.json`` was spelled in three modules (evaluate's CLI, the
    held-out history, deployment), each with its own copy: a rename in one would have
    silently split writers from readers. Later ``checkpoint-N`` was spelled in six places and
    ``step-`` in three, outside rlsr/ too (scripts, benchmarks, the Slurm scripts)."""
    found = spelled_layout_names(REPO)
    assert not found, "use rlsr.run.run_layout's names:\n" + "\n".join(found)


PLANTED = {
    "plain constant": ("rlsr/a.py", 'path = out / "samples.jsonl"\n'),
    "f-string": ("rlsr/a.py", 'path = f"{out}/metrics.json"\n'),
    "f-string prefix": ("scripts/a.py", 'path = f"{run}/checkpoint-{step}"\n'),
    "concatenation": ("benchmarks/a.py", 'path = out + "/run" + ".json"\n'),
    "concatenated prefix": ("rlsr/a.py", 'name = "step-" + str(step)\n'),
    "split across pieces": ("rlsr/a.py", 'name = "checkpoint" + "-" + str(step)\n'),
    "path string": ("slurm/a.py", 'HISTORY = "runs/x/eval/history.jsonl"\n'),
    "name in a message": ("rlsr/a.py", 'raise ValueError(f"{p}: give a deployment.json")\n'),
    "glob": ("train.py", 'found = out.glob("checkpoint-*")\n'),
    "shell literal": ("slurm/a.slurm", "[[ $label != checkpoint-* ]] || label=x\n"),
    "shell path": ("scripts/a.sh", 'cat "$out/eval/step-$n/failed.json"  # why\n'),
}


@pytest.mark.parametrize("form", PLANTED)
def test_the_guard_fails_on_each_planted_form(tmp_path, form):
    where, source = PLANTED[form]
    (tmp_path / where).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / where).write_text(source)
    found = spelled_layout_names(tmp_path)
    assert len(found) == 1 and found[0].startswith(f"{where}:1: "), found


def test_the_guard_lets_docstrings_comments_and_other_words_pass(tmp_path):
    (tmp_path / "rlsr").mkdir()
    (tmp_path / "rlsr" / "a.py").write_text(
        '"""Writes ``OUT/samples.jsonl`` and ``checkpoint-N``."""\n'
        "# eval/step-N/metrics.json\n"
        "def f():\n"
        '    """step-3/run.json"""\n'
        '    return "step-time overhead", "training_run.json", "my.metrics.json.bak", "checkpoints"\n'
    )
    (tmp_path / "slurm").mkdir()
    (tmp_path / "slurm" / "a.slurm").write_text(
        "# evals/<run>/<checkpoint-N>/\necho ${#ARR[@]} # step-N/failed.json\n"
    )
    assert spelled_layout_names(tmp_path) == []


def test_checkpoint_prefix_is_transformers_own():
    """HF Trainer names its checkpoints ``f"{PREFIX_CHECKPOINT_DIR}-{step}"``; the layout restates
    the prefix (importing transformers.trainer_utils loads torch), so it is read here from
    transformers' source, without importing it."""
    spec = importlib.util.find_spec("transformers")
    source = (Path(spec.origin).parent / "trainer_utils.py").read_text(encoding="utf-8")
    values = [node.value.value for node in ast.parse(source).body
              if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
              and [getattr(t, "id", None) for t in node.targets] == ["PREFIX_CHECKPOINT_DIR"]]  # fmt: skip
    assert values and layout.CHECKPOINT_PREFIX == f"{values[0]}-"


def test_checkpoint_folders_are_numbered_folders_by_step(tmp_path):
    for name in ("checkpoint-20", "checkpoint-100", "checkpoint-3", "checkpoint-x", "eval"):
        (tmp_path / name).mkdir()
    (tmp_path / "checkpoint-7").write_text("a file, not a folder")
    (tmp_path / "checkpoint-²").mkdir()  # a digit to str.isdigit, not to int()
    assert layout.checkpoint_folders(tmp_path) == [
        (3, tmp_path / "checkpoint-3"),
        (20, tmp_path / "checkpoint-20"),
        (100, tmp_path / "checkpoint-100"),
    ]
    assert layout.checkpoint_dir(tmp_path, 20) == tmp_path / "checkpoint-20"
    assert layout.checkpoint_step(layout.checkpoint_dir(tmp_path, 40)) == 40
    assert layout.checkpoint_step(tmp_path / "checkpoint-40.tmp") is None
    assert layout.checkpoint_folders(tmp_path / "missing") == []


def test_shell_scripts_read_the_names_from_the_layout_module(capsys):
    """``python -m rlsr.run.run_layout NAME...`` (what slurm/evaluate.slurm runs)."""
    assert layout.main(["CHECKPOINT_PREFIX", "STEP_PREFIX"]) == 0
    assert capsys.readouterr().out == "checkpoint-\nstep-\n"
    assert layout.main(["config_differences"]) == 2
    assert "NAME is one of" in capsys.readouterr().err


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
    from rlsr.run.eval_protocol import PROTOCOL_FIELDS, SAMPLE_FIELDS

    assert set(layout.CONFIG_FIELDS) & set(PROTOCOL_FIELDS) == set(SAMPLE_FIELDS)
    assert set(PROTOCOL_FIELDS) - set(SAMPLE_FIELDS) == {
        "batch_size",
        "bootstrap",
        "keep_token_ids",
    }

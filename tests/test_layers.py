"""The package's import graph runs one way (docs/architecture.md): no cycles, no function-local imports of
rlsr modules, no import going up the layer table below. Reads source only (``ast``).

A new module goes into the folder of its floor (``FLOORS`` below); a heavy optional
third-party dependency (vllm, matplotlib, deepspeed, liger) may still be imported inside a
function, with a comment.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "rlsr"

# The floors, declared once: (floor, name, {package or module: what it holds}). The package's
# folders are its floors: every module of a folder sits on that folder's floor.
# docs/architecture.md's floor block and table are generated from this table
# (`python tests/test_layers.py --write-docs`) and test_architecture_shows_the_declared_floors
# fails when they differ.
FLOORS: tuple[tuple[int, str, dict[str, str]], ...] = (
    (
        0,
        "primitives",
        {
            "rlsr": "the package's version",
            "rlsr.core": "reading a completion (answer, confidence, format); confidence ranking "
            "with exact ties; the paper's prompts; tokenizer loading; metric input checks; the "
            "distributed launch and the machine; plugin imports; every settings check's words",
        },
    ),
    (
        1,
        "equations",
        {
            "rlsr.equations": "the method's reward equations (lifted AURC share, marginal AURC, "
            "Brier, correctness, format) and the log-prob confidence selector",
            "rlsr.metrics": "AURC, ECE, Acc@coverage (selective), calibration, thresholds, utility",
            "rlsr.verifiers": "correctness verifiers, one module each, their registry and plugins",
        },
    ),
    (
        2,
        "data, config",
        {
            "rlsr.data": "tasks: registry, loaders, formatting, user tasks, the shipped tiny "
            "models' lookup",
            "rlsr.config": "the typed settings of train.py, each section checking its own fields "
            "(held-out evaluation, TRL's arguments, server-mode evaluation)",
            "rlsr.run": "the evaluation protocol, declared once, and the run folder's names",
        },
    ),
    (
        3,
        "method, trainer",
        {
            "rlsr.method": "the method registry, one optimizer step's pool and its files, the "
            "trainer (TRL's GRPOTrainer with pooled rewards), the SFT baseline, the launch's plan, "
            "checkpoints and resume, the LoRA weight sync",
        },
    ),
    (
        4,
        "run assembly, evaluation",
        {
            "rlsr.train": "building and running a training launch",
            "rlsr.generation": "every backend that produces text, the Sec. C.3 fallback steps",
            "rlsr.evaluation": "run/ evaluating a model, reports/ rlsr report, deploy/ "
            "certificates and audit, comparison/ rlsr compare, heldout/ evaluation during training",
            "rlsr.serving": "selective serving: answer iff the score reaches tau",
            "rlsr.lm_eval": "rlsr's tasks as lm-evaluation-harness tasks",
        },
    ),
    (
        5,
        "command lines",
        {
            "rlsr.cli": "the rlsr parser, each command's flags (light) and what it runs (*_cli.py)",
        },
    ),
)
# (module or package prefix, floor). A module takes the floor of its longest matching prefix;
# "rlsr" matches the package's own __init__ only. An import may go to the same or a lower floor.
LAYERS: dict[str, int] = {name: floor for floor, _, folders in FLOORS for name in folders}
# Inside the run assembly/evaluation floor the three packages are tied one way: generation <-
# evaluation <- serving (serving applies what evaluation certified; both generate through
# generation). (importer package, package it may not import)
ONE_WAY: tuple[tuple[str, str], ...] = (
    ("rlsr.generation", "rlsr.evaluation"),
    ("rlsr.generation", "rlsr.serving"),
    ("rlsr.evaluation", "rlsr.serving"),
)
LAYER_NAMES = tuple(name for _, name, _ in FLOORS)


def module_name(path: Path, root: Path = PACKAGE) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def read_sources(root: Path = PACKAGE) -> dict[str, str]:
    """``{module name: source}`` of every module of the package."""
    return {module_name(p, root): p.read_text(encoding="utf-8") for p in sorted(root.rglob("*.py"))}


def _resolve(target: str, modules: set[str]) -> str | None:
    while target:
        if target in modules:
            return target
        target = target.rpartition(".")[0]
    return None


def import_edges(sources: dict[str, str]) -> list[tuple[str, str, int, bool]]:
    """``(importer, imported, line, local)`` for every import of a package module; ``local`` is
    True for an import inside a function or class body."""
    modules = set(sources)
    edges = []
    for mod, text in sources.items():
        tree = ast.parse(text)
        is_package = any(m.startswith(mod + ".") for m in modules) or mod == "rlsr"
        top = {id(node) for node in tree.body}
        # imports under a module-level if/try are still module-top
        for node in tree.body:
            if isinstance(node, ast.If | ast.Try):
                top.update(id(n) for n in ast.walk(node))
        for node in ast.walk(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = mod if is_package else mod.rpartition(".")[0]
                    for _ in range(node.level - 1):
                        anchor = anchor.rpartition(".")[0]
                    base = f"{anchor}.{base}" if base else anchor
                targets = [f"{base}.{a.name}" for a in node.names]
            for target in targets:
                found = _resolve(target, modules)
                if found is not None and found != mod:
                    edges.append((mod, found, node.lineno, id(node) not in top))
    return edges


def layer_of(module: str) -> int | None:
    best = None
    for prefix, layer in LAYERS.items():
        matches = module == prefix or (prefix != "rlsr" and module.startswith(prefix + "."))
        if matches and (best is None or len(prefix) > len(best[0])):
            best = (prefix, layer)
    return None if best is None else best[1]


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def find_cycles(edges) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    graph: dict[str, set[str]] = {}
    for a, b, _, _ in edges:
        graph.setdefault(a, set()).add(b)
        graph.setdefault(b, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def problems(sources: dict[str, str]) -> list[str]:
    """Every violation of the layering rules, one line each (empty: the graph is clean)."""
    edges = import_edges(sources)
    found = [
        f"{m}: in no folder of FLOORS in tests/test_layers.py"
        for m in sources
        if layer_of(m) is None
    ]
    for a, b, line, local in edges:
        if local:
            found.append(f"{a}:{line}: function-local import of {b}; import it at module top")
        la, lb = layer_of(a), layer_of(b)
        if la is not None and lb is not None and lb > la:
            found.append(
                f"{a}:{line}: imports {b}, a higher layer ({LAYER_NAMES[la]} -> {LAYER_NAMES[lb]})"
            )
        for low, high in ONE_WAY:
            if _within(a, low) and _within(b, high):
                found.append(f"{a}:{line}: imports {b}; {high} builds on {low}, not the reverse")
    found += [f"import cycle: {' <-> '.join(c)}" for c in find_cycles(edges)]
    return found


def test_the_package_imports_run_one_way():
    sources = read_sources()
    assert "rlsr.method.trainer" in sources and "rlsr.verifiers.math" in sources
    assert problems(sources) == []


def test_every_declared_layer_prefix_names_a_module():
    sources = read_sources()
    for prefix in LAYERS:
        assert any(m == prefix or m.startswith(prefix + ".") for m in sources), prefix


def test_the_old_config_trainer_cycle_is_caught():
    """Reintroduce what the package had: config imports the trainer inside a function, the
    trainer imports config at top. All three rules must fire."""
    sources = read_sources()
    sources["rlsr.config"] += (
        "\n\ndef _columns(m):\n    from rlsr.method.trainer import RLSRTrainer\n"
    )
    sources["rlsr.method.trainer"] = (
        "from rlsr.config import ConfigError\n" + sources["rlsr.method.trainer"]
    )
    found = problems(sources)
    assert any("function-local import of rlsr.method.trainer" in p for p in found), found
    assert any("rlsr.config:" in p and "higher layer" in p for p in found), found
    assert any(p.startswith("import cycle:") and "rlsr.config" in p for p in found), found


def test_an_evaluation_import_of_serving_is_caught():
    """Reintroduce the two-way tie the package had: the deployment audit imports serving's
    policy while serving imports evaluation. The one-way rule must name the audit's import."""
    sources = read_sources()
    sources["rlsr.evaluation.deploy.audit"] = (
        "from rlsr.serving.policy import ServeSettings\n" + sources["rlsr.evaluation.deploy.audit"]
    )
    found = problems(sources)
    assert any(
        p.startswith("rlsr.evaluation.deploy.audit:1: imports rlsr.serving.policy;") for p in found
    ), found


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("from rlsr import metrics as M\n", "rlsr.metrics"),
        ("import rlsr.metrics\n", "rlsr.metrics"),
        ("from rlsr.verifiers import get_verifier\n", "rlsr.verifiers"),
        ("from rlsr.data import cli\n", "rlsr.data.cli"),
        ("from .. import metrics\n", "rlsr.metrics"),
    ],
)
def test_import_forms_are_resolved(source, expected):
    sources = {
        "rlsr": "",
        "rlsr.metrics": "",
        "rlsr.verifiers": "",
        "rlsr.data": "",
        "rlsr.data.cli": "",
        "rlsr.evaluation": "",
        "rlsr.evaluation.x": source,
    }
    assert [(a, b) for a, b, _, _ in import_edges(sources)] == [("rlsr.evaluation.x", expected)]


def test_a_local_import_of_a_third_party_package_is_allowed_but_not_of_ours():
    sources = {
        "rlsr": "",
        "rlsr.metrics": "",
        "rlsr.evaluation": "",
        "rlsr.evaluation.plots": (
            "def plot():\n    import matplotlib  # heavy optional dependency\n"
            "    from rlsr import metrics\n"
        ),
    }
    found = problems(sources)
    assert found == [
        "rlsr.evaluation.plots:3: function-local import of rlsr.metrics; import it at module top"
    ]


ARCHITECTURE = PACKAGE.parent / "docs" / "architecture.md"
BLOCK_START = "<!-- floors: generated from FLOORS in tests/test_layers.py; python tests/test_layers.py --write-docs -->"
BLOCK_END = "<!-- end of floors -->"


def floors_markdown() -> str:
    """The floor block (top floor first) and the table of folders, as docs/architecture.md shows
    them."""
    lines = ["```"]
    for floor, name, folders in reversed(FLOORS):
        shown = [_folder(p) for p in folders if p != "rlsr"]
        lines.append(f"{floor}  {name:<26}{' · '.join(shown)}")
        if floor:
            lines.append("        ^")
    lines += ["```", "", "| floor | folder | holds |", "|---|---|---|"]
    for floor, name, folders in FLOORS:
        for prefix, holds in folders.items():
            if prefix != "rlsr":
                lines.append(f"| {floor} {name} | `{_folder(prefix)}` | {holds} |")
    return "\n".join(lines)


def _folder(prefix: str) -> str:
    return prefix.replace(".", "/") + "/"


def _architecture_block(text: str) -> str:
    start = text.index(BLOCK_START) + len(BLOCK_START)
    return text[start : text.index(BLOCK_END, start)].strip("\n")


def test_every_module_sits_in_a_declared_folder():
    """Each module of the package lies inside a folder named in ``FLOORS`` (the package's own
    ``__init__`` aside): the folders are the floors, with no module left at the top."""
    for module in read_sources():
        if module != "rlsr":
            assert any(module.startswith(p + ".") or module == p for p in LAYERS if p != "rlsr"), (
                module
            )


def test_architecture_shows_the_declared_floors():
    """docs/architecture.md's floor block and table are the ones ``FLOORS`` renders (regenerate
    with ``python tests/test_layers.py --write-docs``)."""
    assert _architecture_block(ARCHITECTURE.read_text(encoding="utf-8")) == floors_markdown()


def test_the_layout_readme_and_architecture_name_exists():
    """Every ``rlsr/...`` file or folder README.md and docs/architecture.md name exists, so their
    layout cannot fall behind a move."""
    root = PACKAGE.parent
    for page in (root / "README.md", ARCHITECTURE):
        for name in re.findall(
            r"(?<![\w./-])rlsr/[\w/]*\w(?:\.py)?/?", page.read_text(encoding="utf-8")
        ):
            assert (root / name).exists(), f"{page.name} names {name}, which does not exist"


def write_docs() -> None:
    text = ARCHITECTURE.read_text(encoding="utf-8")
    start = text.index(BLOCK_START) + len(BLOCK_START)
    end = text.index(BLOCK_END, start)
    ARCHITECTURE.write_text(
        text[:start] + "\n" + floors_markdown() + "\n" + text[end:], encoding="utf-8"
    )


if __name__ == "__main__":
    if sys.argv[1:] != ["--write-docs"]:
        sys.exit("usage: python tests/test_layers.py --write-docs")
    write_docs()

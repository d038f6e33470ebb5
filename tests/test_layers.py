"""The package's import graph runs one way (docs/architecture.md): no cycles, no function-local imports of
rlsr modules, no import going up the layer table below. Reads source only (``ast``).

A new module must be placed in ``LAYERS``; a heavy optional third-party dependency (vllm,
matplotlib, deepspeed, liger) may still be imported inside a function, with a comment.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "rlsr"

# (module or package prefix, layer). A module takes the layer of its longest matching prefix;
# "rlsr" matches the package's own __init__ only. An import may go to the same or a lower layer.
LAYERS: dict[str, int] = {
    # 0 primitives
    "rlsr": 0,
    "rlsr.parsing": 0,
    "rlsr.ranking": 0,
    "rlsr.prompts": 0,
    "rlsr.tokenization": 0,
    "rlsr.metric_inputs": 0,
    "rlsr.launch": 0,
    "rlsr.plugins": 0,  # "package.module:name" imported safely (verifier and method plugins)
    "rlsr.checks": 0,  # ConfigError, check, is_int / is_number: every settings check's words
    # 1 equations
    "rlsr.rewards": 1,
    "rlsr.calibration": 1,
    "rlsr.thresholds": 1,
    "rlsr.utility": 1,
    "rlsr.metrics": 1,
    "rlsr.logprob": 1,
    "rlsr.verifiers": 1,
    # 2 data, config (rlsr.tiny_models: the shipped tiny models that config's `tiny` aliases name
    # and their hash check; their builders live outside the package, in tools/tiny/models.py)
    "rlsr.data": 2,
    "rlsr.tiny_models": 2,
    "rlsr.config": 2,
    "rlsr.config.heldout": 2,  # the held-out plan (heldout.*): resolve_heldout
    "rlsr.eval_protocol": 2,  # the evaluation protocol, declared once (EvalProtocol)
    "rlsr.pool": 2,  # one optimizer step's pool, its statistics and its observers
    "rlsr.pool_log": 2,  # the pool files: written by the trainer, read by rlsr report --pools
    # the run folder's names (file names, step- / checkpoint- folders, pool files, run.json), one
    # place for every writer and reader from the trainer and the pool files up to serving
    "rlsr.run_layout": 2,
    # 3 trainer and the method registry
    "rlsr.trainer": 3,
    "rlsr.weight_sync": 3,
    "rlsr.methods": 3,
    "rlsr.sft_trainer": 3,
    "rlsr.run_checkpoints": 3,  # the output layout and resume every trainer shares
    "rlsr.run_plan": 3,  # the launch's plan: settings + method + pool + held-out, made once
    # 4 run assembly, evaluation
    "rlsr.training": 4,
    "rlsr.evaluation": 4,
    "rlsr.generation": 4,  # backends + Sec. C.3 fallback steps, shared by evaluation and serving
    "rlsr.serving": 4,  # selective serving over the evaluator's rendering, parsing, fallbacks
    "rlsr.lm_eval": 4,  # rlsr's tasks as lm-evaluation-harness tasks (lm-eval imports them)
    # 5 command lines and applications
    "rlsr.cli": 5,
    "rlsr.data.cli": 5,
    # one module per command of rlsr evaluation (evaluate_setup: what evaluate's flags resolve to)
    "rlsr.evaluation.evaluate_cli": 5,
    "rlsr.evaluation.evaluate_setup": 5,
    "rlsr.evaluation.report_cli": 5,
    "rlsr.evaluation.deploy_cli": 5,
    "rlsr.evaluation.compare_cli": 5,
    "rlsr.serving.cli": 5,
    "rlsr.lm_eval.cli": 5,
    "rlsr.evaluation.from_samples_cli": 5,
}
# Inside the run assembly/evaluation floor the three packages are tied one way: generation <-
# evaluation <- serving (serving applies what evaluation certified; both generate through
# generation). (importer package, package it may not import)
ONE_WAY: tuple[tuple[str, str], ...] = (
    ("rlsr.generation", "rlsr.evaluation"),
    ("rlsr.generation", "rlsr.serving"),
    ("rlsr.evaluation", "rlsr.serving"),
)
LAYER_NAMES = (
    "primitives",
    "equations",
    "data/config",
    "trainer/methods",
    "run assembly/evaluation",
    "CLIs",
)


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
        f"{m}: not in the LAYERS table of tests/test_layers.py"
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
    assert "rlsr.trainer" in sources and "rlsr.verifiers.math" in sources
    assert problems(sources) == []


def test_every_declared_layer_prefix_names_a_module():
    sources = read_sources()
    for prefix in LAYERS:
        assert any(m == prefix or m.startswith(prefix + ".") for m in sources), prefix


def test_the_old_config_trainer_cycle_is_caught():
    """Reintroduce what the package had: config imports the trainer inside a function, the
    trainer imports config at top. All three rules must fire."""
    sources = read_sources()
    sources["rlsr.config"] += "\n\ndef _columns(m):\n    from rlsr.trainer import RLSRTrainer\n"
    sources["rlsr.trainer"] = "from rlsr.config import ConfigError\n" + sources["rlsr.trainer"]
    found = problems(sources)
    assert any("function-local import of rlsr.trainer" in p for p in found), found
    assert any("rlsr.config:" in p and "higher layer" in p for p in found), found
    assert any(p.startswith("import cycle:") and "rlsr.config" in p for p in found), found


def test_an_evaluation_import_of_serving_is_caught():
    """Reintroduce the two-way tie the package had: the deployment audit imports serving's
    policy while serving imports evaluation. The one-way rule must name the audit's import."""
    sources = read_sources()
    sources["rlsr.evaluation.audit"] = (
        "from rlsr.serving.policy import ServeSettings\n" + sources["rlsr.evaluation.audit"]
    )
    found = problems(sources)
    assert any(
        p.startswith("rlsr.evaluation.audit:1: imports rlsr.serving.policy;") for p in found
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

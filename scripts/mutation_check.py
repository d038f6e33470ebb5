#!/usr/bin/env python3
"""Mutation check: does the test suite notice when an equation is wrong?

    python scripts/mutation_check.py                         # the default modules, this tree
    python scripts/mutation_check.py --modules rlsr/core/ranking.py --limit 20
    python scripts/mutation_check.py --tree /path/to/old/checkout --out old.json

For each module it makes one mutant per mutable spot (an arithmetic operator swapped, a
comparison loosened or tightened, ``and``/``or`` swapped, a ``not`` or a unary minus dropped, a
number changed by one), writes it over the module in ``--tree`` and runs that module's
unit-test files (``DEFAULT_TESTS``; for another module, every test file of ``--tree`` that imports
it) from ``--tree``, so an older checkout is judged by its own tests. A mutant is *killed* when
those tests fail, *survives* when they pass, and *times out* when they run past ``--timeout``
(counted apart). The original file is restored after every mutant, also on Ctrl-C or a kill.
Run one check per tree at a time: a second one would mutate modules the first one's tests
import. Mutants are numbered by their place in the module, so two trees with the same module file
get the same mutants; a module that changed is matched by each site's key (``mutation_keys``).
``--compare A.json B.json``: every mutant A kills, does B kill?

Docstrings, ``__all__`` and ``if __name__ == "__main__"`` blocks are not mutated. Output:
``--out`` JSON with each mutant's id, line, operator and verdict; a summary per module on stdout.
A contributor who merges, moves or rewrites tests runs it on the old and the new tree and compares:
the new tests must kill at least what the old ones killed. Not part of the test suite (minutes).
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

# each equation module with the unit-test files that check it (seconds each, not the end-to-end
# runs that also import it); ``--modules`` outside this map use every test file that imports it
DEFAULT_TESTS = {
    "rlsr/equations/rewards.py": [
        "tests/test_rewards.py",
        "tests/test_methods.py",
        "tests/test_method_variants.py",
    ],
    "rlsr/core/ranking.py": ["tests/test_rewards.py", "tests/test_metrics.py"],
    "rlsr/metrics/selective.py": [
        "tests/test_metrics.py",
        "tests/test_metrics_calibration.py",
        "tests/test_metrics_thresholds.py",
        "tests/test_metrics_utility.py",
        "tests/test_metrics_reliability.py",
        "tests/test_evaluation_units.py",
    ],
    "rlsr/metrics/calibration.py": [
        "tests/test_metrics.py",
        "tests/test_metrics_calibration.py",
        "tests/test_metrics_reliability.py",
    ],
    "rlsr/metrics/thresholds.py": [
        "tests/test_metrics_thresholds.py",
        "tests/test_metrics_reliability.py",
        "tests/test_serving_units.py",
    ],
    "rlsr/metrics/utility.py": ["tests/test_metrics_utility.py"],
    "rlsr/evaluation/run/dcs.py": ["tests/test_evaluation_units.py"],
}

_BINOP = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div, ast.Div: ast.Mult}
_CMP = {
    ast.Lt: ast.LtE,
    ast.LtE: ast.Lt,
    ast.Gt: ast.GtE,
    ast.GtE: ast.Gt,
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
}
_BOOL = {ast.And: ast.Or, ast.Or: ast.And}


def _skipped(tree: ast.Module) -> set[int]:
    """ids of nodes never mutated: docstrings, ``__all__``, the ``__main__`` block."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            if isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
                skip.update(id(n) for n in ast.walk(body[0]))
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            skip.update(id(n) for n in ast.walk(node))
        if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test):
            skip.update(id(n) for n in ast.walk(node))
    return skip


def mutation_sites(source: str) -> list[tuple[int, str]]:
    """Every mutable spot of ``source`` in walk order: ``(line, operator description)``."""
    return [(line, what) for line, what, _ in _sites(ast.parse(source))]


def _sites(tree: ast.Module):
    skip = _skipped(tree)
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOP:
            new = _BINOP[type(node.op)]
            yield line, f"{type(node.op).__name__}->{new.__name__}", (node, "op", new())
        elif isinstance(node, ast.Compare):
            for i, op in enumerate(node.ops):
                if type(op) in _CMP:
                    new = _CMP[type(op)]
                    yield line, f"{type(op).__name__}->{new.__name__}", (node, ("ops", i), new())
        elif isinstance(node, ast.BoolOp):
            new = _BOOL[type(node.op)]
            yield line, f"{type(node.op).__name__}->{new.__name__}", (node, "op", new())
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.Not, ast.USub)):
            yield line, f"drop {type(node.op).__name__}", (node, "unwrap", None)
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, (int, float))
            and not isinstance(node.value, bool)
        ):
            yield line, f"{node.value!r}->{node.value + 1!r}", (node, "value", node.value + 1)


def mutation_keys(source: str) -> list[str]:
    """A name for each site that survives edits elsewhere in the module: the enclosing
    function, the whole expression the site sits in and the mutation, numbered when repeated.
    ``--compare`` matches mutants of two versions of a changed module by it."""
    tree = ast.parse(source)
    parent, scope = {}, {}
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            parent[id(child)] = node
            named = isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            scope[id(child)] = (
                f"{scope.get(id(node), '')}.{node.name}" if named else scope.get(id(node), "")
            )
    keys, seen = [], {}
    for _, what, (node, _, _) in _sites(tree):
        top = node
        while isinstance(parent.get(id(top)), ast.expr):
            top = parent[id(top)]
        key = f"{scope.get(id(node), '')}|{ast.unparse(top)}|{what}"
        seen[key] = seen.get(key, 0) + 1
        keys.append(f"{key}|{seen[key]}")
    return keys


def mutant_source(source: str, index: int) -> str:
    """``source`` with its ``index``-th mutation site (walk order) applied, unparsed."""
    tree = ast.parse(source)
    for i, (_, _, (node, field, new)) in enumerate(_sites(tree)):
        if i != index:
            continue
        if field == "unwrap":  # replace the UnaryOp by its operand in its parent
            for parent in ast.walk(tree):
                for name, value in ast.iter_fields(parent):
                    if value is node:
                        setattr(parent, name, node.operand)
                    elif isinstance(value, list) and any(v is node for v in value):
                        value[[v is node for v in value].index(True)] = node.operand
        elif isinstance(field, tuple):
            getattr(node, field[0])[field[1]] = new
        else:
            setattr(node, field, new)
        return ast.unparse(tree) + "\n"
    raise IndexError(f"no mutation site {index}")


def covering_tests(tree: Path, module: str) -> list[str]:
    """The test files of ``tree`` that import ``module`` (``rlsr/x/y.py`` -> ``rlsr.x.y`` or
    ``from rlsr.x import y``)."""
    dotted = module.removesuffix(".py").replace("/", ".")
    package, _, name = dotted.rpartition(".")
    pattern = re.compile(
        rf"(import {re.escape(dotted)}\b|from {re.escape(dotted)} import"
        rf"|from {re.escape(package)} import[^\n]*\b{re.escape(name)}\b)"
    )
    return sorted(
        str(path.relative_to(tree))
        for path in (tree / "tests").glob("test_*.py")
        if pattern.search(path.read_text())
    )


def run_tests(tree: Path, tests: list[str], python: str, timeout: float) -> str:
    """``killed`` (tests fail), ``survived`` (pass) or ``timeout``."""
    cmd = [python, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests]
    # no bytecode written: a mutant of the same size written within the same second as the
    # previous one would otherwise run from the previous one's stale .pyc
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    try:
        done = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return "timeout"
    return "survived" if done.returncode == 0 else "killed"


def check_module(tree, module, python, timeout, limit, seed, match=None):
    path = tree / module
    original = path.read_text()
    sites = mutation_sites(original)
    keys = mutation_keys(original)
    tests = DEFAULT_TESTS.get(module) or covering_tests(tree, module)
    chosen = list(range(len(sites)))
    if match is not None:  # the mutants another run made of this module: by id, else by key
        same_file = match["sites"] == len(sites)
        wanted = {m["id"] if same_file else m.get("key") for m in match["mutants"]}
        chosen = [i for i in chosen if (i if same_file else keys[i]) in wanted]
    elif limit and limit < len(chosen):
        chosen = sorted(random.Random(seed).sample(chosen, limit))
    print(f"{module}: {len(sites)} sites, tests {tests}", flush=True)
    results = []
    for stale in path.parent.glob(f"__pycache__/{path.stem}.*.pyc"):
        stale.unlink()
    try:
        path.write_text(ast.unparse(ast.parse(original)) + "\n")  # the unparsed original must pass
        baseline = run_tests(tree, tests, python, timeout * 3)
        if baseline != "survived":
            raise SystemExit(f"{module}: its tests fail without a mutant ({baseline}): {tests}")
        for index in chosen:
            path.write_text(mutant_source(original, index))
            start = time.monotonic()
            verdict = run_tests(tree, tests, python, timeout)
            line, what = sites[index]
            results.append(
                {
                    "id": index,
                    "key": keys[index],
                    "line": line,
                    "mutation": what,
                    "verdict": verdict,
                    "seconds": round(time.monotonic() - start, 1),
                }  # fmt: skip
            )
            print(f"  {module}:{line} #{index} {what}: {verdict}", flush=True)
    finally:
        path.write_text(original)
    return {"module": module, "sites": len(sites), "tests": tests, "mutants": results}


def summarize(report: list[dict]) -> str:
    lines = [
        "| module | sites | mutants run | killed | survived | timeout |",
        "|---|---|---|---|---|---|",
    ]
    for entry in report:
        verdicts = [m["verdict"] for m in entry["mutants"]]
        lines.append(
            f"| {entry['module']} | {entry['sites']} | {len(verdicts)} | "
            f"{verdicts.count('killed')} | {verdicts.count('survived')} | {verdicts.count('timeout')} |"
        )
    return "\n".join(lines)


def compare(before: Path, after: Path) -> int:
    """Print every mutant ``before`` killed that ``after`` did not; exit 1 if any."""
    old = {e["module"]: e for e in json.loads(before.read_text())}
    new = {e["module"]: e for e in json.loads(after.read_text())}
    lost = 0
    for module, entry in old.items():
        if module not in new:
            print(f"{module}: not checked in {after}")
            lost += 1
            continue
        # the same file gives the same numbering; a changed one is matched by each site's key
        field = "id" if entry["sites"] == new[module]["sites"] else "key"
        after_verdict = {m.get(field): m["verdict"] for m in new[module]["mutants"]}
        for m in entry["mutants"]:
            if m["verdict"] == "killed" and after_verdict.get(m.get(field)) != "killed":
                print(f"{module}:{m['line']} #{m['id']} {m['mutation']}: killed before, "
                      f"{after_verdict.get(m.get(field), 'not run')} after")  # fmt: skip
                lost += 1
    print(f"{lost} mutant(s) killed before and not after")
    return 1 if lost else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", type=Path, default=Path(__file__).resolve().parent.parent)
    parser.add_argument("--modules", nargs="+", default=list(DEFAULT_TESTS))
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per mutant")
    parser.add_argument("--limit", type=int, default=0, help="mutants per module (0: all)")
    parser.add_argument("--seed", type=int, default=0, help="which mutants --limit samples")
    parser.add_argument("--out", type=Path, default=Path("mutation.json"))
    parser.add_argument("--compare", nargs=2, type=Path, metavar=("BEFORE", "AFTER"))
    parser.add_argument(
        "--match",
        type=Path,
        metavar="BEFORE",
        help="run only the mutants BEFORE.json ran (same ids; keys where the module changed)",
    )
    args = parser.parse_args(argv)
    # a kill (SIGTERM) unwinds like Ctrl-C, so the module under mutation is restored
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    if args.compare:
        return compare(*args.compare)
    tree = args.tree.resolve()
    before = {e["module"]: e for e in json.loads(args.match.read_text())} if args.match else {}
    report = []
    for module in args.modules:
        if args.match and module not in before:
            continue
        report.append(
            check_module(
                tree, module, args.python, args.timeout, args.limit, args.seed, before.get(module)
            )  # fmt: skip
        )
        args.out.write_text(json.dumps(report, indent=1))  # what is done survives a stop
    print(summarize(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())

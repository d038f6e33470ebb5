"""Builders of HotPotQA-Modified and Big-Math Digits (rlsr.data.builders, scripts/build_*.py)
on synthetic rows in the upstream schemas (HotpotQA distractor; Big-Math-RL-Verified)."""

from __future__ import annotations

import os
import random
import runpy
import sys
from collections import Counter
from pathlib import Path

import datasets
import pytest

from rlsr.data.builders import (
    build_bigmath_digits,
    build_hotpot_modified,
    condition_stream,
    is_numeric_answer,
    keep_bigmath_row,
    remove_paragraphs,
)
from rlsr.data.formatting import count_hotpot_paragraphs
from rlsr.data.loading import load_examples

os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ["HF_HUB_OFFLINE"] = "1"
datasets.disable_progress_bars()
SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def distractor_rows(n: int, n_paragraphs: int = 10, seed: int = 0) -> list[dict]:
    """HotpotQA distractor-schema rows: 2 gold paragraphs among ``n_paragraphs``, shuffled."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        titles = [f"Gold{i}a", f"Gold{i}b"] + [f"Other{i}-{k}" for k in range(n_paragraphs - 2)]
        sentences = [[f"Text of {t} one.", f"Text of {t} two."] for t in titles]
        order = list(range(n_paragraphs))
        rng.shuffle(order)
        rows.append(
            {
                "id": f"q{i}",
                "question": f"Question {i}?",
                "answer": f"ans{i}",
                "type": "bridge",
                "level": "hard",
                "supporting_facts": {"title": [f"Gold{i}a", f"Gold{i}b"], "sent_id": [0, 1]},
                "context": {
                    "title": [titles[j] for j in order],
                    "sentences": [sentences[j] for j in order],
                },
            }
        )
    return rows


def present_titles(problem: str, titles: list[str]) -> set[str]:
    return {t for t in titles if f"Text of {t} one." in problem}


def test_hotpot_modified_even_split_eight_paragraphs_and_right_paragraphs_removed():
    rows = distractor_rows(31)
    ds, stats = build_hotpot_modified(rows, seed=3)
    assert stats == {"kept": 31, "skipped_paragraphs": 0, "skipped_length": 0}
    counts = Counter(ds["gold_removed"])
    assert sorted(counts) == [0, 1, 2] and max(counts.values()) - min(counts.values()) <= 1
    for row, src in zip(ds, rows, strict=True):
        problem = row["problem"]
        assert count_hotpot_paragraphs(problem) == 8
        gold = set(src["supporting_facts"]["title"])
        kept = present_titles(problem, src["context"]["title"])
        removed = set(src["context"]["title"]) - kept
        assert removed == set(row["removed_titles"]) and len(removed) == 2
        assert len(removed & gold) == row["gold_removed"]
        assert problem.startswith(f"Question: {src['question']} \n\n")
        assert row["answer"] == src["answer"] and row["source"] == "hotpot"
    # every prefix stays balanced (training often uses the first N rows)
    first = Counter(ds["gold_removed"][:9])
    assert set(first.values()) == {3}


def test_hotpot_modified_is_deterministic_by_seed():
    rows = distractor_rows(12)
    a, _ = build_hotpot_modified(rows, seed=7)
    b, _ = build_hotpot_modified(rows, seed=7)
    c, _ = build_hotpot_modified(rows, seed=8)
    assert a.to_list() == b.to_list()
    assert a["problem"] != c["problem"]


def test_hotpot_vanilla_removes_two_distractors_only():
    rows = distractor_rows(6)
    ds, _ = build_hotpot_modified(rows, seed=0, vanilla=True)
    assert ds["gold_removed"] == [0] * 6
    for row, src in zip(ds, rows, strict=True):
        kept = present_titles(row["problem"], src["context"]["title"])
        assert set(src["supporting_facts"]["title"]) <= kept and len(kept) == 8


def test_hotpot_builder_skips_rows_that_cannot_end_with_eight_and_long_ones():
    rows = distractor_rows(3) + distractor_rows(2, n_paragraphs=9, seed=1)
    ds, stats = build_hotpot_modified(rows, seed=0)
    assert stats["kept"] == 3 and stats["skipped_paragraphs"] == 2
    ds, stats = build_hotpot_modified(distractor_rows(4), seed=0, max_problem_chars=100)
    assert len(ds) == 0 and stats["skipped_length"] == 4
    ds, _ = build_hotpot_modified(distractor_rows(10), seed=0, n=4)
    assert ds["id"] == ["q0", "q1", "q2", "q3"]


def test_remove_paragraphs_and_condition_stream():
    rng = random.Random(0)
    titles = ["g1", "d1", "g2", "d2", "d3"]
    for k in (0, 1, 2):
        removed = remove_paragraphs(titles, ["g1", "g2"], k, rng)
        assert len(removed) == 2 and len(set(removed) & {"g1", "g2"}) == k
    with pytest.raises(ValueError, match="cannot remove 2 gold"):
        remove_paragraphs(["g1", "d1", "d2"], ["g1", "gX"], 2, rng)
    with pytest.raises(ValueError, match="0, 1 or 2"):
        remove_paragraphs(titles, ["g1"], 3, rng)
    stream = condition_stream(5)
    blocks = [sorted(next(stream) for _ in range(3)) for _ in range(4)]
    assert all(b == [0, 1, 2] for b in blocks)


def test_hotpot_script_end_to_end_through_loader(tmp_path):
    """scripts/build_hotpotqa_modified.py on a local distractor copy -> load_examples(path=...)."""
    source = tmp_path / "hotpot_distractor"
    datasets.DatasetDict(
        {
            "train": datasets.Dataset.from_list(distractor_rows(9, seed=1)),
            "validation": datasets.Dataset.from_list(distractor_rows(6, seed=2)),
        }
    ).save_to_disk(str(source))
    out = tmp_path / "hotpot_modified"
    argv = ["x", "--source", str(source), "--out", str(out), "--train-size", "6"]
    argv += ["--test-size", "3"]
    _run_script("build_hotpotqa_modified.py", argv)
    train = load_examples("hotpot_modified", path=out, split="train")
    test = load_examples("hotpot_modified", path=out)
    assert (len(train), len(test)) == (6, 3)
    assert sorted(train["gold_removed"]) == [0, 0, 1, 1, 2, 2]
    row = train[0]
    assert row["question"] == "Question 0?" and row["answers"] == ["ans0"]
    assert count_hotpot_paragraphs(row["prompt"][1]["content"]) == 8


def _run_script(name: str, argv: list[str]) -> None:
    old = sys.argv
    sys.argv = argv
    try:
        with pytest.raises(SystemExit) as done:
            runpy.run_path(str(SCRIPTS / name), run_name="__main__")
        assert done.value.code == 0
    finally:
        sys.argv = old


# --- Big-Math Digits ----------------------------------------------------------------------


def test_numeric_answer_and_solve_rate_filter():
    for ok in ("42", "-3.5", " 7 ", "1e3", "0.125"):
        assert is_numeric_answer(ok), ok
    for bad in ("1/2", "\\frac{1}{2}", "x+1", "text", "", None, "nan", "inf", "1" * 25):
        assert not is_numeric_answer(bad), bad
    row = {"answer": "12"}
    rates = {None: False, 0.0: False, 0.01: True, 0.7: True, 0.71: False, 1.0: False}
    for rate, keep in rates.items():
        assert keep_bigmath_row({**row, "llama8b_solve_rate": rate}) is keep, rate
    assert not keep_bigmath_row({"answer": "1/2", "llama8b_solve_rate": 0.5})


def bigmath_rows(n: int) -> datasets.Dataset:
    rng = random.Random(0)
    rows = []
    for i in range(n):
        answer = rng.choice([str(i), f"{i}.5", "\\frac{1}{3}", "x=2"])
        rate = rng.choice([None, 0.0, 0.25, 0.6875, 0.75, 1.0])
        rows.append(
            {
                "problem": f"Problem {i}",
                "answer": answer,
                "source": "synthetic",
                "domain": ["Mathematics"],
                "llama8b_solve_rate": rate,
            }
        )
    return datasets.Dataset.from_list(rows)


def test_build_bigmath_digits_filters_splits_disjoint_and_deterministic():
    rows = bigmath_rows(400)
    dd = build_bigmath_digits(rows, train_size=30, test_size=10, seed=1)
    assert (len(dd["train"]), len(dd["test"])) == (30, 10)
    assert not set(dd["train"]["problem"]) & set(dd["test"]["problem"])
    for split in dd.values():
        for r in split:
            assert keep_bigmath_row(r) and 0 < r["llama8b_solve_rate"] <= 0.7
    again = build_bigmath_digits(rows, train_size=30, test_size=10, seed=1)
    assert again["train"]["problem"] == dd["train"]["problem"]
    other = build_bigmath_digits(rows, train_size=30, test_size=10, seed=2)
    assert other["train"]["problem"] != dd["train"]["problem"]
    with pytest.raises(ValueError, match="rows pass the filter"):
        build_bigmath_digits(rows, train_size=10_000, test_size=10)


def test_bigmath_script_end_to_end_through_loader(tmp_path):
    source = tmp_path / "big_math.parquet"
    bigmath_rows(300).to_parquet(str(source))
    out = tmp_path / "bigmath_digits"
    argv = ["x", "--source", str(source), "--out", str(out), "--train-size", "20"]
    argv += ["--test-size", "5", "--seed", "3"]
    _run_script("build_bigmath_digits.py", argv)
    train = load_examples("bigmath_digits", path=out, split="train")
    test = load_examples("bigmath_digits", path=out)
    assert (len(train), len(test)) == (20, 5)
    assert all(is_numeric_answer(a) for a in train["answer"])
    assert train[0]["verifier"] == "math"

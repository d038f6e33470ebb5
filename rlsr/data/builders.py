"""Rebuild the two training sets from their public sources (paper Sec. C.4.1), by seed.

* HotPotQA-Modified from the HotpotQA distractor set (``hotpotqa/hotpot_qa``, config
  ``distractor``; 10 paragraphs per question, 2 of them gold): every question loses exactly two
  paragraphs so 8 remain — condition 0: two distractors; 1: one gold + one distractor; 2: both
  gold. Conditions are assigned evenly (a seeded permutation of 0, 1, 2 per three kept
  questions) rather than by independent draws, so the thirds differ by at most one question.
  ``vanilla=True`` gives the HotPotQA-vanilla evaluation set (condition 0 for all, Sec. C.5.1).
* Big-Math Digits from ``SynthLabsAI/Big-Math-RL-Verified``: keep numeric answers and
  ``0 < llama8b_solve_rate <= 0.7``, shuffle by seed, split train / test.

Differences to the RLCR creation scripts (``damanimehul/RLCR`` data/creation_scripts), kept
deliberately and documented in docs/datasets.md: RLCR draws each question's condition at random
without a seed and keeps solve rates < 0.75; we use the paper's stated rules.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import datasets

from rlsr.data.formatting import render_hotpot_problem
from rlsr.data.loading import _load_local

__all__ = [
    "condition_stream",
    "remove_paragraphs",
    "modify_hotpot_row",
    "build_hotpot_modified",
    "is_numeric_answer",
    "keep_bigmath_row",
    "build_bigmath_digits",
    "load_source",
]


def load_source(
    source: str, *, config: str | None = None, split: str = "train"
) -> datasets.Dataset:
    """A hub id (``owner/name``) or a local file / ``save_to_disk`` folder."""
    if Path(source).exists():
        return _load_local(Path(source), split)
    return datasets.load_dataset(source, config, split=split)


def condition_stream(seed: int, vanilla: bool = False):
    """Endless gold-removal conditions: a seeded permutation of (0, 1, 2) per block of three,
    so any prefix holds each condition ``k // 3`` or ``k // 3 + 1`` times. Vanilla: all 0."""
    rng = random.Random(seed)
    while True:
        yield from ((0,) if vanilla else rng.sample((0, 1, 2), 3))


def remove_paragraphs(
    titles: list[str], gold_titles: Iterable[str], n_gold_removed: int, rng: random.Random
) -> list[str]:
    """Titles to drop: ``n_gold_removed`` gold ones plus ``2 - n_gold_removed`` distractors."""
    if n_gold_removed not in (0, 1, 2):
        raise ValueError(f"n_gold_removed must be 0, 1 or 2, got {n_gold_removed}.")
    gold = sorted({t for t in gold_titles if t in titles})
    distractors = [t for t in dict.fromkeys(titles) if t not in gold]
    if len(gold) < n_gold_removed or len(distractors) < 2 - n_gold_removed:
        raise ValueError(
            f"cannot remove {n_gold_removed} gold + {2 - n_gold_removed} distractors from "
            f"{len(gold)} gold / {len(distractors)} distractor paragraphs."
        )
    return rng.sample(gold, n_gold_removed) + rng.sample(distractors, 2 - n_gold_removed)


def modify_hotpot_row(row: Mapping[str, Any], n_gold_removed: int, rng: random.Random) -> dict:
    """A distractor-schema row with two paragraphs dropped, in the published copies' schema."""
    titles = list(row["context"]["title"])
    removed = remove_paragraphs(titles, row["supporting_facts"]["title"], n_gold_removed, rng)
    problem = render_hotpot_problem(
        row["question"], titles, row["context"]["sentences"], removed_titles=removed
    )
    return {
        **dict(row),
        "problem": problem,
        "source": "hotpot",
        "gold_removed": n_gold_removed,
        "removed_titles": removed,
        "n_paragraphs": len(titles) - len(removed),
    }


def build_hotpot_modified(
    rows: datasets.Dataset | Iterable[Mapping[str, Any]],
    *,
    n: int | None = None,
    seed: int = 0,
    vanilla: bool = False,
    n_paragraphs: int = 8,
    max_problem_chars: int | None = 6000,
) -> tuple[datasets.Dataset, dict[str, int]]:
    """Modify the rows (see module docstring) and keep the first ``n`` valid ones.

    A row is skipped when it cannot end with exactly ``n_paragraphs`` paragraphs (HotpotQA has a
    few questions with fewer than 10) or its problem exceeds ``max_problem_chars`` (RLCR's length
    filter). Returns the dataset and counts ``{kept, skipped_paragraphs, skipped_length}``.
    """
    conditions = condition_stream(seed, vanilla)
    rng = random.Random(seed + 1)
    out, stats = [], {"kept": 0, "skipped_paragraphs": 0, "skipped_length": 0}
    condition = next(conditions)
    for row in rows:
        if n is not None and len(out) >= n:
            break
        try:
            new = modify_hotpot_row(row, condition, rng)
        except ValueError:
            stats["skipped_paragraphs"] += 1
            continue
        if new.pop("n_paragraphs") != n_paragraphs:
            stats["skipped_paragraphs"] += 1
            continue
        if max_problem_chars is not None and len(new["problem"]) >= max_problem_chars:
            stats["skipped_length"] += 1
            continue
        out.append(new)
        condition = next(conditions)  # a skipped row leaves its condition to the next one
    stats["kept"] = len(out)
    return datasets.Dataset.from_list(out), stats


def is_numeric_answer(answer: Any, max_chars: int = 20) -> bool:
    """True for a short answer that parses as a finite number ("42", "-3.5", "1e3")."""
    if answer is None:
        return False
    text = str(answer).strip()
    if not text or len(text) >= max_chars:
        return False
    try:
        return math.isfinite(float(text))
    except ValueError:
        return False


def keep_bigmath_row(row: Mapping[str, Any], low: float = 0.0, high: float = 0.7) -> bool:
    """Big-Math Digits filter: numeric answer and ``low < llama8b_solve_rate <= high``."""
    rate = row.get("llama8b_solve_rate")
    if rate is None:
        return False
    rate = float(rate)
    return low < rate <= high and is_numeric_answer(row.get("answer"))


def build_bigmath_digits(
    rows: datasets.Dataset,
    *,
    train_size: int = 15000,
    test_size: int = 1000,
    seed: int = 42,
    low: float = 0.0,
    high: float = 0.7,
) -> datasets.DatasetDict:
    """Filter, shuffle by ``seed`` and split into ``train`` / ``test`` (disjoint)."""
    kept = rows.filter(lambda r: keep_bigmath_row(r, low, high), desc="Big-Math Digits filter")
    if len(kept) < train_size + test_size:
        raise ValueError(
            f"only {len(kept)} rows pass the filter; asked for {train_size} train + {test_size} test."
        )
    kept = kept.shuffle(seed=seed).flatten_indices()
    return datasets.DatasetDict(
        {
            "train": kept.select(range(train_size)),
            "test": kept.select(range(train_size, train_size + test_size)),
        }
    )

"""Synthetic selective-prediction task shaped like HotPotQA-Modified (CPU toy reproduction).

Each prompt lists facts ``name=digit`` and asks for one name's digit. In about half of the
prompts the needed fact is absent, so the model can only guess (the gold answer is then a hidden
uniformly random digit: a guess is right 1 time in 10). A model that ranks its answers well is
confident when the fact is present and unconfident when it is missing.

Variants:

* ``easy``: present ``facts: c=6 ; q: c`` -> ``6``; missing ``facts: ; q: c`` -> hidden digit.
  Missing evidence is visible from the prompt's length alone.
* ``distractor``: every prompt holds one or two facts; distractors are facts about other names.
  Present ``facts: k=3 ; c=6 ; q: c`` or ``facts: c=6 ; q: c``; missing ``facts: d=3 ; q: c`` or
  ``facts: d=3 ; k=1 ; q: c``. Length does not reveal a missing fact: the model must match the
  queried name against the facts' names.
* ``tiers``: the fact is always present (``facts: c=6 ; q: c``), but each name has a fixed
  reliability tier ``TIER_OF_NAME`` in {1.0, 0.9, 0.8, 0.7, 0.6}: the gold digit is the stated
  one with that probability, otherwise a uniformly random *other* digit. Answering the stated
  digit is right with probability exactly the tier, which is on the confidence vocabulary's grid,
  so the calibrated confidence is the tier and it ranks the prompts perfectly. Every tier is
  above 1/2: the lifted-AURC reward's per-sample best response (``(2p - 1) * alpha``, increasing
  in the rank for p > 1/2) is then the top confidence for every prompt, which ties them
  (docs/results_toy.md, "A task where calibration and ranking disagree"). ``p_missing`` is ignored.
* ``tiers-wide``: ``tiers`` with the tiers ``WIDE_TIERS`` = {1.0, 0.8, 0.6, 0.4, 0.2}, which
  straddle 1/2: the released reward's best response is then two levels (top confidence for
  p > 1/2, bottom for p < 1/2), a proper reward's is the tier itself, and adjacent tiers differ
  by 0.2, so a Brier reward's signal between them is four times the ``tiers`` one.

Everything is a pure function of (variant, seed, split, index), so train and held-out sets are
reproducible and disjoint by construction (different seed streams per split).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "NAMES",
    "DIGITS",
    "VARIANTS",
    "ToyExample",
    "make_example",
    "make_split",
    "to_records",
    "write_jsonl",
    "oracle_correct_probability",
    "RELIABILITY_TIERS",
    "TIER_OF_NAME",
    "WIDE_TIERS",
    "VARIANT_TIERS",
    "tier_of_name",
    "write_dataset_folder",
]

# Single-letter names; "q" is the question marker, so it is not a name.
NAMES: tuple[str, ...] = tuple(c for c in "abcdefghijklmnoprstuvwxyz")
DIGITS: tuple[str, ...] = tuple(str(d) for d in range(10))
VARIANTS: tuple[str, ...] = ("easy", "distractor", "tiers", "tiers-wide")
RELIABILITY_TIERS: tuple[float, ...] = (1.0, 0.9, 0.8, 0.7, 0.6)
WIDE_TIERS: tuple[float, ...] = (1.0, 0.8, 0.6, 0.4, 0.2)
# The reliability tiers of each tier variant; a variant not listed has none.
VARIANT_TIERS: dict[str, tuple[float, ...]] = {"tiers": RELIABILITY_TIERS, "tiers-wide": WIDE_TIERS}


def tier_of_name(variant: str) -> dict[str, float]:
    """Each name's tier in ``variant``: names in order, tiers in turn (5 or 6 names per tier)."""
    tiers = VARIANT_TIERS[variant]
    return {name: tiers[i % len(tiers)] for i, name in enumerate(NAMES)}


TIER_OF_NAME: dict[str, float] = tier_of_name("tiers")
SPLITS: dict[str, int] = {"train": 0, "heldout": 1, "warmup": 2}
TOY_DATASET_NAME = "toy"


@dataclass(frozen=True)
class ToyExample:
    """One prompt: the user text, the gold digit, whether the needed fact is present, and the
    probability that answering optimally is right (the calibrated confidence)."""

    id: str
    question: str
    answer: str
    answerable: bool
    p_correct: float = 1.0


def _fact_text(facts: list[tuple[str, str]]) -> str:
    return " ; ".join(f"{name}={digit}" for name, digit in facts)


def make_example(
    rng: random.Random, variant: str, p_missing: float = 0.5, idx: str = "0"
) -> ToyExample:
    """Draw one example with ``rng``; ``p_missing`` is the probability that the fact is absent."""
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}; got {variant!r}.")
    if not 0.0 <= p_missing <= 1.0:
        raise ValueError(f"p_missing must be in [0, 1]; got {p_missing!r}.")
    names = rng.sample(NAMES, 3)
    target, others = names[0], names[1:]
    answer = rng.choice(DIGITS)
    if variant in VARIANT_TIERS:
        tier = tier_of_name(variant)[target]
        gold = answer if rng.random() < tier else rng.choice([d for d in DIGITS if d != answer])
        question = f"facts: {target}={answer} ; q: {target}"
        return ToyExample(id=idx, question=question, answer=gold, answerable=True, p_correct=tier)
    answerable = rng.random() >= p_missing
    if variant == "easy":
        facts = [(target, answer)] if answerable else []
    else:
        n_facts = rng.choice((1, 2))
        distractors = [(name, rng.choice(DIGITS)) for name in others]
        facts = ([(target, answer)] if answerable else []) + distractors
        facts = facts[:n_facts]
        rng.shuffle(facts)
    body = _fact_text(facts)
    question = f"facts: {body} ; q: {target}" if body else f"facts: ; q: {target}"
    p_correct = oracle_correct_probability(answerable)
    return ToyExample(idx, question, answer, answerable, p_correct)


def make_split(
    variant: str, split: str, n: int, seed: int = 0, p_missing: float = 0.5
) -> list[ToyExample]:
    """``n`` examples of ``split`` ("train", "heldout" or "warmup"), deterministic in (variant, seed, split).

    Held-out prompts are drawn from an independent stream; exact duplicates of training prompts
    can occur (the space is small) but their hidden digits are drawn independently.
    """
    if split not in SPLITS:
        raise ValueError(f"split must be one of {tuple(SPLITS)}; got {split!r}.")
    if n < 0:
        raise ValueError(f"n must be >= 0; got {n}.")
    rng = random.Random(f"rlsr-toy/{variant}/{seed}/{split}")
    return [
        make_example(rng, variant, p_missing, idx=f"{variant}-{split}-{seed}-{i}") for i in range(n)
    ]


def to_records(examples: list[ToyExample], system_prompt: str = "") -> list[dict]:
    """Rows in the ``rlsr.data.load_examples`` column contract (TRL conversational prompts)."""
    rows = []
    for ex in examples:
        prompt = [{"role": "user", "content": ex.question}]
        if system_prompt:
            prompt.insert(0, {"role": "system", "content": system_prompt})
        rows.append(
            {
                "id": ex.id,
                "prompt": prompt,
                "question": ex.question,
                "answer": ex.answer,
                "answers": [ex.answer],
                "verifier": "exact_match",
                "answerable": ex.answerable,
            }
        )
    return rows


def write_jsonl(examples: list[ToyExample], path: str | Path, system_prompt: str = "") -> Path:
    """Write ``to_records(examples)`` as JSON lines; returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as fh:
        for row in to_records(examples, system_prompt):
            fh.write(json.dumps(row) + "\n")
    return path


def oracle_correct_probability(answerable: bool) -> float:
    """Best achievable P(correct): 1 with the fact, 1/10 when guessing a hidden digit."""
    return 1.0 if answerable else 1.0 / len(DIGITS)


def write_dataset_folder(
    out_dir: str | Path,
    variant: str = "easy",
    seed: int = 0,
    n_train: int = 2000,
    n_heldout: int = 500,
    p_missing: float = 0.5,
) -> Path:
    """Write ``train.jsonl`` and ``test.jsonl`` (the held-out split) as raw rows ``{id, question,
    answer, answerable}``, the layout ``rlsr.data.load_examples("tiny", path=out_dir)`` reads
    (``train.py recipe=toy data.path=...``; ``rlsr evaluate --data-path tiny=...``)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for split, file_split, n in (("train", "train", n_train), ("heldout", "test", n_heldout)):
        rows = [
            {"id": ex.id, "question": ex.question, "answer": ex.answer, "answerable": ex.answerable}
            for ex in make_split(variant, split, n, seed, p_missing)
        ]
        (out / f"{file_split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return out

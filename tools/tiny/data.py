"""The bundled ``tiny`` and ``tiny-missing`` datasets: synthetic fact-lookup QA, deterministic
by seed.

``tiny``: each question lists three short facts ("the kettle is red") and asks for one of them,
so the answer is a single word in the prompt and exact match verifies it (the trainer tests).

``tiny-missing`` (recipe=tiny): questions about one object; in half of them (``listed``) the
prompt states its color, in the other half the facts are ``none``: the color is drawn at random
and known to no one, so a model can only guess it (right 1 time in 8). Whether an answer can be
right is visible from the prompt, which is what a confidence that ranks must learn to read (as
the CPU toy's ``easy`` variant, docs/toy.md). Its three splits share no prompt: a listed
question states one of the (object, color) facts of its split (``MISSING_SPLIT_FACTS``, the 160
pairs dealt 96 / 32 / 32), and a missing one asks about an object of its split
(``MISSING_SPLIT_OBJECTS``, 10 / 5 / 5 objects), so the held-out splits test new facts (listed)
and "Facts: none." for objects that training never asks "none" about (missing), not a per-prompt
memory. (A held-out missing question's object may appear in training's listed facts, and every
object appears in ``tiny``, the 3-fact data the base ``tiny-format-warm`` was tuned on.)
validation chooses thresholds (``rlsr deploy``) and gates the shipped warm model; test is the
held-out evaluation.

``tiny-candidates`` (recipe=tiny-candidates): a task on which a proper calibration reward and the
released lifted-AURC reward want different confidences (docs/training.md,
"recipe=tiny-candidates"). Each question lists k candidate colors for the asked object, k in
1 / 2 / 4 (``Facts: the ball is red or blue. What color is the ball?``), or none (``Facts:
none.``), a quarter of each split per tier. The first-named candidate is the answer in exactly
``CANDIDATE_TIERS[k]`` of the tier's questions of a split (1, 0.7, 0.3), otherwise one of the
other listed candidates, uniformly; so it is always the likeliest candidate, and a model that
answers it is right with probability 1 / 0.7 / 0.3 by the number of candidates, which it can
read from the prompt but not learn from the prompt's words (a convention of this data: "the
first named is the likeliest"). "none" is ``tiny-missing``'s missing question (a guess, right
1 time in 8). The splits use ``tiny-missing``'s facts and objects (``MISSING_SPLIT_FACTS``:
the first candidate and the object; ``MISSING_SPLIT_OBJECTS``), so no held-out prompt is a
training prompt: held-out questions name (object, first candidate) pairs training never names,
and held-out "none" questions ask about objects training never asks "none" about.

Regenerate the bundled files with

    python -m tools.tiny.data --out rlsr/data/fixtures/tiny
    python -m tools.tiny.data --missing --out rlsr/data/fixtures/tiny-missing
    python -m tools.tiny.data --candidates --out rlsr/data/fixtures/tiny-candidates
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

__all__ = [
    "OBJECTS",
    "COLORS",
    "generate_tiny",
    "generate_tiny_missing",
    "write_tiny",
    "TINY_SEED",
    "TINY_SIZES",
    "TINY_MISSING_SEED",
    "TINY_MISSING_SIZES",
    "MISSING_SPLIT_OBJECTS",
    "MISSING_SPLIT_FACTS",
    "generate_tiny_candidates",
    "candidates_tier",
    "tier_name",
    "CANDIDATE_TIERS",
    "CANDIDATES_NONE_TIER",
    "TINY_CANDIDATES_SEED",
    "TINY_CANDIDATES_SIZES",
]

OBJECTS = (
    "kettle", "lamp", "door", "chair", "book", "cup", "kite", "boat", "shoe", "coat",
    "ball", "clock", "vase", "desk", "hat", "bag", "bell", "box", "car", "fan",
)  # fmt: skip
COLORS = ("red", "blue", "green", "yellow", "black", "white", "pink", "gray")
TINY_SEED = 1234
TINY_SIZES = {"train": 200, "test": 50}
TINY_MISSING_SEED = 4321
TINY_MISSING_SIZES = {"train": 200, "validation": 100, "test": 100}
# The objects each tiny-missing split asks "none" questions about, and the (object, color) facts
# its listed questions state: disjoint across splits, so no held-out prompt appears in train.
# Objects: every 4th goes to validation, the next to test. Facts: all 160 pairs, shuffled once
# (seed TINY_MISSING_SEED), dealt 96 / 32 / 32. (Dealing listed questions by object too left the
# look-up of the warm model at 48 % on the new objects: it forgot to copy colors it was not
# fine-tuned on; by fact it copies new pairs of objects it was fine-tuned on.)
MISSING_SPLIT_OBJECTS = {
    "train": tuple(o for i, o in enumerate(OBJECTS) if i % 4 in (0, 1)),
    "validation": tuple(o for i, o in enumerate(OBJECTS) if i % 4 == 2),
    "test": tuple(o for i, o in enumerate(OBJECTS) if i % 4 == 3),
}
_FACTS = [(o, c) for o in OBJECTS for c in COLORS]
random.Random(TINY_MISSING_SEED).shuffle(_FACTS)
MISSING_SPLIT_FACTS = {
    "train": tuple(_FACTS[:96]),
    "validation": tuple(_FACTS[96:128]),
    "test": tuple(_FACTS[128:]),
}
del _FACTS

# tiny-candidates: the number of candidates listed -> the share of the tier's questions (per split,
# exactly) whose answer is the first-named candidate (otherwise another listed one, uniformly).
# The fourth tier, "none", lists nothing (a guess: 1 in 8 when the guess is fixed per object).
# 1 and 0.7 lie above the lifted-AURC reward's threshold 1/2, 0.3 and 1/8 below, and each is on
# (or nearest to a distinct point of) the 0.1 / 0.3 / 0.5 / 0.7 / 0.9 confidence grid of the
# shipped models: calibration reports 0.9 / 0.7 / 0.3 / 0.1, the released reward's
# per-completion best response is 0.9 / 0.9 / 0.1 / 0.1.
CANDIDATE_TIERS = {1: 1.0, 2: 0.7, 4: 0.3}
CANDIDATES_NONE_TIER = "none"
TINY_CANDIDATES_SEED = 5678
# 20 questions per tier in validation and test, 50 in train: 0.7 and 0.3 of each are whole.
TINY_CANDIDATES_SIZES = {"train": 200, "validation": 80, "test": 80}


def generate_tiny(
    n: int, *, seed: int = TINY_SEED, n_facts: int = 3, id_prefix: str = "tiny"
) -> list[dict]:
    """``n`` rows ``{id, question, answer}``; the same ``seed`` gives the same rows."""
    if n < 0 or n_facts < 1 or n_facts > len(OBJECTS):
        raise ValueError(f"need n >= 0 and 1 <= n_facts <= {len(OBJECTS)}; got {n}, {n_facts}.")
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        objects = rng.sample(OBJECTS, n_facts)
        colors = [rng.choice(COLORS) for _ in objects]
        target = rng.randrange(n_facts)
        facts = "; ".join(f"the {o} is {c}" for o, c in zip(objects, colors, strict=True))
        question = f"Facts: {facts}. What color is the {objects[target]}?"
        rows.append({"id": f"{id_prefix}-{i}", "question": question, "answer": colors[target]})
    return rows


def generate_tiny_missing(
    n: int,
    *,
    seed: int = TINY_MISSING_SEED,
    id_prefix: str = "tiny-missing",
    objects: tuple[str, ...] = OBJECTS,
    facts: tuple[tuple[str, str], ...] | None = None,
) -> list[dict]:
    """``n`` rows ``{id, question, answer, listed}``, ``listed`` true for exactly ``n // 2`` of
    them (in random order). Listed: ``Facts: the kettle is red. What color is the kettle?``, a
    fact drawn from ``facts`` (default: every (object, color) pair), answer its color. Missing:
    ``Facts: none. What color is the kettle?``, an object drawn from ``objects``, answer a color
    drawn uniformly from ``COLORS`` that the prompt does not show. The same ``seed`` gives the
    same rows."""
    facts = tuple((o, c) for o in OBJECTS for c in COLORS) if facts is None else facts
    if n < 0 or not objects or not facts:
        raise ValueError(f"need n >= 0 and some objects and facts; got {n}, {objects}, {facts}.")
    rng = random.Random(seed)
    listed = [True] * (n // 2) + [False] * (n - n // 2)
    rng.shuffle(listed)
    rows = []
    for i, found in enumerate(listed):
        if found:
            obj, color = rng.choice(facts)
        else:
            obj, color = rng.choice(objects), rng.choice(COLORS)
        stated = f"the {obj} is {color}" if found else "none"
        question = f"Facts: {stated}. What color is the {obj}?"
        rows.append(
            {"id": f"{id_prefix}-{i}", "question": question, "answer": color, "listed": found}
        )
    return rows


def tier_name(k: int | str) -> str:
    """A tier's name in tables: ``k=1``, ``k=2``, ``k=4``, or ``none``."""
    return k if k == CANDIDATES_NONE_TIER else f"k={k}"


def candidates_tier(question: str) -> str:
    """The tier of a ``tiny-candidates`` question: ``k=N`` for N listed candidates, or ``none``.
    Raises ``ValueError`` for a question of another shape."""
    if question.startswith("Facts: none. What color is the "):
        return CANDIDATES_NONE_TIER
    facts, _, rest = question.partition(". What color is the ")
    if facts.startswith("Facts: the ") and rest.endswith("?"):
        k = facts.count(" or ") + 1
        if k in CANDIDATE_TIERS:
            return tier_name(k)
    raise ValueError(f"not a tiny-candidates question: {question!r}")


def generate_tiny_candidates(
    n: int,
    *,
    seed: int = TINY_CANDIDATES_SEED,
    id_prefix: str = "tiny-candidates",
    objects: tuple[str, ...] = OBJECTS,
    facts: tuple[tuple[str, str], ...] | None = None,
) -> list[dict]:
    """``n`` rows ``{id, question, answer, tier, candidates}`` (in random order), ``n / 4`` per
    tier.

    Tier ``k=N`` (N in ``CANDIDATE_TIERS``): ``Facts: the kettle is red or blue. What color is
    the kettle?``, the object and first candidate a fact drawn from ``facts`` (default: every
    (object, color) pair), the other N - 1 candidates distinct colors drawn from the rest; the
    answer is the first candidate in exactly ``CANDIDATE_TIERS[N] * n / 4`` of the tier's rows
    (which ones: drawn), otherwise one of the other candidates, uniformly. Tier ``none``:
    ``Facts: none. What color is the kettle?``, an object drawn from ``objects``, the answer drawn
    uniformly from ``COLORS``, ``candidates`` empty. ``n / 4`` and every
    ``CANDIDATE_TIERS[N] * n / 4`` must be whole (``ValueError`` otherwise). The same ``seed``
    gives the same rows."""
    facts = tuple((o, c) for o in OBJECTS for c in COLORS) if facts is None else facts
    per_tier = n // 4
    exact = [q * per_tier for q in CANDIDATE_TIERS.values()]
    if n < 0 or n % 4 or any(abs(x - round(x)) > 1e-9 for x in exact) or not objects or not facts:
        raise ValueError(
            f"need n a multiple of 4 with {list(CANDIDATE_TIERS.values())} x n/4 whole, and some "
            f"objects and facts; got n={n}."
        )
    rng = random.Random(seed)
    rows = []
    for k, share in CANDIDATE_TIERS.items():
        first_right = round(share * per_tier)
        right = [True] * first_right + [False] * (per_tier - first_right)
        rng.shuffle(right)
        for is_first in right:
            obj, first = rng.choice(facts)
            listed = [first, *rng.sample([c for c in COLORS if c != first], k - 1)]
            answer = first if is_first else rng.choice(listed[1:])
            question = f"Facts: the {obj} is {' or '.join(listed)}. What color is the {obj}?"
            rows.append(
                {"question": question, "answer": answer, "tier": tier_name(k),
                 "candidates": listed}
            )  # fmt: skip
    for _ in range(per_tier):
        obj = rng.choice(objects)
        rows.append(
            {"question": f"Facts: none. What color is the {obj}?", "answer": rng.choice(COLORS),
             "tier": CANDIDATES_NONE_TIER, "candidates": []}
        )  # fmt: skip
    rng.shuffle(rows)
    return [{"id": f"{id_prefix}-{i}", **row} for i, row in enumerate(rows)]


_KINDS = {
    "tiny": (generate_tiny, TINY_SIZES, TINY_SEED),
    "tiny-missing": (generate_tiny_missing, TINY_MISSING_SIZES, TINY_MISSING_SEED),
    "tiny-candidates": (generate_tiny_candidates, TINY_CANDIDATES_SIZES, TINY_CANDIDATES_SEED),
}


def write_tiny(
    out_dir: str | Path, *, seed: int | None = None, missing: bool = False, candidates: bool = False
) -> dict[str, Path]:
    """Write ``train.jsonl`` and ``test.jsonl`` of ``tiny`` (sizes ``TINY_SIZES``), or the
    train / validation / test files of ``tiny-missing`` when ``missing``
    (``TINY_MISSING_SIZES``) or of ``tiny-candidates`` when ``candidates`` (``TINY_CANDIDATES_SIZES``), each
    split of those two on its ``MISSING_SPLIT_OBJECTS`` and ``MISSING_SPLIT_FACTS``, into
    ``out_dir``."""
    if missing and candidates:
        raise ValueError("choose one of missing and candidates.")
    prefix = "tiny-missing" if missing else "tiny-candidates" if candidates else "tiny"
    generate, sizes, default_seed = _KINDS[prefix]
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if seed is None:
        seed = default_seed
    paths = {}
    for offset, (split, n) in enumerate(sizes.items()):
        extra = (
            {"objects": MISSING_SPLIT_OBJECTS[split], "facts": MISSING_SPLIT_FACTS[split]}
            if missing or candidates
            else {}
        )
        rows = generate(n, seed=seed + offset, id_prefix=f"{prefix}-{split}", **extra)
        path = out / f"{split}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        paths[split] = path
    return paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument("--seed", type=int, default=None, help="default: the bundled files' seed")
    kind = parser.add_mutually_exclusive_group()
    kind.add_argument("--missing", action="store_true", help="tiny-missing instead of tiny")
    kind.add_argument("--candidates", action="store_true", help="tiny-candidates instead of tiny")
    args = parser.parse_args(argv)
    written = write_tiny(args.out, seed=args.seed, missing=args.missing, candidates=args.candidates)
    for split, path in written.items():
        print(f"{split}: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
